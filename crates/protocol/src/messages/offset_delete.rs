//! OffsetDelete (key 47).
use crate::message;

message! {
    pub struct OffsetDeleteRequestPartition {
        partition_index: i32 => [0, 99],
    }
}

message! {
    pub struct OffsetDeleteRequestTopic {
        name: String => [0, 99],
        partitions: Vec<OffsetDeleteRequestPartition> => [0, 99],
    }
}

message! {
    pub struct OffsetDeleteRequest {
        group_id: String => [0, 99],
        topics: Vec<OffsetDeleteRequestTopic> => [0, 99],
    }
}

message! {
    pub struct OffsetDeleteResponsePartition {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
    }
}

message! {
    pub struct OffsetDeleteResponseTopic {
        name: String => [0, 99],
        partitions: Vec<OffsetDeleteResponsePartition> => [0, 99],
    }
}

message! {
    pub struct OffsetDeleteResponse {
        error_code: i16 => [0, 99],
        throttle_time_ms: i32 => [0, 99],
        topics: Vec<OffsetDeleteResponseTopic> => [0, 99],
    }
}
