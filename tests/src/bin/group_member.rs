//! A consumer-group member for the end-to-end tests, run as a child
//! process so that a test can kill it with SIGKILL (a real death: no
//! LeaveGroup, no final commit) or stop it by closing its stdin (a clean
//! close).
//!
//! Usage: `group_member BOOTSTRAP GROUP TOPIC [--commit-each] [KEY=VALUE ...]`
//! where KEY=VALUE are librdkafka settings. It subscribes to TOPIC and
//! reports on stdout, one line per event, flushed:
//! `ASSIGNED t:p,t:p` (its assignment changed), `REBALANCE assign|revoke
//! t:p,...`, `RECORD partition offset value`, `COMMITTED partition offset`
//! (with --commit-each, a synchronous commit after each record: "process,
//! then commit"), `COMMIT_FAILED partition offset error`, `ERROR text`,
//! and `CLOSED` after a clean close.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::TopicPartitionList;

fn say(line: &str) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // The test reads these lines; if it is gone there is nobody to tell.
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn partitions(list: &TopicPartitionList) -> String {
    let set: BTreeSet<(String, i32)> = list
        .elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect();
    set.iter()
        .map(|(t, p)| format!("{t}:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

struct Reporter;

impl ClientContext for Reporter {}

impl ConsumerContext for Reporter {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => say(&format!("REBALANCE assign {}", partitions(list))),
            Rebalance::Revoke(list) => say(&format!("REBALANCE revoke {}", partitions(list))),
            Rebalance::Error(e) => say(&format!("ERROR rebalance: {e}")),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: group_member BOOTSTRAP GROUP TOPIC [--commit-each] [KEY=VALUE ...]");
        std::process::exit(2);
    }
    let (bootstrap, group, topic) = (&args[0], &args[1], &args[2]);
    let mut commit_each = false;
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("client.id", "group-member")
        .set("broker.address.family", "v4")
        .set("auto.offset.reset", "earliest");
    for arg in &args[3..] {
        if arg == "--commit-each" {
            commit_each = true;
            config.set("enable.auto.commit", "false");
        } else if let Some((key, value)) = arg.split_once('=') {
            config.set(key, value);
        } else {
            eprintln!("bad argument {arg}");
            std::process::exit(2);
        }
    }
    let consumer: BaseConsumer<Reporter> = config
        .create_with_context(Reporter)
        .unwrap_or_else(|e| panic!("create consumer: {e}"));
    consumer
        .subscribe(&[topic.as_str()])
        .unwrap_or_else(|e| panic!("subscribe: {e}"));

    let stop = Arc::new(AtomicBool::new(false));
    let stop_reader = stop.clone();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            if line.is_err() {
                break;
            }
        }
        stop_reader.store(true, Ordering::SeqCst);
    });

    let mut last_assignment: Option<String> = None;
    while !stop.load(Ordering::SeqCst) {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => {
                let value = message
                    .payload()
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                say(&format!(
                    "RECORD {} {} {value}",
                    message.partition(),
                    message.offset()
                ));
                if commit_each {
                    match consumer.commit_message(&message, CommitMode::Sync) {
                        Ok(()) => say(&format!(
                            "COMMITTED {} {}",
                            message.partition(),
                            message.offset() + 1
                        )),
                        Err(e) => say(&format!(
                            "COMMIT_FAILED {} {} {e}",
                            message.partition(),
                            message.offset()
                        )),
                    }
                }
            }
            Some(Err(e)) => say(&format!("ERROR {e}")),
        }
        if let Ok(assignment) = consumer.assignment() {
            let now = partitions(&assignment);
            if last_assignment.as_deref() != Some(now.as_str()) {
                say(&format!("ASSIGNED {now}"));
                last_assignment = Some(now);
            }
        }
    }
    drop(consumer);
    say("CLOSED");
}
