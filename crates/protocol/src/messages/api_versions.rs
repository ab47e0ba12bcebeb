//! ApiVersions (key 18).
use crate::message;

message! {
    pub struct ApiVersionsRequest {
        client_software_name: String => [3, 99],
        client_software_version: String => [3, 99],
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
