//! OffsetCommit (key 8). v9 is v8 for the consumer group protocol
//! (KIP-848); v10 names topics by id instead of by name.
use crate::codec::Uuid;
use crate::message;

message! {
    pub struct OffsetCommitRequestPartition {
        partition_index: i32 => [0, 99],
        committed_offset: i64 => [0, 99],
        committed_leader_epoch: i32 = -1 => [6, 99],
        commit_timestamp: i64 = -1 => [1, 1],
        committed_metadata: Option<String> => [0, 99],
    }
}

message! {
    pub struct OffsetCommitRequestTopic {
        name: String => [0, 9],
        topic_id: Uuid => [10, 99],
        partitions: Vec<OffsetCommitRequestPartition> => [0, 99],
    }
}

message! {
    pub struct OffsetCommitRequest {
        group_id: String => [0, 99],
        generation_id_or_member_epoch: i32 = -1 => [1, 99],
        member_id: String => [1, 99],
        group_instance_id: Option<String> => [7, 99],
        retention_time_ms: i64 = -1 => [2, 4],
        topics: Vec<OffsetCommitRequestTopic> => [0, 99],
    }
}

message! {
    pub struct OffsetCommitResponsePartition {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
    }
}

message! {
    pub struct OffsetCommitResponseTopic {
        name: String => [0, 9],
        topic_id: Uuid => [10, 99],
        partitions: Vec<OffsetCommitResponsePartition> => [0, 99],
    }
}

message! {
    pub struct OffsetCommitResponse {
        throttle_time_ms: i32 => [3, 99],
        topics: Vec<OffsetCommitResponseTopic> => [0, 99],
    }
}
