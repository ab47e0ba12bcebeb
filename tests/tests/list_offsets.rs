//! ListOffsets through librdkafka: earliest/latest watermarks, and offset
//! lookup by timestamp (`offsets_for_times`) on records with explicit
//! CreateTime timestamps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::Consumer;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer, REQUEST_TIMEOUT};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};

const TOPIC: &str = "list-offsets";
const RECORDS: i64 = 20;
const STEP_MS: i64 = 1000;

fn now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since_epoch.as_millis()).expect("millis fit i64")
}

/// Offsets the broker returns for each `(partition, timestamp)` query.
fn offsets_for_times(bootstrap: &str, queries: &[(i32, i64)]) -> Vec<Offset> {
    let consumer = kafka::consumer(bootstrap, &[]);
    let mut list = TopicPartitionList::new();
    for (partition, timestamp_ms) in queries {
        list.add_partition_offset(TOPIC, *partition, Offset::Offset(*timestamp_ms))
            .expect("build query");
    }
    let answer = consumer
        .offsets_for_times(list, REQUEST_TIMEOUT)
        .expect("offsets_for_times");
    queries
        .iter()
        .map(|(partition, _)| {
            let element = answer
                .find_partition(TOPIC, *partition)
                .unwrap_or_else(|| panic!("no answer for partition {partition}"));
            element.error().expect("per-partition ListOffsets error");
            element.offset()
        })
        .collect()
}

#[test]
fn watermarks_and_offsets_for_times() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic(TOPIC, 2);
        for (partition, low, high) in kafka::watermarks(broker.bootstrap(), TOPIC) {
            assert_eq!((low, high), (0, 0), "empty partition {partition}");
        }

        // Partition 0 gets RECORDS records one second apart, an hour ago,
        // each in its own request so they land in separate batches too.
        let base_ms = now_ms() - 3_600_000;
        let mut producer =
            TestProducer::new(broker.bootstrap(), &[("acks", "all"), ("linger.ms", "0")]);
        for i in 0..RECORDS {
            let outgoing = Outgoing {
                record: Record::value(&format!("at-{i}")),
                partition: Some(0),
                timestamp_ms: Some(base_ms + i * STEP_MS),
            };
            let delivered = producer.produce_all(TOPIC, &[outgoing]);
            assert_eq!(delivered[0].offset, i);
        }

        let marks = kafka::watermarks(broker.bootstrap(), TOPIC);
        assert_eq!(marks, vec![(0, 0, RECORDS), (1, 0, 0)]);

        // The earliest offset whose timestamp is >= the query.
        let answers = offsets_for_times(broker.bootstrap(), &[(0, base_ms - 10 * STEP_MS)]);
        assert_eq!(answers, vec![Offset::Offset(0)], "before the first record");
        for (query_ms, want) in [
            (base_ms, 0),
            (base_ms + 1, 1),
            (base_ms + 5 * STEP_MS, 5),
            (base_ms + 5 * STEP_MS + STEP_MS / 2, 6),
            (base_ms + (RECORDS - 1) * STEP_MS, RECORDS - 1),
        ] {
            let answers = offsets_for_times(broker.bootstrap(), &[(0, query_ms)]);
            assert_eq!(
                answers,
                vec![Offset::Offset(want)],
                "timestamp base+{}",
                query_ms - base_ms
            );
        }
        // After the last record, and on an empty partition: no such offset
        // (the broker answers -1, which librdkafka calls End).
        let answers = offsets_for_times(
            broker.bootstrap(),
            &[(0, base_ms + RECORDS * STEP_MS), (1, base_ms)],
        );
        assert_eq!(answers, vec![Offset::End, Offset::End]);

        // The timestamps themselves come back on fetch.
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            TOPIC,
            usize::try_from(RECORDS).expect("small"),
            Duration::from_secs(20),
        );
        for message in consumed {
            assert_eq!(
                message.timestamp_ms,
                Some(base_ms + message.offset * STEP_MS)
            );
        }
    });
}
