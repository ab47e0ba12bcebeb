//! Dynamic configs: what DescribeConfigs reports and what AlterConfigs and
//! IncrementalAlterConfigs may change, by Kafka's rules.
//!
//! A value comes from, highest precedence first: the topic's own config
//! (DYNAMIC_TOPIC_CONFIG), this broker's dynamic config
//! (DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic default
//! (DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's config file or `--set`
//! (STATIC_BROKER_CONFIG), and Kafka's default (DEFAULT_CONFIG). Dynamic
//! values live only in the metadata image (`TopicConfig` and `BrokerConfig`
//! records), so they survive restarts. A change to one resource is checked
//! whole — every key known, every value valid, no read-only broker key —
//! before any record is produced, so a refused request changes nothing.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::describe_configs::{
    DescribeConfigsResourceResult, DescribeConfigsSynonym,
};
use tarn_protocol::messages::incremental_alter_configs::{
    OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT,
};

use tarn_config::{
    broker_def, topic_def, validate, BrokerConfig, ConfigDef, ConfigError, ConfigType,
    BROKER_CONFIGS, TOPIC_CONFIGS,
};

use crate::topics::validate_topic_name;
use crate::{MetadataImage, MetadataRecord, TopicInfo};

/// Kafka's ConfigResource.Type ids this broker answers for.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// A broker's log levels (KIP-412), named by its node id; not kept in the
/// metadata (see `tarn_server::log_levels`).
pub const RESOURCE_BROKER_LOGGER: i8 = 8;
/// The most config entries one resource of an alter request may carry
/// (Kafka's MAX_RECORDS_PER_USER_OP).
pub const ALTER_ENTRIES_MAX: usize = 10_000;

/// Where a config value comes from (Kafka's ConfigSource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    Default,
    /// A broker logger's level (see `tarn_server::log_levels`).
    DynamicBrokerLogger,
}

impl ConfigSource {
    pub fn id(self) -> i8 {
        match self {
            ConfigSource::DynamicTopic => 1,
            ConfigSource::DynamicBroker => 2,
            ConfigSource::DynamicDefaultBroker => 3,
            ConfigSource::StaticBroker => 4,
            ConfigSource::Default => 5,
            ConfigSource::DynamicBrokerLogger => 6,
        }
    }

    /// Kafka's name, as kafka-configs.sh prints it.
    pub fn name(self) -> &'static str {
        match self {
            ConfigSource::DynamicTopic => "DYNAMIC_TOPIC_CONFIG",
            ConfigSource::DynamicBroker => "DYNAMIC_BROKER_CONFIG",
            ConfigSource::DynamicDefaultBroker => "DYNAMIC_DEFAULT_BROKER_CONFIG",
            ConfigSource::StaticBroker => "STATIC_BROKER_CONFIG",
            ConfigSource::Default => "DEFAULT_CONFIG",
            ConfigSource::DynamicBrokerLogger => "DYNAMIC_BROKER_LOGGER_CONFIG",
        }
    }

    /// Kafka's name for a wire id (including ones Tarn never sends).
    pub fn name_of(id: i8) -> &'static str {
        match id {
            1 => "DYNAMIC_TOPIC_CONFIG",
            2 => "DYNAMIC_BROKER_CONFIG",
            3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4 => "STATIC_BROKER_CONFIG",
            5 => "DEFAULT_CONFIG",
            6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
            _ => "UNKNOWN",
        }
    }
}

/// Kafka's DescribeConfigsResponse.ConfigType id of a key's type.
pub fn config_type_id(kind: ConfigType) -> i8 {
    match kind {
        ConfigType::Bool => 1,
        ConfigType::Str => 2,
        ConfigType::Int => 3,
        ConfigType::Long => 5,
        ConfigType::Double => 6,
        ConfigType::List => 7,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synonym {
    pub name: String,
    pub value: String,
    pub source: ConfigSource,
}

/// One key as DescribeConfigs reports it. `synonyms` are every level that
/// sets the key, highest precedence first; the first one supplies `value`.
/// A key Kafka derives from another when nothing sets it
/// (`DERIVED_IN_KAFKA`) has no value then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
    /// `None` for a custom broker key (one Tarn does not know, kept as
    /// Kafka keeps it): Kafka reports such a key as read-only, sensitive
    /// (its value hidden) and of unknown type.
    pub kind: Option<ConfigType>,
    pub synonyms: Vec<Synonym>,
}

impl ConfigEntry {
    fn from_synonyms(def: &ConfigDef, read_only: bool, synonyms: Vec<Synonym>) -> ConfigEntry {
        let (value, source) = match synonyms.first() {
            Some(s) if s.name == def.name => (Some(s.value.clone()), s.source),
            // Only another key sets it (a topic key's broker default), or
            // nothing does.
            Some(s) if !DERIVED_IN_KAFKA.contains(&def.name) => (Some(s.value.clone()), s.source),
            _ if DERIVED_IN_KAFKA.contains(&def.name) => (None, ConfigSource::Default),
            _ => (Some(def.default.to_owned()), ConfigSource::Default),
        };
        ConfigEntry {
            name: def.name.to_owned(),
            value,
            source,
            read_only,
            kind: Some(def.kind),
            synonyms,
        }
    }

    fn custom(name: &str, source: ConfigSource) -> ConfigEntry {
        ConfigEntry {
            name: name.to_owned(),
            value: None,
            source,
            read_only: true,
            kind: None,
            synonyms: vec![Synonym {
                name: name.to_owned(),
                value: String::new(),
                source,
            }],
        }
    }

    /// The wire form; synonyms only when the client asked for them.
    pub fn to_result(
        &self,
        include_synonyms: bool,
        include_documentation: bool,
    ) -> DescribeConfigsResourceResult {
        let sensitive = self.kind.is_none();
        DescribeConfigsResourceResult {
            name: self.name.clone(),
            value: self.value.clone(),
            read_only: self.read_only,
            is_default: self.source == ConfigSource::Default,
            config_source: self.source.id(),
            is_sensitive: sensitive,
            synonyms: if include_synonyms {
                self.synonyms
                    .iter()
                    .map(|s| DescribeConfigsSynonym {
                        name: s.name.clone(),
                        value: (!sensitive).then(|| s.value.clone()),
                        source: s.source.id(),
                    })
                    .collect()
            } else {
                Vec::new()
            },
            config_type: self.kind.map_or(CONFIG_TYPE_UNKNOWN, config_type_id),
            documentation: include_documentation
                .then(|| tarn_config::docs::documentation(&self.name).map(str::to_owned))
                .flatten(),
        }
    }
}

/// DescribeConfigs' type of a key it has no definition for.
const CONFIG_TYPE_UNKNOWN: i8 = 0;

/// Broker keys Kafka lets AlterConfigs change that are no topic config's
/// synonym.
const OTHER_DYNAMIC_BROKER_KEYS: &[&str] = &[
    "producer.id.expiration.ms",
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
];

/// Broker keys that have no default of their own in Kafka (when unset,
/// most are derived from another key, such as `log.retention.ms` from
/// `log.retention.hours`), so Kafka lists no default synonym for them.
const DERIVED_IN_KAFKA: &[&str] = &[
    "log.retention.ms",
    "log.retention.minutes",
    "log.roll.ms",
    "log.roll.jitter.ms",
    "log.flush.interval.ms",
];

/// The broker keys Kafka treats as one setting with `key`, in the order it
/// lists their synonyms (only the keys Tarn knows are looked up).
fn kafka_synonym_names(key: &str) -> &[&str] {
    const RETENTION: &[&str] = &[
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ];
    const ROLL: &[&str] = &["log.roll.ms", "log.roll.hours"];
    const JITTER: &[&str] = &["log.roll.jitter.ms", "log.roll.jitter.hours"];
    const FLUSH: &[&str] = &["log.flush.interval.ms", "log.flush.scheduler.interval.ms"];
    match key {
        "log.retention.ms" | "log.retention.minutes" | "log.retention.hours" => RETENTION,
        "log.roll.ms" | "log.roll.hours" => ROLL,
        "log.roll.jitter.ms" | "log.roll.jitter.hours" => JITTER,
        "log.flush.interval.ms" => FLUSH,
        _ => std::slice::from_ref(match BROKER_CONFIGS.iter().find(|d| d.name == key) {
            Some(def) => &def.name,
            None => return &[],
        }),
    }
}

/// A broker key that may be changed at run time: Kafka allows the broker
/// synonyms of topic configs (`log.*` defaults, `message.max.bytes`,
/// `compression.type`, ...) and a few more (`OTHER_DYNAMIC_BROKER_KEYS`);
/// the rest need a restart.
pub fn is_dynamic_broker_key(key: &str) -> bool {
    TOPIC_CONFIGS.iter().any(|(_, b)| *b == Some(key)) || OTHER_DYNAMIC_BROKER_KEYS.contains(&key)
}

/// What a config request names.
#[derive(Debug, Clone)]
pub enum Resource {
    Topic(Arc<TopicInfo>),
    /// This broker's own dynamic configs.
    Broker(i32),
    /// The cluster-wide dynamic default (an empty broker name).
    ClusterDefault,
}

/// A refusal: a Kafka error code and the message for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminError {
    pub code: ErrorCode,
    pub message: Option<String>,
}

fn refuse<T>(code: ErrorCode, message: impl Into<String>) -> Result<T, AdminError> {
    Err(AdminError {
        code,
        message: Some(message.into()),
    })
}

fn invalid_config(e: ConfigError) -> AdminError {
    let message = match e {
        ConfigError::UnknownKey(key) => format!("Unknown config name: {key}"),
        ConfigError::InvalidValue { key, value, reason } => {
            format!("Invalid value {value} for configuration {key}: {reason}")
        }
    };
    AdminError {
        code: error::INVALID_CONFIG,
        message: Some(message),
    }
}

/// The configs of this broker as the metadata image makes them.
pub struct ConfigView<'a> {
    pub static_config: &'a BrokerConfig,
    pub image: &'a MetadataImage,
    pub node_id: i32,
}

impl ConfigView<'_> {
    fn own_dynamic(&self) -> Option<&BTreeMap<String, String>> {
        self.image.broker_configs.get(&self.node_id)
    }

    /// Static config overlaid with the cluster default, then this broker's
    /// dynamic configs: what partitions and handlers should use.
    pub fn effective(&self) -> BrokerConfig {
        let cluster = self.image.cluster_configs.iter();
        let own = self.own_dynamic().into_iter().flatten();
        self.static_config
            .overlay(cluster.chain(own).map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// Every topic key for a topic whose own configs are `configs`, by
    /// name, as Kafka lists them: the value the topic uses, from the
    /// level of its first synonym (the topic's own, then those of the
    /// broker key that supplies its default, as for a broker), else a
    /// default. A value derived from another broker key (`retention.ms`
    /// from `log.retention.hours`) thus shows as a default with no
    /// synonyms, as in Kafka.
    pub fn topic_entries(&self, configs: &BTreeMap<String, String>) -> Vec<ConfigEntry> {
        let effective = self.effective();
        let mut entries: Vec<ConfigEntry> = TOPIC_CONFIGS
            .iter()
            .map(|(def, broker_key)| {
                let mut synonyms = Vec::new();
                if let Some(v) = configs.get(def.name) {
                    synonyms.push(Synonym {
                        name: def.name.to_owned(),
                        value: v.clone(),
                        source: ConfigSource::DynamicTopic,
                    });
                }
                if let Some(broker_def) = broker_key.and_then(broker_def) {
                    synonyms.extend(self.broker_key_synonyms(broker_def));
                }
                ConfigEntry {
                    name: def.name.to_owned(),
                    value: Some(effective.topic_value(configs, def.name)),
                    source: synonyms.first().map_or(ConfigSource::Default, |s| s.source),
                    read_only: false,
                    kind: Some(def.kind),
                    synonyms,
                }
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        entries
    }

    /// Every topic key for a new topic whose own configs are `configs`, as
    /// Kafka's controller lists them in a CreateTopics answer, by a rule
    /// of its own (`resolveEffectiveTopicConfig`, not DescribeConfigs'):
    /// the value the topic uses, from the first level (the topic, this
    /// broker's dynamic configs, the cluster default, the static config)
    /// that sets any broker key of the setting, else a default. A value
    /// derived from `log.retention.hours` thus shows as static here.
    pub fn created_topic_entries(&self, configs: &BTreeMap<String, String>) -> Vec<ConfigEntry> {
        let effective = self.effective();
        let mut entries: Vec<ConfigEntry> = TOPIC_CONFIGS
            .iter()
            .map(|(def, broker_key)| {
                let names = broker_key.map_or(&[][..], kafka_synonym_names);
                let sets_one = |level: Option<&BTreeMap<String, String>>| {
                    level.is_some_and(|m| names.iter().any(|n| m.contains_key(*n)))
                };
                let source = if configs.contains_key(def.name) {
                    ConfigSource::DynamicTopic
                } else if sets_one(self.own_dynamic()) {
                    ConfigSource::DynamicBroker
                } else if sets_one(Some(&self.image.cluster_configs)) {
                    ConfigSource::DynamicDefaultBroker
                } else if names.iter().any(|n| self.static_config.is_set(n)) {
                    ConfigSource::StaticBroker
                } else {
                    ConfigSource::Default
                };
                ConfigEntry {
                    name: def.name.to_owned(),
                    value: Some(effective.topic_value(configs, def.name)),
                    source,
                    read_only: false,
                    kind: Some(def.kind),
                    synonyms: Vec::new(),
                }
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        entries
    }

    /// Broker key `def`'s synonyms as Kafka lists them for a broker: every
    /// level that sets one of the keys Kafka treats as one setting
    /// (`log.retention.ms`, `.minutes` and `.hours`, say), level by level
    /// (this broker's dynamic configs, the cluster default, the static
    /// config, the defaults), from the first that sets `def` itself on.
    fn broker_key_synonyms(&self, def: &ConfigDef) -> Vec<Synonym> {
        let names: Vec<&ConfigDef> = kafka_synonym_names(def.name)
            .iter()
            .filter_map(|name| broker_def(name))
            .collect();
        let mut out = Vec::new();
        let mut add = |name: &str, value: &str, source| {
            out.push(Synonym {
                name: name.to_owned(),
                value: value.to_owned(),
                source,
            })
        };
        for other in &names {
            if let Some(v) = self.own_dynamic().and_then(|m| m.get(other.name)) {
                add(other.name, v, ConfigSource::DynamicBroker);
            }
        }
        for other in &names {
            if let Some(v) = self.image.cluster_configs.get(other.name) {
                add(other.name, v, ConfigSource::DynamicDefaultBroker);
            }
        }
        for other in &names {
            if self.static_config.is_set(other.name) {
                add(
                    other.name,
                    self.static_config.get(other.name),
                    ConfigSource::StaticBroker,
                );
            }
        }
        for other in &names {
            if !DERIVED_IN_KAFKA.contains(&other.name) {
                add(other.name, other.default, ConfigSource::Default);
            }
        }
        let first = out
            .iter()
            .position(|s| s.name == def.name)
            .unwrap_or(out.len());
        out.split_off(first)
    }

    /// Every broker key of this broker, by name.
    pub fn broker_entries(&self) -> Vec<ConfigEntry> {
        let mut entries: Vec<ConfigEntry> = BROKER_CONFIGS
            .iter()
            .map(|def| {
                let synonyms = self.broker_key_synonyms(def);
                ConfigEntry::from_synonyms(def, !is_dynamic_broker_key(def.name), synonyms)
            })
            .collect();
        // Custom keys set for this broker or as the cluster default.
        let custom = |configs: Option<&BTreeMap<String, String>>, source| {
            configs
                .into_iter()
                .flat_map(|c| c.keys())
                .filter(|k| broker_def(k).is_none())
                .map(move |k| ConfigEntry::custom(k, source))
                .collect::<Vec<_>>()
        };
        let own = custom(self.own_dynamic(), ConfigSource::DynamicBroker);
        let cluster = custom(
            Some(&self.image.cluster_configs),
            ConfigSource::DynamicDefaultBroker,
        );
        for entry in own.into_iter().chain(cluster) {
            if !entries.iter().any(|e| e.name == entry.name) {
                entries.push(entry);
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        entries
    }

    /// The keys set as the cluster-wide dynamic default, and only those,
    /// each with only its synonyms of that level (as Kafka lists them).
    pub fn cluster_default_entries(&self) -> Vec<ConfigEntry> {
        BROKER_CONFIGS
            .iter()
            .filter(|def| self.image.cluster_configs.contains_key(def.name))
            .map(|def| {
                let mut synonyms = self.broker_key_synonyms(def);
                synonyms.retain(|s| s.source == ConfigSource::DynamicDefaultBroker);
                ConfigEntry::from_synonyms(def, !is_dynamic_broker_key(def.name), synonyms)
            })
            .collect()
    }

    pub fn entries(&self, resource: &Resource) -> Vec<ConfigEntry> {
        match resource {
            Resource::Topic(topic) => self.topic_entries(&topic.configs),
            Resource::Broker(_) => self.broker_entries(),
            Resource::ClusterDefault => self.cluster_default_entries(),
        }
    }

    /// The value a key of `resource` falls back to when the resource does
    /// not set it: the base that APPEND and SUBTRACT start from.
    fn inherited(&self, resource: &Resource, def: &ConfigDef) -> String {
        match resource {
            Resource::Topic(_) => self.effective().topic_value(&BTreeMap::new(), def.name),
            Resource::Broker(_) => self
                .static_config
                .overlay(
                    self.image
                        .cluster_configs
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                )
                .get(def.name)
                .to_owned(),
            Resource::ClusterDefault => self.static_config.get(def.name).to_owned(),
        }
    }
}

/// Which request resolves a resource: Kafka's checks and messages differ
/// slightly between DescribeConfigs and the two alter APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Describe,
    Alter,
}

/// Finds the resource a request names, with Kafka's checks and messages.
pub fn resolve(
    image: &MetadataImage,
    node_id: i32,
    resource_type: i8,
    name: &str,
    purpose: Purpose,
) -> Result<Resource, AdminError> {
    match resource_type {
        RESOURCE_TOPIC => {
            if name.is_empty() && purpose == Purpose::Alter {
                return refuse(
                    error::INVALID_REQUEST,
                    "Default topic resources are not allowed.",
                );
            }
            validate_topic_name(name).map_err(|e| AdminError {
                code: e.code,
                message: Some(e.message),
            })?;
            match image.topic(name) {
                Some(topic) => Ok(Resource::Topic(topic.clone())),
                None => Err(AdminError {
                    code: error::UNKNOWN_TOPIC_OR_PARTITION,
                    message: (purpose == Purpose::Alter)
                        .then(|| format!("The topic '{name}' does not exist.")),
                }),
            }
        }
        RESOURCE_BROKER if name.is_empty() => Ok(Resource::ClusterDefault),
        RESOURCE_BROKER => {
            let (what, expected) = match purpose {
                Purpose::Describe => ("Broker", format!("{node_id} or empty string,")),
                Purpose::Alter => ("Node", format!("{node_id},")),
            };
            check_node_id(name, node_id, what, &expected).map(|()| Resource::Broker(node_id))
        }
        other => refuse(
            error::INVALID_REQUEST,
            format!("Unsupported resource type: {other}"),
        ),
    }
}

/// Checks that a resource names this broker, `node_id`, with Kafka's
/// INVALID_REQUEST messages: "`what` id must be an integer" for a name
/// that is not one, "expected `expected` but received" for another id
/// (the two differ between Kafka's describe and alter paths).
pub fn check_node_id(
    name: &str,
    node_id: i32,
    what: &str,
    expected: &str,
) -> Result<(), AdminError> {
    match name.parse::<i32>() {
        Ok(id) if id == node_id => Ok(()),
        Ok(_) => refuse(
            error::INVALID_REQUEST,
            format!("Unexpected broker id, expected {expected} but received {name}"),
        ),
        Err(_) => refuse(
            error::INVALID_REQUEST,
            format!("{what} id must be an integer, but it is: {name}"),
        ),
    }
}

/// The dynamic configs `resource` has now.
pub fn dynamic_configs(image: &MetadataImage, resource: &Resource) -> BTreeMap<String, String> {
    match resource {
        Resource::Topic(topic) => image
            .topic_by_id(&topic.topic_id)
            .map(|t| t.configs.clone())
            .unwrap_or_default(),
        Resource::Broker(id) => image.broker_configs.get(id).cloned().unwrap_or_default(),
        Resource::ClusterDefault => image.cluster_configs.clone(),
    }
}

/// `key`'s definition. A broker key Tarn does not know is `None`: Kafka
/// keeps such keys as custom broker configs (for plugins and the like)
/// without checking them; an unknown topic key is refused.
fn key_def(resource: &Resource, key: &str) -> Result<Option<&'static ConfigDef>, AdminError> {
    match resource {
        Resource::Topic(_) => match topic_def(key) {
            Some((def, _)) => Ok(Some(def)),
            None => Err(AdminError {
                code: error::INVALID_CONFIG,
                message: Some(format!("Unknown topic config name: {key}")),
            }),
        },
        Resource::Broker(_) | Resource::ClusterDefault => Ok(broker_def(key)),
    }
}

fn check_entries<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> Result<(), AdminError> {
    if names.len() > ALTER_ENTRIES_MAX {
        return refuse(
            error::INVALID_REQUEST,
            format!("A resource may change at most {ALTER_ENTRIES_MAX} configs at once"),
        );
    }
    let mut seen = HashSet::new();
    for name in names {
        if !seen.insert(name) {
            return refuse(error::INVALID_REQUEST, "Error due to duplicate config keys");
        }
    }
    Ok(())
}

fn check_nulls<'a>(nulls: impl Iterator<Item = &'a str>) -> Result<(), AdminError> {
    let nulls: Vec<&str> = nulls.collect();
    if nulls.is_empty() {
        return Ok(());
    }
    refuse(
        error::INVALID_REQUEST,
        format!("Null value not supported for : {}", nulls.join(", ")),
    )
}

/// The records that make `wanted` the complete dynamic config set of
/// `resource`, after checking every key and value.
fn plan(
    view: &ConfigView<'_>,
    resource: &Resource,
    wanted: BTreeMap<String, String>,
) -> Result<Vec<MetadataRecord>, AdminError> {
    let is_broker = !matches!(resource, Resource::Topic(_));
    let mut normalised = BTreeMap::new();
    let mut read_only = Vec::new();
    for (key, value) in &wanted {
        let Some(def) = key_def(resource, key)? else {
            normalised.insert(key.clone(), value.clone());
            continue;
        };
        if is_broker && !is_dynamic_broker_key(key) {
            read_only.push(key.as_str());
            continue;
        }
        let value = validate(def, value).map_err(invalid_config).map_err(|e| {
            // Kafka refuses a broker value it cannot parse as a bad
            // request, a topic value as a bad config.
            if is_broker {
                AdminError {
                    code: error::INVALID_REQUEST,
                    ..e
                }
            } else {
                e
            }
        })?;
        normalised.insert(key.clone(), value);
    }
    if !read_only.is_empty() {
        return refuse(
            error::INVALID_REQUEST,
            format!(
                "Cannot update these configs dynamically: Set({})",
                read_only.join(", ")
            ),
        );
    }
    let current = dynamic_configs(view.image, resource);
    let record = |name: &str, value: Option<String>| match resource {
        Resource::Topic(topic) => MetadataRecord::TopicConfig {
            topic_id: topic.topic_id.0,
            name: name.to_owned(),
            value,
        },
        Resource::Broker(id) => MetadataRecord::BrokerConfig {
            broker_id: Some(*id),
            name: name.to_owned(),
            value,
        },
        Resource::ClusterDefault => MetadataRecord::BrokerConfig {
            broker_id: None,
            name: name.to_owned(),
            value,
        },
    };
    let mut records: Vec<MetadataRecord> = normalised
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(*v))
        .map(|(k, v)| record(k, Some(v.clone())))
        .collect();
    records.extend(
        current
            .keys()
            .filter(|k| !normalised.contains_key(*k))
            .map(|k| record(k, None)),
    );
    let min_isr_changes = records.iter().any(|r| {
        matches!(r, MetadataRecord::TopicConfig { name, .. } | MetadataRecord::BrokerConfig { name, .. }
            if name == crate::elections::MIN_INSYNC_REPLICAS)
    });
    if min_isr_changes {
        let only = match resource {
            Resource::Topic(topic) => Some(topic.topic_id),
            Resource::Broker(_) | Resource::ClusterDefault => None,
        };
        records.extend(crate::elections::clear_elr(view.image, only));
    }
    Ok(records)
}

/// AlterConfigs: `configs` become the whole dynamic set of the resource;
/// every key it does not name goes back to its inherited value.
pub fn plan_replace(
    view: &ConfigView<'_>,
    resource: &Resource,
    configs: &[(String, Option<String>)],
) -> Result<Vec<MetadataRecord>, AdminError> {
    check_entries(configs.iter().map(|(k, _)| k.as_str()))?;
    check_nulls(
        configs
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.as_str()),
    )?;
    let wanted = configs
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect();
    plan(view, resource, wanted)
}

/// One IncrementalAlterConfigs entry: key, Kafka's operation id, value.
pub type IncrementalOp = (String, i8, Option<String>);

/// IncrementalAlterConfigs: applies SET, DELETE, APPEND and SUBTRACT to
/// the current dynamic set. APPEND and SUBTRACT work on LIST keys and
/// start from the inherited value when the resource does not set the key.
pub fn plan_incremental(
    view: &ConfigView<'_>,
    resource: &Resource,
    ops: &[IncrementalOp],
) -> Result<Vec<MetadataRecord>, AdminError> {
    check_entries(ops.iter().map(|(k, _, _)| k.as_str()))?;
    check_nulls(
        ops.iter()
            .filter(|(_, op, v)| *op != OP_DELETE && v.is_none())
            .map(|(k, _, _)| k.as_str()),
    )?;
    let mut wanted = dynamic_configs(view.image, resource);
    for (key, op, value) in ops {
        let def = key_def(resource, key)?;
        let value = value.as_deref().unwrap_or("");
        match *op {
            OP_SET => {
                wanted.insert(key.clone(), value.to_owned());
            }
            OP_DELETE => {
                wanted.remove(key);
            }
            OP_APPEND | OP_SUBTRACT => {
                let verb = if *op == OP_APPEND {
                    "APPEND"
                } else {
                    "SUBTRACT"
                };
                let Some(def) = def.filter(|d| d.kind == ConfigType::List) else {
                    return refuse(
                        error::INVALID_CONFIG,
                        format!("Can't {verb} to key {key} because its type is not LIST."),
                    );
                };
                let base = wanted
                    .get(key)
                    .cloned()
                    .unwrap_or_else(|| view.inherited(resource, def));
                let mut items: Vec<&str> = base
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if *op == OP_APPEND {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    } else {
                        items.retain(|i| *i != item);
                    }
                }
                let joined = items.join(",");
                wanted.insert(key.clone(), joined);
            }
            other => {
                return refuse(
                    error::INVALID_REQUEST,
                    format!("Unknown operations type {other}"),
                )
            }
        }
    }
    plan(view, resource, wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MetadataRecord;

    const NODE: i32 = 1;

    fn image_with_topic() -> MetadataImage {
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: [5; 16],
        });
        image
    }

    fn apply(image: &mut MetadataImage, records: &[MetadataRecord]) {
        for r in records {
            image.apply(r);
        }
    }

    fn entry<'e>(entries: &'e [ConfigEntry], name: &str) -> &'e ConfigEntry {
        entries.iter().find(|e| e.name == name).unwrap()
    }

    fn view_of<'a>(static_config: &'a BrokerConfig, image: &'a MetadataImage) -> ConfigView<'a> {
        ConfigView {
            static_config,
            image,
            node_id: NODE,
        }
    }

    fn topic(image: &MetadataImage) -> Resource {
        resolve(image, NODE, RESOURCE_TOPIC, "t", Purpose::Alter).unwrap()
    }

    fn set(key: &str, value: &str) -> IncrementalOp {
        (key.into(), OP_SET, Some(value.into()))
    }

    #[test]
    fn sources_follow_kafka_precedence() {
        let static_config = BrokerConfig::with_overrides([("log.retention.ms", "1000")]).unwrap();
        let mut image = image_with_topic();
        let view = view_of(&static_config, &image);
        let entries = view.topic_entries(&BTreeMap::new());
        assert_eq!(entries.len(), TOPIC_CONFIGS.len());
        let retention = entry(&entries, "retention.ms");
        assert_eq!(
            (
                retention.value.as_deref().unwrap_or("null"),
                retention.source
            ),
            ("1000", ConfigSource::StaticBroker)
        );
        assert_eq!(
            retention.synonyms,
            vec![
                Synonym {
                    name: "log.retention.ms".into(),
                    value: "1000".into(),
                    source: ConfigSource::StaticBroker
                },
                // No default of log.retention.ms itself (Kafka derives it
                // from log.retention.hours), but the hours' default, as
                // Kafka lists every key of the one setting.
                Synonym {
                    name: "log.retention.hours".into(),
                    value: "168".into(),
                    source: ConfigSource::Default
                },
            ]
        );
        assert_eq!(
            entry(&entries, "segment.bytes").source,
            ConfigSource::Default
        );

        image.apply(&MetadataRecord::BrokerConfig {
            broker_id: None,
            name: "log.retention.ms".into(),
            value: Some("2000".into()),
        });
        image.apply(&MetadataRecord::BrokerConfig {
            broker_id: Some(NODE),
            name: "log.retention.ms".into(),
            value: Some("3000".into()),
        });
        image.apply(&MetadataRecord::TopicConfig {
            topic_id: [5; 16],
            name: "retention.ms".into(),
            value: Some("4000".into()),
        });
        let view = view_of(&static_config, &image);
        let configs = image.topic("t").unwrap().configs.clone();
        let entries = view.topic_entries(&configs);
        let retention = entry(&entries, "retention.ms");
        let sources: Vec<_> = retention.synonyms.iter().map(|s| s.source).collect();
        assert_eq!(
            sources,
            [
                ConfigSource::DynamicTopic,
                ConfigSource::DynamicBroker,
                ConfigSource::DynamicDefaultBroker,
                ConfigSource::StaticBroker,
                ConfigSource::Default,
            ]
        );
        assert_eq!(retention.value.as_deref(), Some("4000"));
        let segment = entry(&entries, "segment.bytes");
        assert_eq!(
            segment.synonyms.last().map(|s| s.source),
            Some(ConfigSource::Default),
            "a key with a default of its own lists it"
        );
        assert_eq!(view.effective().get("log.retention.ms"), "3000");
        let broker = entry(&view.broker_entries(), "log.retention.ms").clone();
        assert_eq!(
            (broker.value.as_deref(), broker.read_only),
            (Some("3000"), false)
        );
        assert!(entry(&view.broker_entries(), "num.partitions").read_only);
        let defaults = view.cluster_default_entries();
        assert_eq!(defaults.len(), 1);
        assert_eq!(defaults[0].value.as_deref(), Some("2000"));
        assert_eq!(defaults[0].synonyms.len(), 1);
        let wire = defaults[0].to_result(false, false);
        assert!(wire.synonyms.is_empty());
        assert_eq!(
            (wire.config_source, wire.config_type),
            (ConfigSource::DynamicDefaultBroker.id(), 5)
        );
    }

    /// Kafka 4.4 with `log.retention.hours=100` and `log.roll.hours=50` in
    /// its server.properties lists a topic's `retention.ms` as 360000000
    /// from DEFAULT_CONFIG with no synonyms (the derived value belongs to
    /// no level that names `log.retention.ms`), and the broker's
    /// `log.retention.ms` as null.
    #[test]
    fn values_derived_from_hours_show_as_kafkas() {
        let static_config = BrokerConfig::with_overrides([
            ("log.retention.hours", "100"),
            ("log.roll.hours", "50"),
        ])
        .unwrap();
        let image = image_with_topic();
        let view = view_of(&static_config, &image);
        let topic = view.topic_entries(&BTreeMap::new());
        for (key, value) in [("retention.ms", "360000000"), ("segment.ms", "180000000")] {
            let e = entry(&topic, key);
            assert_eq!(
                (e.value.as_deref(), e.source, e.synonyms.len()),
                (Some(value), ConfigSource::Default, 0),
                "{key}"
            );
        }
        let broker = view.broker_entries();
        let ms = entry(&broker, "log.retention.ms");
        assert_eq!((ms.value.as_deref(), ms.synonyms.len()), (None, 0));
        let hours = entry(&broker, "log.retention.hours");
        assert_eq!(
            (hours.value.as_deref(), hours.source),
            (Some("100"), ConfigSource::StaticBroker)
        );
        let names: Vec<_> = hours
            .synonyms
            .iter()
            .map(|s| (s.name.as_str(), s.source))
            .collect();
        assert_eq!(
            names,
            [
                ("log.retention.hours", ConfigSource::StaticBroker),
                ("log.retention.hours", ConfigSource::Default)
            ]
        );
        let minutes = entry(&broker, "log.retention.minutes");
        assert_eq!(
            (minutes.value.as_deref(), minutes.synonyms.len()),
            (None, 0)
        );
        // A CreateTopics answer lists them as static.
        let created = view.created_topic_entries(&BTreeMap::new());
        let retention = entry(&created, "retention.ms");
        assert_eq!(
            (retention.value.as_deref(), retention.source),
            (Some("360000000"), ConfigSource::StaticBroker)
        );
        assert_eq!(
            entry(&created, "segment.bytes").source,
            ConfigSource::Default
        );
    }

    #[test]
    fn resources_are_resolved_as_kafka_does() {
        let image = image_with_topic();
        let resolve = |t, n: &str, p| resolve(&image, NODE, t, n, p);
        assert!(matches!(
            resolve(RESOURCE_TOPIC, "t", Purpose::Describe),
            Ok(Resource::Topic(_))
        ));
        let missing = resolve(RESOURCE_TOPIC, "nope", Purpose::Describe).unwrap_err();
        assert_eq!(
            (missing.code, missing.message),
            (error::UNKNOWN_TOPIC_OR_PARTITION, None)
        );
        assert_eq!(
            resolve(RESOURCE_TOPIC, "a/b", Purpose::Alter)
                .unwrap_err()
                .code,
            error::INVALID_TOPIC_EXCEPTION
        );
        assert_eq!(
            resolve(RESOURCE_TOPIC, "", Purpose::Alter)
                .unwrap_err()
                .code,
            error::INVALID_REQUEST
        );
        assert!(matches!(
            resolve(RESOURCE_BROKER, "", Purpose::Alter),
            Ok(Resource::ClusterDefault)
        ));
        assert!(matches!(
            resolve(RESOURCE_BROKER, "1", Purpose::Alter),
            Ok(Resource::Broker(1))
        ));
        let other = resolve(RESOURCE_BROKER, "2", Purpose::Describe).unwrap_err();
        assert_eq!(other.code, error::INVALID_REQUEST);
        assert!(other
            .message
            .unwrap()
            .contains("expected 1 or empty string"));
        assert_eq!(
            resolve(RESOURCE_BROKER, "x", Purpose::Alter)
                .unwrap_err()
                .code,
            error::INVALID_REQUEST
        );
        assert_eq!(
            resolve(8, "1", Purpose::Describe).unwrap_err().code,
            error::INVALID_REQUEST
        );
    }

    #[test]
    fn bad_key_or_value_refuses_the_whole_resource() {
        let static_config = BrokerConfig::default();
        let image = image_with_topic();
        let view = view_of(&static_config, &image);
        let t = topic(&image);
        let err = plan_incremental(
            &view,
            &t,
            &[set("retention.ms", "5"), set("retention.mss", "5")],
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_CONFIG);
        assert!(err.message.unwrap().contains("retention.mss"));
        let err = plan_incremental(
            &view,
            &t,
            &[set("retention.ms", "5"), set("segment.bytes", "ten")],
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_CONFIG);
        let message = err.message.unwrap();
        assert!(
            message.contains("segment.bytes") && message.contains("ten"),
            "{message}"
        );
        let err = plan_replace(&view, &t, &[("retention.ms".into(), None)]).unwrap_err();
        assert_eq!(err.code, error::INVALID_REQUEST);
        let err = plan_incremental(
            &view,
            &t,
            &[set("retention.ms", "1"), set("retention.ms", "2")],
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_REQUEST);
        let err = plan_incremental(&view, &t, &[("retention.ms".into(), 9, Some("1".into()))])
            .unwrap_err();
        assert_eq!(err.code, error::INVALID_REQUEST);
        let err = plan_incremental(
            &view,
            &t,
            &[("retention.ms".into(), OP_APPEND, Some("1".into()))],
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_CONFIG);
        assert!(err.message.unwrap().contains("not LIST"));
    }

    #[test]
    fn replace_resets_unnamed_keys_and_incremental_edits() {
        let static_config = BrokerConfig::default();
        let mut image = image_with_topic();
        let records = {
            let view = view_of(&static_config, &image);
            plan_incremental(
                &view,
                &topic(&image),
                &[set("retention.ms", "5"), set("segment.bytes", "1000")],
            )
            .unwrap()
        };
        assert_eq!(records.len(), 2);
        apply(&mut image, &records);
        let view = view_of(&static_config, &image);
        let t = topic(&image);
        // Setting what is already set produces nothing.
        assert!(plan_incremental(&view, &t, &[set("retention.ms", "5")])
            .unwrap()
            .is_empty());
        let records =
            plan_replace(&view, &t, &[("retention.ms".into(), Some("6".into()))]).unwrap();
        apply(&mut image, &records);
        let configs = &image.topic("t").unwrap().configs;
        assert_eq!(configs.len(), 1);
        assert_eq!(configs["retention.ms"], "6");
        let view = view_of(&static_config, &image);
        let records = plan_incremental(
            &view,
            &topic(&image),
            &[("retention.ms".into(), OP_DELETE, None)],
        )
        .unwrap();
        apply(&mut image, &records);
        assert!(image.topic("t").unwrap().configs.is_empty());
    }

    #[test]
    fn append_and_subtract_work_on_lists_from_the_inherited_value() {
        let static_config = BrokerConfig::default();
        let mut image = image_with_topic();
        let run = |image: &mut MetadataImage, op: i8, value: &str| {
            let records = {
                let view = view_of(&static_config, image);
                plan_incremental(
                    &view,
                    &topic(image),
                    &[("cleanup.policy".into(), op, Some(value.into()))],
                )
            };
            records.map(|r| {
                apply(image, &r);
                image
                    .topic("t")
                    .unwrap()
                    .configs
                    .get("cleanup.policy")
                    .cloned()
            })
        };
        assert_eq!(
            run(&mut image, OP_APPEND, "compact").unwrap().as_deref(),
            Some("delete,compact")
        );
        assert_eq!(
            run(&mut image, OP_APPEND, "compact").unwrap().as_deref(),
            Some("delete,compact")
        );
        assert_eq!(
            run(&mut image, OP_SUBTRACT, "delete").unwrap().as_deref(),
            Some("compact")
        );
        // An empty policy is not a valid value: refused, nothing changes.
        let err = run(&mut image, OP_SUBTRACT, "compact").unwrap_err();
        assert_eq!(err.code, error::INVALID_CONFIG);
        assert_eq!(
            image.topic("t").unwrap().configs["cleanup.policy"],
            "compact"
        );
        assert_eq!(
            run(&mut image, OP_APPEND, "shred").unwrap_err().code,
            error::INVALID_CONFIG
        );
    }

    #[test]
    fn producer_id_expiration_is_kafkas_and_changes_at_run_time() {
        let static_config = BrokerConfig::default();
        assert_eq!(
            static_config.get_i64("producer.id.expiration.ms"),
            86_400_000
        );
        assert_eq!(
            static_config.get_i64("producer.id.expiration.check.interval.ms"),
            600_000
        );
        let image = image_with_topic();
        let view = view_of(&static_config, &image);
        let records = plan_incremental(
            &view,
            &Resource::ClusterDefault,
            &[set("producer.id.expiration.ms", "60000")],
        )
        .unwrap();
        assert_eq!(records.len(), 1);
        let err = plan_incremental(
            &view,
            &Resource::ClusterDefault,
            &[set("producer.id.expiration.check.interval.ms", "1000")],
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_REQUEST, "read-only, as in Kafka");
        let set_statically =
            BrokerConfig::with_overrides([("producer.id.expiration.check.interval.ms", "1000")])
                .unwrap();
        assert_eq!(
            set_statically.get_i64("producer.id.expiration.check.interval.ms"),
            1000
        );
        assert!(BrokerConfig::with_overrides([("producer.id.expiration.ms", "0")]).is_err());
    }

    #[test]
    fn broker_levels_accept_only_dynamic_keys() {
        let static_config = BrokerConfig::default();
        let mut image = image_with_topic();
        let view = view_of(&static_config, &image);
        let err = plan_incremental(
            &view,
            &Resource::ClusterDefault,
            &[set("log.retention.ms", "5"), set("num.partitions", "3")],
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_REQUEST);
        assert_eq!(
            err.message.unwrap(),
            "Cannot update these configs dynamically: Set(num.partitions)"
        );
        // A key Tarn does not know is kept as a custom config, as Kafka
        // keeps it; a known key's bad value is a bad request.
        let records =
            plan_incremental(&view, &Resource::Broker(NODE), &[set("log.nope", "5")]).unwrap();
        assert_eq!(
            records,
            [MetadataRecord::BrokerConfig {
                broker_id: Some(NODE),
                name: "log.nope".into(),
                value: Some("5".into()),
            }]
        );
        let err = plan_incremental(
            &view,
            &Resource::Broker(NODE),
            &[set("log.retention.ms", "soon")],
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_REQUEST);
        let records = plan_incremental(
            &view,
            &Resource::ClusterDefault,
            &[
                set("log.cleanup.policy", "compact"),
                set("message.max.bytes", "2000"),
            ],
        )
        .unwrap();
        apply(&mut image, &records);
        let view = view_of(&static_config, &image);
        let effective = view.effective();
        assert_eq!(effective.get("message.max.bytes"), "2000");
        assert_eq!(
            effective.topic_value(&BTreeMap::new(), "cleanup.policy"),
            "compact"
        );
        // A broker-level APPEND starts from the cluster default.
        let records = plan_incremental(
            &view,
            &Resource::Broker(NODE),
            &[(
                "log.cleanup.policy".into(),
                OP_APPEND,
                Some("delete".into()),
            )],
        )
        .unwrap();
        assert_eq!(
            records,
            vec![MetadataRecord::BrokerConfig {
                broker_id: Some(NODE),
                name: "log.cleanup.policy".into(),
                value: Some("compact,delete".into()),
            }]
        );
    }
}
