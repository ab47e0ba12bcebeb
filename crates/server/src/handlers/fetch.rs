//! Fetch: whole record batches from each requested partition, waiting up
//! to `max_wait_ms` for `min_bytes` of data. The wait is woken by appends
//! and high watermark moves (the replica manager's data version: a
//! leader's produce, a follower's fetch or an ISR change on a leader, a
//! follower's copy of its leader's high watermark, a coordinator's write)
//! and by leader changes, not by polling; when it lapses with none of
//! these, the read it began with is the answer.
//!
//! Record data is never read into memory: each partition's records are a
//! file range of its segment, which the connection sends with sendfile(2)
//! after the bytes of the response before it.
//!
//! Fetch sessions (KIP-227, `crate::fetch_session`): a full fetch with
//! epoch 0 creates a session when the cache has room; an incremental fetch
//! names only changed partitions and is answered with only the partitions
//! that have news. The wait for `min_bytes` counts every partition of the
//! session, as Kafka's does.
//!
//! From v13 topics are named by topic id (KIP-516), in requests, forgotten
//! topics and responses; an id this broker does not know is answered
//! UNKNOWN_TOPIC_ID for each of its partitions. From v16 a partition
//! refused with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the
//! leader this broker knows, with its endpoint (KIP-951). v18 adds the
//! high watermark a fetching replica knows (KIP-1166), which is read and
//! not used: KRaft's voters send it, consumers have none, and Tarn's
//! followers fetch at v15 (their leader wakes their wait on new records).
//!
//! A follower's fetch (a replica id: `replica_id` before v15, the replica
//! state from v15) reads to the log end rather than the high watermark,
//! and tells the leader how far the follower has got: that moves the high
//! watermark and may bring the follower back into the ISR (an
//! AlterPartition to the controller, sent without holding up the answer).
//! A follower whose last fetched epoch diverges from this log is told
//! where (`diverging_epoch`) and truncates before fetching on; so is a
//! consumer (the Java consumer's truncation detection, KIP-320), which
//! is told OFFSET_OUT_OF_RANGE for an epoch this log cannot place.
//!
//! Limits follow Kafka (KIP-74): each partition returns at most
//! `partition_max_bytes` and the response at most `max_bytes`, except that
//! the first batch of the first partition with data is returned whole even
//! when it is larger, so a consumer can always make progress.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tarn_protocol::error;
use tarn_protocol::messages::fetch::{
    FetchRequest, FetchResponseOut, FetchableTopicResponseOut, NodeEndpoint, PartitionDataOut,
};
use tarn_protocol::records::Records;

use tarn_metadata::MetadataImage;
use tarn_protocol::messages::fetch::EpochEndOffset;
use tarn_replication::replica_manager::{LogOffsets, Partition, PartitionError, ReadLimit};
use tarn_replication::roles::{FollowerFetchOutcome, FollowerRead};

use super::{ApiSpec, LeaderHints, RequestContext};
use crate::broker::Broker;
use crate::fetch_session::{FetchContext, FetchPartitionParams, INVALID_SESSION_ID};
use crate::replication_quota::{self, Side};

pub const KEY: i16 = 1;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "Fetch",
    min_version: 4,
    max_version: 18,
    flexible_min: 12,
};

/// The first version whose refusals name the leader (KIP-951).
const FIRST_LEADER_HINT_VERSION: i16 = 16;
/// A bound on how long any fetch may wait, whatever the client asks.
const MAX_WAIT_MS_LIMIT: i32 = 60_000;
/// The topic config that makes its leaders throttle some followers.
const LEADER_THROTTLED_REPLICAS: &str = "leader.replication.throttled.replicas";

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: FetchRequest,
) -> FetchResponseOut {
    let by_id = ctx.version.version >= 13;
    // From v15 a follower names itself and its broker epoch in
    // ReplicaState; before, by replica id alone.
    let (replica_id, replica_epoch) = if ctx.version.version >= 15 {
        (
            request.replica_state.replica_id,
            request.replica_state.replica_epoch,
        )
    } else {
        (request.replica_id, -1)
    };
    let context = broker
        .fetch_sessions
        .new_context(&request, replica_id >= 0, now_ms());
    if let FetchContext::Error(code) = context {
        return FetchResponseOut {
            throttle_time_ms: 0,
            error_code: code,
            session_id: INVALID_SESSION_ID,
            responses: Vec::new(),
            node_endpoints: Vec::new(),
        };
    }
    let wanted = context.fetch_list();
    let read_committed = request.isolation_level == 1;
    let reader = Reader {
        follower: (replica_id >= 0).then_some((replica_id, replica_epoch)),
        read_committed,
        by_id,
        from_any_replica: ctx.version.version >= FIRST_FOLLOWER_READ_VERSION,
        client_rack: &request.rack_id,
    };
    let mut changes = broker.replicas.subscribe();
    let leadership = broker.replicas.subscribe_leadership();
    let wait_ms = request.max_wait_ms.clamp(0, MAX_WAIT_MS_LIMIT) as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let results = loop {
        verify_on_blocking_thread(broker, &wanted, by_id).await;
        // Mark the current version seen before reading, so an append that
        // lands after this read wakes the wait below.
        changes.borrow_and_update();
        let (results, bytes, any_error) = read_all(broker, &wanted, request.max_bytes, reader);
        let satisfied = bytes >= request.min_bytes.max(0) as usize || any_error;
        if satisfied || tokio::time::Instant::now() >= deadline {
            break results;
        }
        let _waiting = broker.metrics.fetch_waiting();
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => continue,
            // Nothing was appended, no high watermark moved and no leader
            // changed since the read: its answer stands. An idle
            // follower's session fetch costs one read of its partitions,
            // not two.
            Err(_)
                if matches!(changes.has_changed(), Ok(false))
                    && matches!(leadership.has_changed(), Ok(false)) =>
            {
                break results
            }
            Ok(Err(_)) | Err(_) => break read_all(broker, &wanted, request.max_bytes, reader).0,
        }
    };
    let (session_id, results) = match context {
        FetchContext::Sessionless(_) => (INVALID_SESSION_ID, results),
        FetchContext::Full { privileged, .. } => {
            let id = broker
                .fetch_sessions
                .maybe_create(privileged, &results, now_ms());
            (id, results)
        }
        FetchContext::Incremental(session) => {
            let mut session = session.lock();
            (session.id, session.filter_response(results))
        }
        FetchContext::Error(_) => unreachable!("answered above"),
    };
    let mut responses = group_by_topic(broker, results, by_id);
    let node_endpoints = if ctx.version.version >= FIRST_LEADER_HINT_VERSION {
        leader_hints(broker, &mut responses)
    } else {
        Vec::new()
    };
    let response = FetchResponseOut {
        throttle_time_ms: 0,
        error_code: error::NONE,
        session_id,
        responses,
        node_endpoints,
    };
    broker.metrics.fetched(&response);
    response
}

/// Names the leader this broker knows in each partition refused because
/// it is not (or no longer, by epoch) that partition's leader, as Kafka
/// does from Fetch v16 (KIP-951); returns the leaders' endpoints.
fn leader_hints(broker: &Broker, responses: &mut [FetchableTopicResponseOut]) -> Vec<NodeEndpoint> {
    let image = broker.metadata.image();
    let mut hints = LeaderHints::default();
    for topic in responses.iter_mut() {
        for p in topic.partitions.iter_mut() {
            if matches!(
                p.error_code,
                error::NOT_LEADER_OR_FOLLOWER | error::FENCED_LEADER_EPOCH
            ) {
                p.current_leader = hints.leader(&image, &topic.topic, p.partition_index);
            }
        }
    }
    hints.endpoints
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Puts consecutive partitions of one topic under one topic entry, keeping
/// their order. Each entry carries the topic's name even from v13, where
/// only its id is sent, so the per-topic metrics can name it.
fn group_by_topic(
    broker: &Broker,
    results: Vec<(FetchPartitionParams, PartitionDataOut)>,
    by_id: bool,
) -> Vec<FetchableTopicResponseOut> {
    let image = broker.metadata.image();
    let mut topics: Vec<FetchableTopicResponseOut> = Vec::new();
    let mut last_key: Option<(String, tarn_protocol::Uuid)> = None;
    for (params, data) in results {
        let key = (params.topic.clone(), params.topic_id);
        match topics.last_mut() {
            Some(last) if last_key.as_ref() == Some(&key) => last.partitions.push(data),
            _ => topics.push(FetchableTopicResponseOut {
                topic: topic_name(&image, &params, by_id).unwrap_or_default(),
                topic_id: params.topic_id,
                partitions: vec![data],
            }),
        }
        last_key = Some(key);
    }
    topics
}

/// The name of the topic `p` reads: given (up to v12) or found from its
/// id (v13+); `None` when the id is unknown.
fn topic_name(image: &MetadataImage, p: &FetchPartitionParams, by_id: bool) -> Option<String> {
    if by_id {
        image.topic_by_id(&p.topic_id).map(|t| t.name.clone())
    } else {
        Some(p.topic.clone())
    }
}

/// The partition, unless the request names its topic by an id other than
/// the one the partition's log belongs to: INCONSISTENT_TOPIC_ID, as
/// Kafka answers. The name was found from the id in this broker's image,
/// which is replaced before the hosted logs follow it: while a deleted
/// topic's name is taken again, the name can lead to the old topic's log,
/// whose records must not be served as the new topic's.
fn consistent_topic_id(
    partition: Arc<Partition>,
    p: &FetchPartitionParams,
    by_id: bool,
) -> Result<Arc<Partition>, PartitionError> {
    if by_id && partition.topic_id != p.topic_id {
        return Err(PartitionError::new(
            error::INCONSISTENT_TOPIC_ID,
            "Topic ID in the fetch session did not match the topic ID in the log.",
        ));
    }
    Ok(partition)
}

/// Runs the CRC checks the reads of `wanted` need (bytes of a segment
/// this process did not write, read for the first time: up to a whole
/// segment) on tokio's blocking pool, so they hold up neither the worker
/// thread that serves other connections nor the partitions' locks. A check
/// that fails is not reported here: the read that follows runs it again
/// and answers its error.
async fn verify_on_blocking_thread(
    broker: &Arc<Broker>,
    wanted: &[FetchPartitionParams],
    by_id: bool,
) {
    let image = broker.metadata.image();
    let verifiers: Vec<_> = wanted
        .iter()
        .filter_map(|p| {
            broker
                .replicas
                .get(&topic_name(&image, p, by_id)?, p.partition)?
                .verification_for(p.fetch_offset)
        })
        .collect();
    if verifiers.is_empty() {
        return;
    }
    let checks =
        tokio::task::spawn_blocking(move || verifiers.iter().filter(|v| v.run().is_err()).count());
    match checks.await {
        Ok(0) => {}
        Ok(failed) => tracing::debug!(
            failed,
            "segment checks failed; the reads will answer the errors"
        ),
        Err(e) => tracing::error!(error = %e, "segment check task failed"),
    }
}

type ReadResults = Vec<(FetchPartitionParams, PartitionDataOut)>;

/// What a partition's read came to.
enum Read {
    Here(FollowerRead),
    /// The consumer should read from this replica (KIP-392).
    Elsewhere(i32, LogOffsets),
}

/// Who reads, and how.
#[derive(Debug, Clone, Copy)]
struct Reader<'a> {
    /// A follower's replica id and broker epoch (-1: not said); `None`
    /// for a consumer.
    follower: Option<(i32, i64)>,
    read_committed: bool,
    by_id: bool,
    /// A consumer may read from any replica hosted here (KIP-392), up to
    /// its high watermark; before v11 only from the leader.
    from_any_replica: bool,
    /// The consumer's `client.rack` (v11+), for the preferred read replica.
    client_rack: &'a str,
}

/// The first Fetch version with the consumer's rack (KIP-392): from it
/// on, consumers may read from followers.
const FIRST_FOLLOWER_READ_VERSION: i16 = 11;

/// The replica a consumer in `client_rack` should read `partition` from
/// when the leader would rather it read elsewhere (KIP-392 with
/// `replica.selector.class` = RackAwareReplicaSelector): the leader itself
/// when it is in that rack, else the in-sync follower there that is
/// furthest along. `None`: read from the leader.
fn preferred_read_replica(
    broker: &Broker,
    image: &MetadataImage,
    partition: &Partition,
    client_rack: &str,
) -> Option<i32> {
    if client_rack.is_empty()
        || broker.config.get("replica.selector.class") != tarn_config::RACK_AWARE_REPLICA_SELECTOR
    {
        return None;
    }
    let rack_of = |id: i32| {
        image
            .brokers
            .get(&id)
            .filter(|b| !b.fenced)
            .and_then(|b| b.rack.clone())
    };
    if rack_of(broker.node_id).as_deref() == Some(client_rack) {
        return None;
    }
    partition
        .isr()
        .into_iter()
        .filter(|r| *r != broker.node_id && rack_of(*r).as_deref() == Some(client_rack))
        .max_by_key(|r| partition.follower_log_end_offset(*r))
}

/// Acts on what a follower's fetch of `partition` changed: wakes
/// consumers when the high watermark moved, and sends an ISR expansion
/// to the controller in the background.
fn follow_up(broker: &Arc<Broker>, partition: &Arc<Partition>, outcome: FollowerFetchOutcome) {
    if outcome.high_watermark_moved {
        broker.replicas.notify_appended();
    }
    if let Some(change) = outcome.expand_isr {
        crate::replica_fetcher::send_isr_change(broker, partition.clone(), change);
    }
}

/// A partition's answer with data (or none yet): its offsets and
/// `records`. Kafka lists aborted transactions (none here: no transactions
/// yet) only to read_committed fetches.
fn answered(
    partition_index: i32,
    offsets: LogOffsets,
    read_committed: bool,
    records: Records,
) -> PartitionDataOut {
    PartitionDataOut {
        partition_index,
        error_code: error::NONE,
        high_watermark: offsets.high_watermark,
        last_stable_offset: offsets.high_watermark,
        log_start_offset: offsets.log_start_offset,
        aborted_transactions: read_committed.then(Vec::new),
        records: Some(records),
        ..Default::default()
    }
}

/// Reads every partition of `wanted` in order within `max_bytes`; returns
/// the results, the record bytes read and whether any partition failed
/// (or, for a follower, diverged).
fn read_all(
    broker: &Arc<Broker>,
    wanted: &[FetchPartitionParams],
    max_bytes: i32,
    reader: Reader,
) -> (ReadResults, usize, bool) {
    let Reader {
        follower,
        read_committed,
        by_id,
        from_any_replica,
        client_rack,
    } = reader;
    let image = broker.metadata.image();
    let now_ms = now_ms() as i64;
    let now = tokio::time::Instant::now();
    // Read only when some topic is throttled (see `replication_quota`).
    let mut effective: Option<tarn_config::BrokerConfig> = None;
    let mut budget = max_bytes.max(0) as usize;
    let mut total = 0usize;
    let mut any_error = false;
    let mut results = Vec::with_capacity(wanted.len());
    for p in wanted {
        let limit = (p.partition_max_bytes.max(0) as usize).min(budget);
        let name = topic_name(&image, p, by_id);
        let hosted = match name.as_deref() {
            None => Err(PartitionError::new(
                error::UNKNOWN_TOPIC_ID,
                "This server does not host this topic ID.",
            )),
            Some(name) if follower.is_none() && from_any_replica => {
                broker.hosted_partition(name, p.partition)
            }
            Some(name) => broker.leader_partition(name, p.partition),
        }
        .and_then(|partition| consistent_topic_id(partition, p, by_id));
        // A leader's throttle for this follower, when it applies: the
        // topic names the replica here and the follower is out of the ISR.
        let throttle = match (follower, name.as_deref(), &hosted) {
            (Some((replica, _)), Some(name), Ok(partition))
                if image
                    .topic(name)
                    .is_some_and(|t| t.configs.contains_key(LEADER_THROTTLED_REPLICAS)) =>
            {
                let config =
                    effective.get_or_insert_with(|| broker.config_view(&image).effective());
                replication_quota::throttle_for(
                    &image,
                    config,
                    Side::Leader,
                    name,
                    p.partition,
                    broker.node_id,
                )
                .filter(|_| !partition.isr().contains(&replica))
            }
            _ => None,
        };
        let held_back =
            throttle.is_some_and(|t| broker.leader_quota.exceeded(t.limit, now, t.windows));
        let result = hosted.clone().and_then(|partition| {
            partition.check_epoch(p.current_leader_epoch)?;
            match follower {
                Some((replica, replica_epoch)) if held_back => {
                    // The follower's position counts; it gets no bytes.
                    broker
                        .metrics
                        .throttled_leader
                        .fetch_add(1, Ordering::Relaxed);
                    match partition.follower_position(
                        replica,
                        replica_epoch,
                        p.fetch_offset,
                        p.last_fetched_epoch,
                        now_ms,
                    )? {
                        Err(diverging) => Ok(diverging),
                        Ok(outcome) => {
                            follow_up(broker, &partition, outcome);
                            Ok(FollowerRead::Records {
                                region: None,
                                offsets: partition.offsets()?,
                            })
                        }
                    }
                }
                Some((replica, replica_epoch)) => {
                    let (read, outcome) = partition.follower_fetch(
                        replica,
                        replica_epoch,
                        p.fetch_offset,
                        p.last_fetched_epoch,
                        limit,
                        now_ms,
                    )?;
                    follow_up(broker, &partition, outcome);
                    Ok(read)
                }
                None => {
                    // As Kafka: a consumer sent elsewhere first, then its
                    // last fetched epoch checked here.
                    if partition.role() == tarn_replication::replica_manager::Role::Leader {
                        if let Some(replica) =
                            preferred_read_replica(broker, &image, &partition, client_rack)
                        {
                            return Ok(Read::Elsewhere(replica, partition.offsets()?));
                        }
                    }
                    if let Some(diverging) =
                        partition.consumer_divergence(p.fetch_offset, p.last_fetched_epoch)?
                    {
                        return Ok(Read::Here(diverging));
                    }
                    partition
                        .read_region(p.fetch_offset, limit, total == 0, ReadLimit::HighWatermark)
                        .map(|(region, offsets)| FollowerRead::Records { region, offsets })
                }
            }
            .map(Read::Here)
        });
        let data = match result {
            Ok(Read::Elsewhere(replica, offsets)) => PartitionDataOut {
                preferred_read_replica: replica,
                ..answered(p.partition, offsets, read_committed, Records::default())
            },
            Ok(Read::Here(FollowerRead::Diverging {
                epoch,
                end_offset,
                offsets,
            })) => {
                any_error = true;
                PartitionDataOut {
                    diverging_epoch: EpochEndOffset { epoch, end_offset },
                    ..answered(p.partition, offsets, read_committed, Records::default())
                }
            }
            Ok(Read::Here(FollowerRead::Records { region, offsets })) => {
                let records = match region {
                    Some(region) => Records::file(region),
                    None => Records::default(),
                };
                total += records.len();
                budget = budget.saturating_sub(records.len());
                if let Some(t) = throttle {
                    broker
                        .leader_quota
                        .record(records.len() as u64, now, t.windows);
                }
                answered(p.partition, offsets, read_committed, records)
            }
            // As Kafka: an error carries no offsets (-1), and only a
            // partition it does not know gets an empty aborted list.
            Err(e) => {
                any_error = true;
                PartitionDataOut {
                    partition_index: p.partition,
                    error_code: e.code,
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    aborted_transactions: hosted.is_err().then(Vec::new),
                    records: Some(Records::default()),
                    ..Default::default()
                }
            }
        };
        results.push((p.clone(), data));
    }
    (results, total, any_error)
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::fetch::{FetchPartition, FetchTopic, ForgottenTopic};
    use tarn_protocol::record_batch::RecordBatchBuilder;

    use super::*;

    fn request(session_id: i32, epoch: i32, partitions: &[(i32, i64)]) -> FetchRequest {
        FetchRequest {
            max_wait_ms: 0,
            min_bytes: 0,
            session_id,
            session_epoch: epoch,
            topics: if partitions.is_empty() {
                vec![]
            } else {
                vec![FetchTopic {
                    topic: "s".into(),
                    partitions: partitions
                        .iter()
                        .map(|(partition, offset)| FetchPartition {
                            partition: *partition,
                            fetch_offset: *offset,
                            partition_max_bytes: 1 << 20,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }]
            },
            ..Default::default()
        }
    }

    /// (partition, record bytes, high watermark) of each partition answered.
    fn answered(response: &FetchResponseOut) -> Vec<(i32, bool, i64)> {
        response
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| {
                let has_records = p.records.as_ref().is_some_and(|r| !r.is_empty());
                (p.partition_index, has_records, p.high_watermark)
            })
            .collect()
    }

    fn append(broker: &Broker, partition: i32) {
        let batch = RecordBatchBuilder::new()
            .record(1_000, None, Some(b"v"))
            .build();
        let appended = broker
            .replicas
            .get("s", partition)
            .unwrap()
            .append(&batch)
            .unwrap();
        // Default flush settings: the append is acknowledged as it is.
        assert!(appended.completion.is_ready());
        broker.replicas.notify_appended();
    }

    #[tokio::test]
    async fn a_session_answers_only_partitions_with_news() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "s", 3);
        let ctx = crate::testing::request_context(&SPEC, 12);
        append(&broker, 0);
        append(&broker, 1);

        // A full fetch (epoch 0) answers every partition and opens a session.
        let full = handle(&broker, &ctx, request(0, 0, &[(0, 0), (1, 0), (2, 0)])).await;
        assert_eq!(full.error_code, error::NONE);
        assert_ne!(full.session_id, INVALID_SESSION_ID);
        assert_eq!(
            answered(&full),
            vec![(0, true, 1), (1, true, 1), (2, false, 0)]
        );
        let id = full.session_id;
        assert_eq!(broker.fetch_sessions.len(), 1);

        // The fetcher moves its positions; nothing else is new.
        let quiet = handle(&broker, &ctx, request(id, 1, &[(0, 1), (1, 1)])).await;
        assert_eq!((quiet.error_code, quiet.session_id), (error::NONE, id));
        assert_eq!(answered(&quiet), vec![]);

        // New records on partition 2 only: it alone is answered, though the
        // request names no partition at all.
        append(&broker, 2);
        let news = handle(&broker, &ctx, request(id, 2, &[])).await;
        assert_eq!(answered(&news), vec![(2, true, 1)]);

        // A stale epoch and an unknown session are refused at the top level.
        let stale = handle(&broker, &ctx, request(id, 2, &[])).await;
        assert_eq!(stale.error_code, error::INVALID_FETCH_SESSION_EPOCH);
        assert_eq!(stale.session_id, INVALID_SESSION_ID);
        assert!(stale.responses.is_empty());
        let unknown = handle(&broker, &ctx, request(id ^ 0x55, 1, &[])).await;
        assert_eq!(unknown.error_code, error::FETCH_SESSION_ID_NOT_FOUND);

        // A forgotten partition is no longer read.
        let mut forget = request(id, 3, &[(2, 1)]);
        forget.forgotten_topics_data = vec![ForgottenTopic {
            topic: "s".into(),
            partitions: vec![0],
            ..Default::default()
        }];
        assert_eq!(answered(&handle(&broker, &ctx, forget).await), vec![]);
        append(&broker, 0);
        append(&broker, 1);
        assert_eq!(
            answered(&handle(&broker, &ctx, request(id, 4, &[])).await),
            vec![(1, true, 2)]
        );

        // Epoch -1 closes the session; the fetch is answered in full.
        let closing = handle(&broker, &ctx, request(id, -1, &[(0, 0)])).await;
        assert_eq!(closing.session_id, INVALID_SESSION_ID);
        assert_eq!(answered(&closing), vec![(0, true, 2)]);
        assert!(broker.fetch_sessions.is_empty());
        let after = handle(&broker, &ctx, request(id, 5, &[])).await;
        assert_eq!(after.error_code, error::FETCH_SESSION_ID_NOT_FOUND);
        broker.shutdown().unwrap();
    }

    #[tokio::test]
    async fn a_session_waits_for_min_bytes_on_any_of_its_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "s", 2);
        let ctx = crate::testing::request_context(&SPEC, 12);
        let full = handle(&broker, &ctx, request(0, 0, &[(0, 0), (1, 0)])).await;
        let id = full.session_id;
        let mut waiting = request(id, 1, &[]);
        waiting.min_bytes = 1;
        waiting.max_wait_ms = 30_000;
        let fetch = {
            let broker = broker.clone();
            tokio::spawn(async move {
                let ctx = crate::testing::request_context(&SPEC, 12);
                handle(&broker, &ctx, waiting).await
            })
        };
        // Append once the fetch is seen waiting, so the append wakes it.
        while broker.metrics.fetches_waiting() == 0 {
            tokio::task::yield_now().await;
        }
        append(&broker, 1);
        let response = fetch.await.unwrap();
        assert_eq!(answered(&response), vec![(1, true, 1)]);
        broker.shutdown().unwrap();
    }

    /// The name an id leads to in this broker's image may, for a moment,
    /// lead to the log of another topic of that name (a publish replaces
    /// the image before the hosted logs follow it): that log is not served.
    #[tokio::test]
    async fn a_log_of_another_topic_of_the_name_is_inconsistent() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "s", 1);
        append(&broker, 0);
        let image = broker.metadata.image();
        let id = image.topic("s").unwrap().topic_id;
        let fetch_by = |topic_id| FetchRequest {
            session_epoch: -1,
            topics: vec![FetchTopic {
                topic: String::new(),
                topic_id,
                partitions: vec![FetchPartition {
                    partition: 0,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        let ctx = crate::testing::request_context(&SPEC, 17);
        let code = |response: &FetchResponseOut| response.responses[0].partitions[0].error_code;
        assert_eq!(
            code(&handle(&broker, &ctx, fetch_by(id)).await),
            error::NONE
        );

        // "s" deleted and made again; the hosted logs follow before the
        // image here does.
        let mut renamed = (*image).clone();
        renamed.apply(&tarn_metadata::MetadataRecord::RemoveTopic { topic_id: id.0 });
        let new = tarn_metadata::topics::NewTopic {
            name: "s",
            num_partitions: 1,
            replication_factor: 1,
            assignments: None,
            configs: vec![],
        };
        let (records, _) =
            tarn_metadata::topics::create_topic_records(&renamed, &broker.config, &new).unwrap();
        for record in &records {
            renamed.apply(record);
        }
        assert_ne!(renamed.topic("s").unwrap().topic_id, id);
        broker
            .replicas
            .sync(&Arc::new(renamed), &broker.config, true)
            .unwrap();

        let response = handle(&broker, &ctx, fetch_by(id)).await;
        assert_eq!(code(&response), error::INCONSISTENT_TOPIC_ID);
        assert!(answered(&response)
            .iter()
            .all(|(_, has_records, _)| !has_records));
        broker.shutdown().unwrap();
    }

    #[tokio::test]
    async fn from_v13_topics_are_named_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "s", 2);
        let id = broker.metadata.image().topic("s").unwrap().topic_id;
        let unknown = tarn_protocol::Uuid([5; 16]);
        let ctx = crate::testing::request_context(&SPEC, 17);
        append(&broker, 1);
        let by_id = |topic_id, partitions: Vec<i32>| FetchTopic {
            topic: String::new(),
            topic_id,
            partitions: partitions
                .into_iter()
                .map(|partition| FetchPartition {
                    partition,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                })
                .collect(),
        };
        let full = FetchRequest {
            session_epoch: 0,
            topics: vec![by_id(id, vec![0, 1]), by_id(unknown, vec![0])],
            ..Default::default()
        };
        let response = handle(&broker, &ctx, full).await;
        let seen: Vec<_> = response
            .responses
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic_id, p.partition_index, p.error_code))
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (id, 0, error::NONE),
                (id, 1, error::NONE),
                (unknown, 0, error::UNKNOWN_TOPIC_ID),
            ]
        );
        assert_eq!(answered(&response)[1], (1, true, 1));
        let session = response.session_id;
        assert_ne!(session, INVALID_SESSION_ID);

        // Forgetting by id: the unknown topic leaves the session; partition
        // 1 moves on, and new records on partition 0 are all there is to say.
        append(&broker, 0);
        let mut next = FetchRequest {
            session_id: session,
            session_epoch: 1,
            topics: vec![FetchTopic {
                partitions: vec![FetchPartition {
                    partition: 1,
                    fetch_offset: 1,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..by_id(id, vec![])
            }],
            ..Default::default()
        };
        next.forgotten_topics_data = vec![ForgottenTopic {
            topic: String::new(),
            topic_id: unknown,
            partitions: vec![0],
        }];
        let response = handle(&broker, &ctx, next).await;
        assert_eq!(response.responses.len(), 1);
        assert_eq!(response.responses[0].topic_id, id);
        assert_eq!(answered(&response), vec![(0, true, 1)]);
        broker.shutdown().unwrap();
    }
}
