//! DeleteGroups (key 42). v3 adds an error message per group.
use crate::message;

message! {
    pub struct DeleteGroupsRequest {
        groups_names: Vec<String> => [0, 99],
    }
}

message! {
    pub struct DeletableGroupResult {
        group_id: String => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [3, 99],
    }
}

message! {
    pub struct DeleteGroupsResponse {
        throttle_time_ms: i32 => [0, 99],
        results: Vec<DeletableGroupResult> => [0, 99],
    }
}
