//! `tarn produce`: kafka-console-producer.sh. Reads standard input one line
//! per record, splits each line into headers, key and value as Kafka's
//! `LineMessageReader` does (`--property parse.key=true`, ...), and sends
//! the records with Kafka's producer behaviour: keyed records go to
//! `murmur2(key) % partitions` like the Java client's default partitioner,
//! unkeyed ones stick to one partition per batch; a partition's batch goes
//! when it reaches `batch.size` or has waited `linger.ms` (`--timeout`).
//!
//! Unlike Kafka's tool, which logs a failed send and still exits 0, every
//! record must be acknowledged (with acks=1 or all): the first batch the
//! broker refuses for good, or still refuses after `retries`, stops the
//! command with the broker's error and a non-zero exit. Requests go one at
//! a time per broker, so records are written in input order.

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::io::{self, BufRead, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;

use tarn_protocol::error;
use tarn_protocol::messages::produce::{
    PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData,
};
use tarn_protocol::record_batch::{varlong_len, BatchWriter, RECORD_BATCH_HEADER_SIZE};
use tarn_protocol::Version;
use tarn_server::error_names::error_name;

use crate::cluster::{topic_leaders, Connections, TopicLeaders};
use crate::interrupt;
use crate::props::{load_properties, lookup, parse_key_value_args, ProducerConfig, Settings};
use crate::records::now_ms;

const PRODUCE_VERSION: Version = Version {
    version: 9,
    flexible: true,
};
/// Lines read ahead of the producer; each is at most `max.request.size`.
const INPUT_QUEUE_LINES: usize = 128;
/// Bytes of standard input buffered per read.
const STDIN_BUFFER_BYTES: usize = 64 << 10;
/// How often the producer looks for Ctrl-C while it waits for input.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Kafka's upper bound on a record's framing: length, attributes,
/// timestamp and offset deltas, key and value lengths, header count.
const RECORD_OVERHEAD_MAX: usize = 21;

/// The producer settings `tarn produce` honours.
const PRODUCER_KEYS: &[&str] = &[
    "bootstrap.servers",
    "acks",
    "batch.size",
    "linger.ms",
    "compression.type",
    "client.id",
    "request.timeout.ms",
    "retries",
    "retry.backoff.ms",
    "max.block.ms",
    "max.request.size",
];

/// The line reader settings, Kafka's `LineMessageReader`'s.
const READER_KEYS: &[&str] = &[
    "parse.key",
    "key.separator",
    "parse.headers",
    "headers.delimiter",
    "headers.separator",
    "headers.key.separator",
    "ignore.error",
    "null.marker",
];

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// The server(s) to connect to, HOST1:PORT1,HOST2:PORT2.
    #[arg(long = "bootstrap-server", value_name = "HOST:PORT")]
    bootstrap_server: String,
    /// The topic to produce messages to.
    #[arg(long)]
    topic: String,
    /// Send each message on its own and wait for it to be acknowledged.
    #[arg(long)]
    sync: bool,
    /// none, gzip, snappy, lz4 or zstd; gzip when given without a value.
    #[arg(
        long = "compression-codec",
        num_args = 0..=1,
        default_missing_value = "gzip",
        value_name = "CODEC"
    )]
    compression_codec: Option<String>,
    /// batch.size: bytes of records per partition batch [default: 16384].
    #[arg(long = "batch-size", value_name = "SIZE")]
    batch_size: Option<String>,
    /// batch.size, as Kafka's older option spells it.
    #[arg(long = "max-partition-memory-bytes", value_name = "SIZE")]
    max_partition_memory_bytes: Option<String>,
    /// retries: sends of a batch refused with a retriable error [default: 3].
    #[arg(long = "message-send-max-retries", value_name = "N")]
    message_send_max_retries: Option<String>,
    /// retry.backoff.ms [default: 100].
    #[arg(long = "retry-backoff-ms", value_name = "MS")]
    retry_backoff_ms: Option<String>,
    /// linger.ms: how long a batch waits for more records [default: 1000].
    #[arg(long, value_name = "TIMEOUT_MS")]
    timeout: Option<String>,
    /// acks: -1 (all), 0 or 1 [default: -1].
    #[arg(
        long = "request-required-acks",
        allow_negative_numbers = true,
        value_name = "ACKS"
    )]
    request_required_acks: Option<String>,
    /// request.timeout.ms: the broker's time to acknowledge [default: 1500].
    #[arg(long = "request-timeout-ms", value_name = "MS")]
    request_timeout_ms: Option<String>,
    /// max.block.ms: how long to wait for the topic's leaders [default: 60000].
    #[arg(long = "max-block-ms", value_name = "MS")]
    max_block_ms: Option<String>,
    /// A line reader setting, key=value: parse.key, key.separator,
    /// parse.headers, headers.delimiter, headers.separator,
    /// headers.key.separator, ignore.error, null.marker.
    #[arg(long, value_name = "PROP")]
    property: Vec<String>,
    /// A properties file of line reader settings (--property wins).
    #[arg(long = "reader-config", value_name = "FILE")]
    reader_config: Option<PathBuf>,
    /// A producer setting, key=value.
    #[arg(long = "producer-property", value_name = "PROP")]
    producer_property: Vec<String>,
    /// A properties file of producer settings (--producer-property wins).
    #[arg(long = "producer.config", value_name = "FILE")]
    producer_config: Option<PathBuf>,
}

pub fn run(args: ProduceArgs) -> Result<()> {
    let reader = LineReader::configure(&reader_settings(&args)?)?;
    let mut config = ProducerConfig::default();
    config.apply(&producer_settings(&args)?, PRODUCER_KEYS, "tarn produce")?;
    let leaders = topic_leaders(&config.bootstrap, &args.topic, true, config.max_block)?;
    interrupt::install()?;
    let lines = spawn_stdin_reader(config.max_request_size)?;
    let mut producer = ConsoleProducer::new(config, args.topic, leaders);
    let outcome = pump(&mut producer, &reader, &lines, args.sync);
    // What was read before a bad line is still sent, as Kafka's producer
    // flushes on close.
    let flushed = producer.flush();
    match (outcome, flushed) {
        (Ok(()), flushed) => flushed?,
        (Err(e), Ok(())) => return Err(e),
        (Err(e), Err(flush_error)) => {
            eprintln!("{flush_error:#}");
            return Err(e);
        }
    }
    if let Some(signal) = interrupt::received() {
        std::process::exit(128 + signal);
    }
    Ok(())
}

/// The reader settings: the file, then `--property`.
fn reader_settings(args: &ProduceArgs) -> Result<Settings> {
    let mut settings = match &args.reader_config {
        Some(path) => load_properties(path)?,
        None => Vec::new(),
    };
    settings.extend(parse_key_value_args(&args.property));
    Ok(settings)
}

/// The producer settings as Kafka's tool merges them: the file, then
/// `--producer-property`, then the tool's own options; an option left out
/// gives way to a property and only then to its default.
fn producer_settings(args: &ProduceArgs) -> Result<Settings> {
    let mut settings = match &args.producer_config {
        Some(path) => load_properties(path)?,
        None => Vec::new(),
    };
    settings.extend(parse_key_value_args(&args.producer_property));
    settings.push(("bootstrap.servers".into(), args.bootstrap_server.clone()));
    if let Some(codec) = &args.compression_codec {
        let codec = if codec.is_empty() { "gzip" } else { codec };
        settings.push(("compression.type".into(), codec.to_owned()));
    }
    if lookup(&settings, "client.id").is_none() {
        settings.push(("client.id".into(), "console-producer".into()));
    }
    let merges = [
        ("linger.ms", &args.timeout, "1000"),
        ("acks", &args.request_required_acks, "-1"),
        ("request.timeout.ms", &args.request_timeout_ms, "1500"),
        ("retries", &args.message_send_max_retries, "3"),
        ("retry.backoff.ms", &args.retry_backoff_ms, "100"),
        ("batch.size", &args.batch_size, "16384"),
        ("batch.size", &args.max_partition_memory_bytes, "16384"),
        ("max.block.ms", &args.max_block_ms, "60000"),
    ];
    for (key, option, default) in merges {
        match option {
            Some(value) => settings.push((key.into(), value.clone())),
            None if lookup(&settings, key).is_none() => settings.push((key.into(), default.into())),
            None => {}
        }
    }
    Ok(settings)
}

/// Reads lines until end of input, a bad line, a refused batch or Ctrl-C.
fn pump(
    producer: &mut ConsoleProducer,
    reader: &LineReader,
    lines: &Receiver<Result<Vec<u8>>>,
    sync: bool,
) -> Result<()> {
    let mut line_number = 0u64;
    while interrupt::received().is_none() {
        let now = Instant::now();
        let wait = producer
            .linger_deadline()
            .map_or(POLL_INTERVAL, |deadline| {
                deadline.saturating_duration_since(now).min(POLL_INTERVAL)
            });
        match lines.recv_timeout(wait) {
            Ok(line) => {
                let line = line?;
                line_number += 1;
                producer.append(&reader.parse(&line, line_number)?)?;
                if sync {
                    producer.flush()?;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        producer.send_ready(Instant::now())?;
    }
    Ok(())
}

/// Reads standard input on its own thread, so a lingering batch is sent
/// on time while the user has not typed the next line. The channel closes
/// at end of input.
fn spawn_stdin_reader(line_max: usize) -> Result<Receiver<Result<Vec<u8>>>> {
    let (lines, receiver) = sync_channel(INPUT_QUEUE_LINES);
    thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let stdin = io::stdin();
            // Kafka prompts with '>' when a person is typing.
            let prompt = stdin.is_terminal() && io::stdout().is_terminal();
            let mut input = BufReader::with_capacity(STDIN_BUFFER_BYTES, stdin.lock());
            for line_number in 1.. {
                if prompt {
                    print!(">");
                    if io::stdout().flush().is_err() {
                        return;
                    }
                }
                let mut line = Vec::new();
                match read_line(&mut input, line_max, line_number, &mut line) {
                    Ok(true) => {
                        if lines.send(Ok(line)).is_err() {
                            return; // the producer stopped first
                        }
                    }
                    Ok(false) => return, // end of input closes the channel
                    Err(e) => {
                        // Unsent only if the producer stopped first.
                        lines.send(Err(e)).ok();
                        return;
                    }
                }
            }
        })
        .context("start the standard input reader")?;
    Ok(receiver)
}

/// Reads one line into `line` without its `\n` or `\r\n`; false at end of
/// input. A last line without a newline still counts, as with Java's
/// `readLine`. A line longer than `line_max` bytes is an error: it could
/// not be sent.
fn read_line(
    input: &mut impl BufRead,
    line_max: usize,
    line_number: u64,
    line: &mut Vec<u8>,
) -> Result<bool> {
    let mut read_any = false;
    loop {
        let available = input.fill_buf().context("read standard input")?;
        if available.is_empty() {
            break;
        }
        read_any = true;
        let newline = available.iter().position(|&b| b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        if line.len() + chunk.len() > line_max.saturating_add(1) {
            bail!(
                "line {line_number} is longer than {line_max} bytes, the producer's max.request.size"
            );
        }
        line.extend_from_slice(chunk);
        let used = newline.map_or(chunk.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if line.len() > line_max {
        bail!(
            "line {line_number} is longer than {line_max} bytes, the producer's max.request.size"
        );
    }
    Ok(read_any)
}

/// A record as a line describes it, borrowing from the line.
#[derive(Debug, PartialEq, Eq)]
struct LineRecord<'a> {
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<Header<'a>>,
}

/// A header's key and value; the key is never null.
type Header<'a> = (&'a [u8], Option<&'a [u8]>);

impl LineRecord<'_> {
    /// Kafka's upper bound on the record's size in a batch of its own,
    /// checked against `max.request.size`.
    fn size_upper_bound(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(key, value)| {
                varlong_len(key.len() as i64)
                    + key.len()
                    + value.map_or(1, |v| varlong_len(v.len() as i64) + v.len())
            })
            .sum();
        RECORD_BATCH_HEADER_SIZE
            + RECORD_OVERHEAD_MAX
            + self.key.map_or(0, <[u8]>::len)
            + self.value.map_or(0, <[u8]>::len)
            + headers
    }
}

/// Kafka's `LineMessageReader`: `[headers<delimiter>][key<separator>]value`.
#[derive(Debug)]
struct LineReader {
    parse_key: bool,
    key_separator: Vec<u8>,
    parse_headers: bool,
    headers_delimiter: Vec<u8>,
    headers_separator: Vec<u8>,
    headers_key_separator: Vec<u8>,
    ignore_error: bool,
    null_marker: Option<Vec<u8>>,
}

impl LineReader {
    /// Kafka's defaults, changed by `settings`, with Kafka's checks that
    /// the separators can be told apart.
    fn configure(settings: &[(String, String)]) -> Result<LineReader> {
        let mut reader = LineReader {
            parse_key: false,
            key_separator: b"\t".to_vec(),
            parse_headers: false,
            headers_delimiter: b"\t".to_vec(),
            headers_separator: b",".to_vec(),
            headers_key_separator: b":".to_vec(),
            ignore_error: false,
            null_marker: None,
        };
        for (key, value) in settings {
            let flag = || value.trim().eq_ignore_ascii_case("true");
            match key.as_str() {
                "parse.key" => reader.parse_key = flag(),
                "key.separator" => reader.key_separator = value.as_bytes().to_vec(),
                "parse.headers" => reader.parse_headers = flag(),
                "headers.delimiter" => reader.headers_delimiter = value.as_bytes().to_vec(),
                "headers.separator" => reader.headers_separator = value.as_bytes().to_vec(),
                "headers.key.separator" => reader.headers_key_separator = value.as_bytes().to_vec(),
                "ignore.error" => reader.ignore_error = flag(),
                "null.marker" => reader.null_marker = Some(value.as_bytes().to_vec()),
                _ => bail!(
                    "property {key} is not a line reader setting (supported: {})",
                    READER_KEYS.join(", ")
                ),
            }
        }
        let distinct = [
            (
                "headers.delimiter",
                &reader.headers_delimiter,
                "headers.separator",
                &reader.headers_separator,
            ),
            (
                "headers.delimiter",
                &reader.headers_delimiter,
                "headers.key.separator",
                &reader.headers_key_separator,
            ),
            (
                "headers.separator",
                &reader.headers_separator,
                "headers.key.separator",
                &reader.headers_key_separator,
            ),
        ];
        for (a, a_value, b, b_value) in distinct {
            if a_value == b_value {
                bail!("{a} and {b} may not be equal");
            }
        }
        if let Some(marker) = &reader.null_marker {
            let separators = [
                ("key.separator", &reader.key_separator),
                ("headers.separator", &reader.headers_separator),
                ("headers.delimiter", &reader.headers_delimiter),
                ("headers.key.separator", &reader.headers_key_separator),
            ];
            for (name, separator) in separators {
                if separator == marker {
                    bail!("null.marker and {name} may not be equal");
                }
            }
        }
        Ok(reader)
    }

    fn is_null(&self, field: &[u8]) -> bool {
        self.null_marker.as_deref() == Some(field)
    }

    /// Splits `line` (number `line_number`, for errors) into a record.
    fn parse<'a>(&self, line: &'a [u8], line_number: u64) -> Result<LineRecord<'a>> {
        let headers = self.field(
            self.parse_headers,
            line,
            0,
            &self.headers_delimiter,
            "headers delimiter",
            line_number,
        )?;
        let header_offset = headers.map_or(0, |h| h.len() + self.headers_delimiter.len());
        let key = self.field(
            self.parse_key,
            line,
            header_offset,
            &self.key_separator,
            "key separator",
            line_number,
        )?;
        let key_offset = key.map_or(0, |k| k.len() + self.key_separator.len());
        let value = &line[header_offset + key_offset..];
        let headers = match headers {
            Some(text) if !self.is_null(text) => self.split_headers(text, line_number)?,
            _ => Vec::new(),
        };
        Ok(LineRecord {
            key: key.filter(|k| !self.is_null(k)),
            value: Some(value).filter(|v| !self.is_null(v)),
            headers,
        })
    }

    /// The text from `start` to the next `separator`, when `enabled`.
    fn field<'a>(
        &self,
        enabled: bool,
        line: &'a [u8],
        start: usize,
        separator: &[u8],
        name: &str,
        line_number: u64,
    ) -> Result<Option<&'a [u8]>> {
        if !enabled {
            return Ok(None);
        }
        match find(line, separator, start) {
            Some(end) => Ok(Some(&line[start..end])),
            None if self.ignore_error => Ok(None),
            None => bail!(
                "No {name} found on line number {line_number}: '{}'",
                String::from_utf8_lossy(line)
            ),
        }
    }

    fn split_headers<'a>(&self, text: &'a [u8], line_number: u64) -> Result<Vec<Header<'a>>> {
        let mut headers = Vec::new();
        for pair in split_like_java(text, &self.headers_separator) {
            let Some(i) = find(pair, &self.headers_key_separator, 0) else {
                if self.ignore_error {
                    headers.push((pair, None));
                    continue;
                }
                bail!(
                    "No header key separator found in pair '{}' on line number {line_number}",
                    String::from_utf8_lossy(pair)
                );
            };
            let key = &pair[..i];
            if self.is_null(key) {
                bail!(
                    "Header keys should not be equal to the null marker '{}' as they can't be null",
                    String::from_utf8_lossy(key)
                );
            }
            let value = &pair[i + self.headers_key_separator.len()..];
            headers.push((key, Some(value).filter(|v| !self.is_null(v))));
        }
        Ok(headers)
    }
}

/// The first `needle` in `haystack` at or after `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() {
        return Some(from);
    }
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Java's `String.split`: trailing empty pieces are dropped. (Kafka
/// treats `headers.separator` as a regular expression; here it is
/// literal text.)
fn split_like_java<'a>(text: &'a [u8], separator: &[u8]) -> Vec<&'a [u8]> {
    if text.is_empty() || separator.is_empty() {
        return vec![text];
    }
    let mut pieces = Vec::new();
    let mut start = 0;
    while let Some(i) = find(text, separator, start) {
        pieces.push(&text[start..i]);
        start = i + separator.len();
    }
    pieces.push(&text[start..]);
    while pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    }
    pieces
}

/// Kafka's `Utils.murmur2`, the hash of its default partitioner.
fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in chunks.by_ref() {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner picks for `key`.
fn partition_for_key(key: &[u8], partitions: usize) -> usize {
    (murmur2(key) & 0x7fff_ffff) as usize % partitions
}

/// One partition's batch being filled.
#[derive(Default)]
struct OpenBatch {
    writer: BatchWriter,
    opened_at: Option<Instant>,
}

/// A finished batch on its way to the broker.
struct PendingBatch {
    partition: usize,
    records: u64,
    bytes: Bytes,
}

struct ConsoleProducer {
    config: ProducerConfig,
    topic: String,
    leaders: TopicLeaders,
    connections: Connections,
    batches: Vec<OpenBatch>,
    /// Where unkeyed records go until their batch is sent.
    sticky: usize,
    random: RandomState,
    acknowledged: u64,
}

impl ConsoleProducer {
    fn new(config: ProducerConfig, topic: String, leaders: TopicLeaders) -> ConsoleProducer {
        let random = RandomState::new();
        let partitions = leaders.partition_count();
        let connections = Connections::new(&config.client_id);
        ConsoleProducer {
            config,
            topic,
            leaders,
            connections,
            batches: (0..partitions).map(|_| OpenBatch::default()).collect(),
            sticky: random.hash_one(now_ms()) as usize % partitions,
            random,
            acknowledged: 0,
        }
    }

    fn append(&mut self, record: &LineRecord) -> Result<()> {
        let size = record.size_upper_bound();
        if size > self.config.max_request_size {
            bail!(
                "The message is {size} bytes when serialized which is larger than {}, which is \
                 the value of the max.request.size configuration.",
                self.config.max_request_size
            );
        }
        let partition = match record.key {
            Some(key) => partition_for_key(key, self.batches.len()),
            None => self.sticky,
        };
        let batch = &mut self.batches[partition];
        batch.opened_at.get_or_insert_with(Instant::now);
        batch
            .writer
            .append_with_headers(now_ms(), record.key, record.value, &record.headers);
        Ok(())
    }

    /// When the oldest open batch has lingered long enough.
    fn linger_deadline(&self) -> Option<Instant> {
        self.batches
            .iter()
            .filter_map(|b| b.opened_at)
            .min()
            .map(|opened| opened + self.config.linger)
    }

    /// Sends every batch that is full or has lingered long enough.
    fn send_ready(&mut self, now: Instant) -> Result<()> {
        let ready: Vec<usize> = (0..self.batches.len())
            .filter(|&p| {
                let batch = &self.batches[p];
                batch.opened_at.is_some_and(|opened| {
                    batch.writer.size() >= self.config.batch_size
                        || now.duration_since(opened) >= self.config.linger
                })
            })
            .collect();
        self.send(&ready)
    }

    /// Sends every open batch.
    fn flush(&mut self) -> Result<()> {
        let open: Vec<usize> = (0..self.batches.len())
            .filter(|&p| self.batches[p].opened_at.is_some())
            .collect();
        self.send(&open)
    }

    fn send(&mut self, partitions: &[usize]) -> Result<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        let mut pending: Vec<PendingBatch> = partitions
            .iter()
            .map(|&partition| {
                let batch = &mut self.batches[partition];
                batch.opened_at = None;
                let records = batch.writer.record_count() as u64;
                let mut bytes = Vec::with_capacity(batch.writer.size());
                batch.writer.finish(self.config.codec, &mut bytes);
                PendingBatch {
                    partition,
                    records,
                    bytes: Bytes::from(bytes),
                }
            })
            .collect();
        if partitions.contains(&self.sticky) && self.batches.len() > 1 {
            // Kafka's sticky partitioner moves on once a batch is sent.
            let others = self.batches.len() - 1;
            let step = 1 + self.random.hash_one(self.acknowledged) as usize % others;
            self.sticky = (self.sticky + step) % self.batches.len();
        }
        let mut attempt = 0;
        loop {
            let refused = self.send_once(pending)?;
            let Some((_, code, message)) = refused.first() else {
                return Ok(());
            };
            attempt += 1;
            if attempt > self.config.retries {
                let (batch, code, message) = &refused[0];
                bail!(self.refusal(batch, *code, message.as_deref()));
            }
            eprintln!(
                "WARN: {} ({code}){}; retrying ({attempt} of {})",
                error_name(*code),
                message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default(),
                self.config.retries
            );
            thread::sleep(self.config.retry_backoff);
            // The partition may have a new leader.
            self.leaders = topic_leaders(
                &self.config.bootstrap,
                &self.topic,
                false,
                self.config.max_block,
            )?;
            self.connections.clear();
            pending = refused.into_iter().map(|(batch, _, _)| batch).collect();
        }
    }

    /// Sends `pending` once, one request per leader. Returns the batches
    /// refused with a retriable error; any other refusal is an error.
    fn send_once(
        &mut self,
        pending: Vec<PendingBatch>,
    ) -> Result<Vec<(PendingBatch, i16, Option<String>)>> {
        let mut by_leader: BTreeMap<i32, Vec<PendingBatch>> = BTreeMap::new();
        for batch in pending {
            let leader = self.leaders.leader(batch.partition as i32)?;
            by_leader.entry(leader).or_default().push(batch);
        }
        let mut refused = Vec::new();
        for (leader, batches) in by_leader {
            let request = ProduceRequest {
                transactional_id: None,
                acks: self.config.acks,
                timeout_ms: self.config.request_timeout_ms,
                topic_data: vec![TopicProduceData {
                    name: self.topic.clone(),
                    topic_id: Default::default(),
                    partition_data: batches
                        .iter()
                        .map(|b| PartitionProduceData {
                            index: b.partition as i32,
                            records: Some(b.bytes.clone()),
                        })
                        .collect(),
                }],
            };
            let acks = self.config.acks;
            let client = self.connections.get(&self.leaders, leader)?;
            if acks == 0 {
                // The broker does not answer: written is as good as sent.
                client.send_only(0, PRODUCE_VERSION, &request)?;
                self.acknowledged += batches.iter().map(|b| b.records).sum::<u64>();
                continue;
            }
            let response: ProduceResponse = client.call(0, 9, 9, &request)?;
            for batch in batches {
                let answer = response
                    .responses
                    .iter()
                    .filter(|t| t.name == self.topic)
                    .flat_map(|t| t.partition_responses.iter())
                    .find(|p| p.index == batch.partition as i32)
                    .with_context(|| {
                        format!(
                            "the produce response lacks partition {}-{}",
                            self.topic, batch.partition
                        )
                    })?;
                match answer.error_code {
                    error::NONE => self.acknowledged += batch.records,
                    code if is_retriable(code) => {
                        refused.push((batch, code, answer.error_message.clone()))
                    }
                    code => bail!(self.refusal(&batch, code, answer.error_message.as_deref())),
                }
            }
        }
        Ok(refused)
    }

    fn refusal(&self, batch: &PendingBatch, code: i16, message: Option<&str>) -> String {
        format!(
            "cannot send {} message(s) to topic {} partition {}: {} ({code}){} \
             ({} message(s) acknowledged before)",
            batch.records,
            self.topic,
            batch.partition,
            error_name(code),
            message.map(|m| format!(": {m}")).unwrap_or_default(),
            self.acknowledged
        )
    }
}

/// Errors Kafka's producer retries: the batch may succeed if sent again.
fn is_retriable(code: i16) -> bool {
    matches!(
        code,
        error::CORRUPT_MESSAGE
            | error::UNKNOWN_TOPIC_OR_PARTITION
            | error::LEADER_NOT_AVAILABLE
            | error::NOT_LEADER_OR_FOLLOWER
            | error::REQUEST_TIMED_OUT
            | error::NOT_ENOUGH_REPLICAS
            | error::KAFKA_STORAGE_ERROR
            | error::FENCED_LEADER_EPOCH
            | error::UNKNOWN_LEADER_EPOCH
    ) || code == NOT_ENOUGH_REPLICAS_AFTER_APPEND
}

/// Kafka's code 20, which the protocol crate does not name.
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProduceArgs,
    }

    fn parse(extra: &[&str]) -> ProduceArgs {
        let mut argv = vec!["produce", "--bootstrap-server", "h:9092", "--topic", "t"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).expect("parse").args
    }

    fn config(extra: &[&str]) -> Result<ProducerConfig> {
        let mut config = ProducerConfig::default();
        config.apply(
            &producer_settings(&parse(extra))?,
            PRODUCER_KEYS,
            "tarn produce",
        )?;
        Ok(config)
    }

    fn reader(props: &[(&str, &str)]) -> Result<LineReader> {
        let settings: Settings = props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LineReader::configure(&settings)
    }

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, hash) in cases {
            assert_eq!(murmur2(data), hash, "{}", String::from_utf8_lossy(data));
        }
        assert_eq!(
            partition_for_key(b"foobar", 3),
            (-790_332_482i32 & 0x7fff_ffff) as usize % 3
        );
    }

    #[test]
    fn kafka_defaults_and_precedence() {
        let c = config(&[]).unwrap();
        assert_eq!(c.bootstrap, "h:9092");
        assert_eq!(c.client_id, "console-producer");
        assert_eq!(c.linger, Duration::from_millis(1000));
        assert_eq!(c.acks, -1);
        assert_eq!(c.request_timeout_ms, 1500);
        assert_eq!(c.retries, 3);
        assert_eq!(c.batch_size, 16_384);
        assert_eq!(c.codec, tarn_protocol::record_batch::Compression::None);

        // A property wins over an option's default, an explicit option
        // over the property.
        let c = config(&[
            "--producer-property",
            "linger.ms=5",
            "--producer-property",
            "acks=1",
        ])
        .unwrap();
        assert_eq!((c.linger, c.acks), (Duration::from_millis(5), 1));
        let c = config(&[
            "--producer-property",
            "acks=1",
            "--request-required-acks",
            "0",
        ])
        .unwrap();
        assert_eq!(c.acks, 0);
        let c = config(&[
            "--producer-property",
            "acks=1",
            "--request-required-acks",
            "-1",
        ])
        .unwrap();
        assert_eq!(c.acks, -1);
        let c = config(&["--timeout", "20", "--batch-size", "100", "--sync"]).unwrap();
        assert_eq!((c.linger, c.batch_size), (Duration::from_millis(20), 100));

        // --compression-codec alone means gzip.
        let c = config(&["--compression-codec"]).unwrap();
        assert_eq!(c.codec, tarn_protocol::record_batch::Compression::Gzip);
        let c = config(&["--compression-codec", "zstd"]).unwrap();
        assert_eq!(c.codec, tarn_protocol::record_batch::Compression::Zstd);
        assert!(config(&["--compression-codec", "brotli"]).is_err());
        assert!(config(&["--producer-property", "enable.idempotence=true"]).is_err());
        assert!(config(&["--request-required-acks", "2"]).is_err());
    }

    #[test]
    fn lines_split_like_kafkas_line_reader() {
        let plain = reader(&[]).unwrap();
        let r = plain.parse(b"a\tb", 1).unwrap();
        assert_eq!((r.key, r.value), (None, Some(&b"a\tb"[..])));

        let keyed = reader(&[("parse.key", "true")]).unwrap();
        let r = keyed.parse(b"k\tv\tw", 1).unwrap();
        assert_eq!((r.key, r.value), (Some(&b"k"[..]), Some(&b"v\tw"[..])));
        let r = keyed.parse(b"\t", 1).unwrap();
        assert_eq!((r.key, r.value), (Some(&b""[..]), Some(&b""[..])));
        let e = keyed.parse(b"novalue", 7).unwrap_err().to_string();
        assert_eq!(e, "No key separator found on line number 7: 'novalue'");

        let custom = reader(&[("parse.key", "TRUE"), ("key.separator", "::")]).unwrap();
        let r = custom.parse(b"a::b::c", 1).unwrap();
        assert_eq!((r.key, r.value), (Some(&b"a"[..]), Some(&b"b::c"[..])));

        let lenient = reader(&[("parse.key", "true"), ("ignore.error", "true")]).unwrap();
        let r = lenient.parse(b"novalue", 1).unwrap();
        assert_eq!((r.key, r.value), (None, Some(&b"novalue"[..])));
    }

    #[test]
    fn headers_and_null_markers() {
        let all = reader(&[
            ("parse.key", "true"),
            ("parse.headers", "true"),
            ("null.marker", "<null>"),
        ])
        .unwrap();
        let r = all.parse(b"h1:v1,h2:<null>,h3:a:b\tkey\tvalue", 1).unwrap();
        assert_eq!(
            r,
            LineRecord {
                key: Some(b"key"),
                value: Some(b"value"),
                headers: vec![(b"h1", Some(b"v1")), (b"h2", None), (b"h3", Some(b"a:b"))],
            }
        );
        let r = all.parse(b"<null>\t<null>\t<null>", 1).unwrap();
        assert_eq!(
            r,
            LineRecord {
                key: None,
                value: None,
                headers: vec![],
            }
        );
        // Java's split drops trailing empty pieces.
        let r = all.parse(b"h:1,,\tk\tv", 1).unwrap();
        assert_eq!(r.headers, vec![(&b"h"[..], Some(&b"1"[..]))]);
        let e = all.parse(b"h1\tk\tv", 3).unwrap_err().to_string();
        assert_eq!(
            e,
            "No header key separator found in pair 'h1' on line number 3"
        );
        let e = all.parse(b"<null>:x\tk\tv", 3).unwrap_err().to_string();
        assert_eq!(
            e,
            "Header keys should not be equal to the null marker '<null>' as they can't be null"
        );
        let e = all.parse(b"novalue", 4).unwrap_err().to_string();
        assert_eq!(e, "No headers delimiter found on line number 4: 'novalue'");

        let custom = reader(&[
            ("parse.headers", "true"),
            ("headers.delimiter", "|"),
            ("headers.separator", ";"),
            ("headers.key.separator", "="),
        ])
        .unwrap();
        let r = custom.parse(b"a=1;b=2|value", 1).unwrap();
        assert_eq!(
            r.headers,
            vec![(&b"a"[..], Some(&b"1"[..])), (b"b", Some(b"2"))]
        );
        assert_eq!(r.value, Some(&b"value"[..]));
    }

    #[test]
    fn reader_settings_are_checked_as_kafka_does() {
        let e = reader(&[("headers.separator", "\t")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "headers.delimiter and headers.separator may not be equal"
        );
        let e = reader(&[("null.marker", "\t")]).unwrap_err().to_string();
        assert_eq!(e, "null.marker and key.separator may not be equal");
        assert!(reader(&[("parse.value", "true")]).is_err());
    }

    #[test]
    fn lines_are_read_whole_and_bounded() {
        let mut input = io::Cursor::new(b"one\r\ntwo\n\nlast".to_vec());
        let mut lines = Vec::new();
        loop {
            let mut line = Vec::new();
            if !read_line(&mut input, 10, 1, &mut line).unwrap() {
                break;
            }
            lines.push(String::from_utf8(line).unwrap());
        }
        assert_eq!(lines, ["one", "two", "", "last"]);

        let mut input = BufReader::with_capacity(4, io::Cursor::new(b"0123456789\n".to_vec()));
        let mut line = Vec::new();
        assert!(read_line(&mut input, 10, 1, &mut line).unwrap());
        let mut input = BufReader::with_capacity(4, io::Cursor::new(b"0123456789A\n".to_vec()));
        let e = read_line(&mut input, 10, 5, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 5 is longer than 10 bytes"), "{e}");
    }

    #[test]
    fn only_errors_a_resend_can_cure_are_retried() {
        for code in [
            error::NOT_LEADER_OR_FOLLOWER,
            error::LEADER_NOT_AVAILABLE,
            error::REQUEST_TIMED_OUT,
            NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ] {
            assert!(is_retriable(code), "{}", error_name(code));
        }
        for code in [
            error::MESSAGE_TOO_LARGE,
            error::RECORD_LIST_TOO_LARGE,
            error::INVALID_TOPIC_EXCEPTION,
            error::INVALID_REQUIRED_ACKS,
            error::UNKNOWN_SERVER_ERROR,
        ] {
            assert!(!is_retriable(code), "{}", error_name(code));
        }
    }

    #[test]
    fn the_size_bound_covers_the_encoded_record() {
        let record = LineRecord {
            key: Some(b"key"),
            value: Some(&[7; 1000]),
            headers: vec![(b"h", Some(b"v")), (b"n", None)],
        };
        let mut writer = BatchWriter::new();
        writer.append_with_headers(0, record.key, record.value, &record.headers);
        assert!(writer.size() <= record.size_upper_bound());
        assert!(record.size_upper_bound() <= writer.size() + RECORD_OVERHEAD_MAX);
    }
}
