//! FindCoordinator (key 10). Version 4 asks for several coordinator keys
//! at once and answers with one `Coordinator` per key.
use crate::message;

/// `key_type` values.
pub const KEY_TYPE_GROUP: i8 = 0;
pub const KEY_TYPE_TRANSACTION: i8 = 1;
/// From v6 (KIP-932): a share partition key `group:topic_id:partition`.
pub const KEY_TYPE_SHARE: i8 = 2;

message! {
    pub struct FindCoordinatorRequest {
        key: String => [0, 3],
        key_type: i8 => [1, 99],
        coordinator_keys: Vec<String> => [4, 99],
    }
}

message! {
    pub struct Coordinator {
        key: String => [4, 99],
        node_id: i32 => [4, 99],
        host: String => [4, 99],
        port: i32 => [4, 99],
        error_code: i16 => [4, 99],
        error_message: Option<String> => [4, 99],
    }
}

message! {
    pub struct FindCoordinatorResponse {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [0, 3],
        error_message: Option<String> => [1, 3],
        node_id: i32 => [0, 3],
        host: String => [0, 3],
        port: i32 => [0, 3],
        coordinators: Vec<Coordinator> => [4, 99],
    }
}
