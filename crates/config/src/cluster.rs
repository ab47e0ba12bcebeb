//! The typed view of a node's place in the cluster: its roles, id, quorum,
//! listeners and data directory, built from a validated `BrokerConfig`.
//!
//! `ClusterConfig::from_config` parses the KRaft and listener keys as
//! Kafka 4 does (`KafkaConfig`, `SocketServerConfigs`, `QuorumConfig`) and
//! applies Kafka's validation, every refusal naming the key at fault. One
//! rule is Tarn's own: with neither `controller.quorum.voters` nor
//! `controller.quorum.bootstrap.servers`, a node that is broker and
//! controller (the default) runs a quorum of itself, so `tarn serve` with no
//! configuration needs no controller listener. What Tarn cannot serve yet
//! (security protocols other than PLAINTEXT) parses here and is refused by
//! `ClusterConfig::check_servable`, so that `tarn storage format` still
//! reads such a file as Kafka's tool does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use crate::BrokerConfig;

/// A role of `process.roles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessRole {
    Broker,
    Controller,
}

/// Kafka's `SecurityProtocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Parses a protocol name as `SecurityProtocol.forName` does: in any case.
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Some(match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of `listeners` or `advertised.listeners`: `NAME://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// The listener name, upper-cased as Kafka normalises it.
    pub name: String,
    /// The host without IPv6 brackets; empty means every interface.
    pub host: String,
    pub port: u16,
    pub security_protocol: SecurityProtocol,
}

impl Listener {
    /// The address to bind: the wildcard address for an empty host.
    pub fn bind_address(&self) -> String {
        match self.host.as_str() {
            "" => format!("0.0.0.0:{}", self.port),
            host if host.contains(':') => format!("[{host}]:{}", self.port),
            host => format!("{host}:{}", self.port),
        }
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.name, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.name, self.host, self.port)
        }
    }
}

/// How this node finds its controller quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quorum {
    /// Tarn's default: no quorum key is set, and the node (a broker and a
    /// controller) keeps its metadata in a local log that no other node
    /// can join. A node whose quorum keys name only itself is a quorum of
    /// one voter that brokers can join, as Kafka's combined quickstart is.
    SingleNode,
    /// A static quorum (`controller.quorum.voters`) with other voters.
    Voters(BTreeMap<i32, (String, u16)>),
    /// A dynamic quorum found through `controller.quorum.bootstrap.servers`.
    Bootstrap(Vec<(String, u16)>),
}

/// A configuration Kafka would refuse, or Tarn cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ClusterConfigError {
    /// The key at fault.
    pub key: &'static str,
    pub message: String,
}

fn refuse<T>(key: &'static str, message: impl Into<String>) -> Result<T, ClusterConfigError> {
    Err(ClusterConfigError {
        key,
        message: message.into(),
    })
}

/// A node's roles, quorum, listeners and data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    pub roles: BTreeSet<ProcessRole>,
    pub node_id: i32,
    /// `controller.quorum.voters`, by voter id.
    pub voters: BTreeMap<i32, (String, u16)>,
    /// `controller.quorum.bootstrap.servers`.
    pub bootstrap_servers: Vec<(String, u16)>,
    /// Every listener this node binds, broker and controller ones.
    pub listeners: Vec<Listener>,
    /// The broker listeners clients are told about: `advertised.listeners`
    /// (or `listeners` when it is not set) minus the controller listeners.
    pub advertised_listeners: Vec<Listener>,
    /// The controller listeners other nodes are told about, one for each
    /// name of `controller.listener.names` that has one.
    pub advertised_controller_listeners: Vec<Listener>,
    /// `controller.listener.names`, upper-cased.
    pub controller_listener_names: Vec<String>,
    /// `inter.broker.listener.name`, or the name of
    /// `security.inter.broker.protocol` when it is not set.
    pub inter_broker_listener_name: String,
    pub rack: Option<String>,
    pub broker_heartbeat_interval_ms: i32,
    pub broker_session_timeout_ms: i32,
    pub quorum_election_timeout_ms: i32,
    pub quorum_fetch_timeout_ms: i32,
    /// The one data directory: `log.dirs`, else `log.dir`.
    pub log_dir: PathBuf,
}

impl ClusterConfig {
    /// Parses and validates the cluster keys of `config`.
    pub fn from_config(config: &BrokerConfig) -> Result<ClusterConfig, ClusterConfigError> {
        let roles = parse_roles(config.get("process.roles"))?;
        let node_id = node_id(config)?;
        let voters = parse_voters(config.get("controller.quorum.voters"))?;
        let bootstrap_servers =
            parse_bootstrap_servers(config.get("controller.quorum.bootstrap.servers"))?;
        let controller_listener_names = parse_names(config.get("controller.listener.names"));
        let protocols = effective_protocol_map(config, &controller_listener_names)?;
        let listeners = parse_listeners("listeners", config.get("listeners"), &protocols)?;
        check_distinct_ports(config.get("listeners"), &listeners)?;
        let advertised = if config.is_set("advertised.listeners") {
            parse_listeners(
                "advertised.listeners",
                config.get("advertised.listeners"),
                &protocols,
            )?
        } else {
            listeners.clone()
        };
        let is_controller_name = |l: &&Listener| controller_listener_names.contains(&l.name);
        let advertised_listeners: Vec<Listener> = advertised
            .iter()
            .filter(|l| !is_controller_name(l))
            .cloned()
            .collect();
        let advertised_controller_listeners = controller_listener_names
            .iter()
            .filter_map(|name| {
                advertised
                    .iter()
                    .chain(&listeners)
                    .find(|l| &l.name == name)
                    .cloned()
            })
            .collect();
        let inter_broker_listener_name = inter_broker_listener_name(config, &protocols)?;
        let cluster = ClusterConfig {
            roles,
            node_id,
            voters,
            bootstrap_servers,
            listeners,
            advertised_listeners,
            advertised_controller_listeners,
            controller_listener_names,
            inter_broker_listener_name,
            rack: Some(config.get("broker.rack").trim().to_owned()).filter(|r| !r.is_empty()),
            broker_heartbeat_interval_ms: int(config, "broker.heartbeat.interval.ms"),
            broker_session_timeout_ms: int(config, "broker.session.timeout.ms"),
            quorum_election_timeout_ms: int(config, "controller.quorum.election.timeout.ms"),
            quorum_fetch_timeout_ms: int(config, "controller.quorum.fetch.timeout.ms"),
            log_dir: log_dir(config)?,
        };
        cluster.check_roles(&protocols)?;
        if cluster.is_broker() {
            cluster.check_broker_listeners()?;
        }
        cluster.check_routable()?;
        Ok(cluster)
    }

    pub fn is_broker(&self) -> bool {
        self.roles.contains(&ProcessRole::Broker)
    }

    pub fn is_controller(&self) -> bool {
        self.roles.contains(&ProcessRole::Controller)
    }

    /// The listeners this node binds that are not controller listeners.
    pub fn broker_listeners(&self) -> impl Iterator<Item = &Listener> {
        self.listeners
            .iter()
            .filter(|l| !self.controller_listener_names.contains(&l.name))
    }

    /// The listeners this node binds for the controller quorum.
    pub fn controller_listeners(&self) -> impl Iterator<Item = &Listener> {
        self.listeners
            .iter()
            .filter(|l| self.controller_listener_names.contains(&l.name))
    }

    /// The broker listener Tarn serves the Kafka protocol on: the
    /// inter-broker listener when it is bound here, else the first broker
    /// listener. `None` for a controller-only node.
    pub fn kafka_listener(&self) -> Option<&Listener> {
        self.broker_listeners()
            .find(|l| l.name == self.inter_broker_listener_name)
            .or_else(|| self.broker_listeners().next())
    }

    /// The advertised listener of the same name as `listener`.
    pub fn advertised_listener(&self, listener: &Listener) -> Option<&Listener> {
        self.advertised_listeners
            .iter()
            .find(|l| l.name == listener.name)
    }

    /// How this node finds its quorum (see `Quorum`).
    pub fn quorum(&self) -> Quorum {
        // `check_roles` allows no quorum key only on a broker and controller.
        if self.voters.is_empty() && self.bootstrap_servers.is_empty() {
            Quorum::SingleNode
        } else if !self.voters.is_empty() {
            Quorum::Voters(self.voters.clone())
        } else {
            Quorum::Bootstrap(self.bootstrap_servers.clone())
        }
    }

    /// Refuses what parses as Kafka's but Tarn does not serve yet: every
    /// security protocol other than PLAINTEXT.
    pub fn check_servable(&self) -> Result<(), ClusterConfigError> {
        let tls_or_sasl = self
            .listeners
            .iter()
            .chain(&self.advertised_listeners)
            .find(|l| l.security_protocol != SecurityProtocol::Plaintext);
        if let Some(listener) = tls_or_sasl {
            return refuse(
                "listener.security.protocol.map",
                format!(
                    "listener {} uses security protocol {}; Tarn serves only PLAINTEXT for now",
                    listener.name, listener.security_protocol
                ),
            );
        }
        Ok(())
    }

    /// Whether `controller.quorum.bootstrap.servers` names this node's
    /// controller listeners only (Kafka's quickstart does): the only quorum
    /// it can then start, unformatted, is itself alone.
    pub fn bootstraps_only_itself(&self) -> bool {
        self.is_controller()
            && self
                .bootstrap_servers
                .iter()
                .all(|(host, port)| self.is_own_controller_address(host, *port))
    }

    /// Whether `host:port` reaches one of this node's controller listeners.
    fn is_own_controller_address(&self, host: &str, port: u16) -> bool {
        let loopback =
            |h: &str| h == "localhost" || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        self.controller_listeners()
            .chain(&self.advertised_controller_listeners)
            .any(|l| {
                l.port == port
                    && (l.host.is_empty()
                        || l.host == host
                        || (loopback(host) && loopback(&l.host)))
            })
    }

    /// KafkaConfig's KRaft rules for broker-only, controller-only and
    /// combined nodes.
    fn check_roles(
        &self,
        protocols: &BTreeMap<String, SecurityProtocol>,
    ) -> Result<(), ClusterConfigError> {
        let quorum_unset = self.voters.is_empty() && self.bootstrap_servers.is_empty();
        let tarn_single_node = quorum_unset && self.is_broker() && self.is_controller();
        if quorum_unset && !tarn_single_node {
            return refuse(
                "controller.quorum.voters",
                "with process.roles other than broker,controller, either \
                 controller.quorum.bootstrap.servers must contain the set of bootstrap controllers \
                 or controller.quorum.voters must contain a parseable set of controllers",
            );
        }
        if !self.is_controller() {
            return self.check_broker_only(protocols);
        }
        if !self.voters.is_empty() && !self.voters.contains_key(&self.node_id) {
            return refuse(
                "controller.quorum.voters",
                format!(
                    "if process.roles contains the 'controller' role, the node id {} must be \
                     included in the set of voters {:?}",
                    self.node_id,
                    self.voters.keys().collect::<Vec<_>>()
                ),
            );
        }
        let bound: BTreeSet<&str> = self.listeners.iter().map(|l| l.name.as_str()).collect();
        if let Some(missing) = self
            .controller_listener_names
            .iter()
            .find(|n| !bound.contains(n.as_str()))
        {
            return refuse(
                "controller.listener.names",
                format!(
                    "must only contain values appearing in the 'listeners' configuration when \
                     running the KRaft controller role; {missing} does not"
                ),
            );
        }
        if !tarn_single_node && self.advertised_controller_listeners.is_empty() {
            return refuse(
                "controller.listener.names",
                "must contain at least one value appearing in the 'listeners' configuration \
                 when running the KRaft controller role",
            );
        }
        if !self.is_broker() && self.controller_listeners().count() != self.listeners.len() {
            return refuse(
                "listeners",
                "must only contain KRaft controller listeners from controller.listener.names \
                 when process.roles=controller",
            );
        }
        Ok(())
    }

    fn check_broker_only(
        &self,
        protocols: &BTreeMap<String, SecurityProtocol>,
    ) -> Result<(), ClusterConfigError> {
        if self.voters.contains_key(&self.node_id) {
            return refuse(
                "controller.quorum.voters",
                format!(
                    "if process.roles contains just the 'broker' role, the node id {} must not \
                     be included in the set of voters",
                    self.node_id
                ),
            );
        }
        if self.controller_listener_names.is_empty() {
            return refuse(
                "controller.listener.names",
                "must contain at least one value when running KRaft with just the broker role",
            );
        }
        if self.controller_listeners().next().is_some() {
            return refuse(
                "controller.listener.names",
                "must not contain a value appearing in the 'listeners' configuration when \
                 running KRaft with just the broker role",
            );
        }
        if let Some(name) = self
            .controller_listener_names
            .iter()
            .find(|n| !protocols.contains_key(*n))
        {
            return refuse(
                "controller.listener.names",
                format!(
                    "controller listener {name} is not found in listener.security.protocol.map \
                     (an explicit security mapping for each controller listener is required if \
                     listener.security.protocol.map is set, or if protocols other than PLAINTEXT \
                     are in use)"
                ),
            );
        }
        Ok(())
    }

    /// The rules every broker's listeners follow.
    fn check_broker_listeners(&self) -> Result<(), ClusterConfigError> {
        if self.advertised_listeners.is_empty() {
            return refuse(
                "advertised.listeners",
                "there must be at least one broker advertised listener; perhaps all listeners \
                 appear in controller.listener.names?",
            );
        }
        let advertised: BTreeSet<&str> = self
            .advertised_listeners
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        if !advertised.contains(self.inter_broker_listener_name.as_str()) {
            return refuse(
                "inter.broker.listener.name",
                format!(
                    "{} must be a listener name defined in advertised.listeners; the valid \
                     options based on currently configured listeners are {}",
                    self.inter_broker_listener_name,
                    names(&self.advertised_listeners)
                ),
            );
        }
        let bound: BTreeSet<&str> = self.listeners.iter().map(|l| l.name.as_str()).collect();
        if !advertised.is_subset(&bound) {
            return refuse(
                "advertised.listeners",
                format!(
                    "listener names must be equal to or a subset of the ones defined in \
                     listeners; found {}, the valid options are {}",
                    names(&self.advertised_listeners),
                    names(&self.listeners)
                ),
            );
        }
        Ok(())
    }

    fn check_routable(&self) -> Result<(), ClusterConfigError> {
        let advertised = self
            .advertised_listeners
            .iter()
            .chain(&self.advertised_controller_listeners);
        if let Some(l) = advertised.into_iter().find(|l| l.host == "0.0.0.0") {
            return refuse(
                "advertised.listeners",
                format!(
                    "{l} uses the nonroutable meta-address 0.0.0.0; use a routable IP address \
                     (set advertised.listeners when listeners binds 0.0.0.0)"
                ),
            );
        }
        Ok(())
    }
}

fn names(listeners: &[Listener]) -> String {
    listeners
        .iter()
        .map(|l| l.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

fn int(config: &BrokerConfig, key: &str) -> i32 {
    i32::try_from(config.get_i64(key)).unwrap_or_else(|_| panic!("validated Int config {key}"))
}

/// Kafka's `Csv.parseCsvList`: items split at commas, trimmed, empty dropped.
fn csv(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn parse_names(value: &str) -> Vec<String> {
    csv(value).map(str::to_ascii_uppercase).collect()
}

fn parse_roles(value: &str) -> Result<BTreeSet<ProcessRole>, ClusterConfigError> {
    csv(value)
        .map(|role| match role {
            "broker" => Ok(ProcessRole::Broker),
            "controller" => Ok(ProcessRole::Controller),
            other => refuse(
                "process.roles",
                format!("unknown role {other}; expected broker, controller or both"),
            ),
        })
        .collect::<Result<BTreeSet<_>, _>>()
        .and_then(|roles| {
            if roles.is_empty() {
                refuse(
                    "process.roles",
                    "must name broker, controller or both (Tarn has no ZooKeeper mode)",
                )
            } else {
                Ok(roles)
            }
        })
}

/// `node.id`, or `broker.id` when only that older name is set.
fn node_id(config: &BrokerConfig) -> Result<i32, ClusterConfigError> {
    let node_id = int(config, "node.id");
    if !config.is_set("broker.id") {
        return Ok(node_id);
    }
    let broker_id = int(config, "broker.id");
    if config.is_set("node.id") && broker_id != node_id {
        return refuse(
            "node.id",
            format!(
                "you must set node.id ({node_id}) to the same value as broker.id ({broker_id})"
            ),
        );
    }
    if broker_id < 0 {
        return refuse(
            "broker.id",
            "must be at least 0: KRaft nodes do not generate their ids",
        );
    }
    Ok(broker_id)
}

/// Kafka's `Utils.getHost`/`getPort`: `host:port` or `[v6]:port`.
fn parse_host_port(value: &str) -> Option<(String, u16)> {
    let (host, port) = match value.strip_prefix('[') {
        Some(rest) => {
            let (host, port) = rest.split_once("]:")?;
            (host, port)
        }
        None => value.rsplit_once(':')?,
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || "-%._:".contains(c);
    if !host.chars().all(valid) {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

fn parse_voters(value: &str) -> Result<BTreeMap<i32, (String, u16)>, ClusterConfigError> {
    const KEY: &str = "controller.quorum.voters";
    let mut voters = BTreeMap::new();
    for entry in csv(value) {
        let shape =
            || format!("entry {entry}: each entry should be in the form {{id}}@{{host}}:{{port}}");
        let Some((id, address)) = entry.split_once('@').filter(|(_, a)| !a.contains('@')) else {
            return refuse(KEY, shape());
        };
        let Ok(id) = id.trim().parse::<i32>() else {
            return refuse(
                KEY,
                format!("failed to parse voter ID as an integer from {id}"),
            );
        };
        let Some((host, port)) = parse_host_port(address).filter(|(h, _)| !h.is_empty()) else {
            return refuse(KEY, shape());
        };
        if voters.insert(id, (host, port)).is_some() {
            return refuse(KEY, format!("voter {id} is listed twice"));
        }
    }
    Ok(voters)
}

/// One entry of a dynamic quorum's initial voters (KIP-853), as
/// `kafka-storage.sh format --initial-controllers` takes them:
/// `{id}@{host}:{port}:{directory id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialController {
    pub id: i32,
    pub host: String,
    pub port: u16,
    /// The controller's metadata log directory id (a base64 UUID).
    pub directory_id: String,
}

impl fmt::Display for InitialController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(f, "{}@{host}:{}:{}", self.id, self.port, self.directory_id)
    }
}

/// Parses a comma-separated list of [`InitialController`]s; each id may
/// appear once. The directory ids are only split off here: the caller
/// checks that they are UUIDs.
pub fn parse_initial_controllers(value: &str) -> Result<Vec<InitialController>, String> {
    let mut controllers: Vec<InitialController> = Vec::new();
    for entry in csv(value) {
        let shape = || {
            format!("{entry}: each entry should be in the form {{id}}@{{host}}:{{port}}:{{directory id}}")
        };
        let (id, rest) = entry.split_once('@').ok_or_else(shape)?;
        let id: i32 = id
            .trim()
            .parse()
            .map_err(|_| format!("{entry}: the id {id} is not an integer"))?;
        let (address, directory_id) = rest.rsplit_once(':').ok_or_else(shape)?;
        let (host, port) = parse_host_port(address)
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(shape)?;
        if directory_id.is_empty() {
            return Err(shape());
        }
        if controllers.iter().any(|c| c.id == id) {
            return Err(format!("controller {id} is listed twice"));
        }
        controllers.push(InitialController {
            id,
            host,
            port,
            directory_id: directory_id.to_owned(),
        });
    }
    if controllers.is_empty() {
        return Err("no controllers given".into());
    }
    Ok(controllers)
}

fn parse_bootstrap_servers(value: &str) -> Result<Vec<(String, u16)>, ClusterConfigError> {
    csv(value)
        .map(|entry| {
            parse_host_port(entry)
                .filter(|(h, _)| !h.is_empty())
                .ok_or_else(|| ClusterConfigError {
                    key: "controller.quorum.bootstrap.servers",
                    message: format!("failed to parse {entry}: each entry should be in the form {{host}}:{{port}}"),
                })
        })
        .collect()
}

/// `listener.security.protocol.map` as Kafka reads it in KRaft mode: when
/// it is not set and no listener is SSL or SASL, every controller listener
/// name maps to PLAINTEXT as well.
fn effective_protocol_map(
    config: &BrokerConfig,
    controller_names: &[String],
) -> Result<BTreeMap<String, SecurityProtocol>, ClusterConfigError> {
    const KEY: &str = "listener.security.protocol.map";
    let mut map = BTreeMap::new();
    for entry in csv(config.get(KEY)) {
        let Some((name, protocol)) = entry.split_once(':') else {
            return refuse(KEY, format!("entry {entry} is not NAME:PROTOCOL"));
        };
        let Some(protocol) = SecurityProtocol::parse(protocol) else {
            return refuse(
                KEY,
                format!(
                    "invalid security protocol `{}` for listener {name}",
                    protocol.trim()
                ),
            );
        };
        map.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    if config.is_set(KEY) {
        return Ok(map);
    }
    let tls_or_sasl = |name: &str| ["SSL", "SASL_SSL", "SASL_PLAINTEXT"].contains(&name);
    let listener_names: Vec<String> = csv(config.get("listeners"))
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, _)| n.trim().to_ascii_uppercase())
        })
        .collect();
    if controller_names
        .iter()
        .chain(&listener_names)
        .any(|n| tls_or_sasl(n))
    {
        return Ok(map);
    }
    for name in controller_names {
        map.entry(name.clone())
            .or_insert(SecurityProtocol::Plaintext);
    }
    Ok(map)
}

/// Parses `NAME://host:port,...` as `SocketServerConfigs.listenerListToEndPoints`.
fn parse_listeners(
    key: &'static str,
    value: &str,
    protocols: &BTreeMap<String, SecurityProtocol>,
) -> Result<Vec<Listener>, ClusterConfigError> {
    let mut listeners: Vec<Listener> = Vec::new();
    for entry in csv(value) {
        let listener = parse_listener(entry).ok_or_else(|| ClusterConfigError {
            key,
            message: format!(
                "unable to parse {entry} to a broker endpoint (expected NAME://host:port)"
            ),
        })?;
        let Some(protocol) = protocols.get(&listener.0) else {
            return refuse(
                key,
                format!(
                    "no security protocol defined for listener {} in listener.security.protocol.map",
                    listener.0
                ),
            );
        };
        if listeners.iter().any(|l| l.name == listener.0) {
            return refuse(
                key,
                format!(
                    "each listener must have a different name; {} appears twice",
                    listener.0
                ),
            );
        }
        listeners.push(Listener {
            name: listener.0,
            host: listener.1,
            port: listener.2,
            security_protocol: *protocol,
        });
    }
    Ok(listeners)
}

fn parse_listener(entry: &str) -> Option<(String, String, u16)> {
    let (name, address) = entry.split_once("://")?;
    if name.is_empty() {
        return None;
    }
    let (host, port) = match address.strip_prefix(':') {
        Some(port) => (String::new(), port.parse().ok()?),
        None => parse_host_port(address)?,
    };
    Some((name.to_ascii_uppercase(), host, port))
}

/// Two listeners may share a port only if one is an IPv4 address and the
/// other an IPv6 address; port 0 (any free port) may repeat.
fn check_distinct_ports(value: &str, listeners: &[Listener]) -> Result<(), ClusterConfigError> {
    let mut by_port: BTreeMap<u16, Vec<&Listener>> = BTreeMap::new();
    for l in listeners.iter().filter(|l| l.port != 0) {
        by_port.entry(l.port).or_default().push(l);
    }
    for (port, group) in by_port.into_iter().filter(|(_, g)| g.len() > 1) {
        let v4 = |h: &str| h.parse::<Ipv4Addr>().is_ok();
        let v6 = |h: &str| h.parse::<Ipv6Addr>().is_ok();
        let dual_stack = matches!(group.as_slice(), [a, b]
            if (v4(&a.host) && v6(&b.host)) || (v6(&a.host) && v4(&b.host)));
        if !dual_stack {
            return refuse(
                "listeners",
                format!(
                    "each listener must have a different port unless exactly one listener has an \
                     IPv4 address and the other an IPv6 address; listeners: {value}, port: {port}"
                ),
            );
        }
    }
    Ok(())
}

fn inter_broker_listener_name(
    config: &BrokerConfig,
    protocols: &BTreeMap<String, SecurityProtocol>,
) -> Result<String, ClusterConfigError> {
    if !config.is_set("inter.broker.listener.name") {
        return Ok(config.get("security.inter.broker.protocol").to_owned());
    }
    if config.is_set("security.inter.broker.protocol") {
        return refuse(
            "inter.broker.listener.name",
            "only one of inter.broker.listener.name and security.inter.broker.protocol should be set",
        );
    }
    let name = config
        .get("inter.broker.listener.name")
        .trim()
        .to_ascii_uppercase();
    if !protocols.contains_key(&name) {
        return refuse(
            "inter.broker.listener.name",
            format!("listener {name} is not found in listener.security.protocol.map"),
        );
    }
    Ok(name)
}

/// The data directory: exactly one of `log.dirs` (when set) or `log.dir`.
fn log_dir(config: &BrokerConfig) -> Result<PathBuf, ClusterConfigError> {
    let key = if config.is_set("log.dirs") {
        "log.dirs"
    } else {
        "log.dir"
    };
    let dirs: Vec<&str> = csv(config.get(key)).collect();
    match dirs.as_slice() {
        [one] => Ok(PathBuf::from(one)),
        [] => refuse(
            key,
            "at least one log directory must be defined via log.dirs or log.dir",
        ),
        several => refuse(
            key,
            format!(
                "{} directories given; several log directories (JBOD) are not supported by \
                 Tarn yet, give one",
                several.len()
            ),
        ),
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
