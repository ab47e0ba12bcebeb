//! AlterConfigs: the configs given become the whole dynamic config set of
//! each topic or broker resource (Kafka's legacy semantics); keys left out
//! go back to their inherited values. Each resource is validated whole and
//! committed as one metadata append, or refused with nothing changed.
//! The helpers here are shared with IncrementalAlterConfigs.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::alter_configs::{
    AlterConfigsRequest, AlterConfigsResourceResponse, AlterConfigsResponse,
};

use tarn_metadata::dynamic_config::{
    plan_replace, resolve, AdminError, ConfigView, Purpose, Resource, RESOURCE_BROKER,
};
use tarn_metadata::MetadataRecord;

use super::{ApiSpec, RequestContext};
use crate::broker::{Broker, BrokerError};

pub const KEY: i16 = 33;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "AlterConfigs",
    min_version: 0,
    max_version: 2,
    flexible_min: 2,
};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
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
            let configs: Vec<(String, Option<String>)> = resource
                .configs
                .iter()
                .map(|c| (c.name.clone(), c.value.clone()))
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
                    |view, target| plan_replace(view, target, &configs),
                )
            };
            response_for(key, outcome)
        })
        .collect();
    AlterConfigsResponse {
        throttle_time_ms: 0,
        responses,
    }
}

/// Resources named more than once: Kafka refuses every copy.
pub(super) fn duplicate_resources<'a>(
    keys: impl Iterator<Item = (i8, &'a str)>,
) -> HashSet<(i8, &'a str)> {
    let mut counts: HashMap<(i8, &str), usize> = HashMap::new();
    for key in keys {
        *counts.entry(key).or_default() += 1;
    }
    counts
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

pub(super) fn duplicate_resource_error() -> AdminError {
    AdminError {
        code: error::INVALID_REQUEST,
        message: Some("Each resource must appear at most once.".into()),
    }
}

/// Resolves the resource, plans its records against the image under the
/// commit lock and appends them (unless `validate_only`); the replica sync
/// that follows every commit hands the new settings to live logs.
pub(super) fn commit_resource(
    broker: &Broker,
    receiving_node: i32,
    (resource_type, resource_name): (i8, &str),
    validate_only: bool,
    plan: impl FnOnce(&ConfigView<'_>, &Resource) -> Result<Vec<MetadataRecord>, AdminError>,
) -> Result<(), AdminError> {
    let outcome = broker.commit_metadata(|image| -> Result<_, BrokerError> {
        let planned = resolve(
            image,
            receiving_node,
            resource_type,
            resource_name,
            Purpose::Alter,
        )
        .and_then(|target| plan(&broker.config_view(image), &target));
        Ok(match planned {
            Ok(_) if validate_only => (Vec::new(), Ok(0)),
            Ok(records) => {
                let count = records.len();
                (records, Ok(count))
            }
            Err(e) => (Vec::new(), Err(e)),
        })
    });
    match outcome {
        Ok(Ok(changed)) => {
            if changed > 0 {
                let level = match (resource_type, resource_name) {
                    (RESOURCE_BROKER, "") => "cluster default",
                    (RESOURCE_BROKER, _) => "broker",
                    _ => "topic",
                };
                tracing::info!(resource = resource_name, level, changed, "altered configs");
            }
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(e) => {
            tracing::error!(resource = resource_name, error = %e, "alter configs");
            Err(AdminError {
                code: e.commit_error_code(),
                message: Some(e.to_string()),
            })
        }
    }
}

pub(super) fn response_for(
    (resource_type, resource_name): (i8, &str),
    outcome: Result<(), AdminError>,
) -> AlterConfigsResourceResponse {
    let (error_code, error_message) = match outcome {
        Ok(()) => (error::NONE, None),
        Err(e) => (e.code, e.message),
    };
    AlterConfigsResourceResponse {
        error_code,
        error_message,
        resource_type,
        resource_name: resource_name.to_owned(),
    }
}
