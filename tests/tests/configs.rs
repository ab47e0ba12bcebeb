//! Configs and partition administration against the real binary: rdkafka's
//! AdminClient (DescribeConfigs, AlterConfigs, CreatePartitions,
//! DeleteRecords), hand-built IncrementalAlterConfigs requests, and the
//! `tarn configs` / `tarn topics alter` CLI. Values are set, read back,
//! read back again after a restart; refused changes must leave nothing
//! behind; changes must reach live partitions without a restart; deleted
//! topics' files go after `file.delete.delay.ms`.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigSource, NewPartitions, ResourceSpecifier,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tarn_cli::client::Client;
use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{cli, run_with_timeout, wire, BrokerOptions, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::error;
use tarn_protocol::messages::alter_configs::{
    AlterConfigsRequest, AlterConfigsResource, AlterableConfig,
};
use tarn_protocol::messages::incremental_alter_configs::*;
use tarn_protocol::messages::join_group::JoinGroupResponse;

/// The node id `tarn serve` runs as by default.
const NODE_ID: i32 = 1;

fn block<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a runtime")
        .block_on(future)
}

fn admin(broker: &TarnBroker) -> AdminClient<DefaultClientContext> {
    kafka::base_config(broker.bootstrap())
        .create()
        .expect("create admin client")
}

fn opts() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(Duration::from_secs(10)))
}

/// (value, source, read-only) of every key of a resource, via rdkafka.
fn describe(
    broker: &TarnBroker,
    resource: ResourceSpecifier<'_>,
) -> HashMap<String, (Option<String>, ConfigSource, bool)> {
    let results =
        block(admin(broker).describe_configs([&resource], &opts())).expect("describe configs");
    let resource = results
        .into_iter()
        .next()
        .expect("one result")
        .unwrap_or_else(|code| panic!("describe configs refused: {code:?}"));
    resource
        .entries
        .into_iter()
        .map(|e| (e.name, (e.value, e.source, e.is_read_only)))
        .collect()
}

fn topic_value(broker: &TarnBroker, topic: &str, key: &str) -> (String, ConfigSource) {
    let mut configs = describe(broker, ResourceSpecifier::Topic(topic));
    let (value, source, _) = configs
        .remove(key)
        .unwrap_or_else(|| panic!("{topic} has no config {key}"));
    (value.expect("a value"), source)
}

fn configs_cli(broker: &TarnBroker, args: &[&str]) -> cli::CliOutput {
    let mut full = vec!["configs", "--bootstrap-server", broker.bootstrap()];
    full.extend_from_slice(args);
    cli::run(&full)
}

fn alter_topic_cli(broker: &TarnBroker, topic: &str, args: &[&str]) -> cli::CliOutput {
    let mut full = vec!["--alter", "--entity-type", "topics", "--entity-name", topic];
    full.extend_from_slice(args);
    configs_cli(broker, &full)
}

fn incremental(
    broker: &TarnBroker,
    resource_type: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> AlterConfigsResourceResponse {
    let request = IncrementalAlterConfigsRequest {
        resources: vec![IncrementalAlterConfigsResource {
            resource_type,
            resource_name: name.into(),
            configs: ops
                .iter()
                .map(|(k, op, v)| IncrementalAlterableConfig {
                    name: (*k).into(),
                    config_operation: *op,
                    value: v.map(str::to_owned),
                })
                .collect(),
        }],
        validate_only,
    };
    // validate_only requests go at version 0 (classic encoding), the
    // others at version 1 (flexible), so both encodings are exercised.
    let version = if validate_only { 0 } else { 1 };
    let mut client = Client::connect(broker.bootstrap()).expect("connect");
    let response: IncrementalAlterConfigsResponse = client
        .call(44, version, 1, &request)
        .expect("IncrementalAlterConfigs");
    response.responses.into_iter().next().expect("one result")
}

/// A legacy AlterConfigs on a topic, at version 0 (classic encoding).
fn legacy_alter(
    broker: &TarnBroker,
    topic: &str,
    configs: &[(&str, &str)],
) -> AlterConfigsResourceResponse {
    let request = AlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 2,
            resource_name: topic.into(),
            configs: configs
                .iter()
                .map(|(k, v)| AlterableConfig {
                    name: (*k).into(),
                    value: Some((*v).into()),
                })
                .collect(),
        }],
        validate_only: false,
    };
    let mut client = Client::connect(broker.bootstrap()).expect("connect");
    let response: AlterConfigsResponse = client.call(33, 0, 2, &request).expect("AlterConfigs");
    response.responses.into_iter().next().expect("one result")
}

fn segment_logs(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
        })
        .count()
}

fn delete_dirs(data_dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(data_dir)
        .expect("list data dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(prefix) && name.ends_with("-delete")
        })
        .collect()
}

fn values(prefix: &str, n: usize) -> Vec<Outgoing> {
    (0..n)
        .map(|i| Record::kv(&format!("k{i}"), &format!("{prefix}-{i}")).into())
        .collect()
}

#[test]
fn configs_are_read_back_with_sources_and_survive_restart() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker =
            TarnBroker::start_with(BrokerOptions::default().set("log.retention.ms", "3600000"));
        broker.create_topic("cfg", 1);

        let (value, source) = topic_value(&broker, "cfg", "retention.ms");
        assert_eq!(
            (value.as_str(), source),
            ("3600000", ConfigSource::StaticBroker)
        );
        let (value, source) = topic_value(&broker, "cfg", "segment.bytes");
        assert_eq!(
            (value.as_str(), source),
            ("1073741824", ConfigSource::Default)
        );

        let out = alter_topic_cli(
            &broker,
            "cfg",
            &[
                "--add-config",
                "retention.ms=1000,cleanup.policy=[compact,delete]",
            ],
        );
        assert!(out.status.success(), "{out}");
        assert!(
            out.stdout
                .contains("retention.ms=1000 (DYNAMIC_TOPIC_CONFIG)")
                && out
                    .stdout
                    .contains("cleanup.policy=compact,delete (DYNAMIC_TOPIC_CONFIG)"),
            "alter does not print what it read back: {out}"
        );
        let out = configs_cli(
            &broker,
            &[
                "--alter",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                "log.segment.bytes=1048576",
            ],
        );
        assert!(out.status.success(), "{out}");
        assert!(
            out.stdout
                .contains("log.segment.bytes=1048576 (DYNAMIC_DEFAULT_BROKER_CONFIG)"),
            "{out}"
        );
        let node = NODE_ID.to_string();
        let out = configs_cli(
            &broker,
            &[
                "--alter",
                "--entity-type",
                "brokers",
                "--entity-name",
                &node,
                "--add-config",
                "log.roll.ms=7200000",
            ],
        );
        assert!(out.status.success(), "{out}");

        let check = |broker: &TarnBroker| {
            let topic = describe(broker, ResourceSpecifier::Topic("cfg"));
            let get = |k: &str| {
                let (v, s, _) = &topic[k];
                (v.clone().unwrap(), s)
            };
            assert_eq!(
                get("retention.ms"),
                ("1000".into(), &ConfigSource::DynamicTopic)
            );
            assert_eq!(
                get("cleanup.policy"),
                ("compact,delete".into(), &ConfigSource::DynamicTopic)
            );
            assert_eq!(
                get("segment.bytes"),
                ("1048576".into(), &ConfigSource::DynamicDefaultBroker)
            );
            assert_eq!(
                get("segment.ms"),
                ("7200000".into(), &ConfigSource::DynamicBroker)
            );
            let brokers = describe(broker, ResourceSpecifier::Broker(NODE_ID));
            let (v, s, read_only) = &brokers["log.segment.bytes"];
            assert_eq!(
                (v.as_deref(), s, *read_only),
                (Some("1048576"), &ConfigSource::DynamicDefaultBroker, false)
            );
            let (v, s, _) = &brokers["log.retention.ms"];
            assert_eq!(
                (v.as_deref(), s),
                (Some("3600000"), &ConfigSource::StaticBroker)
            );
            assert!(
                brokers["num.partitions"].2,
                "num.partitions must be read-only"
            );
            let out = configs_cli(
                broker,
                &[
                    "--describe",
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    "cfg",
                ],
            );
            assert!(out.status.success(), "{out}");
            assert!(
                out.stdout.contains("Dynamic configs for topic cfg are:")
                    && out.stdout.contains(
                        // Kafka lists the default of log.retention.hours
                        // too: the same setting, in hours.
                        "retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, STATIC_BROKER_CONFIG:log.retention.ms=3600000, DEFAULT_CONFIG:log.retention.hours=168}"
                    )
                    && !out.stdout.contains("segment.bytes"),
                "{out}"
            );
        };
        check(&broker);
        broker.restart();
        check(&broker);
        broker.kill();
        broker.start_again();
        check(&broker);

        // Deleting goes back to the inherited value, read back by the CLI.
        let out = alter_topic_cli(&broker, "cfg", &["--delete-config", "retention.ms"]);
        assert!(out.status.success(), "{out}");
        assert!(
            out.stdout
                .contains("retention.ms=3600000 (STATIC_BROKER_CONFIG)"),
            "{out}"
        );
        // Deleting a key the topic does not set is refused, as kafka-configs.sh does.
        let out = alter_topic_cli(&broker, "cfg", &["--delete-config", "retention.ms"]);
        assert!(!out.status.success(), "{out}");
        assert!(
            out.stderr.contains("Invalid config(s): retention.ms"),
            "{out}"
        );
    });
}

#[test]
fn bad_keys_and_values_are_refused_and_nothing_is_applied() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("strict", 1);
        let client = admin(&broker);

        // rdkafka 0.39 reports every AlterConfigs resource as Ok whatever
        // the broker said (it never reads the per-resource error), so the
        // error codes are checked with hand-built requests and rdkafka's
        // requests only for their (absent) effect.
        let bad_key = AlterConfig::new(ResourceSpecifier::Topic("strict"))
            .set("retention.ms", "5")
            .set("retention.mss", "1");
        block(client.alter_configs([&bad_key], &opts())).expect("alter configs");
        let r = legacy_alter(
            &broker,
            "strict",
            &[("retention.ms", "5"), ("retention.mss", "1")],
        );
        assert_eq!(r.error_code, error::INVALID_CONFIG, "{r:?}");
        assert_eq!(
            r.error_message.as_deref(),
            Some("Unknown topic config name: retention.mss")
        );
        let bad_value = AlterConfig::new(ResourceSpecifier::Topic("strict"))
            .set("retention.ms", "5")
            .set("cleanup.policy", "shred");
        block(client.alter_configs([&bad_value], &opts())).expect("alter configs");
        let r = legacy_alter(
            &broker,
            "strict",
            &[("retention.ms", "5"), ("cleanup.policy", "shred")],
        );
        assert_eq!(r.error_code, error::INVALID_CONFIG, "{r:?}");
        let message = r.error_message.unwrap_or_default();
        assert!(
            message.contains("cleanup.policy") && message.contains("shred"),
            "{message}"
        );
        let out = alter_topic_cli(
            &broker,
            "strict",
            &["--add-config", "retention.ms=5,segment.bytes=ten"],
        );
        assert!(!out.status.success(), "{out}");
        assert!(
            out.stderr.contains("INVALID_CONFIG") && out.stderr.contains("segment.bytes"),
            "the error must name the key: {out}"
        );
        let out = configs_cli(
            &broker,
            &[
                "--alter",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                "log.retention.ms=5,num.partitions=3",
            ],
        );
        assert!(!out.status.success(), "{out}");
        assert!(
            out.stderr
                .contains("Cannot update these configs dynamically: Set(num.partitions)"),
            "{out}"
        );
        // validate_only checks and changes nothing.
        let fine = AlterConfig::new(ResourceSpecifier::Topic("strict")).set("retention.ms", "5");
        let results = block(client.alter_configs([&fine], &opts().validate_only(true)))
            .expect("alter configs");
        assert!(results[0].is_ok(), "{results:?}");
        let result = incremental(
            &broker,
            2,
            "strict",
            &[("retention.ms", OP_SET, Some("5"))],
            true,
        );
        assert_eq!(result.error_code, error::NONE, "{result:?}");

        // Nothing was applied, at any level.
        assert_eq!(
            topic_value(&broker, "strict", "retention.ms"),
            ("604800000".into(), ConfigSource::Default)
        );
        assert_eq!(topic_value(&broker, "strict", "cleanup.policy").0, "delete");
        let brokers = describe(&broker, ResourceSpecifier::Broker(NODE_ID));
        assert_eq!(brokers["log.retention.ms"].1, ConfigSource::Default);

        // Unknown topics and other brokers are refused with Kafka's codes.
        let result = incremental(
            &broker,
            2,
            "missing",
            &[("retention.ms", OP_SET, Some("5"))],
            false,
        );
        assert_eq!(
            result.error_code,
            error::UNKNOWN_TOPIC_OR_PARTITION,
            "{result:?}"
        );
        let result = incremental(
            &broker,
            4,
            "7",
            &[("log.retention.ms", OP_SET, Some("5"))],
            false,
        );
        assert_eq!(result.error_code, error::INVALID_REQUEST, "{result:?}");
        assert!(!broker.list_topics().contains(&"missing".to_string()));
    });
}

#[test]
fn incremental_append_subtract_and_legacy_replace() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("policy", 1);
        let policy = |broker: &TarnBroker| topic_value(broker, "policy", "cleanup.policy").0;

        let r = incremental(
            &broker,
            2,
            "policy",
            &[("cleanup.policy", OP_APPEND, Some("compact"))],
            false,
        );
        assert_eq!(r.error_code, error::NONE, "{r:?}");
        assert_eq!(policy(&broker), "delete,compact");
        let r = incremental(
            &broker,
            2,
            "policy",
            &[("cleanup.policy", OP_APPEND, Some("compact"))],
            false,
        );
        assert_eq!(r.error_code, error::NONE, "{r:?}");
        assert_eq!(
            policy(&broker),
            "delete,compact",
            "APPEND adds only what is missing"
        );
        let r = incremental(
            &broker,
            2,
            "policy",
            &[("cleanup.policy", OP_SUBTRACT, Some("delete"))],
            false,
        );
        assert_eq!(r.error_code, error::NONE, "{r:?}");
        assert_eq!(policy(&broker), "compact");
        let r = incremental(
            &broker,
            2,
            "policy",
            &[("retention.ms", OP_APPEND, Some("5"))],
            false,
        );
        assert_eq!(
            r.error_code,
            error::INVALID_CONFIG,
            "APPEND on a non-list: {r:?}"
        );
        let r = incremental(
            &broker,
            2,
            "policy",
            &[("cleanup.policy", OP_SUBTRACT, Some("compact"))],
            false,
        );
        assert_eq!(
            r.error_code,
            error::INVALID_CONFIG,
            "an empty policy: {r:?}"
        );
        assert_eq!(policy(&broker), "compact");
        let r = incremental(
            &broker,
            2,
            "policy",
            &[
                ("retention.ms", OP_SET, Some("9000")),
                ("cleanup.policy", OP_DELETE, None),
            ],
            false,
        );
        assert_eq!(r.error_code, error::NONE, "{r:?}");
        assert_eq!(policy(&broker), "delete");
        assert_eq!(topic_value(&broker, "policy", "retention.ms").0, "9000");

        // Legacy AlterConfigs replaces the whole set: retention.ms goes back.
        let replace =
            AlterConfig::new(ResourceSpecifier::Topic("policy")).set("segment.ms", "60000");
        let results = block(admin(&broker).alter_configs([&replace], &opts())).expect("alter");
        assert!(results[0].is_ok(), "{results:?}");
        assert_eq!(
            topic_value(&broker, "policy", "retention.ms"),
            ("604800000".into(), ConfigSource::Default)
        );
        assert_eq!(
            topic_value(&broker, "policy", "segment.ms"),
            ("60000".into(), ConfigSource::DynamicTopic)
        );
    });
}

#[test]
fn config_changes_reach_live_partitions() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("live", 1);
        broker.create_topic("inherits", 1);
        let mut producer = TestProducer::new(broker.bootstrap(), &[("batch.num.messages", "1")]);
        producer.produce_all("live", &values("before", 5));
        let live_dir = broker.data_dir().join("live-0");
        assert_eq!(segment_logs(&live_dir), 1);

        let out = alter_topic_cli(&broker, "live", &["--add-config", "segment.bytes=1024"]);
        assert!(out.status.success(), "{out}");
        for i in 0..30 {
            let big = "x".repeat(200);
            producer.produce_all("live", &[Record::kv(&format!("k{i}"), &big).into()]);
        }
        assert!(
            segment_logs(&live_dir) > 2,
            "segment.bytes=1024 did not roll the live log: {} segments",
            segment_logs(&live_dir)
        );

        // A cluster default reaches topics that do not override it.
        let out = configs_cli(
            &broker,
            &[
                "--alter",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                "message.max.bytes=600",
            ],
        );
        assert!(out.status.success(), "{out}");
        let mut strict = TestProducer::new(
            broker.bootstrap(),
            &[("batch.num.messages", "1"), ("message.max.bytes", "100000")],
        );
        strict.send("inherits", &Record::kv("k", &"y".repeat(2000)).into());
        let reports = strict.flush(Duration::from_secs(30));
        assert!(
            reports[0]
                .as_ref()
                .is_err_and(|e| e.contains("too large") || e.contains("MSG_SIZE_TOO_LARGE")),
            "a 2000-byte record passed message.max.bytes=600: {reports:?}"
        );
        let delivered = strict.produce_all("inherits", &[Record::kv("k", "small").into()]);
        assert_eq!(delivered[0].offset, 0);
        assert_eq!(
            topic_value(&broker, "inherits", "max.message.bytes").0,
            "600"
        );
    });
}

#[test]
fn create_partitions_grows_and_refuses_shrinking() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        broker.create_topic("grow", 1);
        let client = admin(&broker);

        let check_only = NewPartitions::new("grow", 5);
        let results = block(client.create_partitions([&check_only], &opts().validate_only(true)))
            .expect("create partitions");
        assert!(results[0].is_ok(), "{results:?}");
        assert_eq!(kafka::partition_count(broker.bootstrap(), "grow"), 1);

        let grow = NewPartitions::new("grow", 3);
        let results = block(client.create_partitions([&grow], &opts())).expect("create partitions");
        assert!(results[0].is_ok(), "{results:?}");
        assert_eq!(kafka::partition_count(broker.bootstrap(), "grow"), 3);
        for shrink in [2, 3] {
            let request = NewPartitions::new("grow", shrink);
            let results =
                block(client.create_partitions([&request], &opts())).expect("create partitions");
            assert!(
                matches!(results[0], Err((_, RDKafkaErrorCode::InvalidPartitions))),
                "{shrink}: {results:?}"
            );
        }
        let out = cli::run(&[
            "topics",
            "alter",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "grow",
            "--partitions",
            "2",
        ]);
        assert!(!out.status.success(), "{out}");
        assert!(
            out.stderr.contains("INVALID_PARTITIONS") && out.stderr.contains("can only be added"),
            "{out}"
        );
        let out = cli::run(&[
            "topics",
            "alter",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "grow",
            "--partitions",
            "4",
        ]);
        assert!(out.status.success(), "{out}");
        assert!(out.stdout.contains("now has 4 partitions"), "{out}");

        // Producers and consumers see the new partitions.
        let mut producer = TestProducer::new(broker.bootstrap(), &[]);
        let records: Vec<Outgoing> = (0..4)
            .map(|p| Outgoing {
                record: Record::kv("k", &format!("to-{p}")),
                partition: Some(p),
                timestamp_ms: None,
            })
            .collect();
        let delivered = producer.produce_all("grow", &records);
        assert_eq!(
            delivered.iter().map(|d| d.partition).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        let consumed = kafka::consume_all(broker.bootstrap(), "grow", 4, Duration::from_secs(20));
        let mut seen: Vec<i32> = consumed.iter().map(|c| c.partition).collect();
        seen.sort();
        assert_eq!(seen, [0, 1, 2, 3]);
        broker.restart();
        assert_eq!(kafka::partition_count(broker.bootstrap(), "grow"), 4);
        assert_eq!(kafka::watermarks(broker.bootstrap(), "grow")[3], (3, 0, 1));
    });
}

#[test]
fn delete_records_moves_the_log_start_durably() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        broker.create_topic("trim", 1);
        let mut producer = TestProducer::new(broker.bootstrap(), &[("batch.num.messages", "1")]);
        producer.produce_all("trim", &values("r", 10));
        let client = admin(&broker);
        let delete = |offset: Offset| {
            let mut list = TopicPartitionList::new();
            list.add_partition_offset("trim", 0, offset).unwrap();
            let result = block(client.delete_records(&list, &opts())).expect("delete records");
            let element = result.elements().into_iter().next().expect("one partition");
            (element.offset(), element.error())
        };
        let (offset, outcome) = delete(Offset::Offset(4));
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(offset, Offset::Offset(4));
        let (_, outcome) = delete(Offset::Offset(11));
        assert!(
            outcome.is_err(),
            "deleting past the high watermark must fail"
        );
        assert_eq!(kafka::watermarks(broker.bootstrap(), "trim"), [(0, 4, 10)]);
        let consumed = kafka::consume_all(broker.bootstrap(), "trim", 6, Duration::from_secs(20));
        assert_eq!(
            consumed[0].offset, 4,
            "a consumer from the beginning starts at the new start"
        );
        assert_eq!(consumed[0].record.value.as_deref(), Some(&b"r-4"[..]));

        broker.restart();
        assert_eq!(kafka::watermarks(broker.bootstrap(), "trim"), [(0, 4, 10)]);
        let client = admin(&broker);
        let mut list = TopicPartitionList::new();
        list.add_partition_offset("trim", 0, Offset::End).unwrap();
        let result = block(client.delete_records(&list, &opts())).expect("delete records");
        assert_eq!(result.elements()[0].offset(), Offset::Offset(10));
        assert_eq!(kafka::watermarks(broker.bootstrap(), "trim"), [(0, 10, 10)]);

        // A compacted-only topic refuses, as in Kafka.
        broker.create_topic("compacted", 1);
        let out = alter_topic_cli(
            &broker,
            "compacted",
            &["--add-config", "cleanup.policy=compact"],
        );
        assert!(out.status.success(), "{out}");
        let mut list = TopicPartitionList::new();
        list.add_partition_offset("compacted", 0, Offset::End)
            .unwrap();
        let result = block(client.delete_records(&list, &opts())).expect("delete records");
        let outcome = result.elements()[0].error();
        assert!(
            matches!(&outcome, Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::PolicyViolation)),
            "{outcome:?}"
        );
    });
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn deleted_topic_files_go_after_the_delay_and_the_name_is_free_at_once() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start_with(
            BrokerOptions::default().set("log.segment.delete.delay.ms", "2000"),
        );
        let data = broker.data_dir().to_path_buf();
        broker.create_topic("gone", 1);
        let mut producer = TestProducer::new(broker.bootstrap(), &[]);
        producer.produce_all("gone", &values("old", 3));

        let deleted = Instant::now();
        let out = cli::run(&[
            "topics",
            "delete",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "gone",
        ]);
        assert!(out.status.success(), "{out}");
        let renamed = delete_dirs(&data, "gone-0.");
        assert_eq!(renamed.len(), 1, "expected one gone-0.<id>-delete dir");
        assert!(renamed[0].join("00000000000000000000.log").exists());
        assert!(!data.join("gone-0").exists());

        // Re-created at once, with none of the old data.
        broker.create_topic("gone", 1);
        let mut producer = TestProducer::new(broker.bootstrap(), &[]);
        producer.produce_all("gone", &values("new", 2));
        let consumed = kafka::consume_all(broker.bootstrap(), "gone", 2, Duration::from_secs(20));
        assert!(consumed
            .iter()
            .all(|c| c.record.value.as_ref().unwrap().starts_with(b"new")));
        assert_eq!(kafka::watermarks(broker.bootstrap(), "gone"), [(0, 0, 2)]);

        wait_until(
            "the renamed directory to go",
            Duration::from_secs(20),
            || !renamed[0].exists(),
        );
        assert!(
            deleted.elapsed() >= Duration::from_millis(2000),
            "removed before file.delete.delay.ms"
        );
        assert!(
            data.join("gone-0").exists(),
            "the new topic's data went too"
        );

        // A topic whose delay outlives the broker: removed at the next start.
        broker.create_topic("slow", 1);
        let out = alter_topic_cli(
            &broker,
            "slow",
            &["--add-config", "file.delete.delay.ms=3600000"],
        );
        assert!(out.status.success(), "{out}");
        let out = cli::run(&[
            "topics",
            "delete",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "slow",
        ]);
        assert!(out.status.success(), "{out}");
        let renamed = delete_dirs(&data, "slow-0.");
        assert_eq!(renamed.len(), 1);
        std::thread::sleep(Duration::from_millis(500));
        assert!(renamed[0].exists(), "removed before its delay");
        broker.restart();
        assert!(
            !renamed[0].exists(),
            "left-over -delete directory survived a restart"
        );
        assert_eq!(kafka::watermarks(broker.bootstrap(), "gone"), [(0, 0, 2)]);
    });
}

/// The loggers of broker `NODE_ID` with their levels.
fn loggers(broker: &TarnBroker) -> HashMap<String, String> {
    wire::broker_loggers(broker.bootstrap(), NODE_ID)
}

/// A JoinGroup without a member id, which the coordinator answers
/// MEMBER_ID_REQUIRED and logs at DEBUG under `tarn_coordinator`.
fn join_without_id(broker: &TarnBroker, group: &str) {
    let mut client = Client::connect(broker.bootstrap()).expect("connect");
    let request = wire::join_request(group, "", "consumer");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response: JoinGroupResponse = client.call(11, 9, 6, &request).expect("JoinGroup");
        if response.error_code == error::MEMBER_ID_REQUIRED {
            return;
        }
        // The coordinator may still be loading its partition.
        assert!(
            Instant::now() < deadline && response.error_code != error::NONE,
            "JoinGroup of {group}: {response:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn broker_logger_levels_change_what_the_running_broker_logs() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        let before = loggers(&broker);
        for logger in ["root", "tarn_server", "tarn_coordinator", "openraft"] {
            assert!(before.contains_key(logger), "{logger} in {before:?}");
        }
        let name = NODE_ID.to_string();
        let set = |level: &str| {
            incremental(
                &broker,
                8,
                &name,
                &[("tarn_coordinator", 0, Some(level))],
                false,
            )
        };
        let logged = |group: &str| {
            broker
                .logs()
                .lines()
                .any(|line| line.contains("DEBUG") && line.contains(&format!("group={group}")))
        };

        assert_eq!(set("DEBUG").error_code, error::NONE);
        assert_eq!(loggers(&broker)["tarn_coordinator"], "DEBUG");
        join_without_id(&broker, "logged-at-debug");
        assert!(logged("logged-at-debug"), "{}", broker.logs());

        assert_eq!(set("ERROR").error_code, error::NONE);
        join_without_id(&broker, "logged-at-error");
        assert!(!logged("logged-at-error"), "{}", broker.logs());

        // A refused change changes nothing; a validate-only one neither.
        assert_eq!(set("LOUD").error_code, error::INVALID_CONFIG);
        let validated = incremental(
            &broker,
            8,
            &name,
            &[("tarn_coordinator", 0, Some("TRACE"))],
            true,
        );
        assert_eq!(validated.error_code, error::NONE);
        assert_eq!(loggers(&broker)["tarn_coordinator"], "ERROR");

        // Unset, the logger takes root's level again.
        let unset = incremental(&broker, 8, &name, &[("tarn_coordinator", 1, None)], false);
        assert_eq!(unset.error_code, error::NONE);
        let after = loggers(&broker);
        assert_eq!(after["tarn_coordinator"], after["root"]);

        // The same through `tarn configs`, as through kafka-configs.sh.
        let entity = ["--entity-type", "broker-loggers", "--entity-name", "1"];
        let out = configs_cli(
            &broker,
            &[
                &entity[..],
                &["--alter", "--add-config", "tarn_storage=WARN"],
            ]
            .concat(),
        );
        assert!(out.status.success(), "{out}");
        let out = configs_cli(&broker, &[&entity[..], &["--describe"]].concat());
        assert!(
            out.status.success() && out.stdout.contains("tarn_storage=WARN"),
            "{out}"
        );
        let out = configs_cli(
            &broker,
            &[&entity[..], &["--alter", "--add-config", "kafka.log=WARN"]].concat(),
        );
        assert!(
            !out.status.success() && out.stderr.contains("Invalid broker logger(s): kafka.log"),
            "{out}"
        );
        broker.assert_no_panic();
    });
}
