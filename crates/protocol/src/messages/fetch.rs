//! Fetch (key 1), up to the last version that names topics (12).
use bytes::Bytes;

use crate::codec::Uuid;
use crate::message;

message! {
    pub struct FetchPartition {
        partition: i32 => [0, 99],
        current_leader_epoch: i32 = -1 => [9, 99],
        fetch_offset: i64 => [0, 99],
        last_fetched_epoch: i32 = -1 => [12, 99],
        log_start_offset: i64 = -1 => [5, 99],
        partition_max_bytes: i32 => [0, 99],
    }
}

message! {
    pub struct FetchTopic {
        topic: String => [0, 12],
        topic_id: Uuid => [13, 99],
        partitions: Vec<FetchPartition> => [0, 99],
    }
}

message! {
    pub struct ForgottenTopic {
        topic: String => [7, 12],
        topic_id: Uuid => [13, 99],
        partitions: Vec<i32> => [7, 99],
    }
}

message! {
    pub struct FetchRequest {
        replica_id: i32 = -1 => [0, 14],
        max_wait_ms: i32 => [0, 99],
        min_bytes: i32 => [0, 99],
        max_bytes: i32 = i32::MAX => [3, 99],
        isolation_level: i8 => [4, 99],
        session_id: i32 => [7, 99],
        session_epoch: i32 = -1 => [7, 99],
        topics: Vec<FetchTopic> => [0, 99],
        forgotten_topics_data: Vec<ForgottenTopic> => [7, 99],
        rack_id: String => [11, 99],
    }
    tagged {
        0 => cluster_id: Option<String> => [12, 99],
    }
}

message! {
    pub struct AbortedTransaction {
        producer_id: i64 => [4, 99],
        first_offset: i64 => [4, 99],
    }
}

message! {
    pub struct EpochEndOffset {
        epoch: i32 = -1 => [12, 99],
        end_offset: i64 = -1 => [12, 99],
    }
}

message! {
    pub struct LeaderIdAndEpoch {
        leader_id: i32 = -1 => [12, 99],
        leader_epoch: i32 = -1 => [12, 99],
    }
}

message! {
    pub struct PartitionData {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        high_watermark: i64 => [0, 99],
        last_stable_offset: i64 = -1 => [4, 99],
        log_start_offset: i64 = -1 => [5, 99],
        aborted_transactions: Option<Vec<AbortedTransaction>> => [4, 99],
        preferred_read_replica: i32 = -1 => [11, 99],
        records: Option<Bytes> => [0, 99],
    }
    tagged {
        0 => diverging_epoch: EpochEndOffset => [12, 99],
        1 => current_leader: LeaderIdAndEpoch => [12, 99],
    }
}

message! {
    pub struct FetchableTopicResponse {
        topic: String => [0, 12],
        topic_id: Uuid => [13, 99],
        partitions: Vec<PartitionData> => [0, 99],
    }
}

message! {
    pub struct FetchResponse {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [7, 99],
        session_id: i32 => [7, 99],
        responses: Vec<FetchableTopicResponse> => [0, 99],
    }
}
