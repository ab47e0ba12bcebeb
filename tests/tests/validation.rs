//! Record batches whose headers disagree with their records, sent to the
//! real binary on raw Produce requests: the broker answers Kafka's error
//! code for the partition (INVALID_RECORD, INVALID_TIMESTAMP,
//! CORRUPT_MESSAGE), names the refused records in `record_errors` from
//! Produce v8 on, never panics a connection task, and keeps serving.

use bytes::Bytes;
use tarn_cli::client::Client;
use tarn_e2e::wire::produce_version;
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::error;
use tarn_protocol::messages::produce::{
    PartitionProduceResponse, ProduceRequest, ProduceResponse, TopicProduceData,
};
use tarn_protocol::record_batch::{compute_crc, RecordBatchBuilder};

/// Byte position of the last offset delta in a v2 batch header.
const LAST_OFFSET_DELTA_AT: usize = 23;
/// Byte position of the CRC in a v2 batch header.
const CRC_AT: usize = 17;

fn create(broker: &TarnBroker, topic: &str, configs: &[&str]) {
    broker.create_topic_with_configs(topic, configs);
}

/// A one-record batch claiming `last_offset_delta`, its CRC made valid.
fn lying_batch(last_offset_delta: i32) -> Vec<u8> {
    let mut batch = RecordBatchBuilder::new()
        .record(now_ms(), Some(b"k"), Some(b"v"))
        .build();
    batch[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
        .copy_from_slice(&last_offset_delta.to_be_bytes());
    let crc = compute_crc(&batch);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Until the shared harness checks every test's broker, each test here
/// checks its own: no connection task may have panicked.
fn assert_no_panic(broker: &TarnBroker) {
    let logs = broker.logs();
    assert!(!logs.contains("panicked"), "the broker panicked:\n{logs}");
}

fn assert_accepts_a_valid_batch(client: &mut Client, topic: &str, expected_offset: i64) {
    let batch = RecordBatchBuilder::new()
        .record(now_ms(), Some(b"k"), Some(b"fine"))
        .build();
    let answer = produce_version(client, 9, -1, topic, 0, batch);
    assert_eq!(answer.error_code, error::NONE, "{answer:?}");
    assert_eq!(answer.base_offset, expected_offset);
}

fn record_error_indexes(answer: &PartitionProduceResponse) -> Vec<i32> {
    answer.record_errors.iter().map(|e| e.batch_index).collect()
}

/// The hardening issue's request, byte for byte: two v2 batches in one
/// Produce v7 partition, each with one record, a last offset delta of 2^30
/// and a valid CRC. It used to trip a segment assertion and kill the
/// connection task.
#[test]
fn two_batches_claiming_2_pow_30_offsets_are_invalid_record() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        create(&broker, "lying", &[]);
        let mut client = Client::connect(broker.bootstrap()).expect("connect");
        let records = [lying_batch(1 << 30), lying_batch(1 << 30)].concat();
        let request = ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 1000,
            topic_data: vec![TopicProduceData {
                name: "lying".into(),
                topic_id: Default::default(),
                partition_data: vec![tarn_protocol::messages::produce::PartitionProduceData {
                    index: 0,
                    records: Some(Bytes::from(records)),
                }],
            }],
        };
        let response: ProduceResponse = client
            .call(0, 7, 9, &request)
            .expect("an answer, not a closed connection");
        let answer = &response.responses[0].partition_responses[0];
        assert_eq!(answer.error_code, error::INVALID_RECORD, "{answer:?}");
        assert_eq!(answer.base_offset, -1);
        // One such batch alone is refused by the log validator.
        let answer = produce_version(&mut client, 7, -1, "lying", 0, lying_batch(1 << 30));
        assert_eq!(answer.error_code, error::INVALID_RECORD, "{answer:?}");
        // The same connection still works, and nothing was appended.
        assert_accepts_a_valid_batch(&mut client, "lying", 0);
        broker.assert_alive();
        assert_no_panic(&broker);
        assert!(
            broker.logs().contains("last offset delta"),
            "the refusal is logged:\n{}",
            broker.logs()
        );
    });
}

/// 100 records, every tenth (3, 13, ..., 93) without a key, to a compacted
/// topic: INVALID_RECORD naming exactly those ten records from v8 on.
#[test]
fn keyless_records_on_a_compacted_topic_are_named_in_record_errors() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        create(&broker, "compacted", &["cleanup.policy=compact"]);
        let mut builder = RecordBatchBuilder::new();
        for i in 0..100 {
            let key = format!("k{i}");
            let key = (i % 10 != 3).then_some(key.as_bytes());
            builder = builder.record(now_ms(), key, Some(b"v"));
        }
        let batch = builder.build();
        let mut client = Client::connect(broker.bootstrap()).expect("connect");
        let keyless: Vec<i32> = (0..10).map(|i| i * 10 + 3).collect();
        for version in [8, 9] {
            let answer = produce_version(&mut client, version, -1, "compacted", 0, batch.clone());
            assert_eq!(
                answer.error_code,
                error::INVALID_RECORD,
                "v{version}: {answer:?}"
            );
            assert_eq!(record_error_indexes(&answer), keyless, "v{version}");
            assert!(answer.record_errors.iter().all(|e| e
                .batch_index_error_message
                .as_deref()
                .is_some_and(|m| m.contains("without a key"))));
            assert!(answer.error_message.is_some());
        }
        // v7 has no record_errors field; the code is the same.
        let answer = produce_version(&mut client, 7, -1, "compacted", 0, batch);
        assert_eq!(answer.error_code, error::INVALID_RECORD, "{answer:?}");
        assert!(answer.record_errors.is_empty());
        assert_accepts_a_valid_batch(&mut client, "compacted", 0);
        broker.assert_alive();
        assert_no_panic(&broker);
    });
}

/// CreateTime timestamps outside `message.timestamp.after.max.ms` /
/// `before.max.ms` are INVALID_TIMESTAMP with the offending records named.
#[test]
fn timestamps_out_of_range_are_invalid_timestamp() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        create(
            &broker,
            "clocked",
            &[
                "message.timestamp.before.max.ms=60000",
                "message.timestamp.after.max.ms=60000",
            ],
        );
        let now = now_ms();
        let batch = RecordBatchBuilder::new()
            .record(now, Some(b"a"), None)
            .record(now + 3_600_000, Some(b"b"), None)
            .record(now, Some(b"c"), None)
            .record(now - 3_600_000, Some(b"d"), None)
            .build();
        let mut client = Client::connect(broker.bootstrap()).expect("connect");
        let answer = produce_version(&mut client, 9, -1, "clocked", 0, batch);
        assert_eq!(answer.error_code, error::INVALID_TIMESTAMP, "{answer:?}");
        assert_eq!(record_error_indexes(&answer), vec![1, 3]);
        assert_accepts_a_valid_batch(&mut client, "clocked", 0);
        assert_no_panic(&broker);
        broker.assert_alive();
    });
}

/// Header flags a client may not set, and records that do not parse.
#[test]
fn control_batches_and_malformed_records_are_refused() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        create(&broker, "flags", &[]);
        let mut client = Client::connect(broker.bootstrap()).expect("connect");
        let control = RecordBatchBuilder::new()
            .control(true)
            .record(now_ms(), Some(b"k"), Some(b"v"))
            .build();
        let answer = produce_version(&mut client, 9, -1, "flags", 0, control);
        assert_eq!(answer.error_code, error::INVALID_RECORD, "{answer:?}");
        // A record whose length runs past the batch (CRC made valid).
        let mut torn = RecordBatchBuilder::new()
            .record(now_ms(), Some(b"k"), Some(b"v"))
            .build();
        torn[61] = 0x7e;
        let crc = compute_crc(&torn);
        torn[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        let answer = produce_version(&mut client, 9, -1, "flags", 0, torn);
        assert_eq!(answer.error_code, error::CORRUPT_MESSAGE, "{answer:?}");
        assert_accepts_a_valid_batch(&mut client, "flags", 0);
        assert_no_panic(&broker);
        broker.assert_alive();
    });
}
