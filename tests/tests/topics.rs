//! Topic management: the `tarn topics` CLI (create, list, describe, delete,
//! and its failures), topic-level config, and auto-creation when a producer
//! asks for metadata of a topic that does not exist.

use std::path::Path;
use std::time::Duration;

use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{cli, run_with_timeout, BrokerOptions, TarnBroker, TEST_TIMEOUT};

fn topics(broker: &TarnBroker, args: &[&str]) -> cli::CliOutput {
    let mut full = vec!["topics", args[0], "--bootstrap-server", broker.bootstrap()];
    full.extend_from_slice(&args[1..]);
    cli::run(&full)
}

#[test]
fn cli_create_list_describe_delete() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("alpha", 1);
        broker.create_topic("beta.with-dots_and-dashes", 5);
        let listed = broker.list_topics();
        assert!(listed.contains(&"alpha".to_string()), "list: {listed:?}");
        assert!(
            listed.contains(&"beta.with-dots_and-dashes".to_string()),
            "list: {listed:?}"
        );
        assert_eq!(
            kafka::partition_count(broker.bootstrap(), "beta.with-dots_and-dashes"),
            5
        );

        let described = topics(&broker, &["describe", "--topic", "alpha"]);
        assert!(described.status.success(), "{described}");
        assert!(described.stdout.contains("alpha"), "{described}");
        let all = topics(&broker, &["describe"]);
        assert!(all.status.success(), "{all}");
        assert!(
            all.stdout.contains("alpha") && all.stdout.contains("beta.with-dots_and-dashes"),
            "{all}"
        );

        let duplicate = topics(
            &broker,
            &["create", "--topic", "alpha", "--partitions", "2"],
        );
        assert!(
            !duplicate.status.success(),
            "creating an existing topic succeeded: {duplicate}"
        );
        assert!(
            !duplicate.stderr.trim().is_empty(),
            "duplicate create failed silently: {duplicate}"
        );
        assert_eq!(
            kafka::partition_count(broker.bootstrap(), "alpha"),
            1,
            "duplicate create changed alpha"
        );

        let deleted = topics(&broker, &["delete", "--topic", "alpha"]);
        assert!(deleted.status.success(), "{deleted}");
        let listed = broker.list_topics();
        assert!(
            !listed.contains(&"alpha".to_string()),
            "alpha still listed after delete: {listed:?}"
        );
        assert!(
            listed.contains(&"beta.with-dots_and-dashes".to_string()),
            "delete removed too much: {listed:?}"
        );

        let again = topics(&broker, &["delete", "--topic", "alpha"]);
        assert!(
            !again.status.success(),
            "deleting a missing topic succeeded: {again}"
        );
        let missing = topics(&broker, &["describe", "--topic", "no-such-topic"]);
        assert!(
            !missing.status.success(),
            "describing a missing topic succeeded: {missing}"
        );

        // A deleted name can be used again, and starts empty.
        broker.create_topic("alpha", 2);
        assert_eq!(kafka::partition_count(broker.bootstrap(), "alpha"), 2);
        for (partition, low, high) in kafka::watermarks(broker.bootstrap(), "alpha") {
            assert_eq!((low, high), (0, 0), "recreated alpha/{partition}");
        }
    });
}

#[test]
fn cli_rejects_invalid_topic_names_and_arguments() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        let too_long = "x".repeat(250);
        for name in [
            "bad/name",
            "..",
            ".",
            "has space",
            "ümlaut",
            too_long.as_str(),
        ] {
            let out = topics(&broker, &["create", "--topic", name, "--partitions", "1"]);
            assert!(
                !out.status.success(),
                "invalid topic name {name:?} was accepted: {out}"
            );
            assert!(
                !out.stderr.trim().is_empty(),
                "{name:?} rejected without a message: {out}"
            );
        }
        for partitions in ["0", "-1"] {
            let out = topics(
                &broker,
                &["create", "--topic", "zero", "--partitions", partitions],
            );
            assert!(
                !out.status.success(),
                "--partitions {partitions} was accepted: {out}"
            );
        }
        let listed = broker.list_topics();
        assert!(
            listed
                .iter()
                .all(|t| !t.contains('/') && t != ".." && t != "." && t != "zero"),
            "an invalid topic was created: {listed:?}"
        );
        // A 249-character name is the longest Kafka allows.
        broker.create_topic(&"y".repeat(249), 1);
    });
}

#[test]
fn producing_to_unknown_topic_auto_creates_it() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start_with(BrokerOptions::default().set("num.partitions", "3"));
        let topic = "auto-created";
        assert!(!broker.list_topics().contains(&topic.to_string()));
        let sent: Vec<Outgoing> = (0..30)
            .map(|i| Record::kv(&format!("k{i}"), &format!("v{i}")).into())
            .collect();
        TestProducer::new(broker.bootstrap(), &[("acks", "all")]).produce_all(topic, &sent);
        assert!(
            broker.list_topics().contains(&topic.to_string()),
            "topic was not auto-created"
        );
        assert_eq!(
            kafka::partition_count(broker.bootstrap(), topic),
            3,
            "num.partitions not applied"
        );
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            topic,
            sent.len(),
            Duration::from_secs(20),
        );
        let mut values: Vec<_> = consumed.into_iter().map(|m| m.record.value).collect();
        let mut want: Vec<_> = sent.into_iter().map(|o| o.record.value).collect();
        values.sort();
        want.sort();
        assert_eq!(values, want);
    });
}

#[test]
fn auto_creation_can_be_disabled() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start_with(
            BrokerOptions::default().set("auto.create.topics.enable", "false"),
        );
        let topic = "not-auto-created";
        let mut producer = TestProducer::new(broker.bootstrap(), &[("message.timeout.ms", "3000")]);
        producer.send(topic, &Record::value("lost").into());
        let results = producer.flush(Duration::from_secs(15));
        assert!(
            results[0].is_err(),
            "produce to a missing topic succeeded: {results:?}"
        );
        assert!(
            !broker.list_topics().contains(&topic.to_string()),
            "topic was auto-created"
        );
    });
}

/// Files named like Kafka segments (`<20 digits>.log`) under `dir`.
fn segment_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read data dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(segment_files(&path));
        } else if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            let stem = name.strip_suffix(".log").unwrap_or("");
            if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn small_segments_roll_and_read_back_across_restart() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        let topic = "segment-roll";
        let out = topics(
            &broker,
            &[
                "create",
                "--topic",
                topic,
                "--partitions",
                "1",
                "--config",
                "segment.bytes=65536",
            ],
        );
        assert!(out.status.success(), "{out}");
        let sent: Vec<Outgoing> = (0..600)
            .map(|i| Record::kv(&format!("k{i}"), &format!("{i:04}-{}", "x".repeat(1000))).into())
            .collect();
        // acks=all in small batches so the log rolls many times.
        TestProducer::new(
            broker.bootstrap(),
            &[("acks", "all"), ("batch.size", "8192")],
        )
        .produce_all(topic, &sent);
        let segments: Vec<String> = segment_files(broker.data_dir())
            .into_iter()
            .filter(|path| path.contains(topic))
            .collect();
        assert!(
            segments.len() > 3,
            "segment.bytes=65536 rolled only {segments:?}"
        );

        broker.restart();
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            topic,
            sent.len(),
            Duration::from_secs(20),
        );
        for (i, (message, outgoing)) in consumed.iter().zip(&sent).enumerate() {
            assert_eq!(message.offset, i64::try_from(i).expect("small"));
            assert_eq!(message.record, outgoing.record, "offset {i}");
        }
        broker.stop();
    });
}

/// `tarn log-dirs --describe` (kafka-log-dirs.sh): Kafka's two status
/// lines, then Kafka's JSON with each partition's size on disk.
#[test]
fn log_dirs_report_partition_sizes_as_kafka_log_dirs_does() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("sized", 2);
        broker.create_topic("other", 1);
        let records: Vec<Outgoing> = (0..30)
            .map(|i| Outgoing {
                record: Record::value(&format!("record-{i}")),
                partition: Some(1),
                timestamp_ms: None,
            })
            .collect();
        TestProducer::new(broker.bootstrap(), &[]).produce_all("sized", &records);
        let out = broker.cli(&[
            "log-dirs",
            "--describe",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic-list",
            "sized",
        ]);
        assert!(out.status.success(), "{out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines[0], "Querying brokers for log directories information");
        assert_eq!(
            lines[1],
            "Received log directory information from brokers 1"
        );
        let json: serde_json::Value = serde_json::from_str(lines[2]).expect("JSON");
        let dir = &json["brokers"][0]["logDirs"][0];
        assert_eq!(json["brokers"][0]["broker"], 1);
        assert!(dir["error"].is_null());
        let on_disk = |partition: i32| -> u64 {
            std::fs::read_dir(broker.data_dir().join(format!("sized-{partition}")))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .map(|p| std::fs::metadata(p).unwrap().len())
                .sum()
        };
        let partitions = dir["partitions"].as_array().expect("partitions");
        let sizes: Vec<(String, u64)> = partitions
            .iter()
            .map(|p| {
                (
                    p["partition"].as_str().unwrap().to_owned(),
                    p["size"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            sizes,
            vec![
                ("sized-0".to_owned(), 0),
                ("sized-1".to_owned(), on_disk(1))
            ],
            "only the listed topic, sizes as on disk"
        );
        assert!(on_disk(1) > 30 * 8, "the records are there");
        let out = broker.cli(&["log-dirs", "--bootstrap-server", broker.bootstrap()]);
        assert!(!out.status.success(), "no action: {out}");
    });
}

/// `tarn topics describe | head -1`: a reader that stops early ends the
/// CLI quietly (as Unix tools end on SIGPIPE), not with a panic.
#[test]
fn cli_output_cut_short_by_its_reader_is_no_panic() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("cut-short", 3);
        let mut child = std::process::Command::new(tarn_e2e::tarn_bin())
            .args([
                "topics",
                "describe",
                "--bootstrap-server",
                broker.bootstrap(),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run tarn topics describe");
        // Close the read end before the CLI writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait for tarn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{:?}: {stderr}",
            out.status
        );
    });
}
