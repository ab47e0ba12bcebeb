//! `tarn reassign-partitions`: Kafka's kafka-reassign-partitions.sh, with
//! its actions, options, JSON files and messages.
//!
//! - `--generate --topics-to-move-json-file F --broker-list 1,2,3` prints
//!   the current assignment of the topics in F and a proposal that spreads
//!   their partitions over the brokers listed (Kafka's rack-unaware
//!   round-robin placement, from a fixed start so a proposal can be
//!   reproduced), keeping each partition's replication factor. Nothing is
//!   changed.
//! - `--execute --reassignment-json-file F` prints the current assignment
//!   (to keep for a rollback) and starts the reassignments in F with one
//!   AlterPartitionReassignments request; it refuses while reassignments
//!   are in progress unless `--additional` is given.
//! - `--verify --reassignment-json-file F` says for each partition in F
//!   whether its reassignment is completed or still in progress.
//! - `--cancel --reassignment-json-file F` cancels those in progress.
//! - `--list` lists every reassignment in progress.
//!
//! `--execute --throttle B` also throttles the move as Kafka's tool does:
//! each moving partition's current replicas go into its topic's
//! `leader.replication.throttled.replicas` and its new ones into
//! `follower.replication.throttled.replicas`, and every broker involved
//! gets `leader.` and `follower.replication.throttled.rate` B. `--verify`
//! clears them all (topics and every broker) once nothing in the file is
//! in progress, unless `--preserve-throttles`. Moves between log
//! directories (`log_dirs` other than "any") are refused: a broker has one.
//!
//! A file: `{"version":1,"partitions":[{"topic":"t","partition":0,
//! "replicas":[1,2,3],"log_dirs":["any","any","any"]}]}`; a topics file:
//! `{"version":1,"topics":[{"topic":"t"}]}`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

use tarn_protocol::error;
use tarn_protocol::messages::incremental_alter_configs::{
    IncrementalAlterableConfig, OP_DELETE, OP_SET,
};
use tarn_protocol::messages::metadata::MetadataResponse;
use tarn_protocol::messages::reassignments::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsTopics, ReassignablePartition, ReassignableTopic,
};
use tarn_server::error_names::error_name;

use crate::cluster::{connect_bootstrap, metadata, TopicPartition};

/// AlterPartitionReassignments v0 (flexible from 0): v1 only adds the
/// replication-factor guard, which the tool does not use.
const ALTER_REASSIGNMENTS: (i16, i16, i16) = (45, 0, 0);
/// ListPartitionReassignments v0 (flexible from 0).
const LIST_REASSIGNMENTS: (i16, i16, i16) = (46, 0, 0);
/// How long the controller may take.
const REASSIGNMENT_TIMEOUT_MS: i32 = 30_000;

#[derive(Args)]
pub struct ReassignArgs {
    /// host:port of a broker; several may be given, comma-separated.
    #[arg(long)]
    bootstrap_server: Option<String>,
    /// Propose an assignment of the topics in --topics-to-move-json-file to the brokers in --broker-list.
    #[arg(long)]
    generate: bool,
    /// Start the reassignments in --reassignment-json-file.
    #[arg(long)]
    execute: bool,
    /// Say whether the reassignments in --reassignment-json-file have completed.
    #[arg(long)]
    verify: bool,
    /// Cancel the reassignments in --reassignment-json-file that are in progress.
    #[arg(long)]
    cancel: bool,
    /// List the reassignments in progress.
    #[arg(long)]
    list: bool,
    /// {"version":1,"topics":[{"topic":"t"}]}: the topics --generate moves.
    #[arg(long)]
    topics_to_move_json_file: Option<PathBuf>,
    /// The brokers --generate places replicas on, comma-separated ids.
    #[arg(long)]
    broker_list: Option<String>,
    /// {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}.
    #[arg(long)]
    reassignment_json_file: Option<PathBuf>,
    /// With --execute: start these reassignments even while others are in progress.
    #[arg(long)]
    additional: bool,
    /// With --execute: bytes a second the moving replicas may replicate at, per broker.
    #[arg(long)]
    throttle: Option<i64>,
    /// Accepted for Kafka's command lines (placement here is rack-unaware).
    #[arg(long)]
    disable_rack_aware: bool,
    /// With --verify: keep the throttles once the reassignments are done.
    #[arg(long)]
    preserve_throttles: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Generate,
    Execute,
    Verify,
    Cancel,
    List,
}

fn action(args: &ReassignArgs) -> Result<Action> {
    let chosen: Vec<Action> = [
        (args.generate, Action::Generate),
        (args.execute, Action::Execute),
        (args.verify, Action::Verify),
        (args.cancel, Action::Cancel),
        (args.list, Action::List),
    ]
    .into_iter()
    .filter_map(|(set, action)| set.then_some(action))
    .collect();
    match chosen[..] {
        [one] => Ok(one),
        _ => bail!(
            "Command must include exactly one action: --generate, --execute, --verify, --cancel, --list"
        ),
    }
}

/// A partition and the replicas a file gives it.
type Assignment = BTreeMap<TopicPartition, Vec<i32>>;

pub fn run(args: ReassignArgs) -> Result<()> {
    let action = action(&args)?;
    let Some(bootstrap) = args.bootstrap_server.clone() else {
        bail!("Please specify --bootstrap-server");
    };
    if let Some(rate) = args.throttle {
        if rate < 0 {
            bail!("--throttle must be at least 0");
        }
    }
    match action {
        Action::Generate => {
            let (Some(topics_file), Some(brokers)) =
                (&args.topics_to_move_json_file, &args.broker_list)
            else {
                bail!("Missing required argument(s): --topics-to-move-json-file and --broker-list are both required with --generate");
            };
            let topics = parse_topics_to_move(&read(topics_file)?)?;
            let brokers = parse_broker_list(brokers)?;
            generate(&bootstrap, &topics, &brokers)
        }
        Action::Execute | Action::Verify | Action::Cancel => {
            let Some(file) = &args.reassignment_json_file else {
                bail!("Missing required argument: --reassignment-json-file");
            };
            let assignment = parse_reassignment(&read(file)?)?;
            match action {
                Action::Execute => execute(&bootstrap, &assignment, args.additional, args.throttle),
                Action::Verify => verify(&bootstrap, &assignment, args.preserve_throttles),
                _ => cancel(&bootstrap, &assignment),
            }
        }
        Action::List => list(&bootstrap),
    }
}

fn read(path: &PathBuf) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))
}

fn parse_topics_to_move(text: &str) -> Result<Vec<String>> {
    let value: Value = serde_json::from_str(text).context("parse the topics-to-move JSON")?;
    let Some(list) = value.get("topics").and_then(Value::as_array) else {
        bail!("The topics-to-move JSON needs a \"topics\" array");
    };
    let mut topics = Vec::new();
    for entry in list {
        let Some(topic) = entry.get("topic").and_then(Value::as_str) else {
            bail!("The topics-to-move JSON: {entry} needs a string \"topic\"");
        };
        if topics.iter().any(|t| t == topic) {
            bail!("Duplicate topic names are not allowed: {topic}");
        }
        topics.push(topic.to_owned());
    }
    if topics.is_empty() {
        bail!("The topics-to-move JSON lists no topic");
    }
    Ok(topics)
}

fn parse_broker_list(text: &str) -> Result<Vec<i32>> {
    let mut brokers = Vec::new();
    for id in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let id: i32 = id
            .parse()
            .with_context(|| format!("--broker-list: {id:?} is not a broker id"))?;
        if brokers.contains(&id) {
            bail!("Duplicate broker IDs in broker list: {id}");
        }
        brokers.push(id);
    }
    if brokers.is_empty() {
        bail!("--broker-list names no broker");
    }
    Ok(brokers)
}

/// The partitions of a reassignment file, refused as Kafka's tool refuses
/// them: no partitions, a partition twice, a replica twice, an empty
/// replica list, or a log directory other than "any".
fn parse_reassignment(text: &str) -> Result<Assignment> {
    let value: Value = serde_json::from_str(text).context("parse the reassignment JSON")?;
    let Some(list) = value.get("partitions").and_then(Value::as_array) else {
        bail!("The reassignment JSON needs a \"partitions\" array");
    };
    if list.is_empty() {
        bail!("Partition reassignment list cannot be empty");
    }
    let mut assignment = Assignment::new();
    for entry in list {
        let topic = entry.get("topic").and_then(Value::as_str);
        let partition = entry
            .get("partition")
            .and_then(Value::as_i64)
            .and_then(|p| i32::try_from(p).ok());
        let replicas: Option<Vec<i32>> =
            entry
                .get("replicas")
                .and_then(Value::as_array)
                .and_then(|r| {
                    r.iter()
                        .map(|id| id.as_i64().and_then(|id| i32::try_from(id).ok()))
                        .collect()
                });
        let (Some(topic), Some(partition), Some(replicas)) = (topic, partition, replicas) else {
            bail!("The reassignment JSON: {entry} needs a string \"topic\", an integer \"partition\" and an integer array \"replicas\"");
        };
        let name = format!("{topic}-{partition}");
        if replicas.is_empty() {
            bail!("Partition replica list cannot be empty: {name}");
        }
        if let Some(twice) = replicas
            .iter()
            .enumerate()
            .find(|(i, r)| replicas[..*i].contains(r))
        {
            bail!(
                "Partition replica lists may not contain duplicate entries: {name} contains multiple entries for {}",
                twice.1
            );
        }
        if let Some(dirs) = entry.get("log_dirs") {
            let Some(dirs) = dirs.as_array() else {
                bail!("The reassignment JSON: \"log_dirs\" of {name} is not an array");
            };
            if dirs.len() != replicas.len() {
                bail!("Size of replicas list {replicas:?} is different from size of log dirs list {dirs:?} for partition {name}");
            }
            if dirs.iter().any(|d| d.as_str() != Some("any")) {
                bail!("Moving replicas between log directories is not supported (a Tarn broker has one): {name} names {dirs:?}");
            }
        }
        if assignment
            .insert((topic.to_owned(), partition), replicas)
            .is_some()
        {
            bail!("Cannot reassign the same partition more than once: {name}");
        }
    }
    Ok(assignment)
}

/// Kafka's JSON for an assignment, keys in Kafka's order.
fn assignment_json(assignment: &Assignment) -> String {
    let partitions: Vec<String> = assignment
        .iter()
        .map(|((topic, partition), replicas)| {
            let ids: Vec<String> = replicas.iter().map(i32::to_string).collect();
            let dirs = vec!["\"any\""; replicas.len()];
            format!(
                "{{\"topic\":{},\"partition\":{partition},\"replicas\":[{}],\"log_dirs\":[{}]}}",
                Value::String(topic.clone()),
                ids.join(","),
                dirs.join(",")
            )
        })
        .collect();
    format!(
        "{{\"version\":1,\"partitions\":[{}]}}",
        partitions.join(",")
    )
}

/// The current replicas of every partition of `topics` (all named must
/// exist).
fn current_assignment(response: &MetadataResponse, topics: &BTreeSet<&str>) -> Result<Assignment> {
    let mut assignment = Assignment::new();
    for topic in &response.topics {
        let Some(name) = topic.name.as_deref().filter(|n| topics.contains(n)) else {
            continue;
        };
        if topic.error_code != error::NONE {
            bail!(
                "Topic {name} not found: {} ({})",
                error_name(topic.error_code),
                topic.error_code
            );
        }
        for p in &topic.partitions {
            assignment.insert(
                (name.to_owned(), p.partition_index),
                p.replica_nodes.clone(),
            );
        }
    }
    if let Some(missing) = topics
        .iter()
        .find(|t| !assignment.keys().any(|(n, _)| n == *t))
    {
        bail!("Topic {missing} not found");
    }
    Ok(assignment)
}

/// Kafka's rack-unaware placement (`assignReplicasToBrokers`) of
/// `partitions` partitions with `factor` replicas each over `brokers`,
/// starting from the first broker with no shift.
fn place(partitions: i32, factor: usize, brokers: &[i32]) -> Vec<Vec<i32>> {
    let n = brokers.len();
    let mut shift = 0usize;
    (0..partitions as usize)
        .map(|p| {
            if p > 0 && p % n == 0 {
                shift += 1;
            }
            let first = p % n;
            let mut replicas = vec![brokers[first]];
            for j in 0..factor.saturating_sub(1) {
                let index = (first + 1 + (shift + j) % (n - 1)) % n;
                replicas.push(brokers[index]);
            }
            replicas
        })
        .collect()
}

fn generate(bootstrap: &str, topics: &[String], brokers: &[i32]) -> Result<()> {
    let response = metadata(bootstrap, Some(topics.to_vec()), false)?;
    let live: BTreeSet<i32> = response.brokers.iter().map(|b| b.node_id).collect();
    if let Some(unknown) = brokers.iter().find(|b| !live.contains(b)) {
        bail!("Unknown broker id {unknown}");
    }
    let names: BTreeSet<&str> = topics.iter().map(String::as_str).collect();
    let current = current_assignment(&response, &names)?;
    let mut proposed = Assignment::new();
    for topic in topics {
        let partitions: Vec<(&TopicPartition, &Vec<i32>)> =
            current.iter().filter(|((t, _), _)| t == topic).collect();
        let factor = partitions.first().map_or(0, |(_, r)| r.len());
        if factor > brokers.len() {
            bail!(
                "Replication factor: {factor} larger than available brokers: {}.",
                brokers.len()
            );
        }
        let placed = place(partitions.len() as i32, factor, brokers);
        for ((key, _), replicas) in partitions.into_iter().zip(placed) {
            proposed.insert(key.clone(), replicas);
        }
    }
    println!("Current partition replica assignment");
    println!("{}", assignment_json(&current));
    println!();
    println!("Proposed partition reassignment configuration");
    println!("{}", assignment_json(&proposed));
    Ok(())
}

/// Kafka's `topic-partition` list, comma-separated, in topic then
/// partition order.
fn names<'a>(partitions: impl IntoIterator<Item = &'a TopicPartition>) -> String {
    partitions
        .into_iter()
        .map(|(t, p)| format!("{t}-{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The reassignments in progress, by partition: (replicas, adding, removing).
pub type Ongoing = BTreeMap<TopicPartition, (Vec<i32>, Vec<i32>, Vec<i32>)>;

pub fn ongoing(bootstrap: &str, partitions: Option<&Assignment>) -> Result<Ongoing> {
    let topics = partitions.map(|assignment| {
        let mut topics: Vec<ListPartitionReassignmentsTopics> = Vec::new();
        for (topic, partition) in assignment.keys() {
            match topics.last_mut().filter(|t| t.name == *topic) {
                Some(t) => t.partition_indexes.push(*partition),
                None => topics.push(ListPartitionReassignmentsTopics {
                    name: topic.clone(),
                    partition_indexes: vec![*partition],
                }),
            }
        }
        topics
    });
    let request = ListPartitionReassignmentsRequest {
        timeout_ms: REASSIGNMENT_TIMEOUT_MS,
        topics,
    };
    let (key, version, flexible_min) = LIST_REASSIGNMENTS;
    let response: ListPartitionReassignmentsResponse = connect_bootstrap(bootstrap)?
        .call(key, version, flexible_min, &request)
        .context("send ListPartitionReassignments")?;
    if response.error_code != error::NONE {
        bail!(
            "Listing partition reassignments failed: {} ({}): {}",
            error_name(response.error_code),
            response.error_code,
            response.error_message.unwrap_or_default()
        );
    }
    Ok(response
        .topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name;
            t.partitions.into_iter().map(move |p| {
                (
                    (name.clone(), p.partition_index),
                    (p.replicas, p.adding_replicas, p.removing_replicas),
                )
            })
        })
        .collect())
}

/// Sends one AlterPartitionReassignments for `partitions` (`None` replicas
/// cancel) and returns the partitions refused, with Kafka's error names.
fn alter(
    bootstrap: &str,
    partitions: &BTreeMap<TopicPartition, Option<Vec<i32>>>,
) -> Result<Vec<String>> {
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for ((topic, partition), replicas) in partitions {
        let entry = ReassignablePartition {
            partition_index: *partition,
            replicas: replicas.clone(),
        };
        match topics.last_mut().filter(|t| t.name == *topic) {
            Some(t) => t.partitions.push(entry),
            None => topics.push(ReassignableTopic {
                name: topic.clone(),
                partitions: vec![entry],
            }),
        }
    }
    let request = AlterPartitionReassignmentsRequest {
        timeout_ms: REASSIGNMENT_TIMEOUT_MS,
        allow_replication_factor_change: true,
        topics,
    };
    let (key, version, flexible_min) = ALTER_REASSIGNMENTS;
    let response: AlterPartitionReassignmentsResponse = connect_bootstrap(bootstrap)?
        .call(key, version, flexible_min, &request)
        .context("send AlterPartitionReassignments")?;
    if response.error_code != error::NONE {
        bail!(
            "{} ({}): {}",
            error_name(response.error_code),
            response.error_code,
            response.error_message.unwrap_or_default()
        );
    }
    let mut refused = Vec::new();
    for topic in response.responses {
        for p in topic.partitions {
            if p.error_code != error::NONE {
                refused.push(format!(
                    "{}-{}: {} ({}): {}",
                    topic.name,
                    p.partition_index,
                    error_name(p.error_code),
                    p.error_code,
                    p.error_message.unwrap_or_default()
                ));
            }
        }
    }
    Ok(refused)
}

fn execute(
    bootstrap: &str,
    assignment: &Assignment,
    additional: bool,
    throttle: Option<i64>,
) -> Result<()> {
    let topics: BTreeSet<&str> = assignment.keys().map(|(t, _)| t.as_str()).collect();
    let response = metadata(
        bootstrap,
        Some(topics.iter().map(|t| t.to_string()).collect()),
        false,
    )?;
    let current = current_assignment(&response, &topics)?;
    if let Some((topic, partition)) = assignment.keys().find(|k| !current.contains_key(*k)) {
        bail!("Topic {topic} does not have partition {partition}");
    }
    if !additional && !ongoing(bootstrap, None)?.is_empty() {
        bail!("Cannot execute because there is an existing partition assignment.  Use --additional to override this and create a new partition assignment in addition to the existing one.");
    }
    let rollback: Assignment = assignment
        .keys()
        .map(|k| (k.clone(), current[k].clone()))
        .collect();
    println!("Current partition replica assignment");
    println!();
    println!("{}", assignment_json(&rollback));
    println!();
    println!("Save this to use as the --reassignment-json-file option during rollback");
    if let Some(rate) = throttle {
        set_throttles(&response, assignment, &current, rate)?;
        println!("Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed.");
        println!("The inter-broker throttle limit was set to {rate} B/s");
    }
    let asked = assignment
        .iter()
        .map(|(k, r)| (k.clone(), Some(r.clone())))
        .collect();
    let refused = alter(bootstrap, &asked)?;
    if !refused.is_empty() {
        bail!("Error reassigning partition(s):\n{}", refused.join("\n"));
    }
    let plural = if assignment.len() == 1 { "" } else { "s" };
    println!(
        "Successfully started partition reassignment{plural} for {}",
        names(assignment.keys())
    );
    Ok(())
}

/// One line per partition of `assignment`, as Kafka's `--verify` prints it.
fn verify_lines(assignment: &Assignment, current: &Assignment, ongoing: &Ongoing) -> Vec<String> {
    assignment
        .iter()
        .map(|(key, target)| {
            let name = format!("{}-{}", key.0, key.1);
            if ongoing.contains_key(key) {
                format!("Reassignment of partition {name} is still in progress.")
            } else if current.get(key) == Some(target) {
                format!("Reassignment of partition {name} is completed.")
            } else {
                let now = current
                    .get(key)
                    .map(|r| r.iter().map(i32::to_string).collect::<Vec<_>>().join(","))
                    .unwrap_or_default();
                let want = target.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
                format!("There is no active reassignment of partition {name}, but replica set is {now} rather than {want}.")
            }
        })
        .collect()
}

fn verify(bootstrap: &str, assignment: &Assignment, preserve_throttles: bool) -> Result<()> {
    let topics: BTreeSet<&str> = assignment.keys().map(|(t, _)| t.as_str()).collect();
    let in_progress = ongoing(bootstrap, Some(assignment))?;
    let response = metadata(
        bootstrap,
        Some(topics.iter().map(|t| t.to_string()).collect()),
        false,
    )?;
    let current = current_assignment(&response, &topics)?;
    println!("Status of partition reassignment:");
    for line in verify_lines(assignment, &current, &in_progress) {
        println!("{line}");
    }
    if in_progress.is_empty() && !preserve_throttles {
        clear_throttles(&response, &topics)?;
    }
    Ok(())
}

const LEADER_THROTTLED_REPLICAS: &str = "leader.replication.throttled.replicas";
const FOLLOWER_THROTTLED_REPLICAS: &str = "follower.replication.throttled.replicas";
const THROTTLE_RATES: [&str; 2] = [
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
];
/// IncrementalAlterConfigs v1 (flexible from 1), and its resource types.
const TOPIC_RESOURCE: i8 = 2;
const BROKER_RESOURCE: i8 = 4;

/// The throttled-replica lists of each topic moving in `assignment`:
/// (leader list, follower list), as `partition:broker` pairs.
fn throttled_replicas(
    assignment: &Assignment,
    current: &Assignment,
) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut lists: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for ((topic, partition), target) in assignment {
        let now = &current[&(topic.clone(), *partition)];
        if now == target {
            continue;
        }
        let (leaders, followers) = lists.entry(topic.clone()).or_default();
        leaders.extend(now.iter().map(|b| format!("{partition}:{b}")));
        followers.extend(
            target
                .iter()
                .filter(|b| !now.contains(b))
                .map(|b| format!("{partition}:{b}")),
        );
    }
    lists
}

/// Throttles the moves of `assignment` at `rate` bytes a second.
fn set_throttles(
    metadata: &MetadataResponse,
    assignment: &Assignment,
    current: &Assignment,
    rate: i64,
) -> Result<()> {
    let lists = throttled_replicas(assignment, current);
    let any = address_of(metadata, None)?;
    for (topic, (leaders, followers)) in &lists {
        let mut configs = vec![(LEADER_THROTTLED_REPLICAS, Some(leaders.join(",")))];
        if !followers.is_empty() {
            configs.push((FOLLOWER_THROTTLED_REPLICAS, Some(followers.join(","))));
        }
        alter_configs(&any, TOPIC_RESOURCE, topic, &configs)?;
    }
    let brokers: BTreeSet<i32> = assignment
        .iter()
        .flat_map(|(key, target)| target.iter().chain(&current[key]).copied())
        .collect();
    let rate = rate.to_string();
    for broker in brokers {
        let configs: Vec<(&str, Option<String>)> = THROTTLE_RATES
            .iter()
            .map(|k| (*k, Some(rate.clone())))
            .collect();
        // A broker's own configs are altered through that broker.
        alter_configs(
            &address_of(metadata, Some(broker))?,
            BROKER_RESOURCE,
            &broker.to_string(),
            &configs,
        )?;
    }
    Ok(())
}

/// Removes the throttles of `topics` and of every broker, as Kafka's
/// `--verify` does once the reassignments are done.
fn clear_throttles(metadata: &MetadataResponse, topics: &BTreeSet<&str>) -> Result<()> {
    let brokers: Vec<i32> = metadata.brokers.iter().map(|b| b.node_id).collect();
    let names: Vec<String> = brokers.iter().map(i32::to_string).collect();
    println!(
        "Clearing broker-level throttles on brokers {}",
        names.join(",")
    );
    for broker in &brokers {
        let configs: Vec<(&str, Option<String>)> =
            THROTTLE_RATES.iter().map(|k| (*k, None)).collect();
        alter_configs(
            &address_of(metadata, Some(*broker))?,
            BROKER_RESOURCE,
            &broker.to_string(),
            &configs,
        )?;
    }
    let any = address_of(metadata, None)?;
    for topic in topics {
        println!("Clearing topic-level throttles on topic {topic}");
        alter_configs(
            &any,
            TOPIC_RESOURCE,
            topic,
            &[
                (LEADER_THROTTLED_REPLICAS, None),
                (FOLLOWER_THROTTLED_REPLICAS, None),
            ],
        )?;
    }
    Ok(())
}

/// `host:port` of broker `id`, or of any broker.
fn address_of(metadata: &MetadataResponse, id: Option<i32>) -> Result<String> {
    metadata
        .brokers
        .iter()
        .find(|b| id.is_none_or(|id| b.node_id == id))
        .map(|b| format!("{}:{}", b.host, b.port))
        .with_context(|| match id {
            Some(id) => format!("broker {id} is not in the cluster's metadata"),
            None => "the cluster's metadata names no broker".to_owned(),
        })
}

/// Sets (`Some`) or deletes (`None`) configs of one resource with
/// IncrementalAlterConfigs sent to `address`.
fn alter_configs(
    address: &str,
    resource_type: i8,
    name: &str,
    configs: &[(&str, Option<String>)],
) -> Result<()> {
    let configs = configs
        .iter()
        .map(|(key, value)| IncrementalAlterableConfig {
            name: (*key).to_owned(),
            config_operation: if value.is_some() { OP_SET } else { OP_DELETE },
            value: value.clone(),
        })
        .collect();
    let mut client = connect_bootstrap(address)?;
    if let Err(refusal) =
        crate::configs::incremental_alter(&mut client, resource_type, name, configs)?
    {
        bail!("alter the configs of {name}: {refusal}");
    }
    Ok(())
}

fn cancel(bootstrap: &str, assignment: &Assignment) -> Result<()> {
    let in_progress = ongoing(bootstrap, Some(assignment))?;
    let asked: BTreeMap<TopicPartition, Option<Vec<i32>>> =
        in_progress.keys().map(|k| (k.clone(), None)).collect();
    if asked.is_empty() {
        println!("None of the specified partition reassignments are active.");
        return Ok(());
    }
    let refused = alter(bootstrap, &asked)?;
    if !refused.is_empty() {
        bail!(
            "Error cancelling partition reassignment(s):\n{}",
            refused.join("\n")
        );
    }
    let plural = if asked.len() == 1 { "" } else { "s" };
    println!(
        "Successfully cancelled partition reassignment{plural} for: {}",
        names(asked.keys())
    );
    Ok(())
}

fn list(bootstrap: &str) -> Result<()> {
    let in_progress = ongoing(bootstrap, None)?;
    if in_progress.is_empty() {
        println!("No partition reassignments found.");
        return Ok(());
    }
    let join = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    println!("Current partition reassignments:");
    for ((topic, partition), (replicas, adding, removing)) in &in_progress {
        println!(
            "{topic}-{partition}: replicas: {}. adding: {}. removing: {}.",
            join(replicas),
            join(adding),
            join(removing)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_spreads_leaders_and_followers_as_kafka_does() {
        // Kafka's assignReplicasToBrokers with start index 0 and no shift.
        assert_eq!(
            place(6, 2, &[1, 2, 3]),
            [
                vec![1, 2],
                vec![2, 3],
                vec![3, 1],
                vec![1, 3],
                vec![2, 1],
                vec![3, 2]
            ]
        );
        assert_eq!(place(2, 1, &[4, 5]), [vec![4], vec![5]]);
        assert_eq!(place(1, 3, &[1, 2, 3]), [vec![1, 2, 3]]);
    }

    #[test]
    fn reassignment_files_are_read_and_refused_as_kafkas_tool_does() {
        let file = r#"{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[3,1],"log_dirs":["any","any"]},{"topic":"t","partition":0,"replicas":[2]}]}"#;
        let assignment = parse_reassignment(file).unwrap();
        assert_eq!(assignment[&("t".to_string(), 1)], [3, 1]);
        assert_eq!(
            assignment_json(&assignment),
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2],"log_dirs":["any"]},{"topic":"t","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}"#
        );
        assert_eq!(
            parse_reassignment(&assignment_json(&assignment)).unwrap(),
            assignment
        );
        let refusal = |text: &str| parse_reassignment(text).unwrap_err().to_string();
        assert_eq!(
            refusal(r#"{"version":1,"partitions":[]}"#),
            "Partition reassignment list cannot be empty"
        );
        assert_eq!(
            refusal(r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}"#),
            "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1"
        );
        assert_eq!(
            refusal(
                r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#
            ),
            "Cannot reassign the same partition more than once: t-0"
        );
        assert!(refusal(
            r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}"#
        )
        .starts_with("Moving replicas between log directories is not supported"));
    }

    #[test]
    fn verify_says_completed_in_progress_or_elsewhere() {
        let key = |p: i32| ("t".to_string(), p);
        let target = Assignment::from([
            (key(0), vec![2, 3]),
            (key(1), vec![2, 3]),
            (key(2), vec![2, 3]),
        ]);
        let current = Assignment::from([
            (key(0), vec![2, 3]),
            (key(1), vec![2, 3, 1]),
            (key(2), vec![1, 2]),
        ]);
        let ongoing = Ongoing::from([(key(1), (vec![2, 3, 1], vec![3], vec![1]))]);
        assert_eq!(
            verify_lines(&target, &current, &ongoing),
            [
                "Reassignment of partition t-0 is completed.",
                "Reassignment of partition t-1 is still in progress.",
                "There is no active reassignment of partition t-2, but replica set is 1,2 rather than 2,3.",
            ]
        );
    }

    #[test]
    fn one_action_is_required() {
        let args = ReassignArgs {
            bootstrap_server: Some("127.0.0.1:9092".into()),
            generate: false,
            execute: true,
            verify: true,
            cancel: false,
            list: false,
            topics_to_move_json_file: None,
            broker_list: None,
            reassignment_json_file: None,
            additional: false,
            throttle: None,
            disable_rack_aware: false,
            preserve_throttles: false,
        };
        assert!(action(&args)
            .unwrap_err()
            .to_string()
            .starts_with("Command must include exactly one action"));
    }
}
