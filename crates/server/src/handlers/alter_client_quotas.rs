//! AlterClientQuotas (key 49): sets and removes client quotas. Each entry
//! is checked alone (`crate::client_quotas`) and answered with its own
//! error; the valid entries' changes are committed together as
//! ClientQuota records in the metadata log, so they survive restarts.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::client_quotas::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, AlterEntryData, AlterEntryResult,
};

use tarn_metadata::client_quotas::{validate_entity, validate_op, QuotaError};
use tarn_metadata::{MetadataImage, MetadataRecord};

use super::{ApiSpec, RequestContext};
use crate::broker::{Broker, BrokerError};

pub const KEY: i16 = 49;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "AlterClientQuotas",
    min_version: 0,
    max_version: 1,
    flexible_min: 1,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let validate_only = request.validate_only;
    let outcome = broker.commit_metadata(|image| -> Result<_, BrokerError> {
        let mut records = Vec::new();
        let results: Vec<Result<(), QuotaError>> = request
            .entries
            .iter()
            .map(|entry| {
                let planned = plan(image, entry)?;
                records.extend(planned);
                Ok(())
            })
            .collect();
        if validate_only {
            records.clear();
        }
        Ok((records, results))
    });
    let results = match outcome {
        Ok(results) => results,
        Err(e) => {
            tracing::error!(error = %e, "alter client quotas");
            let failed = QuotaError {
                code: e.commit_error_code(),
                message: e.to_string(),
            };
            vec![Err(failed); request.entries.len()]
        }
    };
    let entries = request
        .entries
        .into_iter()
        .zip(results)
        .map(|(entry, result)| {
            let (error_code, error_message) = match result {
                Ok(()) => (error::NONE, None),
                Err(e) => (e.code, Some(e.message)),
            };
            AlterEntryResult {
                error_code,
                error_message,
                entity: entry.entity,
            }
        })
        .collect();
    AlterClientQuotasResponse {
        throttle_time_ms: 0,
        entries,
    }
}

/// The records that make `entry` true of `image`: one per quota that
/// changes.
fn plan(image: &MetadataImage, entry: &AlterEntryData) -> Result<Vec<MetadataRecord>, QuotaError> {
    let entity = validate_entity(&entry.entity)?;
    let current = image.client_quotas.get(&entity);
    let mut records = Vec::new();
    for op in &entry.ops {
        let value = (!op.remove).then_some(op.value.0);
        validate_op(&entity, &op.key, value)?;
        if current.and_then(|q| q.get(&op.key)).copied() == value {
            continue;
        }
        records.push(MetadataRecord::ClientQuota {
            entity: entity.clone(),
            key: op.key.clone(),
            value,
        });
    }
    Ok(records)
}
