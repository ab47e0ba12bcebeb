//! AlterClientQuotas (key 49): sets and removes client quotas. Each entry
//! is checked alone (`crate::client_quotas`) and answered with its own
//! error; the valid entries' changes are committed together as
//! ClientQuota records in the metadata log, so they survive restarts.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::client_quotas::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, AlterEntryData, AlterEntryResult,
    EntityData,
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
    let mut request = request;
    for entry in &mut request.entries {
        entry.entity = last_of_each_type(std::mem::take(&mut entry.entity));
    }
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

/// An entity as Kafka reads it off the wire, as a map from entity type to
/// name: a type given twice names the entity by its last name, and the
/// answer echoes that.
fn last_of_each_type(entity: Vec<EntityData>) -> Vec<EntityData> {
    let mut kept: Vec<EntityData> = Vec::with_capacity(entity.len());
    for e in entity {
        match kept.iter_mut().find(|k| k.entity_type == e.entity_type) {
            Some(k) => k.entity_name = e.entity_name,
            None => kept.push(e),
        }
    }
    kept
}

/// The records that make `entry` true of `image`: one per quota that
/// changes. A key given twice refuses the entry, as in Kafka.
fn plan(image: &MetadataImage, entry: &AlterEntryData) -> Result<Vec<MetadataRecord>, QuotaError> {
    let entity = validate_entity(&entry.entity)?;
    let current = image.client_quotas.get(&entity);
    let mut records = Vec::new();
    for (i, op) in entry.ops.iter().enumerate() {
        if entry.ops[..i].iter().any(|o| o.key == op.key) {
            return Err(QuotaError {
                code: error::INVALID_REQUEST,
                message: format!("Duplicate quota key {} in the entry", op.key),
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::messages::client_quotas::{Float64, OpData};

    fn entity(parts: &[(&str, Option<&str>)]) -> Vec<EntityData> {
        parts
            .iter()
            .map(|(t, n)| EntityData {
                entity_type: (*t).into(),
                entity_name: n.map(str::to_owned),
            })
            .collect()
    }

    #[test]
    fn an_entity_type_given_twice_names_its_last_entity() {
        let kept = last_of_each_type(entity(&[
            ("user", Some("bob")),
            ("client-id", None),
            ("user", Some("carol")),
        ]));
        assert_eq!(
            kept,
            entity(&[("user", Some("carol")), ("client-id", None)])
        );
    }

    #[test]
    fn a_key_given_twice_refuses_the_entry() {
        let op = |key: &str, value| OpData {
            key: key.into(),
            value: Float64(value),
            remove: false,
        };
        let mut entry = AlterEntryData {
            entity: entity(&[("user", Some("bob"))]),
            ops: vec![op("producer_byte_rate", 1.0), op("consumer_byte_rate", 2.0)],
        };
        let image = MetadataImage::default();
        assert_eq!(plan(&image, &entry).map(|r| r.len()), Ok(2));
        entry.ops.push(op("producer_byte_rate", 3.0));
        assert_eq!(
            plan(&image, &entry).map_err(|e| e.code),
            Err(error::INVALID_REQUEST)
        );
    }
}
