//! CreatePartitions (key 37).
use crate::message;

message! {
    pub struct CreatePartitionsAssignment {
        broker_ids: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct CreatePartitionsTopic {
        name: String => [0, 99],
        count: i32 => [0, 99],
        // Null lets the broker place the new partitions.
        assignments: Option<Vec<CreatePartitionsAssignment>> => [0, 99],
    }
}

message! {
    pub struct CreatePartitionsRequest {
        topics: Vec<CreatePartitionsTopic> => [0, 99],
        timeout_ms: i32 => [0, 99],
        validate_only: bool => [0, 99],
    }
}

message! {
    pub struct CreatePartitionsTopicResult {
        name: String => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}

message! {
    pub struct CreatePartitionsResponse {
        throttle_time_ms: i32 => [0, 99],
        results: Vec<CreatePartitionsTopicResult> => [0, 99],
    }
}
