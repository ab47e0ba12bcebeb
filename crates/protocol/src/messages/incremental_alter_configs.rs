//! IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on
//! single keys of each resource. The response has AlterConfigs' shape.
use crate::message;

pub use super::alter_configs::{AlterConfigsResourceResponse, AlterConfigsResponse};

/// Kafka's AlterConfigOp.OpType ids.
pub const OP_SET: i8 = 0;
pub const OP_DELETE: i8 = 1;
pub const OP_APPEND: i8 = 2;
pub const OP_SUBTRACT: i8 = 3;

message! {
    pub struct IncrementalAlterableConfig {
        name: String => [0, 99],
        config_operation: i8 => [0, 99],
        value: Option<String> => [0, 99],
    }
}

message! {
    pub struct IncrementalAlterConfigsResource {
        resource_type: i8 => [0, 99],
        resource_name: String => [0, 99],
        configs: Vec<IncrementalAlterableConfig> => [0, 99],
    }
}

message! {
    pub struct IncrementalAlterConfigsRequest {
        resources: Vec<IncrementalAlterConfigsResource> => [0, 99],
        validate_only: bool => [0, 99],
    }
}

/// The response is the same structure as AlterConfigs'.
pub type IncrementalAlterConfigsResponse = AlterConfigsResponse;
