//! Acknowledged records survive a clean restart (SIGTERM, exit 0) and a
//! crash (SIGKILL), and new records continue at the next offset.
//!
//! Without `flush.messages` the broker does not fsync, but a SIGKILL of the
//! process does not lose what it already wrote into the page cache, so every
//! acknowledged record must be there after recovery.

use std::collections::BTreeMap;
use std::time::Duration;

use tarn_e2e::kafka::{self, Delivered, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};

const TOPIC: &str = "restart";
const PARTITIONS: i32 = 3;

fn batch(tag: &str, count: usize) -> Vec<Outgoing> {
    (0..count)
        .map(|i| Outgoing {
            record: Record {
                key: Some(format!("{tag}-key-{}", i % 10).into_bytes()),
                value: Some(format!("{tag}-value-{i}").into_bytes()),
                headers: vec![("tag".to_string(), Some(tag.as_bytes().to_vec()))],
            },
            partition: None,
            timestamp_ms: None,
        })
        .collect()
}

/// Every record acknowledged so far, by position.
type Ledger = BTreeMap<(i32, i64), Record>;

fn produce_into(broker: &TarnBroker, ledger: &mut Ledger, tag: &str, count: usize, acks: &str) {
    let sent = batch(tag, count);
    let delivered =
        TestProducer::new(broker.bootstrap(), &[("acks", acks)]).produce_all(TOPIC, &sent);
    for (outgoing, Delivered { partition, offset }) in sent.into_iter().zip(delivered) {
        let previous = ledger.insert((partition, offset), outgoing.record);
        assert!(
            previous.is_none(),
            "offset {partition}/{offset} acknowledged twice"
        );
    }
}

/// Consumes the whole topic and checks it is exactly `ledger`.
fn assert_topic_is(broker: &TarnBroker, ledger: &Ledger, when: &str) {
    assert_eq!(
        kafka::partition_count(broker.bootstrap(), TOPIC),
        PARTITIONS,
        "{when}"
    );
    let consumed = kafka::consume_all(
        broker.bootstrap(),
        TOPIC,
        ledger.len(),
        Duration::from_secs(20),
    );
    let got: Ledger = consumed
        .into_iter()
        .map(|message| ((message.partition, message.offset), message.record))
        .collect();
    assert_eq!(
        got.len(),
        ledger.len(),
        "{when}: duplicate positions consumed"
    );
    for (position, record) in ledger {
        assert_eq!(
            got.get(position),
            Some(record),
            "{when}: record at {position:?}"
        );
    }
    for (partition, low, high) in kafka::watermarks(broker.bootstrap(), TOPIC) {
        let count = ledger.keys().filter(|(p, _)| *p == partition).count();
        assert_eq!(
            (low, high),
            (0, i64::try_from(count).expect("small")),
            "{when}: partition {partition}"
        );
    }
}

#[test]
fn records_survive_clean_restart_and_sigkill() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        broker.create_topic(TOPIC, PARTITIONS);
        let mut ledger = Ledger::new();

        produce_into(&broker, &mut ledger, "before-restart", 300, "all");
        assert_topic_is(&broker, &ledger, "before any restart");

        broker.restart();
        assert!(
            broker.list_topics().iter().any(|t| t == TOPIC),
            "topic lost by clean restart"
        );
        assert_topic_is(&broker, &ledger, "after clean restart");

        produce_into(&broker, &mut ledger, "before-kill", 300, "1");
        broker.kill();
        broker.start_again();
        assert!(
            broker.list_topics().iter().any(|t| t == TOPIC),
            "topic lost by SIGKILL"
        );
        assert_topic_is(&broker, &ledger, "after SIGKILL");

        // The recovered log accepts appends at the right offsets, and a
        // second crash straight after recovery loses nothing either.
        produce_into(&broker, &mut ledger, "after-kill", 100, "all");
        broker.kill();
        broker.start_again();
        assert_topic_is(&broker, &ledger, "after second SIGKILL");
        broker.stop();
    });
}

#[test]
fn empty_topic_survives_restart() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        broker.create_topic("empty-restart", 4);
        broker.restart();
        assert_eq!(
            kafka::partition_count(broker.bootstrap(), "empty-restart"),
            4
        );
        for (partition, low, high) in kafka::watermarks(broker.bootstrap(), "empty-restart") {
            assert_eq!((low, high), (0, 0), "partition {partition}");
        }
        broker.kill();
        broker.start_again();
        assert_eq!(
            kafka::partition_count(broker.bootstrap(), "empty-restart"),
            4
        );
        broker.stop();
    });
}

/// Copies the files of directory `from` into a new directory `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn dirs_ending_in(dir: &std::path::Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(suffix))
        .collect()
}

/// A crash between a topic deletion's commit and the rename of its
/// directories leaves `<topic>-<n>` on disk. Whether or not the topic is
/// created again, that data must never be served as the new topic's.
#[test]
fn a_deleted_topics_leftover_directory_is_never_served_again() {
    run_with_timeout(TEST_TIMEOUT, || {
        const T: &str = "reborn";
        let mut broker = TarnBroker::start();
        broker.create_topic(T, 1);
        let old: Vec<Outgoing> = (0..20)
            .map(|i| Outgoing {
                record: Record::value(&format!("old-{i}")),
                partition: Some(0),
                timestamp_ms: None,
            })
            .collect();
        TestProducer::new(broker.bootstrap(), &[("acks", "all")]).produce_all(T, &old);
        broker.stop();
        let saved = tempfile::tempdir().unwrap();
        let live = broker.data_dir().join(format!("{T}-0"));
        copy_dir(&live, saved.path());

        broker.start_again();
        let out = broker.cli(&[
            "topics",
            "delete",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            T,
        ]);
        assert!(out.status.success(), "delete: {out}");
        broker.stop();
        // The crash: the directory is back under its live name.
        copy_dir(saved.path(), &live);

        broker.start_again();
        assert!(!live.exists(), "the leftover is set aside at start-up");
        assert_eq!(dirs_ending_in(broker.data_dir(), "-stray").len(), 1);
        assert!(!broker.list_topics().iter().any(|t| t == T));
        broker.create_topic(T, 1);
        assert_eq!(kafka::watermarks(broker.bootstrap(), T), vec![(0, 0, 0)]);

        // The same leftover under the re-created topic's live name.
        broker.stop();
        std::fs::remove_dir_all(&live).unwrap();
        copy_dir(saved.path(), &live);
        broker.start_again();
        assert_eq!(kafka::watermarks(broker.bootstrap(), T), vec![(0, 0, 0)]);
        let new: Vec<Outgoing> = (0..3)
            .map(|i| Outgoing {
                record: Record::value(&format!("new-{i}")),
                partition: Some(0),
                timestamp_ms: None,
            })
            .collect();
        TestProducer::new(broker.bootstrap(), &[("acks", "all")]).produce_all(T, &new);
        let values: Vec<Option<Vec<u8>>> =
            kafka::consume_all(broker.bootstrap(), T, 3, Duration::from_secs(20))
                .into_iter()
                .map(|m| m.record.value)
                .collect();
        let expected: Vec<Option<Vec<u8>>> = (0..3)
            .map(|i| Some(format!("new-{i}").into_bytes()))
            .collect();
        assert_eq!(values, expected);
        broker.stop();
    });
}

#[test]
fn a_clean_restart_rebuilds_no_index_and_lookups_still_work() {
    run_with_timeout(TEST_TIMEOUT, || {
        const TOPIC: &str = "many-small";
        const PARTITIONS: i32 = 200;
        let mut broker = TarnBroker::start();
        broker.create_topic(TOPIC, PARTITIONS);
        // One record per partition: a small one, or one larger than
        // index.interval.bytes (4096) on odd partitions. Neither segment
        // has an index entry (the first batch of a segment never gets one),
        // so neither has an .index file. Partition 0 also gets enough
        // batches to have entries, for a lookup from the middle.
        let value = |partition: i32, i: usize| {
            let size = if partition % 2 == 1 { 5_000 } else { 20 };
            format!("{partition}-{i}-{}", "x".repeat(size))
        };
        let mut records: Vec<Outgoing> = (0..PARTITIONS)
            .map(|partition| Outgoing {
                record: Record::value(&value(partition, 0)),
                partition: Some(partition),
                timestamp_ms: None,
            })
            .collect();
        records.extend((1..100).map(|i| Outgoing {
            record: Record::value(&format!("{}{}", value(0, i), "y".repeat(1_000))),
            partition: Some(0),
            timestamp_ms: None,
        }));
        let delivered = TestProducer::new(broker.bootstrap(), &[("batch.size", "2000")])
            .produce_all(TOPIC, &records);
        assert_eq!(delivered.len(), records.len());
        broker.restart();
        let logs = broker.logs();
        assert!(
            !logs.contains("rebuilding segment indexes"),
            "a clean restart rebuilt indexes:\n{}",
            logs.lines()
                .filter(|l| l.contains("rebuilding"))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            TOPIC,
            records.len(),
            Duration::from_secs(30),
        );
        let got: BTreeMap<(i32, i64), Option<Vec<u8>>> = consumed
            .into_iter()
            .map(|m| ((m.partition, m.offset), m.record.value))
            .collect();
        for (outgoing, d) in records.iter().zip(&delivered) {
            assert_eq!(
                got.get(&(d.partition, d.offset)),
                Some(&outgoing.record.value),
                "record at {}/{}",
                d.partition,
                d.offset
            );
        }
        // A lookup from the middle of partition 0 starts at that offset.
        let from_middle = kafka::consume_from(
            broker.bootstrap(),
            TOPIC,
            &[(0, rdkafka::Offset::Offset(50))],
            1,
            Duration::from_secs(20),
        );
        assert_eq!(from_middle[0].offset, 50);
        let expected = records
            .iter()
            .zip(&delivered)
            .find(|(_, d)| (d.partition, d.offset) == (0, 50))
            .map(|(o, _)| o.record.value.clone())
            .expect("offset 50 of partition 0 was produced");
        assert_eq!(from_middle[0].record.value, expected);
        broker.stop();
    });
}
