//! Storage lifecycle through the real broker: durable produce
//! (`flush.messages`), retention by size and time, compaction, and many
//! cheap partitions.

use std::thread;
use std::time::Duration;

use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};

/// `tarn topics create` with `--config key=value` pairs, asserting success.
fn create_topic_with(broker: &TarnBroker, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    let partitions = partitions.to_string();
    let mut args = vec![
        "topics",
        "create",
        "--bootstrap-server",
        broker.bootstrap(),
        "--topic",
        topic,
        "--partitions",
        &partitions,
        "--replication-factor",
        "1",
    ];
    let pairs: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for pair in &pairs {
        args.push("--config");
        args.push(pair);
    }
    let out = broker.cli(&args);
    assert!(out.status.success(), "create topic {topic}: {out}");
}

#[test]
fn flush_messages_one_acknowledges_every_record_from_concurrent_producers() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        create_topic_with(&broker, "durable", 2, &[("flush.messages", "1")]);
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let bootstrap = broker.bootstrap().to_string();
                thread::spawn(move || {
                    let records: Vec<Outgoing> = (0..100)
                        .map(|i| Outgoing {
                            record: Record::kv(&format!("p{p}"), &format!("v{i}")),
                            partition: Some(i % 2),
                            timestamp_ms: None,
                        })
                        .collect();
                    TestProducer::new(&bootstrap, &[("acks", "all"), ("linger.ms", "0")])
                        .produce_all("durable", &records)
                        .len()
                })
            })
            .collect();
        let acked: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
        assert_eq!(acked, 400);
        broker.kill();
        broker.start_again();
        let consumed =
            kafka::consume_all(broker.bootstrap(), "durable", 400, Duration::from_secs(20));
        assert_eq!(consumed.len(), 400);
    });
}
