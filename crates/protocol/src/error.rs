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
/// The replica is not on this broker (yet).
pub const REPLICA_NOT_AVAILABLE: ErrorCode = 9;
pub const MESSAGE_TOO_LARGE: ErrorCode = 10;
pub const INVALID_TOPIC_EXCEPTION: ErrorCode = 17;
pub const RECORD_LIST_TOO_LARGE: ErrorCode = 18;
pub const NOT_ENOUGH_REPLICAS: ErrorCode = 19;
pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode = 20;
pub const INVALID_REQUIRED_ACKS: ErrorCode = 21;
pub const INVALID_TIMESTAMP: ErrorCode = 32;
pub const UNSUPPORTED_VERSION: ErrorCode = 35;
pub const TOPIC_ALREADY_EXISTS: ErrorCode = 36;
pub const INVALID_PARTITIONS: ErrorCode = 37;
pub const INVALID_REPLICATION_FACTOR: ErrorCode = 38;
pub const INVALID_REPLICA_ASSIGNMENT: ErrorCode = 39;
pub const INVALID_CONFIG: ErrorCode = 40;
/// The request went to a node that is not the active controller.
pub const NOT_CONTROLLER: ErrorCode = 41;
pub const INVALID_REQUEST: ErrorCode = 42;
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: ErrorCode = 43;
pub const POLICY_VIOLATION: ErrorCode = 44;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode = 45;
pub const DUPLICATE_SEQUENCE_NUMBER: ErrorCode = 46;
pub const INVALID_PRODUCER_EPOCH: ErrorCode = 47;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode = 53;
pub const SECURITY_DISABLED: ErrorCode = 54;
/// AlterPartition: the controller did not try the change (another in the
/// same request failed first); nothing was applied.
pub const OPERATION_NOT_ATTEMPTED: ErrorCode = 55;
pub const KAFKA_STORAGE_ERROR: ErrorCode = 56;
/// AlterReplicaLogDirs: the broker has no log directory at that path.
pub const LOG_DIR_NOT_FOUND: ErrorCode = 57;
pub const FENCED_LEADER_EPOCH: ErrorCode = 74;
/// A broker heartbeat or request named a registration that is not current.
pub const STALE_BROKER_EPOCH: ErrorCode = 77;
pub const UNKNOWN_LEADER_EPOCH: ErrorCode = 75;
/// A zstd batch in a request or response version that predates zstd.
pub const UNSUPPORTED_COMPRESSION_TYPE: ErrorCode = 76;
/// ElectLeaders: the preferred replica cannot lead (outside the ISR or
/// fenced).
pub const PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode = 80;
/// ElectLeaders (unclean): no replica of the partition can lead.
pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorCode = 83;
/// ElectLeaders: the partition already has the leader the election would
/// give it.
pub const ELECTION_NOT_NEEDED: ErrorCode = 84;
/// ListPartitionReassignments' and a cancel's answer for a partition with
/// no reassignment in progress.
pub const NO_REASSIGNMENT_IN_PROGRESS: ErrorCode = 85;
/// AlterPartition: the partition epoch named is not the current one.
pub const INVALID_UPDATE_VERSION: ErrorCode = 95;
/// AlterPartition: a member of the new ISR may not be in it (fenced or
/// not registered).
pub const INELIGIBLE_REPLICA: ErrorCode = 107;
pub const INVALID_RECORD: ErrorCode = 87;
pub const UNKNOWN_TOPIC_ID: ErrorCode = 100;
pub const PRODUCER_FENCED: ErrorCode = 90;
/// A named resource (a user's SCRAM credential) does not exist.
pub const RESOURCE_NOT_FOUND: ErrorCode = 91;
/// A request names one resource twice where it may not.
pub const DUPLICATE_RESOURCE: ErrorCode = 92;
pub const DUPLICATE_BROKER_REGISTRATION: ErrorCode = 101;
/// UnregisterBroker named a broker id with no registration.
pub const BROKER_ID_NOT_REGISTERED: ErrorCode = 102;
pub const INCONSISTENT_TOPIC_ID: ErrorCode = 103;
/// A node of another cluster tried to join.
pub const INCONSISTENT_CLUSTER_ID: ErrorCode = 104;
/// AddRaftVoter: the node is a voter already (KIP-853).
pub const DUPLICATE_VOTER: ErrorCode = 126;
/// RemoveRaftVoter: the node is not a voter (KIP-853).
pub const VOTER_NOT_FOUND: ErrorCode = 127;
/// DescribeCluster asked a listener for the other kind of endpoint
/// (brokers of a controller, or controllers of a broker; KIP-919).
pub const MISMATCHED_ENDPOINT_TYPE: ErrorCode = 114;
/// DescribeCluster named an endpoint type that does not exist.
pub const UNSUPPORTED_ENDPOINT_TYPE: ErrorCode = 115;
/// The client should rebootstrap: it reached a node or cluster other than
/// the one it meant (ApiVersions v5, Metadata v13).
pub const REBOOTSTRAP_REQUIRED: ErrorCode = 129;
/// A regular expression in the request does not compile (KIP-1152).
pub const INVALID_REGULAR_EXPRESSION: ErrorCode = 128;
pub const OFFSET_METADATA_TOO_LARGE: ErrorCode = 12;
pub const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode = 14;
pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = 15;
pub const NOT_COORDINATOR: ErrorCode = 16;
pub const ILLEGAL_GENERATION: ErrorCode = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: ErrorCode = 23;
pub const INVALID_GROUP_ID: ErrorCode = 24;
pub const UNKNOWN_MEMBER_ID: ErrorCode = 25;
pub const INVALID_SESSION_TIMEOUT: ErrorCode = 26;
pub const REBALANCE_IN_PROGRESS: ErrorCode = 27;
pub const INVALID_COMMIT_OFFSET_SIZE: ErrorCode = 28;
pub const NON_EMPTY_GROUP: ErrorCode = 68;
pub const GROUP_ID_NOT_FOUND: ErrorCode = 69;
pub const FETCH_SESSION_ID_NOT_FOUND: ErrorCode = 70;
pub const INVALID_FETCH_SESSION_EPOCH: ErrorCode = 71;
pub const MEMBER_ID_REQUIRED: ErrorCode = 79;
pub const GROUP_MAX_SIZE_REACHED: ErrorCode = 81;
pub const FENCED_INSTANCE_ID: ErrorCode = 82;
pub const GROUP_SUBSCRIBED_TO_TOPIC: ErrorCode = 86;
