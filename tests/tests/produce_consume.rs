//! Produce and consume through librdkafka: topics with 1, 3 and 16
//! partitions; keyed and unkeyed records; headers (duplicate keys, null and
//! binary values); null and empty keys and values; acks=all, acks=1 and
//! acks=0. Everything must come back byte-identical, in offset order per
//! partition, at the offsets the delivery reports named, with no gaps.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tarn_e2e::kafka::{self, Consumed, Delivered, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};

/// A deterministic mix of record shapes; `i` makes every record unique.
fn record(i: usize) -> Record {
    let headers = match i % 4 {
        0 => Vec::new(),
        1 => vec![("trace".to_string(), Some(format!("t-{i}").into_bytes()))],
        2 => vec![
            ("dup".to_string(), Some(b"first".to_vec())),
            ("null-header".to_string(), None),
            ("dup".to_string(), Some(vec![0, 255, 1, 254])),
        ],
        _ => vec![("empty".to_string(), Some(Vec::new()))],
    };
    let key = match i % 5 {
        0 => None,
        1 => Some(Vec::new()),
        _ => Some(format!("key-{}", i % 7).into_bytes()),
    };
    let value = match i % 6 {
        0 => None,
        1 => Some(Vec::new()),
        2 => Some((0..=255u8).cycle().take(3000 + i).collect()),
        _ => Some(format!("value-{i}").into_bytes()),
    };
    Record {
        key,
        value,
        headers,
    }
}

/// Outgoing records for a topic with `partitions` partitions: some pinned to
/// each partition, the rest left to the partitioner (keyed or sticky).
fn workload(partitions: i32, count: usize) -> Vec<Outgoing> {
    (0..count)
        .map(|i| Outgoing {
            record: record(i),
            partition: (i % 3 == 0).then(|| i32::try_from(i).expect("small") % partitions),
            timestamp_ms: None,
        })
        .collect()
}

/// Checks that `consumed` is exactly what `sent`/`delivered` say was written.
fn assert_consumed_matches(
    topic: &str,
    partitions: i32,
    sent: &[Outgoing],
    delivered: &[Delivered],
    consumed: &[Consumed],
) {
    let mut expected: HashMap<Delivered, &Record> = HashMap::new();
    for (outgoing, at) in sent.iter().zip(delivered) {
        assert!(
            (0..partitions).contains(&at.partition),
            "{topic}: bad partition in {at:?}"
        );
        if let Some(pinned) = outgoing.partition {
            assert_eq!(
                at.partition, pinned,
                "{topic}: record ignored its explicit partition"
            );
        }
        assert!(
            expected.insert(*at, &outgoing.record).is_none(),
            "{topic}: two records acknowledged at {at:?}"
        );
    }
    let mut by_partition: BTreeMap<i32, Vec<&Consumed>> = BTreeMap::new();
    for message in consumed {
        by_partition
            .entry(message.partition)
            .or_default()
            .push(message);
    }
    for (partition, messages) in &by_partition {
        for (position, message) in messages.iter().enumerate() {
            assert_eq!(
                message.offset,
                i64::try_from(position).expect("small"),
                "{topic}/{partition}: offsets are not contiguous from 0"
            );
            let at = Delivered {
                partition: *partition,
                offset: message.offset,
            };
            let want = expected
                .get(&at)
                .unwrap_or_else(|| panic!("{topic}: consumed a record nobody produced at {at:?}"));
            assert_eq!(&message.record, *want, "{topic}: record at {at:?} differs");
        }
    }
    assert_eq!(consumed.len(), sent.len(), "{topic}: record count");
}

/// Records with the same non-empty key must share a partition.
fn assert_keys_stick(topic: &str, sent: &[Outgoing], delivered: &[Delivered]) {
    let mut partition_of_key: HashMap<&[u8], i32> = HashMap::new();
    for (outgoing, at) in sent.iter().zip(delivered) {
        let Some(key) = outgoing.record.key.as_deref() else {
            continue;
        };
        if outgoing.partition.is_some() || key.is_empty() {
            continue;
        }
        let first = *partition_of_key.entry(key).or_insert(at.partition);
        assert_eq!(first, at.partition, "{topic}: key {key:?} moved partition");
    }
}

fn round_trip(partitions: i32, count: usize) {
    let broker = TarnBroker::start();
    let topic = format!("round-trip-{partitions}");
    broker.create_topic(&topic, partitions);
    assert_eq!(
        kafka::partition_count(broker.bootstrap(), &topic),
        partitions
    );

    let sent = workload(partitions, count);
    let (first_half, second_half) = sent.split_at(count / 2);
    let mut delivered =
        TestProducer::new(broker.bootstrap(), &[("acks", "all")]).produce_all(&topic, first_half);
    delivered.extend(
        TestProducer::new(broker.bootstrap(), &[("acks", "1")]).produce_all(&topic, second_half),
    );
    assert_keys_stick(&topic, &sent, &delivered);

    let consumed = kafka::consume_all(broker.bootstrap(), &topic, count, Duration::from_secs(30));
    assert_consumed_matches(&topic, partitions, &sent, &delivered, &consumed);

    for (partition, low, high) in kafka::watermarks(broker.bootstrap(), &topic) {
        let acked = delivered
            .iter()
            .filter(|at| at.partition == partition)
            .count();
        assert_eq!(
            (low, high),
            (0, i64::try_from(acked).expect("small")),
            "{topic}/{partition}"
        );
    }
}

#[test]
fn one_partition_round_trip() {
    run_with_timeout(TEST_TIMEOUT, || round_trip(1, 200));
}

#[test]
fn three_partition_round_trip() {
    run_with_timeout(TEST_TIMEOUT, || round_trip(3, 300));
}

#[test]
fn sixteen_partition_round_trip() {
    run_with_timeout(TEST_TIMEOUT, || round_trip(16, 16 * 25));
}

#[test]
fn acks_zero_records_arrive() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        let topic = "acks-zero";
        broker.create_topic(topic, 1);
        let sent: Vec<Outgoing> = (0..100)
            .map(|i| Record::kv(&format!("k{i}"), &format!("v{i}")).into())
            .collect();
        let mut producer = TestProducer::new(broker.bootstrap(), &[("acks", "0")]);
        for outgoing in &sent {
            producer.send(topic, outgoing);
        }
        for result in producer.flush(Duration::from_secs(30)) {
            result.expect("acks=0 send reported an error");
        }
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            topic,
            sent.len(),
            Duration::from_secs(30),
        );
        for (i, (message, outgoing)) in consumed.iter().zip(&sent).enumerate() {
            assert_eq!(message.offset, i64::try_from(i).expect("small"));
            assert_eq!(message.record, outgoing.record);
        }
    });
}

#[test]
fn large_record_round_trips() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        let topic = "large-record";
        broker.create_topic(topic, 1);
        // Well under message.max.bytes (1048588) once framed.
        let value: Vec<u8> = (0..900_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let sent = vec![Outgoing::from(Record {
            key: Some(b"big".to_vec()),
            value: Some(value),
            headers: vec![("h".to_string(), Some(b"v".to_vec()))],
        })];
        let delivered =
            TestProducer::new(broker.bootstrap(), &[("acks", "all")]).produce_all(topic, &sent);
        let consumed = kafka::consume_all(broker.bootstrap(), topic, 1, Duration::from_secs(30));
        assert_consumed_matches(topic, 1, &sent, &delivered, &consumed);
    });
}
