//! `tarn consume`: kafka-console-consumer.sh. Reads one topic (every
//! partition, or one with `--partition`) from the earliest or latest
//! offset or a given one, and prints each record as Kafka's
//! `DefaultMessageFormatter` does (`--property print.key=true`, ...). It
//! stops after `--max-messages`, after `--timeout-ms` without a record, or
//! on Ctrl-C, and then prints "Processed a total of N messages" on stderr
//! as Kafka's tool does.
//!
//! Without `--group` (or `group.id`) it reads the partitions directly:
//! Kafka's tool would join a throwaway group that commits nothing, which
//! is indistinguishable. With a group it is a member of that classic
//! consumer group ([`ConsumerCoordinator`]): it reads the partitions the
//! group assigns it, from the group's committed offsets (or
//! `auto.offset.reset` where there are none), commits its positions every
//! `auto.commit.interval.ms` and when it stops, and leaves the group on
//! the way out. Unlike Kafka's tool, which logs broker errors and exits 0,
//! an error it cannot recover from (an unknown topic, a corrupt batch)
//! exits non-zero.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use tarn_protocol::error;
use tarn_protocol::messages::fetch::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
use tarn_protocol::messages::list_offsets::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use tarn_protocol::record_batch::TimestampType;
use tarn_protocol::Uuid;
use tarn_server::error_names::error_name;

use crate::assignor::Assignor;
use crate::cluster::{list_offsets, topic_leaders, Connections, TopicLeaders, TopicPartition};
use crate::consumer_coordinator::{Assigned, ConsumerCoordinator, GroupRebalanceConfig};
use crate::dump_log::is_broken_pipe;
use crate::interrupt;
use crate::props::{load_properties, lookup, parse_key_value_args, Settings};
use crate::records::{for_each_record, FetchedRecord};

/// How long to wait for a partition to get a leader.
const LEADER_WAIT: Duration = Duration::from_secs(60);
/// Pause before asking for leaders again after a fetch found none.
const LEADER_RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// The most `fetch.max.bytes` may be set to: a response is held in memory.
const FETCH_MAX_BYTES_LIMIT: i32 = 128 << 20;

/// The consumer settings `tarn consume` honours.
const CONSUMER_KEYS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "auto.offset.reset",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.min.bytes",
    "fetch.max.wait.ms",
    "group.id",
    "group.instance.id",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
];

/// The consumer settings that only a group member uses.
const GROUP_KEYS: &[&str] = &[
    "group.instance.id",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
];

/// The formatter settings, Kafka's `DefaultMessageFormatter`'s.
const FORMATTER_KEYS: &[&str] = &[
    "print.timestamp",
    "print.key",
    "print.offset",
    "print.delivery",
    "print.epoch",
    "print.partition",
    "print.headers",
    "print.value",
    "key.separator",
    "line.separator",
    "headers.separator",
    "null.literal",
];

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// The server(s) to connect to, HOST1:PORT1,HOST2:PORT2.
    #[arg(long = "bootstrap-server", value_name = "HOST:PORT")]
    bootstrap_server: String,
    /// The topic to consume.
    #[arg(long)]
    topic: String,
    /// The partition to consume; from its end unless --offset says otherwise.
    #[arg(long)]
    partition: Option<i32>,
    /// With --partition: earliest, latest (the default) or an offset.
    #[arg(long, allow_negative_numbers = true, value_name = "OFFSET")]
    offset: Option<String>,
    /// Start with the earliest record rather than the latest.
    #[arg(long = "from-beginning")]
    from_beginning: bool,
    /// Stop after this many records; -1 for no limit.
    #[arg(long = "max-messages", allow_negative_numbers = true, value_name = "N")]
    max_messages: Option<i64>,
    /// Stop when no record arrived for this many milliseconds.
    #[arg(long = "timeout-ms", allow_negative_numbers = true, value_name = "MS")]
    timeout_ms: Option<i64>,
    /// A formatter setting, key=value: print.timestamp, print.key,
    /// print.offset, print.partition, print.headers, print.value,
    /// print.epoch, print.delivery, key.separator, line.separator,
    /// headers.separator, null.literal.
    #[arg(long, value_name = "PROP")]
    property: Vec<String>,
    /// A properties file of formatter settings (--property wins).
    #[arg(long = "formatter-config", value_name = "FILE")]
    formatter_config: Option<PathBuf>,
    /// A consumer setting, key=value.
    #[arg(long = "consumer-property", value_name = "PROP")]
    consumer_property: Vec<String>,
    /// A properties file of consumer settings (--consumer-property wins).
    #[arg(long = "consumer.config", value_name = "FILE")]
    consumer_config: Option<PathBuf>,
    /// The consumer group to join: read the partitions it assigns, from
    /// its committed offsets, and commit what was printed.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
}

/// Where a partition starts when there is no (valid) offset to read from:
/// Kafka's `auto.offset.reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OffsetReset {
    Earliest,
    Latest,
    None,
}

/// Where to start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StartAt {
    Reset,
    Earliest,
    Latest,
    Offset(i64),
}

/// The consumer's settings, by Kafka's config names.
#[derive(Debug, Clone)]
struct ConsumerConfig {
    bootstrap: String,
    client_id: String,
    auto_offset_reset: OffsetReset,
    fetch_max_bytes: i32,
    max_partition_fetch_bytes: i32,
    fetch_min_bytes: i32,
    fetch_max_wait: Duration,
    /// `group.id`: consume as a member of this group.
    group_id: Option<String>,
    group: GroupRebalanceConfig,
}

/// What the command line asks for, checked as Kafka's tool checks it.
#[derive(Debug)]
struct Plan {
    config: ConsumerConfig,
    start: StartAt,
    /// None: no limit.
    max_messages: Option<u64>,
    timeout: Option<Duration>,
}

pub fn run(args: ConsumeArgs) -> Result<()> {
    let plan = plan(&args)?;
    let formatter = MessageFormatter::configure(&formatter_settings(&args)?)?;
    let mut consumer = ConsoleConsumer::start(&args, &plan)?;
    interrupt::install()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let outcome = consumer.run(&plan, &formatter, &mut out);
    let flushed = out.flush().context("write to standard out");
    let outcome = outcome.and(flushed);
    let (outcome, printed_all) = match outcome {
        Err(e) if is_broken_pipe(&e) => {
            eprintln!("Unable to write to standard out, closing consumer.");
            (Ok(()), false)
        }
        other => (other, true),
    };
    // Records that may not have reached standard out are not committed:
    // the group delivers them again (at least once).
    let closed = consumer.close(printed_all);
    eprintln!("Processed a total of {} messages", consumer.processed);
    outcome?;
    closed?;
    if let Some(signal) = interrupt::received() {
        std::process::exit(128 + signal);
    }
    Ok(())
}

fn plan(args: &ConsumeArgs) -> Result<Plan> {
    if args.partition.is_some() {
        if args.from_beginning && args.offset.is_some() {
            bail!("Options from-beginning and offset cannot be specified together.");
        }
    } else if args.offset.is_some() {
        bail!("The partition is required when offset is specified.");
    }
    let mut settings = match &args.consumer_config {
        Some(path) => load_properties(path)?,
        None => Vec::new(),
    };
    let properties = parse_key_value_args(&args.consumer_property);
    let group = check_group(args, &settings, &properties)?;
    settings.extend(properties);
    if let Some(group) = group {
        settings.push(("group.id".into(), group));
    } else if let Some(key) = GROUP_KEYS.iter().find(|k| lookup(&settings, k).is_some()) {
        bail!("consumer property {key} takes effect only in a group: give --group (or group.id)");
    }
    if let Some(reset) = lookup(&settings, "auto.offset.reset") {
        if args.from_beginning && reset != "earliest" {
            bail!(
                "Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', \
                 please remove one option"
            );
        }
    } else {
        let reset = if args.from_beginning {
            "earliest"
        } else {
            "latest"
        };
        settings.push(("auto.offset.reset".into(), reset.into()));
    }
    settings.push(("bootstrap.servers".into(), args.bootstrap_server.clone()));
    let config = consumer_config(&settings)?;
    let start = match (args.partition, args.offset.as_deref()) {
        (Some(_), Some(offset)) => parse_offset(offset)?,
        (Some(_), None) if args.from_beginning => StartAt::Earliest,
        (Some(_), None) => StartAt::Latest,
        (None, _) => StartAt::Reset,
    };
    let max_messages = match args.max_messages {
        None | Some(-1) => None,
        Some(n) => Some(n.max(0) as u64),
    };
    let timeout = args
        .timeout_ms
        .filter(|ms| *ms >= 0)
        .map(|ms| Duration::from_millis(ms as u64));
    Ok(Plan {
        config,
        start,
        max_messages,
        timeout,
    })
}

/// The group id given by `--group`, the consumer config file
/// (`file_settings`) or `--consumer-property`, checked as Kafka's tool
/// checks it: all the same, and not with `--partition`.
fn check_group(
    args: &ConsumeArgs,
    file_settings: &[(String, String)],
    properties: &[(String, String)],
) -> Result<Option<String>> {
    let provided: BTreeSet<&str> = [
        args.group.as_deref(),
        lookup(file_settings, "group.id"),
        lookup(properties, "group.id"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if provided.len() > 1 {
        let names: Vec<String> = provided.iter().map(|g| format!("'{g}'")).collect();
        bail!(
            "The group ids provided in different places (directly using '--group', via \
             '--consumer-property', or via '--consumer.config') do not match. Detected group \
             ids: {}",
            names.join(", ")
        );
    }
    let Some(group) = provided.into_iter().next() else {
        return Ok(None);
    };
    if args.partition.is_some() {
        bail!("Options group and partition cannot be specified together.");
    }
    if group.is_empty() {
        bail!(
            "To use the group management or offset commit APIs, you must provide a valid \
             group.id in the consumer configuration."
        );
    }
    Ok(Some(group.to_owned()))
}

fn parse_offset(text: &str) -> Result<StartAt> {
    match text.to_ascii_lowercase().as_str() {
        "earliest" => Ok(StartAt::Earliest),
        "latest" => Ok(StartAt::Latest),
        _ => match text.parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(StartAt::Offset(offset)),
            _ => bail!(
                "The provided offset value '{text}' is incorrect. Valid values are 'earliest', \
                 'latest', or a non-negative long."
            ),
        },
    }
}

fn consumer_config(settings: &[(String, String)]) -> Result<ConsumerConfig> {
    let mut config = ConsumerConfig {
        bootstrap: String::new(),
        client_id: "console-consumer".into(),
        auto_offset_reset: OffsetReset::Latest,
        fetch_max_bytes: 50 << 20,
        max_partition_fetch_bytes: 1 << 20,
        fetch_min_bytes: 1,
        fetch_max_wait: Duration::from_millis(500),
        group_id: None,
        group: GroupRebalanceConfig::default(),
    };
    for (key, value) in settings {
        let bytes = || -> Result<i32> {
            match value.trim().parse::<i32>() {
                Ok(n) if (1..=FETCH_MAX_BYTES_LIMIT).contains(&n) => Ok(n),
                _ => bail!("{key}={value}: must be between 1 and {FETCH_MAX_BYTES_LIMIT}"),
            }
        };
        // Kafka's int settings in milliseconds, at least `min`.
        let millis = |min: u64| -> Result<Duration> {
            match value.trim().parse::<u64>() {
                Ok(ms) if (min..=i32::MAX as u64).contains(&ms) => Ok(Duration::from_millis(ms)),
                _ => bail!(
                    "{key}={value}: must be between {min} and {} milliseconds",
                    i32::MAX
                ),
            }
        };
        match key.as_str() {
            "bootstrap.servers" => config.bootstrap = value.clone(),
            "client.id" => config.client_id = value.clone(),
            "auto.offset.reset" => {
                config.auto_offset_reset = match value.trim() {
                    "earliest" => OffsetReset::Earliest,
                    "latest" => OffsetReset::Latest,
                    "none" => OffsetReset::None,
                    _ => bail!("auto.offset.reset={value}: use earliest, latest or none"),
                }
            }
            "fetch.max.bytes" => config.fetch_max_bytes = bytes()?,
            "max.partition.fetch.bytes" => config.max_partition_fetch_bytes = bytes()?,
            "fetch.min.bytes" => config.fetch_min_bytes = bytes()?,
            "fetch.max.wait.ms" => match value.trim().parse::<u64>() {
                Ok(ms) if ms <= i32::MAX as u64 => {
                    config.fetch_max_wait = Duration::from_millis(ms)
                }
                _ => bail!("fetch.max.wait.ms={value}: not a number of milliseconds"),
            },
            "group.id" => config.group_id = Some(value.clone()),
            "group.instance.id" => config.group.group_instance_id = Some(value.clone()),
            "enable.auto.commit" => {
                config.group.enable_auto_commit = match value.trim() {
                    v if v.eq_ignore_ascii_case("true") => true,
                    v if v.eq_ignore_ascii_case("false") => false,
                    _ => bail!("enable.auto.commit={value}: use true or false"),
                }
            }
            "auto.commit.interval.ms" => config.group.auto_commit_interval = millis(0)?,
            "session.timeout.ms" => config.group.session_timeout = millis(1)?,
            "heartbeat.interval.ms" => config.group.heartbeat_interval = millis(1)?,
            "max.poll.interval.ms" => config.group.rebalance_timeout = millis(1)?,
            "partition.assignment.strategy" => {
                config.group.assignors = value
                    .split(',')
                    .filter(|name| !name.trim().is_empty())
                    .map(Assignor::parse)
                    .collect::<Result<_>>()?
            }
            _ => bail!(
                "consumer property {key} is not supported by tarn consume (supported: {})",
                CONSUMER_KEYS.join(", ")
            ),
        }
    }
    if config.group_id.is_some() {
        config.group.validate()?;
    }
    Ok(config)
}

/// The formatter settings: the file, then `--property`.
fn formatter_settings(args: &ConsumeArgs) -> Result<Settings> {
    let mut settings = match &args.formatter_config {
        Some(path) => load_properties(path)?,
        None => Vec::new(),
    };
    settings.extend(parse_key_value_args(&args.property));
    Ok(settings)
}

/// Kafka's `DefaultMessageFormatter`: the chosen fields in a fixed order,
/// separated by `key.separator`, each record ended by `line.separator`.
#[derive(Debug, Clone)]
struct MessageFormatter {
    print_timestamp: bool,
    print_partition: bool,
    print_offset: bool,
    print_delivery: bool,
    print_epoch: bool,
    print_headers: bool,
    print_key: bool,
    print_value: bool,
    key_separator: Vec<u8>,
    line_separator: Vec<u8>,
    headers_separator: Vec<u8>,
    null_literal: Vec<u8>,
}

impl MessageFormatter {
    fn configure(settings: &[(String, String)]) -> Result<MessageFormatter> {
        let mut f = MessageFormatter {
            print_timestamp: false,
            print_partition: false,
            print_offset: false,
            print_delivery: false,
            print_epoch: false,
            print_headers: false,
            print_key: false,
            print_value: true,
            key_separator: b"\t".to_vec(),
            line_separator: b"\n".to_vec(),
            headers_separator: b",".to_vec(),
            null_literal: b"null".to_vec(),
        };
        for (key, value) in settings {
            let flag = value.trim().eq_ignore_ascii_case("true");
            let bytes = value.as_bytes().to_vec();
            match key.as_str() {
                "print.timestamp" => f.print_timestamp = flag,
                "print.partition" => f.print_partition = flag,
                "print.offset" => f.print_offset = flag,
                "print.delivery" => f.print_delivery = flag,
                "print.epoch" => f.print_epoch = flag,
                "print.headers" => f.print_headers = flag,
                "print.key" => f.print_key = flag,
                "print.value" => f.print_value = flag,
                "key.separator" => f.key_separator = bytes,
                "line.separator" => f.line_separator = bytes,
                "headers.separator" => f.headers_separator = bytes,
                "null.literal" => f.null_literal = bytes,
                k if k.ends_with("deserializer") || k.contains(".deserializer.") => bail!(
                    "property {k}: tarn consume prints keys, values and headers as raw bytes; \
                     it has no deserializers"
                ),
                _ => bail!(
                    "property {key} is not a formatter setting (supported: {})",
                    FORMATTER_KEYS.join(", ")
                ),
            }
        }
        Ok(f)
    }

    /// Writes `record` of `partition` as Kafka's formatter would.
    fn write_to(
        &self,
        partition: i32,
        record: &FetchedRecord,
        out: &mut impl Write,
    ) -> io::Result<()> {
        let fields = [
            self.print_timestamp,
            self.print_partition,
            self.print_offset,
            self.print_delivery,
            self.print_epoch,
            self.print_headers,
            self.print_key,
            self.print_value,
        ];
        for (i, _) in fields.iter().enumerate().filter(|(_, on)| **on) {
            match i {
                0 => match record.timestamp_type {
                    TimestampType::CreateTime => write!(out, "CreateTime:{}", record.timestamp)?,
                    TimestampType::LogAppendTime => {
                        write!(out, "LogAppendTime:{}", record.timestamp)?
                    }
                },
                1 => write!(out, "Partition:{partition}")?,
                2 => write!(out, "Offset:{}", record.offset)?,
                // Only share groups count deliveries.
                3 => out.write_all(b"Delivery:NOT_PRESENT")?,
                4 if record.leader_epoch < 0 => out.write_all(b"Epoch:NOT_PRESENT")?,
                4 => write!(out, "Epoch:{}", record.leader_epoch)?,
                5 => self.write_headers(record, out)?,
                6 => out.write_all(record.key.unwrap_or(&self.null_literal))?,
                _ => out.write_all(record.value.unwrap_or(&self.null_literal))?,
            }
            let more = fields[i + 1..].iter().any(|on| *on);
            out.write_all(if more {
                &self.key_separator
            } else {
                &self.line_separator
            })?;
        }
        Ok(())
    }

    fn write_headers(&self, record: &FetchedRecord, out: &mut impl Write) -> io::Result<()> {
        if record.headers.is_empty() {
            return out.write_all(b"NO_HEADERS");
        }
        for (i, (key, value)) in record.headers.iter().enumerate() {
            if i > 0 {
                out.write_all(&self.headers_separator)?;
            }
            out.write_all(key)?;
            out.write_all(b":")?;
            out.write_all(value.unwrap_or(&self.null_literal))?;
        }
        Ok(())
    }
}

/// One partition being read.
#[derive(Debug)]
struct Position {
    partition: i32,
    offset: i64,
}

struct ConsoleConsumer {
    topic: String,
    config: ConsumerConfig,
    leaders: TopicLeaders,
    /// The partitions being read: all or one without a group, the group's
    /// assignment with one.
    positions: Vec<Position>,
    connections: Connections,
    /// The group membership, when consuming in a group.
    coordinator: Option<ConsumerCoordinator>,
    processed: u64,
}

impl ConsoleConsumer {
    /// Finds the partitions' leaders and starting offsets.
    fn start(args: &ConsumeArgs, plan: &Plan) -> Result<ConsoleConsumer> {
        let config = plan.config.clone();
        let leaders = topic_leaders(&config.bootstrap, &args.topic, true, LEADER_WAIT)?;
        let count = leaders.leaders.len() as i32;
        let coordinator = config.group_id.as_deref().map(|group| {
            ConsumerCoordinator::new(
                &config.bootstrap,
                &config.client_id,
                group,
                config.group.clone(),
                vec![args.topic.clone()],
            )
        });
        let partitions: Vec<i32> = match args.partition {
            // The group assigns the partitions, at the first poll.
            _ if coordinator.is_some() => Vec::new(),
            Some(p) if (0..count).contains(&p) => vec![p],
            Some(p) => bail!(
                "topic '{}' has no partition {p} (it has {count}): UNKNOWN_TOPIC_OR_PARTITION",
                args.topic
            ),
            None => (0..count).collect(),
        };
        let mut consumer = ConsoleConsumer {
            topic: args.topic.clone(),
            config,
            leaders,
            positions: partitions
                .into_iter()
                .map(|partition| Position {
                    partition,
                    offset: 0,
                })
                .collect(),
            connections: Connections::new(&plan.config.client_id),
            coordinator,
            processed: 0,
        };
        let all: Vec<i32> = consumer.positions.iter().map(|p| p.partition).collect();
        if all.is_empty() {
            return Ok(consumer);
        }
        match plan.start {
            StartAt::Offset(offset) => consumer.positions[0].offset = offset,
            StartAt::Earliest => consumer.seek(&all, EARLIEST_TIMESTAMP)?,
            StartAt::Latest => consumer.seek(&all, LATEST_TIMESTAMP)?,
            StartAt::Reset => consumer.reset(&all)?,
        }
        Ok(consumer)
    }

    /// Each partition being read and the offset to read next.
    fn consumed(&self) -> BTreeMap<TopicPartition, i64> {
        self.positions
            .iter()
            .map(|p| ((self.topic.clone(), p.partition), p.offset))
            .collect()
    }

    /// Heartbeats and commits when due; after a rebalance, reads the newly
    /// assigned partitions from the group's committed offsets, or as
    /// `auto.offset.reset` says where there are none.
    fn poll_group(&mut self) -> Result<()> {
        let consumed = self.consumed();
        let Some(coordinator) = self.coordinator.as_mut() else {
            return Ok(());
        };
        let Some(Assigned {
            partitions,
            committed,
        }) = coordinator.poll(&consumed)?
        else {
            return Ok(());
        };
        let mut unknown = Vec::new();
        self.positions.clear();
        for (topic, partition) in partitions {
            let offset = committed.get(&(topic, partition)).copied();
            unknown.extend(offset.is_none().then_some(partition));
            self.positions.push(Position {
                partition,
                offset: offset.unwrap_or(-1),
            });
        }
        let known = self.leaders.partition_count() as i32;
        if self.positions.iter().any(|p| p.partition >= known) {
            // The topic grew since its leaders were looked up.
            self.leaders = topic_leaders(&self.config.bootstrap, &self.topic, false, LEADER_WAIT)?;
            self.connections.clear();
        }
        if !unknown.is_empty() {
            self.reset(&unknown)?;
        }
        Ok(())
    }

    /// Kafka's `close()`: a group member commits its positions (only when
    /// `commit`) and leaves the group.
    fn close(&mut self, commit: bool) -> Result<()> {
        let consumed = self.consumed();
        match self.coordinator.as_mut() {
            Some(coordinator) => coordinator.close(commit.then_some(&consumed)),
            None => Ok(()),
        }
    }

    /// Moves `partitions` to the offset ListOffsets gives for `timestamp`.
    fn seek(&mut self, partitions: &[i32], timestamp: i64) -> Result<()> {
        let wanted: BTreeSet<_> = partitions
            .iter()
            .map(|p| (self.topic.clone(), *p))
            .collect();
        let offsets = list_offsets(&self.config.bootstrap, &wanted, timestamp)?;
        for position in self
            .positions
            .iter_mut()
            .filter(|p| partitions.contains(&p.partition))
        {
            position.offset = offsets
                .get(&(self.topic.clone(), position.partition))
                .copied()
                .flatten()
                .with_context(|| {
                    format!(
                        "no offset for partition {}-{}",
                        self.topic, position.partition
                    )
                })?;
        }
        Ok(())
    }

    /// Moves `partitions` as `auto.offset.reset` says.
    fn reset(&mut self, partitions: &[i32]) -> Result<()> {
        match self.config.auto_offset_reset {
            OffsetReset::Earliest => self.seek(partitions, EARLIEST_TIMESTAMP),
            OffsetReset::Latest => self.seek(partitions, LATEST_TIMESTAMP),
            OffsetReset::None => {
                let names: Vec<String> = partitions
                    .iter()
                    .map(|p| format!("{}-{p}", self.topic))
                    .collect();
                bail!(
                    "Undefined offset with no reset policy for partitions: [{}]",
                    names.join(", ")
                )
            }
        }
    }

    /// Fetches and prints until the plan says stop.
    fn run(
        &mut self,
        plan: &Plan,
        formatter: &MessageFormatter,
        out: &mut impl Write,
    ) -> Result<()> {
        let mut last_record = Instant::now();
        loop {
            if plan.max_messages.is_some_and(|max| self.processed >= max)
                || interrupt::received().is_some()
            {
                return Ok(());
            }
            self.poll_group()?;
            // Kafka polls at least once, even with --timeout-ms 0. A long
            // poll ends before the group's next heartbeat is due.
            let mut max_wait = match plan.timeout {
                Some(timeout) => timeout.saturating_sub(last_record.elapsed()),
                None => self.config.fetch_max_wait,
            }
            .min(self.config.fetch_max_wait);
            if let Some(coordinator) = &self.coordinator {
                max_wait = max_wait.min(coordinator.time_to_next_duty());
            }
            let before = self.processed;
            if self.positions.is_empty() {
                // The group gave this member nothing to read (yet).
                thread::sleep(max_wait);
            } else {
                self.fetch_once(max_wait, plan.max_messages, formatter, out)?;
                out.flush().context("write to standard out")?;
            }
            if self.processed > before {
                last_record = Instant::now();
            } else if plan.timeout.is_some_and(|t| last_record.elapsed() >= t) {
                return Ok(());
            }
        }
    }

    /// One fetch from each leader, printing what comes back.
    fn fetch_once(
        &mut self,
        max_wait: Duration,
        max_messages: Option<u64>,
        formatter: &MessageFormatter,
        out: &mut impl Write,
    ) -> Result<()> {
        let mut by_leader: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (i, position) in self.positions.iter().enumerate() {
            let leader = self.leaders.leader(position.partition)?;
            by_leader.entry(leader).or_default().push(i);
        }
        for (leader, indexes) in by_leader {
            let request = FetchRequest {
                max_wait_ms: max_wait.as_millis() as i32,
                min_bytes: self.config.fetch_min_bytes,
                max_bytes: self.config.fetch_max_bytes,
                isolation_level: 0,
                topics: vec![FetchTopic {
                    topic: self.topic.clone(),
                    topic_id: Uuid::ZERO,
                    partitions: indexes
                        .iter()
                        .map(|&i| FetchPartition {
                            partition: self.positions[i].partition,
                            fetch_offset: self.positions[i].offset,
                            partition_max_bytes: self.config.max_partition_fetch_bytes,
                            ..Default::default()
                        })
                        .collect(),
                }],
                ..Default::default()
            };
            let response: FetchResponse = self
                .connections
                .get(&self.leaders, leader)?
                .call(1, 12, 12, &request)?;
            if response.error_code != error::NONE {
                bail!(
                    "fetch from broker {leader}: {} ({})",
                    error_name(response.error_code),
                    response.error_code
                );
            }
            let topic = self.topic.clone();
            let answers = response
                .responses
                .iter()
                .filter(|t| t.topic == topic)
                .flat_map(|t| t.partitions.iter());
            for answer in answers {
                let Some(position) = self
                    .positions
                    .iter_mut()
                    .find(|p| p.partition == answer.partition_index)
                else {
                    continue;
                };
                match answer.error_code {
                    error::NONE => {}
                    error::OFFSET_OUT_OF_RANGE => {
                        let (partition, offset) = (position.partition, position.offset);
                        self.reset(&[partition])?;
                        eprintln!(
                            "Offset {offset} is out of range for partition {}-{partition}; \
                             reset to offset {} (auto.offset.reset)",
                            self.topic,
                            self.position(partition)
                        );
                        continue;
                    }
                    error::NOT_LEADER_OR_FOLLOWER
                    | error::LEADER_NOT_AVAILABLE
                    | error::FENCED_LEADER_EPOCH
                    | error::UNKNOWN_LEADER_EPOCH
                    | error::KAFKA_STORAGE_ERROR => {
                        // The partition moved or its leader is not ready:
                        // ask again who leads it.
                        thread::sleep(LEADER_RETRY_BACKOFF);
                        self.leaders =
                            topic_leaders(&self.config.bootstrap, &self.topic, false, LEADER_WAIT)?;
                        self.connections.clear();
                        return Ok(());
                    }
                    code => bail!(
                        "fetch {}-{}: {} ({code})",
                        self.topic,
                        answer.partition_index,
                        error_name(code)
                    ),
                }
                let records = answer.records.as_deref().unwrap_or_default();
                let partition = position.partition;
                let processed = &mut self.processed;
                position.offset = for_each_record(records, position.offset, |record| {
                    formatter.write_to(partition, record, out)?;
                    *processed += 1;
                    Ok(if max_messages.is_some_and(|max| *processed >= max) {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    })
                })?;
                if max_messages.is_some_and(|max| self.processed >= max) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn position(&self, partition: i32) -> i64 {
        self.positions
            .iter()
            .find(|p| p.partition == partition)
            .map_or(-1, |p| p.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConsumeArgs,
    }

    fn args(extra: &[&str]) -> ConsumeArgs {
        let mut argv = vec!["consume", "--bootstrap-server", "h:9092", "--topic", "t"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).expect("parse").args
    }

    fn plan_error(extra: &[&str]) -> String {
        plan(&args(extra)).unwrap_err().to_string()
    }

    fn formatter(props: &[&str]) -> MessageFormatter {
        let props: Vec<String> = props.iter().map(|p| p.to_string()).collect();
        MessageFormatter::configure(&parse_key_value_args(&props)).expect("configure")
    }

    fn record() -> FetchedRecord<'static> {
        FetchedRecord {
            offset: 5,
            timestamp_type: TimestampType::CreateTime,
            timestamp: 1_700_000_000_000,
            leader_epoch: 3,
            key: Some(b"key"),
            value: Some(b"value"),
            headers: vec![(b"h1", Some(b"v1")), (b"h2", None)],
        }
    }

    fn format(f: &MessageFormatter, record: &FetchedRecord) -> String {
        let mut out = Vec::new();
        f.write_to(2, record, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_default_prints_the_value_and_a_newline() {
        assert_eq!(format(&formatter(&[]), &record()), "value\n");
    }

    #[test]
    fn fields_come_in_kafkas_order_with_kafkas_labels() {
        let all = formatter(&[
            "print.value=true",
            "print.key=true",
            "print.headers=true",
            "print.epoch=true",
            "print.delivery=true",
            "print.offset=true",
            "print.partition=true",
            "print.timestamp=true",
        ]);
        assert_eq!(
            format(&all, &record()),
            "CreateTime:1700000000000\tPartition:2\tOffset:5\tDelivery:NOT_PRESENT\tEpoch:3\t\
             h1:v1,h2:null\tkey\tvalue\n"
        );
        let usual = formatter(&[
            "print.key=true",
            "print.timestamp=true",
            "print.partition=true",
            "print.offset=true",
        ]);
        let mut r = record();
        r.timestamp_type = TimestampType::LogAppendTime;
        assert_eq!(
            format(&usual, &r),
            "LogAppendTime:1700000000000\tPartition:2\tOffset:5\tkey\tvalue\n"
        );
    }

    #[test]
    fn nulls_separators_and_the_last_field() {
        let f = formatter(&[
            "print.key=true",
            "print.headers=true",
            "key.separator= | ",
            "line.separator=;",
            "headers.separator=&",
            "null.literal=<nil>",
        ]);
        let mut r = record();
        r.key = None;
        r.value = None;
        r.headers.clear();
        assert_eq!(format(&f, &r), "NO_HEADERS | <nil> | <nil>;");
        let r = record();
        assert_eq!(format(&f, &r), "h1:v1&h2:<nil> | key | value;");

        // Without the value, the last printed field ends the line.
        let key_only = formatter(&["print.key=true", "print.value=false"]);
        assert_eq!(format(&key_only, &record()), "key\n");
        let nothing = formatter(&["print.value=false"]);
        assert_eq!(format(&nothing, &record()), "");
        let mut r = record();
        r.leader_epoch = -1;
        let epoch = formatter(&["print.epoch=true", "print.value=FALSE"]);
        assert_eq!(format(&epoch, &r), "Epoch:NOT_PRESENT\n");
    }

    #[test]
    fn unknown_formatter_settings_are_refused() {
        let settings = parse_key_value_args(&["print.vaule=true".to_string()]);
        assert!(MessageFormatter::configure(&settings).is_err());
        let settings = parse_key_value_args(&[
            "key.deserializer=org.apache.kafka.common.serialization.LongDeserializer".to_string(),
        ]);
        assert!(MessageFormatter::configure(&settings).is_err());
    }

    #[test]
    fn options_are_checked_as_kafka_checks_them() {
        assert_eq!(
            plan_error(&["--offset", "3"]),
            "The partition is required when offset is specified."
        );
        assert_eq!(
            plan_error(&["--partition", "0", "--offset", "3", "--from-beginning"]),
            "Options from-beginning and offset cannot be specified together."
        );
        assert_eq!(
            plan_error(&["--partition", "0", "--offset", "-3"]),
            "The provided offset value '-3' is incorrect. Valid values are 'earliest', \
             'latest', or a non-negative long."
        );
        assert_eq!(
            plan_error(&[
                "--from-beginning",
                "--consumer-property",
                "auto.offset.reset=latest"
            ]),
            "Can't simultaneously specify --from-beginning and 'auto.offset.reset=latest', \
             please remove one option"
        );
        assert!(
            plan_error(&["--consumer-property", "isolation.level=read_committed"])
                .contains("isolation.level is not supported")
        );
    }

    #[test]
    fn group_options_are_checked_as_kafka_checks_them() {
        assert_eq!(
            plan_error(&["--group", "g", "--partition", "0"]),
            "Options group and partition cannot be specified together."
        );
        assert_eq!(
            plan_error(&["--group", "g", "--consumer-property", "group.id=h"]),
            "The group ids provided in different places (directly using '--group', via \
             '--consumer-property', or via '--consumer.config') do not match. Detected group \
             ids: 'g', 'h'"
        );
        assert!(plan_error(&["--group", ""]).contains("you must provide a valid group.id"));
        assert_eq!(
            plan_error(&["--consumer-property", "session.timeout.ms=10000"]),
            "consumer property session.timeout.ms takes effect only in a group: give --group \
             (or group.id)"
        );
        assert_eq!(
            plan_error(&[
                "--group",
                "g",
                "--consumer-property",
                "heartbeat.interval.ms=45000"
            ]),
            "Heartbeat must be set lower than the session timeout"
        );
        assert!(plan_error(&[
            "--group",
            "g",
            "--consumer-property",
            "partition.assignment.strategy=range,cooperative-sticky"
        ])
        .contains("cooperative-sticky"));
        assert!(plan_error(&[
            "--group",
            "g",
            "--consumer-property",
            "enable.auto.commit=yes"
        ])
        .contains("use true or false"));
        assert!(plan_error(&[
            "--group",
            "g",
            "--consumer-property",
            "session.timeout.ms=-1"
        ])
        .contains("must be between 1 and"));
    }

    #[test]
    fn a_group_member_gets_kafkas_defaults_and_the_settings_given() {
        let p = plan(&args(&["--group", "g"])).unwrap();
        assert_eq!(p.config.group_id.as_deref(), Some("g"));
        assert_eq!(p.config.group, GroupRebalanceConfig::default());
        assert_eq!(p.config.auto_offset_reset, OffsetReset::Latest);
        assert_eq!(p.start, StartAt::Reset);
        // --from-beginning applies where the group has no offset.
        let p = plan(&args(&["--group", "g", "--from-beginning"])).unwrap();
        assert_eq!(p.config.auto_offset_reset, OffsetReset::Earliest);

        let p = plan(&args(&[
            "--consumer-property",
            "group.id=g",
            "--consumer-property",
            "enable.auto.commit=false",
            "--consumer-property",
            "auto.commit.interval.ms=250",
            "--consumer-property",
            "session.timeout.ms=10000",
            "--consumer-property",
            "heartbeat.interval.ms=1000",
            "--consumer-property",
            "max.poll.interval.ms=20000",
            "--consumer-property",
            "group.instance.id=console-1",
            "--consumer-property",
            "partition.assignment.strategy=org.apache.kafka.clients.consumer.RoundRobinAssignor",
        ]))
        .unwrap();
        assert_eq!(p.config.group_id.as_deref(), Some("g"));
        assert_eq!(
            p.config.group,
            GroupRebalanceConfig {
                group_instance_id: Some("console-1".into()),
                session_timeout: Duration::from_secs(10),
                heartbeat_interval: Duration::from_secs(1),
                rebalance_timeout: Duration::from_secs(20),
                assignors: vec![Assignor::RoundRobin],
                enable_auto_commit: false,
                auto_commit_interval: Duration::from_millis(250),
            }
        );

        // The same group id in the config file and on the command line.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("consumer.properties");
        std::fs::write(&file, "group.id=g\nsession.timeout.ms=12000\n").unwrap();
        let path = file.to_str().unwrap();
        let p = plan(&args(&["--group", "g", "--consumer.config", path])).unwrap();
        assert_eq!(p.config.group_id.as_deref(), Some("g"));
        assert_eq!(p.config.group.session_timeout, Duration::from_secs(12));
        assert!(plan_error(&["--group", "h", "--consumer.config", path])
            .contains("Detected group ids: 'g', 'h'"));
    }

    #[test]
    fn where_reading_starts_and_stops() {
        let p = plan(&args(&[])).unwrap();
        assert_eq!(p.start, StartAt::Reset);
        assert_eq!(p.config.auto_offset_reset, OffsetReset::Latest);
        assert_eq!((p.max_messages, p.timeout), (None, None));
        assert_eq!(p.config.client_id, "console-consumer");

        let p = plan(&args(&[
            "--from-beginning",
            "--max-messages",
            "-1",
            "--timeout-ms",
            "-5",
        ]))
        .unwrap();
        assert_eq!(p.config.auto_offset_reset, OffsetReset::Earliest);
        assert_eq!((p.max_messages, p.timeout), (None, None));

        let p = plan(&args(&[
            "--partition",
            "1",
            "--max-messages",
            "10",
            "--timeout-ms",
            "250",
        ]))
        .unwrap();
        assert_eq!(p.start, StartAt::Latest);
        assert_eq!(
            (p.max_messages, p.timeout),
            (Some(10), Some(Duration::from_millis(250)))
        );
        let p = plan(&args(&["--partition", "1", "--from-beginning"])).unwrap();
        assert_eq!(p.start, StartAt::Earliest);
        let p = plan(&args(&["--partition", "1", "--offset", "EARLIEST"])).unwrap();
        assert_eq!(p.start, StartAt::Earliest);
        let p = plan(&args(&["--partition", "1", "--offset", "42"])).unwrap();
        assert_eq!(p.start, StartAt::Offset(42));
        let p = plan(&args(&["--consumer-property", "auto.offset.reset=none"])).unwrap();
        assert_eq!(p.config.auto_offset_reset, OffsetReset::None);
    }
}
