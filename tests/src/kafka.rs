//! rdkafka (librdkafka) clients for the end-to-end tests.
//!
//! The producer records the delivery report of every record it sends, keyed
//! by send order, so tests can check what the broker acknowledged against
//! what a consumer later reads. These consumers use manual assignment
//! (librdkafka still needs a `group.id` for `assign`) and commit nothing;
//! group membership is tested with the `group_member` binary
//! (`tests/tests/groups.rs`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

/// Timeout for one metadata, watermark or list-offsets request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Record headers in wire order; a header value may be null.
pub type RecordHeaders = Vec<(String, Option<Vec<u8>>)>;

/// The parts of a record a client chooses and must get back byte for byte.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: RecordHeaders,
}

impl Record {
    /// A record with a key and a value and no headers.
    pub fn kv(key: &str, value: &str) -> Record {
        Record {
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }

    /// An unkeyed record with a value and no headers.
    pub fn value(value: &str) -> Record {
        Record {
            key: None,
            value: Some(value.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }
}

/// A record to send, with optional explicit partition and timestamp.
#[derive(Clone, Debug, Default)]
pub struct Outgoing {
    pub record: Record,
    pub partition: Option<i32>,
    pub timestamp_ms: Option<i64>,
}

impl From<Record> for Outgoing {
    fn from(record: Record) -> Outgoing {
        Outgoing {
            record,
            partition: None,
            timestamp_ms: None,
        }
    }
}

/// Where the broker said a record was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Delivered {
    pub partition: i32,
    pub offset: i64,
}

/// A record as a consumer read it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumed {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub record: Record,
}

/// Collects delivery reports, indexed by send order.
#[derive(Default)]
pub struct DeliveryCollector {
    results: Mutex<HashMap<usize, Result<Delivered, String>>>,
    /// Prints librdkafka's log (to stderr) rather than dropping it.
    verbose: bool,
}

impl ClientContext for DeliveryCollector {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        // librdkafka logs from its own threads, which the test harness
        // does not capture: say nothing unless asked to.
        if self.verbose {
            eprintln!("producer {level:?} {fac}: {log_message}");
        }
    }
}

impl ProducerContext for DeliveryCollector {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let outcome = match result {
            Ok(message) => Ok(Delivered {
                partition: message.partition(),
                offset: message.offset(),
            }),
            Err((err, _)) => Err(err.to_string()),
        };
        self.results
            .lock()
            .expect("delivery lock")
            .insert(index, outcome);
    }
}

/// The client settings every test client shares.
pub fn base_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "tarn-e2e")
        .set("broker.address.family", "v4");
    config
}

/// Creates `topic` through the Admin API with one partition per entry
/// of `assignment` (each partition's replicas, in preference order) and
/// `configs`, and asserts that it was created.
pub fn create_assigned(
    bootstrap: &str,
    topic: &str,
    assignment: &[&[i32]],
    configs: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> =
        base_config(bootstrap).create().expect("an admin client");
    let partitions = i32::try_from(assignment.len()).expect("a partition count");
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Variable(assignment));
    for (key, value) in configs {
        new = new.set(key, value);
    }
    let results = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(admin.create_topics(
            [&new],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("create topics");
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
}

/// A librdkafka producer that remembers every delivery report.
pub struct TestProducer {
    producer: ThreadedProducer<DeliveryCollector>,
    sent: usize,
}

impl TestProducer {
    /// A producer with `linger.ms=5`, a 20 s message timeout and `extra`
    /// settings on top (e.g. `("acks", "1")`, `("enable.idempotence", "true")`).
    pub fn new(bootstrap: &str, extra: &[(&str, &str)]) -> TestProducer {
        let mut config = base_config(bootstrap);
        config
            .set("linger.ms", "5")
            .set("message.timeout.ms", "20000");
        for (key, value) in extra {
            config.set(*key, *value);
        }
        // Its librdkafka log, when `TARN_PRODUCER_DEBUG` names debug
        // contexts (`eos,topic`, say), to diagnose a producer that stalls.
        let debug = std::env::var("TARN_PRODUCER_DEBUG").ok();
        if let Some(contexts) = &debug {
            config
                .set("debug", contexts)
                .set_log_level(RDKafkaLogLevel::Debug);
        }
        let context = DeliveryCollector {
            verbose: debug.is_some(),
            ..DeliveryCollector::default()
        };
        let producer = config
            .create_with_context(context)
            .expect("create producer");
        TestProducer { producer, sent: 0 }
    }

    /// Queues one record; returns its send index. Waits while the local
    /// queue is full.
    pub fn send(&mut self, topic: &str, outgoing: &Outgoing) -> usize {
        let index = self.sent;
        self.try_send(topic, outgoing)
            .unwrap_or_else(|err| panic!("queue record #{index} for {topic}: {err}"))
    }

    /// Like [`TestProducer::send`], but a refusal to queue (the producer
    /// went into a fatal state, say) is returned rather than a panic.
    pub fn try_send(&mut self, topic: &str, outgoing: &Outgoing) -> Result<usize, String> {
        let index = self.sent;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut record: BaseRecord<'_, [u8], [u8], usize> =
                BaseRecord::with_opaque_to(topic, index);
            if let Some(key) = &outgoing.record.key {
                record = record.key(key.as_slice());
            }
            if let Some(value) = &outgoing.record.value {
                record = record.payload(value.as_slice());
            }
            if let Some(partition) = outgoing.partition {
                record = record.partition(partition);
            }
            if let Some(timestamp_ms) = outgoing.timestamp_ms {
                record = record.timestamp(timestamp_ms);
            }
            if !outgoing.record.headers.is_empty() {
                record = record.headers(to_owned_headers(&outgoing.record.headers));
            }
            match self.producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _))
                    if Instant::now() < deadline =>
                {
                    thread::sleep(Duration::from_millis(10));
                }
                Err((err, _)) => return Err(err.to_string()),
            }
        }
        self.sent += 1;
        Ok(index)
    }

    /// Waits until every queued record has a delivery report and returns all
    /// reports in send order.
    pub fn flush(&mut self, timeout: Duration) -> Vec<Result<Delivered, String>> {
        let deadline = Instant::now() + timeout;
        if let Err(err) = self.producer.flush(timeout) {
            panic!("flush producer: {err}");
        }
        // The delivery callback may still be running on the polling thread.
        loop {
            {
                let results = self
                    .producer
                    .context()
                    .results
                    .lock()
                    .expect("delivery lock");
                if results.len() == self.sent {
                    return (0..self.sent)
                        .map(|index| results[&index].clone())
                        .collect();
                }
                assert!(
                    Instant::now() < deadline,
                    "only {} of {} delivery reports after flush",
                    results.len(),
                    self.sent
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `records` and flushes; panics unless every record was
    /// acknowledged. Returns where each of `records` landed, in order.
    /// (Reports from records sent earlier on this producer are not returned.)
    pub fn produce_all(&mut self, topic: &str, records: &[Outgoing]) -> Vec<Delivered> {
        let first = self.sent;
        for outgoing in records {
            self.send(topic, outgoing);
        }
        let results = self.flush(Duration::from_secs(30));
        results[first..]
            .iter()
            .enumerate()
            .map(|(i, result)| match result {
                Ok(delivered) => *delivered,
                Err(err) => panic!("record #{i} to {topic} was not delivered: {err}"),
            })
            .collect()
    }
}

fn to_owned_headers(headers: &RecordHeaders) -> OwnedHeaders {
    headers.iter().fold(
        OwnedHeaders::new_with_capacity(headers.len()),
        |acc, (key, value)| {
            acc.insert(Header {
                key: key.as_str(),
                value: value.as_deref(),
            })
        },
    )
}

/// A consumer for manual assignment only: a `group.id` (librdkafka needs
/// one) but no auto commit, no offset store, reading from the earliest offset.
pub fn consumer(bootstrap: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut config = base_config(bootstrap);
    config
        .set("group.id", "tarn-e2e-unused-group")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config.create().expect("create consumer")
}

/// The number of partitions the broker reports for `topic`.
pub fn partition_count(bootstrap: &str, topic: &str) -> i32 {
    let consumer = consumer(bootstrap, &[]);
    let metadata = consumer
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .unwrap_or_else(|err| panic!("metadata for {topic}: {err}"));
    let entry = metadata
        .topics()
        .iter()
        .find(|entry| entry.name() == topic)
        .unwrap_or_else(|| panic!("metadata response lacks {topic}"));
    assert!(
        entry.error().is_none(),
        "metadata error for {topic}: {:?}",
        entry.error()
    );
    i32::try_from(entry.partitions().len()).expect("partition count fits i32")
}

/// `(partition, low, high)` watermarks of every partition of `topic`.
/// A partition whose leadership is moving (NOT_LEADER_OR_FOLLOWER from a
/// broker that just lost it, say) is asked again for up to
/// [`WATERMARKS_SETTLE`].
pub fn watermarks(bootstrap: &str, topic: &str) -> Vec<(i32, i64, i64)> {
    let consumer = consumer(bootstrap, &[]);
    (0..partition_count(bootstrap, topic))
        .map(|partition| {
            let deadline = Instant::now() + WATERMARKS_SETTLE;
            loop {
                match consumer.fetch_watermarks(topic, partition, REQUEST_TIMEOUT) {
                    Ok((low, high)) => break (partition, low, high),
                    Err(err) if Instant::now() < deadline => {
                        eprintln!("watermarks of {topic}/{partition}: {err}; asking again");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(err) => panic!("watermarks of {topic}/{partition}: {err}"),
                }
            }
        })
        .collect()
}

/// How long [`watermarks`] keeps asking a partition that answers with an
/// error.
const WATERMARKS_SETTLE: Duration = Duration::from_secs(30);

/// Reads every partition of `topic` from the beginning until `expected`
/// records have arrived; panics after `timeout`.
pub fn consume_all(
    bootstrap: &str,
    topic: &str,
    expected: usize,
    timeout: Duration,
) -> Vec<Consumed> {
    let starts: Vec<(i32, Offset)> = (0..partition_count(bootstrap, topic))
        .map(|partition| (partition, Offset::Beginning))
        .collect();
    consume_from(bootstrap, topic, &starts, expected, timeout)
}

/// Asserts that `read` holds records keyed "0", "1", ... up to
/// `count - 1`, each once and in that order, naming the first difference.
pub fn assert_keys_count_up(read: &[Consumed], count: usize) {
    let keys: Vec<String> = read
        .iter()
        .map(|c| String::from_utf8_lossy(c.record.key.as_deref().unwrap_or_default()).into_owned())
        .collect();
    let expected: Vec<String> = (0..count).map(|i| i.to_string()).collect();
    assert!(
        keys == expected,
        "read {} records; first difference at {:?}",
        keys.len(),
        keys.iter().zip(&expected).position(|(a, b)| a != b)
    );
}

/// Reads from the given `(partition, start offset)` positions until
/// `expected` records have arrived; panics after `timeout`. Records come
/// back in arrival order, which is offset order within a partition.
pub fn consume_from(
    bootstrap: &str,
    topic: &str,
    starts: &[(i32, Offset)],
    expected: usize,
    timeout: Duration,
) -> Vec<Consumed> {
    consume_from_with(bootstrap, topic, starts, expected, timeout, &[])
}

/// Like [`consume_from`], with the consumer configured with `extra`.
pub fn consume_from_with(
    bootstrap: &str,
    topic: &str,
    starts: &[(i32, Offset)],
    expected: usize,
    timeout: Duration,
    extra: &[(&str, &str)],
) -> Vec<Consumed> {
    let consumer = consumer(bootstrap, extra);
    let mut assignment = TopicPartitionList::new();
    for (partition, offset) in starts {
        assignment
            .add_partition_offset(topic, *partition, *offset)
            .expect("build assignment");
    }
    consumer.assign(&assignment).expect("assign partitions");
    let deadline = Instant::now() + timeout;
    let mut out = Vec::with_capacity(expected);
    let mut errors = Vec::new();
    while out.len() < expected {
        assert!(
            Instant::now() < deadline,
            "consumed {} of {expected} records from {topic} within {timeout:?}; \
             consumer errors: {errors:?}",
            out.len()
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => out.push(Consumed {
                partition: message.partition(),
                offset: message.offset(),
                timestamp_ms: message.timestamp().to_millis(),
                record: Record {
                    key: message.key().map(<[u8]>::to_vec),
                    value: message.payload().map(<[u8]>::to_vec),
                    headers: message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default(),
                },
            }),
            // Keep going: librdkafka reports transient errors (and the
            // missing group coordinator) here; a real failure shows up as
            // missing records at the deadline, with these errors attached.
            Some(Err(err)) if errors.len() < 20 => errors.push(err.to_string()),
            Some(Err(_)) => {}
        }
    }
    out
}
