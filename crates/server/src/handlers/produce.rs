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
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tarn_protocol::error;
use tarn_protocol::messages::produce::{
    BatchIndexAndErrorMessage, NodeEndpoint, PartitionProduceData, PartitionProduceResponse,
    ProduceRequest, ProduceResponse, TopicProduceData, TopicProduceResponse,
};
use tarn_protocol::record_batch::{parse_header, Compression};
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
/// The first version that may carry zstd batches (KIP-110).
const FIRST_ZSTD_VERSION: i16 = 7;

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

/// Kafka's framing of a produce request's records (its batch iterator):
/// the length of the batch at the start of `rest`, or `None` where the
/// iterator ends (fewer bytes than a batch's header or than its length
/// says); a length below the smallest record or an unknown magic is
/// CORRUPT_MESSAGE.
fn next_batch_len(rest: &[u8]) -> Result<Option<usize>, PartitionError> {
    const LOG_OVERHEAD: usize = 12;
    const HEADER_UP_TO_MAGIC: usize = 17;
    const SMALLEST_RECORD: i32 = 14;
    if rest.len() < LOG_OVERHEAD {
        return Ok(None);
    }
    let size = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
    if size < SMALLEST_RECORD {
        return Err(PartitionError::new(
            error::CORRUPT_MESSAGE,
            format!(
                "record size {size} is less than the minimum record overhead ({SMALLEST_RECORD})"
            ),
        ));
    }
    if rest.len() < HEADER_UP_TO_MAGIC {
        return Ok(None);
    }
    let magic = rest[HEADER_UP_TO_MAGIC - 1] as i8;
    if !(0..=2).contains(&magic) {
        return Err(PartitionError::new(
            error::CORRUPT_MESSAGE,
            format!("invalid magic found in record: {magic}"),
        ));
    }
    let len = size as usize + LOG_OVERHEAD;
    Ok((rest.len() >= len).then_some(len))
}

/// Kafka's `ProduceRequest.validateRecords` for v3+, checked before the
/// log sees anything: exactly one whole v2 batch per partition (bytes
/// that hold none, or a batch cut short, are INVALID_RECORD), and no
/// zstd before v7, whose clients cannot read it back.
fn validate_records(version: i16, records: &[u8]) -> Result<(), PartitionError> {
    let Some(first) = next_batch_len(records)? else {
        return Err(PartitionError::new(
            error::INVALID_RECORD,
            format!(
                "Produce v{version} must carry one record batch per partition; this one holds none"
            ),
        ));
    };
    if records[16] != 2 {
        return Err(PartitionError::new(
            error::INVALID_RECORD,
            format!("Produce v{version} carries only record batches of magic 2"),
        ));
    }
    if version < FIRST_ZSTD_VERSION {
        if let Ok(header) = parse_header(records) {
            if header.compression() == Compression::Zstd {
                return Err(PartitionError::new(
                    error::UNSUPPORTED_COMPRESSION_TYPE,
                    format!("Produce v{version} may not carry zstd batches; zstd needs v{FIRST_ZSTD_VERSION}"),
                ));
            }
        }
    }
    if next_batch_len(&records[first..])?.is_some() {
        return Err(PartitionError::new(
            error::INVALID_RECORD,
            format!(
                "Produce v{version} must carry exactly one record batch per partition; \
                 this one holds more"
            ),
        ));
    }
    Ok(())
}

/// Whether any partition's first batch is transactional (Kafka's
/// `hasTransactionalRecords`): such a request needs a transactional id,
/// which Tarn refuses until it supports transactions.
fn has_transactional_records(request: &ProduceRequest) -> bool {
    request.topic_data.iter().any(|topic| {
        topic.partition_data.iter().any(|p| {
            p.records
                .as_deref()
                .and_then(|r| parse_header(r).ok())
                .is_some_and(|h| h.is_transactional())
        })
    })
}

/// Kafka keys a request's partitions by topic and index: a partition
/// given twice is appended and answered once, with the records given
/// last. A topic left with no partitions by that goes too.
fn last_of_each(topic_data: Vec<TopicProduceData>, by_id: bool) -> Vec<TopicProduceData> {
    // Where each partition was named last, keyed without copying names.
    let mut last = HashMap::new();
    for (ti, t) in topic_data.iter().enumerate() {
        let name: &[u8] = if by_id {
            &t.topic_id.0
        } else {
            t.name.as_bytes()
        };
        for (pi, p) in t.partition_data.iter().enumerate() {
            last.insert((name, p.index), (ti, pi));
        }
    }
    let given: usize = topic_data.iter().map(|t| t.partition_data.len()).sum();
    if last.len() == given {
        return topic_data;
    }
    let kept: HashSet<(usize, usize)> = last.into_values().collect();
    topic_data
        .into_iter()
        .enumerate()
        .filter_map(|(ti, mut topic)| {
            let asked = topic.partition_data.len();
            let mut pi = 0;
            topic.partition_data.retain(|_| {
                pi += 1;
                kept.contains(&(ti, pi - 1))
            });
            (asked == 0 || !topic.partition_data.is_empty()).then_some(topic)
        })
        .collect()
}

/// The checks Kafka makes of a partition before its log is involved, in
/// its order; a refusal here reports no log start offset. The partition
/// exists, its records pass [`validate_records`], acks is -1, 0 or 1, and
/// the topic is not internal.
fn precheck(
    broker: &Broker,
    version: i16,
    acks: i16,
    topic: &str,
    data: &PartitionProduceData,
) -> Result<(), PartitionError> {
    // A hosted partition exists; others are looked up in the metadata.
    let exists = broker.replicas.get(topic, data.index).is_some()
        || broker
            .metadata
            .image()
            .topic(topic)
            .is_some_and(|t| t.partitions.iter().any(|p| p.partition_id == data.index));
    if !exists {
        return Err(PartitionError::new(
            error::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        ));
    }
    let records = data.records.as_deref().ok_or_else(|| {
        PartitionError::new(error::CORRUPT_MESSAGE, "produce request has no records")
    })?;
    validate_records(version, records)?;
    if !matches!(acks, -1..=1) {
        return Err(PartitionError::new(
            error::INVALID_REQUIRED_ACKS,
            format!("acks={acks} is invalid; use -1, 0 or 1"),
        ));
    }
    if topic.starts_with("__") {
        return Err(PartitionError::new(
            error::INVALID_TOPIC_EXCEPTION,
            format!("cannot produce to internal topic {topic}"),
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
    } else if request.transactional_id.is_some() || has_transactional_records(&request) {
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
    for topic in last_of_each(request.topic_data, by_id) {
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
                    let version = ctx.version.version;
                    let outcome = precheck(broker, version, acks, &name, &data)
                        .map_err(|e| (e, false))
                        .and_then(|()| {
                            append(broker, acks, timeout, (&name, expected_id), data)
                                .map_err(|e| (e, true))
                        });
                    match outcome {
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
                        Err((e, from_the_log)) => {
                            broker.refusals.produce_refused(
                                ctx.peer,
                                ctx.client_id(),
                                Some((&name, index)),
                                e.code,
                                &e.message,
                            );
                            let log_start_offset = if from_the_log {
                                failed_log_start_offset(broker, &name, index, e.code)
                            } else {
                                -1
                            };
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
    use bytes::Bytes;
    use tarn_protocol::record_batch::RecordBatchBuilder;
    use tarn_storage::RecordError;

    use super::*;

    fn one_batch() -> Vec<u8> {
        RecordBatchBuilder::new()
            .record(1, Some(b"k"), None)
            .build()
    }

    #[test]
    fn a_partition_carries_exactly_one_whole_batch() {
        assert!(validate_records(9, &one_batch()).is_ok());
        let code = |version, bytes: &[u8]| validate_records(version, bytes).map_err(|e| e.code);
        let two = [one_batch(), one_batch()].concat();
        assert_eq!(code(7, &two), Err(error::INVALID_RECORD));
        // Kafka's iterator ends at bytes too few for a batch: none found.
        assert_eq!(code(9, b"garbage"), Err(error::INVALID_RECORD));
        assert_eq!(code(9, b""), Err(error::INVALID_RECORD));
        let partial = one_batch();
        assert_eq!(
            code(9, &partial[..partial.len() - 1]),
            Err(error::INVALID_RECORD)
        );
        // A batch followed by fewer bytes than a header: one batch.
        let trailing = [one_batch(), vec![0; 5]].concat();
        assert!(validate_records(9, &trailing).is_ok());
        // A length below the smallest record, or an unknown magic.
        let mut short = one_batch();
        short[8..12].copy_from_slice(&3i32.to_be_bytes());
        assert_eq!(code(9, &short), Err(error::CORRUPT_MESSAGE));
        let mut magic = one_batch();
        magic[16] = 7;
        assert_eq!(code(9, &magic), Err(error::CORRUPT_MESSAGE));
        let mut old = one_batch();
        old[16] = 1;
        assert_eq!(code(9, &old), Err(error::INVALID_RECORD));
        let zstd = RecordBatchBuilder::new()
            .compression(Compression::Zstd)
            .record(1, Some(b"k"), None)
            .build();
        assert_eq!(code(6, &zstd), Err(error::UNSUPPORTED_COMPRESSION_TYPE));
        assert!(validate_records(7, &zstd).is_ok());
    }

    #[test]
    fn transactional_batches_are_found_in_any_partition() {
        let batch = |transactional| {
            Bytes::from(
                RecordBatchBuilder::new()
                    .producer(1, 0, 0)
                    .transactional(transactional)
                    .record(1, Some(b"k"), None)
                    .build(),
            )
        };
        let partition = |index, records| PartitionProduceData {
            index,
            records: Some(records),
        };
        let mut request = ProduceRequest {
            topic_data: vec![TopicProduceData {
                name: "t".into(),
                partition_data: vec![partition(0, batch(false)), partition(1, batch(false))],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(!has_transactional_records(&request));
        request.topic_data[0].partition_data[1] = partition(1, batch(true));
        assert!(has_transactional_records(&request));
    }

    #[test]
    fn a_partition_given_twice_is_appended_once_with_its_last_records() {
        let partition = |index, byte: u8| PartitionProduceData {
            index,
            records: Some(Bytes::from(vec![byte])),
        };
        let topic = |name: &str, partitions| TopicProduceData {
            name: name.into(),
            partition_data: partitions,
            ..Default::default()
        };
        let kept = last_of_each(
            vec![
                topic("a", vec![partition(0, 1), partition(1, 2), partition(0, 3)]),
                topic("b", vec![partition(0, 4)]),
                topic("a", vec![partition(1, 5)]),
                topic("c", vec![]),
            ],
            false,
        );
        let shape: Vec<(String, Vec<(i32, u8)>)> = kept
            .iter()
            .map(|t| {
                let parts = t
                    .partition_data
                    .iter()
                    .map(|p| (p.index, p.records.as_ref().unwrap()[0]))
                    .collect();
                (t.name.clone(), parts)
            })
            .collect();
        let distinct = vec![
            topic("a", vec![partition(0, 1), partition(1, 2)]),
            topic("b", vec![partition(0, 4)]),
        ];
        assert_eq!(last_of_each(distinct.clone(), false), distinct);
        assert_eq!(
            shape,
            vec![
                ("a".to_owned(), vec![(0, 3)]),
                ("b".to_owned(), vec![(0, 4)]),
                ("a".to_owned(), vec![(1, 5)]),
                ("c".to_owned(), vec![]),
            ]
        );
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
