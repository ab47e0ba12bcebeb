//! A node of a cluster: its part of the metadata quorum, its CONTROLLER
//! listener, and the broker's life as the controller sees it.
//!
//! The quorum (`tarn_quorum`, openraft) replicates the metadata log over
//! the voters of `controller.quorum.voters`; every node applies committed
//! entries through its publisher. The active controller is the quorum's
//! leader. The CONTROLLER listener serves the quorum's RPCs, controller
//! requests (`controller`) and the metadata log to observers, all in
//! Kafka's framing with private API keys.
//!
//! `process.roles` decides the rest: a voter (`controller`) has a
//! CONTROLLER listener and its part of the quorum; a node that is only a
//! broker is an observer (`observer`) that follows the log from a voter;
//! a node that is only a controller does not register as a broker, hosts
//! no partitions and serves no Kafka listener.
//!
//! A broker registers with the active controller when it starts (a new
//! incarnation, a new broker epoch, fenced), heartbeats every
//! `broker.heartbeat.interval.ms` and is unfenced once it has caught up;
//! SIGTERM first asks the controller to fence it and move its leadership
//! elsewhere (controlled shutdown).
//! The first active controller of a new cluster commits its id (the one
//! `tarn storage format` gave it, or a new one); every node adopts it, and
//! a node formatted for another cluster stops with INCONSISTENT_CLUSTER_ID.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use tarn_metadata::brokers::BrokerRegistration;
use tarn_metadata::feed::{FeedRead, FollowingLog, MetadataFeed};
use tarn_metadata::replicated::{PublishingMachine, QuorumMetadataLog};
use tarn_metadata::{
    Endpoint, MetadataImage, MetadataLog, MetadataPublisher, MetadataRecord, MetadataStore,
};
use tarn_protocol::error;
use tarn_protocol::records::Part;
use tarn_quorum::tcp::{self, ClusterId, TcpTransport};
use tarn_quorum::{Quorum, QuorumConfig, RpcKind};
use tarn_storage::LogEnv;

use crate::broker::{
    formatted_cluster_id, write_meta_properties, Broker, BrokerError, BrokerOptions,
};
use crate::controller::{
    self, ControllerReply, ControllerRequest, ControllerResponse, ControllerTopology, ObserverBook,
    QuorumDescription, ReplicaProgress, CONTROLLER_API_KEY,
};
use crate::handlers;
use crate::observer::{self, ObserverTopology};

/// Most connections one CONTROLLER listener serves at once.
const CONTROLLER_CONNECTIONS_MAX: usize = 64;
/// How long a controlled shutdown waits for the controller's answer.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a controlled shutdown waits before asking again.
const CONTROLLED_SHUTDOWN_RETRY: Duration = Duration::from_millis(200);
/// The longest an observer's fetch of the metadata log is held waiting.
const FEED_WAIT_MAX: Duration = Duration::from_secs(5);
/// How long shutdown waits for each cluster task to stop.
const TASK_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a node needs beyond [`BrokerOptions`] to join a cluster.
pub struct ClusterOptions {
    /// The voters' CONTROLLER listeners (host:port), by node id.
    pub voters: BTreeMap<i32, String>,
    /// Where an observer first looks for the controllers when the voters
    /// are not listed (`controller.quorum.bootstrap.servers`): host:port.
    pub bootstrap_controllers: Vec<String>,
    /// This node's CONTROLLER listener, bound, when it is a voter
    /// (`process.roles` has `controller`); a node that is not one follows
    /// the metadata log as an observer.
    pub controller_listener: Option<TcpListener>,
    /// Whether this node is a broker (`process.roles` has `broker`): it
    /// registers, heartbeats and hosts partitions. A node that is only a
    /// controller does none of that and serves no Kafka listener.
    pub broker: bool,
    /// This broker's advertised listeners, and the one clients use.
    pub endpoints: Vec<Endpoint>,
    pub client_listener: String,
    pub rack: Option<String>,
    pub election_timeout_ms: u64,
    pub fetch_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    /// Whether the quorum's voters can change (a KIP-853 dynamic quorum,
    /// `controller.quorum.bootstrap.servers`): a controller then may start
    /// with no voters (formatted with `--no-initial-controllers`) and wait
    /// to be added (AddRaftVoter).
    pub dynamic_quorum: bool,
    /// In a dynamic quorum: this node's directory id (`meta.properties`),
    /// and the initial voters' it was formatted with (KIP-853). A voter is
    /// its id and directory id, so a node formatted again is not taken
    /// for the voter it replaced.
    pub directory_id: Option<String>,
    pub voter_directory_ids: BTreeMap<i32, String>,
}

/// The running cluster parts of a node, for its shutdown.
pub struct ClusterNode {
    /// This node's part of the quorum; none on an observer.
    quorum: Option<Quorum>,
    broker_epoch: watch::Receiver<Option<i64>>,
    /// Says why the node must stop (another cluster's node, say).
    pub fatal: watch::Receiver<Option<String>>,
    /// Keeps `fatal` open while the node runs, whichever tasks it has.
    _fatal_sender: watch::Sender<Option<String>>,
    /// True once this node's image holds the committed metadata it
    /// started behind: at once on a voter (it replayed its own log), once
    /// the feed had nothing newer on an observer.
    pub caught_up: watch::Receiver<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

/// The active controller is the quorum's leader. This node counts as it
/// only while a quorum acknowledged it within the election timeout: a
/// leader cut off from the others stops acting as one (and stops naming
/// itself) once that lease lapses, before Raft deposes it.
struct QuorumTopology {
    node_id: i32,
    quorum: Arc<OnceLock<Quorum>>,
    controllers: BTreeMap<i32, String>,
    /// Whether the voters can change (a KIP-853 dynamic quorum,
    /// `controller.quorum.bootstrap.servers`) or are fixed by
    /// `controller.quorum.voters`.
    dynamic: bool,
    lease: Duration,
    /// The observers that fetch the metadata log from this node.
    observers: Arc<ObserverBook>,
}

impl QuorumTopology {
    /// The leader this node knows of, and whether it is this node with a
    /// live lease.
    fn leader(&self) -> Option<(i32, bool)> {
        let quorum = self.quorum.get()?;
        let status = quorum.status();
        let status = status.borrow();
        let leader = i32::try_from(status.leader?).ok()?;
        if status.is_leader && !status.leads_within(self.lease) {
            return None;
        }
        Some((leader, status.is_leader))
    }
}

/// Each voter's CONTROLLER listener (host:port), as the membership in the
/// metadata log records it; `configured` (the voters this node started
/// with) for a voter the log does not name yet.
fn voter_addresses(quorum: &Quorum, configured: &BTreeMap<i32, String>) -> BTreeMap<i32, String> {
    let status = quorum.status();
    let status = status.borrow();
    let mut addresses = configured.clone();
    for (id, address) in status.addresses.iter() {
        if let Ok(id) = i32::try_from(*id) {
            if status.voters.contains(&(id as u64)) {
                addresses.insert(id, address.clone());
            }
        }
    }
    addresses.retain(|id, _| status.voters.is_empty() || status.voters.contains(&(*id as u64)));
    addresses
}

impl ControllerTopology for QuorumTopology {
    fn is_active(&self) -> bool {
        self.leader().is_some_and(|(_, is_leader)| is_leader)
    }

    fn active_id(&self) -> i32 {
        self.leader().map_or(-1, |(id, _)| id)
    }

    fn active_address(&self) -> Option<String> {
        let (leader, _) = self.leader()?;
        if leader == self.node_id {
            return None;
        }
        let quorum = self.quorum.get()?;
        voter_addresses(quorum, &self.controllers).remove(&leader)
    }

    fn quorum(&self) -> Option<(Quorum, bool)> {
        Some((self.quorum.get()?.clone(), self.dynamic))
    }

    fn controllers(&self) -> BTreeMap<i32, String> {
        match self.quorum.get() {
            Some(quorum) => voter_addresses(quorum, &self.controllers),
            None => self.controllers.clone(),
        }
    }

    fn describe_quorum(&self) -> Option<QuorumDescription> {
        if !self.is_active() {
            return None;
        }
        let status = self.quorum.get()?.status().borrow().clone();
        let committed = status.committed_index;
        // Raft's indexes start at 0: the offset after entry i is i + 1.
        let after = |index: Option<u64>| index.map_or(0, |i| i as i64 + 1);
        // Another member's progress, as this leader's replication knows it.
        let progress = |id: &u64| {
            let matched = status.matched.get(id).copied().flatten();
            let acked = status
                .acked
                .get(id)
                .map(|at| controller::wall_clock_ms(at.into_std()));
            ReplicaProgress {
                id: *id as i32,
                // Kafka's -1: nothing known to match yet.
                log_end_offset: matched.map_or(-1, |m| m as i64 + 1),
                last_fetch_ms: acked.unwrap_or(-1),
                last_caught_up_ms: match (matched, committed) {
                    (Some(m), Some(c)) if m >= c => acked.unwrap_or(-1),
                    _ => -1,
                },
            }
        };
        let voters = status
            .voters
            .iter()
            .map(|id| {
                if *id as i32 != self.node_id {
                    return progress(id);
                }
                let now = controller::wall_clock_ms(std::time::Instant::now());
                ReplicaProgress {
                    id: self.node_id,
                    log_end_offset: after(status.last_log_index),
                    last_fetch_ms: now,
                    last_caught_up_ms: now,
                }
            })
            .collect();
        // Brokers that fetch the log, and the members that are not voters
        // (a removed controller that is also a broker).
        let mut observers = self.observers.progress();
        for id in status.addresses.keys() {
            if !status.voters.contains(id) && !observers.iter().any(|o| o.id == *id as i32) {
                observers.push(progress(id));
            }
        }
        observers.sort_by_key(|o| o.id);
        Some(QuorumDescription {
            leader: self.node_id,
            epoch: i32::try_from(status.term).unwrap_or(i32::MAX),
            high_watermark: after(committed),
            voters,
            observers,
            listeners: voter_addresses(self.quorum.get()?, &self.controllers),
            directory_ids: status
                .directory_ids
                .iter()
                .filter_map(|(id, directory)| Some((i32::try_from(*id).ok()?, directory.clone())))
                .collect(),
        })
    }
}

/// Starts a node of a cluster: opens its logs, starts its part of the
/// quorum and its CONTROLLER listener (a voter) or follows the metadata
/// log (an observer), and, on a broker, begins registering it.
pub async fn start(
    options: BrokerOptions,
    cluster: ClusterOptions,
) -> Result<(Arc<Broker>, ClusterNode), BrokerError> {
    let node_id = options.node_id;
    let voter = cluster.controller_listener.is_some();
    let listed = cluster.voters.contains_key(&node_id);
    // A controller of a dynamic quorum formatted to join a running one.
    let joining = voter && cluster.dynamic_quorum && cluster.voters.is_empty();
    if voter && !listed && !joining {
        return Err(BrokerError::Invalid(format!(
            "node {node_id} is a controller but not among the controller.quorum.voters {:?}",
            cluster.voters.keys().collect::<Vec<_>>()
        )));
    }
    if !voter && listed {
        return Err(BrokerError::Invalid(format!(
            "node {node_id} is among the controller.quorum.voters but is not a controller"
        )));
    }
    if !voter && !cluster.broker {
        return Err(BrokerError::Invalid(format!(
            "node {node_id} is neither a broker nor a controller"
        )));
    }
    let open_files_max = options.config.get_i64("log.open.files.max") as usize;
    let env = options
        .env
        .clone()
        .unwrap_or_else(|| LogEnv::os(open_files_max));
    let data_dir = options.data_dir.clone();
    env.create_dir_all(&data_dir)?;
    let formatted = formatted_cluster_id(&env, &data_dir, node_id)?;
    // Sent with and checked on every quorum RPC once known.
    let quorum_cluster = ClusterId::new(formatted.clone());
    let single_node_log = data_dir
        .join("__cluster_metadata-0")
        .join(tarn_metadata::METADATA_LOG_FILE);
    if env.len(&single_node_log)?.is_some() {
        return Err(BrokerError::Invalid(format!(
            "{} holds the metadata of a single-node Tarn; moving it into a multi-node quorum is \
             not supported yet (the quorum would start without its topics). Start it without \
             controller.quorum.voters, or give this node an empty data directory",
            data_dir.display()
        )));
    }

    let publisher = Arc::new(MetadataPublisher::new(MetadataImage::default(), 0));
    let (stop, stop_rx) = watch::channel(false);
    let (fatal_tx, fatal) = watch::channel(None);
    let (epoch_tx, broker_epoch) = watch::channel(None);
    // A voter that is also a broker serves clients once its broker is
    // unfenced (see `caught_up_when_unfenced`); a voter that is only a
    // controller serves no Kafka listener; an observer once it caught up
    // with the log it follows (`observer::run`).
    let (caught_up_tx, caught_up) = watch::channel(voter && !cluster.broker);
    let mut tasks = Vec::new();
    let assemble = |log: Box<dyn MetadataLog>, topology: Arc<dyn ControllerTopology>| {
        let metadata = MetadataStore::replicated(log, publisher.clone());
        tarn_replication::blocking::off_async_workers(|| {
            Broker::assemble(
                options,
                env.clone(),
                formatted.clone().unwrap_or_default(),
                metadata,
                topology,
                false,
            )
        })
    };
    let (broker, quorum) = match cluster.controller_listener {
        Some(controller_listener) => {
            let observers = Arc::new(ObserverBook::default());
            let quorum_cell = Arc::new(OnceLock::new());
            let log = QuorumMetadataLog::new(
                quorum_cell.clone(),
                publisher.clone(),
                tokio::runtime::Handle::current(),
            );
            let topology = Arc::new(QuorumTopology {
                node_id,
                quorum: quorum_cell.clone(),
                controllers: cluster.voters.clone(),
                dynamic: cluster.dynamic_quorum,
                lease: Duration::from_millis(cluster.election_timeout_ms),
                observers: observers.clone(),
            });
            let broker = assemble(Box::new(log), topology)?;
            let voters: BTreeMap<u64, String> = cluster
                .voters
                .iter()
                .map(|(id, addr)| (*id as u64, addr.clone()))
                .collect();
            let mut config = QuorumConfig::new(
                node_id as u64,
                voters.clone(),
                data_dir.join("__cluster_metadata-0"),
            );
            config.election_timeout_ms = cluster.election_timeout_ms;
            config.fetch_timeout_ms = cluster.fetch_timeout_ms;
            config.directory_id = cluster.directory_id.clone();
            config.voter_directory_ids = cluster
                .voter_directory_ids
                .iter()
                .map(|(id, directory)| (*id as u64, directory.clone()))
                .collect();
            let majority = voters.len() / 2 + 1;
            let transport = TcpTransport::new(node_id as u64, voters, quorum_cluster.clone());
            tasks.push(tokio::spawn(stop_when_refused(
                transport.refusals(),
                majority,
                data_dir.clone(),
                fatal_tx.clone(),
                stop_rx.clone(),
            )));
            let machine = PublishingMachine::new(publisher);
            let feed = machine.feed();
            let quorum = Quorum::start(config, env.fs.clone(), transport, Box::new(machine))
                .await
                .map_err(|e| BrokerError::Invalid(format!("start the metadata quorum: {e}")))?;
            if quorum_cell.set(quorum.clone()).is_err() {
                unreachable!("the quorum starts once");
            }
            tasks.push(tokio::spawn(serve_controller_listener(
                controller_listener,
                Controller {
                    broker: broker.clone(),
                    quorum: quorum.clone(),
                    feed,
                    observers,
                    voters: cluster.voters.clone(),
                    cluster: quorum_cluster.clone(),
                },
                stop_rx.clone(),
            )));
            tasks.push(tokio::spawn(controller::run_session_timer(
                broker.clone(),
                stop_rx.clone(),
            )));
            tasks.push(tokio::spawn(controller::run_leader_balancer(
                broker.clone(),
                stop_rx.clone(),
            )));
            tasks.push(tokio::spawn(stop_when_the_quorum_fails(
                quorum.status(),
                fatal_tx.clone(),
                stop_rx.clone(),
            )));
            (broker, Some(quorum))
        }
        None => {
            let topology = Arc::new(ObserverTopology::default());
            let log = FollowingLog::new(publisher.clone(), topology.leader.clone());
            let broker = assemble(Box::new(log), topology.clone())?;
            let controllers = match cluster.voters.is_empty() {
                true => cluster.bootstrap_controllers.clone(),
                false => cluster.voters.values().cloned().collect(),
            };
            if controllers.is_empty() {
                return Err(BrokerError::Invalid(format!(
                    "node {node_id} knows no controller to follow the metadata log from"
                )));
            }
            tasks.push(tokio::spawn(observer::run(
                broker.clone(),
                controllers,
                topology,
                caught_up_tx.clone(),
                stop_rx.clone(),
            )));
            (broker, None)
        }
    };
    tasks.push(tokio::spawn(adopt_cluster_id(
        broker.clone(),
        env,
        data_dir,
        formatted.clone(),
        quorum_cluster,
        fatal_tx.clone(),
        stop_rx.clone(),
    )));
    if cluster.broker && voter {
        tasks.push(tokio::spawn(caught_up_when_unfenced(
            broker.clone(),
            broker_epoch.clone(),
            caught_up_tx,
            stop_rx.clone(),
        )));
    }
    if cluster.broker {
        let registration = BrokerRegistration {
            broker_id: node_id,
            incarnation_id: tarn_metadata::random_uuid().0,
            listeners: cluster.endpoints,
            client_listener: cluster.client_listener,
            rack: cluster.rack,
            caught_up: false,
            cluster_id: formatted,
            previous_broker_epoch: broker.previous_broker_epoch,
        };
        tasks.extend(crate::replica_fetcher::start(
            broker.clone(),
            stop_rx.clone(),
        ));
        broker
            .replicas
            .storage_failures()
            .stop_writes_after_failure();
        tasks.push(tokio::spawn(stop_on_storage_failure(
            broker.replicas.storage_failures().subscribe(),
            fatal_tx.clone(),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(run_lifecycle(
            broker.clone(),
            registration,
            Duration::from_millis(cluster.heartbeat_interval_ms),
            epoch_tx,
            fatal_tx.clone(),
            stop_rx,
        )));
    }
    let node = ClusterNode {
        quorum,
        broker_epoch,
        fatal,
        _fatal_sender: fatal_tx,
        caught_up,
        tasks,
        stop,
    };
    Ok((broker, node))
}

impl ClusterNode {
    /// Asks the active controller to fence this broker, so clients and
    /// placement leave it before it goes and its partitions get new
    /// leaders; asks again while the controller does not yet let it shut
    /// down, and gives up after a while (the session timeout fences it
    /// anyway).
    pub async fn controlled_shutdown(&self, broker: &Arc<Broker>) {
        let Some(broker_epoch) = *self.broker_epoch.borrow() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + CONTROLLED_SHUTDOWN_TIMEOUT;
        loop {
            let request = ControllerRequest::Heartbeat {
                broker_id: broker.node_id,
                broker_epoch,
                metadata_offset: broker.metadata.publisher().published_offset(),
                shutting_down: true,
            };
            let answer =
                tokio::time::timeout_at(deadline, broker.submit_to_controller(request)).await;
            match answer {
                Ok(Ok(ControllerReply::Heartbeat {
                    may_shut_down: true,
                    ..
                })) => {
                    tracing::info!(
                        broker_epoch,
                        "controlled shutdown: the controller fenced this broker and moved its leadership"
                    );
                    return;
                }
                Ok(Ok(other)) => {
                    tracing::info!(reply = ?other, "controlled shutdown: not allowed to shut down yet")
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "controlled shutdown refused; shutting down anyway");
                    return;
                }
                Err(_) => {
                    tracing::warn!("controlled shutdown got no answer; shutting down anyway");
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, tokio::time::sleep(CONTROLLED_SHUTDOWN_RETRY))
                .await
                .is_err()
            {
                tracing::warn!(
                    "controlled shutdown did not complete in time; shutting down anyway"
                );
                return;
            }
        }
    }

    /// Stops the node's tasks and its part of the quorum. An active
    /// controller first hands its leadership over, while its CONTROLLER
    /// listener still answers the successor's vote request.
    pub async fn shutdown(self) -> Result<(), BrokerError> {
        if let Some(quorum) = &self.quorum {
            quorum.resign().await;
        }
        self.stop.send_replace(true);
        for mut task in self.tasks {
            // A task in a metadata commit finishes it first (bounded by the
            // quorum timeout); one that still does not stop is abandoned.
            match tokio::time::timeout(TASK_STOP_TIMEOUT, &mut task).await {
                Ok(joined) => {
                    joined.map_err(|e| BrokerError::Invalid(format!("join a cluster task: {e}")))?
                }
                Err(_) => {
                    tracing::warn!(
                        "a cluster task did not stop within {TASK_STOP_TIMEOUT:?}; abandoning it"
                    );
                    task.abort();
                }
            }
        }
        match self.quorum {
            Some(quorum) => quorum
                .shutdown()
                .await
                .map_err(|e| BrokerError::Invalid(format!("stop the metadata quorum: {e}"))),
            None => Ok(()),
        }
    }
}

/// What a voter's CONTROLLER listener serves from.
#[derive(Clone)]
struct Controller {
    broker: Arc<Broker>,
    quorum: Quorum,
    /// The metadata log for observers.
    feed: Arc<MetadataFeed>,
    /// Who fetched it, and how far.
    observers: Arc<ObserverBook>,
    /// The voters' CONTROLLER listeners, by node id.
    voters: BTreeMap<i32, String>,
    /// This node's cluster, once known: quorum RPCs of another are refused.
    cluster: ClusterId,
}

/// Serves the quorum's RPCs, controller requests and the metadata log.
async fn serve_controller_listener(
    listener: TcpListener,
    controller: Controller,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(CONTROLLER_CONNECTIONS_MAX));
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = stop.changed() => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept on the CONTROLLER listener");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let controller = controller.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_controller_connection(stream, &controller, stop).await {
                tracing::debug!(%peer, error = %e, "CONTROLLER connection closed");
            }
            drop(permit);
        });
    }
}

/// Serves one CONTROLLER connection. When it ends (closed, or failed)
/// after carrying a broker's heartbeats, and not because this node stops,
/// the controller is told (`controller::heartbeat_connection_closed`).
async fn serve_controller_connection(
    stream: TcpStream,
    controller: &Controller,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut heartbeats_from = None;
    let outcome =
        serve_controller_frames(stream, controller, stop.clone(), &mut heartbeats_from).await;
    if let Some((broker_id, broker_epoch)) = heartbeats_from.filter(|_| !*stop.borrow()) {
        tokio::spawn(controller::heartbeat_connection_closed(
            controller.broker.clone(),
            broker_id,
            broker_epoch,
        ));
    }
    outcome
}

async fn serve_controller_frames(
    mut stream: TcpStream,
    controller: &Controller,
    mut stop: watch::Receiver<bool>,
    heartbeats_from: &mut Option<(i32, i64)>,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    stream.set_nodelay(true)?;
    loop {
        let frame = tokio::select! {
            frame = tcp::read_frame(&mut stream) => frame?,
            _ = stop.changed() => return Ok(()),
        };
        let Some(frame) = frame else {
            return Ok(());
        };
        let (api_key, _, _) = tarn_protocol::header::peek_header(&frame)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if RpcKind::from_api_key(api_key).is_none() && api_key != CONTROLLER_API_KEY {
            serve_kafka_request(&mut stream, controller, frame).await?;
            continue;
        }
        let (header, body) = tcp::decode_request(&frame)?;
        let response = if let Some(kind) = RpcKind::from_api_key(header.api_key) {
            tcp::answer(&controller.quorum, &controller.cluster, &header, kind, body).await
        } else if header.api_key == CONTROLLER_API_KEY {
            let request: ControllerRequest = serde_json::from_slice(body).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unreadable controller request: {e}"),
                )
            })?;
            let answer = match request {
                ControllerRequest::FetchMetadata {
                    node_id,
                    after,
                    max_wait_ms,
                } => {
                    if node_id >= 0 {
                        let published = controller.feed.publisher().published_offset();
                        controller
                            .observers
                            .fetched(node_id, after, after >= published);
                    }
                    let wait = Duration::from_millis(max_wait_ms).min(FEED_WAIT_MAX);
                    serve_metadata(controller, after, wait, &mut stop).await
                }
                request => {
                    let heartbeat = match request {
                        ControllerRequest::Heartbeat {
                            broker_id,
                            broker_epoch,
                            shutting_down,
                            ..
                        } => Some((broker_id, broker_epoch, shutting_down)),
                        _ => None,
                    };
                    let answer = controller::execute(&controller.broker, request).await;
                    if let Some((broker_id, broker_epoch, shutting_down)) = heartbeat {
                        // A broker shutting down closes the connection on
                        // purpose; one whose heartbeat was refused is not
                        // in a session here.
                        *heartbeats_from = (answer.result.is_ok() && !shutting_down)
                            .then_some((broker_id, broker_epoch));
                    }
                    answer
                }
            };
            controller::encode_response(header.correlation_id, &answer).into()
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "api key {} is not served on the CONTROLLER listener",
                    header.api_key
                ),
            ));
        };
        stream.write_all(&response).await?;
    }
}

/// Answers a Kafka client's request on the CONTROLLER listener (KIP-919:
/// the admin client's `bootstrap.controllers`); one that is not served
/// there ends the connection.
async fn serve_kafka_request(
    stream: &mut TcpStream,
    controller: &Controller,
    frame: Vec<u8>,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let peer = stream.peer_addr()?;
    let frame = bytes::Bytes::from(frame);
    let reply =
        match handlers::dispatch_on_controller(&controller.broker, peer, frame.clone()).await {
            Ok(reply) => reply,
            Err(e) => {
                // Counted and logged as a broker's listener does, then closed.
                controller.broker.refusals.bad_request(peer, &frame, &e);
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
            }
        };
    for part in reply.into_iter().flat_map(|r| r.parts) {
        match part {
            Part::Bytes(bytes) => stream.write_all(&bytes).await?,
            // No API served here answers with file ranges.
            Part::File(_) => {
                return Err(std::io::Error::other(
                    "a file-backed response on the CONTROLLER listener",
                ))
            }
        }
    }
    Ok(())
}

/// What this voter has of the metadata log after `after`, waiting up to
/// `wait` for an entry when it has none yet (or until this node stops).
async fn serve_metadata(
    controller: &Controller,
    after: u64,
    wait: Duration,
    stop: &mut watch::Receiver<bool>,
) -> ControllerResponse {
    let publisher = controller.feed.publisher();
    let mut published = publisher.subscribe();
    let deadline = tokio::time::Instant::now() + wait;
    let read = loop {
        // An image to send is built from every record: not on an async
        // worker's time.
        let read =
            tarn_replication::blocking::off_async_workers(|| controller.feed.read_after(after));
        if !matches!(&read, FeedRead::Entries(e) if e.is_empty()) {
            break read;
        }
        tokio::select! {
            changed = published.changed() => if changed.is_err() { break read },
            _ = tokio::time::sleep_until(deadline) => break read,
            _ = stop.changed() => break read,
        }
    };
    let active_controller = controller.broker.active_controller();
    ControllerResponse {
        offset: publisher.published_offset(),
        result: Ok(ControllerReply::Metadata {
            active_controller,
            active_address: voter_addresses(&controller.quorum, &controller.voters)
                .remove(&active_controller),
            read,
        }),
    }
}

/// Stops the node when its Raft log or vote can no longer be written (the
/// quorum stops itself on such a failure): it could neither vote nor follow
/// the metadata log, and Kafka halts a node whose metadata log directory
/// failed.
async fn stop_when_the_quorum_fails(
    mut status: watch::Receiver<tarn_quorum::QuorumStatus>,
    fatal: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        // Closed too once the quorum is gone.
        _ = status.wait_for(|s| !s.running) => {}
        _ = stop.wait_for(|s| *s) => return,
    }
    if *stop.borrow() {
        return; // The node is stopping, and the quorum with it.
    }
    let why = "the metadata quorum stopped on this node (its log could not be written; the \
               cause is logged above)"
        .to_owned();
    tracing::error!("{why}");
    fatal.send_replace(Some(why));
}

/// Stops the broker at the first storage failure of a partition it hosts
/// (a full disk, a failed fsync, an I/O error), as Kafka halts a broker
/// whose only log directory failed; from that failure on, it takes no more
/// writes (`StorageFailures::writes_stopped`). The controlled shutdown moves each
/// partition it leads to an in-sync replica on another broker, where
/// producers carry on, instead of every write to them failing here with
/// KAFKA_STORAGE_ERROR for as long as the disk stays full. A single node,
/// with no replica elsewhere, keeps serving reads and resumes writing when
/// space returns.
async fn stop_on_storage_failure(
    mut failures: watch::Receiver<Option<String>>,
    fatal: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    let why = tokio::select! {
        failed = failures.wait_for(Option::is_some) => match failed {
            Ok(first) => first.clone().unwrap_or_default(),
            Err(_) => return,
        },
        _ = stop.wait_for(|s| *s) => return,
    };
    let why = format!(
        "storage failed ({why}); stopping so that other brokers take over this broker's \
         partitions"
    );
    tracing::error!("{why}");
    fatal.send_replace(Some(why));
}

/// Stops the node once a majority of the voters refuse it as a node of
/// another cluster (its data directory was formatted for another): it can
/// never take part in their quorum, and would otherwise wait for a
/// metadata log that never comes. A minority refusing it may be the
/// misconfigured ones, and is only logged (by the quorum, as each RPC
/// fails).
async fn stop_when_refused(
    mut refusals: watch::Receiver<BTreeMap<u64, String>>,
    majority: usize,
    data_dir: std::path::PathBuf,
    fatal: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    let refused = tokio::select! {
        refused = refusals.wait_for(|by| by.len() >= majority) => refused,
        _ = stop.changed() => return,
    };
    let Ok(by) = refused else {
        return;
    };
    let why = format!(
        "INCONSISTENT_CLUSTER_ID: a majority of the voters ({:?}) refuse this node: {}; \
         {} belongs to another cluster than theirs",
        by.keys().collect::<Vec<_>>(),
        by.values().next().map_or("", String::as_str),
        data_dir.display()
    );
    drop(by);
    tracing::error!("{why}");
    fatal.send_replace(Some(why));
}

/// Tells a voter's Kafka listener to start serving once this broker's own
/// image shows it registered with the epoch the controller gave it, and
/// unfenced. The controller unfences a broker only once the broker
/// reported having published the metadata committed when it registered,
/// and this image holds that record only after everything before it. A
/// restarted voter learns the commit index from the quorum's leader, so
/// until then its image is its latest snapshot, or empty: serving clients
/// from it would tell them their topics do not exist (Kafka's brokers
/// likewise wait until they have caught up).
async fn caught_up_when_unfenced(
    broker: Arc<Broker>,
    mut epoch: watch::Receiver<Option<i64>>,
    caught_up: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut published = broker.metadata.publisher().subscribe();
    loop {
        let registered = *epoch.borrow_and_update();
        let unfenced = registered.is_some_and(|epoch| {
            broker
                .metadata
                .image()
                .brokers
                .get(&broker.node_id)
                .is_some_and(|b| b.broker_epoch == epoch && !b.fenced)
        });
        if unfenced {
            // Caught up: the image is complete, so a partition directory
            // it assigns to no hosted partition is a stray (one a
            // reassignment moved off this broker while it was down, say).
            match tarn_replication::blocking::off_async_workers(|| {
                broker.replicas.set_aside_strays()
            }) {
                Ok(0) => {}
                Ok(strays) => tracing::warn!(
                    strays,
                    "set aside partition directories that no partition hosted here owns"
                ),
                Err(e) => {
                    tracing::error!(error = %e, "cannot set stray partition directories aside")
                }
            }
            caught_up.send_replace(true);
            return;
        }
        tokio::select! {
            changed = published.changed() => if changed.is_err() { return },
            changed = epoch.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// Gives a new cluster its id (on the active controller) and adopts the
/// id the quorum agreed on: writes it to meta.properties, or stops the
/// node when that file names another cluster.
async fn adopt_cluster_id(
    broker: Arc<Broker>,
    env: LogEnv,
    data_dir: std::path::PathBuf,
    formatted: Option<String>,
    quorum_cluster: ClusterId,
    fatal: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut published = broker.metadata.publisher().subscribe();
    loop {
        let image = broker.metadata.image();
        match &image.cluster_id {
            Some(agreed) => {
                if let Some(ours) = formatted.as_ref().filter(|ours| *ours != agreed) {
                    let why = format!(
                        "INCONSISTENT_CLUSTER_ID: {} was formatted for cluster {ours}, but the quorum's cluster is {agreed}",
                        data_dir.display()
                    );
                    tracing::error!("{why}");
                    fatal.send_replace(Some(why));
                    return;
                }
                broker.set_cluster_id(agreed);
                quorum_cluster.set(agreed);
                if formatted.is_none() {
                    if let Err(e) = write_meta_properties(&env, &data_dir, broker.node_id, agreed) {
                        tracing::error!(error = %e, "write meta.properties");
                        fatal.send_replace(Some(format!("write meta.properties: {e}")));
                    }
                }
                tracing::info!(cluster_id = %agreed, "joined the cluster");
                return;
            }
            None if broker.is_active_controller() => {
                let chosen = formatted
                    .clone()
                    .unwrap_or_else(|| tarn_metadata::random_uuid().to_base64());
                let committed = tarn_replication::blocking::off_async_workers(|| {
                    broker.commit_metadata(|image| {
                        Ok(match image.cluster_id {
                            Some(_) => (vec![], ()),
                            None => (
                                vec![MetadataRecord::ClusterIdentity {
                                    cluster_id: chosen.clone(),
                                }],
                                (),
                            ),
                        })
                    })
                });
                if let Err(e) = committed {
                    tracing::warn!(error = %e, "committing the cluster id failed; will retry");
                }
            }
            None => {}
        }
        tokio::select! {
            changed = published.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// How soon a registered broker that is still fenced heartbeats again:
/// the controller unfences it at the first heartbeat that shows it caught
/// up, so a starting broker serves within milliseconds of registering
/// rather than a heartbeat interval later (Kafka's broker heartbeats every
/// 10 ms while it starts up, too).
const STARTING_HEARTBEAT: Duration = Duration::from_millis(10);

/// Registers the broker and heartbeats until the node stops; registers
/// again when the controller no longer knows this registration. The first
/// heartbeat goes at once, and the next ones every `STARTING_HEARTBEAT`
/// until the controller unfences the broker, then every `interval`.
async fn run_lifecycle(
    broker: Arc<Broker>,
    registration: BrokerRegistration,
    interval: Duration,
    epoch: watch::Sender<Option<i64>>,
    fatal: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    'register: loop {
        let broker_epoch = loop {
            let request = ControllerRequest::RegisterBroker(registration.clone());
            let answer = tokio::select! {
                answer = broker.submit_to_controller(request) => answer,
                _ = stop.changed() => return,
            };
            match answer {
                Ok(ControllerReply::Registered { broker_epoch }) => break broker_epoch,
                Ok(other) => tracing::warn!(reply = ?other, "unexpected answer to a registration"),
                Err(e) if e.code == error::INCONSISTENT_CLUSTER_ID => {
                    tracing::error!(error = %e, "the controller refused this broker");
                    fatal.send_replace(Some(format!("INCONSISTENT_CLUSTER_ID: {}", e.message)));
                    return;
                }
                Err(e) => tracing::info!(error = %e, "registration not accepted yet; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => return,
            }
        };
        broker.set_broker_epoch(broker_epoch);
        epoch.send_replace(Some(broker_epoch));
        let mut next = Duration::ZERO;
        // After the first unfence, a fenced answer (the controller fenced
        // a broker whose session lapsed) waits a whole interval as before.
        let mut unfenced_once = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = stop.changed() => return,
            }
            let request = ControllerRequest::Heartbeat {
                broker_id: broker.node_id,
                broker_epoch,
                metadata_offset: broker.metadata.publisher().published_offset(),
                shutting_down: false,
            };
            let answer = tokio::select! {
                answer = broker.submit_to_controller(request) => answer,
                _ = stop.changed() => return,
            };
            next = interval;
            match answer {
                Ok(ControllerReply::Heartbeat { fenced: true, .. }) if !unfenced_once => {
                    next = STARTING_HEARTBEAT;
                }
                Ok(ControllerReply::Heartbeat { fenced: false, .. }) => unfenced_once = true,
                Ok(_) => {}
                Err(e) if e.code == error::STALE_BROKER_EPOCH => {
                    tracing::warn!(error = %e, "the controller forgot this registration; registering again");
                    continue 'register;
                }
                Err(e) => tracing::info!(error = %e, "heartbeat not answered"),
            }
        }
    }
}
