//! AlterConfigs (key 33): replaces the whole set of dynamic configs of
//! each resource.
use crate::message;

message! {
    pub struct AlterableConfig {
        name: String => [0, 99],
        value: Option<String> => [0, 99],
    }
}

message! {
    pub struct AlterConfigsResource {
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
        configs: Vec<AlterableConfig> => [0, 99],
    }
}

message! {
    pub struct AlterConfigsRequest {
        resources: Vec<AlterConfigsResource> => [0, 99],
        validate_only: bool => [0, 99],
    }
}

message! {
    pub struct AlterConfigsResourceResponse {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
    }
}

message! {
    pub struct AlterConfigsResponse {
        throttle_time_ms: i32 => [0, 99],
        responses: Vec<AlterConfigsResourceResponse> => [0, 99],
    }
}
