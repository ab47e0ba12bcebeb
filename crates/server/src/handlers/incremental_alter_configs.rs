//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on single
//! keys of each topic or broker resource, validated whole per resource and
//! committed as one metadata append (or nothing, with `validate_only`);
//! the log levels of this broker's loggers, set in this process alone.
//!
//! A broker that is not the active controller forwards the whole request
//! there, unless it names a broker logger: then, as Kafka's brokers do,
//! it answers the loggers itself and forwards the other resources in a
//! request of their own.
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tarn_protocol::codec::{Decode, Encode, Reader, Version};
use tarn_protocol::header::{decode_response_header, RequestHeader};
use tarn_protocol::messages::incremental_alter_configs::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResource,
    IncrementalAlterConfigsResponse,
};

use tarn_metadata::dynamic_config::{
    plan_incremental, AdminError, IncrementalOp, RESOURCE_BROKER_LOGGER,
};

use super::alter_configs::{
    commit_resource, duplicate_resource_error, duplicate_resources, response_for,
};
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::log_levels;

pub const KEY: i16 = 44;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "IncrementalAlterConfigs",
    min_version: 0,
    max_version: 1,
    flexible_min: 1,
};

/// Whether the request in `frame` names a broker logger, which the broker
/// that received it answers (see the module's note).
pub fn names_broker_loggers(frame: &Bytes, version: Version) -> bool {
    let mut body = Reader::new(frame.clone());
    RequestHeader::decode(&mut body, version.flexible)
        .ok()
        .and_then(|_| IncrementalAlterConfigsRequest::decode(&mut body, version).ok())
        .is_some_and(|request| {
            request
                .resources
                .iter()
                .any(|r| r.resource_type == RESOURCE_BROKER_LOGGER)
        })
}

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
    let for_controller: Vec<IncrementalAlterConfigsResource> = request
        .resources
        .iter()
        .filter(|r| {
            r.resource_type != RESOURCE_BROKER_LOGGER
                && !duplicates.contains(&(r.resource_type, r.resource_name.as_str()))
        })
        .cloned()
        .collect();
    let forwarded = match broker.is_active_controller() || for_controller.is_empty() {
        true => None,
        false => forward(broker, ctx, for_controller, request.validate_only).await,
    };
    let responses = request
        .resources
        .iter()
        .map(|resource| {
            let key = (resource.resource_type, resource.resource_name.as_str());
            let outcome = if duplicates.contains(&key) {
                Err(duplicate_resource_error())
            } else if resource.resource_type == RESOURCE_BROKER_LOGGER {
                // This broker's own log levels: nothing to commit.
                log_levels::alter(
                    &resource.resource_name,
                    broker.node_id,
                    &resource.configs,
                    request.validate_only,
                )
            } else if let Some(answer) = forwarded
                .as_ref()
                .and_then(|answers| answers.get(&(key.0, key.1.to_owned())))
            {
                answer.clone()
            } else {
                let ops: Vec<IncrementalOp> = resource
                    .configs
                    .iter()
                    .map(|c| (c.name.clone(), c.config_operation, c.value.clone()))
                    .collect();
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

/// The active controller's answers for `resources`, sent there in a
/// request of their own under the client's header; `None` when this node
/// became the active controller meanwhile (it answers them itself).
async fn forward(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    resources: Vec<IncrementalAlterConfigsResource>,
    validate_only: bool,
) -> Option<HashMap<(i8, String), Result<(), AdminError>>> {
    let keys: Vec<(i8, String)> = resources
        .iter()
        .map(|r| (r.resource_type, r.resource_name.clone()))
        .collect();
    let mut frame = Vec::new();
    ctx.header.encode(&mut frame, ctx.version.flexible);
    IncrementalAlterConfigsRequest {
        resources,
        validate_only,
    }
    .encode(&mut frame, ctx.version);
    let answer = crate::controller::forward(broker, &frame).await?;
    let answers = answer
        .map_err(|refusal| AdminError {
            code: refusal.code,
            message: Some(refusal.message),
        })
        .and_then(|response| decode_answer(&response, ctx.version));
    Some(match answers {
        Ok(responses) => responses
            .into_iter()
            .map(|r| {
                let outcome = match r.error_code {
                    0 => Ok(()),
                    code => Err(AdminError {
                        code,
                        message: r.error_message,
                    }),
                };
                ((r.resource_type, r.resource_name), outcome)
            })
            .collect(),
        Err(e) => keys.into_iter().map(|key| (key, Err(e.clone()))).collect(),
    })
}

/// The resources' answers in a response frame (its size, header and body).
fn decode_answer(
    frame: &[u8],
    version: Version,
) -> Result<Vec<tarn_protocol::messages::alter_configs::AlterConfigsResourceResponse>, AdminError> {
    let undecodable = |e: tarn_protocol::codec::DecodeError| AdminError {
        code: tarn_protocol::error::UNKNOWN_SERVER_ERROR,
        message: Some(format!(
            "the active controller's answer could not be read: {e}"
        )),
    };
    let mut r = Reader::new(Bytes::copy_from_slice(frame.get(4..).unwrap_or_default()));
    decode_response_header(&mut r, KEY, version.flexible).map_err(undecodable)?;
    let response = IncrementalAlterConfigsResponse::decode(&mut r, version).map_err(undecodable)?;
    Ok(response.responses)
}
