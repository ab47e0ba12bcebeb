//! Broker metrics: the counters the request path bumps, the ring buffer of
//! samples behind the console's charts, and the Prometheus text rendering
//! of `/metrics`.
//!
//! The hot path only touches atomics: per-API counters sit in a table
//! indexed by API key and version, and per-topic counters in a map that a
//! request looks up once per topic (a read lock, never held across an
//! await). Everything else — partition sizes and offsets, group lag, open
//! files, memory — is gathered when `/metrics` is scraped. Every table has
//! a fixed bound: [`MAX_API_KEY`], [`MAX_API_VERSION`], [`ERROR_CODE_SLOTS`],
//! [`MAX_TOPIC_SERIES`], [`SAMPLE_CAPACITY`], [`MAX_LAG_SERIES`].

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::fetch::FetchResponseOut;
use tarn_protocol::record_batch::parse_header;
use tarn_protocol::records::Records;
use tarn_storage::metrics::{HistogramSnapshot, LatencyHistogram, LATENCY_BUCKETS_SECONDS};

use tarn_coordinator::group_lag::{lag, GroupLagSource, SharedGroupLagSource};

use crate::broker::Broker;
use crate::error_names::error_name;
use crate::handlers;
use crate::refusals::Reason;

/// API keys counted; Kafka's are below 100.
pub const MAX_API_KEY: usize = 128;
/// Versions counted per API; higher ones share the last slot.
pub const MAX_API_VERSION: usize = 32;
/// Error codes counted, from -1 (UNKNOWN_SERVER_ERROR); others share the
/// last slot.
pub const ERROR_CODE_SLOTS: usize = 256;
/// Topics with their own byte and record counters; traffic to more topics
/// still counts in the totals.
pub const MAX_TOPIC_SERIES: usize = 100_000;
/// Consumer-group lag series rendered per scrape.
pub const MAX_LAG_SERIES: usize = 100_000;
/// How often the console's sampler records a point.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// Points kept: ten minutes at [`SAMPLE_INTERVAL`].
pub const SAMPLE_CAPACITY: usize = 300;
/// Groups whose lag is kept per sample (the ones with the most lag).
pub const MAX_CHART_GROUPS: usize = 8;

/// Bytes and records in and out of one topic (or of all of them).
#[derive(Debug, Default)]
pub struct TopicCounters {
    pub bytes_in: AtomicU64,
    pub records_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub records_out: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TrafficTotals {
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
}

impl TopicCounters {
    fn totals(&self) -> TrafficTotals {
        TrafficTotals {
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            records_in: self.records_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
        }
    }
}

/// Bytes and records in a buffer of record batches, from their headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordTotals {
    pub bytes: u64,
    pub records: u64,
}

impl RecordTotals {
    /// Walks the batch headers of `records` (no CRC check, no record
    /// decoding). A malformed tail stops the count; the bytes still count.
    pub fn of(records: Option<&[u8]>) -> RecordTotals {
        let Some(buf) = records else {
            return RecordTotals::default();
        };
        let mut position = 0usize;
        let mut count = 0u64;
        while position < buf.len() {
            match parse_header(&buf[position..]) {
                Ok(header) if header.total_size() <= buf.len() - position => {
                    count += u64::try_from(header.records_count).unwrap_or(0);
                    position += header.total_size();
                }
                // A partial batch (or garbage) ends the walk.
                _ => break,
            }
        }
        RecordTotals {
            bytes: buf.len() as u64,
            records: count,
        }
    }

    pub fn add(&mut self, other: RecordTotals) {
        self.bytes += other.bytes;
        self.records += other.records;
    }
}

#[derive(Debug)]
struct ApiMetrics {
    requests: [AtomicU64; MAX_API_VERSION],
    latency: LatencyHistogram,
}

/// Decrements the active-connection gauge when the connection ends.
#[derive(Debug)]
/// Holds one unit of a gauge (an open connection, a waiting fetch) until
/// dropped.
pub struct GaugeGuard<'a> {
    active: &'a AtomicI64,
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One point of the console's charts: cumulative traffic and the lag of
/// the most-lagging groups at `unix_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sample {
    pub unix_ms: i64,
    pub traffic: TrafficTotals,
    pub total_lag: i64,
    pub group_lag: Vec<(String, i64)>,
}

/// Rates between two consecutive samples, as the console charts them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesPoint {
    pub unix_ms: i64,
    pub produce_bytes_per_sec: f64,
    pub produce_records_per_sec: f64,
    pub fetch_bytes_per_sec: f64,
    pub fetch_records_per_sec: f64,
    pub total_lag: i64,
    pub group_lag: Vec<(String, i64)>,
}

#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    started_unix_secs: f64,
    apis: Box<[ApiMetrics]>,
    topics: RwLock<HashMap<String, Arc<TopicCounters>>>,
    totals: TopicCounters,
    produce_errors: Box<[AtomicU64]>,
    fetch_errors: Box<[AtomicU64]>,
    connections_active: AtomicI64,
    connections_accepted: AtomicU64,
    fetches_waiting: AtomicI64,
    /// ISR changes this broker, as leader, had committed: shrinks and
    /// expansions.
    pub isr_shrinks: AtomicU64,
    pub isr_expands: AtomicU64,
    /// Leaders the metadata log gave partitions (a `PartitionChange` that
    /// names one, as this node applied it): every election in the cluster.
    pub leader_elections: AtomicU64,
    /// Partition fetches a replication throttle held back, by side:
    /// leading (answered empty) and following (left out of a fetch).
    pub throttled_leader: AtomicU64,
    pub throttled_follower: AtomicU64,
    samples: Mutex<VecDeque<Sample>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn unix_ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn error_slot(code: ErrorCode) -> usize {
    (i32::from(code) + 1).clamp(0, ERROR_CODE_SLOTS as i32 - 1) as usize
}

fn slot_code(slot: usize) -> ErrorCode {
    slot as ErrorCode - 1
}

impl Metrics {
    pub fn new() -> Metrics {
        let counters = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Metrics {
            started: Instant::now(),
            started_unix_secs: unix_ms_now() as f64 / 1000.0,
            apis: (0..MAX_API_KEY)
                .map(|_| ApiMetrics {
                    requests: [const { AtomicU64::new(0) }; MAX_API_VERSION],
                    latency: LatencyHistogram::new(),
                })
                .collect(),
            topics: RwLock::new(HashMap::new()),
            totals: TopicCounters::default(),
            produce_errors: counters(ERROR_CODE_SLOTS),
            fetch_errors: counters(ERROR_CODE_SLOTS),
            connections_active: AtomicI64::new(0),
            connections_accepted: AtomicU64::new(0),
            fetches_waiting: AtomicI64::new(0),
            isr_shrinks: AtomicU64::new(0),
            leader_elections: AtomicU64::new(0),
            throttled_leader: AtomicU64::new(0),
            throttled_follower: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
            samples: Mutex::new(VecDeque::with_capacity(SAMPLE_CAPACITY)),
        }
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn started_unix_secs(&self) -> f64 {
        self.started_unix_secs
    }

    /// One request of `api_key`/`version` was answered after `elapsed`.
    pub fn request_done(&self, api_key: i16, version: i16, elapsed: Duration) {
        let Some(api) = usize::try_from(api_key)
            .ok()
            .and_then(|key| self.apis.get(key))
        else {
            return;
        };
        let version = usize::try_from(version)
            .unwrap_or(0)
            .min(MAX_API_VERSION - 1);
        api.requests[version].fetch_add(1, Ordering::Relaxed);
        api.latency.observe(elapsed);
    }

    /// Counts a new connection until the returned guard is dropped.
    pub fn connection_opened(&self) -> GaugeGuard<'_> {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        self.connections_active.fetch_add(1, Ordering::Relaxed);
        GaugeGuard {
            active: &self.connections_active,
        }
    }

    /// Counts a fetch waiting for data (Kafka's fetch purgatory) until the
    /// returned guard is dropped.
    pub fn fetch_waiting(&self) -> GaugeGuard<'_> {
        self.fetches_waiting.fetch_add(1, Ordering::Relaxed);
        GaugeGuard {
            active: &self.fetches_waiting,
        }
    }

    pub fn fetches_waiting(&self) -> i64 {
        self.fetches_waiting.load(Ordering::Relaxed)
    }

    pub fn connections_active(&self) -> i64 {
        self.connections_active.load(Ordering::Relaxed)
    }

    /// The counters of an existing topic; `None` once [`MAX_TOPIC_SERIES`]
    /// topics have counters. Callers only ask for topics that exist, so
    /// the map cannot be filled with names made up by clients.
    fn topic(&self, topic: &str) -> Option<Arc<TopicCounters>> {
        if let Some(counters) = self.topics.read().get(topic) {
            return Some(counters.clone());
        }
        let mut topics = self.topics.write();
        if topics.len() >= MAX_TOPIC_SERIES && !topics.contains_key(topic) {
            return None;
        }
        Some(topics.entry(topic.to_owned()).or_default().clone())
    }

    /// A produce appended `totals` to partitions of `topic`.
    pub fn produced(&self, topic: &str, totals: RecordTotals) {
        if totals == RecordTotals::default() {
            return;
        }
        for counters in [Some(&self.totals), self.topic(topic).as_deref()]
            .into_iter()
            .flatten()
        {
            counters.bytes_in.fetch_add(totals.bytes, Ordering::Relaxed);
            counters
                .records_in
                .fetch_add(totals.records, Ordering::Relaxed);
        }
    }

    /// A produce partition was answered with error `code`.
    pub fn produce_error(&self, code: ErrorCode) {
        self.produce_errors[error_slot(code)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts what a fetch response carries: bytes and records per topic
    /// and partition errors by code.
    pub fn fetched(&self, response: &FetchResponseOut) {
        for topic in &response.responses {
            let mut totals = RecordTotals::default();
            for partition in &topic.partitions {
                if partition.error_code != error::NONE {
                    self.fetch_errors[error_slot(partition.error_code)]
                        .fetch_add(1, Ordering::Relaxed);
                }
                totals.add(match &partition.records {
                    None => RecordTotals::default(),
                    Some(Records::Bytes(bytes)) => RecordTotals::of(Some(bytes)),
                    Some(Records::File { region, .. }) => RecordTotals {
                        bytes: u64::from(region.len),
                        records: region.records,
                    },
                });
            }
            if totals == RecordTotals::default() {
                continue;
            }
            for counters in [Some(&self.totals), self.topic(&topic.topic).as_deref()]
                .into_iter()
                .flatten()
            {
                counters
                    .bytes_out
                    .fetch_add(totals.bytes, Ordering::Relaxed);
                counters
                    .records_out
                    .fetch_add(totals.records, Ordering::Relaxed);
            }
        }
    }

    /// Traffic through all topics since start.
    pub fn traffic_totals(&self) -> TrafficTotals {
        self.totals.totals()
    }

    /// Traffic through `topic` since start (zero if none).
    pub fn topic_totals(&self, topic: &str) -> TrafficTotals {
        self.topics
            .read()
            .get(topic)
            .map(|c| c.totals())
            .unwrap_or_default()
    }

    /// Drops the counters of topics that no longer exist.
    pub fn retain_topics(&self, exists: impl Fn(&str) -> bool) {
        self.topics.write().retain(|name, _| exists(name));
    }

    /// Records a chart point; the oldest is dropped past [`SAMPLE_CAPACITY`].
    pub fn record_sample(&self, total_lag: i64, mut group_lag: Vec<(String, i64)>) {
        group_lag.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        group_lag.truncate(MAX_CHART_GROUPS);
        let sample = Sample {
            unix_ms: unix_ms_now(),
            traffic: self.traffic_totals(),
            total_lag,
            group_lag,
        };
        let mut samples = self.samples.lock();
        if samples.len() >= SAMPLE_CAPACITY {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Per-second rates between consecutive samples, oldest first.
    pub fn series(&self) -> Vec<SeriesPoint> {
        let samples: Vec<Sample> = self.samples.lock().iter().cloned().collect();
        series_from_samples(&samples)
    }
}

/// Rates between consecutive samples. A counter that went backwards
/// cannot happen within one process; it is treated as zero traffic.
pub fn series_from_samples(samples: &[Sample]) -> Vec<SeriesPoint> {
    samples
        .windows(2)
        .map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let seconds = ((b.unix_ms - a.unix_ms).max(1)) as f64 / 1000.0;
            let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / seconds;
            SeriesPoint {
                unix_ms: b.unix_ms,
                produce_bytes_per_sec: rate(a.traffic.bytes_in, b.traffic.bytes_in),
                produce_records_per_sec: rate(a.traffic.records_in, b.traffic.records_in),
                fetch_bytes_per_sec: rate(a.traffic.bytes_out, b.traffic.bytes_out),
                fetch_records_per_sec: rate(a.traffic.records_out, b.traffic.records_out),
                total_lag: b.total_lag,
                group_lag: b.group_lag.clone(),
            }
        })
        .collect()
}

/// One hosted partition's log, as `/metrics` and the console show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStats {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// What consumers can read up to (see `Partition::high_watermark`).
    pub high_watermark: i64,
    /// Offsets below this are fsynced: with `flush.messages=1` it reaches
    /// the log end before an append is acknowledged.
    pub durable_offset: i64,
    pub size_bytes: u64,
    pub segments: usize,
}

/// Every hosted partition with an open log, sorted by topic and partition.
/// Each log is locked only to copy a few numbers.
pub fn partition_stats(broker: &Broker) -> Vec<PartitionStats> {
    let mut stats: Vec<PartitionStats> = broker
        .replicas
        .partitions()
        .into_iter()
        .filter_map(|p| {
            p.with_log_ref(|log| PartitionStats {
                topic: p.topic.clone(),
                partition: p.index,
                log_start_offset: log.log_start_offset(),
                log_end_offset: log.log_end_offset(),
                high_watermark: p.high_watermark(),
                durable_offset: log.durable_offset(),
                size_bytes: log.size_bytes(),
                segments: log.segment_base_offsets().len(),
            })
            .ok()
        })
        .collect();
    stats.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    stats
}

/// One group's lag on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    /// The partition's high watermark, the end a consumer can reach (the
    /// name is what the console and its JSON have always read).
    pub log_end_offset: i64,
    pub lag: i64,
}

/// Lag of every committed offset on a partition this broker hosts, at most
/// [`MAX_LAG_SERIES`], sorted by group, topic and partition.
pub fn group_lags(stats: &[PartitionStats], groups: &dyn GroupLagSource) -> Vec<PartitionLag> {
    let ends: HashMap<(&str, i32), i64> = stats
        .iter()
        .map(|s| ((s.topic.as_str(), s.partition), s.high_watermark))
        .collect();
    let mut lags: Vec<PartitionLag> = groups
        .committed_offsets()
        .into_iter()
        .filter(|c| c.committed_offset >= 0)
        .filter_map(|c| {
            let end = *ends.get(&(c.topic.as_str(), c.partition))?;
            Some(PartitionLag {
                lag: lag(end, c.committed_offset),
                group: c.group,
                topic: c.topic,
                partition: c.partition,
                committed_offset: c.committed_offset,
                log_end_offset: end,
            })
        })
        .take(MAX_LAG_SERIES)
        .collect();
    lags.sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
    lags
}

/// Sums lag per group.
pub fn lag_per_group(lags: &[PartitionLag]) -> Vec<(String, i64)> {
    let mut per_group: Vec<(String, i64)> = Vec::new();
    for l in lags {
        match per_group.last_mut() {
            Some((group, total)) if *group == l.group => *total += l.lag,
            _ => per_group.push((l.group.clone(), l.lag)),
        }
    }
    per_group
}

/// Takes one chart sample and drops counters of deleted topics.
pub fn sample(broker: &Broker, groups: &dyn GroupLagSource) {
    let stats = partition_stats(broker);
    let per_group = lag_per_group(&group_lags(&stats, groups));
    let total = per_group.iter().map(|(_, l)| *l).sum();
    broker.metrics.record_sample(total, per_group);
    let image = broker.metadata.image();
    broker
        .metrics
        .retain_topics(|name| image.topic(name).is_some());
}

/// Samples every [`SAMPLE_INTERVAL`] until `shutdown` turns true, and
/// reports what the refusal log's rate limiter held back. Runs whether or
/// not the HTTP listener is on.
pub async fn run_sampler(
    broker: Arc<Broker>,
    groups: SharedGroupLagSource,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                let (broker, groups) = (broker.clone(), groups.clone());
                // Sampling locks each partition log briefly.
                let sampled = tokio::task::spawn_blocking(move || {
                    sample(&broker, groups.as_ref());
                    broker.refusals.flush_summary();
                })
                .await;
                if let Err(e) = sampled {
                    tracing::error!(error = %e, "metrics sampler failed");
                }
            }
            _ = shutdown.changed() => break,
        }
    }
}

/// What the process itself uses, read from /proc (Linux); `None` where
/// unavailable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessStats {
    pub open_fds: Option<u64>,
    pub resident_memory_bytes: Option<u64>,
}

/// Counts /proc/self/fd entries and reads VmRSS from /proc/self/status.
pub fn process_stats() -> ProcessStats {
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|dir| dir.count() as u64);
    let resident_memory_bytes = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| parse_vm_rss_bytes(&status));
    ProcessStats {
        open_fds,
        resident_memory_bytes,
    }
}

fn parse_vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Builds Prometheus text exposition format 0.0.4: each family's HELP
/// and TYPE once, then its samples.
pub struct PromWriter {
    out: String,
}

impl Default for PromWriter {
    fn default() -> Self {
        PromWriter::new()
    }
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn format_value(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

impl PromWriter {
    pub fn new() -> PromWriter {
        PromWriter { out: String::new() }
    }

    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape_label(value));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The `_bucket`, `_sum` and `_count` samples of one histogram.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        let bucket = format!("{name}_bucket");
        for (le, count) in LATENCY_BUCKETS_SECONDS.iter().zip(h.cumulative.iter()) {
            let le = format!("{le}");
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, *count as f64);
        }
        let mut with_le = labels.to_vec();
        with_le.push(("le", "+Inf"));
        self.sample(&bucket, &with_le, h.count as f64);
        self.sample(&format!("{name}_sum"), labels, h.sum_ns as f64 / 1e9);
        self.sample(&format!("{name}_count"), labels, h.count as f64);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// The whole `/metrics` page.
pub fn render(broker: &Broker, groups: &dyn GroupLagSource) -> String {
    let m = &broker.metrics;
    let mut w = PromWriter::new();
    w.family("tarn_build_info", "gauge", "Tarn version; always 1.");
    w.sample(
        "tarn_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    w.single(
        "tarn_uptime_seconds",
        "gauge",
        "Seconds since the broker started.",
        m.uptime().as_secs_f64(),
    );
    w.single(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch, in seconds.",
        m.started_unix_secs(),
    );
    render_requests(&mut w, m);
    render_traffic(&mut w, m);
    render_errors(
        &mut w,
        "tarn_produce_errors_total",
        "Produce partition responses with an error, by Kafka error code.",
        &m.produce_errors,
    );
    render_errors(
        &mut w,
        "tarn_fetch_errors_total",
        "Fetch partition responses with an error, by Kafka error code.",
        &m.fetch_errors,
    );
    render_refusals(&mut w, broker);
    w.single(
        "tarn_connections_active",
        "gauge",
        "Open client connections.",
        m.connections_active() as f64,
    );
    w.single(
        "tarn_connections_accepted_total",
        "counter",
        "Client connections accepted since start.",
        m.connections_accepted.load(Ordering::Relaxed) as f64,
    );
    w.single(
        "tarn_fetch_purgatory_size",
        "gauge",
        "Fetches waiting for min_bytes of data or their max_wait_ms.",
        m.fetches_waiting() as f64,
    );
    w.single(
        "tarn_fetch_sessions",
        "gauge",
        "Incremental fetch sessions (KIP-227) in the session cache.",
        broker.fetch_sessions.len() as f64,
    );
    w.single(
        "tarn_fetch_session_partitions",
        "gauge",
        "Partitions held by all fetch sessions together.",
        broker.fetch_sessions.partitions_cached() as f64,
    );
    let process = process_stats();
    if let Some(fds) = process.open_fds {
        w.single(
            "process_open_fds",
            "gauge",
            "Open file descriptors (/proc/self/fd).",
            fds as f64,
        );
    }
    if let Some(rss) = process.resident_memory_bytes {
        w.single(
            "process_resident_memory_bytes",
            "gauge",
            "Resident set size in bytes.",
            rss as f64,
        );
    }
    let fsync = tarn_storage::metrics::FSYNC_LATENCY.snapshot();
    w.single(
        "tarn_fsync_total",
        "counter",
        "fsync calls on segment, index and metadata files.",
        fsync.count as f64,
    );
    w.family(
        "tarn_fsync_duration_seconds",
        "histogram",
        "Latency of fsync calls.",
    );
    w.histogram("tarn_fsync_duration_seconds", &[], &fsync);
    render_replication(&mut w, broker);
    let stats = partition_stats(broker);
    render_partitions(&mut w, &stats);
    render_lag(&mut w, &group_lags(&stats, groups));
    w.finish()
}

/// Replication as Kafka's ReplicaManager reports it: partitions led here
/// whose ISR is short of their replicas, ISR changes, and how far the
/// slowest follower is behind.
fn render_replication(w: &mut PromWriter, broker: &Broker) {
    let m = &broker.metrics;
    let mut under_replicated = 0;
    let mut leaders = 0;
    let mut max_lag = 0;
    for partition in broker.replicas.partitions() {
        if partition.role() != tarn_replication::replica_manager::Role::Leader {
            continue;
        }
        leaders += 1;
        if partition.under_replicated() {
            under_replicated += 1;
        }
        max_lag = max_lag.max(partition.max_follower_lag());
    }
    w.single(
        "tarn_leader_partitions",
        "gauge",
        "Partitions this broker leads.",
        leaders as f64,
    );
    w.single(
        "tarn_under_replicated_partitions",
        "gauge",
        "Partitions led here whose ISR is smaller than their replicas.",
        under_replicated as f64,
    );
    w.single(
        "tarn_isr_shrinks_total",
        "counter",
        "ISR shrinks of partitions led here, as committed by the controller.",
        m.isr_shrinks.load(Ordering::Relaxed) as f64,
    );
    w.single(
        "tarn_isr_expands_total",
        "counter",
        "ISR expansions of partitions led here, as committed by the controller.",
        m.isr_expands.load(Ordering::Relaxed) as f64,
    );
    w.single(
        "tarn_leader_elections_total",
        "counter",
        "Partition leaders elected in the cluster (leadership given to a broker), as the metadata log committed them.",
        m.leader_elections.load(Ordering::Relaxed) as f64,
    );
    w.single(
        "tarn_replication_throttled_leader_total",
        "counter",
        "Follower fetches of a partition this leader answered empty, its replication throttle being exceeded.",
        m.throttled_leader.load(Ordering::Relaxed) as f64,
    );
    w.single(
        "tarn_replication_throttled_follower_total",
        "counter",
        "Partitions this follower left out of a fetch, its replication throttle being exceeded.",
        m.throttled_follower.load(Ordering::Relaxed) as f64,
    );
    let image = broker.metadata.image();
    let reassigning = image
        .topics()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.leader == broker.node_id && p.is_reassigning())
        .count();
    w.single(
        "tarn_reassigning_partitions",
        "gauge",
        "Partitions led here with a reassignment in progress.",
        reassigning as f64,
    );
    w.single(
        "tarn_replica_max_lag_records",
        "gauge",
        "The most records any follower of a partition led here is behind its log end.",
        max_lag as f64,
    );
}

/// A metric family drawn from one struct: name, help, and the getter.
type Family<T, V> = (&'static str, &'static str, fn(&T) -> V);

fn render_requests(w: &mut PromWriter, m: &Metrics) {
    w.family(
        "tarn_requests_total",
        "counter",
        "Requests answered, by API and version.",
    );
    for spec in handlers::APIS {
        let Some(api) = m.apis.get(spec.key as usize) else {
            continue;
        };
        for (version, count) in api.requests.iter().enumerate() {
            let count = count.load(Ordering::Relaxed);
            if count > 0 {
                let version = version.to_string();
                w.sample(
                    "tarn_requests_total",
                    &[("api", spec.name), ("version", &version)],
                    count as f64,
                );
            }
        }
    }
    w.family(
        "tarn_request_duration_seconds",
        "histogram",
        "Time from a request's arrival to its response being ready, by API.",
    );
    for spec in handlers::APIS {
        if let Some(api) = m.apis.get(spec.key as usize) {
            w.histogram(
                "tarn_request_duration_seconds",
                &[("api", spec.name)],
                &api.latency.snapshot(),
            );
        }
    }
}

fn render_traffic(w: &mut PromWriter, m: &Metrics) {
    let mut topics: Vec<(String, TrafficTotals)> = m
        .topics
        .read()
        .iter()
        .map(|(name, c)| (name.clone(), c.totals()))
        .collect();
    topics.sort_by(|a, b| a.0.cmp(&b.0));
    let families: [Family<TrafficTotals, u64>; 4] = [
        (
            "tarn_topic_bytes_in_total",
            "Record batch bytes appended by produce requests, by topic.",
            |t| t.bytes_in,
        ),
        (
            "tarn_topic_records_in_total",
            "Records appended by produce requests, by topic.",
            |t| t.records_in,
        ),
        (
            "tarn_topic_bytes_out_total",
            "Record batch bytes returned by fetch requests, by topic.",
            |t| t.bytes_out,
        ),
        (
            "tarn_topic_records_out_total",
            "Records returned by fetch requests, by topic (offsets spanned by the batches read from disk: a compacted log's gaps count).",
            |t| t.records_out,
        ),
    ];
    for (name, help, get) in families {
        w.family(name, "counter", help);
        for (topic, totals) in &topics {
            w.sample(name, &[("topic", topic)], get(totals) as f64);
        }
    }
}

fn render_errors(w: &mut PromWriter, name: &str, help: &str, slots: &[AtomicU64]) {
    w.family(name, "counter", help);
    for (slot, count) in slots.iter().enumerate() {
        let count = count.load(Ordering::Relaxed);
        if count > 0 {
            let code = slot_code(slot);
            let code_text = code.to_string();
            w.sample(
                name,
                &[("code", &code_text), ("error", error_name(code))],
                count as f64,
            );
        }
    }
}

fn render_refusals(w: &mut PromWriter, broker: &Broker) {
    w.family(
        "tarn_refused_requests_total",
        "counter",
        "Requests refused for a reason worth an operator's attention.",
    );
    for reason in Reason::ALL {
        w.sample(
            "tarn_refused_requests_total",
            &[("reason", reason.as_str())],
            broker.refusals.refused_total(reason) as f64,
        );
    }
    w.single(
        "tarn_log_messages_suppressed_total",
        "counter",
        "Refused-request log messages held back by the rate limiter.",
        broker.refusals.suppressed_total() as f64,
    );
}

fn render_partitions(w: &mut PromWriter, stats: &[PartitionStats]) {
    w.single(
        "tarn_partitions",
        "gauge",
        "Partitions hosted by this broker.",
        stats.len() as f64,
    );
    let families: [Family<PartitionStats, f64>; 5] = [
        (
            "tarn_log_size_bytes",
            "Bytes in a partition's segment files.",
            |s| s.size_bytes as f64,
        ),
        ("tarn_log_segments", "Segments in a partition's log.", |s| {
            s.segments as f64
        }),
        (
            "tarn_log_start_offset",
            "A partition's log start offset.",
            |s| s.log_start_offset as f64,
        ),
        (
            "tarn_log_end_offset",
            "A partition's log end offset.",
            |s| s.log_end_offset as f64,
        ),
        (
            "tarn_log_durable_offset",
            "Offsets of a partition below this are fsynced.",
            |s| s.durable_offset as f64,
        ),
    ];
    for (name, help, get) in families {
        w.family(name, "gauge", help);
        for s in stats {
            let partition = s.partition.to_string();
            w.sample(
                name,
                &[("topic", &s.topic), ("partition", &partition)],
                get(s),
            );
        }
    }
}

fn render_lag(w: &mut PromWriter, lags: &[PartitionLag]) {
    for (name, help, is_lag) in [
        (
            "tarn_group_committed_offset",
            "A consumer group's committed offset on a partition.",
            false,
        ),
        (
            "tarn_group_lag",
            "Records between a group's committed offset and the partition's log end offset.",
            true,
        ),
    ] {
        w.family(name, "gauge", help);
        for l in lags {
            let partition = l.partition.to_string();
            let value = if is_lag { l.lag } else { l.committed_offset };
            w.sample(
                name,
                &[
                    ("group", &l.group),
                    ("topic", &l.topic),
                    ("partition", &partition),
                ],
                value as f64,
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use tarn_protocol::messages::fetch::{FetchableTopicResponseOut, PartitionDataOut};
    use tarn_protocol::record_batch::build_batch_for_tests;

    use super::*;

    #[test]
    fn record_totals_walk_batch_headers() {
        let mut buf = build_batch_for_tests(0, 3, 1000);
        buf.extend(build_batch_for_tests(3, 4, 1000));
        let t = RecordTotals::of(Some(&buf));
        assert_eq!(t.records, 7);
        assert_eq!(t.bytes, buf.len() as u64);
        // A truncated tail stops the count but not the byte total.
        let t = RecordTotals::of(Some(&buf[..buf.len() - 5]));
        assert_eq!(t.records, 3);
        assert_eq!(RecordTotals::of(None), RecordTotals::default());
    }

    #[test]
    fn request_counters_clamp_out_of_range_keys_and_versions() {
        let m = Metrics::new();
        m.request_done(0, 9, Duration::from_millis(2));
        m.request_done(0, 9, Duration::from_millis(2));
        m.request_done(0, 500, Duration::from_millis(2));
        m.request_done(-3, 1, Duration::from_millis(2));
        m.request_done(i16::MAX, 1, Duration::from_millis(2));
        assert_eq!(m.apis[0].requests[9].load(Ordering::Relaxed), 2);
        assert_eq!(
            m.apis[0].requests[MAX_API_VERSION - 1].load(Ordering::Relaxed),
            1
        );
        assert_eq!(m.apis[0].latency.snapshot().count, 3);
    }

    #[test]
    fn produce_and_fetch_count_per_topic_and_in_total() {
        let m = Metrics::new();
        let batch = build_batch_for_tests(0, 5, 1000);
        m.produced("t", RecordTotals::of(Some(&batch)));
        m.produced("t", RecordTotals::of(Some(&batch)));
        m.produce_error(error::CORRUPT_MESSAGE);
        m.produce_error(-1);
        m.produce_error(i16::MAX);
        let response = FetchResponseOut {
            responses: vec![FetchableTopicResponseOut {
                topic: "t".into(),
                partitions: vec![
                    PartitionDataOut {
                        partition_index: 0,
                        records: Some(Records::Bytes(bytes::Bytes::from(batch.clone()))),
                        ..Default::default()
                    },
                    PartitionDataOut {
                        partition_index: 1,
                        error_code: error::OFFSET_OUT_OF_RANGE,
                        records: Some(Records::Bytes(bytes::Bytes::new())),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        m.fetched(&response);
        let t = m.topic_totals("t");
        assert_eq!(t.records_in, 10);
        assert_eq!(t.bytes_in, 2 * batch.len() as u64);
        assert_eq!(t.records_out, 5);
        assert_eq!(t.bytes_out, batch.len() as u64);
        assert_eq!(m.traffic_totals(), t);
        assert_eq!(
            m.produce_errors[error_slot(error::CORRUPT_MESSAGE)].load(Ordering::Relaxed),
            1
        );
        assert_eq!(m.produce_errors[0].load(Ordering::Relaxed), 1);
        assert_eq!(
            m.produce_errors[ERROR_CODE_SLOTS - 1].load(Ordering::Relaxed),
            1
        );
        assert_eq!(
            m.fetch_errors[error_slot(error::OFFSET_OUT_OF_RANGE)].load(Ordering::Relaxed),
            1
        );
        m.retain_topics(|_| false);
        assert_eq!(m.topic_totals("t"), TrafficTotals::default());
    }

    #[test]
    fn connection_guard_tracks_active_connections() {
        let m = Metrics::new();
        let a = m.connection_opened();
        let b = m.connection_opened();
        assert_eq!(m.connections_active(), 2);
        drop(a);
        assert_eq!(m.connections_active(), 1);
        drop(b);
        assert_eq!(m.connections_active(), 0);
        assert_eq!(m.connections_accepted.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn samples_are_bounded_and_turn_into_rates() {
        let m = Metrics::new();
        for _ in 0..SAMPLE_CAPACITY + 10 {
            m.record_sample(0, vec![]);
        }
        assert_eq!(m.samples.lock().len(), SAMPLE_CAPACITY);
        let traffic = |bytes_in, records_in| TrafficTotals {
            bytes_in,
            records_in,
            ..Default::default()
        };
        let samples = vec![
            Sample {
                unix_ms: 1_000,
                traffic: traffic(0, 0),
                total_lag: 0,
                group_lag: vec![],
            },
            Sample {
                unix_ms: 3_000,
                traffic: traffic(2_000, 10),
                total_lag: 7,
                group_lag: vec![("g".into(), 7)],
            },
        ];
        let series = series_from_samples(&samples);
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].produce_bytes_per_sec, 1_000.0);
        assert_eq!(series[0].produce_records_per_sec, 5.0);
        assert_eq!(series[0].fetch_bytes_per_sec, 0.0);
        assert_eq!(series[0].total_lag, 7);
    }

    #[test]
    fn chart_samples_keep_the_most_lagging_groups() {
        let m = Metrics::new();
        let groups: Vec<(String, i64)> = (0..20).map(|i| (format!("g{i:02}"), i)).collect();
        m.record_sample(190, groups);
        let samples = m.samples.lock();
        let kept = &samples[0].group_lag;
        assert_eq!(kept.len(), MAX_CHART_GROUPS);
        assert_eq!(kept[0], ("g19".to_string(), 19));
    }

    #[test]
    fn prometheus_text_is_well_formed() {
        let mut w = PromWriter::new();
        w.family("x_total", "counter", "An example.");
        w.sample("x_total", &[("topic", "a\"b\\c\nd")], 3.0);
        w.sample("x_total", &[], 0.5);
        let h = LatencyHistogram::new();
        h.observe(Duration::from_millis(1));
        w.family("lat_seconds", "histogram", "Latency.");
        w.histogram("lat_seconds", &[("api", "Produce")], &h.snapshot());
        let text = w.finish();
        assert!(text.contains("# TYPE x_total counter\n"));
        assert!(text.contains("x_total{topic=\"a\\\"b\\\\c\\nd\"} 3\n"));
        assert!(text.contains("x_total 0.5\n"));
        assert!(text.contains("lat_seconds_bucket{api=\"Produce\",le=\"0.0005\"} 0\n"));
        assert!(text.contains("lat_seconds_bucket{api=\"Produce\",le=\"0.001\"} 1\n"));
        assert!(text.contains("lat_seconds_bucket{api=\"Produce\",le=\"+Inf\"} 1\n"));
        assert!(text.contains("lat_seconds_count{api=\"Produce\"} 1\n"));
        assert!(text.contains("lat_seconds_sum{api=\"Produce\"} 0.001\n"));
        check_exposition_format(&text);
    }

    #[test]
    fn vm_rss_is_parsed_from_proc_status() {
        let status = "Name:\ttarn\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss_bytes(status), Some(12345 * 1024));
        assert_eq!(parse_vm_rss_bytes("Name: x\n"), None);
        let live = process_stats();
        assert!(live.open_fds.unwrap() > 0);
        assert!(live.resident_memory_bytes.unwrap() > 0);
    }

    /// Checks the grammar of the text format: comments are HELP/TYPE, a
    /// family is declared once and before its samples, and every sample is
    /// `name{labels} value` with a parsable value.
    pub(crate) fn check_exposition_format(text: &str) {
        let mut declared: HashMap<String, String> = HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (kw, name, arg) = (parts.next(), parts.next(), parts.next());
                assert!(matches!(kw, Some("HELP") | Some("TYPE")), "{line}");
                let (name, arg) = (name.unwrap(), arg.unwrap());
                if kw == Some("TYPE") {
                    assert!(["counter", "gauge", "histogram"].contains(&arg), "{line}");
                    assert!(
                        declared.insert(name.to_owned(), arg.to_owned()).is_none(),
                        "family {name} declared twice"
                    );
                }
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect(line);
            assert!(
                value == "+Inf" || value.parse::<f64>().is_ok(),
                "bad value in {line}"
            );
            let name = series.split('{').next().unwrap();
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "bad name in {line}"
            );
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| declared.get(*f).map(String::as_str) == Some("histogram"))
                })
                .unwrap_or(name);
            assert!(declared.contains_key(family), "undeclared family in {line}");
            if name.ends_with("_total") {
                assert_eq!(declared[family], "counter", "{line}");
            }
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                }
            }
        }
    }
}
