//! DeleteTopics (key 20).
use crate::codec::Uuid;
use crate::message;

message! {
    pub struct DeleteTopicState {
        name: Option<String> => [6, 99],
        topic_id: Uuid => [6, 99],
    }
}

message! {
    pub struct DeleteTopicsRequest {
        topics: Vec<DeleteTopicState> => [6, 99],
        topic_names: Vec<String> => [0, 5],
        timeout_ms: i32 => [0, 99],
    }
}

message! {
    pub struct DeletableTopicResult {
        name: Option<String> => [0, 99],
        topic_id: Uuid => [6, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [5, 99],
    }
}

message! {
    pub struct DeleteTopicsResponse {
        throttle_time_ms: i32 => [1, 99],
        responses: Vec<DeletableTopicResult> => [0, 99],
    }
}
