//! Replication between real broker processes: followers copy the leader's
//! log batch for batch, acks=all waits for the ISR and is refused when the
//! ISR is below `min.insync.replicas`, and a killed leader is replaced
//! from the ISR with no acknowledged record lost.
//!
//! Times are printed, never asserted: the waits are generous bounds on
//! "eventually".

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::Offset;
use tarn_cli::client::Client;
use tarn_e2e::cluster::{segment_files, Cluster};
use tarn_e2e::kafka::{consume_all, consume_from_with, watermarks, Outgoing, Record, TestProducer};
use tarn_e2e::{cli, http, run_with_timeout, wire};
use tarn_protocol::error;

const FORMED: Duration = Duration::from_secs(60);
const TEST_LIMIT: Duration = Duration::from_secs(240);
/// Fast failure detection for the tests that kill brokers.
const QUICK_SESSIONS: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("broker.heartbeat.interval.ms", "500"),
];

/// Creates `topic` with three replicas and `configs`.
fn create_topic(bootstrap: &str, topic: &str, partitions: i32, configs: &[&str]) {
    let out = cli::create_topic(bootstrap, topic, partitions, 3, configs);
    assert!(out.status.success(), "create {topic}: {out}");
}

fn records(prefix: &str, n: usize) -> Vec<Outgoing> {
    (0..n)
        .map(|i| Record::kv(&format!("{prefix}-k{i}"), &format!("{prefix}-v{i}")).into())
        .collect()
}

#[test]
fn followers_copy_the_leaders_log_and_acks_all_waits_for_the_isr() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start(3, &[1, 2, 3], &[]);
        cluster.wait_until_formed(FORMED);
        create_topic(&cluster.address(1), "copied", 2, &["min.insync.replicas=2"]);
        let view = cluster.view(1).expect("view");
        assert_eq!(view.isr["copied"], vec![vec![1, 2, 3]; 2], "{view:?}");

        let mut producer = TestProducer::new(
            &cluster.address(2),
            &[("acks", "all"), ("enable.idempotence", "true")],
        );
        let delivered = producer.produce_all("copied", &records("a", 500));
        assert_eq!(delivered.len(), 500);
        // acks=all was answered once every ISR member had the records, so
        // the high watermark already covers all of them.
        let total: i64 = watermarks(&cluster.address(3), "copied")
            .iter()
            .map(|(_, low, high)| high - low)
            .sum();
        assert_eq!(total, 500);

        // The followers hold the leader's batches byte for byte.
        let started = Instant::now();
        for partition in 0..2 {
            let name = format!("copied-{partition}");
            loop {
                let copies: Vec<_> = [1, 2, 3]
                    .iter()
                    .map(|id| segment_files(&cluster.node(*id).data_dir().join(&name)))
                    .collect();
                let same = copies.iter().all(|c| *c == copies[0]);
                if same && copies[0].iter().any(|(_, bytes)| !bytes.is_empty()) {
                    break;
                }
                assert!(
                    started.elapsed() < FORMED,
                    "replicas of {name} differ: {:?}",
                    copies
                        .iter()
                        .map(|c| c
                            .iter()
                            .map(|(n, b)| (n.clone(), b.len()))
                            .collect::<Vec<_>>())
                        .collect::<Vec<_>>()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        println!("replicas identical after {:?}", started.elapsed());
        // Followers fetch in sessions (KIP-227): each leader holds one for
        // each of its two followers' fetchers.
        for leader in view.leaders["copied"].iter().collect::<BTreeSet<_>>() {
            let metrics = http::scrape(cluster.node(*leader));
            let sessions = http::must(&metrics, "tarn_fetch_sessions");
            assert!(
                sessions >= 2.0,
                "node {leader} holds {sessions} fetch sessions"
            );
        }
        let consumed = consume_all(&cluster.address(3), "copied", 500, Duration::from_secs(60));
        let values: BTreeSet<_> = consumed.iter().map(|c| c.record.value.clone()).collect();
        assert_eq!((consumed.len(), values.len()), (500, 500));
    });
}

#[test]
fn a_killed_leader_is_replaced_from_the_isr_and_no_acknowledged_record_is_lost() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(3, &[1, 2, 3], QUICK_SESSIONS);
        cluster.wait_until_formed(FORMED);
        create_topic(
            &cluster.address(1),
            "durable",
            3,
            &["min.insync.replicas=2"],
        );
        let mut producer = TestProducer::new(
            &cluster.address(1),
            &[("acks", "all"), ("enable.idempotence", "true")],
        );
        producer.produce_all("durable", &records("before", 300));

        let view = cluster.view(1).expect("view");
        let victim = view.leaders["durable"][0];
        cluster.kill(victim);
        let killed = Instant::now();
        let survivor = cluster.running()[0];
        let (view, took) = cluster.wait_for(survivor, FORMED, "new leaders", |v| {
            v.leaders["durable"].iter().all(|l| *l >= 0 && *l != victim)
        });
        println!(
            "broker {victim} killed; leaders {:?} after {took:?}",
            view.leaders["durable"]
        );
        for isr in &view.isr["durable"] {
            assert!(
                !isr.contains(&victim),
                "the dead broker left the ISR: {view:?}"
            );
        }

        // The survivors keep taking acks=all writes (2 of 3 in sync).
        let mut producer = TestProducer::new(
            &cluster.address(survivor),
            &[("acks", "all"), ("enable.idempotence", "true")],
        );
        producer.produce_all("durable", &records("after", 300));
        println!(
            "first acknowledged produce {:?} after the kill",
            killed.elapsed()
        );
        let consumed = consume_all(
            &cluster.address(survivor),
            "durable",
            600,
            Duration::from_secs(60),
        );
        let values: BTreeSet<_> = consumed.iter().map(|c| c.record.value.clone()).collect();
        assert_eq!(
            (consumed.len(), values.len()),
            (600, 600),
            "every acknowledged record, once"
        );

        // The dead broker comes back, catches up and rejoins every ISR.
        cluster.start_again(victim);
        let (_, took) = cluster.wait_for(survivor, FORMED, "the full ISR again", |v| {
            v.isr["durable"].iter().all(|isr| isr == &vec![1, 2, 3])
        });
        println!("broker {victim} back in every ISR after {took:?}");
    });
}

#[test]
fn acks_all_is_refused_while_the_isr_is_below_min_insync_replicas() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(3, &[1, 2, 3], QUICK_SESSIONS);
        cluster.wait_until_formed(FORMED);
        create_topic(&cluster.address(1), "strict", 1, &["min.insync.replicas=3"]);
        let leader = cluster.view(1).expect("view").leaders["strict"][0];
        let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
        cluster.kill(follower);
        cluster.wait_for(leader, FORMED, "the ISR without the dead follower", |v| {
            v.isr["strict"][0].len() == 2
        });

        // The refusal, as the wire carries it (clients retry it until
        // their delivery timeout).
        let mut client = Client::connect(&cluster.address(leader)).expect("connect");
        let refused =
            wire::produce_version(&mut client, 9, -1, "strict", 0, wire::batch(1, 1, b"x"));
        assert_eq!(
            refused.error_code,
            error::NOT_ENOUGH_REPLICAS,
            "{refused:?}"
        );
        // Nothing was appended.
        let appended =
            wire::produce_version(&mut client, 9, 1, "strict", 0, wire::batch(1, 1, b"y"));
        assert_eq!(
            (appended.error_code, appended.base_offset),
            (error::NONE, 0),
            "{appended:?}"
        );
        // acks=1 needs the leader alone; its record is appended, though not
        // exposed to consumers while the ISR is too small (KIP-966).
        let mut producer = TestProducer::new(&cluster.address(leader), &[("acks", "1")]);
        producer.produce_all("strict", &records("one", 1));
        let (_, _, high) = watermarks(&cluster.address(leader), "strict")[0];
        assert_eq!(high, 0, "the high watermark waits for min.insync.replicas");
        // The follower returns: the ISR is whole, the high watermark
        // covers both records, and acks=all is taken again.
        cluster.start_again(follower);
        cluster.wait_for(leader, FORMED, "the whole ISR again", |v| {
            v.isr["strict"][0].len() == 3
        });
        let mut producer = TestProducer::new(&cluster.address(leader), &[("acks", "all")]);
        producer.produce_all("strict", &records("all", 1));
        let (_, _, high) = watermarks(&cluster.address(leader), "strict")[0];
        assert_eq!(high, 3);
    });
}

#[test]
fn a_killed_broker_is_fenced_once_its_controller_connection_closes() {
    run_with_timeout(TEST_LIMIT, || {
        // Sessions that outlast the test: the fence can only come from the
        // controller seeing the heartbeat connection close and the
        // broker's listener refuse connections
        // (`broker.session.fence.on.disconnect`, on by default).
        let mut cluster = Cluster::start(3, &[1, 2, 3], &[("broker.session.timeout.ms", "600000")]);
        let controller = cluster.wait_until_formed(FORMED);
        create_topic(
            &cluster.address(controller),
            "quick",
            3,
            &["min.insync.replicas=2"],
        );
        let victim = (1..=3).find(|id| *id != controller).unwrap();
        cluster.wait_for(controller, FORMED, "every partition led", |v| {
            v.leaders["quick"].iter().all(|l| *l > 0)
        });
        let mut producer = TestProducer::new(
            &cluster.address(controller),
            &[("acks", "all"), ("enable.idempotence", "true")],
        );
        producer.produce_all("quick", &records("before", 100));

        cluster.kill(victim);
        let (view, took) = cluster.wait_for(controller, FORMED, "the dead broker fenced", |v| {
            !v.brokers.contains_key(&victim)
                && v.leaders["quick"].iter().all(|l| *l > 0 && *l != victim)
        });
        println!("broker {victim} fenced and its partitions led elsewhere {took:?} after the kill: {view:?}");
        producer.produce_all("quick", &records("after", 100));
        let consumed = consume_all(
            &cluster.address(controller),
            "quick",
            200,
            Duration::from_secs(60),
        );
        assert_eq!(consumed.len(), 200);
    });
}

/// The Fetch version Tarn's followers send (`FOLLOWER_FETCH_VERSION` in
/// crates/server/src/replica_fetcher.rs); librdkafka 2.12 sends v16.
const FOLLOWER_FETCH_VERSION: i16 = 15;

/// Fetch requests `node` answered in any other version than its peers'
/// followers use: consumers' and tools'.
fn consumer_fetches(cluster: &Cluster, node: i32) -> f64 {
    http::scrape(cluster.node(node))
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("tarn_requests_total{api=\"Fetch\",version=\"")?;
            let (version, count) = rest.split_once("\"} ")?;
            (version.parse::<i16>().ok()? != FOLLOWER_FETCH_VERSION)
                .then(|| count.parse::<f64>().expect("count"))
        })
        .sum()
}

#[test]
fn a_consumer_reads_from_the_replica_in_its_rack() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start_each(
            3,
            &[1, 2, 3],
            &[(
                "replica.selector.class",
                "org.apache.kafka.common.replica.RackAwareReplicaSelector",
            )],
            &[
                &[("broker.rack", "rack-1")],
                &[("broker.rack", "rack-2")],
                &[("broker.rack", "rack-3")],
            ],
        );
        cluster.wait_until_formed(FORMED);
        create_topic(&cluster.address(1), "racked", 1, &["min.insync.replicas=2"]);
        let mut producer = TestProducer::new(&cluster.address(1), &[("acks", "all")]);
        assert_eq!(
            producer.produce_all("racked", &records("r", 300)).len(),
            300
        );
        let view = cluster.view(1).expect("view");
        let leader = view.leaders["racked"][0];
        let follower = *[1, 2, 3]
            .iter()
            .find(|id| **id != leader)
            .expect("a follower");
        let rack = format!("rack-{follower}");

        // The leader names the follower in the consumer's rack, with no
        // records; from v11 only, and only to a consumer that names a rack.
        let mut to_leader = Client::connect(&cluster.address(leader)).expect("connect");
        let told = wire::fetch_in_rack(&mut to_leader, "racked", 0, -1, 0, &rack);
        assert_eq!(told.error_code, error::NONE);
        assert_eq!(told.preferred_read_replica, follower, "{told:?}");
        assert!(told.records.as_ref().is_none_or(|r| r.is_empty()));
        let own = wire::fetch_in_rack(
            &mut to_leader,
            "racked",
            0,
            -1,
            0,
            &format!("rack-{leader}"),
        );
        assert_eq!(own.preferred_read_replica, -1, "{own:?}");
        assert!(own.records.as_ref().is_some_and(|r| !r.is_empty()));
        let unracked = wire::fetch(&mut to_leader, "racked", 0, -1, 0);
        assert_eq!(unracked.preferred_read_replica, -1, "{unracked:?}");

        // The follower serves the consumer up to its high watermark.
        let mut to_follower = Client::connect(&cluster.address(follower)).expect("connect");
        let served = wire::fetch_in_rack(&mut to_follower, "racked", 0, -1, 5_000, &rack);
        assert_eq!(served.error_code, error::NONE, "{served:?}");
        assert!(
            served.records.as_ref().is_some_and(|r| !r.is_empty()),
            "{served:?}"
        );

        // librdkafka with client.rack follows the leader's answer and reads
        // everything from the follower.
        let before = consumer_fetches(&cluster, follower);
        let consumed = consume_from_with(
            &cluster.address(leader),
            "racked",
            &[(0, Offset::Beginning)],
            300,
            Duration::from_secs(60),
            &[("client.rack", rack.as_str())],
        );
        let values: BTreeSet<_> = consumed.iter().map(|c| c.record.value.clone()).collect();
        assert_eq!((consumed.len(), values.len()), (300, 300));
        let served = consumer_fetches(&cluster, follower) - before;
        assert!(
            served >= 1.0,
            "the follower answered {served} consumer fetches"
        );

        // A fetch waiting at the follower's end gets the records produced
        // meanwhile: the follower wakes its waiting fetches when its high
        // watermark moves. (Without that, the wait would lapse and answer
        // the empty read it began with.)
        let late = std::thread::spawn({
            let bootstrap = cluster.address(leader);
            move || {
                std::thread::sleep(Duration::from_secs(1));
                let mut producer = TestProducer::new(&bootstrap, &[("acks", "all")]);
                producer.produce_all("racked", &records("late", 100)).len()
            }
        });
        let woken = wire::fetch_in_rack(&mut to_follower, "racked", 300, -1, 20_000, &rack);
        assert_eq!(late.join().expect("late producer"), 100);
        assert_eq!(woken.error_code, error::NONE, "{woken:?}");
        assert!(
            woken.records.as_ref().is_some_and(|r| !r.is_empty()),
            "{woken:?}"
        );
    });
}
