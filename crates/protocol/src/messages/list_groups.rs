//! ListGroups (key 16). v4 adds a filter on group states, v5 on types.
use crate::message;

message! {
    pub struct ListGroupsRequest {
        states_filter: Vec<String> => [4, 99],
        types_filter: Vec<String> => [5, 99],
    }
}

message! {
    pub struct ListedGroup {
        group_id: String => [0, 99],
        protocol_type: String => [0, 99],
        group_state: String => [4, 99],
        group_type: String => [5, 99],
    }
}

message! {
    pub struct ListGroupsResponse {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [0, 99],
        groups: Vec<ListedGroup> => [0, 99],
    }
}
