//! Partition reassignment between real broker processes, driven by `tarn
//! reassign-partitions` as kafka-reassign-partitions.sh would be: the new
//! replicas catch up and join the ISR, then the removed ones leave and
//! delete their data, with no record lost; a broker is drained by
//! executing what `--generate` proposes without it; a replica moved off
//! a stopped broker is dropped when it returns; and
//! `--throttle` holds a move to its rate until `--verify` clears the
//! throttle.
//!
//! A reassignment is held in progress by pausing (SIGSTOP) one of its new
//! replicas, so "in progress" is observed for certain, not raced.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use tarn_e2e::cluster::{segment_files, Cluster};
use tarn_e2e::http::{must, scrape};
use tarn_e2e::kafka::{consume_all, Outgoing, Record, TestProducer};
use tarn_e2e::{cli, run_with_timeout};

const FORMED: Duration = Duration::from_secs(60);
const SETTLED: Duration = Duration::from_secs(90);
const TEST_LIMIT: Duration = Duration::from_secs(300);
/// A paused broker is fenced, and back, within seconds.
const QUICK_SESSIONS: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("broker.heartbeat.interval.ms", "500"),
];

fn records(prefix: &str, n: usize) -> Vec<Outgoing> {
    (0..n)
        .map(|i| Record::kv(&format!("{prefix}-k{i}"), &format!("{prefix}-v{i}")).into())
        .collect()
}

fn produce(bootstrap: &str, topic: &str, prefix: &str, n: usize) {
    let mut producer = TestProducer::new(
        bootstrap,
        &[("acks", "all"), ("enable.idempotence", "true")],
    );
    assert_eq!(producer.produce_all(topic, &records(prefix, n)).len(), n);
}

/// Creates `topic` with `tarn topics create` and waits until node 1 sees
/// every partition led; node 1's view then.
fn create_led(
    cluster: &Cluster,
    bootstrap: &str,
    topic: &str,
    partitions: usize,
    replication: usize,
) -> tarn_e2e::cluster::View {
    let out = cli::create_topic(bootstrap, topic, partitions as i32, replication as i32, &[]);
    assert!(out.status.success(), "create {topic}: {out}");
    let (view, _) = cluster.wait_for(1, FORMED, &format!("{topic} led"), |v| {
        v.leaders
            .get(topic)
            .is_some_and(|l| l.len() == partitions && l.iter().all(|x| *x > 0))
    });
    view
}

fn reassign(bootstrap: &str, args: &[&str]) -> cli::CliOutput {
    let mut all = vec!["reassign-partitions", "--bootstrap-server", bootstrap];
    all.extend(args);
    cli::run(&all)
}

/// Runs `--execute` on `file` (with `extra` arguments), which must succeed;
/// its output.
fn execute(bootstrap: &str, file: &Path, extra: &[&str]) -> cli::CliOutput {
    let mut args = vec![
        "--execute",
        "--reassignment-json-file",
        file.to_str().expect("a UTF-8 path"),
    ];
    args.extend(extra);
    let out = reassign(bootstrap, &args);
    assert!(out.status.success(), "execute: {out}");
    out
}

/// Runs `--verify` until every partition's line of it says "is
/// completed."; the output of the last run.
fn wait_completed(bootstrap: &str, file: &Path) -> String {
    let started = Instant::now();
    loop {
        let out = reassign(
            bootstrap,
            &[
                "--verify",
                "--reassignment-json-file",
                file.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "verify: {out}");
        let lines: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("Reassignment of partition") || l.starts_with("There is no"))
            .collect();
        if !lines.is_empty() && lines.iter().all(|l| l.ends_with("is completed.")) {
            println!("reassignment completed after {:?}", started.elapsed());
            return out.stdout;
        }
        assert!(started.elapsed() < SETTLED, "not completed: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The partition directories of `topic` a node holds (not those renamed
/// for deletion).
fn partition_dirs(data_dir: &Path, topic: &str) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(data_dir)
        .expect("read data dir")
        .map(|e| {
            e.expect("read data dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| {
            name.strip_prefix(topic)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|p| p.parse::<i32>().is_ok())
        })
        .collect();
    dirs.sort();
    dirs
}

fn wait_gone(cluster: &Cluster, id: i32, topic: &str) {
    let started = Instant::now();
    let dir = cluster.node(id).data_dir();
    while !partition_dirs(dir, topic).is_empty() {
        assert!(
            started.elapsed() < SETTLED,
            "node {id} still holds {:?}",
            partition_dirs(dir, topic)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three nodes with `topic` (one partition, three replicas) holding 200
/// records of `prefix`: the cluster, its controller, its bootstrap list
/// and a broker that is neither the controller nor the leader.
fn with_a_follower_to_lose(topic: &str, prefix: &str) -> (Cluster, i32, String, i32) {
    let cluster = Cluster::start(3, &[1, 2, 3], QUICK_SESSIONS);
    let controller = cluster.wait_until_formed(FORMED);
    let bootstrap = cluster.bootstrap();
    let view = create_led(&cluster, &bootstrap, topic, 1, 3);
    let leader = view.leaders[topic][0];
    produce(&bootstrap, topic, prefix, 200);
    let follower = (1..=3).find(|i| *i != controller && *i != leader).unwrap();
    (cluster, controller, bootstrap, follower)
}

fn values(consumed: &[tarn_e2e::kafka::Consumed]) -> BTreeSet<String> {
    consumed
        .iter()
        .map(|c| String::from_utf8(c.record.value.clone().expect("a value")).expect("utf-8"))
        .collect()
}

fn expected_values(prefixes: &[(&str, usize)]) -> BTreeSet<String> {
    prefixes
        .iter()
        .flat_map(|(p, n)| (0..*n).map(move |i| format!("{p}-v{i}")))
        .collect()
}

#[test]
fn a_partition_moves_to_new_replicas_which_catch_up_before_the_old_one_leaves() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start(3, &[1, 2, 3], QUICK_SESSIONS);
        let controller = cluster.wait_until_formed(FORMED);
        let bootstrap = cluster.bootstrap();
        let view = create_led(&cluster, &bootstrap, "moved", 1, 1);
        let old = view.leaders["moved"][0];
        assert_eq!(view.replicas["moved"][0], [old]);
        // The new replicas: one kept paused so that the move stays in
        // progress (never the active controller, which must keep
        // committing), and one that catches up at once.
        let others: Vec<i32> = (1..=3).filter(|i| *i != old).collect();
        let paused = *others.iter().find(|i| **i != controller).unwrap();
        let other = *others.iter().find(|i| **i != paused).unwrap();
        produce(&bootstrap, "moved", "before", 300);

        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("move.json");
        std::fs::write(
            &file,
            format!(r#"{{"version":1,"partitions":[{{"topic":"moved","partition":0,"replicas":[{paused},{other}]}}]}}"#),
        )
        .unwrap();
        let file_arg = file.to_str().unwrap();
        cluster.pause(paused);
        let live = cluster.address(other);
        let out = execute(&live, &file, &[]);
        assert!(
            out.stdout.contains(&format!(
                r#"{{"topic":"moved","partition":0,"replicas":[{old}],"log_dirs":["any"]}}"#
            )),
            "the rollback names the old replica: {out}"
        );
        assert!(
            out.stdout
                .contains("Successfully started partition reassignment for moved-0"),
            "{out}"
        );

        // The live new replica catches up and joins the ISR; the paused one
        // cannot, so the move waits, listed and described as in progress.
        cluster.wait_for(other, SETTLED, "the live new replica in the ISR", |v| {
            v.isr
                .get("moved")
                .is_some_and(|isr| isr[0].contains(&other))
        });
        let out = reassign(&live, &["--list"]);
        assert!(out.status.success(), "list: {out}");
        assert!(
            out.stdout.contains(&format!(
                "moved-0: replicas: {paused},{other},{old}. adding: {paused},{other}. removing: {old}."
            )),
            "{out}"
        );
        let out = reassign(&live, &["--verify", "--reassignment-json-file", file_arg]);
        assert!(
            out.stdout
                .contains("Reassignment of partition moved-0 is still in progress."),
            "{out}"
        );
        let out = cli::run(&[
            "topics",
            "describe",
            "--bootstrap-server",
            &live,
            "--topic",
            "moved",
        ]);
        assert!(out.status.success(), "describe: {out}");
        assert!(
            out.stdout.contains(&format!(
                "Adding Replicas: {paused},{other}\tRemoving Replicas: {old}"
            )),
            "{out}"
        );
        assert!(
            out.stdout.contains("ReplicationFactor: 1"),
            "counted without the adding replicas: {out}"
        );
        let metrics = scrape(cluster.node(old));
        assert_eq!(
            must(&metrics, "tarn_reassigning_partitions"),
            1.0,
            "led by the old replica"
        );
        let elections_before = must(&metrics, "tarn_leader_elections_total");
        let out = reassign(&live, &["--execute", "--reassignment-json-file", file_arg]);
        assert!(
            !out.status.success(),
            "a second execute without --additional: {out}"
        );
        assert!(
            out.stderr
                .contains("Cannot execute because there is an existing partition assignment."),
            "{out}"
        );
        assert!(
            Path::new(&cluster.node(old).data_dir().join("moved-0")).exists(),
            "the old replica stays until the move completes"
        );

        // Resumed, the paused replica catches up; its joining the ISR
        // completes the move, and the old replica leaves and is deleted.
        cluster.resume(paused);
        let verified = wait_completed(&live, &file);
        assert!(
            verified.contains("Reassignment of partition moved-0 is completed."),
            "{verified}"
        );
        let (view, _) =
            cluster.wait_for(old, SETTLED, "the move on the old replica's broker", |v| {
                v.replicas
                    .get("moved")
                    .is_some_and(|r| r[0] == [paused, other])
            });
        let mut want_isr = vec![paused, other];
        want_isr.sort();
        assert_eq!(view.isr["moved"][0], want_isr, "{view:?}");
        assert_ne!(
            view.leaders["moved"][0], old,
            "the removed replica led: {view:?}"
        );
        let metrics = scrape(cluster.node(old));
        assert_eq!(must(&metrics, "tarn_reassigning_partitions"), 0.0);
        assert!(
            must(&metrics, "tarn_leader_elections_total") > elections_before,
            "the hand-over from the removed leader is an election"
        );
        wait_gone(&cluster, old, "moved");
        let out = reassign(&live, &["--list"]);
        assert!(
            out.stdout.contains("No partition reassignments found."),
            "{out}"
        );

        // Both new replicas hold the whole log, byte for byte, and every
        // record acknowledged before the move is read back once.
        let started = Instant::now();
        loop {
            let copies: Vec<_> = [paused, other]
                .iter()
                .map(|id| segment_files(&cluster.node(*id).data_dir().join("moved-0")))
                .collect();
            if copies[0] == copies[1] && !copies[0].is_empty() {
                break;
            }
            assert!(started.elapsed() < SETTLED, "the new replicas differ");
            std::thread::sleep(Duration::from_millis(100));
        }
        produce(&live, "moved", "after", 100);
        let consumed = consume_all(&live, "moved", 400, Duration::from_secs(60));
        assert_eq!(consumed.len(), 400);
        assert_eq!(
            values(&consumed),
            expected_values(&[("before", 300), ("after", 100)])
        );
    });
}

#[test]
fn a_broker_is_drained_by_the_generated_reassignment() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start(3, &[1, 2, 3], &[]);
        let controller = cluster.wait_until_formed(FORMED);
        let bootstrap = cluster.bootstrap();
        create_led(&cluster, &bootstrap, "drained", 3, 2);
        produce(&bootstrap, "drained", "kept", 600);
        let drained = (1..=3).find(|i| *i != controller).unwrap();
        let keep: Vec<String> = (1..=3)
            .filter(|i| *i != drained)
            .map(|i| i.to_string())
            .collect();
        assert!(
            !partition_dirs(cluster.node(drained).data_dir(), "drained").is_empty(),
            "three partitions of two replicas each over three brokers use them all"
        );

        let scratch = tempfile::tempdir().unwrap();
        let topics_file = scratch.path().join("topics.json");
        std::fs::write(
            &topics_file,
            r#"{"version":1,"topics":[{"topic":"drained"}]}"#,
        )
        .unwrap();
        let out = reassign(
            &bootstrap,
            &[
                "--generate",
                "--topics-to-move-json-file",
                topics_file.to_str().unwrap(),
                "--broker-list",
                &keep.join(","),
            ],
        );
        assert!(out.status.success(), "generate: {out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines[0], "Current partition replica assignment", "{out}");
        assert_eq!(
            lines[3], "Proposed partition reassignment configuration",
            "{out}"
        );
        let proposal: serde_json::Value =
            serde_json::from_str(lines[4]).expect("the proposal is JSON");
        let partitions = proposal["partitions"].as_array().unwrap();
        assert_eq!(partitions.len(), 3, "{out}");
        for p in partitions {
            let replicas: Vec<i64> = p["replicas"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_i64().unwrap())
                .collect();
            assert_eq!(replicas.len(), 2, "the replication factor is kept: {out}");
            assert!(!replicas.contains(&i64::from(drained)), "{out}");
        }
        let file = scratch.path().join("drain.json");
        std::fs::write(&file, lines[4]).unwrap();
        let out = execute(&bootstrap, &file, &[]);
        assert!(
            out.stdout.contains(
                "Successfully started partition reassignments for drained-0,drained-1,drained-2"
            ),
            "{out}"
        );
        wait_completed(&bootstrap, &file);

        for id in 1..=3 {
            cluster.wait_for(id, SETTLED, "no partition on the drained broker", |v| {
                v.replicas
                    .get("drained")
                    .is_some_and(|r| r.iter().all(|replicas| !replicas.contains(&drained)))
                    && v.leaders
                        .get("drained")
                        .is_some_and(|l| l.iter().all(|x| *x > 0 && *x != drained))
            });
        }
        wait_gone(&cluster, drained, "drained");
        let consumed = consume_all(
            &cluster.address(controller),
            "drained",
            600,
            Duration::from_secs(60),
        );
        assert_eq!(consumed.len(), 600);
        assert_eq!(values(&consumed), expected_values(&[("kept", 600)]));
    });
}

/// A replica moved off a broker while it was down is not served again
/// when the broker comes back: replaying the metadata it missed, the
/// broker deletes it (or, had it caught up from a snapshot that skipped
/// the move, sets the directory aside as stray once unfenced), and the
/// records stay whole on the replicas that remain.
#[test]
fn a_replica_moved_off_a_stopped_broker_is_dropped_when_it_returns() {
    run_with_timeout(TEST_LIMIT, || {
        let (mut cluster, controller, _, gone) = with_a_follower_to_lose("strayed", "kept");
        let kept: Vec<String> = (1..=3)
            .filter(|i| *i != gone)
            .map(|i| i.to_string())
            .collect();
        cluster.stop(gone);

        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("off.json");
        std::fs::write(
            &file,
            format!(
                r#"{{"version":1,"partitions":[{{"topic":"strayed","partition":0,"replicas":[{}]}}]}}"#,
                kept.join(",")
            ),
        )
        .unwrap();
        let live = cluster.address(controller);
        execute(&live, &file, &[]);
        wait_completed(&live, &file);
        let dir = cluster.node(gone).data_dir().to_path_buf();
        assert_eq!(
            partition_dirs(&dir, "strayed"),
            ["strayed-0"],
            "the stopped broker still holds its replica"
        );

        cluster.start_again(gone);
        cluster.wait_for(gone, SETTLED, "the broker back and unfenced", |v| {
            v.brokers.contains_key(&gone)
        });
        wait_gone(&cluster, gone, "strayed");
        let consumed = consume_all(&live, "strayed", 200, Duration::from_secs(60));
        assert_eq!(values(&consumed), expected_values(&[("kept", 200)]));
    });
}

/// A topic deleted and made again under its name while one of its
/// replicas' brokers was down (killed): back, that broker replays the
/// deletion (its old directory renamed for deletion) and then the new
/// topic, whose log it fetches from empty, so none of the old topic's
/// records is in its copy. (A broker that skips the deletion, catching up
/// from a snapshot, meets the old directory under the new topic: the
/// replication simulation's re-creation test covers that path.)
#[test]
fn a_topic_made_again_while_a_replica_was_away_keeps_none_of_the_old_records() {
    run_with_timeout(TEST_LIMIT, || {
        let (mut cluster, controller, bootstrap, gone) = with_a_follower_to_lose("again", "old");
        cluster.kill(gone);
        let live = cluster.address(controller);
        cluster.wait_for(controller, SETTLED, "the killed broker fenced", |v| {
            !v.brokers.contains_key(&gone)
        });

        let out = cli::run(&[
            "topics",
            "delete",
            "--bootstrap-server",
            &live,
            "--topic",
            "again",
        ]);
        assert!(out.status.success(), "delete: {out}");
        cluster.wait_for(controller, SETTLED, "the topic gone", |v| {
            !v.leaders.contains_key("again")
        });
        // Made again on the same three brokers, the one that is down
        // included (as an explicit assignment may name a fenced broker).
        tarn_e2e::kafka::create_assigned(&live, "again", &[&[1, 2, 3]], &[]);
        cluster.wait_for(controller, SETTLED, "the new topic led", |v| {
            v.leaders.get("again").is_some_and(|l| l[0] > 0)
        });
        produce(&bootstrap, "again", "new", 150);

        cluster.start_again(gone);
        cluster.wait_for(controller, SETTLED, "the returning replica in sync", |v| {
            v.isr.get("again").is_some_and(|isr| isr[0].contains(&gone))
        });
        let dir = cluster.node(gone).data_dir().join("again-0");
        let mut payloads = BTreeSet::new();
        for (name, _) in segment_files(&dir) {
            let path = dir.join(&name);
            let out = cli::run(&["dump-log", "--print-data", path.to_str().unwrap()]);
            assert!(out.status.success(), "dump-log: {out}");
            payloads.extend(
                out.stdout
                    .lines()
                    .filter_map(|l| l.split_once(" payload: ").map(|(_, v)| v.to_owned())),
            );
        }
        assert_eq!(payloads, expected_values(&[("new", 150)]));
        let consumed = consume_all(&live, "again", 150, Duration::from_secs(60));
        assert_eq!(values(&consumed), expected_values(&[("new", 150)]));
    });
}

#[test]
fn a_throttled_move_is_held_to_its_rate_and_verify_clears_the_throttle() {
    run_with_timeout(TEST_LIMIT, || {
        // Small fetches and a short window, so the throttle bites within
        // a few hundred kilobytes.
        let settings = [
            ("replica.fetch.max.bytes", "8192"),
            ("replication.quota.window.num", "2"),
        ];
        let cluster = Cluster::start(3, &[1, 2, 3], &settings);
        cluster.wait_until_formed(FORMED);
        let bootstrap = cluster.bootstrap();
        let view = create_led(&cluster, &bootstrap, "slow", 1, 1);
        let old = view.leaders["slow"][0];
        let new = (1..=3).find(|i| *i != old).unwrap();
        let padded: Vec<Outgoing> = (0..1500)
            .map(|i| Record::kv(&format!("k{i}"), &format!("{i:0>100}")).into())
            .collect();
        // Small batches, so the follower needs many fetches.
        let mut producer =
            TestProducer::new(&bootstrap, &[("acks", "all"), ("batch.size", "2048")]);
        assert_eq!(producer.produce_all("slow", &padded).len(), padded.len());

        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("move.json");
        std::fs::write(
            &file,
            format!(r#"{{"version":1,"partitions":[{{"topic":"slow","partition":0,"replicas":[{old},{new}]}}]}}"#),
        )
        .unwrap();
        let out = execute(&bootstrap, &file, &["--throttle", "20000"]);
        assert!(
            out.stdout
                .contains("The inter-broker throttle limit was set to 20000 B/s"),
            "{out}"
        );
        let out = cli::run(&[
            "configs",
            "--bootstrap-server",
            &bootstrap,
            "--entity-type",
            "topics",
            "--entity-name",
            "slow",
            "--describe",
        ]);
        assert!(
            out.stdout
                .contains(&format!("leader.replication.throttled.replicas=0:{old}"))
                && out
                    .stdout
                    .contains(&format!("follower.replication.throttled.replicas=0:{new}")),
            "the topic's throttled replicas: {out}"
        );

        let verified = wait_completed(&bootstrap, &file);
        assert!(
            verified.contains("Clearing topic-level throttles on topic slow"),
            "{verified}"
        );
        // Either end may have held the move back; one of them must have.
        let held: f64 = [old, new]
            .iter()
            .map(|id| {
                let metrics = scrape(cluster.node(*id));
                must(&metrics, "tarn_replication_throttled_leader_total")
                    + must(&metrics, "tarn_replication_throttled_follower_total")
            })
            .sum();
        assert!(held > 0.0, "no fetch was held back by the throttle");
        let out = cli::run(&[
            "configs",
            "--bootstrap-server",
            &bootstrap,
            "--entity-type",
            "topics",
            "--entity-name",
            "slow",
            "--describe",
        ]);
        assert!(!out.stdout.contains("throttled.replicas="), "{out}");
        let consumed = consume_all(&bootstrap, "slow", padded.len(), SETTLED);
        assert_eq!(consumed.len(), padded.len());
    });
}
