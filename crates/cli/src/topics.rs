//! `tarn topics`: create, list, describe, alter (add partitions) and
//! delete topics over the Kafka protocol, with kafka-topics.sh's flags.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

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
use tarn_protocol::messages::metadata::{MetadataRequest, MetadataRequestTopic, MetadataResponse};
use tarn_server::error_names::error_name;

#[derive(Subcommand)]
pub enum TopicsCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List topic names, one per line.
    List(Common),
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
pub struct DescribeArgs {
    #[command(flatten)]
    common: Common,
    /// Only this topic (default: all).
    #[arg(long)]
    topic: Option<String>,
    /// Only partitions whose ISR is smaller than their replicas (the
    /// topic lines are left out, as kafka-topics.sh does).
    #[arg(long)]
    under_replicated_partitions: bool,
    /// Only partitions with no leader, or a leader that is not a live
    /// broker.
    #[arg(long)]
    unavailable_partitions: bool,
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

fn list(args: Common) -> Result<()> {
    let response = fetch_metadata(&args.bootstrap_server, None)?;
    let mut names: Vec<String> = response.topics.into_iter().filter_map(|t| t.name).collect();
    names.sort();
    for name in names {
        println!("{name}");
    }
    Ok(())
}

fn describe(args: DescribeArgs) -> Result<()> {
    let response = fetch_metadata(&args.common.bootstrap_server, args.topic.as_deref())?;
    // Kafka's tool asks for reassignments in progress too, to show the
    // replicas being added and removed.
    let reassigning = crate::reassign::ongoing(&args.common.bootstrap_server, None)?;
    let live: std::collections::BTreeSet<i32> =
        response.brokers.iter().map(|b| b.node_id).collect();
    let mut topics = response.topics;
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    for topic in topics {
        let name = topic.name.unwrap_or_default();
        if topic.error_code != error::NONE {
            bail!(
                "Error while executing topic command : {} ({}) for topic '{name}'",
                error_name(topic.error_code),
                topic.error_code
            );
        }
        // A partition under reassignment counts its replicas without the
        // ones being added, as kafka-topics.sh counts them.
        let factor = |p: &tarn_protocol::messages::metadata::MetadataResponsePartition| {
            let adding = reassigning
                .get(&(name.clone(), p.partition_index))
                .map_or(0, |(_, adding, _)| adding.len());
            p.replica_nodes.len() - adding
        };
        let replication = topic.partitions.first().map_or(0, factor);
        let filtered = args.under_replicated_partitions || args.unavailable_partitions;
        if !filtered {
            println!(
                "Topic: {name}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {replication}",
                topic.topic_id,
                topic.partitions.len()
            );
        }
        for p in &topic.partitions {
            let under_replicated = p.isr_nodes.len() < factor(p);
            let unavailable = p.leader_id < 0 || !live.contains(&p.leader_id);
            if (args.under_replicated_partitions && !under_replicated)
                || (args.unavailable_partitions && !unavailable)
            {
                continue;
            }
            let join = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
            let moving = match reassigning.get(&(name.clone(), p.partition_index)) {
                Some((_, adding, removing)) => format!(
                    "\tAdding Replicas: {}\tRemoving Replicas: {}",
                    join(adding),
                    join(removing)
                ),
                None => String::new(),
            };
            println!(
                "\tTopic: {name}\tPartition: {}\tLeader: {}\tLeaderEpoch: {}\tReplicas: {}\tIsr: {}{moving}",
                p.partition_index,
                p.leader_id,
                p.leader_epoch,
                join(&p.replica_nodes),
                join(&p.isr_nodes)
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
