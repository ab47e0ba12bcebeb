//! Hostile and broken clients on raw TCP must not hurt anyone else: while a
//! normal producer keeps producing, we send truncated frames, absurd array
//! counts, random bytes, frames above `socket.request.max.bytes` and negative
//! lengths. After each one the broker process is still alive, a fresh client
//! can produce and consume, and at the end the background producer's records
//! are all there.
//!
//! Where the frame is complete the broker may answer with an error or close
//! the connection, but it must do one of them promptly; where the length
//! prefix itself is unacceptable it must close the connection.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::topic_partition_list::Offset;
use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};

/// How long the broker has to answer or close a connection.
const VERDICT_TIMEOUT: Duration = Duration::from_secs(5);
const HEALTH_TOPIC: &str = "hostile-health";
const BACKGROUND_TOPIC: &str = "hostile-background";
/// Seed of the random garbage; printed so a failure can be replayed.
const SEED: u64 = 0x7a11_5eed_0bad_f00d;

fn connect(bootstrap: &str) -> TcpStream {
    let stream = TcpStream::connect(bootstrap).expect("connect to broker");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("set read timeout");
    stream
        .set_write_timeout(Some(VERDICT_TIMEOUT))
        .expect("set write timeout");
    stream
}

/// Writes `bytes`, ignoring a broker that already hung up on us (closing
/// early is a legitimate answer to garbage).
fn send(stream: &mut TcpStream, bytes: &[u8]) {
    match stream.write_all(bytes) {
        Ok(()) => {}
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ) => {}
        Err(err) => panic!("write to broker: {err}"),
    }
}

enum Verdict {
    Closed,
    Answered(Vec<u8>),
}

/// Reads until the broker closes the connection or (if `answer_ok`) sends
/// something back; panics if neither happens within [`VERDICT_TIMEOUT`].
fn verdict(stream: &mut TcpStream, what: &str, answer_ok: bool) -> Verdict {
    let deadline = Instant::now() + VERDICT_TIMEOUT;
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Verdict::Closed,
            Ok(n) => {
                received.extend_from_slice(&buf[..n]);
                if answer_ok && received.len() >= 8 {
                    return Verdict::Answered(received);
                }
            }
            Err(err)
                if matches!(
                    err.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
            {
                return Verdict::Closed;
            }
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(err) => panic!("{what}: read failed: {err}"),
        }
        assert!(
            Instant::now() < deadline,
            "{what}: broker neither {} nor closed the connection within {VERDICT_TIMEOUT:?} \
             (received {} bytes)",
            if answer_ok { "answered" } else { "rejected" },
            received.len()
        );
    }
}

fn expect_closed(stream: &mut TcpStream, what: &str) {
    verdict(stream, what, false);
}

/// For a complete frame: an answer must carry our correlation id.
fn expect_answer_or_close(stream: &mut TcpStream, what: &str, correlation_id: i32) {
    if let Verdict::Answered(bytes) = verdict(stream, what, true) {
        let answered_id = i32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes"));
        assert_eq!(
            answered_id, correlation_id,
            "{what}: answer has the wrong correlation id"
        );
    }
}

/// A request header (v1: api key, version, correlation id, client id).
fn header(api_key: i16, api_version: i16, correlation_id: i32) -> Vec<u8> {
    let client_id = b"tarn-e2e-hostile";
    let mut out = Vec::new();
    out.extend_from_slice(&api_key.to_be_bytes());
    out.extend_from_slice(&api_version.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(&i16::try_from(client_id.len()).expect("short").to_be_bytes());
    out.extend_from_slice(client_id);
    out
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = i32::try_from(body.len())
        .expect("small frame")
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

/// xorshift64*: deterministic garbage without a dependency.
struct Garbage(u64);

impl Garbage {
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }
}

/// The broker is alive and a brand-new client can produce and consume.
fn assert_healthy(broker: &mut TarnBroker, after: &str) {
    broker.assert_alive();
    let record = Record::kv("health", after);
    let delivered = TestProducer::new(broker.bootstrap(), &[("acks", "all")]).produce_all(
        HEALTH_TOPIC,
        &[Outgoing {
            record: record.clone(),
            partition: Some(0),
            timestamp_ms: None,
        }],
    );
    let consumed = kafka::consume_from(
        broker.bootstrap(),
        HEALTH_TOPIC,
        &[(0, Offset::Offset(delivered[0].offset))],
        1,
        Duration::from_secs(15),
    );
    assert_eq!(consumed[0].record, record, "round trip after {after}");
    broker.assert_alive();
}

#[test]
fn hostile_frames_do_not_hurt_other_clients() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        broker.create_topic(HEALTH_TOPIC, 1);
        broker.create_topic(BACKGROUND_TOPIC, 2);
        let bootstrap = broker.bootstrap().to_string();
        eprintln!("garbage seed: {SEED:#x}");

        // A well-behaved producer that keeps going the whole time.
        let stop = Arc::new(AtomicBool::new(false));
        let background = {
            let stop = Arc::clone(&stop);
            let bootstrap = bootstrap.clone();
            thread::spawn(move || {
                let mut producer = TestProducer::new(&bootstrap, &[("acks", "all")]);
                let mut sent = Vec::new();
                while !stop.load(Ordering::Relaxed) && sent.len() < 5_000 {
                    let outgoing =
                        Outgoing::from(Record::kv("bg", &format!("background-{}", sent.len())));
                    producer.send(BACKGROUND_TOPIC, &outgoing);
                    sent.push(outgoing.record);
                    thread::sleep(Duration::from_millis(5));
                }
                let reports = producer.flush(Duration::from_secs(30));
                for (i, report) in reports.iter().enumerate() {
                    assert!(report.is_ok(), "background record #{i} failed: {report:?}");
                }
                sent
            })
        };

        let mut garbage = Garbage(SEED);
        assert_healthy(&mut broker, "startup");

        {
            let what = "truncated frame then close";
            let mut stream = connect(&bootstrap);
            let mut partial = 100i32.to_be_bytes().to_vec();
            partial.extend_from_slice(&header(3, 1, 1)[..10]);
            send(&mut stream, &partial);
            drop(stream);
            assert_healthy(&mut broker, what);
        }
        {
            let what = "Metadata v1 with topic count 0x7fffffff";
            let mut stream = connect(&bootstrap);
            let mut body = header(3, 1, 2);
            body.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
            send(&mut stream, &framed(&body));
            expect_answer_or_close(&mut stream, what, 2);
            assert_healthy(&mut broker, what);
        }
        {
            let what = "Produce v3 with a 0x7fffffff topic array";
            let mut stream = connect(&bootstrap);
            let mut body = header(0, 3, 3);
            body.extend_from_slice(&(-1i16).to_be_bytes()); // transactional id: null
            body.extend_from_slice(&(-1i16).to_be_bytes()); // acks
            body.extend_from_slice(&5000i32.to_be_bytes()); // timeout
            body.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
            send(&mut stream, &framed(&body));
            expect_answer_or_close(&mut stream, what, 3);
            assert_healthy(&mut broker, what);
        }
        {
            let what = "unknown API key";
            let mut stream = connect(&bootstrap);
            send(&mut stream, &framed(&header(9999, 0, 4)));
            expect_answer_or_close(&mut stream, what, 4);
            assert_healthy(&mut broker, what);
        }
        {
            let what = "random bytes then close";
            let mut stream = connect(&bootstrap);
            send(&mut stream, &garbage.bytes(64 * 1024));
            let _ = stream.shutdown(Shutdown::Both);
            drop(stream);
            assert_healthy(&mut broker, what);
        }
        {
            let what = "a complete frame of random bytes";
            let mut stream = connect(&bootstrap);
            let mut body = garbage.bytes(4092);
            // Keep the correlation id fixed so an answer can be checked.
            body[4..8].copy_from_slice(&5i32.to_be_bytes());
            send(&mut stream, &framed(&body));
            expect_answer_or_close(&mut stream, what, 5);
            assert_healthy(&mut broker, what);
        }
        {
            let what = "zero-length frame";
            let mut stream = connect(&bootstrap);
            send(&mut stream, &0i32.to_be_bytes());
            expect_closed(&mut stream, what);
            assert_healthy(&mut broker, what);
        }
        for (what, length) in [
            (
                "length prefix one above socket.request.max.bytes",
                104_857_601i32,
            ),
            ("length prefix of 0x7fffffff", i32::MAX),
            ("negative length -1", -1),
            ("negative length i32::MIN", i32::MIN),
        ] {
            let mut stream = connect(&bootstrap);
            let mut bytes = length.to_be_bytes().to_vec();
            bytes.extend_from_slice(&header(3, 1, 6));
            send(&mut stream, &bytes);
            expect_closed(&mut stream, what);
            assert_healthy(&mut broker, what);
        }

        stop.store(true, Ordering::Relaxed);
        let sent = background.join().expect("background producer");
        assert!(!sent.is_empty());
        let consumed = kafka::consume_all(
            &bootstrap,
            BACKGROUND_TOPIC,
            sent.len(),
            Duration::from_secs(20),
        );
        let mut got: Vec<Record> = consumed.into_iter().map(|m| m.record).collect();
        let mut want = sent;
        got.sort_by(|a, b| a.value.cmp(&b.value));
        want.sort_by(|a, b| a.value.cmp(&b.value));
        assert_eq!(got, want, "background producer's records");
        broker.assert_alive();
        broker.stop();
    });
}
