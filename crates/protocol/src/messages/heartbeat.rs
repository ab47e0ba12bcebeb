//! Heartbeat (key 12).
use crate::message;

message! {
    pub struct HeartbeatRequest {
        group_id: String => [0, 99],
        generation_id: i32 => [0, 99],
        member_id: String => [0, 99],
        group_instance_id: Option<String> => [3, 99],
    }
}

message! {
    pub struct HeartbeatResponse {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [0, 99],
    }
}
