//! Connection limits with Kafka's names: `max.connections.per.ip`,
//! `max.connections` and `connections.max.idle.ms`. A client over a limit,
//! or one that connects (or starts a frame) and then goes silent, is
//! closed; everyone else keeps working.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rdkafka::topic_partition_list::Offset;
use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, BrokerOptions, TarnBroker, TEST_TIMEOUT};

/// True when the broker closes `stream` within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 64];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
            {
                return true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    false
}

fn round_trip(broker: &TarnBroker, topic: &str, value: &str) {
    let record = Record::kv("k", value);
    let delivered = TestProducer::new(broker.bootstrap(), &[("acks", "all")]).produce_all(
        topic,
        &[Outgoing {
            record: record.clone(),
            partition: Some(0),
            timestamp_ms: None,
        }],
    );
    let consumed = kafka::consume_from(
        broker.bootstrap(),
        topic,
        &[(0, Offset::Offset(delivered[0].offset))],
        1,
        Duration::from_secs(15),
    );
    assert_eq!(consumed[0].record, record);
}

#[test]
fn connections_over_the_per_ip_limit_are_closed() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker =
            TarnBroker::start_with(BrokerOptions::default().set("max.connections.per.ip", "4"));
        broker.create_topic("limited", 1);
        let mut held: Vec<TcpStream> = (0..4)
            .map(|_| TcpStream::connect(broker.bootstrap()).expect("connect"))
            .collect();
        let mut extra = TcpStream::connect(broker.bootstrap()).expect("connect");
        assert!(
            closed_within(&mut extra, Duration::from_secs(5)),
            "the fifth connection was kept"
        );
        // The held connections still work: send ApiVersions v0 on one.
        let request = [0u8, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff];
        held[0].write_all(&request).expect("write");
        held[0]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut size = [0u8; 4];
        held[0]
            .read_exact(&mut size)
            .expect("an answer on a held connection");
        held.clear();
        // Once they are gone, a real client gets in.
        round_trip(&broker, "limited", "after the limit");
    });
}

#[test]
fn idle_and_stalled_connections_are_closed_but_busy_ones_are_not() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker =
            TarnBroker::start_with(BrokerOptions::default().set("connections.max.idle.ms", "1000"));
        broker.create_topic("idle", 1);
        let mut silent = TcpStream::connect(broker.bootstrap()).expect("connect");
        assert!(
            closed_within(&mut silent, Duration::from_secs(10)),
            "a silent connection was kept"
        );
        let mut stalled = TcpStream::connect(broker.bootstrap()).expect("connect");
        stalled
            .write_all(&[0, 0, 1, 0, 0, 3])
            .expect("write a partial frame");
        assert!(
            closed_within(&mut stalled, Duration::from_secs(10)),
            "a stalled frame kept its connection"
        );
        // A consumer waiting in long polls (each shorter than the idle limit)
        // is never idle: it still gets a record produced after 3 s.
        let consumer_broker = broker.bootstrap().to_owned();
        let reader = std::thread::spawn(move || {
            kafka::consume_from(
                &consumer_broker,
                "idle",
                &[(0, Offset::Beginning)],
                1,
                Duration::from_secs(30),
            )
        });
        std::thread::sleep(Duration::from_secs(3));
        round_trip(&broker, "idle", "late");
        let consumed = reader.join().expect("reader");
        assert_eq!(consumed[0].record.value.as_deref(), Some(&b"late"[..]));
    });
}
