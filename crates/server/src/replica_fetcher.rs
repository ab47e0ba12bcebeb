//! Follower replication (Kafka's `ReplicaFetcherManager` and
//! `ReplicaFetcherThread`): this broker fetches every partition it follows
//! from the partition's leader, with the Fetch API as a follower (v15, its
//! replica id and broker epoch in the replica state), and appends the
//! leader's batches as they are.
//!
//! The manager watches the hosted partitions' leadership and keeps one
//! fetcher per (leader broker, fetcher index) — `num.replica.fetchers`
//! connections to each leader, partitions spread over them by hash — each
//! a task with one connection to the leader's inter-broker listener.
//! A fetch waits at the leader up to `replica.fetch.wait.max.ms` for new
//! records, so a caught-up follower's next fetch is woken by the leader's
//! append rather than by polling.
//!
//! Each fetcher keeps a fetch session with its leader (KIP-227,
//! `tarn_client::fetch_session`): after the first fetch, a request names
//! only the partitions whose position moved, and the leader answers only
//! those with news, so idle partitions cost a follower nothing per fetch.
//!
//! Each fetch sends the log end and the epoch of the last fetched batch;
//! when the leader answers that they diverge, the follower truncates to
//! where the leader's log and its own agree (by leader epoch) before it
//! fetches on, so it never keeps a record the leader does not have. A
//! fetch offset the leader no longer has (OFFSET_OUT_OF_RANGE) is settled
//! with ListOffsets: truncate to the leader's end, or start over at its
//! log start. A partition the leader refuses (not leader, stale epoch) is
//! left for `replica.fetch.backoff.ms`, until the metadata moves it.
//!
//! The high watermarks are checkpointed every
//! `replica.high.watermark.checkpoint.interval.ms`
//! (`replication-offset-checkpoint`, Kafka's file).
//!
//! The leader side also runs here: the ISR expiration task shrinks the ISR
//! of partitions whose followers have not caught up for
//! `replica.lag.time.max.ms`, and ISR changes (shrinks and the expansions
//! a follower's fetch triggers) go to the controller in batches, one
//! request at a time (AlterPartitions).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use tarn_client::fetch_session::FetchSessionHandler;
use tarn_client::Connection;
use tarn_protocol::codec::Version;
use tarn_protocol::error;
use tarn_protocol::messages::fetch::{
    FetchPartition, FetchRequest, FetchResponse, PartitionData, ReplicaState,
};
use tarn_protocol::messages::list_offsets::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic,
};
use tarn_protocol::record_batch::parse_header;
use tarn_protocol::Uuid;
use tarn_replication::blocking::off_async_workers;
use tarn_replication::durability::AppendCompletion;
use tarn_replication::replica_manager::{Partition, PartitionError, Role};
use tarn_replication::roles::{IsrChange, IsrChangeAnswer};

use crate::broker::Broker;
use crate::replication_quota::{self, Side, Throttle};

/// The Fetch version followers send: the first with the replica state.
const FOLLOWER_FETCH_VERSION: i16 = 15;
const FETCH_FLEXIBLE_MIN: i16 = 12;
const LIST_OFFSETS_VERSION: i16 = 7;
const LIST_OFFSETS_FLEXIBLE_MIN: i16 = 6;
/// How often the manager looks again even without a leadership change
/// (a leader's address may become known later).
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);
/// How long a partition waits before it is fetched again when its leader
/// has not yet applied the metadata that made it leader (it answered
/// NOT_LEADER_OR_FOLLOWER or UNKNOWN_LEADER_EPOCH, or for a topic made
/// again under its name UNKNOWN_TOPIC_ID or INCONSISTENT_TOPIC_ID): milliseconds, not
/// `replica.fetch.backoff.ms`, as it catches up within milliseconds and
/// acks=all writes wait for this follower meanwhile.
const LEADER_CATCH_UP_BACKOFF: Duration = Duration::from_millis(20);
/// How often a follower whose every partition a throttle holds back
/// looks at its rate again.
const THROTTLE_RECHECK: Duration = Duration::from_millis(100);
/// The topic config that makes some of its followers throttle themselves.
const FOLLOWER_THROTTLED_REPLICAS: &str = "follower.replication.throttled.replicas";

/// The replication settings a fetcher reads once at start.
#[derive(Debug, Clone, Copy)]
struct FetchSettings {
    max_wait_ms: i32,
    min_bytes: i32,
    partition_max_bytes: i32,
    response_max_bytes: i32,
    backoff: Duration,
    socket_timeout: Duration,
    fetchers_per_leader: u64,
}

impl FetchSettings {
    fn of(broker: &Broker) -> FetchSettings {
        let config = broker.effective_config();
        let int = |key: &str| config.get_i64(key);
        FetchSettings {
            max_wait_ms: int("replica.fetch.wait.max.ms") as i32,
            min_bytes: int("replica.fetch.min.bytes") as i32,
            partition_max_bytes: int("replica.fetch.max.bytes") as i32,
            response_max_bytes: int("replica.fetch.response.max.bytes") as i32,
            backoff: Duration::from_millis(int("replica.fetch.backoff.ms").max(0) as u64),
            socket_timeout: Duration::from_millis(int("replica.socket.timeout.ms").max(1) as u64),
            fetchers_per_leader: int("num.replica.fetchers").max(1) as u64,
        }
    }
}

/// A partition this broker follows, as a fetcher fetches it.
#[derive(Clone)]
struct Followed {
    partition: Arc<Partition>,
    leader_epoch: i32,
}

impl Followed {
    fn key(&self) -> (Uuid, i32) {
        (self.partition.topic_id, self.partition.index)
    }

    /// What a back-off is for: the partition under one leader epoch, so a
    /// new epoch is fetched at once.
    fn backoff_key(&self) -> (Uuid, i32, i32) {
        (
            self.partition.topic_id,
            self.partition.index,
            self.leader_epoch,
        )
    }
}

/// Starts the replica fetcher manager and the ISR expiration task; both
/// end when `stop` turns true.
pub fn start(broker: Arc<Broker>, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        tokio::spawn(run_manager(broker.clone(), stop.clone())),
        tokio::spawn(run_isr_expiration(broker.clone(), stop.clone())),
        tokio::spawn(run_high_watermark_checkpoints(broker.clone(), stop.clone())),
        tokio::spawn(run_isr_change_sender(broker, stop)),
    ]
}

/// Writes the high-watermark checkpoint every
/// `replica.high.watermark.checkpoint.interval.ms`.
async fn run_high_watermark_checkpoints(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let interval_ms = broker
        .effective_config()
        .get_i64("replica.high.watermark.checkpoint.interval.ms")
        .max(1);
    let failing = tarn_replication::episode::FailureEpisode::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(interval_ms as u64)) => {}
            _ = stop.changed() => return,
        }
        match off_async_workers(|| broker.replicas.checkpoint_high_watermarks()) {
            Ok(()) => {
                if failing.succeeded() {
                    tracing::info!("high-watermark checkpoints are written again");
                }
            }
            Err(e) => {
                if failing.failed() {
                    tracing::error!(error = %e, "cannot write the high-watermark checkpoint; retrying");
                    broker
                        .replicas
                        .storage_failures()
                        .report(|| format!("writing the high-watermark checkpoint: {e}"));
                }
            }
        }
    }
}

/// Keeps a fetcher for each (leader, index) with partitions to follow.
async fn run_manager(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let settings = FetchSettings::of(&broker);
    let mut following = broker.replicas.subscribe_following();
    let mut fetchers: HashMap<(i32, u64), watch::Sender<Vec<Followed>>> = HashMap::new();
    let mut tasks = Vec::new();
    loop {
        following.borrow_and_update();
        let mut wanted: BTreeMap<(i32, u64), Vec<Followed>> = BTreeMap::new();
        for partition in broker.replicas.partitions() {
            let leader = partition.leader();
            if partition.role() != Role::Follower || leader < 0 {
                continue;
            }
            let mut hasher = DefaultHasher::new();
            (&partition.topic, partition.index).hash(&mut hasher);
            let index = hasher.finish() % settings.fetchers_per_leader;
            wanted.entry((leader, index)).or_default().push(Followed {
                leader_epoch: partition.leader_epoch(),
                partition,
            });
        }
        fetchers.retain(|key, _| wanted.contains_key(key));
        for (key, partitions) in wanted {
            match fetchers.get(&key) {
                Some(sender) => {
                    sender.send_replace(partitions);
                }
                None => {
                    let (sender, receiver) = watch::channel(partitions);
                    fetchers.insert(key, sender);
                    tasks.push(tokio::spawn(run_fetcher(
                        broker.clone(),
                        key.0,
                        settings,
                        receiver,
                        stop.clone(),
                    )));
                }
            }
        }
        tasks.retain(|t: &tokio::task::JoinHandle<()>| !t.is_finished());
        tokio::select! {
            _ = following.changed() => {}
            _ = tokio::time::sleep(RESCAN_INTERVAL) => {}
            _ = stop.changed() => break,
        }
    }
    drop(fetchers);
    for task in tasks {
        if let Err(e) = task.await {
            tracing::error!(error = %e, "a replica fetcher failed");
        }
    }
}

/// The address of `leader`'s inter-broker listener, from the metadata.
fn leader_address(broker: &Broker, leader: i32) -> Option<String> {
    let image = broker.metadata.image();
    let info = image.brokers.get(&leader)?;
    let listener = broker.config.get("inter.broker.listener.name");
    let (host, port) = info
        .listener(if listener.is_empty() {
            "PLAINTEXT"
        } else {
            listener
        })
        .unwrap_or((&info.host, info.port));
    Some(format!("{host}:{port}"))
}

/// Fetches the partitions `partitions` holds from `leader` until the
/// manager drops them all or the node stops.
async fn run_fetcher(
    broker: Arc<Broker>,
    leader: i32,
    settings: FetchSettings,
    mut partitions: watch::Receiver<Vec<Followed>>,
    mut stop: watch::Receiver<bool>,
) {
    let client_id = format!("broker-{}-fetcher-{leader}", broker.node_id);
    let mut connection: Option<Connection> = None;
    let mut session = FetchSessionHandler::new();
    let mut backoff_until: HashMap<(Uuid, i32, i32), Instant> = HashMap::new();
    loop {
        // The manager dropped this fetcher: its partitions moved elsewhere.
        if *stop.borrow() || partitions.has_changed().is_err() {
            return;
        }
        let now = Instant::now();
        backoff_until.retain(|_, until| *until > now);
        let followed: Vec<Followed> = partitions
            .borrow_and_update()
            .iter()
            .filter(|f| !backoff_until.contains_key(&f.backoff_key()))
            .cloned()
            .collect();
        let (followed, throttles, held_back) = apply_throttles(&broker, followed);
        if followed.is_empty() && held_back {
            // Every partition waits for the throttle's rate to fall.
            sleep_or_stop(THROTTLE_RECHECK, &mut stop).await;
            continue;
        }
        if followed.is_empty() {
            let wake = backoff_until
                .values()
                .min()
                .copied()
                .unwrap_or(now + RESCAN_INTERVAL);
            tokio::select! {
                changed = partitions.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(wake) => {}
                _ = stop.changed() => return,
            }
            continue;
        }
        let conn = match connection.as_mut() {
            Some(conn) => conn,
            None => {
                let Some(address) = leader_address(&broker, leader) else {
                    sleep_or_stop(settings.backoff, &mut stop).await;
                    continue;
                };
                match Connection::connect(&address, &client_id, settings.socket_timeout).await {
                    Ok(conn) => {
                        // A session may outlive its connection at the
                        // leader, but nothing says this fetch's state is
                        // what the leader last took: start a new one.
                        session.handle_error();
                        connection.insert(conn)
                    }
                    Err(e) => {
                        tracing::info!(leader, error = %e, "cannot reach the leader; retrying");
                        sleep_or_stop(settings.backoff, &mut stop).await;
                        continue;
                    }
                }
            }
        };
        let request = match fetch_request(&broker, &settings, &followed, &mut session) {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!(error = %e, "cannot build a follower fetch");
                sleep_or_stop(settings.backoff, &mut stop).await;
                continue;
            }
        };
        let version = Version::new(FOLLOWER_FETCH_VERSION, FETCH_FLEXIBLE_MIN);
        let answer = tokio::select! {
            answer = conn.call::<_, FetchResponse>(crate::handlers::fetch::KEY, version, &request) => answer,
            _ = stop.changed() => return,
        };
        let response = match answer {
            Ok(response) => match session.handle_response(response.error_code, response.session_id)
            {
                Ok(()) => response,
                Err(reason) if is_session_error(response.error_code) => {
                    // A new session with the next fetch; no back-off.
                    tracing::debug!(leader, %reason, "the fetch session restarts");
                    continue;
                }
                Err(reason) => {
                    tracing::info!(leader, error = response.error_code, %reason, "the leader refused a follower fetch");
                    sleep_or_stop(settings.backoff, &mut stop).await;
                    continue;
                }
            },
            Err(e) => {
                tracing::info!(leader, error = %e, "follower fetch failed; reconnecting");
                // The new connection restarts the session.
                connection = None;
                sleep_or_stop(settings.backoff, &mut stop).await;
                continue;
            }
        };
        let by_key: HashMap<(Uuid, i32), &Followed> =
            followed.iter().map(|f| (f.key(), f)).collect();
        let mut flushes = Vec::new();
        let mut high_watermark_moved = false;
        for topic in response.responses {
            for data in topic.partitions {
                let Some(followed) = by_key.get(&(topic.topic_id, data.partition_index)) else {
                    continue;
                };
                if let Some(t) = throttles.get(&followed.key()) {
                    let bytes = data.records.as_ref().map_or(0, |r| r.len());
                    broker
                        .follower_quota
                        .record(bytes as u64, Instant::now(), t.windows);
                }
                match process_partition(&broker, conn, followed, data).await {
                    Ok(processed) => {
                        high_watermark_moved |= processed.high_watermark_moved;
                        if let Some(flush) = processed.flush {
                            flushes.push((*followed, flush));
                        }
                    }
                    Err(failed) => {
                        let delay = if failed.leader_catching_up {
                            LEADER_CATCH_UP_BACKOFF
                        } else {
                            settings.backoff
                        };
                        tracing::debug!(topic = %followed.partition.topic, partition = followed.partition.index, leader, reason = %failed.reason, ?delay, "partition backs off");
                        backoff_until.insert(followed.backoff_key(), Instant::now() + delay);
                    }
                }
            }
        }
        // Consumers reading from this follower (KIP-392) wait up to its
        // high watermark: wake them, as the leader's appends do.
        if high_watermark_moved {
            broker.replicas.notify_appended();
        }
        // The next fetch tells the leader this log's new end, which may
        // move its high watermark and acknowledge acks=all writes: a flush
        // that `flush.messages` made due must be done first, as Kafka's
        // follower flushes inside its append.
        for (followed, flush) in flushes {
            if let Err(e) = flush.wait().await {
                tracing::warn!(topic = %followed.partition.topic, partition = followed.partition.index, error = %e.message, "a follower's flush failed; the partition backs off");
                backoff_until.insert(followed.backoff_key(), Instant::now() + settings.backoff);
            }
        }
    }
}

/// Splits out the partitions a follower throttle holds back now: those
/// the topic names for this broker, out of the ISR, while the follower's
/// throttled rate is above its limit. Returns the partitions to fetch,
/// the throttles of those that are throttled, and whether any was held.
fn apply_throttles(
    broker: &Broker,
    followed: Vec<Followed>,
) -> (Vec<Followed>, HashMap<(Uuid, i32), Throttle>, bool) {
    let image = broker.metadata.image();
    let listed = |f: &Followed| {
        image
            .topic(&f.partition.topic)
            .is_some_and(|t| t.configs.contains_key(FOLLOWER_THROTTLED_REPLICAS))
    };
    if !followed.iter().any(listed) {
        return (followed, HashMap::new(), false);
    }
    let config = broker.config_view(&image).effective();
    let now = Instant::now();
    let mut throttles = HashMap::new();
    let mut held_back = false;
    let mut fetched = Vec::with_capacity(followed.len());
    for f in followed {
        let (topic, index) = (&f.partition.topic, f.partition.index);
        let in_isr = image
            .topic(topic)
            .and_then(|t| t.partitions.get(usize::try_from(index).ok()?))
            .is_some_and(|p| p.isr.contains(&broker.node_id));
        let throttle = replication_quota::throttle_for(
            &image,
            &config,
            Side::Follower,
            topic,
            index,
            broker.node_id,
        )
        .filter(|_| !in_isr);
        if let Some(t) = throttle {
            if broker.follower_quota.exceeded(t.limit, now, t.windows) {
                broker
                    .metrics
                    .throttled_follower
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                held_back = true;
                continue;
            }
            throttles.insert(f.key(), t);
        }
        fetched.push(f);
    }
    (fetched, throttles, held_back)
}

async fn sleep_or_stop(duration: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(duration) => {}
        _ = stop.changed() => {}
    }
}

/// The fetch for `followed`, each from its log end, in `session`: the
/// partitions whose position the leader does not know yet, and those
/// left out of this round as forgotten.
fn fetch_request(
    broker: &Broker,
    settings: &FetchSettings,
    followed: &[Followed],
    session: &mut FetchSessionHandler,
) -> Result<FetchRequest, String> {
    let mut wanted = Vec::with_capacity(followed.len());
    for f in followed {
        let (fetch_offset, last_fetched_epoch, log_start_offset) =
            f.partition.fetch_position().map_err(|e| e.message)?;
        wanted.push((
            f.partition.topic_id,
            FetchPartition {
                partition: f.partition.index,
                current_leader_epoch: f.leader_epoch,
                fetch_offset,
                last_fetched_epoch,
                log_start_offset,
                partition_max_bytes: settings.partition_max_bytes,
                ..Default::default()
            },
        ));
    }
    let fetch = session.build(&wanted);
    Ok(FetchRequest {
        replica_id: -1,
        max_wait_ms: settings.max_wait_ms,
        min_bytes: settings.min_bytes,
        max_bytes: settings.response_max_bytes,
        isolation_level: 0,
        session_id: fetch.session_id,
        session_epoch: fetch.session_epoch,
        topics: fetch.topics,
        forgotten_topics_data: fetch.forgotten_topics_data,
        rack_id: String::new(),
        cluster_id: None,
        replica_state: ReplicaState {
            replica_id: broker.node_id,
            replica_epoch: broker.broker_epoch(),
        },
    })
}

/// The top-level errors that only say the fetch session must start over.
fn is_session_error(code: i16) -> bool {
    matches!(
        code,
        error::FETCH_SESSION_ID_NOT_FOUND | error::INVALID_FETCH_SESSION_EPOCH
    )
}

/// Why a partition's fetch answer could not be taken, and whether it is
/// the leader still catching up with the metadata that made it leader.
struct PartitionFailed {
    reason: String,
    leader_catching_up: bool,
}

impl From<String> for PartitionFailed {
    fn from(reason: String) -> Self {
        PartitionFailed {
            reason,
            leader_catching_up: false,
        }
    }
}

/// What applying one partition's answer came to.
#[derive(Default)]
struct Processed {
    /// The flush `flush.messages` made due by the append, if any, to be
    /// awaited before the next fetch.
    flush: Option<AppendCompletion>,
    /// This replica's high watermark moved (consumers reading from it
    /// are woken).
    high_watermark_moved: bool,
}

/// Takes one partition's answer: appends its records, truncates on a
/// divergence, settles an out-of-range offset, and takes the leader's
/// high watermark.
async fn process_partition(
    broker: &Broker,
    conn: &mut Connection,
    followed: &Followed,
    data: PartitionData,
) -> Result<Processed, PartitionFailed> {
    let partition = &followed.partition;
    if partition.role() != Role::Follower || partition.leader_epoch() != followed.leader_epoch {
        // The metadata moved on while the fetch was out; its answer is stale.
        return Ok(Processed::default());
    }
    match data.error_code {
        error::NONE => {}
        error::OFFSET_OUT_OF_RANGE => {
            settle_out_of_range(broker, conn, followed).await?;
            return Ok(Processed::default());
        }
        code => {
            return Err(PartitionFailed {
                reason: format!(
                    "the leader answered {}",
                    crate::error_names::error_name(code)
                ),
                leader_catching_up: matches!(
                    code,
                    error::NOT_LEADER_OR_FOLLOWER
                        | error::UNKNOWN_LEADER_EPOCH
                        | error::UNKNOWN_TOPIC_ID
                        | error::INCONSISTENT_TOPIC_ID
                ),
            })
        }
    }
    // The check above is a shortcut: the metadata can move on while this
    // answer is applied, so each step below checks the epoch again under
    // the log's lock, and a step refused for that drops the rest.
    let epoch = followed.leader_epoch;
    let diverging = &data.diverging_epoch;
    if diverging.epoch >= 0 || diverging.end_offset >= 0 {
        let offset = partition
            .divergence_truncation_offset(diverging.epoch, diverging.end_offset)
            .map_err(|e| e.message)?;
        return match partition.truncate_to(epoch, offset) {
            Err(e) if !moved_on(&e) => Err(e.message.into()),
            _ => Ok(Processed::default()),
        };
    }
    let mut flush = None;
    if let Some(records) = data.records.as_deref() {
        let whole = whole_batches(records);
        if !whole.is_empty() {
            match off_async_workers(|| partition.append_as_follower(epoch, whole)) {
                Ok(_) => flush = Some(partition.durability_barrier()),
                Err(e) if moved_on(&e) => return Ok(Processed::default()),
                Err(e) => return Err(e.message.into()),
            }
        }
    }
    let high_watermark_moved = partition.update_follower_high_watermark(epoch, data.high_watermark);
    if data.log_start_offset >= 0 {
        match off_async_workers(|| partition.follow_log_start_offset(epoch, data.log_start_offset))
        {
            Err(e) if !moved_on(&e) => return Err(e.message.into()),
            _ => {}
        }
    }
    Ok(Processed {
        flush,
        high_watermark_moved,
    })
}

/// The prefix of `records` made of whole batches (a leader may cut the
/// last one short at the size limit).
fn whole_batches(records: &[u8]) -> &[u8] {
    let mut end = 0;
    while end < records.len() {
        match parse_header(&records[end..]) {
            Ok(header) if end + header.total_size() <= records.len() => end += header.total_size(),
            _ => break,
        }
    }
    &records[..end]
}

/// The leader does not have this log's end: asks it for its log end and
/// start (as a replica, so LATEST is the log end) and truncates to its end
/// or starts over at its start.
async fn settle_out_of_range(
    broker: &Broker,
    conn: &mut Connection,
    followed: &Followed,
) -> Result<(), String> {
    let partition = &followed.partition;
    let latest = list_offset(broker, conn, followed, -1).await?;
    let (end, _, _) = partition.fetch_position().map_err(|e| e.message)?;
    let epoch = followed.leader_epoch;
    let settled = if end > latest {
        partition.truncate_to(epoch, latest)
    } else {
        let earliest = list_offset(broker, conn, followed, -2).await?;
        if end >= earliest {
            return Ok(());
        }
        off_async_workers(|| partition.truncate_fully_and_start_at(epoch, earliest))
    };
    match settled {
        Err(e) if !moved_on(&e) => Err(e.message),
        _ => Ok(()),
    }
}

/// A follower step refused because the partition moved on from the
/// leader epoch the fetch was for: its answer is stale and dropped.
fn moved_on(e: &PartitionError) -> bool {
    e.code == error::FENCED_LEADER_EPOCH
}

async fn list_offset(
    broker: &Broker,
    conn: &mut Connection,
    followed: &Followed,
    timestamp: i64,
) -> Result<i64, String> {
    let partition = &followed.partition;
    let request = ListOffsetsRequest {
        replica_id: broker.node_id,
        isolation_level: 0,
        topics: vec![ListOffsetsTopic {
            name: partition.topic.clone(),
            partitions: vec![ListOffsetsPartition {
                partition_index: partition.index,
                current_leader_epoch: followed.leader_epoch,
                timestamp,
                ..Default::default()
            }],
        }],
        timeout_ms: 0,
    };
    let version = Version::new(LIST_OFFSETS_VERSION, LIST_OFFSETS_FLEXIBLE_MIN);
    let response: ListOffsetsResponse = conn
        .call(crate::handlers::list_offsets::KEY, version, &request)
        .await
        .map_err(|e| e.to_string())?;
    let answer = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("the leader's ListOffsets answer names no partition")?;
    if answer.error_code != error::NONE {
        return Err(format!(
            "ListOffsets: {}",
            crate::error_names::error_name(answer.error_code)
        ));
    }
    Ok(answer.offset)
}

/// Shrinks the ISR of led partitions whose followers have not caught up
/// for `replica.lag.time.max.ms`, checking every half of it (as Kafka).
async fn run_isr_expiration(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let lag_max_ms = broker
        .effective_config()
        .get_i64("replica.lag.time.max.ms")
        .max(1);
    let interval = Duration::from_millis((lag_max_ms as u64 / 2).max(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.changed() => return,
        }
        let now_ms = broker.replicas.env().now_ms();
        for partition in broker.replicas.partitions() {
            if let Some(change) = partition.maybe_shrink_isr(now_ms, lag_max_ms) {
                tracing::info!(topic = %partition.topic, partition = partition.index, isr = ?change.new_isr, "shrinking the ISR: followers fell behind");
                send_isr_change(&broker, partition, change);
            }
        }
    }
}

/// An ISR change waiting in the queue, with its partition.
type QueuedChange = (Arc<Partition>, IsrChange);

/// The most ISR changes one AlterPartitions request carries.
const ISR_UPDATES_PER_REQUEST_MAX: usize = 1000;

/// How long the ISR change sender waits before sending again changes the
/// controller did not answer.
const ISR_CHANGE_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// ISR changes waiting for the controller, one per partition (a newer
/// change of a partition replaces the older): the ISR change sender sends
/// them in batches, one request at a time, as Kafka's leader does with
/// AlterPartition, so a thousand partitions losing a follower at once make
/// one commit, not a thousand.
#[derive(Default)]
pub struct IsrChangeQueue {
    pending: parking_lot::Mutex<BTreeMap<(Uuid, i32), QueuedChange>>,
    wake: tokio::sync::Notify,
}

impl IsrChangeQueue {
    fn push(&self, partition: Arc<Partition>, change: IsrChange) {
        self.pending
            .lock()
            .insert((partition.topic_id, partition.index), (partition, change));
        self.wake.notify_one();
    }

    /// Queues a change to be sent again, unless a newer one of its
    /// partition is queued by now.
    fn push_again(&self, partition: Arc<Partition>, change: IsrChange) {
        self.pending
            .lock()
            .entry((partition.topic_id, partition.index))
            .or_insert((partition, change));
    }

    fn take(&self, max: usize) -> Vec<QueuedChange> {
        let mut pending = self.pending.lock();
        let keys: Vec<(Uuid, i32)> = pending.keys().take(max).copied().collect();
        keys.iter().filter_map(|k| pending.remove(k)).collect()
    }
}

/// Queues an ISR change of `partition` for the controller (see
/// [`IsrChangeQueue`]); a change adding a broker the metadata has fenced is
/// dropped at once (the controller would refuse it: INELIGIBLE_REPLICA).
pub(crate) fn send_isr_change(broker: &Arc<Broker>, partition: Arc<Partition>, change: IsrChange) {
    let image = broker.metadata.image();
    // The controller's member checks, made here first as Kafka's leader
    // makes them.
    let ineligible = change.new_isr.iter().enumerate().any(|(i, r)| {
        let seen = change.broker_epochs.get(i).copied().unwrap_or(-1);
        tarn_metadata::elections::isr_ineligibility(&image, *r, seen).is_some()
    });
    if ineligible {
        partition.isr_change_answered(
            &change,
            IsrChangeAnswer::Refused(tarn_protocol::error::INELIGIBLE_REPLICA),
        );
        return;
    }
    broker.isr_changes.push(partition, change);
}

/// Sends queued ISR changes to the controller until `stop`. Each answer
/// settles its change or leaves it pending (see
/// [`Partition::isr_change_answered`]); a change without an answer is sent
/// again after [`ISR_CHANGE_RETRY_BACKOFF`], as Kafka's leader retries
/// AlterPartition until the controller answers.
async fn run_isr_change_sender(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    // Whether the last request went unanswered: the first of a run of
    // failures is logged at info, the rest at debug.
    let mut failing = false;
    loop {
        let batch = broker.isr_changes.take(ISR_UPDATES_PER_REQUEST_MAX);
        if batch.is_empty() {
            tokio::select! {
                _ = broker.isr_changes.wake.notified() => continue,
                _ = stop.changed() => return,
            }
        }
        let request = crate::controller::ControllerRequest::AlterPartitions {
            broker_id: broker.node_id,
            broker_epoch: broker.broker_epoch(),
            updates: batch
                .iter()
                .map(|(p, c)| crate::controller::IsrUpdate {
                    topic_id: p.topic_id.0,
                    partition: p.index,
                    leader_epoch: c.leader_epoch,
                    partition_epoch: c.partition_epoch,
                    new_isr: c.new_isr.clone(),
                    new_isr_epochs: c.broker_epochs.clone(),
                })
                .collect(),
        };
        let answer = tokio::select! {
            answer = broker.submit_to_controller(request) => answer,
            _ = stop.changed() => return,
        };
        let refusals = match answer {
            Ok(crate::controller::ControllerReply::PartitionsAltered { refusals }) => {
                if failing {
                    tracing::info!("the controller answers ISR changes again");
                }
                failing = false;
                refusals
            }
            Ok(other) => {
                tracing::warn!(reply = ?other, "unexpected answer to ISR changes; they are sent again");
                Vec::new()
            }
            Err(e) => {
                if failing {
                    tracing::debug!(changes = batch.len(), error = %e, "the controller did not answer ISR changes; they are sent again");
                } else {
                    tracing::info!(changes = batch.len(), error = %e, "the controller did not answer ISR changes; they are sent again until it does");
                }
                failing = true;
                Vec::new()
            }
        };
        let mut refused = 0;
        let mut again = 0;
        for (i, (partition, change)) in batch.into_iter().enumerate() {
            let answer = match refusals.get(i) {
                Some(None) => {
                    let counter = if change.shrinks {
                        &broker.metrics.isr_shrinks
                    } else {
                        &broker.metrics.isr_expands
                    };
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::info!(topic = %partition.topic, partition = partition.index, isr = ?change.new_isr, "ISR changed");
                    IsrChangeAnswer::Committed
                }
                Some(Some(refusal)) => {
                    refused += 1;
                    tracing::debug!(topic = %partition.topic, partition = partition.index, isr = ?change.new_isr, error = %refusal, "the controller refused an ISR change");
                    IsrChangeAnswer::Refused(refusal.code)
                }
                None => IsrChangeAnswer::Unanswered,
            };
            if partition.isr_change_answered(&change, answer) {
                again += 1;
                broker.isr_changes.push_again(partition, change);
            }
        }
        if refused > 0 {
            tracing::info!(refused, "the controller refused ISR changes (stale epochs or ineligible replicas); the metadata has the current ISRs");
        }
        if again > 0 {
            tokio::select! {
                _ = tokio::time::sleep(ISR_CHANGE_RETRY_BACKOFF) => {}
                _ = stop.changed() => return,
            }
        }
    }
}
