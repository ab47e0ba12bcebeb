//! Consumer groups as the tests look at them: `tarn groups --describe`
//! parsed into rows, records produced to chosen partitions, and waiting
//! for a group to get somewhere (a rebalance has no completion signal a
//! test could wait on, so tests poll for the state they expect).

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::CliOutput;
use crate::kafka::{Outgoing, Record, TestProducer};
use crate::TarnBroker;

/// Polls `done` until it holds; panics naming `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// `tarn groups --bootstrap-server BROKER <args>`.
pub fn groups_cli(broker: &TarnBroker, args: &[&str]) -> CliOutput {
    let mut full = vec!["groups", "--bootstrap-server", broker.bootstrap()];
    full.extend_from_slice(args);
    broker.cli(&full)
}

/// One row of `tarn groups --describe`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub topic: String,
    pub partition: String,
    pub current: String,
    pub log_end: String,
    pub lag: String,
    pub consumer: String,
    pub host: String,
}

/// The rows of `tarn groups --describe --group GROUP`, asserting success.
pub fn describe(broker: &TarnBroker, group: &str) -> Vec<Row> {
    let out = groups_cli(broker, &["--describe", "--group", group]);
    assert!(out.status.success(), "{out}");
    rows(&out, group)
}

/// The rows of `tarn groups --describe --group GROUP`, or None while the
/// group does not exist yet.
pub fn try_describe(broker: &TarnBroker, group: &str) -> Option<Vec<Row>> {
    let out = groups_cli(broker, &["--describe", "--group", group]);
    if !out.status.success() {
        let missing = format!("Consumer group '{group}' does not exist.");
        assert!(out.stderr.contains(&missing), "{out}");
        return None;
    }
    Some(rows(&out, group))
}

/// The rows of what `tarn groups --describe --group GROUP` printed.
fn rows(out: &CliOutput, group: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in out.stdout.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.first() == Some(&"GROUP") {
            assert_eq!(
                cols,
                [
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID"
                ]
            );
            in_table = true;
            continue;
        }
        if in_table && cols.len() == 9 {
            assert_eq!(cols[0], group);
            rows.push(Row {
                topic: cols[1].into(),
                partition: cols[2].into(),
                current: cols[3].into(),
                log_end: cols[4].into(),
                lag: cols[5].into(),
                consumer: cols[6].into(),
                host: cols[7].into(),
            });
        }
    }
    rows
}

/// Committed offsets by partition, from `--describe`.
pub fn committed(broker: &TarnBroker, group: &str) -> BTreeMap<i32, i64> {
    describe(broker, group)
        .into_iter()
        .filter(|r| r.current != "-")
        .map(|r| (r.partition.parse().unwrap(), r.current.parse().unwrap()))
        .collect()
}

/// `count` records `p{partition}-{i}` into `partition`, acknowledged.
pub fn produce_to(broker: &TarnBroker, topic: &str, partition: i32, count: usize) {
    let records: Vec<Outgoing> = (0..count)
        .map(|i| Outgoing {
            record: Record::value(&format!("p{partition}-{i}")),
            partition: Some(partition),
            timestamp_ms: None,
        })
        .collect();
    TestProducer::new(broker.bootstrap(), &[]).produce_all(topic, &records);
}
