//! ListOffsets (key 2). v8, v9 and v11 only add special timestamps and
//! v10 a timeout for reads from tiered storage.
use crate::message;

/// Special timestamps a ListOffsets partition may ask for.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
/// v8 (KIP-405): the first offset still in local storage.
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// v9 (KIP-1005): the highest offset copied to tiered storage.
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;
/// v11 (KIP-1023): the first offset not yet copied to tiered storage.
pub const EARLIEST_PENDING_UPLOAD_TIMESTAMP: i64 = -6;

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
