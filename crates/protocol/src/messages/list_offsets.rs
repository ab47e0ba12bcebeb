//! ListOffsets (key 2), v1 to v10 (v10 adds `timeout_ms`, KIP-1075).
use crate::message;

/// Special timestamps a ListOffsets partition may ask for.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
/// The first offset still on local disk (v8+, KIP-405).
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// The last offset copied to tiered storage (v9+, KIP-1005).
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

message! {
    pub struct ListOffsetsPartition {
        partition_index: i32 => [0, 99],
        current_leader_epoch: i32 = -1 => [4, 99],
        timestamp: i64 => [0, 99],
        max_num_offsets: i32 = 1 => [0, 0],
    }
}

message! {
    pub struct ListOffsetsTopic {
        name: String => [0, 99],
        partitions: Vec<ListOffsetsPartition> => [0, 99],
    }
}

message! {
    pub struct ListOffsetsRequest {
        replica_id: i32 => [0, 99],
        isolation_level: i8 => [2, 99],
        topics: Vec<ListOffsetsTopic> => [0, 99],
        timeout_ms: i32 => [10, 99],
    }
}

message! {
    pub struct ListOffsetsPartitionResponse {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        old_style_offsets: Vec<i64> => [0, 0],
        timestamp: i64 = -1 => [1, 99],
        offset: i64 = -1 => [1, 99],
        leader_epoch: i32 = -1 => [4, 99],
    }
}

message! {
    pub struct ListOffsetsTopicResponse {
        name: String => [0, 99],
        partitions: Vec<ListOffsetsPartitionResponse> => [0, 99],
    }
}

message! {
    pub struct ListOffsetsResponse {
        throttle_time_ms: i32 => [2, 99],
        topics: Vec<ListOffsetsTopicResponse> => [0, 99],
    }
}
