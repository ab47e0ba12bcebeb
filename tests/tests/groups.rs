//! Consumer groups end to end: librdkafka members (the `group_member`
//! child process, so that a member can really die with SIGKILL) share
//! partitions, take over from dead members within the session timeout,
//! lose no record across member deaths and broker restarts when they
//! commit after processing; `tarn groups` describes lag and resets
//! offsets; static members rejoin without a rebalance; and the group APIs
//! answer Kafka's error codes to hand-built requests.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tarn_cli::client::Client;
use tarn_e2e::cli::CliOutput;
use tarn_e2e::groups::{committed, describe, groups_cli, produce_to, wait_until};
use tarn_e2e::kafka::{self, Outgoing, Record, TestProducer};
use tarn_e2e::{run_with_timeout, BrokerOptions, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::consumer_protocol::{Assignment, Subscription, TopicPartitions};
use tarn_protocol::error;
use tarn_protocol::messages::delete_groups::*;
use tarn_protocol::messages::describe_groups::*;
use tarn_protocol::messages::find_coordinator::*;
use tarn_protocol::messages::heartbeat::*;
use tarn_protocol::messages::join_group::*;
use tarn_protocol::messages::leave_group::*;
use tarn_protocol::messages::list_groups::*;
use tarn_protocol::messages::metadata::*;
use tarn_protocol::messages::offset_commit::*;
use tarn_protocol::messages::offset_delete::*;
use tarn_protocol::messages::offset_fetch::*;
use tarn_protocol::messages::produce::*;
use tarn_protocol::messages::sync_group::*;
use tarn_protocol::record_batch::RecordBatchBuilder;

/// Client session timeout in these tests; the broker's minimum is lowered
/// to allow it.
const SESSION_TIMEOUT_MS: u64 = 3_000;
/// How long a rebalance may take here: a session timeout to notice a dead
/// member, plus rejoin rounds.
const REBALANCE_WAIT: Duration = Duration::from_secs(20);

fn broker() -> TarnBroker {
    TarnBroker::start_with(group_options())
}

fn group_options() -> BrokerOptions {
    BrokerOptions::default()
        .set("group.initial.rebalance.delay.ms", "0")
        .set("group.min.session.timeout.ms", "1000")
}

/// One `group_member` child process and what it reported.
struct Member {
    name: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Member {
    fn spawn(bootstrap: &str, group: &str, topic: &str, extra: &[&str]) -> Member {
        let session = format!("session.timeout.ms={SESSION_TIMEOUT_MS}");
        let mut args: Vec<String> = vec![
            bootstrap.into(),
            group.into(),
            topic.into(),
            session,
            "heartbeat.interval.ms=300".into(),
            "max.poll.interval.ms=10000".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_group_member"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn group_member");
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(line) => sink.lock().unwrap().push(line),
                    Err(_) => break,
                }
            }
        });
        Member {
            name: format!("{group}/{}", args[3..].join(" ")),
            child: Some(child),
            stdin,
            lines,
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Its latest assignment, as partition numbers (None before the first).
    fn assignment(&self) -> Option<BTreeSet<i32>> {
        let lines = self.lines();
        let last = lines.iter().rev().find(|l| l.starts_with("ASSIGNED"))?;
        Some(
            last.trim_start_matches("ASSIGNED")
                .split(',')
                .filter_map(|tp| tp.trim().rsplit_once(':'))
                .map(|(_, p)| p.parse().expect("partition number"))
                .collect(),
        )
    }

    /// (partition, offset, value) of every record it processed.
    fn records(&self) -> Vec<(i32, i64, String)> {
        self.lines()
            .iter()
            .filter_map(|l| l.strip_prefix("RECORD "))
            .map(|rest| {
                let mut parts = rest.splitn(3, ' ');
                let p = parts.next().unwrap().parse().unwrap();
                let o = parts.next().unwrap().parse().unwrap();
                (p, o, parts.next().unwrap_or("").to_owned())
            })
            .collect()
    }

    fn count(&self, prefix: &str) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    /// SIGKILL: no LeaveGroup, no final commit.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill member");
            child.wait().expect("reap member");
        }
    }

    /// Closes stdin: the member closes its consumer (LeaveGroup) and exits.
    fn close(&mut self) {
        self.stdin.take();
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if child.try_wait().expect("poll member").is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    child.kill().ok();
                    child.wait().ok();
                    panic!("member {} did not close within 20 s", self.name);
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        assert!(
            self.lines().iter().any(|l| l == "CLOSED"),
            "member {} did not close cleanly: {:?}",
            self.name,
            self.lines()
        );
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
        if thread::panicking() {
            let lines = self.lines();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!(
                "--- member {} (last {} lines) ---\n{}",
                self.name,
                tail.len(),
                tail.join("\n")
            );
        }
    }
}

/// True when the members' assignments are disjoint, cover `0..partitions`
/// and have the given sizes (in any order).
fn balanced(members: &[&Member], partitions: i32, mut sizes: Vec<usize>) -> bool {
    let mut seen = BTreeSet::new();
    let mut got = Vec::new();
    for m in members {
        let Some(a) = m.assignment() else {
            return false;
        };
        got.push(a.len());
        for p in a {
            if !seen.insert(p) {
                return false;
            }
        }
    }
    got.sort_unstable();
    sizes.sort_unstable();
    seen == (0..partitions).collect() && got == sizes
}

/// Produces `count` records spread round-robin over every partition of
/// `topic`, so that each partition gets its share whatever the client's
/// partitioner would do with unkeyed records (librdkafka's sticky one can
/// put nearly all of them in one partition).
fn produce(broker: &TarnBroker, topic: &str, tag: &str, count: usize) -> Vec<String> {
    let partitions = kafka::partition_count(broker.bootstrap(), topic);
    let values: Vec<String> = (0..count).map(|i| format!("{tag}-{i}")).collect();
    let records: Vec<Outgoing> = values
        .iter()
        .zip((0..partitions).cycle())
        .map(|(v, partition)| Outgoing {
            partition: Some(partition),
            ..Record::value(v).into()
        })
        .collect();
    TestProducer::new(broker.bootstrap(), &[]).produce_all(topic, &records);
    values
}

#[test]
fn three_members_share_six_partitions_and_take_over_from_a_killed_one() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = broker();
        broker.create_topic("six", 6);
        // The rebalance timeout (max.poll.interval.ms) is far beyond
        // REBALANCE_WAIT, so a takeover within the wait below can only
        // come from the session timeout noticing the dead member.
        let slow_rebalance = ["max.poll.interval.ms=300000"];
        let a = Member::spawn(broker.bootstrap(), "sharers", "six", &slow_rebalance);
        let mut b = Member::spawn(broker.bootstrap(), "sharers", "six", &slow_rebalance);
        let c = Member::spawn(broker.bootstrap(), "sharers", "six", &slow_rebalance);
        wait_until(REBALANCE_WAIT, "2 partitions each", || {
            balanced(&[&a, &b, &c], 6, vec![2, 2, 2])
        });
        let rows = describe(&broker, "sharers");
        let owners: BTreeSet<&str> = rows.iter().map(|r| r.consumer.as_str()).collect();
        assert_eq!(owners.len(), 3, "{rows:?}");
        assert!(rows.iter().all(|r| r.host == "/127.0.0.1"), "{rows:?}");

        b.kill();
        wait_until(REBALANCE_WAIT, "the survivors to take over", || {
            balanced(&[&a, &c], 6, vec![3, 3])
        });
        assert_eq!(
            describe(&broker, "sharers")
                .iter()
                .map(|r| r.consumer.clone())
                .collect::<BTreeSet<_>>()
                .len(),
            2
        );
        // A clean close leaves the group at once: no session timeout.
        let mut a = a;
        a.close();
        wait_until(REBALANCE_WAIT, "the last member to own everything", || {
            balanced(&[&c], 6, vec![6])
        });
    });
}

#[test]
fn a_fifth_member_on_four_partitions_gets_nothing() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = broker();
        broker.create_topic("four", 4);
        let members: Vec<Member> = (0..5)
            .map(|_| Member::spawn(broker.bootstrap(), "crowd", "four", &[]))
            .collect();
        let refs: Vec<&Member> = members.iter().collect();
        wait_until(
            REBALANCE_WAIT,
            "one partition each for four members",
            || balanced(&refs, 4, vec![0, 1, 1, 1, 1]),
        );
        // Members that joined late can start one more rebalance after the
        // balanced moment above; describe once the group is stable again.
        wait_until(
            REBALANCE_WAIT,
            "describe: four owners and one idle member",
            || {
                let rows = describe(&broker, "crowd");
                rows.len() == 5 && rows.iter().filter(|r| r.topic == "-").count() == 1
            },
        );
    });
}

#[test]
fn commit_after_processing_loses_nothing_across_member_death_and_broker_restarts() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = broker();
        broker.create_topic("ledger", 4);
        // Start from the beginning through committed offsets, and make
        // members jump to the end if committed offsets ever went missing:
        // a lost commit then shows up as lost records.
        let reset = groups_cli(
            &broker,
            &[
                "--reset-offsets",
                "--group",
                "ledger-g",
                "--topic",
                "ledger",
                "--to-earliest",
                "--execute",
            ],
        );
        assert!(reset.status.success(), "{reset}");
        let settings = ["--commit-each", "auto.offset.reset=latest"];
        let mut first = Member::spawn(broker.bootstrap(), "ledger-g", "ledger", &settings);
        let second = Member::spawn(broker.bootstrap(), "ledger-g", "ledger", &settings);
        wait_until(REBALANCE_WAIT, "both members to own partitions", || {
            balanced(&[&first, &second], 4, vec![2, 2])
        });
        let mut expected: BTreeSet<String> = BTreeSet::new();
        expected.extend(produce(&broker, "ledger", "a", 200));
        wait_until(REBALANCE_WAIT, "some records processed", || {
            first.count("COMMITTED") > 5 && second.count("COMMITTED") > 5
        });
        first.kill();
        expected.extend(produce(&broker, "ledger", "b", 200));
        let processed = |members: &[&Member]| -> BTreeSet<String> {
            members
                .iter()
                .flat_map(|m| m.records())
                .map(|(_, _, v)| v)
                .collect()
        };
        let all_done = |members: &[&Member], expected: &BTreeSet<String>| {
            expected.is_subset(&processed(members))
        };
        wait_until(REBALANCE_WAIT, "a and b processed", || {
            all_done(&[&first, &second], &expected)
        });
        wait_until(REBALANCE_WAIT, "commits to reach the log end", || {
            committed(&broker, "ledger-g").values().sum::<i64>() == 400
        });
        let before = committed(&broker, "ledger-g");

        broker.stop();
        broker.start_again_on_same_port();
        assert_eq!(
            committed(&broker, "ledger-g"),
            before,
            "committed offsets survive a clean restart"
        );
        expected.extend(produce(&broker, "ledger", "c", 100));
        wait_until(REBALANCE_WAIT, "c processed after the restart", || {
            all_done(&[&first, &second], &expected)
        });

        broker.kill();
        broker.start_again_on_same_port();
        expected.extend(produce(&broker, "ledger", "d", 100));
        let third = Member::spawn(broker.bootstrap(), "ledger-g", "ledger", &settings);
        wait_until(REBALANCE_WAIT, "d processed after a crash", || {
            all_done(&[&first, &second, &third], &expected)
        });
        wait_until(REBALANCE_WAIT, "every record committed", || {
            committed(&broker, "ledger-g").values().sum::<i64>() == 600
        });
        let got = processed(&[&first, &second, &third]);
        let missing: Vec<&String> = expected.difference(&got).collect();
        assert!(missing.is_empty(), "lost records: {missing:?}");
    });
}

#[test]
fn committed_offsets_survive_a_clean_restart_and_a_crash() {
    run_with_timeout(TEST_TIMEOUT, || {
        let mut broker = broker();
        broker.create_topic("durable", 3);
        for p in 0..3 {
            produce_to(&broker, "durable", p, 10);
        }
        let committed_by_client = |broker: &TarnBroker| -> Vec<Offset> {
            let consumer = kafka::consumer(broker.bootstrap(), &[("group.id", "durable-g")]);
            let mut tpl = TopicPartitionList::new();
            for p in 0..3 {
                tpl.add_partition("durable", p);
            }
            let got = consumer
                .committed_offsets(tpl, Duration::from_secs(10))
                .expect("committed offsets");
            got.elements().iter().map(|e| e.offset()).collect()
        };
        {
            // A standalone consumer commits without joining (generation -1).
            let consumer = kafka::consumer(broker.bootstrap(), &[("group.id", "durable-g")]);
            let mut tpl = TopicPartitionList::new();
            for (p, o) in [(0, 3), (1, 7), (2, 10)] {
                tpl.add_partition_offset("durable", p, Offset::Offset(o))
                    .unwrap();
            }
            consumer.commit(&tpl, CommitMode::Sync).expect("commit");
        }
        let expected = vec![Offset::Offset(3), Offset::Offset(7), Offset::Offset(10)];
        assert_eq!(committed_by_client(&broker), expected);
        broker.restart();
        assert_eq!(
            committed_by_client(&broker),
            expected,
            "after a clean restart"
        );
        broker.kill();
        broker.start_again();
        assert_eq!(committed_by_client(&broker), expected, "after kill -9");
        let rows = describe(&broker, "durable-g");
        let lags: Vec<&str> = rows.iter().map(|r| r.lag.as_str()).collect();
        assert_eq!(lags, ["7", "3", "0"], "{rows:?}");
    });
}

#[test]
fn cooperative_sticky_rebalances_incrementally() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = broker();
        broker.create_topic("coop", 6);
        let coop = ["partition.assignment.strategy=cooperative-sticky"];
        let a = Member::spawn(broker.bootstrap(), "coop-g", "coop", &coop);
        let b = Member::spawn(broker.bootstrap(), "coop-g", "coop", &coop);
        wait_until(REBALANCE_WAIT, "3 partitions each", || {
            balanced(&[&a, &b], 6, vec![3, 3])
        });
        let before_a = a.assignment().unwrap();
        let c = Member::spawn(broker.bootstrap(), "coop-g", "coop", &coop);
        wait_until(REBALANCE_WAIT, "2 partitions each", || {
            balanced(&[&a, &b, &c], 6, vec![2, 2, 2])
        });
        // Cooperative: a keeps what it did not give away, and never had
        // its whole assignment revoked on the way.
        assert!(a.assignment().unwrap().is_subset(&before_a));
        let lines = a.lines();
        let first_assigned = lines
            .iter()
            .position(|l| l.starts_with("ASSIGNED") && l.len() > "ASSIGNED ".len())
            .unwrap();
        let emptied = lines[first_assigned..]
            .iter()
            .any(|l| l.trim() == "ASSIGNED");
        assert!(
            !emptied,
            "a lost all its partitions during a cooperative rebalance: {lines:?}"
        );
        let summary = describe_group(&broker, "coop-g");
        assert_eq!(summary.protocol_data, "cooperative-sticky");
    });
}

#[test]
fn a_static_member_rejoins_without_a_rebalance() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = broker();
        broker.create_topic("static", 4);
        let session = "session.timeout.ms=10000";
        let mut s1 = Member::spawn(
            broker.bootstrap(),
            "static-g",
            "static",
            &["group.instance.id=s1", session],
        );
        let s2 = Member::spawn(
            broker.bootstrap(),
            "static-g",
            "static",
            &["group.instance.id=s2", session],
        );
        wait_until(REBALANCE_WAIT, "2 partitions each", || {
            balanced(&[&s1, &s2], 4, vec![2, 2])
        });
        let s1_partitions = s1.assignment().unwrap();
        let s2_rebalances = s2.count("REBALANCE");
        let old_id = member_of(&broker, "static-g", "s1");

        s1.kill();
        let s1b = Member::spawn(
            broker.bootstrap(),
            "static-g",
            "static",
            &["group.instance.id=s1", session],
        );
        wait_until(
            REBALANCE_WAIT,
            "the restarted s1 to get its partitions back",
            || s1b.assignment().is_some_and(|a| !a.is_empty()),
        );
        assert_eq!(s1b.assignment().unwrap(), s1_partitions);
        let new_id = member_of(&broker, "static-g", "s1");
        assert_ne!(new_id, old_id, "the rejoined instance has a new member id");
        assert_eq!(describe_group(&broker, "static-g").group_state, "Stable");
        // Give a (wrong) rebalance time to show up at s2.
        thread::sleep(Duration::from_secs(2));
        assert_eq!(
            s2.count("REBALANCE"),
            s2_rebalances,
            "s2 saw a rebalance: {:?}",
            s2.lines()
        );
    });
}

#[test]
fn describe_shows_the_lag_while_records_are_produced() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = broker();
        broker.create_topic("lag", 2);
        for p in 0..2 {
            produce_to(&broker, "lag", p, 10);
        }
        let out = groups_cli(
            &broker,
            &[
                "--reset-offsets",
                "--group",
                "lag-g",
                "--topic",
                "lag",
                "--to-offset",
                "5",
                "--execute",
            ],
        );
        assert!(out.status.success(), "{out}");
        let bootstrap = broker.bootstrap().to_owned();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producing = stop.clone();
        let producer = thread::spawn(move || {
            let mut producer = TestProducer::new(&bootstrap, &[]);
            let mut round = 0;
            while !producing.load(std::sync::atomic::Ordering::SeqCst) {
                let records: Vec<Outgoing> = (0..2)
                    .map(|p| Outgoing {
                        record: Record::value(&format!("more-{round}")),
                        partition: Some(p),
                        timestamp_ms: None,
                    })
                    .collect();
                producer.produce_all("lag", &records);
                round += 1;
            }
        });
        let mut previous = [10i64, 10];
        for _ in 0..5 {
            let floor: Vec<i64> = kafka::watermarks(broker.bootstrap(), "lag")
                .iter()
                .map(|w| w.2)
                .collect();
            let rows = describe(&broker, "lag-g");
            let ceiling: Vec<i64> = kafka::watermarks(broker.bootstrap(), "lag")
                .iter()
                .map(|w| w.2)
                .collect();
            assert_eq!(rows.len(), 2, "{rows:?}");
            for (p, row) in rows.iter().enumerate() {
                assert_eq!(row.current, "5");
                let end: i64 = row.log_end.parse().unwrap();
                assert!(
                    (floor[p]..=ceiling[p]).contains(&end),
                    "{row:?} not within {floor:?}..{ceiling:?}"
                );
                assert!(end >= previous[p]);
                assert_eq!(row.lag.parse::<i64>().unwrap(), end - 5, "{row:?}");
                assert_eq!(row.consumer, "-");
                previous[p] = end;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        producer.join().expect("producer thread");
        let ends: Vec<i64> = kafka::watermarks(broker.bootstrap(), "lag")
            .iter()
            .map(|w| w.2)
            .collect();
        let rows = describe(&broker, "lag-g");
        assert!(ends.iter().all(|e| *e > 10), "the producer ran: {ends:?}");
        for (p, row) in rows.iter().enumerate() {
            assert_eq!(row.log_end, ends[p].to_string());
            assert_eq!(row.lag, (ends[p] - 5).to_string());
        }
    });
}

#[test]
fn reset_offsets_dry_run_execute_and_refusal_for_an_active_group() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = broker();
        broker.create_topic("reset", 2);
        for p in 0..2 {
            let records: Vec<Outgoing> = (0..10)
                .map(|i| Outgoing {
                    record: Record::value(&format!("r{i}")),
                    partition: Some(p),
                    timestamp_ms: Some(1_700_000_000_000 + i * 1000),
                })
                .collect();
            TestProducer::new(broker.bootstrap(), &[]).produce_all("reset", &records);
        }
        let reset = |args: &[&str]| {
            let mut full = vec!["--reset-offsets", "--group", "reset-g", "--topic", "reset"];
            full.extend_from_slice(args);
            groups_cli(&broker, &full)
        };
        let new_offsets = |out: &CliOutput| -> Vec<(String, i64)> {
            out.stdout
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .filter(|c| c.len() == 4 && c[0] == "reset-g")
                .map(|c| (format!("{}-{}", c[1], c[2]), c[3].parse().unwrap()))
                .collect()
        };
        let out = reset(&["--to-latest", "--execute"]);
        assert!(out.status.success(), "{out}");
        assert_eq!(
            committed(&broker, "reset-g"),
            BTreeMap::from([(0, 10), (1, 10)])
        );

        let out = reset(&["--to-earliest", "--dry-run"]);
        assert!(out.status.success(), "{out}");
        assert_eq!(
            new_offsets(&out),
            vec![("reset-0".into(), 0), ("reset-1".into(), 0)]
        );
        assert_eq!(
            committed(&broker, "reset-g"),
            BTreeMap::from([(0, 10), (1, 10)]),
            "dry run changes nothing"
        );

        let out = reset(&["--to-earliest"]);
        assert!(out.status.success(), "{out}");
        assert!(out.stderr.contains("No action will be performed"), "{out}");
        assert_eq!(
            committed(&broker, "reset-g"),
            BTreeMap::from([(0, 10), (1, 10)])
        );

        assert!(reset(&["--to-earliest", "--execute"]).status.success());
        assert_eq!(
            committed(&broker, "reset-g"),
            BTreeMap::from([(0, 0), (1, 0)])
        );
        assert!(reset(&["--to-offset", "99", "--execute"]).status.success());
        assert_eq!(
            committed(&broker, "reset-g"),
            BTreeMap::from([(0, 10), (1, 10)]),
            "clamped to the log end"
        );
        let out = groups_cli(
            &broker,
            &[
                "--reset-offsets",
                "--group",
                "reset-g",
                "--topic",
                "reset:1",
                "--to-offset",
                "3",
                "--execute",
            ],
        );
        assert!(out.status.success(), "{out}");
        assert_eq!(
            committed(&broker, "reset-g"),
            BTreeMap::from([(0, 10), (1, 3)])
        );
        let out = reset(&["--to-datetime", "2023-11-14T22:13:25.000Z", "--execute"]);
        assert!(out.status.success(), "{out}");
        // 1_700_000_005_000 ms is 2023-11-14T22:13:25Z: the sixth record.
        assert_eq!(
            committed(&broker, "reset-g"),
            BTreeMap::from([(0, 5), (1, 5)])
        );
        assert!(!reset(&["--to-earliest", "--to-latest", "--execute"])
            .status
            .success());
        assert!(
            !reset(&["--execute"]).status.success(),
            "a reset needs a target"
        );

        let member = Member::spawn(broker.bootstrap(), "reset-g", "reset", &[]);
        wait_until(REBALANCE_WAIT, "the member to join", || {
            member.assignment().is_some_and(|a| a.len() == 2)
        });
        let out = reset(&["--to-earliest", "--execute"]);
        assert!(
            !out.status.success(),
            "reset of an active group must fail: {out}"
        );
        assert!(
            out.stderr.contains("Assignments can only be reset if the group 'reset-g' is inactive, but the current state is Stable."),
            "{out}"
        );
    });
}

#[test]
fn list_and_delete_groups() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = broker();
        broker.create_topic("del", 1);
        for group in ["del-a", "del-b"] {
            let out = groups_cli(
                &broker,
                &[
                    "--reset-offsets",
                    "--group",
                    group,
                    "--topic",
                    "del",
                    "--to-earliest",
                    "--execute",
                ],
            );
            assert!(out.status.success(), "{out}");
        }
        let member = Member::spawn(broker.bootstrap(), "del-busy", "del", &[]);
        wait_until(REBALANCE_WAIT, "the member to join", || {
            member.assignment().is_some_and(|a| a.len() == 1)
        });
        let out = groups_cli(&broker, &["--list"]);
        assert!(out.status.success(), "{out}");
        assert_eq!(
            out.stdout.lines().collect::<Vec<_>>(),
            ["del-a", "del-b", "del-busy"]
        );

        let out = groups_cli(&broker, &["--delete", "--group", "del-a"]);
        assert!(out.status.success(), "{out}");
        assert!(
            out.stdout
                .contains("Deletion of requested consumer groups ('del-a') was successful."),
            "{out}"
        );
        let out = groups_cli(&broker, &["--delete", "--group", "del-busy"]);
        assert!(!out.status.success(), "{out}");
        assert!(out.stderr.contains("NON_EMPTY_GROUP"), "{out}");
        let out = groups_cli(&broker, &["--delete", "--group", "nope"]);
        assert!(!out.status.success(), "{out}");
        assert!(out.stderr.contains("GROUP_ID_NOT_FOUND"), "{out}");
        let out = groups_cli(&broker, &["--describe", "--group", "del-a"]);
        assert!(
            !out.status.success(),
            "a deleted group does not exist: {out}"
        );
        assert!(
            out.stderr
                .contains("Consumer group 'del-a' does not exist."),
            "{out}"
        );
        let out = groups_cli(&broker, &["--list"]);
        assert_eq!(
            out.stdout.lines().collect::<Vec<_>>(),
            ["del-b", "del-busy"]
        );
        assert!(
            !groups_cli(&broker, &["--describe"]).status.success(),
            "--group is required"
        );
        // Deleting a topic deletes the offsets committed for it.
        assert_eq!(committed(&broker, "del-b"), BTreeMap::from([(0, 0)]));
        let out = broker.cli(&[
            "topics",
            "delete",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "del",
        ]);
        assert!(out.status.success(), "{out}");
        assert!(committed(&broker, "del-b").is_empty());
        assert!(
            !groups_cli(&broker, &["--group", "x"]).status.success(),
            "an action is required"
        );
    });
}

// ----------------------------------------------------------------------
// Hand-built requests

fn describe_group(broker: &TarnBroker, group: &str) -> DescribedGroup {
    let mut client = Client::connect(broker.bootstrap()).unwrap();
    let request = DescribeGroupsRequest {
        groups: vec![group.into()],
        include_authorized_operations: true,
    };
    let response: DescribeGroupsResponse = client.call(15, 5, 5, &request).unwrap();
    response.groups.into_iter().next().unwrap()
}

/// The member id of the static member `instance`.
fn member_of(broker: &TarnBroker, group: &str, instance: &str) -> String {
    describe_group(broker, group)
        .members
        .into_iter()
        .find(|m| m.group_instance_id.as_deref() == Some(instance))
        .map(|m| m.member_id)
        .unwrap_or_else(|| panic!("no member with instance id {instance}"))
}

fn subscription(topics: &[&str]) -> Bytes {
    Subscription {
        topics: topics.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    }
    .encode_prefixed(1)
}

fn join_request(group: &str, member: &str, session_ms: i32) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: session_ms,
        rebalance_timeout_ms: 10_000,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: subscription(&["proto"]),
        }],
        reason: None,
    }
}

#[test]
fn group_apis_answer_kafkas_error_codes() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start_with(group_options().set("group.max.size", "1"));
        broker.create_topic("proto", 2);
        let mut client = Client::connect(broker.bootstrap()).unwrap();

        // FindCoordinator: one key (v3) and a batch (v4); it creates the
        // offsets topic, which Metadata then shows as internal.
        let found: FindCoordinatorResponse = client
            .call(
                10,
                3,
                3,
                &FindCoordinatorRequest {
                    key: "g".into(),
                    key_type: 0,
                    coordinator_keys: vec![],
                },
            )
            .unwrap();
        assert_eq!(found.error_code, error::NONE);
        assert_eq!(format!("{}:{}", found.host, found.port), broker.bootstrap());
        let found: FindCoordinatorResponse = client
            .call(
                10,
                4,
                3,
                &FindCoordinatorRequest {
                    key: String::new(),
                    key_type: 0,
                    coordinator_keys: vec!["a".into(), "b".into()],
                },
            )
            .unwrap();
        assert_eq!(
            found
                .coordinators
                .iter()
                .map(|c| (c.key.as_str(), c.error_code))
                .collect::<Vec<_>>(),
            [("a", 0), ("b", 0)]
        );
        let found: FindCoordinatorResponse = client
            .call(
                10,
                3,
                3,
                &FindCoordinatorRequest {
                    key: "t".into(),
                    key_type: 7,
                    coordinator_keys: vec![],
                },
            )
            .unwrap();
        assert_eq!(found.error_code, error::INVALID_REQUEST);
        let meta: MetadataResponse = client
            .call(
                3,
                12,
                9,
                &MetadataRequest {
                    topics: Some(vec![MetadataRequestTopic {
                        name: Some("__consumer_offsets".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(meta.topics[0].is_internal);
        assert_eq!(meta.topics[0].partitions.len(), 50);
        let batch = RecordBatchBuilder::new()
            .record(0, Some(b"k"), Some(b"v"))
            .build();
        let produced: ProduceResponse = client
            .call(
                0,
                9,
                9,
                &ProduceRequest {
                    transactional_id: None,
                    acks: -1,
                    timeout_ms: 1000,
                    topic_data: vec![TopicProduceData {
                        name: "__consumer_offsets".into(),
                        topic_id: Default::default(),
                        partition_data: vec![PartitionProduceData {
                            index: 0,
                            records: Some(Bytes::from(batch)),
                        }],
                    }],
                },
            )
            .unwrap();
        assert_ne!(
            produced.responses[0].partition_responses[0].error_code,
            error::NONE,
            "clients cannot write the offsets topic"
        );

        // JoinGroup: KIP-394 from v4, not before; bad session timeouts.
        let first: JoinGroupResponse = client.call(11, 4, 6, &join_request("g", "", 6000)).unwrap();
        assert_eq!(first.error_code, error::MEMBER_ID_REQUIRED);
        assert!(
            first.member_id.starts_with("tarn-cli-"),
            "{}",
            first.member_id
        );
        let joined: JoinGroupResponse = client
            .call(11, 7, 6, &join_request("g", &first.member_id, 6000))
            .unwrap();
        assert_eq!(joined.error_code, error::NONE);
        assert_eq!(joined.generation_id, 1);
        assert_eq!(joined.leader, first.member_id);
        assert_eq!(joined.members.len(), 1);
        assert_eq!(joined.protocol_type.as_deref(), Some("consumer"));
        let bad: JoinGroupResponse = client.call(11, 3, 6, &join_request("g2", "", 500)).unwrap();
        assert_eq!(bad.error_code, error::INVALID_SESSION_TIMEOUT);
        let bad: JoinGroupResponse = client.call(11, 5, 6, &join_request("", "", 6000)).unwrap();
        assert_eq!(bad.error_code, error::INVALID_GROUP_ID);
        let full: JoinGroupResponse = client.call(11, 3, 6, &join_request("g", "", 6000)).unwrap();
        assert_eq!(
            full.error_code,
            error::GROUP_MAX_SIZE_REACHED,
            "group.max.size is 1"
        );
        let mut no_protocols = join_request("g3", "", 6000);
        no_protocols.protocols.clear();
        let inconsistent: JoinGroupResponse = client.call(11, 3, 6, &no_protocols).unwrap();
        assert_eq!(inconsistent.error_code, error::INCONSISTENT_GROUP_PROTOCOL);

        // SyncGroup and the fencing errors.
        let assignment = Assignment {
            assigned_partitions: vec![TopicPartitions {
                topic: "proto".into(),
                partitions: vec![0, 1],
            }],
            user_data: None,
        }
        .encode_prefixed(1);
        let member = first.member_id.clone();
        let sync = |generation: i32, member: &str| SyncGroupRequest {
            group_id: "g".into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![SyncGroupRequestAssignment {
                member_id: member.into(),
                assignment: assignment.clone(),
            }],
        };
        let synced: SyncGroupResponse = client.call(14, 5, 4, &sync(1, &member)).unwrap();
        assert_eq!(synced.error_code, error::NONE);
        assert_eq!(synced.assignment, assignment);
        assert_eq!(synced.protocol_name.as_deref(), Some("range"));
        let wrong: SyncGroupResponse = client.call(14, 3, 4, &sync(7, &member)).unwrap();
        assert_eq!(wrong.error_code, error::ILLEGAL_GENERATION);
        let heartbeat = |client: &mut Client, generation: i32, member: &str| -> i16 {
            let r: HeartbeatResponse = client
                .call(
                    12,
                    4,
                    4,
                    &HeartbeatRequest {
                        group_id: "g".into(),
                        generation_id: generation,
                        member_id: member.into(),
                        group_instance_id: None,
                    },
                )
                .unwrap();
            r.error_code
        };
        assert_eq!(heartbeat(&mut client, 1, &member), error::NONE);
        assert_eq!(
            heartbeat(&mut client, 2, &member),
            error::ILLEGAL_GENERATION
        );
        assert_eq!(
            heartbeat(&mut client, 1, "stranger"),
            error::UNKNOWN_MEMBER_ID
        );
        let described = describe_group(&broker, "g");
        assert_eq!(described.group_state, "Stable");
        assert_eq!(described.protocol_data, "range");
        assert_eq!(described.members[0].member_assignment, assignment);
        assert_eq!(described.members[0].client_id, "tarn-cli");
        assert_eq!(described.authorized_operations, 1 << 3 | 1 << 6 | 1 << 8);
        assert_eq!(describe_group(&broker, "unknown").group_state, "Dead");

        // OffsetCommit / OffsetFetch, including v8's several groups.
        let commit =
            |generation: i32, member: &str, partition: i32, offset: i64| OffsetCommitRequest {
                group_id: "g".into(),
                generation_id_or_member_epoch: generation,
                member_id: member.into(),
                group_instance_id: None,
                retention_time_ms: -1,
                topics: vec![OffsetCommitRequestTopic {
                    name: "proto".into(),
                    partitions: vec![OffsetCommitRequestPartition {
                        partition_index: partition,
                        committed_offset: offset,
                        committed_metadata: Some("meta".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
        let code = |r: OffsetCommitResponse| r.topics[0].partitions[0].error_code;
        assert_eq!(
            code(client.call(8, 8, 8, &commit(1, &member, 0, 42)).unwrap()),
            error::NONE
        );
        assert_eq!(
            code(client.call(8, 8, 8, &commit(2, &member, 0, 1)).unwrap()),
            error::ILLEGAL_GENERATION
        );
        assert_eq!(
            code(client.call(8, 7, 8, &commit(-1, "", 0, 1)).unwrap()),
            error::UNKNOWN_MEMBER_ID
        );
        assert_eq!(
            code(client.call(8, 2, 8, &commit(1, &member, 9, 1)).unwrap()),
            error::UNKNOWN_TOPIC_OR_PARTITION
        );
        let fetched: OffsetFetchResponse = client
            .call(
                9,
                8,
                6,
                &OffsetFetchRequest {
                    groups: vec![
                        OffsetFetchRequestGroup {
                            group_id: "g".into(),
                            member_id: None,
                            member_epoch: -1,
                            topics: None,
                        },
                        OffsetFetchRequestGroup {
                            group_id: "none".into(),
                            member_id: None,
                            member_epoch: -1,
                            topics: Some(vec![OffsetFetchRequestTopic {
                                name: "proto".into(),
                                partition_indexes: vec![1],
                                ..Default::default()
                            }]),
                        },
                    ],
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(fetched.groups.len(), 2);
        let p = &fetched.groups[0].topics[0].partitions[0];
        assert_eq!(
            (p.partition_index, p.committed_offset, p.metadata.as_deref()),
            (0, 42, Some("meta"))
        );
        assert_eq!(
            fetched.groups[1].topics[0].partitions[0].committed_offset,
            -1
        );
        let fetched: OffsetFetchResponse = client
            .call(
                9,
                1,
                6,
                &OffsetFetchRequest {
                    group_id: "g".into(),
                    topics: Some(vec![OffsetFetchRequestTopic {
                        name: "proto".into(),
                        partition_indexes: vec![0, 1],
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
            )
            .unwrap();
        let offsets: Vec<i64> = fetched.topics[0]
            .partitions
            .iter()
            .map(|p| p.committed_offset)
            .collect();
        assert_eq!(offsets, [42, -1]);

        // OffsetDelete: the group consumes "proto".
        let deleted: OffsetDeleteResponse = client
            .call(
                47,
                0,
                i16::MAX,
                &OffsetDeleteRequest {
                    group_id: "g".into(),
                    topics: vec![OffsetDeleteRequestTopic {
                        name: "proto".into(),
                        partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
                    }],
                },
            )
            .unwrap();
        assert_eq!(
            deleted.topics[0].partitions[0].error_code,
            error::GROUP_SUBSCRIBED_TO_TOPIC
        );

        // ListGroups with a state filter, DeleteGroups of an active group.
        let listed: ListGroupsResponse = client
            .call(
                16,
                4,
                3,
                &ListGroupsRequest {
                    states_filter: vec!["stable".into()],
                    types_filter: vec![],
                },
            )
            .unwrap();
        assert_eq!(
            listed
                .groups
                .iter()
                .map(|g| (g.group_id.as_str(), g.group_state.as_str()))
                .collect::<Vec<_>>(),
            [("g", "Stable")]
        );
        let listed: ListGroupsResponse = client
            .call(
                16,
                4,
                3,
                &ListGroupsRequest {
                    states_filter: vec!["Empty".into()],
                    types_filter: vec![],
                },
            )
            .unwrap();
        // A JoinGroup that failed its protocol check still created "g3", as
        // in Kafka; it holds nothing and expires with the offsets cleanup.
        assert_eq!(
            listed
                .groups
                .iter()
                .map(|g| g.group_id.as_str())
                .collect::<Vec<_>>(),
            ["g3"]
        );
        let deleted: DeleteGroupsResponse = client
            .call(
                42,
                2,
                2,
                &DeleteGroupsRequest {
                    groups_names: vec!["g".into()],
                },
            )
            .unwrap();
        assert_eq!(deleted.results[0].error_code, error::NON_EMPTY_GROUP);

        // LeaveGroup v3 batch: the member and a stranger.
        let left: LeaveGroupResponse = client
            .call(
                13,
                3,
                4,
                &LeaveGroupRequest {
                    group_id: "g".into(),
                    member_id: String::new(),
                    members: vec![
                        MemberIdentity {
                            member_id: member.clone(),
                            group_instance_id: None,
                            reason: None,
                        },
                        MemberIdentity {
                            member_id: "stranger".into(),
                            group_instance_id: None,
                            reason: None,
                        },
                    ],
                },
            )
            .unwrap();
        assert_eq!(left.error_code, error::NONE);
        assert_eq!(
            left.members
                .iter()
                .map(|m| m.error_code)
                .collect::<Vec<_>>(),
            [error::NONE, error::UNKNOWN_MEMBER_ID]
        );
        assert_eq!(describe_group(&broker, "g").group_state, "Empty");
        let left: LeaveGroupResponse = client
            .call(
                13,
                1,
                4,
                &LeaveGroupRequest {
                    group_id: "g".into(),
                    member_id: member.clone(),
                    members: vec![],
                },
            )
            .unwrap();
        assert_eq!(
            left.error_code,
            error::UNKNOWN_MEMBER_ID,
            "v0-2 carry the member's error at the top"
        );

        // Now empty: offsets can go, then the group.
        let deleted: OffsetDeleteResponse = client
            .call(
                47,
                0,
                i16::MAX,
                &OffsetDeleteRequest {
                    group_id: "g".into(),
                    topics: vec![OffsetDeleteRequestTopic {
                        name: "proto".into(),
                        partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
                    }],
                },
            )
            .unwrap();
        assert_eq!(deleted.topics[0].partitions[0].error_code, error::NONE);
        let deleted: DeleteGroupsResponse = client
            .call(
                42,
                2,
                2,
                &DeleteGroupsRequest {
                    groups_names: vec!["g".into(), "g".into(), "nope".into()],
                },
            )
            .unwrap();
        assert_eq!(
            deleted
                .results
                .iter()
                .map(|r| r.error_code)
                .collect::<Vec<_>>(),
            [
                error::NONE,
                error::GROUP_ID_NOT_FOUND,
                error::GROUP_ID_NOT_FOUND
            ]
        );
    });
}
