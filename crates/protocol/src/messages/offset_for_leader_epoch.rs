//! OffsetForLeaderEpoch (key 23).
use crate::message;

message! {
    pub struct OffsetForLeaderPartition {
        partition: i32 => [0, 99],
        current_leader_epoch: i32 = -1 => [2, 99],
        leader_epoch: i32 => [0, 99],
    }
}

message! {
    pub struct OffsetForLeaderTopic {
        topic: String => [0, 99],
        partitions: Vec<OffsetForLeaderPartition> => [0, 99],
    }
}

message! {
    pub struct OffsetForLeaderEpochRequest {
        replica_id: i32 = -2 => [3, 99],
        topics: Vec<OffsetForLeaderTopic> => [0, 99],
    }
}

message! {
    pub struct EpochEndOffset {
        error_code: i16 => [0, 99],
        partition: i32 => [0, 99],
        leader_epoch: i32 = -1 => [1, 99],
        end_offset: i64 = -1 => [0, 99],
    }
}

message! {
    pub struct OffsetForLeaderTopicResult {
        topic: String => [0, 99],
        partitions: Vec<EpochEndOffset> => [0, 99],
    }
}

message! {
    pub struct OffsetForLeaderEpochResponse {
        throttle_time_ms: i32 => [2, 99],
        topics: Vec<OffsetForLeaderTopicResult> => [0, 99],
    }
}
