//! DescribeConfigs (key 32).
use crate::message;

message! {
    pub struct DescribeConfigsResource {
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
        // Null means every key.
        configuration_keys: Option<Vec<String>> => [0, 99],
    }
}

message! {
    pub struct DescribeConfigsRequest {
        resources: Vec<DescribeConfigsResource> => [0, 99],
        include_synonyms: bool => [1, 99],
        include_documentation: bool => [3, 99],
    }
}

message! {
    pub struct DescribeConfigsSynonym {
        name: String => [1, 99],
        value: Option<String> => [1, 99],
        source: i8 => [1, 99],
    }
}

message! {
    pub struct DescribeConfigsResourceResult {
        name: String => [0, 99],
        value: Option<String> => [0, 99],
        read_only: bool => [0, 99],
        is_default: bool => [0, 0],
        config_source: i8 = -1 => [1, 99],
        is_sensitive: bool => [0, 99],
        synonyms: Vec<DescribeConfigsSynonym> => [1, 99],
        config_type: i8 => [3, 99],
        documentation: Option<String> => [3, 99],
    }
}

message! {
    pub struct DescribeConfigsResult {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
        configs: Vec<DescribeConfigsResourceResult> => [0, 99],
    }
}

message! {
    pub struct DescribeConfigsResponse {
        throttle_time_ms: i32 => [0, 99],
        results: Vec<DescribeConfigsResult> => [0, 99],
    }
}
