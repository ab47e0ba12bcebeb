//! OffsetFetch (key 9). Up to v7 one group per request (a null topic list
//! from v2 means "every partition with an offset"); from v8 several groups;
//! from v10 topics are named by id.
use crate::codec::Uuid;
use crate::message;

message! {
    pub struct OffsetFetchRequestTopic {
        name: String => [0, 9],
        topic_id: Uuid => [10, 99],
        partition_indexes: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct OffsetFetchRequestGroup {
        group_id: String => [8, 99],
        member_id: Option<String> => [9, 99],
        member_epoch: i32 = -1 => [9, 99],
        topics: Option<Vec<OffsetFetchRequestTopic>> => [8, 99],
    }
}

message! {
    pub struct OffsetFetchRequest {
        group_id: String => [0, 7],
        topics: Option<Vec<OffsetFetchRequestTopic>> = Some(Vec::new()) => [0, 7],
        groups: Vec<OffsetFetchRequestGroup> => [8, 99],
        require_stable: bool => [7, 99],
    }
}

message! {
    pub struct OffsetFetchResponsePartition {
        partition_index: i32 => [0, 99],
        committed_offset: i64 = -1 => [0, 99],
        committed_leader_epoch: i32 = -1 => [5, 99],
        metadata: Option<String> = Some(String::new()) => [0, 99],
        error_code: i16 => [0, 99],
    }
}

message! {
    pub struct OffsetFetchResponseTopic {
        name: String => [0, 9],
        topic_id: Uuid => [10, 99],
        partitions: Vec<OffsetFetchResponsePartition> => [0, 99],
    }
}

message! {
    /// One group's answer in v8+; the partition layout is the same as the
    /// v0-7 top level, so the structures are shared.
    pub struct OffsetFetchResponseGroup {
        group_id: String => [8, 99],
        topics: Vec<OffsetFetchResponseTopic> => [8, 99],
        error_code: i16 => [8, 99],
    }
}

message! {
    pub struct OffsetFetchResponse {
        throttle_time_ms: i32 => [3, 99],
        topics: Vec<OffsetFetchResponseTopic> => [0, 7],
        error_code: i16 => [2, 7],
        groups: Vec<OffsetFetchResponseGroup> => [8, 99],
    }
}
