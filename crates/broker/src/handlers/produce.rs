//! Produce: validates each partition's record batches and appends them as
//! received (acks 0, 1 and -1; on one node the in-sync set is this broker),
//! recompressed only when the topic's `compression.type` names another
//! codec than the batch's.
//! Versions 0-2 are advertised, because librdkafka turns compression off
//! when Produce does not start at v0, but answered UNSUPPORTED_VERSION:
//! they carry the old message formats.
//!
//! Durability: every append answers with a completion (see `durability`),
//! and the response waits for all of them: when an append reached the
//! partition's `flush.messages`, that is until the group-commit thread has
//! fsynced it (Kafka flushes before acknowledging, too); concurrent waiters
//! share fsyncs. A failed fsync answers KAFKA_STORAGE_ERROR for that
//! partition.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::produce::{
    PartitionProduceData, PartitionProduceResponse, ProduceRequest, ProduceResponse,
    TopicProduceResponse,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::durability::AppendCompletion;
use crate::metrics::RecordTotals;
use crate::replica_manager::PartitionError;

pub const KEY: i16 = 0;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "Produce",
    min_version: 0,
    max_version: 9,
    flexible_min: 9,
};
/// The first version whose record sets are v2 record batches.
const FIRST_BATCH_VERSION: i16 = 3;

fn partition_error(index: i32, e: PartitionError) -> PartitionProduceResponse {
    PartitionProduceResponse {
        index,
        error_code: e.code,
        base_offset: -1,
        error_message: Some(e.message),
        ..Default::default()
    }
}

/// Returns `None` when acks=0: the client expects no response.
pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ProduceRequest,
) -> Option<ProduceResponse> {
    let refusal = if ctx.version.version < FIRST_BATCH_VERSION {
        Some(PartitionError::new(
            error::UNSUPPORTED_VERSION,
            format!(
                "Produce v{} is not supported; use v3 or later",
                ctx.version.version
            ),
        ))
    } else if !matches!(request.acks, -1..=1) {
        Some(PartitionError::new(
            error::INVALID_REQUIRED_ACKS,
            format!("acks={} is invalid; use -1, 0 or 1", request.acks),
        ))
    } else if request.transactional_id.is_some() {
        Some(PartitionError::new(
            error::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactions are not supported yet",
        ))
    } else {
        None
    };
    if let Some(e) = &refusal {
        broker
            .refusals
            .produce_refused(ctx.peer, ctx.client_id(), None, e.code, &e.message);
    }
    let mut appended = false;
    let mut responses = Vec::with_capacity(request.topic_data.len());
    // (topic index, partition index, completion) of appends still waiting.
    let mut flushes = Vec::new();
    for topic in request.topic_data {
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        let mut produced = RecordTotals::default();
        for data in topic.partition_data {
            let index = data.index;
            let sent = RecordTotals::of(data.records.as_deref());
            let response = match &refusal {
                Some(e) => partition_error(index, e.clone()),
                None => match append(broker, &topic.name, data) {
                    Ok((r, completion)) => {
                        appended = true;
                        produced.add(sent);
                        flushes.push((responses.len(), partitions.len(), completion));
                        r
                    }
                    Err(e) => {
                        broker.refusals.produce_refused(
                            ctx.peer,
                            ctx.client_id(),
                            Some((&topic.name, index)),
                            e.code,
                            &e.message,
                        );
                        partition_error(index, e)
                    }
                },
            };
            if response.error_code != error::NONE {
                broker.metrics.produce_error(response.error_code);
            }
            partitions.push(response);
        }
        broker.metrics.produced(&topic.name, produced);
        responses.push(TopicProduceResponse {
            name: topic.name,
            partition_responses: partitions,
        });
    }
    if appended {
        broker.replicas.notify_appended();
    }
    for (topic, partition, completion) in flushes {
        if let Err(e) = completion.wait().await {
            let index = responses[topic].partition_responses[partition].index;
            responses[topic].partition_responses[partition] = partition_error(index, e);
        }
    }
    if request.acks == 0 {
        return None;
    }
    Some(ProduceResponse {
        responses,
        throttle_time_ms: 0,
    })
}

fn append(
    broker: &Broker,
    topic: &str,
    data: PartitionProduceData,
) -> Result<(PartitionProduceResponse, AppendCompletion), PartitionError> {
    if topic.starts_with("__") {
        return Err(PartitionError::new(
            error::INVALID_TOPIC_EXCEPTION,
            format!("cannot produce to internal topic {topic}"),
        ));
    }
    let partition = broker.replicas.get(topic, data.index).ok_or_else(|| {
        PartitionError::new(
            error::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        )
    })?;
    let records = data.records.ok_or_else(|| {
        PartitionError::new(error::CORRUPT_MESSAGE, "produce request has no records")
    })?;
    // The batches go from the request frame to the file without a copy:
    // the log writes patched headers beside the untouched record bytes.
    let appended = partition.append(&records)?;
    Ok((
        PartitionProduceResponse {
            index: data.index,
            error_code: error::NONE,
            base_offset: appended.info.base_offset,
            log_append_time_ms: appended.info.log_append_time,
            log_start_offset: appended.log_start_offset,
            ..Default::default()
        },
        appended.completion,
    ))
}
