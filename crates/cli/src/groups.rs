//! `tarn groups`: list, describe, delete consumer groups and reset their
//! committed offsets over the Kafka protocol, with the flags and output of
//! kafka-consumer-groups.sh. Every command exits non-zero with a message
//! when it did not do what was asked.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args};

use tarn_protocol::consumer_protocol::{self, Assignment};
use tarn_protocol::error;
use tarn_protocol::messages::delete_groups::{DeleteGroupsRequest, DeleteGroupsResponse};
use tarn_protocol::messages::describe_groups::{
    DescribeGroupsRequest, DescribeGroupsResponse, DescribedGroup,
};
use tarn_protocol::messages::list_groups::{ListGroupsRequest, ListGroupsResponse, ListedGroup};
use tarn_protocol::messages::list_offsets::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};

use tarn_cli::client::Client;

use crate::cluster::{list_offsets, metadata, TopicPartition};
use crate::coordinator::{
    commit_offsets, committed_offsets, committed_positions, error_text, find_coordinator,
    find_coordinator_node, Committer, Coordinator,
};
use crate::records::now_ms;

/// The `client.id` these requests carry.
const CLIENT_ID: &str = "tarn-cli";

#[derive(Args)]
#[command(group(
    ArgGroup::new("action")
        .required(true)
        .args(["list", "describe", "delete", "reset_offsets"])
))]
#[command(group(
    ArgGroup::new("reset_spec")
        .args(["to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration", "shift_by", "to_current"])
))]
pub struct GroupsArgs {
    /// host:port of a broker.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap_server: String,
    /// List every consumer group.
    #[arg(long)]
    list: bool,
    /// Show each partition's committed offset, log end offset, lag and
    /// owner for the given groups.
    #[arg(long)]
    describe: bool,
    /// Delete groups (only groups without active members).
    #[arg(long)]
    delete: bool,
    /// Reset a group's committed offsets (only an inactive group).
    #[arg(long)]
    reset_offsets: bool,
    /// The group to act on; repeatable.
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Act on every group (describe, delete).
    #[arg(long)]
    all_groups: bool,
    /// Reset scope: TOPIC or TOPIC:PARTITION,PARTITION...; repeatable.
    #[arg(long = "topic", value_name = "TOPIC")]
    topics: Vec<String>,
    /// Reset every topic the group has offsets for.
    #[arg(long)]
    all_topics: bool,
    /// Reset to the earliest offset still in the log.
    #[arg(long)]
    to_earliest: bool,
    /// Reset to the log end offset.
    #[arg(long)]
    to_latest: bool,
    /// Reset to this offset (clamped to the log's range).
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<i64>,
    /// Reset to the first offset at or after this time,
    /// YYYY-MM-DDTHH:mm:SS.sss (local time unless a Z or ±HH:MM suffix).
    #[arg(long, value_name = "DATETIME")]
    to_datetime: Option<String>,
    /// Reset to the first offset at or after now minus this ISO-8601
    /// duration (PnDTnHnMn.nS, as Java's Duration.parse reads it).
    #[arg(long, value_name = "DURATION")]
    by_duration: Option<String>,
    /// Move each committed offset by N (negative: back), clamped to the
    /// log's range.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// Reset to the committed offset (the log end where none is).
    #[arg(long)]
    to_current: bool,
    /// Commit the new offsets (without it, only show them).
    #[arg(long, conflicts_with = "dry_run")]
    execute: bool,
    /// Only show the new offsets.
    #[arg(long)]
    dry_run: bool,
    /// With --describe: each partition's committed offset, log end offset
    /// and lag (the default).
    #[arg(long, conflicts_with = "state")]
    offsets: bool,
    /// With --describe: the group's members and the partitions each owns.
    #[arg(long, conflicts_with_all = ["state", "offsets"])]
    members: bool,
    /// With --describe: the group's coordinator, assignment strategy,
    /// state and number of members. With --list: only groups in these
    /// states (comma-separated, any case; every state when none is
    /// given), with a STATE column.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "STATES")]
    state: Option<String>,
    /// With --list: only groups of these types (classic, consumer;
    /// comma-separated), with a TYPE column.
    #[arg(long = "type", num_args = 0..=1, default_missing_value = "", value_name = "TYPES")]
    group_type: Option<String>,
    /// With --describe: more columns (the committed leader epoch; each
    /// member's assignment; the group's epochs).
    #[arg(long)]
    verbose: bool,
}

/// What `--describe` shows of a group.
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    Offsets,
    Members,
    State,
}

pub fn run(args: GroupsArgs) -> Result<()> {
    if args.list {
        return list(
            &args.bootstrap_server,
            args.state.as_deref(),
            args.group_type.as_deref(),
        );
    }
    let groups = target_groups(&args)?;
    if args.describe {
        let view = if args.members {
            View::Members
        } else if args.state.is_some() {
            View::State
        } else {
            View::Offsets
        };
        // Kafka's tool describes groups in name order, each once.
        let groups: BTreeSet<String> = groups.into_iter().collect();
        describe(&args.bootstrap_server, &groups, view, args.verbose)
    } else if args.delete {
        delete(&args.bootstrap_server, &groups)
    } else {
        reset_offsets(&args, &groups)
    }
}

fn target_groups(args: &GroupsArgs) -> Result<Vec<String>> {
    if args.all_groups {
        if args.reset_offsets {
            bail!(
                "--all-groups is not supported with --reset-offsets; name the group with --group"
            );
        }
        return list_group_ids(&args.bootstrap_server);
    }
    if args.groups.is_empty() {
        bail!("Option --group (or --all-groups) is required with this action");
    }
    Ok(args.groups.clone())
}

/// The group states kafka-consumer-groups.sh accepts in `--state`, as
/// Kafka names them.
const GROUP_STATES: [&str; 7] = [
    "Dead",
    "Empty",
    "Stable",
    "CompletingRebalance",
    "PreparingRebalance",
    "Reconciling",
    "Assigning",
];

/// The group types kafka-consumer-groups.sh accepts in `--type`.
const GROUP_TYPES: [&str; 2] = ["Consumer", "Classic"];

/// The names in a comma-separated `list` that each match one of `known`
/// in any case, as `known` spells them; `None` when one matches none.
fn parse_names(list: &str, known: &[&str]) -> Option<Vec<String>> {
    if list.is_empty() {
        return Some(Vec::new());
    }
    list.split(',')
        .map(|name| {
            known
                .iter()
                .find(|k| k.eq_ignore_ascii_case(name.trim()))
                .map(|k| (*k).to_owned())
        })
        .collect()
}

/// How Kafka's tool prints a group type the broker names in any case.
fn type_name(group_type: &str) -> String {
    ["Classic", "Consumer", "Share", "Streams"]
        .into_iter()
        .find(|k| k.eq_ignore_ascii_case(group_type))
        .unwrap_or("Unknown")
        .to_owned()
}

/// The consumer groups every broker lists (ListGroups v5), in name order:
/// classic groups of the consumer protocol (or of none yet, as a group
/// that only commits offsets) and consumer groups, of `types` and in
/// `states` if any (the brokers filter, in any case).
fn list_consumer_groups(
    bootstrap: &str,
    states: &[String],
    types: &[String],
) -> Result<Vec<ListedGroup>> {
    let brokers = metadata(bootstrap, Some(Vec::new()), false)?.brokers;
    let types: Vec<&str> = if types.is_empty() {
        GROUP_TYPES.to_vec()
    } else {
        types.iter().map(String::as_str).collect()
    };
    let types_filter = types.iter().map(|t| t.to_lowercase()).collect();
    let request = ListGroupsRequest {
        states_filter: states.to_vec(),
        types_filter,
    };
    let mut groups = BTreeMap::new();
    for broker in brokers {
        let address = format!("{}:{}", broker.host, broker.port);
        let response: ListGroupsResponse = Client::connect(&address)?.call(16, 5, 3, &request)?;
        if response.error_code != error::NONE {
            bail!(
                "listing groups on broker {} failed: {}",
                broker.node_id,
                error_text(response.error_code)
            );
        }
        for group in response.groups {
            let consumer = group.protocol_type.is_empty()
                || group.protocol_type == consumer_protocol::PROTOCOL_TYPE;
            if consumer {
                groups.insert(group.group_id.clone(), group);
            }
        }
    }
    Ok(groups.into_values().collect())
}

fn list_group_ids(bootstrap: &str) -> Result<Vec<String>> {
    Ok(list_consumer_groups(bootstrap, &[], &[])?
        .into_iter()
        .map(|g| g.group_id)
        .collect())
}

/// `--list`: the group ids, or with `--state` or `--type` a table of the
/// groups those filters pass, as kafka-consumer-groups.sh 4.4 prints it.
fn list(bootstrap: &str, states: Option<&str>, types: Option<&str>) -> Result<()> {
    if states.is_none() && types.is_none() {
        for id in list_group_ids(bootstrap)? {
            println!("{id}");
        }
        return Ok(());
    }
    let wanted_states = match states {
        Some(list) => parse_names(list, &GROUP_STATES).with_context(|| {
            format!(
                "Invalid state list '{list}'. Valid states are: {}",
                GROUP_STATES.join(", ")
            )
        })?,
        None => Vec::new(),
    };
    let wanted_types = match types {
        Some(list) => parse_names(list, &GROUP_TYPES).with_context(|| {
            format!(
                "Invalid types list '{list}'. Valid types are: {}",
                GROUP_TYPES.join(", ")
            )
        })?,
        None => Vec::new(),
    };
    let groups = list_consumer_groups(bootstrap, &wanted_states, &wanted_types)?;
    let group_w = groups
        .iter()
        .map(|g| g.group_id.len().max(MIN_COLUMN))
        .max()
        .unwrap_or(MIN_COLUMN)
        + 10;
    let line = |group: &str, group_type: &str, state: &str| {
        let mut line = format!("{group:group_w$}");
        if types.is_some() {
            line.push_str(&format!(" {group_type:20}"));
        }
        if states.is_some() {
            line.push_str(&format!(" {state:20}"));
        }
        line
    };
    println!("{}", line("GROUP", "TYPE", "STATE"));
    for g in &groups {
        println!(
            "{}",
            line(&g.group_id, &type_name(&g.group_type), &g.group_state)
        );
    }
    Ok(())
}

fn describe_group(client: &mut Client, group: &str) -> Result<DescribedGroup> {
    let request = DescribeGroupsRequest {
        groups: vec![group.to_owned()],
        include_authorized_operations: false,
    };
    let response: DescribeGroupsResponse = client.call(15, 5, 5, &request)?;
    let described = response
        .groups
        .into_iter()
        .next()
        .context("broker returned no description for the group")?;
    if described.error_code != error::NONE {
        bail!(
            "cannot describe group '{group}': {}",
            error_text(described.error_code)
        );
    }
    Ok(described)
}

/// One row of the offsets table.
struct Row {
    topic: String,
    partition: String,
    leader_epoch: String,
    current: String,
    log_end: String,
    lag: String,
    consumer_id: String,
    host: String,
    client_id: String,
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn describe(bootstrap: &str, groups: &BTreeSet<String>, view: View, verbose: bool) -> Result<()> {
    let mut missing = Vec::new();
    for group in groups {
        let (mut client, coordinator) = find_coordinator_node(bootstrap, group, CLIENT_ID)?;
        let described = describe_group(&mut client, group)?;
        if described.group_state == "Dead" {
            missing.push(group.clone());
            continue;
        }
        if described.protocol_type != consumer_protocol::PROTOCOL_TYPE
            && !described.protocol_type.is_empty()
        {
            bail!(
                "group '{group}' is not a consumer group (protocol type '{}')",
                described.protocol_type
            );
        }
        match described.group_state.as_str() {
            "Empty" => eprintln!("\nConsumer group '{group}' has no active members."),
            "Stable" => {}
            _ => eprintln!("\nWarning: Consumer group '{group}' is rebalancing."),
        }
        let assignments = member_assignments(&described)?;
        match view {
            View::Offsets => {
                print_offsets(bootstrap, &mut client, &described, &assignments, verbose)?
            }
            View::Members => print_members(&described, &assignments, verbose),
            View::State => print_state(&described, &coordinator, verbose),
        }
    }
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|g| format!("'{g}'")).collect();
        bail!("Consumer group {} does not exist.", names.join(", "));
    }
    Ok(())
}

/// The partitions each member of `described` owns, in member order.
fn member_assignments(described: &DescribedGroup) -> Result<Vec<Vec<TopicPartition>>> {
    described
        .members
        .iter()
        .map(|member| {
            if member.member_assignment.is_empty() {
                return Ok(Vec::new());
            }
            let assignment = Assignment::decode_prefixed(&member.member_assignment)
                .with_context(|| format!("read the assignment of member {}", member.member_id))?;
            Ok(assignment
                .assigned_partitions
                .into_iter()
                .flat_map(|tps| {
                    let topic = tps.topic;
                    tps.partitions.into_iter().map(move |p| (topic.clone(), p))
                })
                .collect())
        })
        .collect()
}

/// `--describe [--offsets]`: a row per partition the group owns or has
/// committed an offset for, then one per member that owns none.
fn print_offsets(
    bootstrap: &str,
    client: &mut Client,
    described: &DescribedGroup,
    assignments: &[Vec<TopicPartition>],
    verbose: bool,
) -> Result<()> {
    let group = &described.group_id;
    let committed = committed_positions(client, group, None)?;
    let mut owners: BTreeMap<&TopicPartition, usize> = BTreeMap::new();
    for (index, owned) in assignments.iter().enumerate() {
        for tp in owned {
            owners.insert(tp, index);
        }
    }
    let mut partitions: BTreeSet<TopicPartition> = owners.keys().map(|tp| (*tp).clone()).collect();
    partitions.extend(committed.keys().cloned());
    let log_end = list_offsets(bootstrap, &partitions, LATEST_TIMESTAMP)?;

    let mut rows = Vec::new();
    for tp in &partitions {
        let position = committed.get(tp);
        let current = position.map(|p| p.offset);
        let end = log_end.get(tp).copied().flatten();
        let lag = current.zip(end).map(|(c, e)| e - c);
        let owner = owners.get(tp).map(|i| &described.members[*i]);
        rows.push(Row {
            topic: tp.0.clone(),
            partition: tp.1.to_string(),
            leader_epoch: or_dash(position.and_then(|p| p.leader_epoch)),
            current: or_dash(current),
            log_end: or_dash(end),
            lag: or_dash(lag),
            consumer_id: owner.map_or("-".into(), |m| m.member_id.clone()),
            host: owner.map_or("-".into(), |m| m.client_host.clone()),
            client_id: owner.map_or("-".into(), |m| m.client_id.clone()),
        });
    }
    for (member, owned) in described.members.iter().zip(assignments) {
        if owned.is_empty() {
            rows.push(Row {
                topic: "-".into(),
                partition: "-".into(),
                leader_epoch: "-".into(),
                current: "-".into(),
                log_end: "-".into(),
                lag: "-".into(),
                consumer_id: member.member_id.clone(),
                host: member.client_host.clone(),
                client_id: member.client_id.clone(),
            });
        }
    }
    print_rows(group, &rows, verbose);
    Ok(())
}

/// kafka-consumer-groups.sh's narrowest group, topic, consumer id, host
/// and client id columns.
const MIN_COLUMN: usize = 15;

/// The widest of `values` and `min`.
fn column_width<'a>(min: usize, values: impl IntoIterator<Item = &'a str>) -> usize {
    values.into_iter().map(str::len).fold(min, usize::max)
}

/// The offsets table as kafka-consumer-groups.sh 4.4 prints it: the group,
/// topic, consumer id and host columns as wide as their longest value,
/// and at least [`MIN_COLUMN`]; `verbose` adds the committed leader epoch.
fn print_rows(group: &str, rows: &[Row], verbose: bool) {
    let group_w = group.len().max(MIN_COLUMN);
    let topic_w = column_width(MIN_COLUMN, rows.iter().map(|r| r.topic.as_str()));
    let consumer_w = column_width(MIN_COLUMN, rows.iter().map(|r| r.consumer_id.as_str()));
    let host_w = column_width(MIN_COLUMN, rows.iter().map(|r| r.host.as_str()));
    let line = |values: [&str; 10]| {
        let [group, topic, partition, epoch, current, log_end, lag, consumer, host, client] =
            values;
        let epoch = if verbose {
            format!(" {epoch:15}")
        } else {
            String::new()
        };
        format!(
            "{group:group_w$} {topic:topic_w$} {partition:10}{epoch} {current:15} {log_end:15} \
             {lag:15} {consumer:consumer_w$} {host:host_w$} {client}"
        )
    };
    println!();
    println!(
        "{}",
        line([
            "GROUP",
            "TOPIC",
            "PARTITION",
            "LEADER-EPOCH",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID"
        ])
    );
    for r in rows {
        println!(
            "{}",
            line([
                group,
                &r.topic,
                &r.partition,
                &r.leader_epoch,
                &r.current,
                &r.log_end,
                &r.lag,
                &r.consumer_id,
                &r.host,
                &r.client_id,
            ])
        );
    }
}

/// A member's partitions as Kafka's tool writes them: `topic:p,p` per
/// topic, partitions in order, topics in order, separated by `;`; `-`
/// for none.
fn assignment_text(partitions: &[TopicPartition]) -> String {
    if partitions.is_empty() {
        return "-".to_owned();
    }
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in partitions {
        by_topic.entry(topic).or_default().push(*partition);
    }
    let mut parts: Vec<String> = by_topic
        .into_iter()
        .map(|(topic, mut ps)| {
            ps.sort_unstable();
            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{topic}:{}", ps.join(","))
        })
        .collect();
    // Kafka sorts the finished strings, so "a:1" comes before "a-b:1".
    parts.sort();
    parts.join(";")
}

/// `--describe --members`: a row per member with how many partitions it
/// owns (`verbose`: which, and the epochs of KIP-848 groups, "-" for a
/// classic group's), as kafka-consumer-groups.sh 4.4 prints them. The
/// GROUP-INSTANCE-ID column appears when some member has one.
fn print_members(described: &DescribedGroup, assignments: &[Vec<TopicPartition>], verbose: bool) {
    let members = &described.members;
    let group = described.group_id.as_str();
    let texts: Vec<String> = assignments.iter().map(|a| assignment_text(a)).collect();
    let instances: Vec<&str> = members
        .iter()
        .map(|m| m.group_instance_id.as_deref().unwrap_or(""))
        .collect();
    // Kafka sizes the group column by the member rows: 15 when there are none.
    let group_w = column_width(MIN_COLUMN, members.first().map(|_| group));
    let consumer_w = column_width(MIN_COLUMN, members.iter().map(|m| m.member_id.as_str()));
    let instance_w = column_width(17, instances.iter().copied());
    let host_w = column_width(MIN_COLUMN, members.iter().map(|m| m.client_host.as_str()));
    let client_w = column_width(MIN_COLUMN, members.iter().map(|m| m.client_id.as_str()));
    let assignment_w = column_width(20, texts.iter().map(String::as_str));
    let with_instance = instances.iter().any(|i| !i.is_empty());
    let line = |values: [&str; 10]| {
        let [group, consumer, instance, host, client, count, epoch, current, target_epoch, target] =
            values;
        let mut line = format!("{group:group_w$} {consumer:consumer_w$} ");
        if with_instance {
            line.push_str(&format!("{instance:instance_w$} "));
        }
        line.push_str(&format!("{host:host_w$} {client:client_w$} {count:15} "));
        if verbose {
            line.push_str(&format!(
                "{epoch:15} {current:assignment_w$} {target_epoch:15} {target:20}"
            ));
        }
        line
    };
    println!();
    println!(
        "{}",
        line([
            "GROUP",
            "CONSUMER-ID",
            "GROUP-INSTANCE-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "CURRENT-EPOCH",
            "CURRENT-ASSIGNMENT",
            "TARGET-EPOCH",
            "TARGET-ASSIGNMENT"
        ])
    );
    for (i, member) in members.iter().enumerate() {
        let count = assignments[i].len().to_string();
        println!(
            "{}",
            line([
                group,
                &member.member_id,
                instances[i],
                &member.client_host,
                &member.client_id,
                &count,
                "-",
                &texts[i],
                "-",
                "-"
            ])
        );
    }
}

/// `--describe --state`: the group's coordinator, assignment strategy,
/// state and member count (`verbose`: the epochs of KIP-848 groups, "-"
/// for a classic group's), as kafka-consumer-groups.sh 4.4 prints them.
fn print_state(described: &DescribedGroup, coordinator: &Coordinator, verbose: bool) {
    let group = described.group_id.as_str();
    let node = format!(
        "{}:{}  ({})",
        coordinator.host, coordinator.port, coordinator.node_id
    );
    let strategy = if described.protocol_data.is_empty() {
        "-"
    } else {
        described.protocol_data.as_str()
    };
    let group_w = group.len().max(MIN_COLUMN);
    let node_w = node.len().max(25);
    let members = described.members.len().to_string();
    let line = |values: [&str; 7]| {
        let [group, node, strategy, state, epoch, target_epoch, members] = values;
        let epochs = if verbose {
            format!("{epoch:15} {target_epoch:25} ")
        } else {
            String::new()
        };
        format!("{group:group_w$} {node:node_w$} {strategy:20} {state:20} {epochs}{members}")
    };
    println!();
    println!(
        "{}",
        line([
            "GROUP",
            "COORDINATOR (ID)",
            "ASSIGNMENT-STRATEGY",
            "STATE",
            "GROUP-EPOCH",
            "TARGET-ASSIGNMENT-EPOCH",
            "#MEMBERS"
        ])
    );
    println!(
        "{}",
        line([
            group,
            &node,
            strategy,
            &described.group_state,
            "-",
            "-",
            &members
        ])
    );
}

fn delete(bootstrap: &str, groups: &[String]) -> Result<()> {
    let mut failures = Vec::new();
    for group in groups {
        let mut client = find_coordinator(bootstrap, group, CLIENT_ID)?;
        let request = DeleteGroupsRequest {
            groups_names: vec![group.clone()],
        };
        let response: DeleteGroupsResponse = client.call(42, 2, 2, &request)?;
        let code = response
            .results
            .iter()
            .find(|r| r.group_id == *group)
            .map(|r| r.error_code)
            .context("broker returned no result for the group")?;
        if code != error::NONE {
            failures.push(format!(
                "* Group '{group}' could not be deleted due to: {}",
                error_text(code)
            ));
        }
    }
    if !failures.is_empty() {
        bail!(
            "Deletion of some consumer groups failed:\n{}",
            failures.join("\n")
        );
    }
    let names: Vec<String> = groups.iter().map(|g| format!("'{g}'")).collect();
    println!(
        "Deletion of requested consumer groups ({}) was successful.",
        names.join(", ")
    );
    Ok(())
}

/// The offset `--to-offset` names, or the committed one moved by
/// `--shift-by` (an error where none is committed), before clamping.
fn requested_offset(
    args: &GroupsArgs,
    committed: &BTreeMap<TopicPartition, i64>,
    tp: &TopicPartition,
) -> Result<Option<i64>> {
    match (args.to_offset, args.shift_by) {
        (Some(target), _) => Ok(Some(target)),
        (None, Some(by)) => match committed.get(tp) {
            Some(current) => Ok(Some(current.saturating_add(by))),
            None => bail!(
                "Cannot shift offset for partition {}-{} since there is no current committed offset",
                tp.0,
                tp.1
            ),
        },
        (None, None) => Ok(None),
    }
}

/// The partitions `--topic` and `--all-topics` select.
fn reset_scope(
    args: &GroupsArgs,
    committed: &BTreeMap<TopicPartition, i64>,
) -> Result<BTreeSet<TopicPartition>> {
    if args.all_topics {
        if !args.topics.is_empty() {
            bail!("--all-topics and --topic cannot be used together");
        }
        return Ok(committed.keys().cloned().collect());
    }
    if args.topics.is_empty() {
        bail!("One of the reset scopes should be defined: --all-topics, --topic.");
    }
    let mut scope = BTreeSet::new();
    let mut whole_topics = Vec::new();
    for spec in &args.topics {
        match spec.split_once(':') {
            Some((topic, partitions)) => {
                for p in partitions.split(',') {
                    let p: i32 = p
                        .trim()
                        .parse()
                        .with_context(|| format!("--topic {spec}: bad partition '{p}'"))?;
                    scope.insert((topic.to_owned(), p));
                }
            }
            None => whole_topics.push(spec.clone()),
        }
    }
    if !whole_topics.is_empty() {
        let meta = metadata(&args.bootstrap_server, Some(whole_topics.clone()), false)?;
        for name in whole_topics {
            let topic = meta
                .topics
                .iter()
                .find(|t| t.name.as_deref() == Some(&name))
                .with_context(|| format!("broker returned no metadata for topic {name}"))?;
            if topic.error_code != error::NONE {
                bail!("topic '{name}': {}", error_text(topic.error_code));
            }
            for p in &topic.partitions {
                scope.insert((name.clone(), p.partition_index));
            }
        }
    }
    Ok(scope)
}

fn reset_offsets(args: &GroupsArgs, groups: &[String]) -> Result<()> {
    let spec_given = args.to_earliest
        || args.to_latest
        || args.to_offset.is_some()
        || args.to_datetime.is_some()
        || args.by_duration.is_some()
        || args.shift_by.is_some()
        || args.to_current;
    if !spec_given {
        bail!("One of the reset specifications should be defined: --to-earliest, --to-latest, --to-offset, --to-datetime, --by-duration, --shift-by, --to-current.");
    }
    if !args.execute && !args.dry_run {
        eprintln!("WARN: No action will be performed as the --execute option is missing. In a future major release, the default behavior of this command will be to prompt the user before executing the reset rather than doing a dry run. You should add the --dry-run option explicitly if you are scripting this command and want to keep the current default behavior without prompting.");
    }
    let bootstrap = &args.bootstrap_server;
    for group in groups {
        let mut client = find_coordinator(bootstrap, group, CLIENT_ID)?;
        let described = describe_group(&mut client, group)?;
        if described.group_state != "Empty" && described.group_state != "Dead" {
            bail!(
                "Assignments can only be reset if the group '{group}' is inactive, but the current state is {}.",
                described.group_state
            );
        }
        let committed = committed_offsets(&mut client, group, None)?;
        let scope = reset_scope(args, &committed)?;
        let earliest = list_offsets(bootstrap, &scope, EARLIEST_TIMESTAMP)?;
        let latest = list_offsets(bootstrap, &scope, LATEST_TIMESTAMP)?;
        let bounds = |tp: &TopicPartition| -> Result<(i64, i64)> {
            let lo = earliest.get(tp).copied().flatten();
            let hi = latest.get(tp).copied().flatten();
            lo.zip(hi)
                .with_context(|| format!("partition {}-{} does not exist", tp.0, tp.1))
        };
        let timestamp = match (&args.to_datetime, &args.by_duration) {
            (Some(text), _) => Some(parse_datetime(text)?),
            (None, Some(duration)) => Some(now_ms() - parse_duration_ms(duration)?),
            (None, None) => None,
        };
        let by_time = match timestamp {
            Some(timestamp) => Some(list_offsets(bootstrap, &scope, timestamp)?),
            None => None,
        };
        let mut new_offsets: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for tp in &scope {
            let (lo, hi) = bounds(tp)?;
            let offset = if args.to_earliest {
                lo
            } else if args.to_latest {
                hi
            } else if args.to_current {
                committed.get(tp).copied().unwrap_or(hi)
            } else if let Some(target) = requested_offset(args, &committed, tp)? {
                if target < lo {
                    eprintln!("New offset ({target}) is lower than earliest offset for topic partition {}-{}. Value will be set to {lo}", tp.0, tp.1);
                }
                if target > hi {
                    eprintln!("New offset ({target}) is higher than latest offset for topic partition {}-{}. Value will be set to {hi}", tp.0, tp.1);
                }
                target.clamp(lo, hi)
            } else {
                let found = by_time.as_ref().and_then(|m| m.get(tp).copied().flatten());
                found.unwrap_or_else(|| {
                    // Kafka's tool says so on standard output.
                    println!(
                        "\nWarn: Partition {} from topic {} is empty. Falling back to latest known offset.",
                        tp.1, tp.0
                    );
                    hi
                })
            };
            new_offsets.insert(tp.clone(), offset);
        }
        if args.execute {
            commit(&mut client, group, &new_offsets)?;
        }
        // kafka-consumer-groups.sh 4.4's table: the group and topic columns
        // as wide as their longest value and at least MIN_COLUMN.
        if new_offsets.is_empty() {
            continue;
        }
        let group_w = group.len().max(MIN_COLUMN);
        let topic_w = column_width(MIN_COLUMN, new_offsets.keys().map(|(t, _)| t.as_str()));
        println!();
        println!(
            "{:group_w$} {:topic_w$} {:10} NEW-OFFSET",
            "GROUP", "TOPIC", "PARTITION"
        );
        for ((topic, partition), offset) in &new_offsets {
            println!("{group:group_w$} {topic:topic_w$} {partition:<10} {offset}");
        }
    }
    Ok(())
}

fn commit(client: &mut Client, group: &str, offsets: &BTreeMap<TopicPartition, i64>) -> Result<()> {
    let refused = commit_offsets(client, group, Committer::ADMIN, offsets)?;
    if !refused.is_empty() {
        let failures: Vec<String> = refused
            .iter()
            .map(|((topic, partition), code)| format!("{topic}-{partition}: {}", error_text(*code)))
            .collect();
        bail!(
            "committing the new offsets of group '{group}' failed:\n{}",
            failures.join("\n")
        );
    }
    Ok(())
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The offset of the local time zone from UTC, in seconds, at `utc_secs`.
fn local_offset_secs(utc_secs: i64) -> Result<i64> {
    let t: libc::time_t = utc_secs;
    // SAFETY: localtime_r writes only into `tm`, which we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let result = unsafe { libc::localtime_r(&t, &mut tm) };
    if result.is_null() {
        bail!("cannot determine the local time zone");
    }
    Ok(tm.tm_gmtoff)
}

/// An ISO-8601 duration as Java's `Duration.parse` reads it
/// (`[-+]PnDTnHnMn.nS`, each part optional and signed, case-insensitive),
/// in milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<i64> {
    let bad = || anyhow::anyhow!("Text cannot be parsed to a Duration: {text}");
    let upper = text.to_ascii_uppercase();
    let (sign, rest) = match upper.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, upper.strip_prefix('+').unwrap_or(&upper)),
    };
    let rest = rest.strip_prefix('P').ok_or_else(bad)?;
    let (days, time) = match rest.split_once('T') {
        Some((days, time)) if !time.is_empty() => (days, Some(time)),
        Some(_) => return Err(bad()),
        None => (rest, None),
    };
    if days.is_empty() && time.is_none() {
        return Err(bad());
    }
    let number = |digits: &str| -> Result<f64> {
        let valid = !digits.is_empty()
            && digits
                .trim_start_matches(['-', '+'])
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == ',');
        if !valid {
            return Err(bad());
        }
        digits.replace(',', ".").parse::<f64>().map_err(|_| bad())
    };
    let mut ms = 0.0;
    if !days.is_empty() {
        ms += number(days.strip_suffix('D').ok_or_else(bad)?)? * 86_400_000.0;
    }
    let mut time = time.unwrap_or("");
    for (unit, scale) in [('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)] {
        if let Some((value, after)) = time.split_once(unit) {
            if unit != 'S' && (value.contains('.') || value.contains(',')) {
                return Err(bad());
            }
            ms += number(value)? * scale;
            time = after;
        }
    }
    if !time.is_empty() {
        return Err(bad());
    }
    Ok(sign * ms.round() as i64)
}

/// Parses kafka-consumer-groups.sh's `--to-datetime` format,
/// `YYYY-MM-DDTHH:mm:SS[.sss][Z|±HH:MM|±HHMM]`, to epoch milliseconds.
pub fn parse_datetime(text: &str) -> Result<i64> {
    let bad = || anyhow::anyhow!("--to-datetime '{text}': expected YYYY-MM-DDTHH:mm:SS.sss");
    let (date, rest) = text.split_once('T').ok_or_else(bad)?;
    let mut date_parts = date.split('-');
    let next_num = |parts: &mut std::str::Split<'_, char>| -> Result<i64> {
        parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)
    };
    let year = next_num(&mut date_parts)?;
    let month = next_num(&mut date_parts)?;
    let day = next_num(&mut date_parts)?;
    // Split off a zone suffix.
    let (clock, zone) = match rest.find(['Z', '+', '-']) {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (hms, millis) = match clock.split_once('.') {
        Some((hms, ms)) => (hms, ms),
        None => (clock, "0"),
    };
    let mut hms_parts = hms.split(':');
    let mut next_hms = || -> Result<i64> {
        hms_parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(bad)
    };
    let (hour, minute, second) = (next_hms()?, next_hms()?, next_hms()?);
    let millis: i64 = format!("{millis:0<3}")[..3].parse().map_err(|_| bad())?;
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let naive_secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    let offset_secs = match zone {
        None => {
            // Local time: find the offset in force at that moment.
            let guess = local_offset_secs(naive_secs)?;
            local_offset_secs(naive_secs - guess)?
        }
        Some("Z") => 0,
        Some(z) => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
            if digits.len() != 4 {
                return Err(bad());
            }
            let h: i64 = digits[..2].parse().map_err(|_| bad())?;
            let m: i64 = digits[2..].parse().map_err(|_| bad())?;
            sign * (h * 3600 + m * 60)
        }
    };
    Ok((naive_secs - offset_secs) * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_java() {
        for (text, ms) in [
            ("PT1H", 3_600_000),
            ("P1DT2H3M4.5S", 93_784_500),
            ("pt15m", 900_000),
            ("-PT10S", -10_000),
            ("P2D", 172_800_000),
            ("PT-1H30M", -1_800_000),
            ("PT0,25S", 250),
        ] {
            assert_eq!(parse_duration_ms(text).unwrap(), ms, "{text}");
        }
        for bad in ["", "P", "PT", "1H", "PT1.5H", "P1H", "PTXS", "PT1S2"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn datetimes_parse_like_kafka() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00.000Z").unwrap(), 0);
        assert_eq!(
            parse_datetime("2024-02-29T12:34:56.789Z").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(
            parse_datetime("2024-02-29T14:34:56.789+02:00").unwrap(),
            1_709_210_096_789
        );
        assert_eq!(
            parse_datetime("2024-02-29T10:34:56.789-0200").unwrap(),
            1_709_210_096_789
        );
        assert!(parse_datetime("2024-02-29T12:34:56.789").is_ok());
        for bad in [
            "2024-02-29",
            "2024-13-01T00:00:00.000Z",
            "x",
            "2024-01-01T25:00:00Z",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }
}
