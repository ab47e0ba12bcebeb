//! The broker: start-up, the state every handler shares, and shutdown.
//!
//! Start-up reads `meta.properties` (cluster id, node id), replays the
//! metadata log, registers this broker, and opens every hosted log —
//! skipping tail recovery when the previous run left the clean-shutdown
//! marker, which is removed before any write so that a crash from here on
//! is recovered next time. Partition directories a previous run renamed
//! for deletion (`*-delete`) are removed before the logs are opened.
//!
//! `config` is the static configuration (file and `--set`); the effective
//! one lays the dynamic broker configs of the metadata image over it
//! (`Broker::effective_config`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use tarn_storage::{GroupCommit, LogEnv, RollFlusher};

use tarn_config::meta_properties::{MetaProperties, META_PROPERTIES_FILE};
use tarn_config::BrokerConfig;
use tarn_metadata::dynamic_config::ConfigView;
use tarn_metadata::{
    FileMetadataLog, MetadataDelta, MetadataImage, MetadataListener, MetadataLogError,
    MetadataRecord, MetadataStore, PublishError,
};
use tarn_replication::blocking::off_async_workers;
use tarn_replication::log_manager::LogManager;
use tarn_replication::replica_manager::{Partition, PartitionError, ReplicaManager};

use crate::controller::{
    BrokerSessions, ControllerRefusal, ControllerReply, ControllerRequest, ControllerTopology,
    SingleNode,
};
use crate::metrics::Metrics;
use crate::refusals::RefusalLog;

pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Metadata(#[from] MetadataLogError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error(transparent)]
    Storage(#[from] tarn_storage::StorageError),
    #[error("{0}")]
    Invalid(String),
}

impl BrokerError {
    /// The Kafka error for a metadata commit that failed this way:
    /// NOT_CONTROLLER when this node lost the lead during the commit (the
    /// client retries with the new controller), UNKNOWN_SERVER_ERROR
    /// otherwise.
    pub fn commit_error_code(&self) -> tarn_protocol::error::ErrorCode {
        match self {
            BrokerError::Metadata(MetadataLogError::NotController { .. }) => {
                tarn_protocol::error::NOT_CONTROLLER
            }
            _ => tarn_protocol::error::UNKNOWN_SERVER_ERROR,
        }
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BrokerError {
    let context = context.into();
    move |source| BrokerError::Io { context, source }
}

/// What `tarn serve` was asked to run.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    pub data_dir: PathBuf,
    pub node_id: i32,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub config: BrokerConfig,
    /// The file system and clock every file of the broker goes through;
    /// `None` is the real ones (with `log.open.files.max`). Tests and
    /// simulations pass a simulated file system that can lose power.
    pub env: Option<LogEnv>,
}

pub struct Broker {
    pub config: BrokerConfig,
    pub node_id: i32,
    /// Known from the start on a single node; in a cluster, once the
    /// quorum has agreed on it.
    cluster_id: RwLock<String>,
    pub data_dir: PathBuf,
    pub metadata: MetadataStore,
    pub replicas: Arc<ReplicaManager>,
    /// Request, traffic and connection counters (see `metrics`).
    pub metrics: Metrics,
    /// The rate-limited log of refused requests.
    pub refusals: RefusalLog,
    /// Fetch sessions (KIP-227), at most
    /// `max.incremental.fetch.session.cache.slots` of them.
    pub fetch_sessions: crate::fetch_session::FetchSessionCache,
    /// Consumer groups and committed offsets.
    pub groups: crate::group::BrokerGroupCoordinator,
    /// Shared fsync rounds for appends that must be durable before their ack.
    pub group_commit: Arc<GroupCommit>,
    /// Background retention, flushing and cleaning.
    log_manager: Mutex<Option<LogManager>>,
    /// Where the active controller is.
    pub controller_topology: Arc<dyn ControllerTopology>,
    /// Broker sessions, while this node is the active controller.
    pub sessions: BrokerSessions,
    /// The connection heartbeats travel on to the active controller (its
    /// address and the connection): kept open, so that the controller
    /// sees it close when this process dies.
    pub(crate) heartbeat_connection: tokio::sync::Mutex<Option<(String, tarn_client::Connection)>>,
    /// Idle connections to the active controller (its address and the
    /// connection) for the other controller requests, each carrying one
    /// request at a time: a forwarded request does not pay for a connect.
    pub(crate) controller_connections: Mutex<Vec<(String, tarn_client::Connection)>>,
    /// The producer ids this broker may hand out: [next, end).
    producer_ids: Mutex<(i64, i64)>,
    /// This broker's epoch from its registration with the controller; -1
    /// until registered (and always on a single node).
    broker_epoch: std::sync::atomic::AtomicI64,
    /// The broker epoch the clean-shutdown marker named at start-up: the
    /// previous process's, when it stopped cleanly; -1 when it did not
    /// (or an older build wrote the marker). Sent in the registration, so
    /// that the controller tells a clean restart from an unclean one.
    pub(crate) previous_broker_epoch: i64,
    /// ISR changes of partitions led here, waiting for the controller.
    pub(crate) isr_changes: crate::replica_fetcher::IsrChangeQueue,
    /// Throttled replication sent as a leader and fetched as a follower
    /// (see `replication_quota`).
    pub leader_quota: crate::replication_quota::ReplicationQuota,
    pub follower_quota: crate::replication_quota::ReplicationQuota,
}

/// Reads `meta.properties` (Kafka's file, as `tarn storage format` writes
/// it) when there is one: the cluster id the directory was formatted
/// for. Refuses a directory of another node.
pub(crate) fn formatted_cluster_id(
    env: &LogEnv,
    data_dir: &Path,
    node_id: i32,
) -> Result<Option<String>, BrokerError> {
    let path = data_dir.join(META_PROPERTIES_FILE);
    let Some(bytes) = env.read_optional(&path)? else {
        return Ok(None);
    };
    let meta = MetaProperties::parse(&String::from_utf8_lossy(&bytes))
        .map_err(|e| BrokerError::Invalid(format!("{}: {e}", path.display())))?;
    if meta.node_id != node_id {
        return Err(BrokerError::Invalid(format!(
            "{} belongs to node.id {}, not {node_id}",
            path.display(),
            meta.node_id
        )));
    }
    Ok(Some(meta.cluster_id))
}

/// Writes `meta.properties` for `cluster_id`, with a new directory id.
pub(crate) fn write_meta_properties(
    env: &LogEnv,
    data_dir: &Path,
    node_id: i32,
    cluster_id: &str,
) -> Result<(), tarn_storage::StorageError> {
    let meta = MetaProperties {
        cluster_id: cluster_id.to_owned(),
        node_id,
        directory_id: Some(tarn_metadata::random_uuid().to_base64()),
    };
    env.write_atomically(
        &data_dir.join(META_PROPERTIES_FILE),
        meta.render().as_bytes(),
    )
}

/// Reads or creates `meta.properties` and returns the cluster id.
fn load_meta_properties(
    env: &LogEnv,
    data_dir: &Path,
    node_id: i32,
) -> Result<String, BrokerError> {
    if let Some(cluster_id) = formatted_cluster_id(env, data_dir, node_id)? {
        return Ok(cluster_id);
    }
    let cluster_id = tarn_metadata::random_uuid().to_base64();
    write_meta_properties(env, data_dir, node_id, &cluster_id)?;
    Ok(cluster_id)
}

/// The most partitions a change may create and still be planned on an
/// async task ([`Broker::commit_metadata_async`]): placing 100,000 would
/// hold an async worker for tens of milliseconds.
pub const ASYNC_PLAN_PARTITIONS_MAX: usize = 1000;

impl Broker {
    /// The partition when this broker leads it, as Kafka's replica manager
    /// finds it for a produce, a consumer's fetch or a list-offsets:
    /// NOT_LEADER_OR_FOLLOWER when the metadata has the partition but this
    /// broker does not lead it (the client then looks the leader up in
    /// Metadata), UNKNOWN_TOPIC_OR_PARTITION when the metadata lacks it.
    pub fn leader_partition(
        &self,
        topic: &str,
        index: i32,
    ) -> Result<Arc<Partition>, PartitionError> {
        let partition = self.hosted_partition(topic, index)?;
        partition.check_leader()?;
        Ok(partition)
    }

    /// The partition when this broker hosts a replica of it, leader or
    /// follower (what a consumer may read from, KIP-392); the errors of
    /// [`Broker::leader_partition`] otherwise.
    pub fn hosted_partition(
        &self,
        topic: &str,
        index: i32,
    ) -> Result<Arc<Partition>, PartitionError> {
        match self.replicas.get(topic, index) {
            Some(partition) => Ok(partition),
            None => {
                let known = self
                    .metadata
                    .image()
                    .topic(topic)
                    .is_some_and(|t| t.partitions.iter().any(|p| p.partition_id == index));
                Err(if known {
                    PartitionError::new(
                        tarn_protocol::error::NOT_LEADER_OR_FOLLOWER,
                        format!("this broker does not host {topic}-{index}"),
                    )
                } else {
                    PartitionError::new(
                        tarn_protocol::error::UNKNOWN_TOPIC_OR_PARTITION,
                        "This server does not host this topic-partition.",
                    )
                })
            }
        }
    }

    /// Starts a single node, its own quorum of one: the metadata log is a
    /// local file, and the broker registers itself.
    pub fn start(mut options: BrokerOptions) -> Result<Arc<Broker>, BrokerError> {
        // A single node is Kafka's quickstart, whose shipped
        // server.properties gives the offsets topic one replica: Kafka's
        // default of 3 would leave it with no group coordinator.
        const OFFSETS_REPLICATION: &str = "offsets.topic.replication.factor";
        if !options.config.is_set(OFFSETS_REPLICATION) {
            options.config = options.config.overlay([(OFFSETS_REPLICATION, "1")]);
        }
        let data_dir = options.data_dir.clone();
        let open_files_max = options.config.get_i64("log.open.files.max") as usize;
        let env = options
            .env
            .clone()
            .unwrap_or_else(|| LogEnv::os(open_files_max));
        env.create_dir_all(&data_dir)?;
        let cluster_id = load_meta_properties(&env, &data_dir, options.node_id)?;
        let metadata_log = FileMetadataLog::open(&env, &data_dir.join("__cluster_metadata-0"))?;
        let metadata = MetadataStore::open(Box::new(metadata_log))?;
        metadata.commit_with(|image| -> Result<_, BrokerError> {
            let known = image.brokers.get(&options.node_id);
            let same = known.is_some_and(|b| {
                b.host == options.advertised_host && b.port == options.advertised_port && !b.fenced
            });
            if same {
                return Ok((vec![], ()));
            }
            let registration = MetadataRecord::RegisterBroker {
                broker_id: options.node_id,
                host: options.advertised_host.clone(),
                port: options.advertised_port,
                rack: None,
                incarnation_id: tarn_metadata::random_uuid().0,
                broker_epoch: known.map_or(0, |b| b.broker_epoch + 1),
                listeners: vec![],
                fenced: false,
            };
            Ok((vec![registration], ()))
        })?;

        Broker::assemble(
            options,
            env,
            cluster_id,
            metadata,
            Arc::new(SingleNode),
            true,
        )
    }

    /// Opens everything but the metadata: the hosted logs (those the
    /// image has now, and those later entries bring through the
    /// publisher), the group coordinator and the log manager.
    /// `set_aside_strays` moves partition directories the image does not
    /// know aside, so it needs an image that is complete.
    pub(crate) fn assemble(
        options: BrokerOptions,
        env: LogEnv,
        cluster_id: String,
        metadata: MetadataStore,
        controller_topology: Arc<dyn ControllerTopology>,
        set_aside_strays: bool,
    ) -> Result<Arc<Broker>, BrokerError> {
        let data_dir = options.data_dir.clone();
        let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
        let clean_shutdown = env.len(&marker)?.is_some();
        let previous_broker_epoch = if clean_shutdown {
            marker_epoch(&env.read_optional(&marker)?.unwrap_or_default())
        } else {
            -1
        };
        let removed = tarn_storage::remove_dirs_marked_for_deletion(&env, &data_dir)?;
        if removed > 0 {
            tracing::info!(removed, "removed partition directories left for deletion");
        }
        let group_commit = Arc::new(GroupCommit::start()?);
        let replicas = Arc::new(
            ReplicaManager::new(
                &data_dir,
                options.node_id,
                env.clone(),
                group_commit.clone(),
            )
            .with_roll_flusher(Arc::new(RollFlusher::start()?)),
        );
        let image = metadata.image();
        let effective = ConfigView {
            static_config: &options.config,
            image: &image,
            node_id: options.node_id,
        }
        .effective();
        replicas.set_previous_shutdown_clean(clean_shutdown);
        replicas.sync(&image, &effective, clean_shutdown)?;
        let publisher = metadata.publisher().clone();
        publisher.register(Arc::new(ReplicaSync {
            replicas: replicas.clone(),
            static_config: options.config.clone(),
            node_id: options.node_id,
        }));
        if set_aside_strays {
            let strays = replicas.set_aside_strays()?;
            if strays > 0 {
                tracing::warn!(
                    strays,
                    "set aside partition directories that no partition owns"
                );
            }
        }
        let groups = crate::group::open(&effective, &image, &replicas, options.node_id)?;
        if clean_shutdown {
            env.remove_file(&marker)?;
        }
        tracing::info!(
            clean_shutdown,
            topics = metadata.image().topics().count(),
            "logs loaded"
        );
        let log_manager =
            LogManager::start(&options.config, replicas.clone(), group_commit.clone())
                .map_err(io("start the log manager"))?;
        let fetch_session_slots = options
            .config
            .get_i64("max.incremental.fetch.session.cache.slots")
            .max(0) as usize;
        let broker = Arc::new(Broker {
            config: options.config,
            node_id: options.node_id,
            cluster_id: RwLock::new(cluster_id),
            data_dir,
            metadata,
            replicas,
            metrics: Metrics::new(),
            fetch_sessions: crate::fetch_session::FetchSessionCache::new(fetch_session_slots),
            refusals: RefusalLog::new(),
            groups,
            group_commit,
            log_manager: Mutex::new(Some(log_manager)),
            producer_ids: Mutex::new((0, 0)),
            broker_epoch: std::sync::atomic::AtomicI64::new(-1),
            previous_broker_epoch,
            isr_changes: crate::replica_fetcher::IsrChangeQueue::default(),
            leader_quota: Default::default(),
            follower_quota: Default::default(),
            controller_topology,
            sessions: BrokerSessions::default(),
            heartbeat_connection: tokio::sync::Mutex::new(None),
            controller_connections: Mutex::new(Vec::new()),
        });
        publisher.register(Arc::new(GroupsOnDeletion(Arc::downgrade(&broker))));
        publisher.register(Arc::new(ElectionsSeen(Arc::downgrade(&broker))));
        Ok(broker)
    }

    /// Commits metadata records built from the current image; the entry is
    /// published here (the hosted logs brought in line, the coordinator
    /// told) before this returns.
    pub fn commit_metadata<T>(
        &self,
        build: impl FnOnce(
            &tarn_metadata::MetadataImage,
        ) -> Result<(Vec<MetadataRecord>, T), BrokerError>,
    ) -> Result<T, BrokerError> {
        // The commit fsyncs the metadata log and may open or close logs:
        // blocking work, kept off the async workers' other tasks.
        off_async_workers(|| self.metadata.commit_with(build))
    }

    /// [`Broker::commit_metadata`] for an async task. An active controller
    /// that has nothing to wait for before planning (it has caught up in
    /// its term and has no entry in flight) proposes the entry and awaits
    /// it on this task: a blocking thread would cost each commit two more
    /// thread wake-ups on its path (Raft's core woken from outside the
    /// async workers, then that thread from Raft's). Anything else takes
    /// the blocking path, and so does a change that creates more than
    /// [`ASYNC_PLAN_PARTITIONS_MAX`] partitions (`creates_partitions`: at
    /// most how many `build` may place).
    pub async fn commit_metadata_async<T: Send>(
        &self,
        creates_partitions: usize,
        build: impl FnOnce(
            &tarn_metadata::MetadataImage,
        ) -> Result<(Vec<MetadataRecord>, T), BrokerError>,
    ) -> Result<T, BrokerError> {
        if creates_partitions > ASYNC_PLAN_PARTITIONS_MAX {
            return self.commit_metadata(build);
        }
        match self.metadata.try_commit_async(build) {
            Ok(commit) => commit.await,
            Err(build) => off_async_workers(|| self.metadata.commit_with(build)),
        }
    }

    /// See the field.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn set_broker_epoch(&self, epoch: i64) {
        self.broker_epoch
            .store(epoch, std::sync::atomic::Ordering::Release);
    }

    pub fn cluster_id(&self) -> String {
        self.cluster_id.read().clone()
    }

    pub(crate) fn set_cluster_id(&self, cluster_id: &str) {
        cluster_id.clone_into(&mut self.cluster_id.write());
    }

    /// Whether this node is the active controller: metadata changes are
    /// planned and committed here only then.
    pub fn is_active_controller(&self) -> bool {
        self.controller_topology.is_active()
    }

    /// The active controller's node id: this node on a quorum of one, -1
    /// while none is known.
    pub fn active_controller(&self) -> i32 {
        if self.is_active_controller() {
            self.node_id
        } else {
            self.controller_topology.active_id()
        }
    }

    /// The controller Metadata and DescribeCluster name to clients: the
    /// active controller when it is also a live broker, else this broker,
    /// which forwards what clients send a controller. Clients cannot reach
    /// a node that is only a controller, and Kafka's brokers name a live
    /// broker for the same reason. -1 while no controller is known.
    pub fn active_controller_id(&self) -> i32 {
        let active = self.active_controller();
        if active < 0 {
            return -1;
        }
        match self.metadata.image().brokers.get(&active) {
            Some(info) if !info.fenced => active,
            _ => self.node_id,
        }
    }

    /// This broker's configs as `image` makes them.
    pub fn config_view<'a>(&'a self, image: &'a MetadataImage) -> ConfigView<'a> {
        ConfigView {
            static_config: &self.config,
            image,
            node_id: self.node_id,
        }
    }

    /// The static config overlaid with the dynamic broker configs now in
    /// the metadata image.
    pub fn effective_config(&self) -> BrokerConfig {
        self.config_view(&self.metadata.image()).effective()
    }

    /// Hands out a producer id, taking a new block from the controller
    /// when the current one is used up.
    pub async fn next_producer_id(self: &Arc<Self>) -> Result<i64, ControllerRefusal> {
        loop {
            {
                let mut ids = self.producer_ids.lock();
                if ids.0 < ids.1 {
                    let id = ids.0;
                    ids.0 += 1;
                    return Ok(id);
                }
            }
            let request = ControllerRequest::AllocateProducerIds {
                broker_id: self.node_id,
            };
            match self.submit_to_controller(request).await? {
                ControllerReply::ProducerIds { start, count } => {
                    let mut ids = self.producer_ids.lock();
                    // Another request may have refilled it meanwhile.
                    if ids.0 >= ids.1 {
                        *ids = (start, start + count);
                    }
                }
                other => {
                    return Err(ControllerRefusal {
                        code: tarn_protocol::error::UNKNOWN_SERVER_ERROR,
                        message: format!(
                            "the controller answered a producer id request with {other:?}"
                        ),
                    })
                }
            }
        }
    }

    /// Closes every log and leaves the clean-shutdown marker.
    pub fn shutdown(&self) -> Result<(), BrokerError> {
        self.groups.shutdown();
        if let Some(manager) = self.log_manager.lock().take() {
            manager.stop();
        }
        self.group_commit.stop();
        self.replicas.shutdown()?;
        // Not fsynced: losing it only costs a recovery at the next start
        // (and counts the stop as unclean). It names the broker epoch, so
        // that the controller can tell this stop was clean (KIP-966).
        let marker = self.data_dir.join(CLEAN_SHUTDOWN_FILE);
        let epoch = self.broker_epoch().to_string();
        self.replicas
            .env()
            .write_without_sync(&marker, epoch.as_bytes())?;
        Ok(())
    }
}

/// The broker epoch a clean-shutdown marker names; -1 for one that names
/// none (an older build's empty marker) or something unreadable.
fn marker_epoch(contents: &[u8]) -> i64 {
    std::str::from_utf8(contents)
        .ok()
        .and_then(|text| text.trim().parse::<i64>().ok())
        .unwrap_or(-1)
}

/// Brings the hosted logs in line with each published entry: only the
/// topics the entry names, unless it changes broker configs.
struct ReplicaSync {
    replicas: Arc<ReplicaManager>,
    static_config: BrokerConfig,
    node_id: i32,
}

impl MetadataListener for ReplicaSync {
    fn name(&self) -> &'static str {
        "replica manager"
    }

    fn on_publish(
        &self,
        delta: &MetadataDelta<'_>,
        image: &Arc<MetadataImage>,
    ) -> Result<(), String> {
        let config = ConfigView {
            static_config: &self.static_config,
            image,
            node_id: self.node_id,
        }
        .effective();
        match delta.touched_topics() {
            Some(ids) => self.replicas.sync_topics(image, &config, &ids),
            None => self.replicas.sync(image, &config, true),
        }
        .map_err(|e| {
            // A replica this broker cannot create or open is a storage
            // failure like a failed append (see `StorageFailures`).
            self.replicas.storage_failures().report(|| {
                format!(
                    "hosting the partitions of metadata offset {}: {e}",
                    delta.offset
                )
            });
            e.to_string()
        })
    }
}

/// Counts the leader elections the metadata log commits
/// (`tarn_leader_elections_total`).
struct ElectionsSeen(std::sync::Weak<Broker>);

impl MetadataListener for ElectionsSeen {
    fn name(&self) -> &'static str {
        "election metrics"
    }

    fn on_publish(
        &self,
        delta: &MetadataDelta<'_>,
        _image: &Arc<MetadataImage>,
    ) -> Result<(), String> {
        let Some(broker) = self.0.upgrade() else {
            return Ok(());
        };
        if delta.snapshot {
            return Ok(());
        }
        let elected = delta
            .records
            .iter()
            .filter(|r| {
                matches!(r, MetadataRecord::PartitionChange { leader: Some(l), .. } if *l != tarn_metadata::NO_LEADER)
            })
            .count();
        broker
            .metrics
            .leader_elections
            .fetch_add(elected as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// Drops the committed offsets of deleted topics from the group
/// coordinator, as Kafka does.
struct GroupsOnDeletion(std::sync::Weak<Broker>);

impl MetadataListener for GroupsOnDeletion {
    fn name(&self) -> &'static str {
        "group coordinator"
    }

    fn on_publish(
        &self,
        delta: &MetadataDelta<'_>,
        _image: &Arc<MetadataImage>,
    ) -> Result<(), String> {
        let Some(broker) = self.0.upgrade() else {
            return Ok(());
        };
        for topic in delta.removed_topics() {
            broker.groups.on_topic_deleted(topic);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_shutdown_marker_names_the_epoch_or_none() {
        assert_eq!(marker_epoch(b"17"), 17);
        assert_eq!(marker_epoch(b" 4\n"), 4);
        // An older build's empty marker, or anything unreadable: unclean.
        assert_eq!(marker_epoch(b""), -1);
        assert_eq!(marker_epoch(b"x"), -1);
        assert_eq!(marker_epoch(&[0xff, 0xfe]), -1);
    }
}
