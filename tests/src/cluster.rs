//! Clusters of real `tarn serve` processes: every node is a broker and a
//! controller (a voter of `controller.quorum.voters`, or, with
//! [`Cluster::start_dynamic_partitionable`], of a dynamic quorum formatted
//! with `--initial-controllers`), or, with [`Cluster::start_separated`],
//! some nodes are only controllers and the others only brokers. Addresses
//! are fixed so that restarts keep them: free ports on loopback, or, for
//! clusters whose network a test cuts, a host of its own per node.
//!
//! [`Cluster::view`] asks one node what it knows (Metadata and
//! DescribeCluster), and the `wait_*` helpers poll it until it agrees.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tarn_cli::client::Client;
use tarn_protocol::messages::describe_cluster::{DescribeClusterRequest, DescribeClusterResponse};
use tarn_protocol::messages::metadata::{MetadataRequest, MetadataResponse};

use crate::netns::Network;
use crate::{BrokerOptions, TarnBroker};

/// Metadata's API key and the version asked.
const METADATA: (i16, i16, i16) = (3, 12, 9);
/// DescribeCluster's API key and the version asked.
const DESCRIBE_CLUSTER: (i16, i16, i16) = (60, 1, 0);
/// DescribeQuorum's API key and the version asked.
const DESCRIBE_QUORUM: (i16, i16, i16) = (55, 2, 0);

/// What DescribeQuorum says through one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumView {
    pub leader: i32,
    pub epoch: i32,
    pub high_watermark: i64,
    /// Voter ids, sorted.
    pub voters: Vec<i32>,
    /// Observer ids, sorted.
    pub observers: Vec<i32>,
}

/// What one node says of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Unfenced brokers: id -> host:port.
    pub brokers: BTreeMap<i32, String>,
    /// DescribeCluster's active controller.
    pub controller: i32,
    pub cluster_id: String,
    /// topic -> partition leaders, by partition.
    pub leaders: BTreeMap<String, Vec<i32>>,
    /// topic -> each partition's in-sync replicas (sorted), by partition.
    pub isr: BTreeMap<String, Vec<Vec<i32>>>,
    /// topic -> each partition's replicas (in preference order), by
    /// partition.
    pub replicas: BTreeMap<String, Vec<Vec<i32>>>,
}

/// Ports handed out so far by this process.
static HANDED_OUT: AtomicU16 = AtomicU16::new(0);

/// A free loopback port below Linux's ephemeral range (32768 on), so that
/// no outgoing connection takes it while its node is down for a restart.
/// Each test process starts at its own offset; a port is checked free by
/// binding it.
pub fn free_port() -> u16 {
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    let offset = (std::process::id() % u32::from(SPAN)) as u16;
    loop {
        let n = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        assert!(n < SPAN, "ran out of ports to hand out");
        let port = FIRST + (offset + n) % SPAN;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub struct Cluster {
    /// Node `i + 1` is `nodes[i]`.
    pub nodes: Vec<TarnBroker>,
    /// Node `i + 1`'s Kafka listener is `addresses[i]` (its CONTROLLER
    /// listener when it is only a controller).
    addresses: Vec<String>,
    /// Node `i + 1`'s CONTROLLER listener, when it is a controller.
    controller_addresses: Vec<Option<String>>,
    /// Whether node `i + 1` is a broker.
    brokers: Vec<bool>,
    running: Vec<bool>,
    /// With [`Cluster::start_partitionable`]: the namespaces the nodes run
    /// in. Dropped after `nodes`, so its processes are gone first.
    network: Option<Network>,
    /// A dynamic quorum's data directories, formatted before the nodes
    /// start. Dropped after `nodes`.
    _formatted: Option<tempfile::TempDir>,
}

/// What one node of a [`Cluster::start_own`] gets besides what every node
/// gets.
#[derive(Debug, Clone, Default)]
pub struct Own<'a> {
    pub settings: &'a [(&'a str, &'a str)],
    /// This data directory (on a small disk, say) instead of a fresh
    /// temporary one.
    pub data_dir: Option<std::path::PathBuf>,
}

/// How the nodes learn the voters.
enum Voters {
    /// `controller.quorum.voters`.
    Static,
    /// `controller.quorum.bootstrap.servers`, every node formatted with
    /// the same `--initial-controllers` (a KIP-853 dynamic quorum, whose
    /// voters can be removed and added).
    Dynamic,
}

/// What each node is.
enum Roles {
    /// Every node is both.
    Combined,
    /// Nodes 1 to this many are only controllers, the rest only brokers.
    Separated(usize),
}

/// Where the nodes listen.
enum Hosts {
    /// Loopback, on free ports.
    Loopback,
    /// Each node in its own namespace, on its own address.
    Network(Network),
}

impl Cluster {
    /// Starts `n` nodes in the order given (node ids from 1), each with
    /// `settings` besides the cluster keys.
    pub fn start(n: usize, order: &[usize], settings: &[(&str, &str)]) -> Cluster {
        Cluster::launch(
            n,
            order,
            settings,
            &[],
            Roles::Combined,
            Hosts::Loopback,
            Voters::Static,
        )
    }

    /// Like [`Cluster::start`], node `i + 1` also with `each[i]` (a
    /// `broker.rack` of its own, say).
    pub fn start_each(
        n: usize,
        order: &[usize],
        settings: &[(&str, &str)],
        each: &[&[(&str, &str)]],
    ) -> Cluster {
        let own: Vec<Own> = each
            .iter()
            .map(|settings| Own {
                settings,
                data_dir: None,
            })
            .collect();
        Cluster::start_own(n, order, settings, &own)
    }

    /// Like [`Cluster::start`], node `i + 1` also with `own[i]` (settings
    /// of its own, a data directory on a small disk).
    pub fn start_own(
        n: usize,
        order: &[usize],
        settings: &[(&str, &str)],
        own: &[Own<'_>],
    ) -> Cluster {
        Cluster::launch(
            n,
            order,
            settings,
            own,
            Roles::Combined,
            Hosts::Loopback,
            Voters::Static,
        )
    }

    /// Starts `controllers` nodes that are only controllers (ids 1 to
    /// `controllers`, the voters) and `brokers` that are only brokers
    /// (the ids after), in the order given, each with `settings`.
    pub fn start_separated(
        controllers: usize,
        brokers: usize,
        order: &[usize],
        settings: &[(&str, &str)],
    ) -> Cluster {
        Cluster::launch(
            controllers + brokers,
            order,
            settings,
            &[],
            Roles::Separated(controllers),
            Hosts::Loopback,
            Voters::Static,
        )
    }

    /// Like [`Cluster::start`], with every node a host of its own (a
    /// network namespace, see [`crate::netns`]), so that
    /// [`Cluster::partition`] can cut nodes off each other: the quorum,
    /// the controller and the data path between brokers alike. The test's
    /// clients reach every node whatever is cut.
    pub fn start_partitionable(n: usize, order: &[usize], settings: &[(&str, &str)]) -> Cluster {
        Cluster::start_partitionable_own(n, order, settings, &[])
    }

    /// Like [`Cluster::start_partitionable`], node `i + 1` also with
    /// `own[i]` (see [`Cluster::start_own`]).
    pub fn start_partitionable_own(
        n: usize,
        order: &[usize],
        settings: &[(&str, &str)],
        own: &[Own<'_>],
    ) -> Cluster {
        Cluster::launch(
            n,
            order,
            settings,
            own,
            Roles::Combined,
            Hosts::Network(Network::create(n as i32)),
            Voters::Static,
        )
    }

    /// Like [`Cluster::start_partitionable`], with the voters a dynamic
    /// quorum (KIP-853): every node formatted with the same initial voters and
    /// started with `controller.quorum.bootstrap.servers`, so that
    /// [`Cluster::remove_voter`] and [`Cluster::add_voter`] can change
    /// them.
    pub fn start_dynamic_partitionable(
        n: usize,
        order: &[usize],
        settings: &[(&str, &str)],
    ) -> Cluster {
        Cluster::launch(
            n,
            order,
            settings,
            &[],
            Roles::Combined,
            Hosts::Network(Network::create(n as i32)),
            Voters::Dynamic,
        )
    }

    fn launch(
        n: usize,
        order: &[usize],
        settings: &[(&str, &str)],
        own: &[Own<'_>],
        roles: Roles,
        hosts: Hosts,
        quorum: Voters,
    ) -> Cluster {
        assert_eq!(order.len(), n, "start every node once");
        // (is a controller, is a broker) of node `i + 1`.
        let role = |i: usize| match roles {
            Roles::Combined => (true, true),
            Roles::Separated(controllers) => (i < controllers, i >= controllers),
        };
        // (host, Kafka port, controller port) of each node.
        let places: Vec<(String, u16, u16)> = match &hosts {
            Hosts::Loopback => (0..n)
                .map(|_| ("127.0.0.1".to_owned(), free_port(), free_port()))
                .collect(),
            Hosts::Network(network) => (1..=n as i32)
                .map(|id| (network.ip(id), 9092, 9093))
                .collect(),
        };
        let voters = places
            .iter()
            .enumerate()
            .filter(|(i, _)| role(*i).0)
            .map(|(i, (host, _, controller))| format!("{}@{host}:{controller}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let formatted = match quorum {
            Voters::Static => None,
            Voters::Dynamic => Some(
                tempfile::Builder::new()
                    .prefix("tarn-dynamic-quorum-")
                    .tempdir()
                    .expect("create a scratch dir"),
            ),
        };
        let bootstrap_servers = places
            .iter()
            .enumerate()
            .filter(|(i, _)| role(*i).0)
            .map(|(_, (host, _, controller))| format!("{host}:{controller}"))
            .collect::<Vec<_>>()
            .join(",");
        let random_uuid = || {
            let out = crate::cli::run(&["storage", "random-uuid"]);
            assert!(out.status.success(), "tarn storage random-uuid: {out}");
            out.stdout.trim().to_owned()
        };
        let cluster_id = formatted
            .as_ref()
            .map(|_| random_uuid())
            .unwrap_or_default();
        // (id, data dir, directory id) of each node of a dynamic quorum.
        let directories: Vec<(usize, std::path::PathBuf, String)> = match &formatted {
            None => Vec::new(),
            Some(scratch) => (0..n)
                .map(|i| {
                    let dir = scratch.path().join(format!("node{}", i + 1));
                    (i + 1, dir, random_uuid())
                })
                .collect(),
        };
        let initial_controllers = directories
            .iter()
            .filter(|(id, _, _)| role(id - 1).0)
            .map(|(id, _, directory)| {
                let (host, _, controller) = &places[id - 1];
                format!("{id}@{host}:{controller}:{directory}")
            })
            .collect::<Vec<_>>()
            .join(",");
        let options: Vec<BrokerOptions> = places
            .iter()
            .enumerate()
            .map(|(i, (host, kafka, controller))| {
                let (listeners, roles) = match role(i) {
                    (true, true) => (
                        format!("PLAINTEXT://{host}:{kafka},CONTROLLER://{host}:{controller}"),
                        "broker,controller",
                    ),
                    (true, false) => (format!("CONTROLLER://{host}:{controller}"), "controller"),
                    _ => (format!("PLAINTEXT://{host}:{kafka}"), "broker"),
                };
                let mut options = BrokerOptions {
                    listeners: Some(listeners),
                    ..BrokerOptions::default()
                };
                if let Hosts::Network(network) = &hosts {
                    options.netns = Some(network.namespace(i as i32 + 1));
                    options.http_listen = Some(format!("{host}:0"));
                }
                let mut options = options
                    .set("node.id", &(i + 1).to_string())
                    .set("process.roles", roles)
                    .set("controller.listener.names", "CONTROLLER");
                options = match directories.get(i) {
                    None => options.set("controller.quorum.voters", &voters),
                    Some((id, dir, _)) => {
                        let listeners = options.listeners.clone().unwrap_or_default();
                        format_dynamic(
                            &cluster_id,
                            *id,
                            dir,
                            roles,
                            &listeners,
                            &bootstrap_servers,
                            &initial_controllers,
                        );
                        options.data_dir = Some(dir.clone());
                        options.set("controller.quorum.bootstrap.servers", &bootstrap_servers)
                    }
                };
                let own = own.get(i);
                if let Some(dir) = own.and_then(|own| own.data_dir.clone()) {
                    assert!(
                        options.data_dir.is_none(),
                        "node {}: a dynamic quorum's node has its data directory formatted",
                        i + 1
                    );
                    options.data_dir = Some(dir);
                }
                let own_settings = own.map_or(&[][..], |own| own.settings);
                for (key, value) in settings.iter().chain(own_settings) {
                    options = options.set(key, value);
                }
                options
            })
            .collect();
        let mut started: BTreeMap<usize, TarnBroker> = BTreeMap::new();
        for &node in order {
            started.insert(node, TarnBroker::start_with(options[node - 1].clone()));
        }
        Cluster {
            nodes: started.into_values().collect(),
            addresses: places
                .iter()
                .enumerate()
                .map(|(i, (host, kafka, controller))| match role(i) {
                    (_, true) => format!("{host}:{kafka}"),
                    (_, false) => format!("{host}:{controller}"),
                })
                .collect(),
            controller_addresses: places
                .iter()
                .enumerate()
                .map(|(i, (host, _, controller))| role(i).0.then(|| format!("{host}:{controller}")))
                .collect(),
            brokers: (0..n).map(|i| role(i).1).collect(),
            running: vec![true; n],
            network: match hosts {
                Hosts::Loopback => None,
                Hosts::Network(network) => Some(network),
            },
            _formatted: formatted,
        }
    }

    /// Starts one more node, a broker only, with the next id: it finds the
    /// controllers through `controller.quorum.bootstrap.servers` (as
    /// Kafka 4's shipped broker.properties does) instead of the voters.
    /// Returns its id.
    pub fn add_bootstrapped_broker(&mut self, settings: &[(&str, &str)]) -> i32 {
        let id = self.nodes.len() as i32 + 1;
        let servers = self
            .controller_addresses
            .iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join(",");
        let address = format!("127.0.0.1:{}", free_port());
        let mut options = BrokerOptions {
            listeners: Some(format!("PLAINTEXT://{address}")),
            ..BrokerOptions::default()
        }
        .set("node.id", &id.to_string())
        .set("process.roles", "broker")
        .set("controller.listener.names", "CONTROLLER")
        .set("controller.quorum.bootstrap.servers", &servers);
        for (key, value) in settings {
            options = options.set(key, value);
        }
        self.nodes.push(TarnBroker::start_with(options));
        self.addresses.push(address);
        self.controller_addresses.push(None);
        self.brokers.push(true);
        self.running.push(true);
        id
    }

    /// Node `id`'s data directory id (`meta.properties`' `directory.id`).
    pub fn directory_id(&self, id: i32) -> tarn_protocol::Uuid {
        let path = self.nodes[id as usize - 1]
            .data_dir()
            .join("meta.properties");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        text.lines()
            .find_map(|line| line.strip_prefix("directory.id="))
            .and_then(|id| tarn_protocol::Uuid::from_base64(id.trim()))
            .unwrap_or_else(|| panic!("no directory.id in {}", path.display()))
    }

    /// RemoveRaftVoter of node `id` (with its directory id), asked of node
    /// `via`: the error code and message, or why there was no answer.
    pub fn remove_voter(&self, via: i32, id: i32) -> Result<(i16, String), String> {
        use tarn_protocol::messages::raft_voters::{
            RemoveRaftVoterRequest, RemoveRaftVoterResponse,
        };
        let request = RemoveRaftVoterRequest {
            cluster_id: None,
            voter_id: id,
            voter_directory_id: self.directory_id(id),
        };
        let mut client = Client::connect(&self.address(via)).map_err(|e| e.to_string())?;
        let response: RemoveRaftVoterResponse = client
            .call(81, 0, 0, &request)
            .map_err(|e| format!("{e:#}"))?;
        Ok((
            response.error_code,
            response.error_message.unwrap_or_default(),
        ))
    }

    /// AddRaftVoter of node `id` (its CONTROLLER listener and directory
    /// id, 30 s to catch up), asked of node `via`: the error code and
    /// message, or why there was no answer.
    pub fn add_voter(&self, via: i32, id: i32) -> Result<(i16, String), String> {
        use tarn_protocol::messages::raft_voters::{
            AddRaftVoterListener, AddRaftVoterRequest, AddRaftVoterResponse,
        };
        let address = self.controller_address(id);
        let (host, port) = address.rsplit_once(':').expect("host:port");
        let request = AddRaftVoterRequest {
            cluster_id: None,
            timeout_ms: 30_000,
            voter_id: id,
            voter_directory_id: self.directory_id(id),
            listeners: vec![AddRaftVoterListener {
                name: "CONTROLLER".into(),
                host: host.to_owned(),
                port: port.parse().expect("a port"),
            }],
            ack_when_committed: true,
        };
        let mut client = Client::connect(&self.address(via)).map_err(|e| e.to_string())?;
        client
            .set_read_timeout(Duration::from_secs(60))
            .map_err(|e| e.to_string())?;
        let response: AddRaftVoterResponse = client
            .call(80, 1, 0, &request)
            .map_err(|e| format!("{e:#}"))?;
        Ok((
            response.error_code,
            response.error_message.unwrap_or_default(),
        ))
    }

    fn network(&mut self) -> &mut Network {
        self.network
            .as_mut()
            .expect("a cluster started with Cluster::start_partitionable")
    }

    /// Cuts node `id` off every other node, both ways.
    pub fn isolate(&mut self, id: i32) {
        let others: Vec<i32> = (1..=self.nodes.len() as i32)
            .filter(|other| *other != id)
            .collect();
        self.network().partition(&[&[id], &others]);
    }

    /// Cuts every node of one side off every node of another.
    pub fn partition(&mut self, sides: &[&[i32]]) {
        self.network().partition(sides);
    }

    /// Cuts nodes `a` and `b` off each other only.
    pub fn cut_link(&mut self, a: i32, b: i32) {
        self.network().cut_link(a, b);
    }

    /// Undoes every cut.
    pub fn heal(&mut self) {
        self.network().heal();
    }

    pub fn node(&self, id: i32) -> &TarnBroker {
        &self.nodes[id as usize - 1]
    }

    /// Node `id`'s Kafka listener, whether it runs or not.
    pub fn address(&self, id: i32) -> String {
        self.addresses[id as usize - 1].clone()
    }

    /// The running brokers' Kafka listeners, comma-separated.
    pub fn bootstrap(&self) -> String {
        self.running_brokers()
            .into_iter()
            .map(|id| self.address(id))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn running(&self) -> Vec<i32> {
        (1..=self.nodes.len() as i32)
            .filter(|id| self.running[*id as usize - 1])
            .collect()
    }

    /// The running nodes that are brokers.
    pub fn running_brokers(&self) -> Vec<i32> {
        self.running()
            .into_iter()
            .filter(|id| self.brokers[*id as usize - 1])
            .collect()
    }

    /// Node `id`'s CONTROLLER listener (host:port).
    pub fn controller_address(&self, id: i32) -> String {
        self.controller_addresses[id as usize - 1]
            .clone()
            .unwrap_or_else(|| panic!("node {id} is not a controller"))
    }

    /// The active controller as node `id`, a controller, knows it (-1:
    /// none), asked on its CONTROLLER listener the way a broker that is
    /// not a voter follows the metadata log there.
    pub fn active_controller_seen_by(&self, id: i32) -> Result<i32, String> {
        active_controller_at(&self.controller_address(id))
    }

    pub fn kill(&mut self, id: i32) {
        self.nodes[id as usize - 1].kill();
        self.running[id as usize - 1] = false;
    }

    pub fn stop(&mut self, id: i32) {
        self.nodes[id as usize - 1].stop();
        self.running[id as usize - 1] = false;
    }

    /// Node `id`, stopped, gets an empty data directory formatted for
    /// cluster `cluster_id` (`tarn storage format`).
    pub fn reformat(&mut self, id: i32, cluster_id: &str) {
        let dir = self.nodes[id as usize - 1].data_dir().to_path_buf();
        std::fs::remove_dir_all(&dir).expect("remove the data directory");
        let config = dir.with_extension("properties");
        std::fs::write(
            &config,
            format!("node.id={id}\nlog.dirs={}\n", dir.display()),
        )
        .expect("write a config for tarn storage format");
        let out = crate::cli::run(&[
            "storage",
            "format",
            "--cluster-id",
            cluster_id,
            "--config",
            config.to_str().expect("a UTF-8 path"),
        ]);
        assert!(out.status.success(), "tarn storage format: {out}");
    }

    /// Waits for node `id` to stop by itself; its exit status.
    pub fn wait_exit(&mut self, id: i32, timeout: Duration) -> std::process::ExitStatus {
        self.running[id as usize - 1] = false;
        self.nodes[id as usize - 1].wait_exit(timeout)
    }

    /// SIGSTOP: node `id` freezes (no heartbeats, no answers) but keeps
    /// its sockets, as a long GC pause or a stalled VM would.
    pub fn pause(&self, id: i32) {
        self.signal(id, libc::SIGSTOP);
    }

    /// SIGCONT after [`Cluster::pause`].
    pub fn resume(&self, id: i32) {
        self.signal(id, libc::SIGCONT);
    }

    fn signal(&self, id: i32, signal: i32) {
        let pid = self.nodes[id as usize - 1]
            .pid()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        let pid = i32::try_from(pid).expect("a pid fits i32");
        // SAFETY: kill(2) with a pid this harness spawned and still owns.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            rc,
            0,
            "signal {signal} to node {id}: {}",
            std::io::Error::last_os_error()
        );
    }

    pub fn start_again(&mut self, id: i32) {
        self.nodes[id as usize - 1].start_again();
        self.running[id as usize - 1] = true;
    }

    /// What node `id` says, or why it could not say.
    pub fn view(&self, id: i32) -> Result<View, String> {
        let address = self.address(id);
        let mut client = Client::connect(&address).map_err(|e| e.to_string())?;
        let (key, version, flexible) = METADATA;
        let metadata: MetadataResponse = client
            .call(
                key,
                version,
                flexible,
                &MetadataRequest {
                    topics: None,
                    allow_auto_topic_creation: false,
                    ..Default::default()
                },
            )
            .map_err(|e| e.to_string())?;
        let (key, version, flexible) = DESCRIBE_CLUSTER;
        let cluster: DescribeClusterResponse = client
            .call(
                key,
                version,
                flexible,
                &DescribeClusterRequest {
                    endpoint_type: 1,
                    ..Default::default()
                },
            )
            .map_err(|e| e.to_string())?;
        Ok(View {
            brokers: metadata
                .brokers
                .iter()
                .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
                .collect(),
            controller: cluster.controller_id,
            cluster_id: cluster.cluster_id,
            leaders: metadata
                .topics
                .iter()
                .map(|t| {
                    let mut partitions: Vec<_> = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition_index, p.leader_id))
                        .collect();
                    partitions.sort();
                    (
                        t.name.clone().unwrap_or_default(),
                        partitions.into_iter().map(|(_, leader)| leader).collect(),
                    )
                })
                .collect(),
            isr: metadata
                .topics
                .iter()
                .map(|t| {
                    let mut partitions: Vec<_> = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut isr = p.isr_nodes.clone();
                            isr.sort();
                            (p.partition_index, isr)
                        })
                        .collect();
                    partitions.sort();
                    (
                        t.name.clone().unwrap_or_default(),
                        partitions.into_iter().map(|(_, isr)| isr).collect(),
                    )
                })
                .collect(),
            replicas: metadata
                .topics
                .iter()
                .map(|t| {
                    let mut partitions: Vec<_> = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition_index, p.replica_nodes.clone()))
                        .collect();
                    partitions.sort();
                    (
                        t.name.clone().unwrap_or_default(),
                        partitions.into_iter().map(|(_, r)| r).collect(),
                    )
                })
                .collect(),
        })
    }

    /// The metadata quorum as broker `id` reports it (DescribeQuorum,
    /// which it forwards to the active controller).
    pub fn quorum_view(&self, id: i32) -> Result<QuorumView, String> {
        use tarn_protocol::messages::describe_quorum::{
            DescribeQuorumRequest, DescribeQuorumRequestPartition, DescribeQuorumRequestTopic,
            DescribeQuorumResponse,
        };
        let mut client = Client::connect(&self.address(id)).map_err(|e| e.to_string())?;
        let (key, version, flexible) = DESCRIBE_QUORUM;
        let response: DescribeQuorumResponse = client
            .call(
                key,
                version,
                flexible,
                &DescribeQuorumRequest {
                    topics: vec![DescribeQuorumRequestTopic {
                        topic_name: "__cluster_metadata".into(),
                        partitions: vec![DescribeQuorumRequestPartition { partition_index: 0 }],
                    }],
                },
            )
            .map_err(|e| e.to_string())?;
        let partition = response
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| format!("no partition in {response:?}"))?;
        if response.error_code != 0 || partition.error_code != 0 {
            return Err(format!("refused: {response:?}"));
        }
        let ids = |replicas: &[tarn_protocol::messages::describe_quorum::ReplicaState]| {
            let mut ids: Vec<i32> = replicas.iter().map(|r| r.replica_id).collect();
            ids.sort();
            ids
        };
        Ok(QuorumView {
            leader: partition.leader_id,
            epoch: partition.leader_epoch,
            high_watermark: partition.high_watermark,
            voters: ids(&partition.current_voters),
            observers: ids(&partition.observers),
        })
    }

    /// Polls node `id` until `done` holds of its view; the view, and how
    /// long it took. Panics with the last view after `timeout`.
    pub fn wait_for(
        &self,
        id: i32,
        timeout: Duration,
        what: &str,
        done: impl Fn(&View) -> bool,
    ) -> (View, Duration) {
        let start = Instant::now();
        let mut last = Err("not asked yet".to_owned());
        while start.elapsed() < timeout {
            last = self.view(id);
            if let Ok(view) = &last {
                if done(view) {
                    return (view.clone(), start.elapsed());
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
        panic!("node {id}: {what} not seen within {timeout:?}; last view: {last:?}");
    }

    /// Waits until every running broker lists exactly the running brokers
    /// and names one of them as the controller; returns the last one's.
    pub fn wait_until_formed(&self, timeout: Duration) -> i32 {
        let want = self.running_brokers();
        let mut controller = -1;
        for id in self.running_brokers() {
            let (view, _) = self.wait_for(id, timeout, "the whole cluster", |v| {
                v.brokers.keys().copied().collect::<Vec<_>>() == want
                    && want.contains(&v.controller)
            });
            controller = view.controller;
        }
        controller
    }
}

/// Tarn's private API key of controller requests (`CONTROLLER_API_KEY`).
const CONTROLLER_API_KEY: i16 = 10_100;

/// Asks the controller at `address` for the metadata log after an offset
/// beyond any, which it answers at once, naming the active controller
/// (node id -1: not an observer to list).
fn active_controller_at(address: &str) -> Result<i32, String> {
    use std::io::{Read, Write};
    let request = serde_json::json!({
        "FetchMetadata": { "node_id": -1, "after": u64::MAX, "max_wait_ms": 0 }
    });
    let client_id = b"tarn-e2e";
    let mut frame = Vec::new();
    frame.extend_from_slice(&CONTROLLER_API_KEY.to_be_bytes());
    frame.extend_from_slice(&0i16.to_be_bytes());
    frame.extend_from_slice(&7i32.to_be_bytes());
    frame.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    frame.extend_from_slice(client_id);
    frame.extend_from_slice(&serde_json::to_vec(&request).map_err(|e| e.to_string())?);
    let mut stream = std::net::TcpStream::connect(address).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(&(frame.len() as i32).to_be_bytes())
        .and_then(|()| stream.write_all(&frame))
        .map_err(|e| e.to_string())?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).map_err(|e| e.to_string())?;
    let mut response = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
    stream
        .read_exact(&mut response)
        .map_err(|e| e.to_string())?;
    if response.len() < 4 || response[..4] != 7i32.to_be_bytes() {
        return Err(format!("{address} answered another request"));
    }
    let answer: serde_json::Value =
        serde_json::from_slice(&response[4..]).map_err(|e| e.to_string())?;
    answer["result"]["Ok"]["Metadata"]["active_controller"]
        .as_i64()
        .map(|id| id as i32)
        .ok_or_else(|| format!("{address} answered {answer}"))
}

/// Every segment file of a partition directory, by name, with contents.
/// `tarn storage format` of node `id`'s data directory `dir` for a
/// dynamic quorum: its own settings in a properties file beside it, the
/// initial voters `initial_controllers`.
fn format_dynamic(
    cluster_id: &str,
    id: usize,
    dir: &std::path::Path,
    roles: &str,
    listeners: &str,
    bootstrap_servers: &str,
    initial_controllers: &str,
) {
    let config = dir.with_extension("properties");
    std::fs::write(
        &config,
        format!(
            "node.id={id}\nprocess.roles={roles}\nlisteners={listeners}\n\
             controller.listener.names=CONTROLLER\n\
             controller.quorum.bootstrap.servers={bootstrap_servers}\nlog.dirs={}\n",
            dir.display()
        ),
    )
    .expect("write a config for tarn storage format");
    let out = crate::cli::run(&[
        "storage",
        "format",
        "--cluster-id",
        cluster_id,
        "--initial-controllers",
        initial_controllers,
        "--config",
        config.to_str().expect("a UTF-8 path"),
    ]);
    assert!(out.status.success(), "tarn storage format: {out}");
}

pub fn segment_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, Vec<u8>)> = entries
        .map(|e| e.expect("read partition directory"))
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read segment"))
        })
        .collect();
    files.sort();
    files
}
