//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on single
//! keys of each topic or broker resource, validated whole per resource and
//! committed as one metadata append (or nothing, with `validate_only`).
use std::sync::Arc;

use tarn_protocol::messages::incremental_alter_configs::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use tarn_metadata::dynamic_config::{plan_incremental, IncrementalOp};

use super::alter_configs::{
    commit_resource, duplicate_resource_error, duplicate_resources, response_for,
};
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 44;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "IncrementalAlterConfigs",
    min_version: 0,
    max_version: 1,
    flexible_min: 1,
};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let duplicates = duplicate_resources(
        request
            .resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let responses = request
        .resources
        .iter()
        .map(|resource| {
            let ops: Vec<IncrementalOp> = resource
                .configs
                .iter()
                .map(|c| (c.name.clone(), c.config_operation, c.value.clone()))
                .collect();
            let key = (resource.resource_type, resource.resource_name.as_str());
            let outcome = if duplicates.contains(&key) {
                Err(duplicate_resource_error())
            } else {
                commit_resource(
                    broker,
                    ctx.receiving_node,
                    key,
                    request.validate_only,
                    |view, target| plan_incremental(view, target, &ops),
                )
            };
            response_for(key, outcome)
        })
        .collect();
    IncrementalAlterConfigsResponse {
        throttle_time_ms: 0,
        responses,
    }
}
