//! A full disk: the broker's data directory sits on a small tmpfs. When
//! appends no longer fit, produces to the partition answer
//! KAFKA_STORAGE_ERROR, the broker stays up and keeps serving reads, no
//! torn batch becomes visible, and writing resumes at the right offset as
//! soon as space returns. (That is a single node; a broker in a cluster
//! stops instead, so that other replicas take over: `cluster.rs`.)

use std::time::Duration;

use tarn_cli::client::Client;
use tarn_e2e::disk::SmallDisk;
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
