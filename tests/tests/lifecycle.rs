//! Storage lifecycle through the real broker: durable produce
//! (`flush.messages`), retention by size and time, compaction, and many
//! cheap partitions.

use std::collections::BTreeMap;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{cli, run_with_timeout, BrokerOptions, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::record_batch::{BatchIter, Compression, RecordBatchHeader};

/// `tarn topics create` with `--config key=value` pairs, asserting success.
fn create_topic_with(broker: &TarnBroker, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    let partitions = partitions.to_string();
    let mut args = vec![
        "topics",
        "create",
        "--bootstrap-server",
        broker.bootstrap(),
        "--topic",
        topic,
        "--partitions",
        &partitions,
        "--replication-factor",
        "1",
    ];
    let pairs: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for pair in &pairs {
        args.push("--config");
        args.push(pair);
    }
    let out = broker.cli(&args);
    assert!(out.status.success(), "create topic {topic}: {out}");
}

fn keyed(key: &str, value: &str) -> Outgoing {
    Outgoing {
        record: Record::kv(key, value),
        partition: Some(0),
        timestamp_ms: None,
    }
}

/// Names of the files in a partition directory.
fn partition_files(data_dir: &Path, topic: &str, partition: i32) -> Vec<String> {
    let dir = data_dir.join(format!("{topic}-{partition}"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The broker's `/metrics` body.
fn scrape_metrics(broker: &TarnBroker) -> String {
    use std::io::{Read, Write};
    let addr = broker.http_addr();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the HTTP listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("set a read timeout");
    stream
        .write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (_, body) = response.split_once("\r\n\r\n").expect("a body");
    body.to_owned()
}

/// The value of the sample `name{topic="…",partition="…"}`.
fn partition_gauge(metrics: &str, name: &str, topic: &str, partition: i32) -> i64 {
    let series = format!("{name}{{topic=\"{topic}\",partition=\"{partition}\"}} ");
    let line = metrics
        .lines()
        .find(|l| l.starts_with(&series))
        .unwrap_or_else(|| panic!("no {series} in /metrics"));
    line[series.len()..].trim().parse().expect("a number")
}

#[test]
fn flush_messages_one_acknowledges_every_record_from_concurrent_producers() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        create_topic_with(&broker, "durable", 2, &[("flush.messages", "1")]);
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let bootstrap = broker.bootstrap().to_string();
                thread::spawn(move || {
                    let records: Vec<Outgoing> = (0..100)
                        .map(|i| Outgoing {
                            record: Record::kv(&format!("p{p}"), &format!("v{i}")),
                            partition: Some(i % 2),
                            timestamp_ms: None,
                        })
                        .collect();
                    TestProducer::new(&bootstrap, &[("acks", "all"), ("linger.ms", "0")])
                        .produce_all("durable", &records)
                        .len()
                })
            })
            .collect();
        let acked: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
        assert_eq!(acked, 400);
        // SIGKILL below leaves the page cache intact, so the restart alone
        // would pass without a single fsync. What proves durability is the
        // broker's own account: every acknowledged offset lies below the
        // offset its fsyncs covered (the power-cut simulation in
        // crates/server/src/crash_simulation.rs checks the same on a disk
        // that loses unsynced bytes).
        let metrics = scrape_metrics(&broker);
        let mut durable_total = 0;
        for partition in 0..2 {
            let end = partition_gauge(&metrics, "tarn_log_end_offset", "durable", partition);
            let durable =
                partition_gauge(&metrics, "tarn_log_durable_offset", "durable", partition);
            assert_eq!(
                durable, end,
                "partition {partition}: acknowledged but not fsynced"
            );
            durable_total += durable;
        }
        assert_eq!(durable_total, 400);
        broker.kill();
        broker.start_again();
        let consumed =
            kafka::consume_all(broker.bootstrap(), "durable", 400, Duration::from_secs(20));
        assert_eq!(consumed.len(), 400);
    });
}

#[test]
fn retention_by_size_and_time_deletes_whole_segments() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start_with(
            BrokerOptions::default()
                .set("log.retention.check.interval.ms", "200")
                .set("log.segment.delete.delay.ms", "300"),
        );
        let segment = [("segment.bytes", "2000")];
        create_topic_with(
            &broker,
            "by-size",
            1,
            &[segment[0], ("retention.bytes", "6000")],
        );
        create_topic_with(
            &broker,
            "by-time",
            1,
            &[segment[0], ("retention.ms", "1500")],
        );
        let records: Vec<Outgoing> = (0..300)
            .map(|i| {
                keyed(
                    &format!("k{i}"),
                    &format!("value-{i:04}-{}", "x".repeat(40)),
                )
            })
            .collect();
        let mut producer = TestProducer::new(
            broker.bootstrap(),
            &[("linger.ms", "0"), ("batch.size", "1000")],
        );
        producer.produce_all("by-size", &records);
        producer.produce_all("by-time", &records);

        // Size: whole segments go until at most retention.bytes (plus the
        // active segment) remain; the low watermark follows.
        wait_until("size retention", Duration::from_secs(20), || {
            kafka::watermarks(broker.bootstrap(), "by-size")[0].1 > 0
        });
        let (_, low, high) = kafka::watermarks(broker.bootstrap(), "by-size")[0];
        assert_eq!(high, 300);
        let logs: Vec<String> = partition_files(broker.data_dir(), "by-size", 0)
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .collect();
        assert_eq!(
            logs[0],
            format!("{low:020}.log"),
            "low watermark is a segment base"
        );
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            "by-size",
            (high - low) as usize,
            Duration::from_secs(20),
        );
        assert_eq!(consumed.first().unwrap().offset, low);
        wait_until(".deleted files removed", Duration::from_secs(20), || {
            !partition_files(broker.data_dir(), "by-size", 0)
                .iter()
                .any(|n| n.ends_with(".deleted"))
        });

        // Time: 1.5 s after the last record everything is gone, the active
        // segment included (rolled first), and offsets go on from 300.
        wait_until("time retention", Duration::from_secs(20), || {
            kafka::watermarks(broker.bootstrap(), "by-time")[0].1 == 300
        });
        let delivered = producer.produce_all("by-time", &[keyed("after", "retention")]);
        assert_eq!(delivered[0].offset, 300);
    });
}

/// Open file descriptors of a process that point into `dir` (other fds,
/// e.g. pipes a test process's librdkafka threads leak into children, are
/// not the broker's doing).
fn data_fds(pid: u32, dir: &Path) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list /proc/PID/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir))
        .map(|p| p.display().to_string())
        .collect()
}

fn assert_data_fds_at_most(broker: &TarnBroker, limit: usize) {
    let pid = broker.pid().expect("running");
    let open = data_fds(pid, broker.data_dir());
    assert!(
        open.len() <= limit,
        "more than {limit} data files open: {open:#?}"
    );
}

#[test]
fn many_idle_partitions_hold_no_files_and_survive_a_restart() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker =
            TarnBroker::start_with(BrokerOptions::default().set("log.open.files.max", "16"));
        // Only the metadata log is open.
        assert_data_fds_at_most(&broker, 1);
        for t in 0..10 {
            broker.create_topic(&format!("idle-{t}"), 100);
        }
        assert_data_fds_at_most(&broker, 1);
        // Data in many partitions: the file cache stays within its limit.
        let records: Vec<Outgoing> = (0..200)
            .map(|i| Outgoing {
                record: Record::value("x"),
                partition: Some(i % 100),
                timestamp_ms: None,
            })
            .collect();
        TestProducer::new(broker.bootstrap(), &[]).produce_all("idle-0", &records);
        assert_data_fds_at_most(&broker, 1 + 16);
        broker.restart();
        assert_eq!(kafka::partition_count(broker.bootstrap(), "idle-9"), 100);
        let consumed =
            kafka::consume_all(broker.bootstrap(), "idle-0", 200, Duration::from_secs(20));
        assert_eq!(consumed.len(), 200);
        assert_data_fds_at_most(&broker, 1 + 16);
    });
}

#[test]
fn compaction_keeps_the_latest_value_of_every_key() {
    compaction_keeps_latest("compacted", Compression::None, "3000");
}

/// Compressed batches are decompressed by the cleaner and compacted too;
/// a rewritten batch is compressed again with its original codec, as
/// Kafka's cleaner does, and librdkafka reads it back.
#[test]
fn compaction_keeps_gzip_batches_gzip() {
    compaction_keeps_latest("compacted-gzip", Compression::Gzip, "400");
}

#[test]
fn compaction_keeps_snappy_batches_snappy() {
    compaction_keeps_latest("compacted-snappy", Compression::Snappy, "1200");
}

#[test]
fn compaction_keeps_lz4_batches_lz4() {
    compaction_keeps_latest("compacted-lz4", Compression::Lz4, "1200");
}

#[test]
fn compaction_keeps_zstd_batches_zstd() {
    compaction_keeps_latest("compacted-zstd", Compression::Zstd, "400");
}

/// The producer's `compression.type` for a codec.
fn codec_name(codec: Compression) -> &'static str {
    match codec {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

fn compaction_keeps_latest(topic: &'static str, codec: Compression, segment_bytes: &'static str) {
    run_with_timeout(TEST_TIMEOUT, move || {
        let broker = TarnBroker::start_with(
            BrokerOptions::default()
                .set("log.cleaner.backoff.ms", "200")
                .set("log.segment.delete.delay.ms", "0"),
        );
        // Not compacted until everything is produced, so the codec of every
        // batch as produced can be read first: librdkafka sends a batch
        // uncompressed when compressing does not make it smaller.
        create_topic_with(
            &broker,
            topic,
            1,
            &[
                ("cleanup.policy", "delete"),
                ("segment.bytes", segment_bytes),
                // Every dirty segment gets cleaned, so the test can wait
                // for the cleaner to reach the active segment.
                ("min.cleanable.dirty.ratio", "0.01"),
            ],
        );
        let mut expected: BTreeMap<String, String> = BTreeMap::new();
        let mut records = Vec::new();
        for round in 0..20 {
            for k in 0..30 {
                let (key, value) = (format!("key-{k:02}"), format!("value-{round:02}-{k:02}"));
                expected.insert(key.clone(), value.clone());
                records.push(keyed(&key, &value));
                if k % 7 == 0 {
                    // A key written once survives, so most batches keep
                    // some records and lose others: they are rewritten.
                    let (key, value) = (format!("once-{round:02}-{k:02}"), format!("{round}"));
                    expected.insert(key.clone(), value.clone());
                    records.push(keyed(&key, &value));
                }
            }
        }
        let produced = records.len();
        TestProducer::new(
            broker.bootstrap(),
            &[
                ("linger.ms", "0"),
                ("batch.size", "1000"),
                ("compression.type", codec_name(codec)),
            ],
        )
        .produce_all(topic, &records);
        let segments = |broker: &TarnBroker| -> Vec<i64> {
            partition_files(broker.data_dir(), topic, 0)
                .iter()
                .filter_map(|n| n.strip_suffix(".log").and_then(|b| b.parse().ok()))
                .collect()
        };
        let partition_dir = broker.data_dir().join(format!("{topic}-0"));
        let batches = |broker: &TarnBroker| -> Vec<(String, RecordBatchHeader)> {
            let mut out = Vec::new();
            for base in segments(broker) {
                let name = format!("{base:020}.log");
                let bytes = std::fs::read(partition_dir.join(&name)).expect("read a segment");
                for item in BatchIter::new(&bytes) {
                    let (_, header) = item.unwrap_or_else(|e| panic!("{name}: {e}"));
                    out.push((name.clone(), header));
                }
            }
            out
        };
        // (last offset, codec) of every batch as produced, by base offset.
        let produced_codecs: BTreeMap<i64, (i64, Compression)> = batches(&broker)
            .iter()
            .map(|(_, h)| (h.base_offset, (h.last_offset(), h.compression())))
            .collect();
        assert!(
            produced_codecs.values().any(|(_, c)| *c == codec),
            "the producer compressed no batch with {codec:?}"
        );
        let out = cli::alter_topic_config(broker.bootstrap(), topic, "cleanup.policy=compact");
        assert!(out.status.success(), "compact {topic}: {out}");
        let checkpoint = || -> Option<i64> {
            let text = std::fs::read_to_string(partition_dir.join("cleaner-offset-checkpoint"));
            text.ok().and_then(|t| t.trim().parse().ok())
        };
        // Done once the cleaner checkpoint reaches the active segment.
        wait_until("the cleaner", Duration::from_secs(20), || {
            checkpoint() == segments(&broker).last().copied()
        });
        let (_, low, high) = kafka::watermarks(broker.bootstrap(), topic)[0];
        assert_eq!((low, high), (0, produced as i64));
        let active = *segments(&broker).last().unwrap();
        // Cleaned segments merge, so only the active one's base offset
        // tells that small segments rolled.
        assert!(active > produced as i64 / 3, "active segment at {active}");
        // On disk, every batch still carries the codec it was produced
        // with, including the rewritten ones (fewer records than offsets).
        let mut rewritten_in_codec = 0;
        for (name, header) in batches(&broker) {
            let (&base, &(last, produced)) = produced_codecs
                .range(..=header.base_offset)
                .next_back()
                .expect("a produced batch holds it");
            assert!(
                header.last_offset() <= last,
                "{name}: batch at {} spans produced batches",
                header.base_offset
            );
            assert_eq!(
                header.compression(),
                produced,
                "{name}: batch at offset {} (produced at {base})",
                header.base_offset
            );
            if i64::from(header.records_count) < header.offset_count() && produced == codec {
                rewritten_in_codec += 1;
            }
        }
        assert!(rewritten_in_codec > 0, "no {codec:?} batch was rewritten");
        // Read everything from the start: fewer records than produced, in
        // offset order, the latest value of every key, and at most one
        // record per key below the active segment.
        let all = read_to_end(&broker, topic, high);
        assert!(
            all.len() < produced,
            "{} of {produced} records left",
            all.len()
        );
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "offset order");
        let mut latest = BTreeMap::new();
        let mut seen_below_active = std::collections::HashSet::new();
        for (offset, key, value) in &all {
            latest.insert(key.clone(), value.clone());
            if *offset < active {
                assert!(
                    seen_below_active.insert(key.clone()),
                    "{key} twice below {active}"
                );
            }
        }
        assert_eq!(latest, expected);
    });
}

/// Consumes partition 0 of `topic` from the start up to offset `end`.
fn read_to_end(broker: &TarnBroker, topic: &str, end: i64) -> Vec<(i64, String, String)> {
    use rdkafka::consumer::Consumer;
    use rdkafka::message::Message;
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let consumer = kafka::consumer(broker.bootstrap(), &[]);
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while out.last().is_none_or(|(o, _, _)| *o < end - 1) {
        assert!(
            Instant::now() < deadline,
            "read stopped at {:?}",
            out.last()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("consume");
            let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap().to_vec()).unwrap();
            out.push((
                message.offset(),
                text(message.key()),
                text(message.payload()),
            ));
        }
    }
    out
}

/// Many produce requests written back to back on one connection to a
/// flush.messages=1 topic: they are appended in order and answered in
/// order (the connection pipelines them while earlier ones wait for fsync).
#[test]
fn pipelined_produces_on_one_connection_stay_in_order() {
    use std::io::{Read, Write};

    use bytes::Bytes;
    use tarn_protocol::header::{decode_response_header, RequestHeader};
    use tarn_protocol::messages::produce::*;
    use tarn_protocol::record_batch::RecordBatchBuilder;
    use tarn_protocol::{Decode, Encode, Reader, Version};

    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        create_topic_with(&broker, "pipelined", 1, &[("flush.messages", "1")]);
        let mut stream = std::net::TcpStream::connect(broker.bootstrap()).unwrap();
        let v = Version::new(9, 9);
        let requests = 40;
        let mut frames = Vec::new();
        for i in 0..requests {
            let records = RecordBatchBuilder::new()
                .record(0, Some(b"k"), Some(format!("{i}").as_bytes()))
                .record(0, Some(b"k"), Some(b"second"))
                .build();
            let request = ProduceRequest {
                transactional_id: None,
                acks: -1,
                timeout_ms: 1000,
                topic_data: vec![TopicProduceData {
                    name: "pipelined".into(),
                    topic_id: Default::default(),
                    partition_data: vec![PartitionProduceData {
                        index: 0,
                        records: Some(Bytes::from(records)),
                    }],
                }],
            };
            let header = RequestHeader {
                api_key: 0,
                api_version: 9,
                correlation_id: 1000 + i,
                client_id: Some("pipeline-test".into()),
            };
            let mut frame = vec![0u8; 4];
            header.encode(&mut frame, v.flexible);
            request.encode(&mut frame, v);
            let len = (frame.len() - 4) as i32;
            frame[..4].copy_from_slice(&len.to_be_bytes());
            frames.extend(frame);
        }
        stream.write_all(&frames).unwrap();
        for i in 0..requests {
            let mut len = [0u8; 4];
            stream.read_exact(&mut len).unwrap();
            let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
            stream.read_exact(&mut body).unwrap();
            let mut r = Reader::new(Bytes::from(body));
            assert_eq!(decode_response_header(&mut r, 0, true).unwrap(), 1000 + i);
            let response = ProduceResponse::decode(&mut r, v).unwrap();
            let p = &response.responses[0].partition_responses[0];
            assert_eq!(
                (p.error_code, p.base_offset),
                (0, i64::from(i) * 2),
                "request {i}"
            );
        }
    });
}

/// Consumes partition 0 of `topic` from the start up to offset `end`:
/// (offset, key, value or None for a tombstone, CreateTime timestamp).
fn read_with_tombstones(
    broker: &TarnBroker,
    topic: &str,
    end: i64,
) -> Vec<(i64, String, Option<String>, i64)> {
    use rdkafka::consumer::Consumer;
    use rdkafka::message::{Message, Timestamp};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let consumer = kafka::consumer(broker.bootstrap(), &[]);
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while out.last().is_none_or(|(o, _, _, _)| *o < end - 1) {
        assert!(
            Instant::now() < deadline,
            "read stopped at {:?}",
            out.last()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("consume");
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            let Timestamp::CreateTime(ts) = message.timestamp() else {
                panic!("{:?} at {}", message.timestamp(), message.offset());
            };
            out.push((
                message.offset(),
                text(message.key().unwrap()),
                message.payload().map(text),
                ts,
            ));
        }
    }
    out
}

/// KIP-534: a tombstone stays readable for delete.retention.ms counted from
/// the first cleaning that sees it, not from its own timestamp, so a
/// consumer is never cheated of a delete that a producer dated in the past
/// (a replay, a mirror). Then a later cleaning removes it.
#[test]
fn tombstones_stay_for_delete_retention_ms_after_the_first_cleaning_whatever_their_timestamp() {
    run_with_timeout(TEST_TIMEOUT, || {
        const T: &str = "tombstones";
        const OLD: i64 = 1_000_000_000_000; // 2001
        let broker = TarnBroker::start_with(
            BrokerOptions::default()
                .set("log.cleaner.backoff.ms", "200")
                .set("log.segment.delete.delay.ms", "0"),
        );
        create_topic_with(
            &broker,
            T,
            1,
            &[
                ("cleanup.policy", "compact"),
                ("segment.bytes", "2000"),
                ("min.cleanable.dirty.ratio", "0.01"),
                ("delete.retention.ms", "3000"),
            ],
        );
        let fillers = |from: usize| -> Vec<Outgoing> {
            (from..from + 60)
                .map(|i| keyed(&format!("filler-{i:03}"), &"x".repeat(100)))
                .collect()
        };
        let mut records: Vec<Outgoing> = (0..10).map(|k| keyed(&format!("key-{k}"), "v")).collect();
        for k in 0..5 {
            records.push(Outgoing {
                record: Record {
                    key: Some(format!("key-{k}").into_bytes()),
                    value: None,
                    headers: vec![],
                },
                partition: Some(0),
                timestamp_ms: Some(OLD + k),
            });
        }
        records.extend(fillers(0));
        let producer_config = [("linger.ms", "0"), ("batch.size", "500")];
        TestProducer::new(broker.bootstrap(), &producer_config).produce_all(T, &records);
        let partition_dir = broker.data_dir().join(format!("{T}-0"));
        let active = || -> Option<i64> {
            partition_files(broker.data_dir(), T, 0)
                .iter()
                .filter_map(|n| n.strip_suffix(".log").and_then(|b| b.parse().ok()))
                .max()
        };
        let checkpoint = || -> Option<i64> {
            let text = std::fs::read_to_string(partition_dir.join("cleaner-offset-checkpoint"));
            text.ok().and_then(|t| t.trim().parse().ok())
        };
        wait_until("the first cleaning", Duration::from_secs(20), || {
            checkpoint().is_some() && checkpoint() == active()
        });
        let end = kafka::watermarks(broker.bootstrap(), T)[0].2;
        let seen = read_with_tombstones(&broker, T, end);
        for k in 0..5 {
            let key = format!("key-{k}");
            let tombstones: Vec<_> = seen.iter().filter(|r| r.1 == key).collect();
            assert_eq!(tombstones.len(), 1, "{key}: {tombstones:?}");
            assert_eq!(tombstones[0].2, None, "{key} is deleted");
            assert_eq!(tombstones[0].3, OLD + k as i64, "{key} keeps its timestamp");
        }

        // delete.retention.ms later, a cleaning drops them.
        thread::sleep(Duration::from_millis(3_500));
        let first_active = active();
        TestProducer::new(broker.bootstrap(), &producer_config).produce_all(T, &fillers(100));
        wait_until("a second cleaning", Duration::from_secs(20), || {
            active() > first_active && checkpoint() == active()
        });
        let end = kafka::watermarks(broker.bootstrap(), T)[0].2;
        let seen = read_with_tombstones(&broker, T, end);
        for k in 0..10 {
            let key = format!("key-{k}");
            let left: Vec<_> = seen.iter().filter(|r| r.1 == key).collect();
            if k < 5 {
                assert!(left.is_empty(), "{key}: {left:?}");
            } else {
                assert_eq!(left.len(), 1, "{key}: {left:?}");
            }
        }
    });
}
