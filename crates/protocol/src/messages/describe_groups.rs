//! DescribeGroups (key 15). v6 (KIP-1043) adds an error message per group.
use bytes::Bytes;

use crate::message;

message! {
    pub struct DescribeGroupsRequest {
        groups: Vec<String> => [0, 99],
        include_authorized_operations: bool => [3, 99],
    }
}

message! {
    pub struct DescribedGroupMember {
        member_id: String => [0, 99],
        group_instance_id: Option<String> => [4, 99],
        client_id: String => [0, 99],
        client_host: String => [0, 99],
        member_metadata: Bytes => [0, 99],
        member_assignment: Bytes => [0, 99],
    }
}

message! {
    pub struct DescribedGroup {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [6, 99],
        group_id: String => [0, 99],
        group_state: String => [0, 99],
        protocol_type: String => [0, 99],
        protocol_data: String => [0, 99],
        members: Vec<DescribedGroupMember> => [0, 99],
        authorized_operations: i32 = i32::MIN => [3, 99],
    }
}

message! {
    pub struct DescribeGroupsResponse {
        throttle_time_ms: i32 => [1, 99],
        groups: Vec<DescribedGroup> => [0, 99],
    }
}
