//! DescribeConfigs: every key of a topic or of this broker with its
//! effective value, its source and (on request) its synonyms; an empty
//! broker name describes the cluster-wide dynamic defaults; a broker
//! logger resource lists this process's log levels (`log_levels`).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::describe_configs::{
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeConfigsResult,
};

use tarn_metadata::dynamic_config::{resolve, Purpose, RESOURCE_BROKER_LOGGER};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::log_levels;

pub const KEY: i16 = 32;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeConfigs",
    min_version: 0,
    max_version: 4,
    flexible_min: 4,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let image = broker.metadata.image();
    let view = broker.config_view(&image);
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let mut result = DescribeConfigsResult {
                error_code: error::NONE,
                error_message: None,
                resource_type: resource.resource_type,
                resource_name: resource.resource_name.clone(),
                configs: Vec::new(),
            };
            if resource.resource_type == RESOURCE_BROKER_LOGGER {
                let keys = resource
                    .configuration_keys
                    .as_deref()
                    .filter(|k| !k.is_empty());
                match log_levels::describe(&resource.resource_name, broker.node_id, keys) {
                    Ok(configs) => result.configs = configs,
                    Err(e) => {
                        result.error_code = e.code;
                        result.error_message = e.message;
                    }
                }
                return result;
            }
            match resolve(
                &image,
                broker.node_id,
                resource.resource_type,
                &resource.resource_name,
                Purpose::Describe,
            ) {
                Ok(target) => {
                    // Kafka: a null or empty key list means every key;
                    // keys it does not know are left out.
                    let keys = resource.configuration_keys.filter(|k| !k.is_empty());
                    result.configs = view
                        .entries(&target)
                        .iter()
                        .filter(|e| keys.as_ref().is_none_or(|k| k.contains(&e.name)))
                        .map(|e| {
                            e.to_result(request.include_synonyms, request.include_documentation)
                        })
                        .collect();
                }
                Err(e) => {
                    result.error_code = e.code;
                    result.error_message = e.message;
                }
            }
            result
        })
        .collect();
    DescribeConfigsResponse {
        throttle_time_ms: 0,
        results,
    }
}
