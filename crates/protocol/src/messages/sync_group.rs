//! SyncGroup (key 14).
use bytes::Bytes;

use crate::message;

message! {
    pub struct SyncGroupRequestAssignment {
        member_id: String => [0, 99],
        assignment: Bytes => [0, 99],
    }
}

message! {
    pub struct SyncGroupRequest {
        group_id: String => [0, 99],
        generation_id: i32 => [0, 99],
        member_id: String => [0, 99],
        group_instance_id: Option<String> => [3, 99],
        protocol_type: Option<String> => [5, 99],
        protocol_name: Option<String> => [5, 99],
        assignments: Vec<SyncGroupRequestAssignment> => [0, 99],
    }
}

message! {
    pub struct SyncGroupResponse {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [0, 99],
        protocol_type: Option<String> => [5, 99],
        protocol_name: Option<String> => [5, 99],
        assignment: Bytes => [0, 99],
    }
}
