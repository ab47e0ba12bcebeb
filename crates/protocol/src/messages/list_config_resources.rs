//! ListConfigResources (key 74; ListClientMetricsResources before KIP-1142):
//! the resources that configs can be described for. v0 lists client
//! metrics subscriptions only; v1 takes the resource types to list and
//! answers each resource with its type. Flexible from v0.
use crate::message;

message! {
    pub struct ListConfigResourcesRequest {
        resource_types: Vec<i8> => [1, 99],
    }
}

message! {
    pub struct ConfigResource {
        resource_name: String => [0, 99],
        resource_type: i8 = 16 => [1, 99],
    }
}

message! {
    pub struct ListConfigResourcesResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        config_resources: Vec<ConfigResource> => [0, 99],
    }
}
