//! DescribeProducers (key 61): the idempotent (and, later, transactional)
//! producers a partition knows (kafka-transactions.sh describe-producers,
//! AdminClient describeProducers).
use crate::message;

message! {
    pub struct DescribeProducersTopicRequest {
        name: String => [0, 99],
        partition_indexes: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct DescribeProducersRequest {
        topics: Vec<DescribeProducersTopicRequest> => [0, 99],
    }
}

message! {
    pub struct ProducerState {
        producer_id: i64 => [0, 99],
        producer_epoch: i32 => [0, 99],
        last_sequence: i32 = -1 => [0, 99],
        last_timestamp: i64 = -1 => [0, 99],
        coordinator_epoch: i32 => [0, 99],
        current_txn_start_offset: i64 = -1 => [0, 99],
    }
}

message! {
    pub struct DescribeProducersPartitionResponse {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        active_producers: Vec<ProducerState> => [0, 99],
    }
}

message! {
    pub struct DescribeProducersTopicResponse {
        name: String => [0, 99],
        partitions: Vec<DescribeProducersPartitionResponse> => [0, 99],
    }
}

message! {
    pub struct DescribeProducersResponse {
        throttle_time_ms: i32 => [0, 99],
        topics: Vec<DescribeProducersTopicResponse> => [0, 99],
    }
}
