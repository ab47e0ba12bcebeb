//! `tarn configs`: describe and alter topic and broker configs, and the
//! client quotas of users, clients and IP addresses (`quotas.rs`), over the
//! Kafka protocol, with kafka-configs.sh's flags and output.
//!
//! `--alter` sends one IncrementalAlterConfigs request (SET for
//! `--add-config`, DELETE for `--delete-config`), then reads every key it
//! touched back with DescribeConfigs and prints it; it exits non-zero with
//! the broker's message when the broker refused, and when the value read
//! back is not what was asked for.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use clap::Args;

use tarn_metadata::dynamic_config::{
    ConfigSource, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC,
};
use tarn_protocol::error;
use tarn_protocol::messages::describe_configs::{
    DescribeConfigsRequest, DescribeConfigsResource, DescribeConfigsResourceResult,
    DescribeConfigsResponse, DescribeConfigsResult,
};
use tarn_protocol::messages::incremental_alter_configs::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResource,
    IncrementalAlterConfigsResponse, IncrementalAlterableConfig, OP_DELETE, OP_SET,
};
use tarn_protocol::messages::metadata::{MetadataRequest, MetadataResponse};
use tarn_server::error_names::error_name;

use tarn_cli::client::Client;

use crate::quotas::{self, Part, CLIENTS, IPS, USERS};

/// kafka-configs.sh's entity type names.
const TOPICS: &str = "topics";
const BROKERS: &str = "brokers";
const BROKER_LOGGERS: &str = "broker-loggers";

#[derive(Args)]
pub struct ConfigsArgs {
    /// host:port of a broker.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap_server: String,
    /// List configs for the given entity.
    #[arg(long, conflicts_with = "alter")]
    describe: bool,
    /// Alter the configuration for the entity.
    #[arg(long)]
    alter: bool,
    /// List all configs (not only the dynamic ones) with --describe.
    #[arg(long, requires = "describe")]
    all: bool,
    /// topics, brokers, broker-loggers, users, clients or ips (users and
    /// clients together for a user's quota on one client id).
    #[arg(long, value_name = "TYPE")]
    entity_type: Vec<String>,
    /// The topic name, broker id (also of broker-loggers), user, client
    /// id or IP address; one per --entity-type.
    #[arg(long, value_name = "NAME")]
    entity_name: Vec<String>,
    /// The cluster-wide default of broker configs, or of the quotas of
    /// users, clients or ips.
    #[arg(long)]
    entity_default: bool,
    /// Shorthand for --entity-type users --entity-name USER.
    #[arg(long, conflicts_with_all = ["entity_type", "user_defaults"])]
    user: Option<String>,
    /// Shorthand for --entity-type users --entity-default.
    #[arg(long, conflicts_with = "entity_type")]
    user_defaults: bool,
    /// Shorthand for --entity-type clients --entity-name CLIENT.
    #[arg(long, conflicts_with_all = ["entity_type", "client_defaults"])]
    client: Option<String>,
    /// Shorthand for --entity-type clients --entity-default.
    #[arg(long, conflicts_with = "entity_type")]
    client_defaults: bool,
    /// Shorthand for --entity-type ips --entity-name IP.
    #[arg(long, conflicts_with_all = ["entity_type", "ip_defaults", "user", "client"])]
    ip: Option<String>,
    /// Shorthand for --entity-type ips --entity-default.
    #[arg(long, conflicts_with_all = ["entity_type", "user", "client"])]
    ip_defaults: bool,
    /// Shorthand for --entity-type topics --entity-name TOPIC.
    #[arg(long, conflicts_with_all = ["entity_type", "entity_name", "broker"])]
    topic: Option<String>,
    /// Shorthand for --entity-type brokers --entity-name BROKER.
    #[arg(long, conflicts_with_all = ["entity_type", "entity_name"])]
    broker: Option<String>,
    /// Shorthand for --entity-type brokers --entity-default.
    #[arg(long, conflicts_with_all = ["entity_type", "entity_name", "broker", "topic"])]
    broker_defaults: bool,
    /// Configs to set: 'k1=v1,k2=[v1,v2],k3=v3' (brackets group values with commas).
    #[arg(long, value_name = "PAIRS", requires = "alter")]
    add_config: Option<String>,
    /// Config keys to remove: 'k1,k2'.
    #[arg(long, value_name = "KEYS", requires = "alter", value_delimiter = ',')]
    delete_config: Vec<String>,
}

/// What the command is about: a type and a name ("" is the broker default).
struct Entity {
    kind: &'static str,
    name: Option<String>,
}

impl Entity {
    fn resource_type(&self) -> i8 {
        match self.kind {
            TOPICS => RESOURCE_TOPIC,
            BROKER_LOGGERS => RESOURCE_BROKER_LOGGER,
            _ => RESOURCE_BROKER,
        }
    }

    /// The source a value set at this entity's own level reports.
    fn own_source(&self, name: &str) -> ConfigSource {
        match (self.kind, name) {
            (TOPICS, _) => ConfigSource::DynamicTopic,
            (BROKER_LOGGERS, _) => ConfigSource::DynamicBrokerLogger,
            (_, "") => ConfigSource::DynamicDefaultBroker,
            _ => ConfigSource::DynamicBroker,
        }
    }

    fn describe_heading(&self, name: &str, all: bool) -> String {
        let singular = &self.kind[..self.kind.len() - 1];
        match name {
            "" => format!("Default configs for {} in the cluster are:", self.kind),
            _ if all => format!("All configs for {singular} {name} are:"),
            _ => format!("Dynamic configs for {singular} {name} are:"),
        }
    }
}

fn entity(args: &ConfigsArgs) -> Result<Entity> {
    if let Some(topic) = &args.topic {
        return Ok(Entity {
            kind: TOPICS,
            name: Some(topic.clone()),
        });
    }
    if let Some(broker) = &args.broker {
        return Ok(Entity {
            kind: BROKERS,
            name: Some(broker.clone()),
        });
    }
    if args.broker_defaults {
        return Ok(Entity {
            kind: BROKERS,
            name: Some(String::new()),
        });
    }
    let (kind, entity_name) = match (args.entity_type.as_slice(), args.entity_name.as_slice()) {
        ([], _) => bail!("--entity-type must be specified"),
        ([kind], []) => (kind.as_str(), None),
        ([kind], [name]) => (kind.as_str(), Some(name.clone())),
        _ => bail!("One entity type and at most one entity name may be given for {TOPICS}, {BROKERS} or {BROKER_LOGGERS}"),
    };
    let kind = match kind {
        TOPICS => TOPICS,
        BROKERS => BROKERS,
        BROKER_LOGGERS => BROKER_LOGGERS,
        other => {
            bail!(
                "Invalid entity type {other}, the entity type must be one of {TOPICS}, {BROKERS}, \
                 {BROKER_LOGGERS}, {USERS}, {CLIENTS}, {IPS}"
            )
        }
    };
    if args.entity_default {
        if kind != BROKERS {
            bail!("--entity-default is only valid with --entity-type {BROKERS}");
        }
        if entity_name.is_some() {
            bail!("Only one of --entity-name or --entity-default can be specified");
        }
        return Ok(Entity {
            kind,
            name: Some(String::new()),
        });
    }
    if kind != TOPICS {
        if let Some(name) = &entity_name {
            if name.parse::<i32>().is_err() {
                bail!(
                    "The entity name for {kind} must be a valid integer broker id, found: {name}"
                );
            }
        }
    }
    Ok(Entity {
        kind,
        name: entity_name,
    })
}

/// The quota entity the arguments name (users, clients or ips, from
/// --entity-type or the --user/--client/--ip shorthands), or `None` when
/// they name a config resource instead.
fn quota_entity(args: &ConfigsArgs) -> Result<Option<Vec<Part>>> {
    let mut parts = Vec::new();
    for (kind, name, default) in [
        (USERS, &args.user, args.user_defaults),
        (CLIENTS, &args.client, args.client_defaults),
        (IPS, &args.ip, args.ip_defaults),
    ] {
        match (name, default) {
            (Some(name), _) => parts.push(Part {
                kind,
                name: Some(name.clone()),
            }),
            (None, true) => parts.push(Part {
                kind,
                name: Some(String::new()),
            }),
            (None, false) => {}
        }
    }
    if !parts.is_empty() {
        return Ok(Some(parts));
    }
    let kinds: Vec<Option<&'static str>> = args
        .entity_type
        .iter()
        .map(|t| quotas::quota_kind(t))
        .collect();
    if kinds.iter().all(Option::is_none) {
        return Ok(None);
    }
    let Some(kinds) = kinds.into_iter().collect::<Option<Vec<_>>>() else {
        bail!("users, clients and ips cannot be combined with another entity type");
    };
    if !matches!(kinds.as_slice(), [_] | [USERS, CLIENTS] | [CLIENTS, USERS]) {
        bail!("Only users and clients may be given together, once each");
    }
    let mut names: Vec<String> = args.entity_name.clone();
    if args.entity_default {
        if kinds.len() > 1 {
            bail!("With two entity types, name both or use --user-defaults or --client-defaults");
        }
        names.push(String::new());
    }
    if names.len() > kinds.len() {
        bail!("More entity names specified than entity types");
    }
    Ok(Some(
        kinds
            .into_iter()
            .enumerate()
            .map(|(i, kind)| Part {
                kind,
                name: names.get(i).cloned(),
            })
            .collect(),
    ))
}

pub fn run(args: ConfigsArgs) -> Result<()> {
    if args.describe == args.alter {
        bail!("Command must include exactly one action: --describe, --alter");
    }
    if let Some(parts) = quota_entity(&args)? {
        let mut client = crate::cluster::connect_bootstrap(&args.bootstrap_server)?;
        if args.describe {
            return quotas::describe(&mut client, &parts);
        }
        let (added, deleted) = requested_changes(&args)?;
        return quotas::alter(&mut client, &parts, &added, &deleted);
    }
    let entity = entity(&args)?;
    let mut client = crate::cluster::connect_bootstrap(&args.bootstrap_server)?;
    if args.describe {
        describe(&mut client, &entity, args.all)
    } else {
        alter(&mut client, &entity, &args)
    }
}

/// Splits kafka-configs.sh's `--add-config` value: pairs separated by
/// commas outside square brackets; brackets are dropped from values.
pub fn parse_add_config(text: &str) -> Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    let mut items = Vec::new();
    for c in text.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    for item in items {
        let Some((key, value)) = item.split_once('=') else {
            bail!(
                "Invalid entity config: all configs to be added must be in the format \"key=val\"."
            );
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        {
            bail!("Invalid character found for config key: {key}");
        }
        let value: String = value.chars().filter(|c| *c != '[' && *c != ']').collect();
        pairs.push((key.to_owned(), value.trim().to_owned()));
    }
    Ok(pairs)
}

/// DescribeConfigs of one resource (`keys`: `None` for every key), as the
/// broker answered: its error code is the caller's to check.
pub(crate) fn described(
    client: &mut Client,
    resource_type: i8,
    name: &str,
    keys: Option<Vec<String>>,
    include_synonyms: bool,
) -> Result<DescribeConfigsResult> {
    let request = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type,
            resource_name: name.to_owned(),
            configuration_keys: keys,
        }],
        include_synonyms,
        include_documentation: false,
    };
    let response: DescribeConfigsResponse = client.call(32, 4, 4, &request)?;
    response
        .results
        .into_iter()
        .next()
        .context("broker returned no result for the resource")
}

fn describe_one(
    client: &mut Client,
    entity: &Entity,
    name: &str,
    keys: Option<Vec<String>>,
) -> Result<Vec<DescribeConfigsResourceResult>> {
    let result = described(client, entity.resource_type(), name, keys, true)?;
    if result.error_code != error::NONE {
        bail!(
            "{}",
            refusal(result.error_code, result.error_message.as_deref())
        );
    }
    let mut configs = result.configs;
    configs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(configs)
}

fn format_entry(entry: &DescribeConfigsResourceResult) -> String {
    let synonyms: Vec<String> = entry
        .synonyms
        .iter()
        .map(|s| {
            format!(
                "{}:{}={}",
                ConfigSource::name_of(s.source),
                s.name,
                s.value.as_deref().unwrap_or("null")
            )
        })
        .collect();
    format!(
        "  {}={} sensitive={} synonyms={{{}}}",
        entry.name,
        entry.value.as_deref().unwrap_or("null"),
        entry.is_sensitive,
        synonyms.join(", ")
    )
}

fn describe(client: &mut Client, entity: &Entity, all: bool) -> Result<()> {
    let names = match &entity.name {
        Some(name) => vec![name.clone()],
        None => all_entities(client, entity)?,
    };
    for name in names {
        let configs = describe_one(client, entity, &name, None)
            .with_context(|| format!("describe configs of {} '{name}'", entity.kind))?;
        println!("{}", entity.describe_heading(&name, all));
        let own = entity.own_source(&name).id();
        for entry in configs.iter().filter(|e| all || e.config_source == own) {
            println!("{}", format_entry(entry));
        }
    }
    Ok(())
}

/// Every topic, or every broker and then the cluster default.
fn all_entities(client: &mut Client, entity: &Entity) -> Result<Vec<String>> {
    let request = MetadataRequest {
        topics: None,
        allow_auto_topic_creation: false,
        ..Default::default()
    };
    let metadata: MetadataResponse = client.call(3, 12, 9, &request)?;
    let mut names: Vec<String> = if entity.kind == TOPICS {
        metadata.topics.into_iter().filter_map(|t| t.name).collect()
    } else {
        metadata
            .brokers
            .iter()
            .map(|b| b.node_id.to_string())
            .collect()
    };
    names.sort();
    if entity.kind == BROKERS {
        names.push(String::new());
    }
    Ok(names)
}

/// Sends one IncrementalAlterConfigs for resource `name`: an error when
/// the request failed, else the broker's refusal, if any, as
/// "NAME (code): message".
pub(crate) fn incremental_alter(
    client: &mut Client,
    resource_type: i8,
    name: &str,
    configs: Vec<IncrementalAlterableConfig>,
) -> Result<Result<(), String>> {
    let request = IncrementalAlterConfigsRequest {
        resources: vec![IncrementalAlterConfigsResource {
            resource_type,
            resource_name: name.to_owned(),
            configs,
        }],
        validate_only: false,
    };
    let response: IncrementalAlterConfigsResponse = client.call(44, 1, 1, &request)?;
    let result = response
        .responses
        .first()
        .context("broker returned no result for the resource")?;
    if result.error_code == error::NONE {
        return Ok(Ok(()));
    }
    Ok(Err(refusal(
        result.error_code,
        result.error_message.as_deref(),
    )))
}

/// A broker's refusal as the tools print it: "NAME (code): message".
pub(crate) fn refusal(code: i16, message: Option<&str>) -> String {
    format!(
        "{} ({code}): {}",
        error_name(code),
        message.unwrap_or("(no message from the broker)")
    )
}

fn alter(client: &mut Client, entity: &Entity, args: &ConfigsArgs) -> Result<()> {
    let Some(name) = entity.name.clone() else {
        bail!("--entity-name or --entity-default must be specified with --alter");
    };
    let (added, deleted) = requested_changes(args)?;
    // As kafka-configs.sh does: deleting a key the entity does not set,
    // or naming a logger the broker does not list, is an operator error,
    // reported before anything is sent.
    let own = entity.own_source(&name).id();
    let current = describe_one(client, entity, &name, None)
        .with_context(|| format!("read the configs of {} '{name}'", entity.kind))?;
    if entity.kind == BROKER_LOGGERS {
        let invalid: Vec<&str> = deleted
            .iter()
            .chain(added.iter().map(|(k, _)| k))
            .filter(|k| !current.iter().any(|e| e.name == **k))
            .map(String::as_str)
            .collect();
        if !invalid.is_empty() {
            bail!("Invalid broker logger(s): {}", invalid.join(","));
        }
    }
    let invalid: Vec<&str> = deleted
        .iter()
        .filter(|k| {
            !current
                .iter()
                .any(|e| e.name == **k && e.config_source == own)
        })
        .map(String::as_str)
        .collect();
    if !invalid.is_empty() {
        bail!("Invalid config(s): {}", invalid.join(","));
    }
    let mut configs: Vec<IncrementalAlterableConfig> = added
        .iter()
        .map(|(k, v)| IncrementalAlterableConfig {
            name: k.clone(),
            config_operation: OP_SET,
            value: Some(v.clone()),
        })
        .collect();
    configs.extend(deleted.iter().map(|k| IncrementalAlterableConfig {
        name: k.clone(),
        config_operation: OP_DELETE,
        value: None,
    }));
    if let Err(refusal) = incremental_alter(client, entity.resource_type(), &name, configs)? {
        bail!("Error while executing config command : {refusal}");
    }
    if name.is_empty() {
        println!(
            "Completed updating default config for {} in the cluster.",
            entity.kind
        );
    } else {
        println!(
            "Completed updating config for {} {name}.",
            &entity.kind[..entity.kind.len() - 1]
        );
    }
    read_back(client, entity, &name, &added, &deleted)
}

/// The keys `--add-config` sets, with their values, and the keys
/// `--delete-config` removes.
type Changes = (Vec<(String, String)>, Vec<String>);

/// What `--add-config` and `--delete-config` ask for; at least one key.
fn requested_changes(args: &ConfigsArgs) -> Result<Changes> {
    let added = match &args.add_config {
        Some(text) => parse_add_config(text)?,
        None => Vec::new(),
    };
    let deleted: Vec<String> = args
        .delete_config
        .iter()
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .collect();
    if added.is_empty() && deleted.is_empty() {
        bail!("At least one of --add-config or --delete-config must be specified with --alter");
    }
    Ok((added, deleted))
}

/// Prints every touched key as the broker now reports it and fails when
/// a set key is not set at this level or a deleted one still is.
fn read_back(
    client: &mut Client,
    entity: &Entity,
    name: &str,
    added: &[(String, String)],
    deleted: &[String],
) -> Result<()> {
    let own = entity.own_source(name).id();
    let keys: Vec<String> = added
        .iter()
        .map(|(k, _)| k.clone())
        .chain(deleted.iter().cloned())
        .collect();
    let configs: BTreeMap<String, DescribeConfigsResourceResult> =
        describe_one(client, entity, name, Some(keys))
            .context("read the altered configs back")?
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
    let mut problems = Vec::new();
    // A logger unset takes the level of the one covering it: listed with
    // the same source as before, so only a set level is checked.
    let logger = entity.kind == BROKER_LOGGERS;
    for (key, value) in added {
        match configs.get(key) {
            Some(e) if logger && e.value.as_deref() != Some(value) => problems.push(format!(
                "{key} reads back as {}",
                e.value.as_deref().unwrap_or("null")
            )),
            Some(e) if e.config_source == own => println!(
                "  {key}={} ({})",
                e.value.as_deref().unwrap_or("null"),
                ConfigSource::name_of(e.config_source)
            ),
            Some(e) => problems.push(format!(
                "{key} reads back as {} from {}",
                e.value.as_deref().unwrap_or("null"),
                ConfigSource::name_of(e.config_source)
            )),
            None => problems.push(format!("{key} is missing when read back")),
        }
    }
    for key in deleted {
        match configs.get(key) {
            Some(e) if e.config_source == own && !logger => problems.push(format!(
                "{key} is still set to {}",
                e.value.as_deref().unwrap_or("null")
            )),
            Some(e) => println!(
                "  {key}={} ({})",
                e.value.as_deref().unwrap_or("null"),
                ConfigSource::name_of(e.config_source)
            ),
            None => println!("  {key} is no longer set"),
        }
    }
    if !problems.is_empty() {
        bail!(
            "the broker accepted the change but reads it back differently: {}",
            problems.join("; ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_config_splits_outside_brackets() {
        let pairs =
            parse_add_config("retention.ms=1000, cleanup.policy=[compact,delete],x.y= z ").unwrap();
        assert_eq!(
            pairs,
            vec![
                ("retention.ms".to_owned(), "1000".to_owned()),
                ("cleanup.policy".to_owned(), "compact,delete".to_owned()),
                ("x.y".to_owned(), "z".to_owned()),
            ]
        );
        assert!(parse_add_config("novalue").is_err());
        assert!(parse_add_config("bad key=1").is_err());
        assert!(parse_add_config("=1").is_err());
    }
}
