//! Metadata (key 3).
use crate::codec::Uuid;
use crate::message;

message! {
    pub struct MetadataRequestTopic {
        topic_id: Uuid => [10, 99],
        name: Option<String> => [0, 99],
    }
}

message! {
    pub struct MetadataRequest {
        topics: Option<Vec<MetadataRequestTopic>> => [0, 99],
        allow_auto_topic_creation: bool = true => [4, 99],
        include_cluster_authorized_operations: bool => [8, 10],
        include_topic_authorized_operations: bool => [8, 99],
    }
}

message! {
    pub struct MetadataResponseBroker {
        node_id: i32 => [0, 99],
        host: String => [0, 99],
        port: i32 => [0, 99],
        rack: Option<String> => [1, 99],
    }
}

message! {
    pub struct MetadataResponsePartition {
        error_code: i16 => [0, 99],
        partition_index: i32 => [0, 99],
        leader_id: i32 => [0, 99],
        leader_epoch: i32 = -1 => [7, 99],
        replica_nodes: Vec<i32> => [0, 99],
        isr_nodes: Vec<i32> => [0, 99],
        offline_replicas: Vec<i32> => [5, 99],
    }
}

message! {
    pub struct MetadataResponseTopic {
        error_code: i16 => [0, 99],
        name: Option<String> => [0, 99],
        topic_id: Uuid => [10, 99],
        is_internal: bool => [1, 99],
        partitions: Vec<MetadataResponsePartition> => [0, 99],
        topic_authorized_operations: i32 = i32::MIN => [8, 99],
    }
}

message! {
    pub struct MetadataResponse {
        throttle_time_ms: i32 => [3, 99],
        brokers: Vec<MetadataResponseBroker> => [0, 99],
        cluster_id: Option<String> => [2, 99],
        controller_id: i32 = -1 => [1, 99],
        topics: Vec<MetadataResponseTopic> => [0, 99],
        cluster_authorized_operations: i32 = i32::MIN => [8, 10],
        error_code: i16 => [13, 99],
    }
}
