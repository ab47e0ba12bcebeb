//! `tarn perf produce` and `tarn perf consume`: Kafka's
//! kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh, with their
//! flags and their output lines, on a small pure-Rust client over Tarn's
//! protocol crate (no librdkafka), so published Kafka commands translate
//! one to one.
//!
//! The producer batches records per partition (sticky partitioning, as
//! Kafka's default partitioner does for unkeyed records), sends a batch when
//! it reaches `batch.size` or has waited `linger.ms`, keeps up to
//! `max.in.flight.requests.per.connection` requests in flight per broker
//! (one thread reads the responses, in order) and compresses batches with
//! `compression.type`. Latency is measured per record from the moment it
//! was handed to the producer to the moment its batch was acknowledged,
//! sampled and reported as Kafka's tool does. The consumer assigns every
//! partition (no group), fetches from the earliest (or latest) offset and
//! counts records and key+value bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::TcpStream;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};

use tarn_protocol::error;
use tarn_protocol::header::decode_response_header;
use tarn_protocol::messages::fetch::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
use tarn_protocol::messages::list_offsets::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use tarn_protocol::messages::produce::{
    PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData,
};
use tarn_protocol::record_batch::BatchWriter;
use tarn_protocol::{Decode, Uuid, Version};

use tarn_cli::client::{encode_request, read_frame, Client};

use crate::cluster::{list_offsets, topic_leaders, TopicLeaders};
use crate::props::{load_properties, ProducerConfig};
use crate::records::{for_each_record, now_ms};

const PRODUCE_VERSION: Version = Version {
    version: 9,
    flexible: true,
};
/// Kafka's tool prints a progress line every 5 seconds.
const REPORTING_INTERVAL: Duration = Duration::from_secs(5);
/// Kafka's tool keeps at most this many latency samples.
const MAX_LATENCY_SAMPLES: u64 = 500_000;
/// How long to wait for a new topic's leaders.
const LEADER_WAIT: Duration = Duration::from_secs(5);
/// The producer settings `tarn perf produce` honours.
const PRODUCER_KEYS: &[&str] = &[
    "bootstrap.servers",
    "acks",
    "batch.size",
    "linger.ms",
    "compression.type",
    "max.in.flight.requests.per.connection",
    "client.id",
    "request.timeout.ms",
];
/// Kafka's `fetch.max.bytes` default.
const FETCH_MAX_BYTES: i32 = 50 << 20;
/// Kafka's `fetch.max.wait.ms` default.
const FETCH_MAX_WAIT_MS: i32 = 500;
/// Most distinct payloads read from `--payload-file`.
const MAX_PAYLOADS: usize = 1 << 20;

#[derive(Subcommand)]
pub enum PerfCommand {
    /// Produce records as fast as asked, like kafka-producer-perf-test.sh.
    Produce(ProduceArgs),
    /// Consume records and report the rate, like kafka-consumer-perf-test.sh.
    Consume(ConsumeArgs),
}

#[derive(Args)]
pub struct ProduceArgs {
    /// Topic to produce to.
    #[arg(long)]
    topic: String,
    /// Number of records to produce.
    #[arg(long = "num-records")]
    num_records: u64,
    /// Size of each record in bytes (random A-Z, the same for every record).
    #[arg(long = "record-size", conflicts_with = "payload_file")]
    record_size: Option<usize>,
    /// File of payloads separated by --payload-delimiter; each record takes
    /// one at random.
    #[arg(long = "payload-file")]
    payload_file: Option<PathBuf>,
    /// Delimiter between payloads in --payload-file.
    #[arg(long = "payload-delimiter", default_value = "\\n")]
    payload_delimiter: String,
    /// Maximum records per second; -1 for no limit.
    #[arg(long, allow_negative_numbers = true)]
    throughput: f64,
    /// Producer settings as key=value: bootstrap.servers, acks, batch.size,
    /// linger.ms, compression.type, max.in.flight.requests.per.connection,
    /// client.id, request.timeout.ms.
    #[arg(long = "producer-props", num_args = 1.., value_name = "KEY=VALUE")]
    producer_props: Vec<String>,
    /// A properties file of producer settings (same keys).
    #[arg(long = "producer.config")]
    producer_config: Option<PathBuf>,
    /// Broker to bootstrap from, when bootstrap.servers is not among the props.
    #[arg(long = "bootstrap-server")]
    bootstrap_server: Option<String>,
}

#[derive(Args)]
pub struct ConsumeArgs {
    /// Broker to bootstrap from.
    #[arg(long = "bootstrap-server")]
    bootstrap_server: String,
    /// Topic to consume from.
    #[arg(long)]
    topic: String,
    /// Number of messages to consume.
    #[arg(long)]
    messages: u64,
    /// Bytes fetched per partition per request.
    #[arg(long = "fetch-size", default_value_t = 1024 * 1024)]
    fetch_size: i32,
    /// Give up after this many milliseconds without a message.
    #[arg(long, default_value_t = 10_000)]
    timeout: u64,
    /// Start from the latest offset instead of the earliest.
    #[arg(long = "from-latest")]
    from_latest: bool,
    /// Print a stats line every --reporting-interval instead of one at the end.
    #[arg(long = "show-detailed-stats")]
    show_detailed_stats: bool,
    /// Milliseconds between detailed stats lines.
    #[arg(long = "reporting-interval", default_value_t = 5000)]
    reporting_interval: u64,
    /// Skip the header line.
    #[arg(long = "hide-header")]
    hide_header: bool,
}

pub fn run(command: PerfCommand) -> Result<()> {
    match command {
        PerfCommand::Produce(args) => produce(args),
        PerfCommand::Consume(args) => consume(args),
    }
}

// ------------------------------------------------------------ producer

fn producer_config(
    settings: &[(String, String)],
    bootstrap: Option<&str>,
) -> Result<ProducerConfig> {
    let mut config = ProducerConfig {
        bootstrap: bootstrap.unwrap_or_default().to_owned(),
        client_id: "tarn-perf-producer".into(),
        ..ProducerConfig::default()
    };
    config.apply(settings, PRODUCER_KEYS, "tarn perf produce")?;
    if config.bootstrap.is_empty() {
        bail!(
            "no broker: pass bootstrap.servers=HOST:PORT in --producer-props or --bootstrap-server"
        );
    }
    Ok(config)
}

fn parse_pairs(items: &[String], source: &str) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && !s.starts_with('#'))
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| anyhow!("{source}: '{s}' is not key=value"))
        })
        .collect()
}

/// Kafka's producer-perf statistics: totals, a 5-second window, and up to
/// 500,000 sampled latencies for the percentiles.
struct Stats {
    start: Instant,
    sampling: u64,
    iteration: u64,
    latencies: Vec<u32>,
    count: u64,
    bytes: u64,
    max_latency: u32,
    total_latency: u64,
    window_start: Instant,
    window_count: u64,
    window_bytes: u64,
    window_max_latency: u32,
    window_total_latency: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Stats {
    fn new(num_records: u64) -> Stats {
        let sampling = (num_records / num_records.clamp(1, MAX_LATENCY_SAMPLES)).max(1);
        Stats {
            start: Instant::now(),
            sampling,
            iteration: 0,
            latencies: Vec::with_capacity((num_records / sampling + 1) as usize),
            count: 0,
            bytes: 0,
            max_latency: 0,
            total_latency: 0,
            window_start: Instant::now(),
            window_count: 0,
            window_bytes: 0,
            window_max_latency: 0,
            window_total_latency: 0,
            errors: 0,
            first_error: None,
        }
    }

    fn record(&mut self, latency_ms: u32, bytes: u64, now: Instant) {
        self.count += 1;
        self.bytes += bytes;
        self.total_latency += u64::from(latency_ms);
        self.max_latency = self.max_latency.max(latency_ms);
        self.window_count += 1;
        self.window_bytes += bytes;
        self.window_total_latency += u64::from(latency_ms);
        self.window_max_latency = self.window_max_latency.max(latency_ms);
        if self.iteration.is_multiple_of(self.sampling) {
            self.latencies.push(latency_ms);
        }
        self.iteration += 1;
        if now.duration_since(self.window_start) >= REPORTING_INTERVAL {
            self.print_window(now);
            self.window_start = now;
            self.window_count = 0;
            self.window_bytes = 0;
            self.window_max_latency = 0;
            self.window_total_latency = 0;
        }
    }

    fn print_window(&self, now: Instant) {
        let elapsed_ms = now.duration_since(self.window_start).as_millis().max(1) as f64;
        println!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.1} ms avg latency, {:.1} ms max latency.",
            self.window_count,
            1000.0 * self.window_count as f64 / elapsed_ms,
            1000.0 * self.window_bytes as f64 / elapsed_ms / (1024.0 * 1024.0),
            self.window_total_latency as f64 / self.window_count.max(1) as f64,
            f64::from(self.window_max_latency),
        );
    }

    fn print_total(&mut self) {
        let elapsed_ms = self.start.elapsed().as_millis().max(1) as f64;
        self.latencies.sort_unstable();
        let percentile = |p: f64| -> u32 {
            let size = self.latencies.len();
            if size == 0 {
                return 0;
            }
            self.latencies[((p * size as f64) as usize).min(size - 1)]
        };
        println!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency, {} ms 50th, {} ms 95th, {} ms 99th, {} ms 99.9th.",
            self.count,
            1000.0 * self.count as f64 / elapsed_ms,
            1000.0 * self.bytes as f64 / elapsed_ms / (1024.0 * 1024.0),
            self.total_latency as f64 / self.count.max(1) as f64,
            f64::from(self.max_latency),
            percentile(0.5),
            percentile(0.95),
            percentile(0.99),
            percentile(0.999),
        );
    }
}

/// One partition's batch being filled.
struct OpenBatch {
    writer: BatchWriter,
    /// When each record was handed to the producer, for its latency.
    sent_at: Vec<Instant>,
    payload_bytes: u64,
}

/// A produce request waiting for its response.
struct Pending {
    correlation_id: i32,
    batches: Vec<(i32, Vec<Instant>, u64)>,
}

/// One broker connection: the write side stays with the producer loop, a
/// thread reads responses in order. The bounded channel of pending
/// requests is the in-flight limit.
struct BrokerConnection {
    stream: TcpStream,
    pending: Option<SyncSender<Pending>>,
    reader: Option<thread::JoinHandle<Result<()>>>,
}

impl BrokerConnection {
    fn write(
        &mut self,
        correlation_id: i32,
        client_id: &str,
        request: &ProduceRequest,
    ) -> Result<()> {
        let frame = encode_request(0, PRODUCE_VERSION, correlation_id, client_id, request);
        self.stream
            .write_all(&frame)
            .context("send produce request")
    }
}

fn connect(address: &str) -> Result<TcpStream> {
    let stream =
        TcpStream::connect(address).with_context(|| format!("connect to broker {address}"))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    Ok(stream)
}

fn read_produce_responses(
    mut stream: TcpStream,
    address: String,
    pending: Receiver<Pending>,
    stats: Arc<Mutex<Stats>>,
) -> Result<()> {
    while let Ok(request) = pending.recv() {
        let mut r = read_frame(&mut stream, &address)?;
        let correlation_id = decode_response_header(&mut r, 0, PRODUCE_VERSION.flexible)?;
        if correlation_id != request.correlation_id {
            bail!(
                "response correlation id {correlation_id} does not match request {}",
                request.correlation_id
            );
        }
        let response = ProduceResponse::decode(&mut r, PRODUCE_VERSION)?;
        let errors: BTreeMap<i32, (i16, Option<String>)> = response
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .filter(|p| p.error_code != error::NONE)
            .map(|p| (p.index, (p.error_code, p.error_message.clone())))
            .collect();
        let now = Instant::now();
        let mut stats = stats.lock().expect("stats lock");
        for (partition, sent_at, payload_bytes) in request.batches {
            if let Some((code, message)) = errors.get(&partition) {
                stats.errors += sent_at.len() as u64;
                stats.first_error.get_or_insert_with(|| {
                    format!(
                        "partition {partition}: error {code} {}",
                        message.as_deref().unwrap_or("")
                    )
                });
                continue;
            }
            let per_record = payload_bytes / sent_at.len().max(1) as u64;
            for t in sent_at {
                let latency = now.duration_since(t).as_millis().min(u128::from(u32::MAX)) as u32;
                stats.record(latency, per_record, now);
            }
        }
    }
    Ok(())
}

/// Payload source: one random A-Z payload, or random picks from a file.
struct Payloads {
    items: Vec<Vec<u8>>,
    rng: u64,
}

impl Payloads {
    fn new(args: &ProduceArgs) -> Result<Payloads> {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
        if let Some(path) = &args.payload_file {
            let text = std::fs::read(path)
                .with_context(|| format!("read payload file {}", path.display()))?;
            let delimiter = args
                .payload_delimiter
                .replace("\\n", "\n")
                .replace("\\t", "\t");
            let items: Vec<Vec<u8>> = split_bytes(&text, delimiter.as_bytes())
                .into_iter()
                .filter(|p| !p.is_empty())
                .take(MAX_PAYLOADS)
                .map(<[u8]>::to_vec)
                .collect();
            if items.is_empty() {
                bail!("payload file {} holds no payloads", path.display());
            }
            println!("Reading payloads from: {}", path.display());
            println!("Number of messages read: {}", items.len());
            return Ok(Payloads { items, rng });
        }
        let size = args
            .record_size
            .ok_or_else(|| anyhow!("either --record-size or --payload-file is required"))?;
        let payload = (0..size)
            .map(|_| b'A' + (xorshift(&mut rng) % 26) as u8)
            .collect();
        Ok(Payloads {
            items: vec![payload],
            rng,
        })
    }

    fn next(&mut self) -> &[u8] {
        let i = if self.items.len() == 1 {
            0
        } else {
            (xorshift(&mut self.rng) % self.items.len() as u64) as usize
        };
        &self.items[i]
    }
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn split_bytes<'a>(text: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    if delimiter.is_empty() {
        return vec![text];
    }
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + delimiter.len() <= text.len() {
        if &text[i..i + delimiter.len()] == delimiter {
            out.push(&text[start..i]);
            i += delimiter.len();
            start = i;
        } else {
            i += 1;
        }
    }
    out.push(&text[start..]);
    out
}

struct Producer {
    config: ProducerConfig,
    topic: String,
    leaders: Vec<i32>,
    connections: BTreeMap<i32, BrokerConnection>,
    batches: Vec<OpenBatch>,
    correlation_id: i32,
    stats: Arc<Mutex<Stats>>,
}

impl Producer {
    /// Sends, per leader, every batch that is full, has lingered long
    /// enough, or (with `all`) has any record.
    fn send_ready(&mut self, all: bool, now: Instant) -> Result<()> {
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (partition, batch) in self.batches.iter().enumerate() {
            let ready = !batch.writer.is_empty()
                && (all
                    || batch.writer.size() >= self.config.batch_size
                    || now.duration_since(batch.sent_at[0]) >= self.config.linger);
            if ready {
                by_leader
                    .entry(self.leaders[partition])
                    .or_default()
                    .push(partition as i32);
            }
        }
        for (leader, partitions) in by_leader {
            self.send(leader, &partitions)?;
        }
        Ok(())
    }

    fn send(&mut self, leader: i32, partitions: &[i32]) -> Result<()> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let mut data = Vec::with_capacity(partitions.len());
        let mut pending = Pending {
            correlation_id: self.correlation_id,
            batches: Vec::with_capacity(partitions.len()),
        };
        for &partition in partitions {
            let batch = &mut self.batches[partition as usize];
            let mut bytes = Vec::with_capacity(batch.writer.size());
            batch.writer.finish(self.config.codec, &mut bytes);
            data.push(PartitionProduceData {
                index: partition,
                records: Some(Bytes::from(bytes)),
            });
            pending.batches.push((
                partition,
                std::mem::take(&mut batch.sent_at),
                std::mem::take(&mut batch.payload_bytes),
            ));
        }
        let request = ProduceRequest {
            transactional_id: None,
            acks: self.config.acks,
            timeout_ms: self.config.request_timeout_ms,
            topic_data: vec![TopicProduceData {
                name: self.topic.clone(),
                topic_id: Default::default(),
                partition_data: data,
            }],
        };
        let connection = self
            .connections
            .get_mut(&leader)
            .ok_or_else(|| anyhow!("no connection to leader {leader}"))?;
        if self.config.acks == 0 {
            // No response comes: the record is done once it is written.
            connection.write(self.correlation_id, &self.config.client_id, &request)?;
            let now = Instant::now();
            let mut stats = self.stats.lock().expect("stats lock");
            for (_, sent_at, bytes) in pending.batches {
                let per_record = bytes / sent_at.len().max(1) as u64;
                for t in sent_at {
                    stats.record(now.duration_since(t).as_millis() as u32, per_record, now);
                }
            }
            return Ok(());
        }
        // Blocks while the connection has its maximum in flight.
        connection
            .pending
            .as_ref()
            .expect("open connection")
            .send(pending)
            .map_err(|_| anyhow!("the response reader for broker {leader} stopped"))?;
        connection.write(self.correlation_id, &self.config.client_id, &request)
    }

    fn close(mut self) -> Result<()> {
        for (_, mut connection) in std::mem::take(&mut self.connections) {
            drop(connection.pending.take());
            if let Some(reader) = connection.reader.take() {
                reader
                    .join()
                    .map_err(|_| anyhow!("response reader panicked"))??;
            }
        }
        Ok(())
    }
}

fn produce(args: ProduceArgs) -> Result<()> {
    let mut pairs = parse_pairs(&args.producer_props, "--producer-props")?;
    if let Some(path) = &args.producer_config {
        let mut from_file = load_properties(path)?;
        // Command-line props win over the file, as in Kafka's tool.
        from_file.append(&mut pairs);
        pairs = from_file;
    }
    let config = producer_config(&pairs, args.bootstrap_server.as_deref())?;
    let mut payloads = Payloads::new(&args)?;
    let bootstrap = config
        .bootstrap
        .split(',')
        .next()
        .unwrap_or_default()
        .to_owned();
    let TopicLeaders { leaders, brokers } =
        topic_leaders(&bootstrap, &args.topic, true, LEADER_WAIT)?;
    let stats = Arc::new(Mutex::new(Stats::new(args.num_records)));
    let mut connections = BTreeMap::new();
    for leader in leaders.iter().copied().collect::<BTreeSet<_>>() {
        let address = brokers
            .get(&leader)
            .ok_or_else(|| anyhow!("metadata names leader {leader} but not its address"))?;
        let stream = connect(address)?;
        let (tx, rx) = sync_channel(config.max_in_flight - 1);
        let read_side = stream.try_clone()?;
        let thread_stats = stats.clone();
        let peer = address.clone();
        let reader = thread::Builder::new()
            .name(format!("perf-responses-{leader}"))
            .spawn(move || read_produce_responses(read_side, peer, rx, thread_stats))?;
        connections.insert(
            leader,
            BrokerConnection {
                stream,
                pending: Some(tx),
                reader: Some(reader),
            },
        );
    }
    let partition_count = leaders.len();
    let mut producer = Producer {
        config,
        topic: args.topic.clone(),
        leaders,
        connections,
        batches: (0..partition_count)
            .map(|_| OpenBatch {
                writer: BatchWriter::new(),
                sent_at: Vec::new(),
                payload_bytes: 0,
            })
            .collect(),
        correlation_id: 0,
        stats: stats.clone(),
    };
    let sent = send_all(&mut producer, &args, &mut payloads);
    // A reader that failed (the broker closed the connection, say) holds
    // the real cause: report it before the sender's "reader stopped".
    match (sent, producer.close()) {
        (_, Err(reader_error)) => return Err(reader_error),
        (Err(e), Ok(())) => return Err(e),
        (Ok(()), Ok(())) => {}
    }
    let mut stats = stats.lock().expect("stats lock");
    stats.print_total();
    if stats.errors > 0 {
        bail!(
            "{} records failed; first error: {}",
            stats.errors,
            stats.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

/// The producer loop: throttles, fills batches, sends them.
fn send_all(producer: &mut Producer, args: &ProduceArgs, payloads: &mut Payloads) -> Result<()> {
    let partition_count = producer.batches.len();
    let start = Instant::now();
    let mut sticky = 0usize;
    for i in 0..args.num_records {
        if args.throughput > 0.0 {
            // Kafka's ThroughputThrottler: stay at or below the target rate,
            // sending lingering batches while we wait.
            loop {
                let due = start + Duration::from_secs_f64(i as f64 / args.throughput);
                let now = Instant::now();
                if now >= due {
                    break;
                }
                producer.send_ready(false, now)?;
                thread::sleep(
                    (due - now).min(producer.config.linger.max(Duration::from_millis(1))),
                );
            }
        }
        let payload = payloads.next();
        let now = Instant::now();
        let batch = &mut producer.batches[sticky];
        batch.writer.append(now_ms(), None, Some(payload));
        batch.sent_at.push(now);
        batch.payload_bytes += payload.len() as u64;
        if batch.writer.size() >= producer.config.batch_size {
            producer.send_ready(false, now)?;
            sticky = (sticky + 1) % partition_count;
        } else if i.is_multiple_of(64) {
            producer.send_ready(false, now)?;
        }
    }
    producer.send_ready(true, Instant::now())
}

// ------------------------------------------------------------ consumer

/// `yyyy-MM-dd HH:mm:ss:SSS` in UTC, Kafka's default date format.
fn format_time(time: SystemTime) -> String {
    let ms = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis()) as i64;
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}:{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// Counts the records at or after `from` in fetched `records`, their
/// key+value bytes, and returns the next offset to fetch.
fn count_records(records: &[u8], from: i64) -> Result<(u64, u64, i64)> {
    let mut messages = 0;
    let mut bytes = 0;
    let next = for_each_record(records, from, |record| {
        messages += 1;
        bytes += (record.key.map_or(0, <[u8]>::len) + record.value.map_or(0, <[u8]>::len)) as u64;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok((messages, bytes, next))
}

fn consume(args: ConsumeArgs) -> Result<()> {
    let topic = topic_leaders(&args.bootstrap_server, &args.topic, true, LEADER_WAIT)?;
    let leaders = &topic.leaders;
    if leaders.iter().any(|l| *l != leaders[0]) {
        bail!(
            "tarn perf consume reads from one leader; {} has several",
            args.topic
        );
    }
    let partitions: BTreeSet<_> = (0..leaders.len() as i32)
        .map(|p| (args.topic.clone(), p))
        .collect();
    let timestamp = if args.from_latest {
        LATEST_TIMESTAMP
    } else {
        EARLIEST_TIMESTAMP
    };
    let mut offsets = list_offsets(&args.bootstrap_server, &partitions, timestamp)?
        .into_iter()
        .map(|((_, p), offset)| offset.with_context(|| format!("no offset for {}-{p}", args.topic)))
        .collect::<Result<Vec<i64>>>()?;
    let mut client =
        Client::connect(topic.address(leaders[0])?)?.with_client_id("tarn-perf-consumer");
    if !args.hide_header {
        let extra = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec";
        if args.show_detailed_stats {
            println!("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}");
        } else {
            println!("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}");
        }
    }
    let start_wall = SystemTime::now();
    let start = Instant::now();
    let mut last_message = Instant::now();
    let mut report_at = Instant::now();
    let (mut messages, mut bytes) = (0u64, 0u64);
    let (mut last_messages, mut last_bytes) = (0u64, 0u64);
    let interval = Duration::from_millis(args.reporting_interval.max(1));
    while messages < args.messages {
        if last_message.elapsed() > Duration::from_millis(args.timeout) {
            eprintln!(
                "WARNING: Exiting before consuming the expected number of messages: timeout ({} ms) exceeded. You can use the --timeout option to increase the timeout.",
                args.timeout
            );
            break;
        }
        let request = FetchRequest {
            max_wait_ms: FETCH_MAX_WAIT_MS,
            min_bytes: 1,
            max_bytes: FETCH_MAX_BYTES,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: args.topic.clone(),
                topic_id: Uuid::ZERO,
                partitions: offsets
                    .iter()
                    .enumerate()
                    .map(|(p, offset)| FetchPartition {
                        partition: p as i32,
                        fetch_offset: *offset,
                        partition_max_bytes: args.fetch_size,
                        ..Default::default()
                    })
                    .collect(),
            }],
            ..Default::default()
        };
        let response: FetchResponse = client.call(1, 12, 12, &request)?;
        if response.error_code != error::NONE {
            bail!("fetch failed with error {}", response.error_code);
        }
        for p in response.responses.iter().flat_map(|t| t.partitions.iter()) {
            if p.error_code != error::NONE {
                bail!(
                    "fetch {}-{}: error {}",
                    args.topic,
                    p.partition_index,
                    p.error_code
                );
            }
            let Some(slot) = offsets.get_mut(p.partition_index as usize) else {
                continue;
            };
            let records = p.records.as_deref().unwrap_or_default();
            let (m, b, next) = count_records(records, *slot)?;
            *slot = next;
            if m > 0 {
                messages += m;
                bytes += b;
                last_message = Instant::now();
            }
        }
        if args.show_detailed_stats && report_at.elapsed() >= interval {
            let elapsed = report_at.elapsed().as_secs_f64();
            let mb = bytes as f64 / (1024.0 * 1024.0);
            let window_mb = (bytes - last_bytes) as f64 / (1024.0 * 1024.0);
            let window_msgs = messages - last_messages;
            println!(
                "{}, {}, {:.4}, {:.4}, {}, {:.4}, {}, {}, {:.4}, {:.4}",
                format_time(SystemTime::now()),
                0,
                mb,
                window_mb / elapsed,
                messages,
                window_msgs as f64 / elapsed,
                0,
                (elapsed * 1000.0) as u64,
                window_mb / elapsed,
                window_msgs as f64 / elapsed
            );
            report_at = Instant::now();
            last_bytes = bytes;
            last_messages = messages;
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64().max(1e-3);
    let end_wall = SystemTime::now();
    if !args.show_detailed_stats {
        let mb = bytes as f64 / (1024.0 * 1024.0);
        println!(
            "{}, {}, {:.4}, {:.4}, {}, {:.4}, {}, {}, {:.4}, {:.4}",
            format_time(start_wall),
            format_time(end_wall),
            mb,
            mb / elapsed_s,
            messages,
            messages as f64 / elapsed_s,
            0,
            (elapsed_s * 1000.0) as u64,
            mb / elapsed_s,
            messages as f64 / elapsed_s
        );
    }
    if messages < args.messages {
        bail!("consumed {messages} of {} messages", args.messages);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_use_kafkas_default_format() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(format_time(t), "2023-11-14 22:13:20:123");
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01 00:00:00:000");
    }

    #[test]
    fn producer_props_are_checked() {
        let pairs = parse_pairs(
            &[
                "bootstrap.servers=h:1".into(),
                "acks=all".into(),
                "linger.ms=7".into(),
            ],
            "test",
        )
        .unwrap();
        let config = producer_config(&pairs, None).unwrap();
        assert_eq!((config.acks, config.linger), (-1, Duration::from_millis(7)));
        let bad = parse_pairs(&["buffer.memory=1".into()], "test").unwrap();
        assert!(producer_config(&bad, Some("h:1")).is_err());
        assert!(producer_config(&[], None).is_err());
        assert!(parse_pairs(&["novalue".into()], "test").is_err());
    }

    #[test]
    fn percentiles_follow_kafkas_indexing() {
        let mut stats = Stats::new(1000);
        let now = Instant::now();
        for latency in 0..1000 {
            stats.record(latency, 10, now);
        }
        assert_eq!(stats.latencies.len(), 1000);
        stats.latencies.sort_unstable();
        assert_eq!(stats.latencies[(0.99 * 1000.0) as usize], 990);
    }

    #[test]
    fn delimited_payloads_split() {
        assert_eq!(
            split_bytes(b"a\nbb\n\nc", b"\n"),
            vec![&b"a"[..], b"bb", b"", b"c"]
        );
        assert_eq!(split_bytes(b"a--b", b"--"), vec![&b"a"[..], b"b"]);
    }
}
