//! ApiVersions (key 18). v5 lets a client say which cluster and
//! node it believes it is talking to.
use crate::message;

message! {
    pub struct ApiVersionsRequest {
        client_software_name: String => [3, 99],
        client_software_version: String => [3, 99],
        cluster_id: Option<String> => [5, 99],
        node_id: i32 = -1 => [5, 99],
    }
}

message! {
    pub struct ApiVersion {
        api_key: i16 => [0, 99],
        min_version: i16 => [0, 99],
        max_version: i16 => [0, 99],
    }
}

message! {
    pub struct ApiVersionsResponse {
        error_code: i16 => [0, 99],
        api_keys: Vec<ApiVersion> => [0, 99],
        throttle_time_ms: i32 => [1, 99],
    }
}
