//! AlterPartitionReassignments (KIP-455): starts, changes or cancels (null
//! replicas) the reassignment of each partition named, planned by
//! `tarn_metadata::reassignments` on the active controller (a broker
//! forwards the request there) and committed as one entry. The answer
//! comes once the reassignment has started, not when it completes: the
//! new replicas catch up, join the ISR, and the leader's AlterPartition
//! that takes in the last of them completes it. Version 1 (KIP-860) may
//! forbid a change of replication factor.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::reassignments::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse, ReassignableTopic, ReassignableTopicResponse,
};

use tarn_metadata::elections::ElectionError;
use tarn_metadata::reassignments::{self, Reassignment};

use super::{ApiSpec, RequestContext};
use crate::broker::{Broker, BrokerError};

pub const KEY: i16 = 45;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "AlterPartitionReassignments",
    min_version: 0,
    max_version: 1,
    flexible_min: 0,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let asked: Vec<Reassignment> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Reassignment {
                topic: t.name.clone(),
                partition_id: p.partition_index,
                target: p.replicas.clone(),
            })
        })
        .collect();
    let allow = request.allow_replication_factor_change;
    let outcome = broker.commit_metadata(|image| -> Result<_, BrokerError> {
        let (records, answers) = reassignments::alter_reassignments(image, &asked, allow);
        Ok((records, answers))
    });
    let answers = match outcome {
        Ok(answers) => answers,
        Err(e) => {
            tracing::error!(error = %e, "commit partition reassignments");
            let failed = ElectionError {
                code: e.commit_error_code(),
                message: e.to_string(),
            };
            return AlterPartitionReassignmentsResponse {
                throttle_time_ms: 0,
                allow_replication_factor_change: allow,
                error_code: failed.code,
                error_message: Some(failed.message.clone()),
                responses: by_topic(&request.topics, vec![Err(failed); asked.len()]),
            };
        }
    };
    let started = answers.iter().filter(|a| a.is_ok()).count();
    if started > 0 {
        tracing::info!(partitions = started, "partition reassignments changed");
    }
    AlterPartitionReassignmentsResponse {
        throttle_time_ms: 0,
        allow_replication_factor_change: allow,
        error_code: error::NONE,
        error_message: None,
        responses: by_topic(&request.topics, answers),
    }
}

/// The answers in the request's shape: one entry per topic entry of the
/// request (a topic named twice is answered twice, as Kafka does), each
/// with its partitions' answers in order.
fn by_topic(
    topics: &[ReassignableTopic],
    answers: Vec<Result<(), ElectionError>>,
) -> Vec<ReassignableTopicResponse> {
    let mut answers = answers.into_iter();
    topics
        .iter()
        .map(|topic| ReassignableTopicResponse {
            name: topic.name.clone(),
            partitions: topic
                .partitions
                .iter()
                .zip(answers.by_ref())
                .map(|(partition, answer)| {
                    let (error_code, error_message) = match answer {
                        Ok(()) => (error::NONE, None),
                        Err(e) => (e.code, Some(e.message)),
                    };
                    ReassignablePartitionResponse {
                        partition_index: partition.partition_index,
                        error_code,
                        error_message,
                    }
                })
                .collect(),
        })
        .collect()
}
