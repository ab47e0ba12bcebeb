//! `tarn topics`: create, list, describe, alter (add partitions) and
//! delete topics over the Kafka protocol, with kafka-topics.sh's flags.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use tarn_cli::client::Client;

use tarn_metadata::dynamic_config::RESOURCE_TOPIC;
use tarn_protocol::error;
use tarn_protocol::messages::create_partitions::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreatePartitionsTopic,
};
use tarn_protocol::messages::create_topics::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest, CreateTopicsResponse,
};
use tarn_protocol::messages::delete_topics::{
    DeleteTopicState, DeleteTopicsRequest, DeleteTopicsResponse,
};
use tarn_protocol::messages::describe_cluster::{DescribeClusterRequest, DescribeClusterResponse};
use tarn_protocol::messages::describe_configs::DescribeConfigsResourceResult;
use tarn_protocol::messages::describe_topic_partitions::{
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition, NullableCursor, TopicRequest,
};
use tarn_protocol::messages::metadata::{MetadataRequest, MetadataRequestTopic, MetadataResponse};
use tarn_server::error_names::error_name;

#[derive(Subcommand)]
pub enum TopicsCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List topic names, one per line.
    List(ListArgs),
    /// Show partitions, leaders, replicas and configs of topics.
    Describe(DescribeArgs),
    /// Add partitions to a topic (partitions can only be added).
    Alter(AlterArgs),
    /// Delete a topic.
    Delete(DeleteArgs),
}

#[derive(Args)]
pub struct AlterArgs {
    #[command(flatten)]
    common: Common,
    #[arg(long)]
    topic: String,
    /// The new, larger number of partitions.
    #[arg(long)]
    partitions: i32,
}

#[derive(Args)]
pub struct Common {
    /// host:port of a broker; several may be given, comma-separated.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    common: Common,
    #[arg(long)]
    topic: String,
    /// Number of partitions (default: the broker's num.partitions).
    #[arg(long)]
    partitions: Option<i32>,
    /// Replication factor (default: the broker's default.replication.factor).
    #[arg(long)]
    replication_factor: Option<i16>,
    /// A topic config override, key=value; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    configs: Vec<String>,
    /// Succeed without creating when the topic already exists.
    #[arg(long)]
    if_not_exists: bool,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    filter: TopicFilter,
}

/// Which topics a list or describe covers, as kafka-topics.sh chooses them.
#[derive(Args)]
pub struct TopicFilter {
    /// Only topics whose whole name matches this regular expression
    /// (commas separate alternatives, as in kafka-topics.sh); default: all.
    #[arg(long)]
    topic: Option<String>,
    /// Leave out internal topics (__consumer_offsets and the like).
    #[arg(long)]
    exclude_internal: bool,
}

#[derive(Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    filter: TopicFilter,
    /// Succeed with nothing printed when no topic matches --topic.
    #[arg(long)]
    if_exists: bool,
    /// Only partitions whose ISR is smaller than their replicas (the
    /// topic lines are left out, as kafka-topics.sh does).
    #[arg(long)]
    under_replicated_partitions: bool,
    /// Only partitions with no leader, or a leader that is not a live
    /// broker.
    #[arg(long)]
    unavailable_partitions: bool,
    /// Only partitions whose ISR is smaller than the topic's
    /// min.insync.replicas (or that have no leader).
    #[arg(long)]
    under_min_isr_partitions: bool,
    /// Only partitions whose ISR is exactly the topic's
    /// min.insync.replicas.
    #[arg(long)]
    at_min_isr_partitions: bool,
    /// Only the topic lines of topics with a config set away from its
    /// default.
    #[arg(long)]
    topics_with_overrides: bool,
}

#[derive(Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    common: Common,
    #[arg(long)]
    topic: String,
}

pub fn run(command: TopicsCommand) -> Result<()> {
    match command {
        TopicsCommand::Create(args) => create(args),
        TopicsCommand::List(args) => list(args),
        TopicsCommand::Describe(args) => describe(args),
        TopicsCommand::Alter(args) => alter(args),
        TopicsCommand::Delete(args) => delete(args),
    }
}

/// Fails with kafka-topics.sh's wording when the broker answered an error.
fn check(code: i16, message: Option<&str>) -> Result<()> {
    if code != error::NONE {
        bail!(
            "Error while executing topic command : {} ({code}): {}",
            error_name(code),
            message.unwrap_or("")
        );
    }
    Ok(())
}

fn create(args: CreateArgs) -> Result<()> {
    let mut configs = Vec::new();
    for pair in &args.configs {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("--config {pair}: expected key=value"))?;
        configs.push(CreatableTopicConfig {
            name: name.trim().to_owned(),
            value: Some(value.trim().to_owned()),
        });
    }
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: args.topic.clone(),
            num_partitions: args.partitions.unwrap_or(-1),
            replication_factor: args.replication_factor.unwrap_or(-1),
            assignments: vec![],
            configs,
        }],
        timeout_ms: 30_000,
        validate_only: false,
    };
    let mut client = crate::cluster::connect_bootstrap(&args.common.bootstrap_server)?;
    let response: CreateTopicsResponse = client.call(19, 7, 5, &request)?;
    let result = response
        .topics
        .first()
        .context("broker returned no result for the topic")?;
    if result.error_code == error::TOPIC_ALREADY_EXISTS && args.if_not_exists {
        return Ok(());
    }
    check(result.error_code, result.error_message.as_deref())?;
    println!("Created topic {}.", args.topic);
    Ok(())
}

fn fetch_metadata(bootstrap: &str, topic: Option<&str>) -> Result<MetadataResponse> {
    let request = MetadataRequest {
        topics: topic.map(|t| {
            vec![MetadataRequestTopic {
                name: Some(t.to_owned()),
                ..Default::default()
            }]
        }),
        allow_auto_topic_creation: false,
        ..Default::default()
    };
    crate::cluster::connect_bootstrap(bootstrap)?.call(3, 12, 9, &request)
}

/// Kafka's internal topic names (its `Topic.isInternal`).
const INTERNAL_TOPICS: [&str; 3] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// The topics `filter` covers, sorted by name, as kafka-topics.sh's
/// getTopics picks them: a topic whose whole name matches the expression
/// (commas and spaces in it rewritten as Kafka's TopicFilter does), less
/// internal ones when they are excluded.
fn matching_topics(bootstrap: &str, filter: &TopicFilter) -> Result<Vec<String>> {
    let pattern = filter
        .topic
        .as_deref()
        .map(|raw| {
            let expression = raw
                .trim()
                .replace(',', "|")
                .replace(' ', "")
                .trim_start_matches(['"', '\''])
                .trim_end_matches(['"', '\''])
                .to_owned();
            regex::Regex::new(&format!("^(?:{expression})$"))
                .with_context(|| format!("{expression} is an invalid regex."))
        })
        .transpose()?;
    let response = fetch_metadata(bootstrap, None)?;
    let mut names: Vec<String> = response
        .topics
        .into_iter()
        .filter_map(|t| t.name)
        .filter(|name| !(filter.exclude_internal && INTERNAL_TOPICS.contains(&name.as_str())))
        .filter(|name| pattern.as_ref().is_none_or(|p| p.is_match(name)))
        .collect();
    names.sort();
    Ok(names)
}

fn list(args: ListArgs) -> Result<()> {
    let names = matching_topics(&args.common.bootstrap_server, &args.filter)?;
    // kafka-topics.sh prints the names joined by newlines, so an empty
    // list is one empty line.
    println!("{}", names.join("\n"));
    Ok(())
}

/// What DescribeTopicPartitions says of one topic.
struct TopicState {
    id: tarn_protocol::Uuid,
    partitions: Vec<DescribeTopicPartitionsResponsePartition>,
}

/// Every partition of `names`, through DescribeTopicPartitions (as
/// Kafka's Admin client describes topics), following its cursor across
/// responses of at most 2,000 partitions.
fn describe_partitions(
    client: &mut Client,
    names: &[String],
) -> Result<BTreeMap<String, TopicState>> {
    let mut topics: BTreeMap<String, TopicState> = BTreeMap::new();
    let mut cursor = None;
    loop {
        let request = DescribeTopicPartitionsRequest {
            topics: names
                .iter()
                .map(|name| TopicRequest { name: name.clone() })
                .collect(),
            response_partition_limit: 2000,
            cursor: NullableCursor(cursor.take()),
        };
        let response: DescribeTopicPartitionsResponse = client.call(75, 0, 0, &request)?;
        for topic in response.topics {
            let name = topic.name.unwrap_or_default();
            if topic.error_code != error::NONE {
                bail!(
                    "Error while executing topic command : {} ({}) for topic '{name}'",
                    error_name(topic.error_code),
                    topic.error_code
                );
            }
            let state = topics.entry(name).or_insert(TopicState {
                id: topic.topic_id,
                partitions: Vec::new(),
            });
            state.partitions.extend(topic.partitions);
        }
        match response.next_cursor.0 {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    for state in topics.values_mut() {
        state.partitions.sort_by_key(|p| p.partition_index);
    }
    Ok(topics)
}

/// A topic's configs as DescribeConfigs lists them, in the broker's order.
fn topic_configs(client: &mut Client, name: &str) -> Result<Vec<DescribeConfigsResourceResult>> {
    let result = crate::configs::described(client, RESOURCE_TOPIC, name, None, false)?;
    check(result.error_code, result.error_message.as_deref())?;
    Ok(result.configs)
}

/// The brokers DescribeCluster lists: those kafka-topics.sh counts live.
fn live_brokers(client: &mut Client) -> Result<BTreeSet<i32>> {
    let request = DescribeClusterRequest {
        include_cluster_authorized_operations: false,
        endpoint_type: 1,
        include_fenced_brokers: false,
    };
    let response: DescribeClusterResponse = client.call(60, 1, 0, &request)?;
    check(response.error_code, response.error_message.as_deref())?;
    Ok(response.brokers.iter().map(|b| b.broker_id).collect())
}

/// The config source DescribeConfigs gives a value nobody set.
const DEFAULT_CONFIG: i8 = 5;

/// Prints what kafka-topics.sh --describe prints, line for line: per
/// topic a line with its partition count, replication factor and the
/// configs set away from their defaults, then a line per partition with
/// its leader ("none" without one), replicas, ISR, the replicas being
/// added and removed by a reassignment, and its eligible leader replicas
/// (KIP-966). The report flags choose partitions as Kafka's do.
fn describe(args: DescribeArgs) -> Result<()> {
    let bootstrap = &args.common.bootstrap_server;
    let names = matching_topics(bootstrap, &args.filter)?;
    if names.is_empty() {
        match &args.filter.topic {
            Some(topic) if !topic.is_empty() && !args.if_exists => {
                bail!("Error while executing topic command : Topic '{topic}' does not exist as expected")
            }
            _ => return Ok(()),
        }
    }
    let mut client = crate::cluster::connect_bootstrap(bootstrap)?;
    let topics = describe_partitions(&mut client, &names)?;
    let live = live_brokers(&mut client)?;
    let reassigning = crate::reassign::ongoing(bootstrap, None)?;
    let reporting = args.under_replicated_partitions
        || args.unavailable_partitions
        || args.under_min_isr_partitions
        || args.at_min_isr_partitions;
    let join = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    for (name, topic) in &topics {
        let configs = topic_configs(&mut client, name)?;
        let min_isr = configs
            .iter()
            .find(|c| c.name == "min.insync.replicas")
            .and_then(|c| c.value.as_deref())
            .and_then(|v| v.parse::<usize>().ok())
            .context("the topic's configs hold no min.insync.replicas")?;
        let overrides: Vec<String> = configs
            .iter()
            .filter(|c| c.config_source != DEFAULT_CONFIG)
            .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("null")))
            .collect();
        // A partition under reassignment counts its replicas without the
        // ones being added, as kafka-topics.sh counts them.
        let moving = |p: &DescribeTopicPartitionsResponsePartition| {
            reassigning.get(&(name.clone(), p.partition_index))
        };
        let factor = |p: &DescribeTopicPartitionsResponsePartition| {
            p.replica_nodes.len() - moving(p).map_or(0, |(_, adding, _)| adding.len())
        };
        if !reporting && (!args.topics_with_overrides || !overrides.is_empty()) {
            let id = if topic.id == tarn_protocol::Uuid::ZERO {
                String::new()
            } else {
                format!("\tTopicId: {}", topic.id)
            };
            println!(
                "Topic: {name}{id}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
                topic.partitions.len(),
                topic.partitions.first().map_or(0, factor),
                overrides.join(",")
            );
        }
        if args.topics_with_overrides {
            continue;
        }
        for p in &topic.partitions {
            let led = p.leader_id >= 0;
            let chosen = !reporting
                || (args.under_replicated_partitions && p.isr_nodes.len() < factor(p))
                || (args.unavailable_partitions && (!led || !live.contains(&p.leader_id)))
                || (args.under_min_isr_partitions && (!led || p.isr_nodes.len() < min_isr))
                || (args.at_min_isr_partitions && p.isr_nodes.len() == min_isr);
            if !chosen {
                continue;
            }
            let leader = if led {
                p.leader_id.to_string()
            } else {
                "none".to_owned()
            };
            let reassignment = match moving(p) {
                Some((_, adding, removing)) => format!(
                    "\tAdding Replicas: {}\tRemoving Replicas: {}",
                    join(adding),
                    join(removing)
                ),
                None => String::new(),
            };
            let eligible = |v: &Option<Vec<i32>>| v.as_deref().map_or("N/A".to_owned(), join);
            println!(
                "\tTopic: {name}\tPartition: {}\tLeader: {leader}\tReplicas: {}\tIsr: {}{reassignment}\tElr: {}\tLastKnownElr: {}",
                p.partition_index,
                join(&p.replica_nodes),
                join(&p.isr_nodes),
                eligible(&p.eligible_leader_replicas),
                eligible(&p.last_known_elr)
            );
        }
    }
    Ok(())
}

/// kafka-topics.sh --alter --partitions: CreatePartitions, then the new
/// count read back from the broker's metadata.
fn alter(args: AlterArgs) -> Result<()> {
    let request = CreatePartitionsRequest {
        topics: vec![CreatePartitionsTopic {
            name: args.topic.clone(),
            count: args.partitions,
            assignments: None,
        }],
        timeout_ms: 30_000,
        validate_only: false,
    };
    let mut client = crate::cluster::connect_bootstrap(&args.common.bootstrap_server)?;
    let response: CreatePartitionsResponse = client.call(37, 3, 2, &request)?;
    let result = response
        .results
        .first()
        .context("broker returned no result for the topic")?;
    check(result.error_code, result.error_message.as_deref())?;
    let metadata = fetch_metadata(&args.common.bootstrap_server, Some(&args.topic))?;
    let count = metadata
        .topics
        .iter()
        .find(|t| t.name.as_deref() == Some(args.topic.as_str()))
        .map_or(0, |t| t.partitions.len());
    if count != args.partitions as usize {
        bail!(
            "the broker accepted the change but topic {} reports {count} partitions, not {}",
            args.topic,
            args.partitions
        );
    }
    println!("Topic {} now has {count} partitions.", args.topic);
    Ok(())
}

fn delete(args: DeleteArgs) -> Result<()> {
    let request = DeleteTopicsRequest {
        topics: vec![DeleteTopicState {
            name: Some(args.topic.clone()),
            ..Default::default()
        }],
        topic_names: vec![],
        timeout_ms: 30_000,
    };
    let mut client = crate::cluster::connect_bootstrap(&args.common.bootstrap_server)?;
    let response: DeleteTopicsResponse = client.call(20, 6, 4, &request)?;
    let result = response
        .responses
        .first()
        .context("broker returned no result for the topic")?;
    check(result.error_code, result.error_message.as_deref())?;
    println!("Deleted topic {}.", args.topic);
    Ok(())
}
