//! LeaveGroup (key 13). Up to v2 one member leaves by member id; from v3
//! a batch of members, each by member id or group instance id.
use crate::message;

message! {
    pub struct MemberIdentity {
        member_id: String => [3, 99],
        group_instance_id: Option<String> => [3, 99],
        reason: Option<String> => [5, 99],
    }
}

message! {
    pub struct LeaveGroupRequest {
        group_id: String => [0, 99],
        member_id: String => [0, 2],
        members: Vec<MemberIdentity> => [3, 99],
    }
}

message! {
    pub struct MemberResponse {
        member_id: String => [3, 99],
        group_instance_id: Option<String> => [3, 99],
        error_code: i16 => [3, 99],
    }
}

message! {
    pub struct LeaveGroupResponse {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [0, 99],
        members: Vec<MemberResponse> => [3, 99],
    }
}
