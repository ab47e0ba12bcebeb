//! Ties the group coordinator (`tarn_coordinator`) to the broker: it
//! creates the offsets topic when a group API first needs it (Kafka does
//! the same on the first FindCoordinator), loads every group at start-up,
//! and runs the timer task that fires session, join and sync deadlines and
//! expires old offsets.

pub use tarn_coordinator::{clock, coordinator, metadata, records, store};

use std::sync::Arc;

use tokio::sync::watch;

use tarn_protocol::error::{self, ErrorCode};

pub use tarn_coordinator::{
    partition_for, GroupConfig, GroupCoordinator, GroupState, GroupStore, OffsetsTopicStore,
    OFFSETS_TOPIC,
};

use tarn_config::BrokerConfig;
use tarn_metadata::MetadataImage;
use tarn_replication::episode::FailureEpisode;
use tarn_replication::replica_manager::{Partition, ReplicaManager};

use crate::broker::{Broker, BrokerError};
use crate::controller::ControllerRequest;

/// The broker's coordinator, over the offsets topic.
pub type BrokerGroupCoordinator = GroupCoordinator<OffsetsTopicStore>;

/// How long the timer task sleeps when no deadline is pending.
const IDLE_WAKEUP_MS: i64 = 60_000;

/// The offsets-topic partitions this broker leads, by partition id.
fn local_partitions(
    image: &MetadataImage,
    replicas: &ReplicaManager,
    node_id: i32,
) -> Option<Vec<Option<Arc<Partition>>>> {
    let topic = image.topic(OFFSETS_TOPIC)?;
    let count = topic.partitions.len();
    let mut out = vec![None; count];
    for p in &topic.partitions {
        if p.leader != node_id {
            continue;
        }
        if let Some(slot) = usize::try_from(p.partition_id)
            .ok()
            .and_then(|i| out.get_mut(i))
        {
            *slot = replicas.get(OFFSETS_TOPIC, p.partition_id);
        }
    }
    Some(out)
}

/// Builds the coordinator at start-up and, when the offsets topic exists,
/// loads every group and offset from it.
pub fn open(
    config: &BrokerConfig,
    image: &MetadataImage,
    replicas: &ReplicaManager,
    node_id: i32,
) -> Result<BrokerGroupCoordinator, BrokerError> {
    let coordinator = GroupCoordinator::new(
        GroupConfig::from_broker(config),
        Arc::new(clock::LogEnvClock(replicas.env().clone())),
        OffsetsTopicStore::new(replicas.append_notifier()),
    );
    let Some(partitions) = local_partitions(image, replicas, node_id) else {
        return Ok(coordinator);
    };
    let mut records = Vec::new();
    for partition in partitions.iter().flatten() {
        store::load_partition(partition, |r| records.push(r))
            .map_err(|e| BrokerError::Invalid(e.to_string()))?;
    }
    let loaded_records = records.len();
    coordinator.store().attach(partitions);
    let groups = coordinator.load(records);
    tracing::info!(
        groups,
        records = loaded_records,
        "loaded groups and offsets from {OFFSETS_TOPIC}"
    );
    Ok(coordinator)
}

/// Makes sure the offsets topic exists and is attached to the
/// coordinator, creating it with `offsets.topic.num.partitions`,
/// `offsets.topic.replication.factor`, `cleanup.policy=compact` and
/// `segment.bytes=offsets.topic.segment.bytes`. A failure is answered as
/// COORDINATOR_NOT_AVAILABLE, which clients retry.
/// Creating the offsets topic failed (and was logged) and has not worked since.
static OFFSETS_TOPIC_FAILING: FailureEpisode = FailureEpisode::new();

pub async fn ensure_offsets_topic(broker: &Arc<Broker>) -> Result<(), ErrorCode> {
    if broker.groups.store().is_attached() {
        return Ok(());
    }
    let config = &broker.config;
    let request = ControllerRequest::EnsureTopic {
        name: OFFSETS_TOPIC.to_owned(),
        num_partitions: config.get_i64("offsets.topic.num.partitions") as i32,
        replication_factor: config.get_i64("offsets.topic.replication.factor") as i16,
        configs: vec![
            ("cleanup.policy".into(), Some("compact".into())),
            ("compression.type".into(), Some("producer".into())),
            (
                "segment.bytes".into(),
                Some(config.get("offsets.topic.segment.bytes").to_owned()),
            ),
        ],
    };
    if let Err(e) = broker.submit_to_controller(request).await {
        if OFFSETS_TOPIC_FAILING.failed() {
            tracing::error!(error = %e, "cannot create {OFFSETS_TOPIC}; group requests answer COORDINATOR_NOT_AVAILABLE until it can");
        }
        return Err(error::COORDINATOR_NOT_AVAILABLE);
    }
    if OFFSETS_TOPIC_FAILING.succeeded() {
        tracing::info!("{OFFSETS_TOPIC} is available again");
    }
    // One attach at a time: two first group requests must not both load.
    static ATTACHING: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _attaching = ATTACHING.lock();
    let store = broker.groups.store();
    if store.is_attached() {
        return Ok(());
    }
    let image = broker.metadata.image();
    let partitions = local_partitions(&image, &broker.replicas, broker.node_id)
        .ok_or(error::COORDINATOR_NOT_AVAILABLE)?;
    // The topic may be older than this process (created before a restart
    // whose metadata arrived after start-up): the partitions led here are
    // loaded before they are served, never taken for new and empty.
    let mut records = Vec::new();
    for partition in partitions.iter().flatten() {
        let loaded = tarn_replication::blocking::off_async_workers(|| {
            store::load_partition(partition, |r| records.push(r))
        });
        if let Err(e) = loaded {
            tracing::error!(partition = partition.index, error = %e, "cannot load {OFFSETS_TOPIC}; group requests answer COORDINATOR_NOT_AVAILABLE until it can");
            return Err(error::COORDINATOR_NOT_AVAILABLE);
        }
    }
    // Loaded first: a request is served once the store is attached.
    let groups = broker.groups.load(records);
    store.attach(partitions);
    if groups > 0 {
        tracing::info!(groups, "loaded groups and offsets from {OFFSETS_TOPIC}");
    }
    Ok(())
}

/// The coordinator's timer task: fires group deadlines when they come and
/// expires old offsets every `offsets.retention.check.interval.ms`, until
/// `shutdown` turns true.
pub async fn run_background(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let groups = &broker.groups;
    let check_interval_ms = groups.config().offsets_retention_check_interval_ms;
    let mut next_retention_check = groups.now_ms() + check_interval_ms;
    loop {
        let now = groups.now_ms();
        let next = groups
            .next_deadline_ms()
            .unwrap_or(now + IDLE_WAKEUP_MS)
            .min(next_retention_check);
        let wait = std::time::Duration::from_millis(u64::try_from(next - now).unwrap_or(0));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = groups.deadlines_changed() => {}
            _ = shutdown.changed() => return,
        }
        let now = groups.now_ms();
        groups.poll_due(now);
        if now >= next_retention_check {
            let removed = groups.expire_offsets(now);
            if removed > 0 {
                tracing::info!(removed, "offset retention removed expired offsets");
            }
            next_retention_check = now + check_interval_ms;
        }
    }
}

/// Follows the leadership of the offsets topic's partitions: a partition
/// this broker starts leading is loaded (every group and offset in it,
/// read to the log end: the new leader's log is the truth) and then
/// served; one it stops leading is no longer served and its groups are
/// dropped, for the new leader to load. A new epoch of a leadership that
/// did not break is served on as loaded. Runs until `shutdown`.
pub async fn run_leadership_sync(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut leadership = broker.replicas.subscribe_leadership();
    // (partition, leader epoch) of what the coordinator serves now.
    let mut served: std::collections::HashMap<i32, i32> = std::collections::HashMap::new();
    loop {
        leadership.borrow_and_update();
        let store = broker.groups.store();
        if store.is_attached() {
            for partition in broker.replicas.topic_partitions(OFFSETS_TOPIC) {
                let index = partition.index;
                let leads = partition.role() == tarn_replication::replica_manager::Role::Leader;
                let epoch = partition.leader_epoch();
                let attached = store
                    .partition(index)
                    .is_some_and(|p| Arc::ptr_eq(&p, &partition));
                match (leads, served.get(&index).copied()) {
                    (true, Some(e)) if e == epoch => {}
                    // A later epoch of the same unbroken leadership (a
                    // reassignment dropped a replica): what is loaded is
                    // still the log's, as Kafka's coordinator stays active.
                    (true, Some(e)) if attached && partition.leads_since(e) => {
                        served.insert(index, epoch);
                    }
                    // Loaded at start-up, or attached when the topic was made.
                    (true, None) if attached => {
                        served.insert(index, epoch);
                    }
                    (true, _) => {
                        let was_served = store.partition(index).is_some();
                        store.set_partition(index, None);
                        if was_served {
                            broker.groups.unload_partition(index);
                        }
                        let mut records = Vec::new();
                        let loaded = tarn_replication::blocking::off_async_workers(|| {
                            store::load_partition(&partition, |r| records.push(r))
                        });
                        match loaded {
                            Ok(_) => {
                                let groups = broker.groups.load(records);
                                store.set_partition(index, Some(partition.clone()));
                                served.insert(index, epoch);
                                tracing::info!(
                                    partition = index,
                                    leader_epoch = epoch,
                                    groups,
                                    "leading {OFFSETS_TOPIC} partition; its groups are loaded"
                                );
                            }
                            Err(e) => {
                                tracing::error!(partition = index, error = %e, "cannot load {OFFSETS_TOPIC}; its groups stay unavailable")
                            }
                        }
                    }
                    (false, _) => {
                        if store.partition(index).is_some() {
                            store.set_partition(index, None);
                            let groups = broker.groups.unload_partition(index);
                            tracing::info!(partition = index, groups, "no longer leading {OFFSETS_TOPIC} partition; its groups are unloaded");
                        }
                        served.remove(&index);
                    }
                }
            }
        }
        tokio::select! {
            _ = leadership.changed() => {}
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The longest any group request waits for the rebalance to answer it.
/// The state machine's own deadlines (rebalance timeout, new-member join
/// timeout) answer long before this; it only bounds a broken promise.
pub const RESPONSE_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Waits for a JoinGroup or SyncGroup answer for at most `limit` (capped
/// at `RESPONSE_WAIT_MAX`). `timed_out` answers a wait that ran out,
/// `dropped` one the coordinator abandoned (replaced by a newer request
/// from the same member, or the broker shutting down).
/// Waits until every write the coordinator made for `group_id` so far is
/// as durable as its offsets-topic partition is configured to make it
/// (see `store`); the error is what the group API answers instead.
pub async fn await_durability(broker: &Broker, group_id: &str) -> Result<(), ErrorCode> {
    broker
        .groups
        .durability_barrier(group_id)
        .wait()
        .await
        .map_err(|e| {
            tracing::warn!(group = group_id, error = %e.message, "a group write did not become durable");
            store::coordinator_error(e.code)
        })
}

pub async fn await_response<T>(
    rx: tokio::sync::oneshot::Receiver<T>,
    limit: std::time::Duration,
    timed_out: impl FnOnce() -> T,
    dropped: impl FnOnce() -> T,
) -> T {
    match tokio::time::timeout(limit.min(RESPONSE_WAIT_MAX), rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => dropped(),
        Err(_) => {
            tracing::warn!(?limit, "group request timed out waiting for the rebalance");
            timed_out()
        }
    }
}

/// The peer address as Kafka reports a member's host ("/127.0.0.1").
pub fn client_host(peer: &std::net::SocketAddr) -> String {
    format!("/{}", peer.ip())
}

#[cfg(test)]
mod tests {
    use tarn_coordinator::records::CoordinatorRecord;

    use super::*;

    /// A follower replicating `__consumer_offsets` waits for news on the
    /// replica manager's data version: a coordinator's write must bump it,
    /// or every commit waits for the follower's fetch to time out.
    #[tokio::test]
    async fn a_coordinator_write_wakes_waiting_fetches() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "s", 1);
        ensure_offsets_topic(&broker)
            .await
            .expect("the offsets topic");
        let mut news = broker.replicas.subscribe();
        news.borrow_and_update();
        let partition = partition_for("g", broker.groups.store().partition_count().unwrap());
        let record = CoordinatorRecord::Offset {
            group: "g".into(),
            topic: "s".into(),
            partition: 0,
            value: None,
        };
        let completion = broker
            .groups
            .store()
            .append(partition, &[record], 1_000)
            .expect("append a coordinator record");
        // Default flush settings: durable as configured at once.
        assert!(completion.is_ready());
        assert!(news.has_changed().unwrap(), "no wake-up after the write");
    }
}
