//! Seeing inside the broker, checked as an operator would: scrape
//! `/metrics` while real clients produce and consume and compare the
//! counters with what was sent; `/health` and the HTTP server's limits; the
//! rate-limited log of refused requests; JSON logs; `tarn dump-log` on a
//! segment written by librdkafka, and `--verify-index` on a corrupted index.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tarn_cli::client::Client;
use tarn_e2e::http::{http, must, raw_http, scrape};
use tarn_e2e::kafka::{consume_all, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::error;
use tarn_protocol::messages::fetch::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
use tarn_protocol::messages::produce::*;
use tarn_protocol::record_batch::RecordBatchBuilder;
use tarn_protocol::Uuid;

/// Sum of every sample of `name` whose labels contain all of `labels`.
fn sum_where(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

#[test]
fn metrics_match_what_clients_produced_and_consumed() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("metered", 3);
        let records: Vec<Outgoing> = (0..500)
            .map(|i| Record::kv(&format!("k{i}"), &format!("value-{i}")).into())
            .collect();
        let mut producer = TestProducer::new(broker.bootstrap(), &[("acks", "all")]);
        producer.produce_all("metered", &records);
        let consumed = consume_all(broker.bootstrap(), "metered", 500, Duration::from_secs(30));
        assert_eq!(consumed.len(), 500);

        let m = scrape(&broker);
        let topic = r#"{topic="metered"}"#;
        assert_eq!(
            must(&m, &format!("tarn_topic_records_in_total{topic}")),
            500.0
        );
        assert_eq!(
            must(&m, &format!("tarn_topic_records_out_total{topic}")),
            500.0
        );
        // Batches are stored as received, so bytes in equal the log size.
        let bytes_in = must(&m, &format!("tarn_topic_bytes_in_total{topic}"));
        let log_bytes = sum_where(&m, "tarn_log_size_bytes", &[r#"topic="metered""#]);
        assert_eq!(bytes_in, log_bytes);
        assert_eq!(
            must(&m, &format!("tarn_topic_bytes_out_total{topic}")),
            bytes_in
        );
        assert_eq!(
            sum_where(&m, "tarn_log_end_offset", &[r#"topic="metered""#]),
            500.0
        );
        for p in 0..3 {
            let labels = format!(r#"{{topic="metered",partition="{p}"}}"#);
            assert_eq!(must(&m, &format!("tarn_log_start_offset{labels}")), 0.0);
            assert!(must(&m, &format!("tarn_log_end_offset{labels}")) > 0.0);
        }
        // The consumer's group.id created __consumer_offsets (50 partitions)
        // on its first FindCoordinator, as Kafka does.
        assert_eq!(must(&m, "tarn_partitions"), 53.0);
        // Every produce request is counted by version and timed.
        let produce_requests = sum_where(&m, "tarn_requests_total", &[r#"api="Produce""#]);
        assert!(produce_requests >= 1.0);
        assert_eq!(
            must(&m, r#"tarn_request_duration_seconds_count{api="Produce"}"#),
            produce_requests
        );
        assert_eq!(
            must(
                &m,
                r#"tarn_request_duration_seconds_bucket{api="Produce",le="+Inf"}"#
            ),
            produce_requests
        );
        assert!(sum_where(&m, "tarn_requests_total", &[r#"api="Fetch""#]) >= 1.0);
        assert!(sum_where(&m, "tarn_requests_total", &[r#"api="Metadata""#]) >= 1.0);
        assert!(must(&m, "tarn_connections_accepted_total") >= 2.0);
        assert!(must(&m, "process_open_fds") > 0.0);
        assert!(must(&m, "process_resident_memory_bytes") > 1e6);
        assert!(must(&m, "tarn_uptime_seconds") > 0.0);
        // Creating the topic fsynced the metadata log at least.
        assert!(must(&m, "tarn_fsync_total") >= 1.0);
        assert_eq!(
            must(&m, "tarn_fsync_total"),
            must(&m, "tarn_fsync_duration_seconds_count")
        );
        assert_eq!(must(&m, r#"tarn_build_info{version="0.1.0"}"#), 1.0);
        // No group coordinator yet: the lag families exist but are empty.
        assert!(m.contains("# TYPE tarn_group_lag gauge"));
        assert!(!m.contains("tarn_group_lag{"));
    });
}

fn produce(client: &mut Client, topic: &str, partition: i32, records: Vec<u8>) -> i16 {
    let request = ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: topic.into(),
            topic_id: Default::default(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(Bytes::from(records)),
            }],
        }],
    };
    let response: ProduceResponse = client.call(0, 9, 9, &request).unwrap();
    response.responses[0].partition_responses[0].error_code
}

#[test]
fn produce_and_fetch_errors_are_counted_by_code() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("errs", 1);
        let mut client = Client::connect(broker.bootstrap()).unwrap();
        let good = RecordBatchBuilder::new()
            .record(1, Some(b"k"), Some(b"v"))
            .build();
        assert_eq!(produce(&mut client, "errs", 0, good.clone()), error::NONE);
        let mut corrupt = good.clone();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0x55;
        for _ in 0..2 {
            assert_eq!(
                produce(&mut client, "errs", 0, corrupt.clone()),
                error::CORRUPT_MESSAGE
            );
        }
        assert_eq!(
            produce(&mut client, "errs", 9, good.clone()),
            error::UNKNOWN_TOPIC_OR_PARTITION
        );
        let fetch = FetchRequest {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            topics: vec![FetchTopic {
                topic: "errs".into(),
                topic_id: Uuid::ZERO,
                partitions: vec![FetchPartition {
                    partition: 0,
                    current_leader_epoch: -1,
                    fetch_offset: 1_000,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        let response: FetchResponse = client.call(1, 12, 12, &fetch).unwrap();
        assert_eq!(
            response.responses[0].partitions[0].error_code,
            error::OFFSET_OUT_OF_RANGE
        );

        let m = scrape(&broker);
        assert_eq!(
            must(
                &m,
                r#"tarn_produce_errors_total{code="2",error="CORRUPT_MESSAGE"}"#
            ),
            2.0
        );
        assert_eq!(
            must(
                &m,
                r#"tarn_produce_errors_total{code="3",error="UNKNOWN_TOPIC_OR_PARTITION"}"#
            ),
            1.0
        );
        assert_eq!(
            must(
                &m,
                r#"tarn_fetch_errors_total{code="1",error="OFFSET_OUT_OF_RANGE"}"#
            ),
            1.0
        );
        // Only the corrupt batches are refusals worth an operator's time.
        assert_eq!(
            must(
                &m,
                r#"tarn_refused_requests_total{reason="produce_rejected"}"#
            ),
            2.0
        );
        assert_eq!(
            must(&m, r#"tarn_topic_records_in_total{topic="errs"}"#),
            1.0
        );
        let logs = broker.logs();
        let refused: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("request refused") && l.contains("CORRUPT_MESSAGE"))
            .collect();
        assert_eq!(refused.len(), 2, "{logs}");
        assert!(
            refused[0].contains("client_id=\"tarn-cli\"")
                || refused[0].contains("client_id=tarn-cli"),
            "{logs}"
        );
        assert!(refused[0].contains("peer=127.0.0.1:"), "{logs}");
    });
}

#[test]
fn a_flood_of_bad_requests_is_counted_but_logged_a_few_times() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        const FLOOD: usize = 200;
        for _ in 0..FLOOD {
            let mut stream = TcpStream::connect(broker.bootstrap()).unwrap();
            // A size prefix far above socket.request.max.bytes.
            stream.write_all(&i32::MAX.to_be_bytes()).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            // The broker closes the connection: read returns 0 (or a reset).
            let mut buf = [0u8; 1];
            assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let m = scrape(&broker);
            let refused = must(&m, r#"tarn_refused_requests_total{reason="request_size"}"#);
            let logs = broker.logs();
            if refused == FLOOD as f64 && logs.contains("refused-request messages (rate limit)") {
                let logged = logs
                    .lines()
                    .filter(|l| l.contains("request refused") && l.contains("request_size"))
                    .count();
                // The per-peer burst, plus at most a refill or two.
                assert!((1..=8).contains(&logged), "{logged} lines:\n{logs}");
                assert!(must(&m, "tarn_log_messages_suppressed_total") >= (FLOOD - 8) as f64);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "refused={refused}; no suppression summary in\n{logs}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        broker.create_topic("still-serving", 1);
    });
}

#[test]
fn health_and_the_http_servers_limits() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        let addr = broker.http_addr().to_owned();
        assert_eq!(http(&addr, "GET", "/health"), (200, "ok\n".to_owned()));
        let (status, body) = http(&addr, "GET", "/");
        assert_eq!(status, 200);
        assert!(body.contains("<script src=\"/console.js\">"), "{body}");
        let (status, body) = http(&addr, "GET", "/console.js");
        assert_eq!(status, 200);
        assert!(body.contains("function lineChart"));
        // HEAD: headers only.
        assert_eq!(http(&addr, "HEAD", "/health"), (200, String::new()));
        assert_eq!(http(&addr, "GET", "/nope").0, 404);
        assert_eq!(http(&addr, "POST", "/metrics").0, 405);
        assert_eq!(http(&addr, "GET", "/api/topic?name=nope").0, 404);
        assert_eq!(http(&addr, "GET", "/api/records?topic=x").0, 400);
        assert_eq!(
            http(
                &addr,
                "GET",
                "/api/records?topic=x&partition=0&limit=100000"
            )
            .0,
            400
        );
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(64 * 1024));
        assert_eq!(raw_http(&addr, huge.as_bytes()).0, 431);
        assert_eq!(raw_http(&addr, b"GARBAGE\r\n\r\n").0, 400);
        // A client that sends half a request and stalls does not hold up others.
        let _stalled = {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /hea").unwrap();
            s
        };
        assert_eq!(http(&addr, "GET", "/health").0, 200);
        let (status, body) = http(&addr, "GET", "/api/overview");
        assert_eq!(status, 200);
        assert!(body.contains("\"version\":\"0.1.0\""), "{body}");
        let (status, body) = http(&addr, "GET", "/api/groups");
        assert_eq!((status, body.as_str()), (200, "{\"groups\":[]}"));
    });
}

#[test]
fn json_logs_and_http_off() {
    run_with_timeout(TEST_TIMEOUT, || {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(tarn_e2e::tarn_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
            .args(["--log-format", "json", "--data-dir"])
            .arg(data.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut ready = String::new();
        stdout.read_line(&mut ready).unwrap();
        assert!(ready.starts_with("tarn: listening on "), "{ready}");
        // SAFETY: kill(2) on our own, not yet reaped, child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let status = child.wait().unwrap();
        assert!(status.success());
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        assert!(!rest.contains("tarn: http on"), "{rest}");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(lines.len() >= 2, "{stderr}");
        for line in lines {
            let event: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(event["level"].is_string(), "{line}");
            assert!(event["fields"]["message"].is_string(), "{line}");
        }
        assert!(stderr.contains("clean shutdown complete"));
    });
}

fn segment(broker: &TarnBroker, topic: &str) -> PathBuf {
    broker
        .data_dir()
        .join(format!("{topic}-0"))
        .join("00000000000000000000.log")
}

/// Parses `| offset: N ... key: K payload: V` lines.
fn dumped_records(stdout: &str) -> HashMap<i64, (String, String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("| offset: "))
        .filter_map(|l| {
            let (offset, rest) = l.split_once(' ')?;
            let (_, rest) = rest.split_once(" headers: [")?;
            let (headers, rest) = rest.split_once("] key: ")?;
            let (key, value) = rest.split_once(" payload: ")?;
            Some((
                offset.parse().ok()?,
                (key.to_owned(), value.to_owned(), headers.to_owned()),
            ))
        })
        .collect()
}

#[test]
fn dump_log_shows_what_librdkafka_wrote_and_verify_index_catches_corruption() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        let out = broker.cli(&[
            "topics",
            "create",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "dumped",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--config",
            "index.interval.bytes=200",
        ]);
        assert!(out.status.success(), "{out}");
        let records: Vec<Outgoing> = (0..300)
            .map(|i| {
                let mut r = Record::kv(&format!("key-{i}"), &format!("value {i}"));
                if i % 3 == 0 {
                    r.headers = vec![("h".into(), Some(format!("x{i}").into_bytes()))];
                }
                Outgoing {
                    record: r,
                    partition: Some(0),
                    timestamp_ms: Some(1_700_000_000_000 + i),
                }
            })
            .collect();
        let mut producer = TestProducer::new(broker.bootstrap(), &[("batch.num.messages", "20")]);
        let delivered = producer.produce_all("dumped", &records);
        // gzip, not lz4: librdkafka enables lz4 only for brokers that serve
        // FindCoordinator, which Tarn does not yet.
        let mut gzip = TestProducer::new(broker.bootstrap(), &[("compression.type", "gzip")]);
        let squeezed: Vec<Outgoing> = (0..10)
            .map(|i| Outgoing {
                record: Record::value(&"z".repeat(100 + i)),
                partition: Some(0),
                // Close to the records above: a batch more than segment.ms
                // newer than a segment's first one rolls it, as in Kafka.
                timestamp_ms: Some(1_700_000_000_300 + i as i64),
            })
            .collect();
        gzip.produce_all("dumped", &squeezed);
        drop((producer, gzip));
        broker.stop();

        let log = segment(&broker, "dumped");
        let log_arg = log.to_str().unwrap();
        let out = broker.cli(&["dump-log", "--print-data", log_arg]);
        assert!(out.status.success(), "{out}");
        let dumped = dumped_records(&out.stdout);
        assert_eq!(dumped.len(), 300, "{}", out.stdout);
        for (i, d) in delivered.iter().enumerate() {
            let (key, value, headers) = &dumped[&d.offset];
            assert_eq!(key, &format!("key-{i}"));
            assert_eq!(value, &format!("value {i}"));
            let expected = if i % 3 == 0 {
                format!("h=x{i}")
            } else {
                String::new()
            };
            assert_eq!(headers, &expected);
        }
        assert!(
            out.stdout
                .contains("| offset: 0 CreateTime: 1700000000000 keySize: 5 valueSize: 7"),
            "{}",
            out.stdout
        );
        let batches: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("baseOffset:"))
            .collect();
        assert!(batches.len() > 2, "{}", out.stdout);
        assert!(batches
            .iter()
            .all(|b| b.ends_with("isvalid: true") && b.contains("magic: 2")));
        assert_eq!(
            batches
                .iter()
                .filter(|b| b.contains("compresscodec: gzip"))
                .count(),
            1,
            "{}",
            out.stdout
        );
        assert!(out
            .stdout
            .contains("| compressed (gzip) — records not shown"));
        assert!(
            out.stdout.contains("Summary: ") && out.stdout.contains(" 310 records"),
            "{}",
            out.stdout
        );

        let out = broker.cli(&["dump-log", "--verify-index", log_arg]);
        assert!(out.status.success(), "{out}");
        assert_eq!(
            out.stdout.lines().filter(|l| l.ends_with(": OK")).count(),
            2,
            "{out}"
        );
        let index = log.with_extension("index");
        let entries = std::fs::read(&index).unwrap();
        assert!(
            entries.len() >= 16,
            "index.interval.bytes=200 should give several entries"
        );

        // Shift the second entry's position by one byte: not a batch start.
        let mut corrupt = entries.clone();
        corrupt[15] = corrupt[15].wrapping_add(1);
        std::fs::write(&index, &corrupt).unwrap();
        let out = broker.cli(&["dump-log", "--verify-index", index.to_str().unwrap()]);
        assert!(!out.status.success(), "{out}");
        assert!(out.stdout.contains("mismatch: entry 1"), "{out}");
        std::fs::write(&index, &entries).unwrap();

        let time_index = log.with_extension("timeindex");
        let mut times = std::fs::read(&time_index).unwrap();
        assert!(!times.is_empty());
        times[7] = times[7].wrapping_add(1);
        std::fs::write(&time_index, &times).unwrap();
        let out = broker.cli(&["dump-log", "--verify-index", time_index.to_str().unwrap()]);
        assert!(!out.status.success(), "{out}");
        assert!(out.stdout.contains("mismatch: entry 0"), "{out}");
    });
}
