//! Produce requests through the broker's real dispatch into real logs:
//! the decoded batches are appended to hosted partitions (a plain topic
//! with small segments, a compacted one, a LogAppendTime one and one that
//! recompresses to gzip), so the log validator, offset assignment, segment
//! rolls and the produce response all see hostile batches. Whatever the
//! log accepted must read back as valid batches whose offsets follow on
//! from the previous log end and whose records carry offset deltas
//! 0, 1, 2, ...
//!
//! The first byte picks the Produce version (low nibble) and, unless bit
//! 0x10 is set, asks the target to recompute every batch's CRC after the
//! request is decoded, so mutated header fields reach the validator
//! instead of stopping at the CRC check. A topic name that is not one of
//! the hosted topics is mapped onto one, and every partition index onto
//! partition 0.
//! With `TARN_FUZZ_TRACE` set, each input's version and what it appended
//! are printed (to check that seeds decode and reach the log).
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

use tarn_metadata::topics::{create_topic_records, NewTopic};
use tarn_protocol::header::RequestHeader;
use tarn_protocol::messages::produce::ProduceRequest;
use tarn_protocol::record_batch::{
    compute_crc, decompressed_records, parse_header, validate_batch, BatchIter, RecordSkim,
};
use tarn_protocol::{Decode, Encode, Reader, Version};
use tarn_replication::replica_manager::ReadLimit;
use tarn_server::handlers::dispatch;
use tarn_server::{Broker, BrokerConfig, BrokerError, BrokerOptions};

const PRODUCE_KEY: i16 = 0;
/// Produce versions that carry v2 batches, and the first flexible one.
const FIRST_VERSION: i16 = 3;
const LAST_VERSION: i16 = 9;
const FLEXIBLE_MIN: i16 = 9;
/// The control byte's flag that keeps the CRCs as sent.
const KEEP_CRC_FLAG: u8 = 0x10;
/// Byte position of the CRC in a batch header.
const CRC_AT: usize = 17;
/// Decompression cap of the read-back check (the validator's is lower).
const READ_BACK_DECOMPRESSED_MAX_BYTES: usize = 128 << 20;

/// The hosted topics, each with one partition, and their configs.
const TOPICS: [(&str, &[(&str, &str)]); 4] = [
    ("plain", &[("segment.bytes", "65536")]),
    ("compacted", &[("cleanup.policy", "compact")]),
    (
        "append-time",
        &[("message.timestamp.type", "LogAppendTime")],
    ),
    ("gzip", &[("compression.type", "gzip")]),
];

struct World {
    runtime: tokio::runtime::Runtime,
    broker: Arc<Broker>,
    _dir: tempfile::TempDir,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let broker = Broker::start(BrokerOptions {
            data_dir: dir.path().to_owned(),
            node_id: 1,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
            config: BrokerConfig::default(),
            env: None,
        })
        .expect("start broker");
        for (name, configs) in TOPICS {
            create_topic(&broker, name, configs);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        World {
            runtime,
            broker,
            _dir: dir,
        }
    })
}

fn create_topic(broker: &Broker, name: &str, configs: &[(&str, &str)]) {
    broker
        .commit_metadata(|image| {
            let new = NewTopic {
                name,
                num_partitions: 1,
                replication_factor: 1,
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                    .collect(),
                assignments: None,
            };
            let (records, _) = create_topic_records(image, &broker.config, &new)
                .map_err(|e| BrokerError::Invalid(e.message))?;
            Ok((records, ()))
        })
        .expect("create a fuzz topic");
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, body)) = data.split_first() else {
        return;
    };
    let span = (LAST_VERSION - FIRST_VERSION + 1) as u8;
    let version = FIRST_VERSION + i16::from((control & 0x0f) % span);
    let v = Version::new(version, FLEXIBLE_MIN);
    let mut reader = Reader::new(Bytes::copy_from_slice(body));
    let trace = std::env::var_os("TARN_FUZZ_TRACE").is_some();
    let Ok(mut request) = ProduceRequest::decode(&mut reader, v) else {
        if trace {
            eprintln!("produce v{version}: does not decode");
        }
        return;
    };
    for topic in &mut request.topic_data {
        if !TOPICS.iter().any(|(name, _)| *name == topic.name) {
            let pick = topic
                .name
                .bytes()
                .fold(0usize, |h, b| h.wrapping_add(b.into()));
            topic.name = TOPICS[pick % TOPICS.len()].0.to_string();
        }
        for partition in &mut topic.partition_data {
            partition.index = 0;
            if control & KEEP_CRC_FLAG == 0 {
                if let Some(records) = &partition.records {
                    partition.records = Some(Bytes::from(with_valid_crcs(records)));
                }
            }
        }
    }
    let world = world();
    let ends_before: Vec<i64> = TOPICS
        .iter()
        .map(|(name, _)| log_end(world, name))
        .collect();
    let header = RequestHeader {
        api_key: PRODUCE_KEY,
        api_version: version,
        correlation_id: 7,
        client_id: Some("fuzz".into()),
    };
    let mut frame = Vec::with_capacity(body.len() + 64);
    header.encode(&mut frame, v.flexible);
    request.encode(&mut frame, v);
    let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
    let result = world
        .runtime
        .block_on(dispatch(&world.broker, peer, Bytes::from(frame)));
    // Either an answer or a refused request; never a panic or an abort.
    let _answer_or_refusal = result;
    for ((name, _), before) in TOPICS.iter().zip(ends_before) {
        let end = check_appended(world, name, before);
        if trace {
            eprintln!("produce v{version}: {name} log end {before} -> {end}");
        }
    }
});

/// The records with each whole batch's CRC recomputed; a tail that is not
/// a whole batch is kept as it is.
fn with_valid_crcs(records: &[u8]) -> Vec<u8> {
    let mut out = records.to_vec();
    let mut position = 0;
    while let Ok(header) = parse_header(&out[position..]) {
        let end = position + header.total_size();
        if end > out.len() {
            break;
        }
        let crc = compute_crc(&out[position..end]);
        out[position + CRC_AT..position + CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        position = end;
    }
    out
}

fn log_end(world: &World, topic: &str) -> i64 {
    let partition = world.broker.replicas.get(topic, 0).expect("hosted topic");
    partition.offsets().expect("offsets").high_watermark
}

/// Everything appended since `before` reads back as valid, contiguous
/// batches that agree with their records; returns the log end.
fn check_appended(world: &World, topic: &str, before: i64) -> i64 {
    let partition = world.broker.replicas.get(topic, 0).expect("hosted topic");
    let end = log_end(world, topic);
    assert!(
        end >= before,
        "{topic}: log end went back from {before} to {end}"
    );
    let mut next = before;
    while next < end {
        let (bytes, _) = partition
            .read(next, usize::MAX, true, ReadLimit::LogEnd)
            .expect("read what was appended");
        assert!(
            !bytes.is_empty(),
            "{topic}: nothing to read at {next} below {end}"
        );
        for item in BatchIter::new(&bytes) {
            let (position, header) = item.expect("appended batches validate");
            assert_eq!(header.base_offset, next, "{topic}: offsets are contiguous");
            assert_eq!(
                i64::from(header.records_count),
                header.offset_count(),
                "{topic}: record count matches the offset range"
            );
            let batch = &bytes[position..position + header.total_size()];
            assert!(validate_batch(batch).is_ok());
            let records = decompressed_records(batch, &header, READ_BACK_DECOMPRESSED_MAX_BYTES)
                .expect("appended records decode");
            let mut skim = RecordSkim::new(&records, header.records_count);
            for (index, record) in (0i32..).zip(skim.by_ref()) {
                let record = record.expect("appended records are well formed");
                assert_eq!(
                    record.offset_delta, index,
                    "{topic}: offset deltas count from 0"
                );
            }
            assert!(skim.finish().is_ok());
            next = header.last_offset() + 1;
        }
    }
    end
}
