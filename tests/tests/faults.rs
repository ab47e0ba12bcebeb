//! Jepsen-style runs on real broker processes: three brokers (and five), a topic of
//! replication factor 3 with `min.insync.replicas=2`, an idempotent
//! acks=all producer, a consumer and a consumer group of two members
//! (committing as they go, to a replicated `__consumer_offsets`) running
//! throughout, while a seeded
//! fault injector SIGKILLs partition leaders and the active controller,
//! pauses brokers (SIGSTOP/SIGCONT), partitions the network (every node is
//! a host of its own, a network namespace, and a cut loses packets
//! silently both ways: the quorum, the controller and the data path
//! between brokers alike), and strands a leader (pauses both its
//! followers, kills it, resumes them: a broker that acknowledged what only
//! it had would lose it here), then heals everything. The network faults
//! are: one node cut off every other; a minority holding a partition
//! leader split from the majority; one leader-follower link cut; and a
//! bridge (two sides that cannot reach each other, and one node that
//! reaches both). Every broker of a static quorum keeps its data on a disk
//! of its own (a tmpfs), and one fault fills a broker's disk: the broker
//! stops, as a broker in a cluster does at its first failed write, and
//! starts again once space returns. The test's clients reach every node throughout, so a
//! leader cut off its peers is a zombie they can still talk to. On a
//! dynamic quorum (KIP-853) every other round removes a voter, the active
//! controller half the time, and adds it back after the hold.
//!
//! A checker then reads every partition back and counts, per kind:
//! acknowledged records lost, records read twice, an offset holding
//! different records across reads or across replicas (the replicas' log
//! files are compared batch by batch), a consumer's offsets going
//! backwards or skipping records, and records whose send failed but that
//! were read, and an idempotent producer turning fatal (what librdkafka
//! does when a broker lost records it had acknowledged); for the group,
//! commits the coordinator acknowledged and then lost, and records below
//! the group's final committed offsets that no member read; and readers
//! that stall: records the live consumer or the group had not read a
//! minute after the producer stopped, and group members whose client never
//! returns (stuck in a commit, say). Every count must be zero.
//!
//! CI runs the seeds in `CI_SEEDS` with a few faults each;
//! `TARN_FAULT_SEEDS=1,2,3 TARN_FAULT_ROUNDS=12` runs others (and
//! `bench/jepsen.sh` runs long ones and records them). A failing seed
//! prints itself: the fault schedule replays from it (the timing of the
//! processes does not).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::{Message, Offset, TopicPartitionList};

use tarn_e2e::cluster::{Cluster, Own, View};
use tarn_e2e::disk::SmallDisk;
use tarn_e2e::kafka::{
    base_config, consume_all, consumer, watermarks, Outgoing, Record, TestProducer,
};
use tarn_e2e::{cli, run_with_timeout};
use tarn_protocol::record_batch::BatchIter;

const TOPIC: &str = "jepsen";
const PARTITIONS: i32 = 3;
const CI_SEEDS: &[u64] = &[1, 2];
/// The seeds CI runs on five brokers (every broker a voter, so a fault on
/// one leaves a quorum of four).
const CI_SEEDS_FIVE: &[u64] = &[3];
/// The seeds CI runs on a dynamic quorum of three.
const CI_SEEDS_DYNAMIC: &[u64] = &[4];
const CI_ROUNDS: usize = 3;
/// Each broker's disk (a tmpfs) on a static quorum: far more than a run
/// writes, until a fault fills it.
const DISK: &str = "512m";
const FORMED: Duration = Duration::from_secs(60);
const SETTINGS: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("broker.heartbeat.interval.ms", "500"),
    ("replica.lag.time.max.ms", "4000"),
    // The group's commits are replicated like the records.
    ("offsets.topic.replication.factor", "3"),
];
const GROUP: &str = "jepsen-group";
/// How long the readers may take to read everything once the faults are
/// healed and the producer has stopped.
const CATCH_UP: Duration = Duration::from_secs(60);
/// Members of the group.
const MEMBERS: usize = 2;
/// A member commits its positions after this many records.
const COMMIT_EVERY: usize = 50;

/// xorshift64*: a small seeded generator, so a seed names a schedule.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    KillLeader,
    KillController,
    Pause,
    /// One node cut off every other node.
    Isolate,
    /// A minority that holds a partition's leader cut off the majority.
    SplitLeader,
    /// One partition leader cut off one of its followers only.
    CutLink,
    /// Two sides cut off each other, with one node that reaches both.
    Bridge,
    /// Both followers of a partition's leader are paused, then the leader
    /// is killed and they resume: only records every ISR member had may
    /// have been acknowledged, or the new leader lacks them.
    StrandLeader,
    /// A voter of a dynamic quorum removed (half the time the active
    /// controller), then added back: it goes on as a broker meanwhile.
    ChangeVoter,
    /// A broker's disk fills up; it stops by itself, its disk is given
    /// space back, and it starts again.
    FillDisk,
}

/// What the producer learned: each value's acknowledged place, or why it
/// failed.
#[derive(Default)]
struct History {
    acked: Vec<(String, i32, i64)>,
    failed: Vec<(String, String)>,
    /// Why the producer stopped taking records early (an idempotent
    /// producer turns fatal when the broker loses what it acknowledged).
    fatal: Option<String>,
}

/// What the group's members read and the commits they were answered.
#[derive(Default)]
struct GroupReads {
    read: std::collections::HashSet<(i32, i64)>,
    /// Per partition, the highest offset a commit was acknowledged for.
    acked_commits: BTreeMap<i32, i64>,
    commits: usize,
    failed_commits: usize,
}

/// What the live consumer saw, and its anomalies.
#[derive(Default)]
struct Reads {
    /// (partition, offset) -> value, as first read.
    seen: HashMap<(i32, i64), String>,
    backwards: usize,
    skipped: usize,
    /// An offset read twice with different values.
    changed: usize,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Anomalies {
    lost: usize,
    duplicated: usize,
    divergent_reads: usize,
    divergent_replicas: usize,
    backwards: usize,
    skipped: usize,
    failed_but_read: usize,
    producer_fatal: usize,
    /// Sends that failed: the message timeout outlasts every fault, so a
    /// partition that takes no acknowledged write for that long after
    /// the faults healed is unavailable for no reason.
    failed_sends: usize,
    /// Partitions whose final committed offset is below one the
    /// coordinator acknowledged.
    commits_lost: usize,
    /// Records below the group's final committed offsets no member read.
    group_skipped: usize,
    /// Records the live consumer had not read [`CATCH_UP`] after the
    /// producer stopped (it stalled).
    reader_behind: usize,
    /// The same for the group's members.
    group_behind: usize,
    /// Group members whose consumer did not close within [`CATCH_UP`] of
    /// being told to stop (a client waiting on a coordinator it lost).
    members_stuck: usize,
}

fn seeds(ci_seeds: &[u64]) -> (Vec<u64>, usize) {
    let seeds = std::env::var("TARN_FAULT_SEEDS").map_or_else(
        |_| ci_seeds.to_vec(),
        |s| {
            s.split(',')
                .map(|x| x.trim().parse().expect("TARN_FAULT_SEEDS: numbers"))
                .collect()
        },
    );
    let rounds = std::env::var("TARN_FAULT_ROUNDS").map_or(CI_ROUNDS, |r| {
        r.parse().expect("TARN_FAULT_ROUNDS: a number")
    });
    (seeds, rounds)
}

#[test]
fn acknowledged_records_survive_kills_pauses_and_isolation() {
    run_seeds(CI_SEEDS, 3, Quorum::Static);
}

#[test]
fn acknowledged_records_survive_kills_pauses_and_isolation_on_five_brokers() {
    run_seeds(CI_SEEDS_FIVE, 5, Quorum::Static);
}

/// A dynamic quorum (KIP-853): every other round removes a voter (the
/// active controller as often as another; it goes on as a broker) and adds
/// it back after the hold, the other rounds inject the faults above.
#[test]
fn acknowledged_records_survive_faults_and_voter_changes_in_a_dynamic_quorum() {
    run_seeds(CI_SEEDS_DYNAMIC, 3, Quorum::Dynamic);
}

/// How the cluster's quorum is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quorum {
    /// `controller.quorum.voters`.
    Static,
    /// Formatted with `--initial-controllers`, its voters changed as a
    /// fault.
    Dynamic,
}

fn run_seeds(ci_seeds: &[u64], brokers: usize, quorum: Quorum) {
    let (seeds, rounds) = seeds(ci_seeds);
    let limit = Duration::from_secs(120 + 40 * (rounds as u64) * seeds.len() as u64);
    run_with_timeout(limit, move || {
        for seed in seeds {
            run_seed(seed, rounds, brokers, quorum);
        }
    });
}

/// One seed's run; panics (printing every node's log) on any anomaly.
fn run_seed(seed: u64, rounds: usize, brokers: usize, quorum: Quorum) {
    let mut rng = Rng::new(seed);
    let order: Vec<usize> = (1..=brokers).collect();
    // A dynamic quorum's data directories are formatted where the harness
    // puts them, so only a static quorum's brokers get disks of their own.
    // Declared before the cluster: unmounted after its processes are gone.
    let disks: Vec<SmallDisk> = match quorum {
        Quorum::Static => (0..brokers).map(|_| SmallDisk::mount(DISK)).collect(),
        Quorum::Dynamic => Vec::new(),
    };
    let own: Vec<Own> = disks
        .iter()
        .map(|disk| Own {
            settings: &[],
            data_dir: Some(disk.path().join("data")),
        })
        .collect();
    let mut cluster = match quorum {
        Quorum::Static => Cluster::start_partitionable_own(brokers, &order, SETTINGS, &own),
        Quorum::Dynamic => Cluster::start_dynamic_partitionable(brokers, &order, SETTINGS),
    };
    cluster.wait_until_formed(FORMED);
    let out = cli::run(&[
        "topics",
        "create",
        "--bootstrap-server",
        &cluster.address(1),
        "--topic",
        TOPIC,
        "--partitions",
        &PARTITIONS.to_string(),
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    assert!(out.status.success(), "create {TOPIC}: {out}");
    let bootstrap = cluster.bootstrap();

    let stop_producing = Arc::new(AtomicBool::new(false));
    let stop_reading = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(History::default()));
    let reads = Arc::new(Mutex::new(Reads::default()));
    let producer = {
        let (stop, history, bootstrap) =
            (stop_producing.clone(), history.clone(), bootstrap.clone());
        thread::spawn(move || produce(&bootstrap, &stop, &history))
    };
    let reader = {
        let (stop, reads, bootstrap) = (stop_reading.clone(), reads.clone(), bootstrap.clone());
        thread::spawn(move || read_live(&bootstrap, &stop, &reads))
    };
    let group = Arc::new(Mutex::new(GroupReads::default()));
    let members: Vec<_> = (0..MEMBERS)
        .map(|id| {
            let (stop, group, bootstrap) = (stop_reading.clone(), group.clone(), bootstrap.clone());
            thread::spawn(move || read_in_group(&bootstrap, &stop, &group, id))
        })
        .collect();

    thread::sleep(Duration::from_secs(2));
    for round in 0..rounds {
        let fault = match rng.below(9) {
            _ if quorum == Quorum::Dynamic && round % 2 == 0 => Fault::ChangeVoter,
            0 => Fault::KillLeader,
            1 => Fault::KillController,
            2 => Fault::Pause,
            3 => Fault::Isolate,
            4 => Fault::SplitLeader,
            5 => Fault::CutLink,
            6 => Fault::Bridge,
            8 if !disks.is_empty() => Fault::FillDisk,
            _ => Fault::StrandLeader,
        };
        let hold = Duration::from_millis(2_000 + rng.below(3_000));
        let started = Instant::now();
        let victim = inject(&mut cluster, &disks, &mut rng, fault, hold);
        println!("seed {seed} round {round}: {fault:?} on broker {victim} for {hold:?}");
        cluster.wait_until_formed(FORMED);
        println!(
            "  healed and formed {:?} after the fault began",
            started.elapsed()
        );
        print_partitions(&cluster);
        thread::sleep(Duration::from_millis(1_000 + rng.below(2_000)));
    }
    stop_producing.store(true, Ordering::SeqCst);
    producer.join().expect("producer thread");
    // The readers must catch up with everything written: a consumer or a
    // group that stalls after the faults is a failure too.
    let ends: Vec<(i32, i64, i64)> = watermarks(&cluster.bootstrap(), TOPIC);
    let unread = |read: &dyn Fn(i32, i64) -> bool| -> usize {
        ends.iter()
            .map(|(p, low, high)| (*low..*high).filter(|o| !read(*p, *o)).count())
            .sum()
    };
    let caught_up = Instant::now();
    let (reader_behind, group_behind) = loop {
        let behind = (
            unread(&|p, o| reads.lock().expect("reads").seen.contains_key(&(p, o))),
            unread(&|p, o| group.lock().expect("group reads").read.contains(&(p, o))),
        );
        if behind == (0, 0) || caught_up.elapsed() > CATCH_UP {
            break behind;
        }
        thread::sleep(Duration::from_millis(100));
    };
    println!(
        "  readers caught up with {ends:?} in {:?}: {reader_behind} and {group_behind} unread",
        caught_up.elapsed()
    );
    stop_reading.store(true, Ordering::SeqCst);
    reader.join().expect("reader thread");
    // A member's consumer closes (leaves the group) as its thread ends; a
    // client that lost its coordinator can wait on it for ever, so the run
    // waits a bounded time and then leaves it behind, reporting it.
    let closing = Instant::now();
    let mut members_stuck = 0;
    for (id, member) in members.into_iter().enumerate() {
        while !member.is_finished() && closing.elapsed() < CATCH_UP {
            thread::sleep(Duration::from_millis(100));
        }
        if member.is_finished() {
            member.join().expect("group member thread");
        } else {
            println!("  group member {id}: its consumer did not close in {CATCH_UP:?}");
            members_stuck += 1;
        }
    }

    // Everything healed: wait for every ISR to be whole again, then read.
    let (whole, _) = cluster.wait_for(1, FORMED, "every ISR whole", |v| {
        let (Some(isrs), Some(replicas)) = (v.isr.get(TOPIC), v.replicas.get(TOPIC)) else {
            return false;
        };
        isrs.iter().zip(replicas).all(|(isr, replicas)| {
            let mut all = replicas.clone();
            all.sort();
            *isr == all
        })
    });
    let total: i64 = watermarks(&cluster.bootstrap(), TOPIC)
        .iter()
        .map(|(_, low, high)| high - low)
        .sum();
    let read = consume_all(
        &cluster.bootstrap(),
        TOPIC,
        total as usize,
        Duration::from_secs(60),
    );
    let history = history.lock().expect("history");
    let reads = reads.lock().expect("reads");
    println!(
        "seed {seed}: {} acknowledged, {} failed, {} read back, {} read live",
        history.acked.len(),
        history.failed.len(),
        read.len(),
        reads.seen.len()
    );
    assert!(
        !history.acked.is_empty(),
        "the producer got nothing acknowledged"
    );

    if let Some(fatal) = &history.fatal {
        println!("  the producer turned fatal: {fatal}");
    }
    let mut anomalies = Anomalies {
        reader_behind,
        group_behind,
        members_stuck,
        producer_fatal: usize::from(history.fatal.is_some()),
        failed_sends: history.failed.len(),
        backwards: reads.backwards,
        skipped: reads.skipped,
        divergent_reads: reads.changed,
        ..Anomalies::default()
    };
    let mut at: HashMap<(i32, i64), String> = HashMap::new();
    let mut count: HashMap<String, usize> = HashMap::new();
    for c in &read {
        let value =
            String::from_utf8_lossy(c.record.value.as_deref().unwrap_or_default()).into_owned();
        *count.entry(value.clone()).or_default() += 1;
        at.insert((c.partition, c.offset), value);
    }
    anomalies.duplicated = count.values().filter(|n| **n > 1).count();
    let mut places: HashMap<&str, Vec<(i32, i64)>> = HashMap::new();
    for ((partition, offset), value) in &at {
        if count[value] > 1 {
            places
                .entry(value.as_str())
                .or_default()
                .push((*partition, *offset));
        }
    }
    let mut places: Vec<_> = places.into_iter().collect();
    places.sort();
    for (value, mut at) in places.into_iter().take(10) {
        at.sort();
        println!("  {value} read at (partition, offset) {at:?}");
    }
    for (value, partition, offset) in &history.acked {
        if !count.contains_key(value) {
            anomalies.lost += 1;
        } else if at.get(&(*partition, *offset)) != Some(value) {
            // Read back, but not where its acknowledgement said.
            anomalies.divergent_reads += 1;
        }
    }
    for (key, value) in &reads.seen {
        if at.get(key).is_some_and(|v| v != value) {
            anomalies.divergent_reads += 1;
        }
    }
    anomalies.failed_but_read = history
        .failed
        .iter()
        .filter(|(value, _)| count.contains_key(value))
        .count();
    let committed = committed_offsets(&cluster.bootstrap());
    let group = group.lock().expect("group reads");
    println!(
        "seed {seed}: the group read {} records, {} commits acknowledged ({} failed), committed {committed:?}",
        group.read.len(),
        group.commits,
        group.failed_commits
    );
    for (partition, acked) in &group.acked_commits {
        if committed.get(partition).copied().unwrap_or(-1) < *acked {
            println!("  partition {partition}: committed {acked} was acknowledged, the group now has {:?}", committed.get(partition));
            anomalies.commits_lost += 1;
        }
    }
    for (partition, end) in &committed {
        anomalies.group_skipped += (0..*end)
            .filter(|offset| !group.read.contains(&(*partition, *offset)))
            .count();
    }
    for (value, error) in history.failed.iter().take(5) {
        println!("  failed send {value}: {error}");
    }

    // The replicas hold the same batches: stop every broker cleanly and
    // compare their logs.
    thread::sleep(Duration::from_secs(2));
    for id in cluster.running() {
        cluster.stop(id);
    }
    for partition in 0..PARTITIONS {
        let logs: Vec<Vec<BatchId>> = whole.replicas[TOPIC][partition as usize]
            .iter()
            .map(|id| {
                batches(
                    &cluster
                        .node(*id)
                        .data_dir()
                        .join(format!("{TOPIC}-{partition}")),
                )
            })
            .collect();
        let shortest = logs.iter().map(Vec::len).min().unwrap_or(0);
        for i in 0..shortest {
            if logs.iter().any(|l| l[i] != logs[0][i]) {
                anomalies.divergent_replicas += 1;
            }
        }
        let lengths: Vec<usize> = logs.iter().map(Vec::len).collect();
        println!("  partition {partition}: batches per replica {lengths:?}");
    }
    // Checked here, with the cluster still up: its nodes' logs are printed
    // as it drops while the test panics.
    let quorum_kind = match quorum {
        Quorum::Static => "",
        Quorum::Dynamic => ", dynamic quorum",
    };
    println!("seed {seed} ({brokers} brokers{quorum_kind}): {anomalies:?}");
    assert_eq!(
        anomalies,
        Anomalies::default(),
        "seed {seed} ({rounds} rounds, {brokers} brokers) found anomalies; rerun with TARN_FAULT_SEEDS={seed} TARN_FAULT_ROUNDS={rounds}"
    );
}

/// Each partition's leader and ISR as a running broker sees them, for a
/// run's log (a partition left unwritable shows here first).
fn print_partitions(cluster: &Cluster) {
    let Some(id) = cluster.running().first().copied() else {
        return;
    };
    match cluster.view(id) {
        Ok(view) => {
            let leaders = view.leaders.get(TOPIC).cloned().unwrap_or_default();
            let isrs = view.isr.get(TOPIC).cloned().unwrap_or_default();
            for (partition, (leader, isr)) in leaders.iter().zip(&isrs).enumerate() {
                println!("  partition {partition}: leader {leader}, isr {isr:?} (seen by {id})");
            }
        }
        Err(e) => println!("  partitions: broker {id} could not say: {e}"),
    }
}

/// Fisher-Yates, from the seed.
fn shuffle(rng: &mut Rng, items: &mut [i32]) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Every node of `all` but `victim`, in the seed's order.
fn others_shuffled(rng: &mut Rng, all: &[i32], victim: i32) -> Vec<i32> {
    let mut others: Vec<i32> = all.iter().copied().filter(|id| *id != victim).collect();
    shuffle(rng, &mut others);
    others
}

/// The followers of the first partition `victim` leads, or, when it leads
/// none, every node of `fallback` but it.
fn followers_of(view: &View, victim: i32, fallback: &[i32]) -> Vec<i32> {
    let led = view.leaders[TOPIC].iter().position(|l| *l == victim);
    match led {
        Some(p) => view.replicas[TOPIC][p].clone(),
        None => fallback.to_vec(),
    }
    .into_iter()
    .filter(|id| *id != victim)
    .collect()
}

/// Applies one fault for `hold`, then undoes it; returns the broker hit.
/// `disks[i]` holds node `i + 1`'s data (none on a dynamic quorum).
fn inject(
    cluster: &mut Cluster,
    disks: &[SmallDisk],
    rng: &mut Rng,
    fault: Fault,
    hold: Duration,
) -> i32 {
    let running = cluster.running();
    let all: Vec<i32> = (1..=cluster.nodes.len() as i32).collect();
    let view = cluster.view(running[0]).expect("view");
    let victim = match fault {
        Fault::KillController => view.controller,
        Fault::KillLeader | Fault::StrandLeader | Fault::SplitLeader | Fault::CutLink => {
            let leaders = &view.leaders[TOPIC];
            leaders[rng.below(leaders.len() as u64) as usize]
        }
        Fault::Pause | Fault::Isolate | Fault::Bridge | Fault::FillDisk => {
            running[rng.below(running.len() as u64) as usize]
        }
        Fault::ChangeVoter => match rng.below(2) {
            0 => view.controller,
            _ => running[rng.below(running.len() as u64) as usize],
        },
    };
    let victim = if victim > 0 { victim } else { running[0] };
    match fault {
        Fault::KillLeader | Fault::KillController => {
            cluster.kill(victim);
            thread::sleep(hold);
            cluster.start_again(victim);
        }
        Fault::Pause => {
            cluster.pause(victim);
            thread::sleep(hold);
            cluster.resume(victim);
        }
        Fault::Isolate => {
            cluster.isolate(victim);
            thread::sleep(hold);
            cluster.heal();
        }
        Fault::SplitLeader => {
            // The victim and as many others as keep it a minority.
            let mut others = others_shuffled(rng, &all, victim);
            let mut minority = vec![victim];
            minority.extend(others.drain(..(all.len() - 1) / 2 - 1));
            println!("  split {minority:?} from {others:?}");
            cluster.partition(&[&minority, &others]);
            thread::sleep(hold);
            cluster.heal();
        }
        Fault::CutLink => {
            let followers = followers_of(&view, victim, &all);
            let follower = followers[rng.below(followers.len() as u64) as usize];
            println!("  cut {victim} from {follower}");
            cluster.cut_link(victim, follower);
            thread::sleep(hold);
            cluster.heal();
        }
        Fault::Bridge => {
            // The victim reaches both halves of the rest.
            let mut others = others_shuffled(rng, &all, victim);
            let right = others.split_off(others.len() / 2);
            println!("  {others:?} and {right:?} bridged by {victim}");
            cluster.partition(&[&others, &right]);
            thread::sleep(hold);
            cluster.heal();
        }
        Fault::ChangeVoter => {
            change_voter(cluster, victim, VoterChange::Remove);
            thread::sleep(hold);
            change_voter(cluster, victim, VoterChange::Add);
        }
        Fault::FillDisk => {
            let ballast = disks[victim as usize - 1].fill("ballast");
            let status = cluster.wait_exit(victim, FORMED);
            let logs = cluster.node(victim).logs();
            assert!(
                !status.success() && logs.contains("No space left on device"),
                "broker {victim} exited with {status}, not for its full disk: {logs}"
            );
            println!("  broker {victim} stopped for its full disk ({status})");
            std::fs::remove_file(&ballast).expect("remove the ballast");
            thread::sleep(hold);
            cluster.start_again(victim);
        }
        Fault::StrandLeader => {
            let followers = followers_of(&view, victim, &running);
            for f in &followers {
                cluster.pause(*f);
            }
            thread::sleep(hold);
            cluster.kill(victim);
            for f in &followers {
                cluster.resume(*f);
            }
            thread::sleep(hold);
            cluster.start_again(victim);
        }
    }
    victim
}

#[derive(Debug, Clone, Copy)]
enum VoterChange {
    Remove,
    Add,
}

/// Removes or adds voter `id`, asking another node (the request is
/// forwarded to the active controller), until it is done: a change that a
/// leader election interrupts is asked again, and one that an earlier ask
/// already made (VOTER_NOT_FOUND, DUPLICATE_VOTER) counts as done.
fn change_voter(cluster: &Cluster, id: i32, change: VoterChange) {
    let deadline = Instant::now() + FORMED;
    loop {
        let via = cluster
            .running()
            .into_iter()
            .find(|n| *n != id)
            .expect("another running node");
        let answer = match change {
            VoterChange::Remove => cluster.remove_voter(via, id),
            VoterChange::Add => cluster.add_voter(via, id),
        };
        match (change, &answer) {
            (_, Ok((0, _)))
            | (VoterChange::Remove, Ok((127, _)))
            | (VoterChange::Add, Ok((126, _))) => {
                println!("  {change:?} voter {id}: {answer:?}");
                return;
            }
            _ => println!("  {change:?} voter {id}, asked of {via}: {answer:?}; again"),
        }
        assert!(
            Instant::now() < deadline,
            "{change:?} voter {id} not done within {FORMED:?}: {answer:?}"
        );
        thread::sleep(Duration::from_millis(500));
    }
}

/// Produces numbered values, about a thousand a second, until `stop`,
/// never waiting for acknowledgements meanwhile (so a fault meets records
/// in flight on every partition), then waits for every outcome and
/// records it. The message timeout outlasts any fault, so a send fails
/// only when something is wrong.
fn produce(bootstrap: &str, stop: &AtomicBool, history: &Mutex<History>) {
    let mut producer = TestProducer::new(
        bootstrap,
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("message.timeout.ms", "120000"),
        ],
    );
    let mut sent = 0usize;
    while !stop.load(Ordering::SeqCst) {
        for _ in 0..10 {
            let record: Outgoing = Record::kv(&format!("k{sent}"), &format!("v{sent}")).into();
            if let Err(e) = producer.try_send(TOPIC, &record) {
                history.lock().expect("history").fatal = Some(e);
                break;
            }
            sent += 1;
        }
        if history.lock().expect("history").fatal.is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let results = producer.flush(Duration::from_secs(150));
    let mut history = history.lock().expect("history");
    for (n, result) in results.iter().enumerate() {
        match result {
            Ok(d) => history.acked.push((format!("v{n}"), d.partition, d.offset)),
            Err(e) => history.failed.push((format!("v{n}"), e.clone())),
        }
    }
}

/// A consumer of `group` that commits only when told, from the earliest
/// offset, polling briskly; with librdkafka's log printed as member `id`
/// when the environment variable `debug_var` names debug contexts.
fn reader(bootstrap: &str, group: &str, id: usize, debug_var: &str) -> BaseConsumer<Member> {
    let mut config = base_config(bootstrap);
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100");
    let debug = std::env::var(debug_var).ok();
    if let Some(contexts) = &debug {
        config
            .set("debug", contexts)
            .set_log_level(RDKafkaLogLevel::Debug);
    }
    let member = Member {
        id,
        verbose: debug.is_some(),
    };
    config
        .create_with_context(member)
        .unwrap_or_else(|e| panic!("create reader {id}: {e}"))
}

/// Reads every partition from the start until `stop`, checking that each
/// partition's offsets go up one by one.
fn read_live(bootstrap: &str, stop: &AtomicBool, reads: &Mutex<Reads>) {
    // Its librdkafka log, when `TARN_FAULT_READER_DEBUG` names debug
    // contexts (`fetch,broker`, say), to diagnose a reader that stalls.
    let consumer = reader(
        bootstrap,
        "tarn-e2e-unused-group",
        MEMBERS,
        "TARN_FAULT_READER_DEBUG",
    );
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        assignment
            .add_partition_offset(TOPIC, partition, Offset::Beginning)
            .expect("build assignment");
    }
    consumer.assign(&assignment).expect("assign");
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        // Errors while brokers come and go are the client's to retry.
        let Ok(message) = message else {
            continue;
        };
        let (partition, offset) = (message.partition(), message.offset());
        let value = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
        let mut reads = reads.lock().expect("reads");
        let previous = last.get(&partition).copied().unwrap_or(-1);
        if offset <= previous {
            reads.backwards += 1;
        } else if offset > previous + 1 {
            reads.skipped += (offset - previous - 1) as usize;
        }
        last.insert(partition, offset.max(previous));
        match reads.seen.get(&(partition, offset)) {
            Some(v) if *v != value => reads.changed += 1,
            Some(_) => {}
            None => {
                reads.seen.insert((partition, offset), value);
            }
        }
    }
}

/// A group member's librdkafka log (the live reader's is member
/// [`MEMBERS`]), printed only when `TARN_FAULT_CLIENT_DEBUG` (or
/// `TARN_FAULT_READER_DEBUG`) names debug contexts (`cgrp,protocol`, say),
/// to diagnose a client that wedges.
struct Member {
    id: usize,
    verbose: bool,
}

impl ClientContext for Member {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        // librdkafka logs from its own threads, which the test harness
        // does not capture: say nothing unless asked to.
        if self.verbose {
            eprintln!("member {} {level:?} {fac}: {log_message}", self.id);
        }
    }
}

impl ConsumerContext for Member {}

/// One member of the group: reads what it is assigned and commits its
/// positions every [`COMMIT_EVERY`] records, synchronously, so that the
/// outcome of each commit is known, until `stop` (then it leaves without a
/// last commit). librdkafka 2.12 has been seen to wait forever in a
/// synchronous commit after its coordinator was killed; the run then
/// leaves this thread behind and counts the member as stuck.
fn read_in_group(bootstrap: &str, stop: &AtomicBool, group: &Mutex<GroupReads>, id: usize) {
    let consumer = reader(bootstrap, GROUP, id, "TARN_FAULT_CLIENT_DEBUG");
    consumer.subscribe(&[TOPIC]).expect("subscribe");
    let mut since_commit = 0;
    while !stop.load(Ordering::SeqCst) {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        // Errors while brokers come and go are the client's to retry.
        let Ok(message) = message else {
            continue;
        };
        let key = (message.partition(), message.offset());
        group.lock().expect("group reads").read.insert(key);
        since_commit += 1;
        if since_commit < COMMIT_EVERY {
            continue;
        }
        since_commit = 0;
        let Ok(positions) = consumer.position() else {
            continue;
        };
        let outcome = consumer.commit(&positions, CommitMode::Sync);
        let mut group = group.lock().expect("group reads");
        match outcome {
            Ok(()) => {
                group.commits += 1;
                for element in positions.elements() {
                    if let Offset::Offset(offset) = element.offset() {
                        let acked = group
                            .acked_commits
                            .entry(element.partition())
                            .or_insert(offset);
                        *acked = (*acked).max(offset);
                    }
                }
            }
            // A rebalance or a coordinator moving: the commit is not
            // acknowledged, so nothing is owed for it.
            Err(_) => group.failed_commits += 1,
        }
    }
}

/// The group's committed offset of every partition (absent: none).
fn committed_offsets(bootstrap: &str) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = consumer(bootstrap, &[("group.id", GROUP)]);
    let mut partitions = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        partitions.add_partition(TOPIC, partition);
    }
    let committed = consumer
        .committed_offsets(partitions, Duration::from_secs(60))
        .expect("the group's committed offsets");
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(offset) => Some((e.partition(), offset)),
            _ => None,
        })
        .collect()
}

/// A batch as the replicas must agree on it.
#[derive(Debug, PartialEq, Eq)]
struct BatchId {
    base_offset: i64,
    last_offset: i64,
    leader_epoch: i32,
    crc: u32,
}

/// Every batch in a partition directory's segments, in offset order.
fn batches(dir: &Path) -> Vec<BatchId> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("read directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for path in names {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        for item in BatchIter::new(&bytes) {
            let (_, header) = item.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.push(BatchId {
                base_offset: header.base_offset,
                last_offset: header.last_offset(),
                leader_epoch: header.partition_leader_epoch,
                crc: header.crc,
            });
        }
    }
    out
}
