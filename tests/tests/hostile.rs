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
//!
//! Requests whose arrays decode to far more than their bytes (100 million
//! empty group names, say) must not grow the broker: what decoding
//! allocates is bounded by the frame's size, checked with the broker's
//! peak RSS (VmHWM).
//!
//! Clients that start large frames and then stall (or trickle a byte a
//! second) must not starve others of `queued.max.request.bytes`: the
//! budget is charged for bytes received, and a frame that does not arrive
//! within `socket.request.read.timeout.ms` closes its connection.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::topic_partition_list::Offset;
use tarn_cli::client::Client;
use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, BrokerOptions, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::codec::put_uvarint;
use tarn_protocol::messages::metadata::{MetadataRequest, MetadataResponse};

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
    verdict_within(stream, what, answer_ok, VERDICT_TIMEOUT)
}

fn verdict_within(
    stream: &mut TcpStream,
    what: &str,
    answer_ok: bool,
    within: Duration,
) -> Verdict {
    let deadline = Instant::now() + within;
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
            "{what}: broker neither {} nor closed the connection within {within:?} \
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

/// Connections of each kind that start a large frame and stall.
const STALLED_CONNECTIONS: usize = 64;
/// What each stalled connection announces: about 100 MB, far more than
/// the small budget the broker is given below.
const STALLED_FRAME_BYTES: i32 = 100_000_000;
/// A budget that one announced frame would exhaust, were it charged for
/// what it announces.
const SMALL_QUEUED_BYTES: &str = "4194304";

/// How long a late frame's connection may stay open: a guard against a
/// broker that never closes it, far above the 2 s read timeout we set.
const LATE_FRAME_GUARD: Duration = Duration::from_secs(40);

/// Connections that each announced a ~100 MB frame: half send nothing
/// more, half trickle one byte a second from a background thread.
struct Stalled {
    silent: Vec<TcpStream>,
    trickling: Arc<Vec<TcpStream>>,
    stop: Arc<AtomicBool>,
    trickler: Option<thread::JoinHandle<()>>,
}

impl Stalled {
    fn open(bootstrap: &str) -> Stalled {
        let start = |bootstrap: &str| {
            let mut stream = connect(bootstrap);
            send(&mut stream, &STALLED_FRAME_BYTES.to_be_bytes());
            stream
        };
        let silent = (0..STALLED_CONNECTIONS).map(|_| start(bootstrap)).collect();
        let trickling: Arc<Vec<TcpStream>> =
            Arc::new((0..STALLED_CONNECTIONS).map(|_| start(bootstrap)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let trickler = {
            let (trickling, stop) = (Arc::clone(&trickling), Arc::clone(&stop));
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for stream in trickling.iter() {
                        let mut stream: &TcpStream = stream;
                        match stream.write_all(&[0]) {
                            Ok(()) => {}
                            // Closing a late frame is what the broker should do.
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
                                ) => {}
                            Err(e) => panic!("trickle a byte: {e}"),
                        }
                    }
                    thread::sleep(Duration::from_secs(1));
                }
            })
        };
        Stalled {
            silent,
            trickling,
            stop,
            trickler: Some(trickler),
        }
    }

    fn all(&self) -> impl Iterator<Item = &TcpStream> {
        self.silent.iter().chain(self.trickling.iter())
    }

    fn stop_trickling(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(trickler) = self.trickler.take() {
            trickler.join().expect("trickling thread");
        }
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// True while the broker has neither closed `stream` nor sent anything on
/// it; does not wait.
fn still_open(mut stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).expect("non-blocking");
    let mut buf = [0u8; 1];
    let open = match stream.read(&mut buf) {
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => true,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ) =>
        {
            false
        }
        Err(e) => panic!("check a stalled connection: {e}"),
    };
    stream.set_nonblocking(false).expect("blocking");
    open
}

/// A new client's Metadata request, waiting as long as the test may run:
/// a broker whose budget is held by stalled frames never answers it.
fn new_client_metadata(bootstrap: &str) -> MetadataResponse {
    let mut client = Client::connect(bootstrap).expect("connect a new client");
    client
        .set_read_timeout(TEST_TIMEOUT)
        .expect("set the read timeout");
    client
        .call(3, 12, 9, &MetadataRequest::default())
        .expect("Metadata is answered while frames are stalled")
}

/// With 128 stalled frames open and a budget that any one of them would
/// use up if charged for what it announced, a new client is answered,
/// and the stalled connections are still open: the budget was free
/// because nothing was charged for bytes never sent, not because the
/// stallers were closed.
#[test]
fn stalled_frames_do_not_hold_the_read_budget() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start_with(
            BrokerOptions::default()
                .set("queued.max.request.bytes", SMALL_QUEUED_BYTES)
                .set("socket.request.read.timeout.ms", "600000"),
        );
        let mut stalled = Stalled::open(broker.bootstrap());
        // Let the broker read every prefix before the new client comes.
        thread::sleep(Duration::from_secs(2));
        let metadata = new_client_metadata(broker.bootstrap());
        assert_eq!(metadata.brokers.len(), 1, "{metadata:?}");
        stalled.stop_trickling();
        let open = stalled.all().filter(|s| still_open(s)).count();
        assert_eq!(
            open,
            2 * STALLED_CONNECTIONS,
            "stalled connections closed before their read timeout"
        );
        broker.assert_alive();
        broker.stop();
    });
}

/// A frame that does not arrive within `socket.request.read.timeout.ms`
/// closes its connection, whether it sent nothing after its prefix or
/// keeps trickling bytes; the refusal is logged and others are served.
#[test]
fn frames_late_past_the_read_timeout_are_closed() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start_with(
            BrokerOptions::default()
                .set("queued.max.request.bytes", SMALL_QUEUED_BYTES)
                .set("socket.request.read.timeout.ms", "2000"),
        );
        let mut stalled = Stalled::open(broker.bootstrap());
        for (i, stream) in stalled.silent.iter_mut().enumerate() {
            let what = format!("silent stalled frame #{i}");
            verdict_within(stream, &what, false, LATE_FRAME_GUARD);
        }
        for (i, stream) in stalled.trickling.iter().enumerate() {
            let mut stream = stream.try_clone().expect("clone a stream");
            let what = format!("trickling stalled frame #{i}");
            verdict_within(&mut stream, &what, false, LATE_FRAME_GUARD);
        }
        stalled.stop_trickling();
        new_client_metadata(broker.bootstrap());
        let logs = broker.logs();
        assert!(
            logs.contains("socket.request.read.timeout.ms"),
            "the late frames are logged: {logs}"
        );
        broker.assert_alive();
        broker.stop();
    });
}

/// Wire bytes of each huge-array request: large enough that decoding
/// them as announced would show in the broker's RSS, small enough for CI.
const HUGE_ARRAY_REQUEST_BYTES: usize = 24 << 20;
/// What the broker's peak RSS may grow by, per byte of huge-array
/// requests sent: the frames themselves plus what decoding may allocate
/// for them (at most the frame again plus a fixed headroom each).
const RSS_GROWTH_PER_BYTE_SENT: usize = 4;

/// The broker's peak resident set (VmHWM), in bytes.
fn peak_rss_bytes(broker: &TarnBroker) -> usize {
    let pid = broker.pid().expect("the broker runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/PID/status");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("parse {line:?}"));
    kib * 1024
}

/// A flexible request frame (header v2) of `api_key`/`version` whose body
/// is `body`.
fn flexible_frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut frame = header(api_key, version, correlation_id);
    frame.push(0); // header tagged fields
    frame.extend_from_slice(body);
    framed(&frame)
}

/// A compact array of `count` copies of `element`.
fn compact_array(count: usize, element: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * element.len() + 5);
    put_uvarint(&mut out, u32::try_from(count + 1).expect("count fits"));
    for _ in 0..count {
        out.extend_from_slice(element);
    }
    out
}

/// CreateTopics v5 of one topic "t" with `assignments` and `configs`
/// (already encoded as compact arrays).
fn create_topics_v5(assignments: &[u8], configs: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    put_uvarint(&mut body, 2); // one topic
    body.extend_from_slice(&[2, b't']);
    body.extend_from_slice(&1i32.to_be_bytes()); // num_partitions
    body.extend_from_slice(&1i16.to_be_bytes()); // replication_factor
    body.extend_from_slice(assignments);
    body.extend_from_slice(configs);
    body.push(0); // topic tags
    body.extend_from_slice(&1000i32.to_be_bytes()); // timeout_ms
    body.push(0); // validate_only
    body.push(0); // tags
    body
}

/// Five ~24 MB requests whose arrays decode to far more than their bytes,
/// or announce far more elements than they hold.
fn huge_array_requests() -> Vec<(&'static str, Vec<u8>)> {
    let n = HUGE_ARRAY_REQUEST_BYTES;
    // Empty compact strings: 1 byte each, 24 as a String.
    let mut empty_names = compact_array(n, &[1]);
    empty_names.push(0);
    // One replica assignment whose broker id array announces 4x the i32s
    // the frame holds (classic decoders reserve by the count).
    let mut assignment = Vec::new();
    put_uvarint(&mut assignment, 2); // one assignment
    assignment.extend_from_slice(&0i32.to_be_bytes());
    put_uvarint(&mut assignment, u32::try_from(n + 1).expect("fits"));
    assignment.resize(assignment.len() + n, 0);
    // Configs of 3 bytes each (empty name, null value, no tags), 48 each
    // decoded.
    let configs = compact_array(n / 3, &[1, 0, 0]);
    vec![
        (
            "DeleteGroups v2 of empty names",
            flexible_frame(42, 2, 101, &empty_names),
        ),
        (
            "DeleteGroups v2 of empty names",
            flexible_frame(42, 2, 102, &empty_names),
        ),
        (
            "DescribeGroups v5 of empty names",
            flexible_frame(15, 5, 103, &empty_names),
        ),
        (
            "CreateTopics v5 with a broker id array longer than the frame",
            flexible_frame(19, 5, 104, &create_topics_v5(&assignment, &[1])),
        ),
        (
            "CreateTopics v5 with millions of empty configs",
            flexible_frame(19, 5, 105, &create_topics_v5(&[1], &configs)),
        ),
    ]
}

/// Five huge-array requests in flight at once grow the broker's peak RSS
/// by no more than a small multiple of what was sent, each is answered
/// or refused by closing, and a new client is served afterwards.
#[test]
fn huge_arrays_do_not_grow_the_broker() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = TarnBroker::start();
        new_client_metadata(broker.bootstrap());
        let baseline = peak_rss_bytes(&broker);
        let requests = huge_array_requests();
        let sent: usize = requests.iter().map(|(_, frame)| frame.len()).sum();
        let senders: Vec<_> = requests
            .into_iter()
            .map(|(what, frame)| {
                let bootstrap = broker.bootstrap().to_string();
                thread::spawn(move || {
                    let mut stream = connect(&bootstrap);
                    stream
                        .set_write_timeout(Some(LATE_FRAME_GUARD))
                        .expect("set write timeout");
                    send(&mut stream, &frame);
                    drop(frame);
                    verdict_within(&mut stream, what, true, LATE_FRAME_GUARD);
                })
            })
            .collect();
        for sender in senders {
            sender.join().expect("a huge-array request got its verdict");
        }
        broker.assert_alive();
        new_client_metadata(broker.bootstrap());
        let growth = peak_rss_bytes(&broker).saturating_sub(baseline);
        eprintln!(
            "peak RSS {baseline} -> {} bytes after {sent} bytes of huge arrays",
            baseline + growth
        );
        assert!(
            growth <= RSS_GROWTH_PER_BYTE_SENT * sent,
            "peak RSS grew by {growth} bytes for {sent} bytes sent"
        );
        broker.stop();
    });
}
