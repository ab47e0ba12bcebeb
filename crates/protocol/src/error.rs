//! Kafka's error codes, by the names Kafka gives them.

pub type ErrorCode = i16;

pub const NONE: ErrorCode = 0;
pub const UNKNOWN_SERVER_ERROR: ErrorCode = -1;
pub const OFFSET_OUT_OF_RANGE: ErrorCode = 1;
pub const CORRUPT_MESSAGE: ErrorCode = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = 3;
pub const INVALID_FETCH_SIZE: ErrorCode = 4;
pub const LEADER_NOT_AVAILABLE: ErrorCode = 5;
pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = 6;
pub const REQUEST_TIMED_OUT: ErrorCode = 7;
pub const MESSAGE_TOO_LARGE: ErrorCode = 10;
pub const INVALID_TOPIC_EXCEPTION: ErrorCode = 17;
pub const RECORD_LIST_TOO_LARGE: ErrorCode = 18;
pub const NOT_ENOUGH_REPLICAS: ErrorCode = 19;
pub const INVALID_REQUIRED_ACKS: ErrorCode = 21;
pub const INVALID_TIMESTAMP: ErrorCode = 32;
pub const UNSUPPORTED_VERSION: ErrorCode = 35;
pub const TOPIC_ALREADY_EXISTS: ErrorCode = 36;
pub const INVALID_PARTITIONS: ErrorCode = 37;
pub const INVALID_REPLICATION_FACTOR: ErrorCode = 38;
pub const INVALID_REPLICA_ASSIGNMENT: ErrorCode = 39;
pub const INVALID_CONFIG: ErrorCode = 40;
pub const INVALID_REQUEST: ErrorCode = 42;
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: ErrorCode = 43;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode = 45;
pub const DUPLICATE_SEQUENCE_NUMBER: ErrorCode = 46;
pub const INVALID_PRODUCER_EPOCH: ErrorCode = 47;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode = 53;
pub const KAFKA_STORAGE_ERROR: ErrorCode = 56;
pub const FENCED_LEADER_EPOCH: ErrorCode = 74;
pub const UNKNOWN_LEADER_EPOCH: ErrorCode = 75;
pub const INVALID_RECORD: ErrorCode = 87;
pub const UNKNOWN_TOPIC_ID: ErrorCode = 100;
pub const PRODUCER_FENCED: ErrorCode = 90;
pub const INCONSISTENT_TOPIC_ID: ErrorCode = 103;
