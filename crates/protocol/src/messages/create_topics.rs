//! CreateTopics (key 19).
use crate::codec::Uuid;
use crate::message;

message! {
    pub struct CreatableReplicaAssignment {
        partition_index: i32 => [0, 99],
        broker_ids: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct CreatableTopicConfig {
        name: String => [0, 99],
        value: Option<String> => [0, 99],
    }
}

message! {
    pub struct CreatableTopic {
        name: String => [0, 99],
        num_partitions: i32 => [0, 99],
        replication_factor: i16 => [0, 99],
        assignments: Vec<CreatableReplicaAssignment> => [0, 99],
        configs: Vec<CreatableTopicConfig> => [0, 99],
    }
}

message! {
    pub struct CreateTopicsRequest {
        topics: Vec<CreatableTopic> => [0, 99],
        timeout_ms: i32 = 60000 => [0, 99],
        validate_only: bool => [1, 99],
    }
}

message! {
    pub struct CreatableTopicConfigs {
        name: String => [5, 99],
        value: Option<String> => [5, 99],
        read_only: bool => [5, 99],
        config_source: i8 = -1 => [5, 99],
        is_sensitive: bool => [5, 99],
    }
}

message! {
    pub struct CreatableTopicResult {
        name: String => [0, 99],
        topic_id: Uuid => [7, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [1, 99],
        num_partitions: i32 = -1 => [5, 99],
        replication_factor: i16 = -1 => [5, 99],
        configs: Option<Vec<CreatableTopicConfigs>> => [5, 99],
    }
    tagged {
        0 => topic_config_error_code: i16 => [5, 99],
    }
}

message! {
    pub struct CreateTopicsResponse {
        throttle_time_ms: i32 => [2, 99],
        topics: Vec<CreatableTopicResult> => [0, 99],
    }
}
