//! The console's read-only JSON API under `/api/`: overview, topics, one
//! topic, the last records of a partition, consumer groups with lag, and
//! the chart series. Nothing here changes broker state.
//!
//! Reads of record data are bounded: at most [`MAX_RECORDS_SHOWN`] records
//! per request, read in chunks of [`RECORDS_READ_CHUNK_BYTES`] up to
//! [`RECORDS_READ_MAX_BYTES`] in all, and each key, value and header value
//! is shown up to [`VALUE_PREVIEW_BYTES`].

use std::collections::BTreeMap;

use serde::Serialize;

use tarn_protocol::record_batch::{
    BatchIter, Compression, RecordBatchHeader, RecordIter, TimestampType,
};

use tarn_config::TOPIC_CONFIGS;
use tarn_coordinator::group_lag::GroupMember;
use tarn_metadata::TopicInfo;
use tarn_replication::replica_manager::ReadLimit;

use super::{HttpState, Request, Response};
use crate::metrics::{
    group_lags, lag_per_group, partition_stats, PartitionLag, PartitionStats, SeriesPoint,
    TrafficTotals, SAMPLE_INTERVAL,
};

/// Most records one request may ask for.
pub const MAX_RECORDS_SHOWN: usize = 200;
/// Records shown when the request does not say.
pub const DEFAULT_RECORDS_SHOWN: usize = 20;
/// Bytes read from the log per step while collecting records.
pub const RECORDS_READ_CHUNK_BYTES: usize = 1 << 20;
/// Bytes read from the log per request at most.
pub const RECORDS_READ_MAX_BYTES: usize = 8 << 20;
/// Bytes of a key, value or header value shown.
pub const VALUE_PREVIEW_BYTES: usize = 1024;

pub fn handle(state: &HttpState, endpoint: &str, request: &Request) -> Response {
    match endpoint {
        "overview" => Response::json(&overview(state)),
        "topics" => Response::json(&topics(state)),
        "topic" => match request.param("name") {
            Some(name) => match topic_detail(state, name) {
                Some(detail) => Response::json(&detail),
                None => Response::text(404, format!("no topic named {name}\n")),
            },
            None => Response::text(400, "missing query parameter: name\n"),
        },
        "records" => records(state, request),
        "groups" => Response::json(&groups(state)),
        "series" => Response::json(&Series {
            interval_ms: SAMPLE_INTERVAL.as_millis() as u64,
            points: state.broker.metrics.series(),
        }),
        _ => Response::text(404, format!("no API endpoint /api/{endpoint}\n")),
    }
}

#[derive(Serialize)]
struct Series {
    interval_ms: u64,
    points: Vec<SeriesPoint>,
}

#[derive(Serialize)]
struct Overview {
    version: &'static str,
    cluster_id: String,
    node_id: i32,
    data_dir: String,
    uptime_seconds: f64,
    started_unix_ms: i64,
    topics: usize,
    partitions: usize,
    records: i64,
    log_bytes: u64,
    connections: i64,
    groups: usize,
    total_lag: i64,
    traffic: TrafficTotals,
    /// The latest chart point: rates over the last sample interval.
    now: Option<SeriesPoint>,
    /// Every registered broker, by id.
    brokers: Vec<BrokerRow>,
}

#[derive(Serialize)]
struct BrokerRow {
    id: i32,
    host: String,
    port: i32,
    rack: Option<String>,
    /// Fenced brokers are registered but serve no client and lead nothing.
    fenced: bool,
    /// Partitions it leads, and holds a replica of, in the metadata.
    leader_partitions: usize,
    replica_partitions: usize,
    /// The active controller, as this node knows it.
    controller: bool,
}

fn brokers(state: &HttpState, image: &tarn_metadata::MetadataImage) -> Vec<BrokerRow> {
    // A single node is its own controller, which its topology names as -1.
    let controller = if state.broker.is_active_controller() {
        state.broker.node_id
    } else {
        state.broker.controller_topology.active_id()
    };
    image
        .brokers
        .values()
        .map(|b| {
            let partitions = || image.topics().flat_map(|t| t.partitions.iter());
            BrokerRow {
                id: b.broker_id,
                host: b.host.clone(),
                port: b.port,
                rack: b.rack.clone(),
                fenced: b.fenced,
                leader_partitions: partitions().filter(|p| p.leader == b.broker_id).count(),
                replica_partitions: partitions()
                    .filter(|p| p.replicas.contains(&b.broker_id))
                    .count(),
                controller: b.broker_id == controller,
            }
        })
        .collect()
}

fn overview(state: &HttpState) -> Overview {
    let broker = &state.broker;
    let stats = partition_stats(broker);
    let lags = group_lags(&stats, state.groups.as_ref());
    let group_count = merged_group_ids(state, &lags).len();
    let image = broker.metadata.image();
    Overview {
        version: env!("CARGO_PKG_VERSION"),
        cluster_id: broker.cluster_id(),
        node_id: broker.node_id,
        data_dir: broker.data_dir.display().to_string(),
        uptime_seconds: broker.metrics.uptime().as_secs_f64(),
        started_unix_ms: (broker.metrics.started_unix_secs() * 1000.0) as i64,
        topics: image.topics().count(),
        partitions: stats.len(),
        records: stats.iter().map(record_count).sum(),
        log_bytes: stats.iter().map(|s| s.size_bytes).sum(),
        connections: broker.metrics.connections_active(),
        groups: group_count,
        total_lag: lags.iter().map(|l| l.lag).sum(),
        traffic: broker.metrics.traffic_totals(),
        now: broker.metrics.series().pop(),
        brokers: brokers(state, &image),
    }
}

/// Records currently in a partition's log (offsets between start and end;
/// compaction gaps would make this an upper bound).
fn record_count(s: &PartitionStats) -> i64 {
    (s.log_end_offset - s.log_start_offset).max(0)
}

#[derive(Serialize)]
struct TopicSummary {
    name: String,
    topic_id: String,
    internal: bool,
    partitions: usize,
    replication_factor: usize,
    records: i64,
    size_bytes: u64,
    log_end_offset: i64,
    traffic: TrafficTotals,
    config_overrides: BTreeMap<String, String>,
}

fn summarize(state: &HttpState, topic: &TopicInfo, stats: &[&PartitionStats]) -> TopicSummary {
    TopicSummary {
        name: topic.name.clone(),
        topic_id: topic.topic_id.to_base64(),
        internal: topic.is_internal(),
        partitions: topic.partitions.len(),
        replication_factor: topic.partitions.first().map_or(0, |p| p.replicas.len()),
        records: stats.iter().map(|s| record_count(s)).sum(),
        size_bytes: stats.iter().map(|s| s.size_bytes).sum(),
        log_end_offset: stats.iter().map(|s| s.log_end_offset).sum(),
        traffic: state.broker.metrics.topic_totals(&topic.name),
        config_overrides: topic.configs.clone(),
    }
}

fn topics(state: &HttpState) -> Vec<TopicSummary> {
    let stats = partition_stats(&state.broker);
    let image = state.broker.metadata.image();
    let mut topics: Vec<TopicSummary> = image
        .topics()
        .map(|topic| {
            let mine: Vec<&PartitionStats> =
                stats.iter().filter(|s| s.topic == topic.name).collect();
            summarize(state, topic, &mine)
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    topics
}

#[derive(Serialize)]
struct PartitionDetail {
    partition: i32,
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    /// A reassignment in progress: the replicas it adds and removes.
    adding_replicas: Vec<i32>,
    removing_replicas: Vec<i32>,
    /// `None` when this broker does not host the partition's log.
    log: Option<PartitionStats>,
    records: i64,
}

#[derive(Serialize)]
struct ConfigEntry {
    name: &'static str,
    value: String,
    /// `topic` (an override), `broker` (the broker's key was set) or `default`.
    source: &'static str,
}

#[derive(Serialize)]
struct TopicDetail {
    #[serde(flatten)]
    summary: TopicSummary,
    partition_details: Vec<PartitionDetail>,
    configs: Vec<ConfigEntry>,
}

fn topic_detail(state: &HttpState, name: &str) -> Option<TopicDetail> {
    let image = state.broker.metadata.image();
    let topic = image.topic(name)?;
    let stats: Vec<PartitionStats> = partition_stats(&state.broker)
        .into_iter()
        .filter(|s| s.topic == topic.name)
        .collect();
    let mut partitions: Vec<PartitionDetail> = topic
        .partitions
        .iter()
        .map(|p| {
            let log = stats
                .iter()
                .find(|s| s.partition == p.partition_id)
                .cloned();
            PartitionDetail {
                partition: p.partition_id,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                adding_replicas: p.adding_replicas.clone(),
                removing_replicas: p.removing_replicas.clone(),
                records: log.as_ref().map_or(0, record_count),
                log,
            }
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    let config = &state.broker.config;
    let configs = TOPIC_CONFIGS
        .iter()
        .map(|(def, broker_key)| ConfigEntry {
            name: def.name,
            value: config.topic_value(&topic.configs, def.name),
            source: if topic.configs.contains_key(def.name) {
                "topic"
            } else if broker_key.is_some_and(|k| config.is_set(k) || config.is_derived(k)) {
                "broker"
            } else {
                "default"
            },
        })
        .collect();
    let refs: Vec<&PartitionStats> = stats.iter().collect();
    Some(TopicDetail {
        summary: summarize(state, topic, &refs),
        partition_details: partitions,
        configs,
    })
}

/// A key, value or header value as the console shows it: UTF-8 text when
/// it is text, hex otherwise, cut at [`VALUE_PREVIEW_BYTES`].
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Preview {
    pub text: String,
    pub encoding: &'static str,
    pub size: usize,
    pub truncated: bool,
}

pub fn preview(bytes: &[u8]) -> Preview {
    let shown = &bytes[..bytes.len().min(VALUE_PREVIEW_BYTES)];
    let truncated = shown.len() < bytes.len();
    // A cut may split a UTF-8 sequence: accept a valid prefix of up to 3
    // bytes less.
    let text = match std::str::from_utf8(shown) {
        Ok(text) => Some(text),
        Err(e) if truncated && shown.len() - e.valid_up_to() < 4 && e.error_len().is_none() => {
            std::str::from_utf8(&shown[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    match text.filter(|t| !t.chars().any(|c| c.is_control() && !c.is_whitespace())) {
        Some(text) => Preview {
            text: text.to_owned(),
            encoding: "utf8",
            size: bytes.len(),
            truncated,
        },
        None => Preview {
            text: shown.iter().map(|b| format!("{b:02x}")).collect(),
            encoding: "hex",
            size: bytes.len(),
            truncated,
        },
    }
}

#[derive(Serialize)]
struct ShownRecord {
    offset: i64,
    timestamp: i64,
    timestamp_type: &'static str,
    key: Option<Preview>,
    value: Option<Preview>,
    headers: Vec<(String, Option<Preview>)>,
}

/// A batch whose records are not shown (compressed: no codec here yet).
#[derive(Serialize)]
struct HiddenBatch {
    base_offset: i64,
    last_offset: i64,
    records: i32,
    codec: &'static str,
    note: String,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Row {
    Record(ShownRecord),
    Batch(HiddenBatch),
}

impl Row {
    fn last_offset(&self) -> i64 {
        match self {
            Row::Record(r) => r.offset,
            Row::Batch(b) => b.last_offset,
        }
    }
}

#[derive(Serialize)]
struct RecordsPage {
    topic: String,
    partition: i32,
    log_start_offset: i64,
    log_end_offset: i64,
    from_offset: i64,
    rows: Vec<Row>,
    /// Set when the byte budget ran out before the log end.
    incomplete: bool,
}

pub fn codec_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

fn records(state: &HttpState, request: &Request) -> Response {
    let Some(topic) = request.param("topic") else {
        return Response::text(400, "missing query parameter: topic\n");
    };
    let Some(partition) = request
        .param("partition")
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return Response::text(400, "missing or bad query parameter: partition\n");
    };
    let limit = match request.param("limit").map(str::parse::<usize>) {
        None => DEFAULT_RECORDS_SHOWN,
        Some(Ok(n)) if (1..=MAX_RECORDS_SHOWN).contains(&n) => n,
        Some(_) => return Response::text(400, format!("limit must be 1..={MAX_RECORDS_SHOWN}\n")),
    };
    let Some(p) = state.broker.replicas.get(topic, partition) else {
        return Response::text(
            404,
            format!("this broker does not host {topic}-{partition}\n"),
        );
    };
    let offsets = match p.offsets() {
        Ok(o) => o,
        Err(e) => return Response::text(503, format!("{}\n", e.message)),
    };
    let from = offsets
        .log_start_offset
        .max(offsets.high_watermark - limit as i64);
    let mut rows: Vec<Row> = Vec::new();
    let mut next = from;
    let mut budget = RECORDS_READ_MAX_BYTES;
    while next < offsets.high_watermark && budget > 0 {
        let chunk = match p.read(
            next,
            RECORDS_READ_CHUNK_BYTES.min(budget),
            true,
            ReadLimit::HighWatermark,
        ) {
            Ok((chunk, _)) => chunk,
            Err(e) => {
                return Response::text(503, format!("read {topic}-{partition}: {}\n", e.message))
            }
        };
        if chunk.is_empty() {
            break;
        }
        budget = budget.saturating_sub(chunk.len());
        let before = next;
        for batch in BatchIter::new(&chunk) {
            let Ok((position, header)) = batch else {
                return Response::text(
                    500,
                    format!("corrupt batch in {topic}-{partition} near offset {next}\n"),
                );
            };
            collect_rows(&chunk[position..], &header, from, &mut rows);
            next = header.last_offset() + 1;
        }
        if next == before {
            break;
        }
    }
    // Keep the last `limit` rows (a batch row counts as one).
    let excess = rows.len().saturating_sub(limit);
    rows.drain(..excess);
    rows.sort_by_key(Row::last_offset);
    Response::json(&RecordsPage {
        topic: topic.to_owned(),
        partition,
        log_start_offset: offsets.log_start_offset,
        log_end_offset: offsets.high_watermark,
        from_offset: from,
        rows,
        incomplete: next < offsets.high_watermark,
    })
}

fn collect_rows(batch: &[u8], header: &RecordBatchHeader, from: i64, rows: &mut Vec<Row>) {
    if header.last_offset() < from {
        return;
    }
    let codec = header.compression();
    if codec != Compression::None {
        rows.push(Row::Batch(HiddenBatch {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            records: header.records_count,
            codec: codec_name(codec),
            note: format!("compressed ({}) — records not shown", codec_name(codec)),
        }));
        return;
    }
    let Ok(iter) = RecordIter::new(batch, header) else {
        return;
    };
    let log_append = header.timestamp_type() == TimestampType::LogAppendTime;
    for record in iter {
        let Ok(record) = record else {
            break;
        };
        let offset = header.base_offset + i64::from(record.offset_delta);
        if offset < from {
            continue;
        }
        rows.push(Row::Record(ShownRecord {
            offset,
            timestamp: if log_append {
                header.max_timestamp
            } else {
                header.base_timestamp.saturating_add(record.timestamp_delta)
            },
            timestamp_type: if log_append {
                "LogAppendTime"
            } else {
                "CreateTime"
            },
            key: record.key.map(preview),
            value: record.value.map(preview),
            headers: record
                .headers
                .iter()
                .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.map(preview)))
                .collect(),
        }));
    }
}

#[derive(Serialize)]
struct GroupView {
    group_id: String,
    state: String,
    protocol_type: String,
    members: Vec<GroupMember>,
    partitions: Vec<PartitionLag>,
    total_lag: i64,
}

#[derive(Serialize)]
struct GroupsPage {
    groups: Vec<GroupView>,
}

/// Group ids from the coordinator's list and from committed offsets.
fn merged_group_ids(state: &HttpState, lags: &[PartitionLag]) -> Vec<String> {
    let mut ids: Vec<String> = state
        .groups
        .groups()
        .into_iter()
        .map(|g| g.group_id)
        .chain(lags.iter().map(|l| l.group.clone()))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

fn groups(state: &HttpState) -> GroupsPage {
    let stats = partition_stats(&state.broker);
    let lags = group_lags(&stats, state.groups.as_ref());
    let totals: BTreeMap<String, i64> = lag_per_group(&lags).into_iter().collect();
    let mut overviews: BTreeMap<String, tarn_coordinator::group_lag::GroupOverview> = state
        .groups
        .groups()
        .into_iter()
        .map(|g| (g.group_id.clone(), g))
        .collect();
    let groups = merged_group_ids(state, &lags)
        .into_iter()
        .map(|id| {
            let overview = overviews.remove(&id).unwrap_or_default();
            GroupView {
                partitions: lags.iter().filter(|l| l.group == id).cloned().collect(),
                total_lag: totals.get(&id).copied().unwrap_or(0),
                state: overview.state,
                protocol_type: overview.protocol_type,
                members: overview.members,
                group_id: id,
            }
        })
        .collect();
    GroupsPage { groups }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_show_text_or_hex_and_cut_long_values() {
        let p = preview(b"hello");
        assert_eq!(
            (p.text.as_str(), p.encoding, p.truncated),
            ("hello", "utf8", false)
        );
        let p = preview(&[0, 1, 0xff]);
        assert_eq!((p.text.as_str(), p.encoding), ("0001ff", "hex"));
        let long = "é".repeat(VALUE_PREVIEW_BYTES);
        let p = preview(long.as_bytes());
        assert_eq!(p.encoding, "utf8");
        assert!(p.truncated);
        assert_eq!(p.size, long.len());
        assert!(p.text.len() <= VALUE_PREVIEW_BYTES);
    }
}
