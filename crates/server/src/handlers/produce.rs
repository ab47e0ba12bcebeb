//! Produce: validates each partition's record batch (exactly one per
//! partition, as Kafka requires; the log checks it against its records,
//! see `tarn_storage::log_validator`) and appends it as received,
//! recompressed only when the topic's `compression.type` names another
//! codec than the batch's.
//!
//! Acks as Kafka: acks=1 is answered once the leader has appended; acks=-1
//! (all) is refused NOT_ENOUGH_REPLICAS before anything is appended when
//! the ISR is smaller than `min.insync.replicas`, and otherwise answered
//! once the high watermark covers the append, i.e. every ISR member has
//! it (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank meanwhile,
//! REQUEST_TIMED_OUT after the request's timeout). Each partition waits on
//! its own high watermark: other partitions and connections go on.
//! Versions 0-2 are advertised, because librdkafka turns compression off
//! when Produce does not start at v0, but answered UNSUPPORTED_VERSION:
//! they carry the old message formats. From v10 a partition refused with
//! NOT_LEADER_OR_FOLLOWER names the leader this broker knows, with its
//! endpoint (KIP-951); v11 and v12 change nothing a non-transactional
//! producer sends (and Tarn refuses transactional ones); from v13 topics
//! are named by id: an id this broker does not know is UNKNOWN_TOPIC_ID,
//! and one whose name leads to a log of another topic id (a topic deleted
//! and made again under its name, while this broker catches up)
//! UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers both.
//!
//! Durability: every append answers with a completion (see `durability`),
//! and the response waits for all of them: when an append reached the
//! partition's `flush.messages`, that is until the group-commit thread has
//! fsynced it (Kafka flushes before acknowledging, too); concurrent waiters
//! share fsyncs. A failed fsync answers KAFKA_STORAGE_ERROR for that
//! partition.
//!
//! A refused partition answers the Kafka error code with a message, and
//! from v8 on the indexes of the refused records (`record_errors`) when
//! the log validator refused individual records; every refusal is logged
//! through the broker's rate-limited refusal log.
use std::sync::Arc;
use std::time::Duration;

use tarn_protocol::error;
use tarn_protocol::messages::produce::{
    BatchIndexAndErrorMessage, NodeEndpoint, PartitionProduceData, PartitionProduceResponse,
    ProduceRequest, ProduceResponse, TopicProduceResponse,
};
use tarn_protocol::record_batch::parse_header;
use tarn_protocol::Uuid;

use tarn_replication::durability::AppendCompletion;
use tarn_replication::replica_manager::PartitionError;

use super::{ApiSpec, LeaderHints, RequestContext};
use crate::broker::Broker;
use crate::metrics::RecordTotals;

pub const KEY: i16 = 0;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "Produce",
    min_version: 0,
    max_version: 13,
    flexible_min: 9,
};
/// The first version whose record sets are v2 record batches.
const FIRST_BATCH_VERSION: i16 = 3;
/// The first version whose refusals name the leader (KIP-951).
const FIRST_LEADER_HINT_VERSION: i16 = 10;
/// The first version that names topics by id (KIP-516).
const FIRST_TOPIC_ID_VERSION: i16 = 13;

fn partition_error(index: i32, e: PartitionError) -> PartitionProduceResponse {
    PartitionProduceResponse {
        index,
        error_code: e.code,
        base_offset: -1,
        error_message: Some(e.message),
        record_errors: e
            .record_errors
            .into_iter()
            .map(|r| BatchIndexAndErrorMessage {
                batch_index: r.batch_index,
                batch_index_error_message: Some(r.message),
            })
            .collect(),
        ..Default::default()
    }
}

/// The log start offset a refused append reports, as Kafka's
/// ReplicaManager does: -1 for errors that say nothing of the log (unknown
/// or unled partition, a batch too large or corrupt, a storage failure),
/// the partition's log start offset for the rest (record validation,
/// producer sequence and epoch errors).
fn failed_log_start_offset(broker: &Broker, topic: &str, index: i32, code: i16) -> i64 {
    const NO_LOG_INFO: [i16; 6] = [
        error::UNKNOWN_TOPIC_OR_PARTITION,
        error::NOT_LEADER_OR_FOLLOWER,
        error::MESSAGE_TOO_LARGE,
        error::RECORD_LIST_TOO_LARGE,
        error::CORRUPT_MESSAGE,
        error::KAFKA_STORAGE_ERROR,
    ];
    if NO_LOG_INFO.contains(&code) {
        return -1;
    }
    broker
        .replicas
        .get(topic, index)
        .and_then(|p| p.offsets().ok())
        .map_or(-1, |o| o.log_start_offset)
}

/// Kafka's `ProduceRequest.validateRecords` for v3+: a partition's records
/// are exactly one batch. And a transactional batch needs a transactional
/// id, which Tarn refuses until it supports transactions.
fn check_single_batch(version: i16, records: &[u8]) -> Result<(), PartitionError> {
    // A batch that does not parse is left to the log, which names the fault.
    let Ok(header) = parse_header(records) else {
        return Ok(());
    };
    if header.total_size() < records.len() {
        return Err(PartitionError::new(
            error::INVALID_RECORD,
            format!(
                "Produce v{version} must carry exactly one record batch per partition; \
                 this one holds more"
            ),
        ));
    }
    if header.is_transactional() {
        return Err(PartitionError::new(
            error::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "a transactional batch needs a transactional id; transactions are not supported yet",
        ));
    }
    Ok(())
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
    let timeout = Duration::from_millis(request.timeout_ms.max(0) as u64);
    let mut responses = Vec::with_capacity(request.topic_data.len());
    // (topic index, partition index, completion) of appends still waiting.
    let mut flushes = Vec::new();
    let by_id = ctx.version.version >= FIRST_TOPIC_ID_VERSION;
    for topic in request.topic_data {
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        let mut produced = RecordTotals::default();
        // From v13 the name comes from the id; an id this broker does not
        // know refuses the topic's every partition.
        let (name, topic_refusal) = if by_id {
            match broker.metadata.image().topic_by_id(&topic.topic_id) {
                Some(t) => (t.name.clone(), None),
                None => (
                    topic.topic_id.to_string(),
                    Some(PartitionError::new(
                        error::UNKNOWN_TOPIC_ID,
                        format!("this server does not know topic id {}", topic.topic_id),
                    )),
                ),
            }
        } else {
            (topic.name, None)
        };
        let expected_id = by_id.then_some(topic.topic_id);
        for data in topic.partition_data {
            let index = data.index;
            let sent = RecordTotals::of(data.records.as_deref());
            let response = match refusal.as_ref().or(topic_refusal.as_ref()) {
                Some(e) => partition_error(index, e.clone()),
                None => {
                    let acks = request.acks;
                    match append(
                        broker,
                        ctx.version.version,
                        acks,
                        timeout,
                        (&name, expected_id),
                        data,
                    ) {
                        Ok((r, completion, replication)) => {
                            appended = true;
                            produced.add(sent);
                            flushes.push((
                                responses.len(),
                                partitions.len(),
                                completion,
                                replication,
                            ));
                            r
                        }
                        Err(e) => {
                            broker.refusals.produce_refused(
                                ctx.peer,
                                ctx.client_id(),
                                Some((&name, index)),
                                e.code,
                                &e.message,
                            );
                            let log_start_offset =
                                failed_log_start_offset(broker, &name, index, e.code);
                            PartitionProduceResponse {
                                log_start_offset,
                                ..partition_error(index, e)
                            }
                        }
                    }
                }
            };
            if response.error_code != error::NONE {
                broker.metrics.produce_error(response.error_code);
            }
            partitions.push(response);
        }
        if topic_refusal.is_none() {
            broker.metrics.produced(&name, produced);
        }
        responses.push(TopicProduceResponse {
            name,
            topic_id: topic.topic_id,
            partition_responses: partitions,
        });
    }
    if appended {
        broker.replicas.notify_appended();
    }
    for (topic, partition, completion, replication) in flushes {
        let mut outcome = completion.wait().await;
        if let (Ok(()), Some(replicated)) = (&outcome, replication) {
            outcome = replicated.wait().await;
        }
        if let Err(e) = outcome {
            let index = responses[topic].partition_responses[partition].index;
            broker.metrics.produce_error(e.code);
            responses[topic].partition_responses[partition] = partition_error(index, e);
        }
    }
    if request.acks == 0 {
        return None;
    }
    let node_endpoints = if ctx.version.version >= FIRST_LEADER_HINT_VERSION {
        leader_hints(broker, &mut responses)
    } else {
        Vec::new()
    };
    Some(ProduceResponse {
        responses,
        throttle_time_ms: 0,
        node_endpoints,
    })
}

/// Names the leader this broker knows in each partition refused with
/// NOT_LEADER_OR_FOLLOWER, as Kafka does from Produce v10 (KIP-951);
/// returns the leaders' endpoints. Run on the final answers, so that a
/// leadership lost while acks=all waited is named too.
fn leader_hints(broker: &Broker, responses: &mut [TopicProduceResponse]) -> Vec<NodeEndpoint> {
    let image = broker.metadata.image();
    let mut hints = LeaderHints::default();
    for topic in responses.iter_mut() {
        for p in topic.partition_responses.iter_mut() {
            if p.error_code == error::NOT_LEADER_OR_FOLLOWER {
                p.current_leader = hints.leader(&image, &topic.name, p.index);
            }
        }
    }
    hints.endpoints
}

/// Appends one partition's batch (of the topic named, which from v13 must
/// have the id expected); the answer, the completion of its
/// durability, and for acks=all the completion of its replication (waited
/// for after durability, at most `timeout`).
fn append(
    broker: &Broker,
    version: i16,
    acks: i16,
    timeout: Duration,
    (topic, expected_id): (&str, Option<Uuid>),
    data: PartitionProduceData,
) -> Result<
    (
        PartitionProduceResponse,
        AppendCompletion,
        Option<AppendCompletion>,
    ),
    PartitionError,
> {
    if topic.starts_with("__") {
        return Err(PartitionError::new(
            error::INVALID_TOPIC_EXCEPTION,
            format!("cannot produce to internal topic {topic}"),
        ));
    }
    let partition = broker.leader_partition(topic, data.index)?;
    if let Some(id) = expected_id.filter(|id| *id != partition.topic_id) {
        return Err(PartitionError::new(
            error::UNKNOWN_TOPIC_OR_PARTITION,
            format!(
                "partition {topic}-{} here belongs to topic id {}, not {id}",
                data.index, partition.topic_id
            ),
        ));
    }
    let records = data.records.ok_or_else(|| {
        PartitionError::new(error::CORRUPT_MESSAGE, "produce request has no records")
    })?;
    check_single_batch(version, &records)?;
    if acks == -1 {
        partition.check_enough_replicas()?;
    }
    // The batches go from the request frame to the file without a copy:
    // the log writes patched headers beside the untouched record bytes.
    let appended = partition.append(&records)?;
    let end = appended.info.last_offset + 1;
    let replication =
        (acks == -1).then(|| partition.replication_completion(end, appended.leader_epoch, timeout));
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
        replication,
    ))
}

#[cfg(test)]
mod tests {
    use tarn_protocol::record_batch::RecordBatchBuilder;
    use tarn_storage::RecordError;

    use super::*;

    fn one_batch() -> Vec<u8> {
        RecordBatchBuilder::new()
            .record(1, Some(b"k"), None)
            .build()
    }

    #[test]
    fn a_partition_carries_exactly_one_batch() {
        assert!(check_single_batch(9, &one_batch()).is_ok());
        let two = [one_batch(), one_batch()].concat();
        let e = check_single_batch(7, &two).unwrap_err();
        assert_eq!(e.code, error::INVALID_RECORD);
        // Bytes that are not a batch are the log's to name.
        assert!(check_single_batch(9, b"garbage").is_ok());
        let partial = one_batch();
        assert!(check_single_batch(9, &partial[..partial.len() - 1]).is_ok());
    }

    #[test]
    fn transactional_batches_need_a_transactional_id() {
        let batch = RecordBatchBuilder::new()
            .producer(1, 0, 0)
            .transactional(true)
            .record(1, Some(b"k"), None)
            .build();
        let e = check_single_batch(9, &batch).unwrap_err();
        assert_eq!(e.code, error::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }

    #[test]
    fn refused_records_become_record_errors() {
        let e = PartitionError {
            code: error::INVALID_RECORD,
            message: "2 records".into(),
            record_errors: vec![
                RecordError {
                    batch_index: 3,
                    message: "no key".into(),
                },
                RecordError {
                    batch_index: 13,
                    message: "no key".into(),
                },
            ],
        };
        let answer = partition_error(4, e);
        assert_eq!(
            (answer.index, answer.error_code, answer.base_offset),
            (4, 87, -1)
        );
        let indexes: Vec<i32> = answer.record_errors.iter().map(|r| r.batch_index).collect();
        assert_eq!(indexes, vec![3, 13]);
        assert_eq!(answer.error_message.as_deref(), Some("2 records"));
    }
}
