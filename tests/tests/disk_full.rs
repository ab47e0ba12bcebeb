//! A full disk: the broker's data directory sits on a small tmpfs. When
//! appends no longer fit, produces to the partition answer
//! KAFKA_STORAGE_ERROR, the broker stays up and keeps serving reads, no
//! torn batch becomes visible, and writing resumes at the right offset as
//! soon as space returns. (That is a single node; a broker in a cluster
//! stops instead, so that other replicas take over: `cluster.rs`.)

use std::time::{Duration, Instant};

use tarn_cli::client::Client;
use tarn_e2e::disk::SmallDisk;
use tarn_e2e::kafka::{Outgoing, Record, TestProducer};
use tarn_e2e::wire::{batch, produce};
use tarn_e2e::{kafka, run_with_timeout, BrokerOptions, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::error;

#[test]
fn a_full_disk_answers_storage_errors_and_writing_resumes_when_space_returns() {
    run_with_timeout(TEST_TIMEOUT, || {
        let disk = SmallDisk::mount("3m");
        let data = disk.path().join("data");
        let ballast = disk.path().join("ballast");
        std::fs::write(&ballast, vec![0u8; 1 << 20]).expect("write ballast");
        let mut broker = TarnBroker::start_with(BrokerOptions {
            data_dir: Some(data),
            ..Default::default()
        });
        broker.create_topic("full", 1);
        let mut client = Client::connect(broker.bootstrap()).expect("connect");
        let value = vec![b'x'; 1000];
        let mut acked_records = 0i64;
        let mut refused = None;
        for _ in 0..200 {
            let answer = produce(&mut client, "full", 0, batch(50, 1, &value));
            if answer.error_code == error::NONE {
                assert_eq!(answer.base_offset, acked_records, "offsets stay contiguous");
                acked_records += 50;
            } else {
                refused = Some(answer.error_code);
                break;
            }
        }
        assert_eq!(
            refused,
            Some(error::KAFKA_STORAGE_ERROR),
            "the disk never filled up"
        );
        assert!(acked_records > 0);
        // Still up, still serving reads of everything acknowledged.
        broker.assert_alive();
        let (_, low, high) = kafka::watermarks(broker.bootstrap(), "full")[0];
        assert_eq!((low, high), (0, acked_records));
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            "full",
            acked_records as usize,
            Duration::from_secs(20),
        );
        assert_eq!(consumed.len() as i64, acked_records);
        // A refused append stays refused while the disk is full.
        let again = produce(&mut client, "full", 0, batch(50, 1, &value));
        assert_eq!(again.error_code, error::KAFKA_STORAGE_ERROR);

        std::fs::remove_file(&ballast).expect("free space");
        let resumed = produce(&mut client, "full", 0, batch(50, 1, &value));
        assert_eq!(
            resumed.error_code,
            error::NONE,
            "writing resumes once space returns"
        );
        assert_eq!(
            resumed.base_offset, acked_records,
            "no torn batch was left behind"
        );
        let total = acked_records + 50;
        let consumed = kafka::consume_all(
            broker.bootstrap(),
            "full",
            total as usize,
            Duration::from_secs(20),
        );
        let offsets: Vec<i64> = consumed.iter().map(|c| c.offset).collect();
        assert_eq!(offsets, (0..total).collect::<Vec<_>>());
        let log = broker.logs();
        assert_eq!(
            log.matches("appending failed on storage").count(),
            1,
            "the cause is logged once per episode:\n{log}"
        );
        assert!(log.contains("appending works again"), "{log}");
        // The metadata log refused appends while full (the consumers'
        // group.id asked for __consumer_offsets); nothing torn was left in
        // it: a restart replays everything.
        broker.restart();
        let (_, low, high) = kafka::watermarks(broker.bootstrap(), "full")[0];
        assert_eq!((low, high), (0, total));
        broker.stop();
    });
}

/// An idempotent producer (librdkafka's, acks=all, as Kafka's clients
/// default to) keeps batches in flight while the disk fills: the first
/// refused batch is followed by others the broker also has to refuse, and
/// retried once space returns. Every record must be acknowledged once and
/// read back once, in the order sent: an answer that made the producer
/// think the broker lost its sequence state (OUT_OF_ORDER_SEQUENCE_NUMBER
/// for the batch it expects next) would make it bump its epoch and resend
/// batches already written.
#[test]
fn an_idempotent_producer_rides_out_a_full_disk_without_duplicates() {
    run_with_timeout(Duration::from_secs(300), || {
        let disk = SmallDisk::mount("6m");
        let mut broker = TarnBroker::start_with(BrokerOptions {
            data_dir: Some(disk.path().join("data")),
            ..Default::default()
        });
        broker.create_topic("full", 1);
        // 20 MB into a 6 MiB disk: most of it waits for space.
        let count: usize = 20_000;
        let value = "x".repeat(1000);
        let mut producer = TestProducer::new(
            broker.bootstrap(),
            &[
                ("acks", "all"),
                ("enable.idempotence", "true"),
                ("message.timeout.ms", "120000"),
                // Many small batches in flight, as the Java client's
                // default batch.size makes them.
                ("batch.size", "16384"),
            ],
        );
        for i in 0..count {
            producer.send(
                "full",
                &Outgoing {
                    record: Record::kv(&i.to_string(), &value),
                    partition: Some(0),
                    timestamp_ms: None,
                },
            );
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while !broker.logs().contains("appending failed on storage") {
            assert!(Instant::now() < deadline, "the disk never filled up");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Let the producer's retries meet the full disk a few times.
        std::thread::sleep(Duration::from_secs(2));
        disk.resize("64m");
        let reports = producer.flush(Duration::from_secs(180));
        let failed: Vec<_> = reports.iter().filter(|r| r.is_err()).collect();
        assert!(
            failed.is_empty(),
            "{} of {count} records not acknowledged, first: {:?}",
            failed.len(),
            failed.first()
        );
        let offsets: Vec<i64> = reports
            .iter()
            .map(|r| r.as_ref().expect("checked above").offset)
            .collect();
        assert_eq!(offsets, (0..count as i64).collect::<Vec<_>>());
        let read = kafka::consume_all(broker.bootstrap(), "full", count, Duration::from_secs(60));
        kafka::assert_keys_count_up(&read, count);
        broker.stop();
    });
}
