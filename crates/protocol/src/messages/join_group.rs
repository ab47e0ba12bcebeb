//! JoinGroup (key 11).
use bytes::Bytes;

use crate::message;

message! {
    pub struct JoinGroupRequestProtocol {
        name: String => [0, 99],
        metadata: Bytes => [0, 99],
    }
}

message! {
    pub struct JoinGroupRequest {
        group_id: String => [0, 99],
        session_timeout_ms: i32 => [0, 99],
        rebalance_timeout_ms: i32 = -1 => [1, 99],
        member_id: String => [0, 99],
        group_instance_id: Option<String> => [5, 99],
        protocol_type: String => [0, 99],
        protocols: Vec<JoinGroupRequestProtocol> => [0, 99],
        reason: Option<String> => [8, 99],
    }
}

message! {
    pub struct JoinGroupResponseMember {
        member_id: String => [0, 99],
        group_instance_id: Option<String> => [5, 99],
        metadata: Bytes => [0, 99],
    }
}

message! {
    /// `protocol_name` is nullable from v7; before that a missing name is
    /// sent as the empty string.
    pub struct JoinGroupResponse {
        throttle_time_ms: i32 => [2, 99],
        error_code: i16 => [0, 99],
        generation_id: i32 = -1 => [0, 99],
        protocol_type: Option<String> => [7, 99],
        protocol_name: Option<String> = Some(String::new()) => [0, 99],
        leader: String => [0, 99],
        skip_assignment: bool => [9, 99],
        member_id: String => [0, 99],
        members: Vec<JoinGroupResponseMember> => [0, 99],
    }
}
