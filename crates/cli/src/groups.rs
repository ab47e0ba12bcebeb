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
use tarn_protocol::messages::list_groups::{ListGroupsRequest, ListGroupsResponse};
use tarn_protocol::messages::list_offsets::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};

use tarn_cli::client::Client;

use crate::cluster::{list_offsets, metadata, TopicPartition};
use crate::coordinator::{
    commit_offsets, committed_offsets, error_text, find_coordinator, Committer,
};

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
        .args(["to_earliest", "to_latest", "to_offset", "to_datetime"])
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
    /// Commit the new offsets (without it, only show them).
    #[arg(long, conflicts_with = "dry_run")]
    execute: bool,
    /// Only show the new offsets.
    #[arg(long)]
    dry_run: bool,
}

pub fn run(args: GroupsArgs) -> Result<()> {
    if args.list {
        return list(&args.bootstrap_server);
    }
    let groups = target_groups(&args)?;
    if args.describe {
        describe(&args.bootstrap_server, &groups)
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

fn list_group_ids(bootstrap: &str) -> Result<Vec<String>> {
    let brokers = metadata(bootstrap, Some(Vec::new()), false)?.brokers;
    let mut ids = BTreeSet::new();
    for broker in brokers {
        let address = format!("{}:{}", broker.host, broker.port);
        let response: ListGroupsResponse =
            Client::connect(&address)?.call(16, 4, 3, &ListGroupsRequest::default())?;
        if response.error_code != error::NONE {
            bail!(
                "listing groups on broker {} failed: {}",
                broker.node_id,
                error_text(response.error_code)
            );
        }
        ids.extend(response.groups.into_iter().map(|g| g.group_id));
    }
    Ok(ids.into_iter().collect())
}

fn list(bootstrap: &str) -> Result<()> {
    for id in list_group_ids(bootstrap)? {
        println!("{id}");
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

/// One row of `--describe`.
struct Row {
    topic: String,
    partition: String,
    current: String,
    log_end: String,
    lag: String,
    consumer_id: String,
    host: String,
    client_id: String,
}

fn or_dash(value: Option<i64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn describe(bootstrap: &str, groups: &[String]) -> Result<()> {
    let mut missing = Vec::new();
    for group in groups {
        let mut client = find_coordinator(bootstrap, group, CLIENT_ID)?;
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
        let committed = committed_offsets(&mut client, group, None)?;
        // Who owns what, from the consumer assignments.
        let mut owners: BTreeMap<TopicPartition, usize> = BTreeMap::new();
        let mut idle_members = Vec::new();
        for (index, member) in described.members.iter().enumerate() {
            let assignment = if member.member_assignment.is_empty() {
                Assignment::default()
            } else {
                Assignment::decode_prefixed(&member.member_assignment).with_context(|| {
                    format!("read the assignment of member {}", member.member_id)
                })?
            };
            let mut owns_any = false;
            for tps in assignment.assigned_partitions {
                for p in tps.partitions {
                    owners.insert((tps.topic.clone(), p), index);
                    owns_any = true;
                }
            }
            if !owns_any {
                idle_members.push(index);
            }
        }
        let mut partitions: BTreeSet<TopicPartition> = owners.keys().cloned().collect();
        partitions.extend(committed.keys().cloned());
        let log_end = list_offsets(bootstrap, &partitions, LATEST_TIMESTAMP)?;

        match described.group_state.as_str() {
            "PreparingRebalance" | "CompletingRebalance" => {
                eprintln!("\nWarning: Consumer group '{group}' is rebalancing.")
            }
            _ if described.members.is_empty() => {
                eprintln!("\nConsumer group '{group}' has no active members.")
            }
            _ => {}
        }
        let mut rows = Vec::new();
        for tp in &partitions {
            let current = committed.get(tp).copied();
            let end = log_end.get(tp).copied().flatten();
            let lag = current.zip(end).map(|(c, e)| e - c);
            let owner = owners.get(tp).map(|i| &described.members[*i]);
            rows.push(Row {
                topic: tp.0.clone(),
                partition: tp.1.to_string(),
                current: or_dash(current),
                log_end: or_dash(end),
                lag: or_dash(lag),
                consumer_id: owner.map_or("-".into(), |m| m.member_id.clone()),
                host: owner.map_or("-".into(), |m| m.client_host.clone()),
                client_id: owner.map_or("-".into(), |m| m.client_id.clone()),
            });
        }
        for index in idle_members {
            let m = &described.members[index];
            rows.push(Row {
                topic: "-".into(),
                partition: "-".into(),
                current: "-".into(),
                log_end: "-".into(),
                lag: "-".into(),
                consumer_id: m.member_id.clone(),
                host: m.client_host.clone(),
                client_id: m.client_id.clone(),
            });
        }
        print_rows(group, &rows);
    }
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|g| format!("'{g}'")).collect();
        bail!("Consumer group {} does not exist.", names.join(", "));
    }
    Ok(())
}

/// kafka-consumer-groups.sh's narrowest group, topic, consumer id and host
/// columns.
const MIN_COLUMN: usize = 15;

/// The offsets table as kafka-consumer-groups.sh 4.4 prints it: the group,
/// topic, consumer id and host columns as wide as their longest value,
/// and at least [`MIN_COLUMN`].
fn print_rows(group: &str, rows: &[Row]) {
    let width = |f: &dyn Fn(&Row) -> usize| rows.iter().map(f).fold(MIN_COLUMN, usize::max);
    let group_w = group.len().max(MIN_COLUMN);
    let topic_w = width(&|r| r.topic.len());
    let consumer_w = width(&|r| r.consumer_id.len());
    let host_w = width(&|r| r.host.len());
    println!();
    println!(
        "{:group_w$} {:topic_w$} {:10} {:15} {:15} {:15} {:consumer_w$} {:host_w$} CLIENT-ID",
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST"
    );
    for r in rows {
        println!(
            "{:group_w$} {:topic_w$} {:10} {:15} {:15} {:15} {:consumer_w$} {:host_w$} {}",
            group,
            r.topic,
            r.partition,
            r.current,
            r.log_end,
            r.lag,
            r.consumer_id,
            r.host,
            r.client_id
        );
    }
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
        || args.to_datetime.is_some();
    if !spec_given {
        bail!("One of the reset specifications should be defined: --to-earliest, --to-latest, --to-offset, --to-datetime.");
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
        let by_time = match &args.to_datetime {
            Some(text) => Some(list_offsets(bootstrap, &scope, parse_datetime(text)?)?),
            None => None,
        };
        let mut new_offsets: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for tp in &scope {
            let (lo, hi) = bounds(tp)?;
            let offset = if args.to_earliest {
                lo
            } else if args.to_latest {
                hi
            } else if let Some(target) = args.to_offset {
                if target < lo {
                    eprintln!("New offset ({target}) is lower than earliest offset for topic partition {}-{}. Value will be set to {lo}", tp.0, tp.1);
                }
                if target > hi {
                    eprintln!("New offset ({target}) is higher than latest offset for topic partition {}-{}. Value will be set to {hi}", tp.0, tp.1);
                }
                target.clamp(lo, hi)
            } else {
                by_time
                    .as_ref()
                    .and_then(|m| m.get(tp).copied().flatten())
                    .unwrap_or(hi)
            };
            new_offsets.insert(tp.clone(), offset);
        }
        if args.execute {
            commit(&mut client, group, &new_offsets)?;
        }
        println!();
        println!(
            "{:30} {:30} {:10} {:15}",
            "GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"
        );
        for ((topic, partition), offset) in &new_offsets {
            println!("{group:30} {topic:30} {partition:<10} {offset:<15}");
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
