//! The idempotent producer (`enable.idempotence=true`, so InitProducerId and
//! producer sequence numbers): 10,000 records are each written exactly once,
//! and within a partition in the order they were sent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};

const RECORDS: usize = 10_000;

#[test]
fn idempotent_producer_writes_each_record_once_in_order() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        let topic = "idempotent";
        broker.create_topic(topic, 3);

        let sent: Vec<Outgoing> = (0..RECORDS)
            .map(|i| Record::kv(&format!("key-{}", i % 50), &format!("record-{i:05}")).into())
            .collect();
        let mut producer = TestProducer::new(
            broker.bootstrap(),
            &[
                ("enable.idempotence", "true"),
                ("batch.size", "16384"),
                ("max.in.flight.requests.per.connection", "5"),
            ],
        );
        let delivered = producer.produce_all(topic, &sent);

        // Sent order is offset order within each partition, with no gaps.
        let mut next_offset: BTreeMap<i32, i64> = BTreeMap::new();
        for (i, at) in delivered.iter().enumerate() {
            let next = next_offset.entry(at.partition).or_insert(0);
            assert_eq!(
                at.offset, *next,
                "record #{i} acknowledged out of order: {at:?}"
            );
            *next += 1;
        }
        for (partition, low, high) in kafka::watermarks(broker.bootstrap(), topic) {
            let acked = next_offset.get(&partition).copied().unwrap_or(0);
            assert_eq!(
                (low, high),
                (0, acked),
                "watermarks of partition {partition}"
            );
        }

        let consumed =
            kafka::consume_all(broker.bootstrap(), topic, RECORDS, Duration::from_secs(40));
        let mut seen = HashSet::new();
        for message in &consumed {
            let value = message.record.value.clone().expect("non-null value");
            assert!(
                seen.insert(value.clone()),
                "duplicate record {:?}",
                String::from_utf8_lossy(&value)
            );
        }
        assert_eq!(seen.len(), RECORDS);
        let by_position: HashMap<(i32, i64), &Record> = consumed
            .iter()
            .map(|m| ((m.partition, m.offset), &m.record))
            .collect();
        for (outgoing, at) in sent.iter().zip(&delivered) {
            let record = by_position
                .get(&(at.partition, at.offset))
                .unwrap_or_else(|| panic!("nothing consumed at {at:?}"));
            assert_eq!(*record, &outgoing.record, "record at {at:?}");
        }
    });
}
