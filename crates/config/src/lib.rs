//! Broker and topic configuration: Kafka's key names, types and defaults.
//!
//! Every key Tarn accepts is listed once, in `BROKER_CONFIGS` or
//! `TOPIC_CONFIGS`, with its type and default; a value is validated when
//! it enters (start-up file, `--set`, CreateTopics) and an unknown key or a
//! bad value is refused with a message naming the key. Topic configs that
//! later issues enforce (retention, compaction, flush) are stored now.

pub mod cluster;
pub mod docs;
pub mod meta_properties;
pub mod properties;

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Bool,
    Int,
    Long,
    Double,
    Str,
    List,
}

/// A validation rule beyond the value's type.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    Any,
    AtLeast(i64),
    Between(i64, i64),
    /// Between the first two, or exactly the third (a "default" marker
    /// such as `compression.gzip.level`'s -1).
    BetweenOr(i64, i64, i64),
    OneOf(&'static [&'static str]),
    /// A comma-separated list whose every item is one of these.
    ListOf(&'static [&'static str]),
    /// `*`, or a comma-separated list of `partition:broker` replicas (the
    /// throttled-replicas lists); empty entries only at the end.
    ThrottledReplicas,
}

pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigType,
    pub default: &'static str,
    pub check: Check,
}

/// `replica.selector.class` values Tarn implements (empty: the leader).
pub const RACK_AWARE_REPLICA_SELECTOR: &str =
    "org.apache.kafka.common.replica.RackAwareReplicaSelector";
const REPLICA_SELECTORS: &[&str] = &[
    "",
    "org.apache.kafka.common.replica.LeaderSelector",
    RACK_AWARE_REPLICA_SELECTOR,
];

const fn def(
    name: &'static str,
    kind: ConfigType,
    default: &'static str,
    check: Check,
) -> ConfigDef {
    ConfigDef {
        name,
        kind,
        default,
        check,
    }
}

use Check::*;
use ConfigType::*;

const CODECS: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const CLEANUP: &[&str] = &["compact", "delete"];
const TS_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
/// `process.roles` items.
pub const PROCESS_ROLES: &[&str] = &["broker", "controller"];
/// Kafka's security protocols (`SecurityProtocol`); Tarn serves PLAINTEXT
/// only for now, and `cluster` refuses the others at start-up.
pub const SECURITY_PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];
/// Kafka's default `listener.security.protocol.map`: every protocol's name
/// maps to itself (in the order Kafka prints it).
pub const DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP: &str =
    "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT";

/// Broker-level keys, as Kafka names and defaults them.
pub const BROKER_CONFIGS: &[ConfigDef] = &[
    def("auto.create.topics.enable", Bool, "true", Any),
    def("num.partitions", Int, "1", AtLeast(1)),
    def("default.replication.factor", Int, "1", AtLeast(1)),
    def("message.max.bytes", Int, "1048588", AtLeast(0)),
    def("socket.request.max.bytes", Int, "104857600", AtLeast(1)),
    def("max.connections", Int, "2147483647", AtLeast(0)),
    def("max.connections.per.ip", Int, "2147483647", AtLeast(0)),
    def("connections.max.idle.ms", Long, "600000", AtLeast(-1)),
    def("queued.max.request.bytes", Long, "-1", AtLeast(-1)),
    // Tarn's own key (Kafka has none): how long a request frame may take
    // to arrive once its first byte has, so that a client cannot hold a
    // connection's read state with a frame it never finishes.
    def("socket.request.read.timeout.ms", Long, "30000", AtLeast(1)),
    def("log.segment.bytes", Int, "1073741824", AtLeast(14)),
    def("log.index.interval.bytes", Int, "4096", AtLeast(0)),
    def("log.index.size.max.bytes", Int, "10485760", AtLeast(4)),
    // Kafka gives `log.roll.ms`, `log.roll.jitter.ms` and
    // `log.retention.ms` no default: when unset, each is derived from the
    // hours (or minutes) key beside it (`BrokerConfig::derive`). Their
    // defaults here are what that derivation gives from the hours' defaults.
    def("log.roll.ms", Long, "604800000", AtLeast(1)),
    def("log.roll.hours", Int, "168", AtLeast(1)),
    def("log.roll.jitter.ms", Long, "0", AtLeast(0)),
    def("log.roll.jitter.hours", Int, "0", AtLeast(0)),
    def("log.retention.ms", Long, "604800000", AtLeast(-1)),
    // No default in Kafka either; read only when set.
    def("log.retention.minutes", Int, "", Any),
    def("log.retention.bytes", Long, "-1", Any),
    def("log.cleanup.policy", List, "delete", ListOf(CLEANUP)),
    def(
        "log.flush.interval.messages",
        Long,
        "9223372036854775807",
        AtLeast(1),
    ),
    def(
        "log.flush.interval.ms",
        Long,
        "9223372036854775807",
        AtLeast(0),
    ),
    def(
        "log.message.timestamp.type",
        Str,
        "CreateTime",
        OneOf(TS_TYPES),
    ),
    def(
        "log.message.timestamp.before.max.ms",
        Long,
        "9223372036854775807",
        AtLeast(0),
    ),
    def(
        "log.message.timestamp.after.max.ms",
        Long,
        "3600000",
        AtLeast(0),
    ),
    def(
        "log.cleaner.delete.retention.ms",
        Long,
        "86400000",
        AtLeast(0),
    ),
    def("log.cleaner.min.cleanable.ratio", Double, "0.5", Any),
    def("log.cleaner.min.compaction.lag.ms", Long, "0", AtLeast(0)),
    def(
        "log.cleaner.max.compaction.lag.ms",
        Long,
        "9223372036854775807",
        AtLeast(1),
    ),
    def("log.segment.delete.delay.ms", Long, "60000", AtLeast(0)),
    def("compression.type", Str, "producer", OneOf(CODECS)),
    def("compression.gzip.level", Int, "-1", BetweenOr(1, 9, -1)),
    def("compression.lz4.level", Int, "9", Between(1, 17)),
    def("compression.zstd.level", Int, "3", Between(-131072, 22)),
    def("min.insync.replicas", Int, "1", AtLeast(1)),
    def("unclean.leader.election.enable", Bool, "false", Any),
    // Leader balance, run by the active controller.
    def("auto.leader.rebalance.enable", Bool, "true", Any),
    def(
        "leader.imbalance.check.interval.seconds",
        Long,
        "300",
        AtLeast(1),
    ),
    // Kafka checks no range; above 100 no rebalance ever runs.
    def("leader.imbalance.per.broker.percentage", Int, "10", Any),
    def("offsets.topic.num.partitions", Int, "50", AtLeast(1)),
    // Kafka's 3; a single node takes 1 unless set, as Kafka's shipped
    // single-node server.properties sets (see `Broker::start`).
    def("offsets.topic.replication.factor", Int, "3", AtLeast(1)),
    def("delete.topic.enable", Bool, "true", Any),
    def("group.initial.rebalance.delay.ms", Int, "3000", AtLeast(0)),
    def("group.min.session.timeout.ms", Int, "6000", AtLeast(0)),
    def("group.max.session.timeout.ms", Int, "1800000", AtLeast(0)),
    def("group.max.size", Int, "2147483647", AtLeast(1)),
    def("offsets.retention.minutes", Int, "10080", AtLeast(1)),
    def(
        "offsets.retention.check.interval.ms",
        Long,
        "600000",
        AtLeast(1),
    ),
    def("offset.metadata.max.bytes", Int, "4096", AtLeast(0)),
    def("offsets.topic.segment.bytes", Int, "104857600", AtLeast(14)),
    def(
        "log.flush.scheduler.interval.ms",
        Long,
        "9223372036854775807",
        AtLeast(1),
    ),
    def(
        "log.retention.check.interval.ms",
        Long,
        "300000",
        AtLeast(1),
    ),
    def("producer.id.expiration.ms", Int, "86400000", AtLeast(1)),
    def(
        "producer.id.expiration.check.interval.ms",
        Int,
        "600000",
        AtLeast(1),
    ),
    def("log.cleaner.enable", Bool, "true", Any),
    def("log.cleaner.backoff.ms", Long, "15000", AtLeast(0)),
    def(
        "log.cleaner.dedupe.buffer.size",
        Long,
        "134217728",
        AtLeast(1 << 20),
    ),
    // Tarn's own key (Kafka has none): how many segment files stay open in
    // the broker's file-handle cache; idle partitions hold no file.
    def("log.open.files.max", Int, "128", AtLeast(8)),
    def(
        "max.incremental.fetch.session.cache.slots",
        Int,
        "1000",
        AtLeast(0),
    ),
    // The node and its quorum (KRaft). Tarn's defaults make `tarn serve`
    // with no configuration one node that is broker and controller, with
    // a quorum of itself; Kafka's (no roles, node.id -1) would not start.
    def(
        "process.roles",
        List,
        "broker,controller",
        ListOf(PROCESS_ROLES),
    ),
    def("node.id", Int, "1", AtLeast(0)),
    def("broker.id", Int, "-1", AtLeast(-1)),
    def("controller.quorum.voters", List, "", Any),
    def("controller.quorum.bootstrap.servers", List, "", Any),
    def("controller.listener.names", List, "", Any),
    def(
        "controller.quorum.election.timeout.ms",
        Int,
        "1000",
        AtLeast(1),
    ),
    def(
        "controller.quorum.fetch.timeout.ms",
        Int,
        "2000",
        AtLeast(1),
    ),
    def("broker.heartbeat.interval.ms", Int, "2000", AtLeast(1)),
    def("broker.session.timeout.ms", Int, "9000", AtLeast(1)),
    // Replication throttles (KIP-73), set and cleared by
    // kafka-reassign-partitions.sh (see the server's replication_quota).
    def("replication.quota.window.num", Int, "11", AtLeast(1)),
    def(
        "replication.quota.window.size.seconds",
        Int,
        "1",
        AtLeast(1),
    ),
    def(
        "leader.replication.throttled.rate",
        Long,
        "9223372036854775807",
        AtLeast(0),
    ),
    def(
        "follower.replication.throttled.rate",
        Long,
        "9223372036854775807",
        AtLeast(0),
    ),
    def(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        Long,
        "9223372036854775807",
        AtLeast(0),
    ),
    // Tarn's own key (Kafka has none): the active controller fences a
    // broker whose heartbeat connection closed once its listener refuses
    // connections, without waiting out the session.
    def("broker.session.fence.on.disconnect", Bool, "true", Any),
    def("broker.rack", Str, "", Any),
    // Replication between brokers (Kafka's ISR model).
    def("replica.lag.time.max.ms", Long, "30000", AtLeast(1)),
    def("replica.fetch.max.bytes", Int, "1048576", AtLeast(0)),
    def("replica.fetch.min.bytes", Int, "1", AtLeast(1)),
    def("replica.fetch.wait.max.ms", Int, "500", AtLeast(0)),
    def(
        "replica.fetch.response.max.bytes",
        Int,
        "10485760",
        AtLeast(0),
    ),
    def("replica.fetch.backoff.ms", Int, "1000", AtLeast(0)),
    def("replica.socket.timeout.ms", Int, "30000", AtLeast(1)),
    def("num.replica.fetchers", Int, "1", AtLeast(1)),
    def("replica.selector.class", Str, "", OneOf(REPLICA_SELECTORS)),
    def(
        "replica.high.watermark.checkpoint.interval.ms",
        Long,
        "5000",
        AtLeast(1),
    ),
    // Listeners. Tarn listens on the loopback address by default, where
    // Kafka's `PLAINTEXT://:9092` listens on every interface.
    def("listeners", Str, "PLAINTEXT://127.0.0.1:9092", Any),
    def("advertised.listeners", Str, "", Any),
    def(
        "listener.security.protocol.map",
        Str,
        DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP,
        Any,
    ),
    def("inter.broker.listener.name", Str, "", Any),
    def(
        "security.inter.broker.protocol",
        Str,
        "PLAINTEXT",
        OneOf(SECURITY_PROTOCOLS),
    ),
    // The data directory: `log.dirs` when set, else `log.dir` (Tarn's
    // default is ./tarn-data where Kafka's is /tmp/kafka-logs).
    def("log.dir", Str, "./tarn-data", Any),
    def("log.dirs", Str, "", Any),
    // `log.retention.ms` is derived from it when neither that nor
    // `log.retention.minutes` is given.
    def("log.retention.hours", Int, "168", Any),
    // SO_SNDBUF and SO_RCVBUF of the Kafka listener's connections; -1
    // (or anything below 1) keeps the operating system's. The send buffer
    // defaults to Kafka's 102400: it cuts the broker's CPU per fetched
    // megabyte to between a half and a third of the autotuned one's. The
    // receive buffer defaults to the system's (Kafka's is 102400 too): a
    // bounded one took a tenth off 1 KiB produce
    // (bench/RESULTS-vs-kafka.md, "Socket buffers").
    def("socket.send.buffer.bytes", Int, "102400", Any),
    def("socket.receive.buffer.bytes", Int, "-1", Any),
    // Keys of Kafka's shipped server.properties that Tarn accepts without
    // effect, so that file starts Tarn: Tarn's threads and recovery are not
    // configured this way, and it has no transaction or share-group
    // coordinator.
    def("num.network.threads", Int, "3", AtLeast(1)),
    def("num.io.threads", Int, "8", AtLeast(1)),
    def("num.recovery.threads.per.data.dir", Int, "2", AtLeast(1)),
    def(
        "transaction.state.log.replication.factor",
        Int,
        "3",
        Between(1, 32767),
    ),
    def("transaction.state.log.min.isr", Int, "2", AtLeast(1)),
    def(
        "share.coordinator.state.topic.replication.factor",
        Int,
        "3",
        Between(1, 32767),
    ),
    def(
        "share.coordinator.state.topic.min.isr",
        Int,
        "2",
        Between(1, 32767),
    ),
];

/// Topic-level keys with the broker key that supplies each default.
pub const TOPIC_CONFIGS: &[(ConfigDef, Option<&str>)] = &[
    (
        def("cleanup.policy", List, "delete", ListOf(CLEANUP)),
        Some("log.cleanup.policy"),
    ),
    (
        def("compression.gzip.level", Int, "-1", BetweenOr(1, 9, -1)),
        Some("compression.gzip.level"),
    ),
    (
        def("compression.lz4.level", Int, "9", Between(1, 17)),
        Some("compression.lz4.level"),
    ),
    (
        def("compression.type", Str, "producer", OneOf(CODECS)),
        Some("compression.type"),
    ),
    (
        def("compression.zstd.level", Int, "3", Between(-131072, 22)),
        Some("compression.zstd.level"),
    ),
    (
        def("delete.retention.ms", Long, "86400000", AtLeast(0)),
        Some("log.cleaner.delete.retention.ms"),
    ),
    (
        def("file.delete.delay.ms", Long, "60000", AtLeast(0)),
        Some("log.segment.delete.delay.ms"),
    ),
    (
        def("flush.messages", Long, "9223372036854775807", AtLeast(1)),
        Some("log.flush.interval.messages"),
    ),
    (
        def("flush.ms", Long, "9223372036854775807", AtLeast(0)),
        Some("log.flush.interval.ms"),
    ),
    (
        def("index.interval.bytes", Int, "4096", AtLeast(0)),
        Some("log.index.interval.bytes"),
    ),
    (
        def("max.message.bytes", Int, "1048588", AtLeast(0)),
        Some("message.max.bytes"),
    ),
    (
        def("message.timestamp.type", Str, "CreateTime", OneOf(TS_TYPES)),
        Some("log.message.timestamp.type"),
    ),
    (
        def(
            "message.timestamp.before.max.ms",
            Long,
            "9223372036854775807",
            AtLeast(0),
        ),
        Some("log.message.timestamp.before.max.ms"),
    ),
    (
        def(
            "message.timestamp.after.max.ms",
            Long,
            "3600000",
            AtLeast(0),
        ),
        Some("log.message.timestamp.after.max.ms"),
    ),
    (
        def("min.cleanable.dirty.ratio", Double, "0.5", Any),
        Some("log.cleaner.min.cleanable.ratio"),
    ),
    (
        def("min.compaction.lag.ms", Long, "0", AtLeast(0)),
        Some("log.cleaner.min.compaction.lag.ms"),
    ),
    (
        def(
            "max.compaction.lag.ms",
            Long,
            "9223372036854775807",
            AtLeast(1),
        ),
        Some("log.cleaner.max.compaction.lag.ms"),
    ),
    (
        def("retention.bytes", Long, "-1", Any),
        Some("log.retention.bytes"),
    ),
    (
        def("retention.ms", Long, "604800000", AtLeast(-1)),
        Some("log.retention.ms"),
    ),
    (
        def("segment.bytes", Int, "1073741824", AtLeast(14)),
        Some("log.segment.bytes"),
    ),
    (
        def("segment.ms", Long, "604800000", AtLeast(1)),
        Some("log.roll.ms"),
    ),
    (
        def("segment.jitter.ms", Long, "0", AtLeast(0)),
        Some("log.roll.jitter.ms"),
    ),
    (
        def("segment.index.bytes", Int, "10485760", AtLeast(4)),
        Some("log.index.size.max.bytes"),
    ),
    (
        def("min.insync.replicas", Int, "1", AtLeast(1)),
        Some("min.insync.replicas"),
    ),
    (
        def("unclean.leader.election.enable", Bool, "false", Any),
        Some("unclean.leader.election.enable"),
    ),
    // Which replicas the replication throttles apply to
    // ("partition:broker,..." or "*").
    (
        def(
            "leader.replication.throttled.replicas",
            List,
            "",
            ThrottledReplicas,
        ),
        None,
    ),
    (
        def(
            "follower.replication.throttled.replicas",
            List,
            "",
            ThrottledReplicas,
        ),
        None,
    ),
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown config key '{0}'")]
    UnknownKey(String),
    #[error("invalid value '{value}' for config '{key}': {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// Checks `value` against a key's type and rule, returning it normalised.
pub fn validate(def: &ConfigDef, value: &str) -> Result<String, ConfigError> {
    let key = def.name;
    let trimmed = value.trim();
    let number = match def.kind {
        Bool => {
            return match trimmed.to_ascii_lowercase().as_str() {
                "true" | "false" => Ok(trimmed.to_ascii_lowercase()),
                _ => Err(invalid(key, value, "expected true or false")),
            }
        }
        Int => trimmed
            .parse::<i32>()
            .map(i64::from)
            .map_err(|_| invalid(key, value, "expected a 32-bit integer"))?,
        Long => trimmed
            .parse::<i64>()
            .map_err(|_| invalid(key, value, "expected a 64-bit integer"))?,
        Double => {
            let d = trimmed
                .parse::<f64>()
                .map_err(|_| invalid(key, value, "expected a number"))?;
            if !(0.0..=1.0).contains(&d) {
                return Err(invalid(key, value, "expected a ratio between 0 and 1"));
            }
            return Ok(trimmed.to_owned());
        }
        Str | List => return check_words(def, trimmed),
    };
    match def.check {
        AtLeast(min) if number < min => Err(invalid(key, value, format!("must be at least {min}"))),
        Between(lo, hi) if number < lo || number > hi => Err(invalid(
            key,
            value,
            format!("must be between {lo} and {hi}"),
        )),
        BetweenOr(lo, hi, also) if number != also && (number < lo || number > hi) => Err(invalid(
            key,
            value,
            format!("must be {also} or between {lo} and {hi}"),
        )),
        _ => Ok(number.to_string()),
    }
}

fn check_words(def: &ConfigDef, value: &str) -> Result<String, ConfigError> {
    match def.check {
        OneOf(allowed) if !allowed.contains(&value) => Err(invalid(
            def.name,
            value,
            format!("expected one of {}", allowed.join(", ")),
        )),
        ListOf(allowed) => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            if items.is_empty() || items.iter().any(|i| !allowed.contains(i)) {
                return Err(invalid(
                    def.name,
                    value,
                    format!("expected a list of {}", allowed.join(", ")),
                ));
            }
            Ok(items.join(","))
        }
        ThrottledReplicas if !is_throttled_replica_list(value) => Err(invalid(
            def.name,
            value,
            format!(
                "{} must be the literal '*' or a list of replicas in the following format: \
                 [partitionId]:[brokerId],[partitionId]:[brokerId],...",
                def.name
            ),
        )),
        _ => Ok(value.to_owned()),
    }
}

/// Kafka's rule for the throttled-replicas lists: exactly `*`, or
/// `partition:broker` entries (digits both), where empty entries may only
/// trail.
fn is_throttled_replica_list(value: &str) -> bool {
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    if items == ["*"] {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut ended = false;
    items.iter().all(|item| {
        if item.is_empty() {
            ended = true;
            return true;
        }
        !ended
            && item
                .split_once(':')
                .is_some_and(|(p, b)| digits(p) && digits(b))
    })
}

pub fn broker_def(key: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS.iter().find(|d| d.name == key)
}

pub fn topic_def(key: &str) -> Option<&'static (ConfigDef, Option<&'static str>)> {
    TOPIC_CONFIGS.iter().find(|(d, _)| d.name == key)
}

/// The broker's static configuration: defaults overlaid with the config
/// file and `--set` overrides, every value validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerConfig {
    /// The keys given, validated.
    values: BTreeMap<&'static str, String>,
    /// Keys Kafka derives from others when they are not given
    /// (`log.retention.ms` from `log.retention.hours`, ...): read after
    /// `values`, but not "set", so that DescribeConfigs shows where a
    /// value came from as Kafka does.
    derived: BTreeMap<&'static str, String>,
}

impl BrokerConfig {
    /// Applies `key=value` pairs in order; the first bad one is an error.
    pub fn with_overrides<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, ConfigError> {
        let mut config = BrokerConfig::default();
        for (key, value) in pairs {
            let def = broker_def(key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
            config.values.insert(def.name, validate(def, value)?);
        }
        config.derive();
        Ok(config)
    }

    /// Kafka's fallbacks for keys that are not given (`KafkaConfig`'s
    /// `logRetentionTimeMillis`, `logRollTimeMillis`,
    /// `logRollTimeJitterMillis`, `logFlushIntervalMs`): retention from the
    /// minutes, else the hours (a negative result keeps segments forever),
    /// rolling and its jitter from their hours, the flush interval from the
    /// flush scheduler's.
    fn derive(&mut self) {
        const HOUR_MS: i64 = 3_600_000;
        let mut derived = BTreeMap::new();
        if !self.is_set("log.retention.ms") {
            let ms = if self.is_set("log.retention.minutes") {
                Some(self.get_i64("log.retention.minutes") * 60_000)
            } else if self.is_set("log.retention.hours") {
                Some(self.get_i64("log.retention.hours") * HOUR_MS)
            } else {
                None
            };
            if let Some(ms) = ms {
                derived.insert("log.retention.ms", ms.max(-1).to_string());
            }
        }
        for (ms_key, hours_key) in [
            ("log.roll.ms", "log.roll.hours"),
            ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ] {
            if !self.is_set(ms_key) && self.is_set(hours_key) {
                let ms = self.get_i64(hours_key) * HOUR_MS;
                derived.insert(ms_key, ms.to_string());
            }
        }
        if !self.is_set("log.flush.interval.ms") && self.is_set("log.flush.scheduler.interval.ms") {
            let ms = self.get("log.flush.scheduler.interval.ms").to_owned();
            derived.insert("log.flush.interval.ms", ms);
        }
        self.derived = derived;
    }

    /// The value of a broker key: given, derived from another given key,
    /// else Kafka's default.
    pub fn get(&self, key: &str) -> &str {
        if let Some(v) = self.values.get(key).or_else(|| self.derived.get(key)) {
            return v;
        }
        broker_def(key)
            .map(|d| d.default)
            .unwrap_or_else(|| panic!("broker config key {key} is not declared"))
    }

    /// A copy with `pairs` laid over these values: how dynamic configs
    /// from the metadata log apply. They were validated when committed; one
    /// that no longer validates (unknown key, bad value) is logged and
    /// skipped rather than trusted.
    pub fn overlay<'a>(&self, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> BrokerConfig {
        let mut config = self.clone();
        for (key, value) in pairs {
            // A key Tarn does not know is a custom config, kept in the
            // metadata as Kafka keeps it, with no effect here.
            let Some(def) = broker_def(key) else {
                continue;
            };
            match validate(def, value) {
                Ok(value) => {
                    config.values.insert(def.name, value);
                }
                Err(e) => tracing::warn!(error = %e, "ignoring dynamic broker config"),
            }
        }
        config
    }

    /// Whether `key` was given (not derived, not defaulted).
    pub fn is_set(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// Whether `key`'s value comes from another given key
    /// (`log.retention.ms` from `log.retention.hours`, ...).
    pub fn is_derived(&self, key: &str) -> bool {
        self.derived.contains_key(key)
    }

    pub fn get_i64(&self, key: &str) -> i64 {
        self.get(key)
            .parse()
            .unwrap_or_else(|_| panic!("validated numeric config {key}"))
    }

    pub fn get_bool(&self, key: &str) -> bool {
        self.get(key) == "true"
    }

    /// The effective value of a topic key for a topic with `overrides`.
    pub fn topic_value(&self, overrides: &BTreeMap<String, String>, key: &str) -> String {
        if let Some(v) = overrides.get(key) {
            return v.clone();
        }
        match topic_def(key) {
            Some((_, Some(broker_key))) => self.get(broker_key).to_owned(),
            Some((d, None)) => d.default.to_owned(),
            None => panic!("topic config key {key} is not declared"),
        }
    }
}

/// Validates a topic config key and value (CreateTopics, configs CLI).
pub fn validate_topic_config(key: &str, value: &str) -> Result<String, ConfigError> {
    let (def, _) = topic_def(key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
    validate(def, value)
}

/// The format of a broker config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFileFormat {
    Toml,
    /// A Java properties file such as Kafka's `server.properties`.
    Properties,
}

impl ConfigFileFormat {
    /// The format of `text`, read from a file named `path`: by extension
    /// (`.toml`, `.properties`), else by content. A properties file of
    /// `key=value` lines with unquoted words is no valid TOML, and one
    /// that happens to be (`num.partitions=3`) means the same either way.
    pub fn detect(path: &std::path::Path, text: &str) -> ConfigFileFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => ConfigFileFormat::Toml,
            Some("properties") => ConfigFileFormat::Properties,
            _ if text.parse::<toml::Table>().is_ok() => ConfigFileFormat::Toml,
            _ => ConfigFileFormat::Properties,
        }
    }
}

/// The `key=value` pairs of a broker config file in either format, in
/// file order (the last of a repeated key wins when they are applied).
pub fn parse_config_file(
    path: &std::path::Path,
    text: &str,
) -> Result<Vec<(String, String)>, String> {
    match ConfigFileFormat::detect(path, text) {
        ConfigFileFormat::Toml => parse_toml(text),
        ConfigFileFormat::Properties => Ok(properties::parse(text)),
    }
}

/// Reads a TOML file whose keys are Kafka's broker config names, e.g.
/// `"num.partitions" = 3` or nested `[log] "segment.bytes" = ...`.
pub fn parse_toml(text: &str) -> Result<Vec<(String, String)>, String> {
    let table: toml::Table = text.parse().map_err(|e| format!("parse TOML: {e}"))?;
    let mut out = Vec::new();
    flatten("", &table, &mut out)?;
    Ok(out)
}

fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut Vec<(String, String)>,
) -> Result<(), String> {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out)?,
            toml::Value::String(s) => out.push((key, s.clone())),
            toml::Value::Integer(i) => out.push((key, i.to_string())),
            toml::Value::Float(f) => out.push((key, f.to_string())),
            toml::Value::Boolean(b) => out.push((key, b.to_string())),
            other => return Err(format!("config '{key}': unsupported value {other}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let err = BrokerConfig::with_overrides([("num.partitionz", "3")]).unwrap_err();
        assert_eq!(err, ConfigError::UnknownKey("num.partitionz".into()));
    }

    #[test]
    fn bad_value_is_named() {
        let err = BrokerConfig::with_overrides([("num.partitions", "zero")]).unwrap_err();
        assert!(err.to_string().contains("num.partitions"), "{err}");
        let err = BrokerConfig::with_overrides([("num.partitions", "0")]).unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }

    #[test]
    fn defaults_and_overrides() {
        let c = BrokerConfig::with_overrides([("num.partitions", "4")]).unwrap();
        assert_eq!(c.get_i64("num.partitions"), 4);
        assert_eq!(c.get_i64("message.max.bytes"), 1048588);
        assert!(c.get_bool("auto.create.topics.enable"));
        let mut topic = BTreeMap::new();
        assert_eq!(c.topic_value(&topic, "segment.bytes"), "1073741824");
        topic.insert("segment.bytes".into(), "1000".into());
        assert_eq!(c.topic_value(&topic, "segment.bytes"), "1000");
    }

    #[test]
    fn compression_levels_take_kafkas_ranges() {
        for (key, good, bad) in [
            ("compression.gzip.level", ["-1", "1", "9"], ["0", "10"]),
            ("compression.lz4.level", ["1", "9", "17"], ["0", "18"]),
            (
                "compression.zstd.level",
                ["-131072", "3", "22"],
                ["-131073", "23"],
            ),
        ] {
            for value in good {
                assert!(validate_topic_config(key, value).is_ok(), "{key}={value}");
            }
            for value in bad {
                assert!(validate_topic_config(key, value).is_err(), "{key}={value}");
            }
        }
    }

    #[test]
    fn topic_configs_validate() {
        assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
        assert!(validate_topic_config("cleanup.policy", "shred").is_err());
        assert!(validate_topic_config("retention.ms", "-1").is_ok());
        assert!(validate_topic_config("no.such", "1").is_err());
    }

    #[test]
    fn throttled_replica_lists_take_kafkas_form() {
        for key in [
            "leader.replication.throttled.replicas",
            "follower.replication.throttled.replicas",
        ] {
            for good in ["", "*", " * ", "0:1", "0:1, 1:2", "0:1,1:2,", "10:101"] {
                assert!(validate_topic_config(key, good).is_ok(), "{key}={good:?}");
            }
            for bad in [
                "0", "a:1", "0:b", "*,0:1", "0:1,,1:2", "0:1:2", "-1:2", "**",
            ] {
                let err = validate_topic_config(key, bad).expect_err(bad);
                assert!(
                    err.to_string().contains("must be the literal '*'"),
                    "{key}={bad:?}: {err}"
                );
            }
        }
    }

    #[test]
    fn retention_hours_give_retention_ms_unless_it_is_set() {
        let c = BrokerConfig::with_overrides([("log.retention.hours", "2")]).unwrap();
        assert_eq!(c.get_i64("log.retention.ms"), 7_200_000);
        let c = BrokerConfig::with_overrides([("log.retention.hours", "-1")]).unwrap();
        assert_eq!(c.get_i64("log.retention.ms"), -1);
        let c = BrokerConfig::with_overrides([
            ("log.retention.hours", "2"),
            ("log.retention.ms", "1000"),
        ])
        .unwrap();
        assert_eq!(c.get_i64("log.retention.ms"), 1000);
        assert!(c.is_set("log.retention.ms"));
    }

    #[test]
    fn time_keys_derive_as_kafkas() {
        let c = BrokerConfig::with_overrides([
            ("log.retention.hours", "2"),
            ("log.retention.minutes", "3"),
            ("log.roll.hours", "5"),
            ("log.roll.jitter.hours", "1"),
            ("log.flush.scheduler.interval.ms", "2500"),
        ])
        .unwrap();
        // Minutes win over hours; derived keys are not "set".
        assert_eq!(c.get_i64("log.retention.ms"), 180_000);
        assert!(!c.is_set("log.retention.ms") && c.is_derived("log.retention.ms"));
        assert_eq!(c.get_i64("log.roll.ms"), 18_000_000);
        assert_eq!(c.get_i64("log.roll.jitter.ms"), 3_600_000);
        assert_eq!(c.get_i64("log.flush.interval.ms"), 2500);
        assert_eq!(
            c.topic_value(&BTreeMap::new(), "segment.jitter.ms"),
            "3600000"
        );
        assert_eq!(c.topic_value(&BTreeMap::new(), "segment.ms"), "18000000");
        // The millisecond keys win when given.
        let c = BrokerConfig::with_overrides([
            ("log.roll.hours", "5"),
            ("log.roll.ms", "1000"),
            ("log.retention.minutes", "-5"),
        ])
        .unwrap();
        assert_eq!(c.get_i64("log.roll.ms"), 1000);
        assert_eq!(c.get_i64("log.retention.ms"), -1);
        // Nothing given: the defaults, nothing derived.
        let c = BrokerConfig::default();
        assert_eq!(c.get_i64("log.retention.ms"), 604_800_000);
        assert_eq!(c.get_i64("log.roll.jitter.ms"), 0);
        assert!(!c.is_derived("log.retention.ms"));
        assert!(BrokerConfig::with_overrides([("log.roll.hours", "0")]).is_err());
        assert!(BrokerConfig::with_overrides([("log.roll.jitter.hours", "-1")]).is_err());
    }

    #[test]
    fn security_protocols_parse_as_kafkas() {
        for p in ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] {
            assert!(BrokerConfig::with_overrides([("security.inter.broker.protocol", p)]).is_ok());
        }
        assert!(BrokerConfig::with_overrides([("security.inter.broker.protocol", "TLS")]).is_err());
    }

    #[test]
    fn config_files_are_toml_or_properties() {
        use std::path::Path;
        let props = "# Kafka\nlisteners=PLAINTEXT://:9092\nlog.dirs=/tmp/k\n";
        let toml = "listeners = \"PLAINTEXT://:9092\"\n[log]\ndirs = \"/tmp/k\"\n";
        let expected = vec![
            ("listeners".to_owned(), "PLAINTEXT://:9092".to_owned()),
            ("log.dirs".to_owned(), "/tmp/k".to_owned()),
        ];
        for name in ["server.properties", "server.conf", "server"] {
            assert_eq!(
                parse_config_file(Path::new(name), props).unwrap(),
                expected,
                "{name}"
            );
        }
        for name in ["tarn.toml", "tarn.conf"] {
            assert_eq!(
                parse_config_file(Path::new(name), toml).unwrap(),
                expected,
                "{name}"
            );
        }
        // Valid TOML, and the same pairs read as properties.
        let both = "num.partitions=3\n";
        for name in ["a.toml", "a.properties", "a"] {
            assert_eq!(
                parse_config_file(Path::new(name), both).unwrap(),
                vec![("num.partitions".to_owned(), "3".to_owned())]
            );
        }
        // The extension wins: a properties file named .toml is bad TOML.
        assert!(parse_config_file(Path::new("bad.toml"), props).is_err());
    }

    #[test]
    fn toml_keys_flatten() {
        let pairs =
            parse_toml("\"num.partitions\" = 3\n[log]\n\"segment.bytes\" = 2048\n").unwrap();
        assert!(pairs.contains(&("num.partitions".into(), "3".into())));
        assert!(pairs.contains(&("log.segment.bytes".into(), "2048".into())));
    }
}
