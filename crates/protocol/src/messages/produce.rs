//! Produce (key 0). Record sets stay as `Bytes` slices of the request
//! frame: the broker validates and appends them without copying.
//!
//! v10 adds the leader hints of KIP-951 (a partition refused with
//! NOT_LEADER_OR_FOLLOWER names the leader the broker knows, and the
//! response lists those leaders' endpoints); v11 and v12 only widen what
//! a client accepts (TRANSACTION_ABORTABLE; partitions added to a
//! transaction implicitly, KIP-890); v13 names topics by id (KIP-516).
use bytes::Bytes;

use crate::codec::Uuid;
use crate::message;
pub use crate::messages::fetch::{LeaderIdAndEpoch, NodeEndpoint};

message! {
    pub struct PartitionProduceData {
        index: i32 => [0, 99],
        records: Option<Bytes> => [0, 99],
    }
}

message! {
    pub struct TopicProduceData {
        name: String => [0, 12],
        topic_id: Uuid => [13, 99],
        partition_data: Vec<PartitionProduceData> => [0, 99],
    }
}

message! {
    pub struct ProduceRequest {
        transactional_id: Option<String> => [3, 99],
        acks: i16 => [0, 99],
        timeout_ms: i32 => [0, 99],
        topic_data: Vec<TopicProduceData> => [0, 99],
    }
}

message! {
    pub struct BatchIndexAndErrorMessage {
        batch_index: i32 => [8, 99],
        batch_index_error_message: Option<String> => [8, 99],
    }
}

message! {
    pub struct PartitionProduceResponse {
        index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        base_offset: i64 => [0, 99],
        log_append_time_ms: i64 = -1 => [2, 99],
        log_start_offset: i64 = -1 => [5, 99],
        record_errors: Vec<BatchIndexAndErrorMessage> => [8, 99],
        error_message: Option<String> => [8, 99],
    }
    tagged {
        0 => current_leader: LeaderIdAndEpoch => [10, 99],
    }
}

message! {
    pub struct TopicProduceResponse {
        name: String => [0, 12],
        topic_id: Uuid => [13, 99],
        partition_responses: Vec<PartitionProduceResponse> => [0, 99],
    }
}

message! {
    pub struct ProduceResponse {
        responses: Vec<TopicProduceResponse> => [0, 99],
        throttle_time_ms: i32 => [1, 99],
    }
    tagged {
        0 => node_endpoints: Vec<NodeEndpoint> => [10, 99],
    }
}
