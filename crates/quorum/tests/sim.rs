//! Deterministic simulation of a 3- or 5-node quorum over the in-process
//! network, on simulated disks, on tokio's paused clock.
//!
//! Faults: message loss, delay and so reordering, partitions, and crashes
//! (power cut with torn tails, then restart), while a client proposes; in
//! a second test also voters removed from and added back to the running
//! quorum (KIP-853), the last removed ones added back once the faults heal.
//! Checks: leaders of one term elected in openraft's order (see
//! `watch_leaders`); a read barrier never lands below an entry
//! acknowledged before it began; an entry once applied at an index
//! is the only entry ever applied there, on any node (so acknowledged
//! commits are never lost or changed); after the faults heal a new
//! proposal commits within bounded time and every node applies the same
//! sequence, holding every acknowledged entry.
//!
//! `TARN_SIM_SEED=<n>` replays one seed; `TARN_SIM_SEEDS=<n>` runs seeds
//! `0..n` (20 by default), or `m..m+n` with `TARN_SIM_SEEDS_FROM=<m>`
//! (the voter changes then also run the seeds that once found a fault). A
//! seed fixes the start order, the fault schedule, openraft's election
//! jitter and the network's draws; what
//! still varies between runs of a seed is the order in which those draws
//! meet concurrent messages: runs with one kind of fault replay exactly,
//! mixes of kinds (e.g. loss with crashes) do not always; the source is
//! not yet tracked down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tarn_quorum::sim::{Faults, SimNetwork};
use tarn_quorum::{ApplyError, Committed, NodeId, Quorum, QuorumConfig, QuorumError, StateMachine};
use tarn_storage::sim::SimFileSystem;
use tarn_storage::FileSystem;
use tokio::time::{sleep, timeout, Instant};

const DEFAULT_SEEDS: u64 = 20;
const FAULT_STEPS: u64 = 12;
const LIVENESS_DEADLINE: Duration = Duration::from_secs(30);
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Enough for an election (at most twice the election timeout) and a
/// client that first waits out a proposal to a cut-off node.
const MAJORITY_MS_TO_COMMIT: u64 = 6_000;

/// What every node of one run shares, to check one against another.
#[derive(Default)]
struct Shared {
    /// index -> the entry applied there, by whichever node applied first.
    history: BTreeMap<u64, Bytes>,
    /// term -> the first node that was leader in it.
    leaders: BTreeMap<u64, NodeId>,
    /// term -> every node that led in it, in the order they were seen.
    elected: BTreeMap<u64, Vec<NodeId>>,
    acked: Vec<(Committed, Bytes)>,
    violations: Vec<String>,
    /// The faults injected, in order, to report and to compare replays.
    faults: Vec<String>,
    /// The longest time (simulated, ms) the faults left a majority of
    /// nodes up and connected to each other: a run with none commits
    /// nothing until they heal, and rightly so.
    longest_majority_ms: u64,
}

type SharedRef = Arc<Mutex<Shared>>;

fn check_history(shared: &SharedRef, node: NodeId, index: u64, entry: &Bytes) {
    let mut s = shared.lock().unwrap();
    match s.history.get(&index) {
        Some(seen) if seen != entry => {
            let msg =
                format!("node {node} applied {entry:?} at {index}, where {seen:?} was applied");
            s.violations.push(msg);
        }
        Some(_) => {}
        None => {
            s.history.insert(index, entry.clone());
        }
    }
}

/// The state machine of the test: the list of applied entries.
struct Recorder {
    node: NodeId,
    shared: SharedRef,
    applied: Arc<Mutex<Vec<(u64, Bytes)>>>,
}

impl StateMachine for Recorder {
    fn apply(&mut self, committed: Committed, entry: &Bytes) -> Result<(), ApplyError> {
        let mut applied = self.applied.lock().unwrap();
        if let Some((last, _)) = applied.last() {
            if *last >= committed.index {
                return Err(format!("applied {} after {last}", committed.index).into());
            }
        }
        check_history(&self.shared, self.node, committed.index, entry);
        applied.push((committed.index, entry.clone()));
        Ok(())
    }

    fn snapshot(&self) -> Bytes {
        let applied = self.applied.lock().unwrap();
        let image: Vec<(u64, Vec<u8>)> = applied.iter().map(|(i, b)| (*i, b.to_vec())).collect();
        Bytes::from(serde_json::to_vec(&image).unwrap())
    }

    fn install_snapshot(&mut self, last: Committed, image: &Bytes) -> Result<(), ApplyError> {
        let image: Vec<(u64, Vec<u8>)> = serde_json::from_slice(image)?;
        let mut applied = self.applied.lock().unwrap();
        applied.clear();
        for (index, entry) in image {
            if index > last.index {
                return Err(format!("snapshot up to {} holds index {index}", last.index).into());
            }
            let entry = Bytes::from(entry);
            check_history(&self.shared, self.node, index, &entry);
            applied.push((index, entry));
        }
        Ok(())
    }
}

struct Node {
    fs: Arc<SimFileSystem>,
    quorum: Option<Quorum>,
    applied: Arc<Mutex<Vec<(u64, Bytes)>>>,
    incarnation: u64,
}

/// The fault schedule's own generator, apart from the network's, so the
/// schedule is the same whatever the messages did.
struct Rng(u64);

impl Rng {
    /// A number in `0..=max` (xorshift64*).
    fn next(&mut self, max: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % (max + 1)
    }
}

struct Cluster {
    seed: u64,
    rng: Rng,
    ids: BTreeSet<NodeId>,
    net: Arc<SimNetwork>,
    nodes: BTreeMap<NodeId, Node>,
    shared: SharedRef,
}

impl Cluster {
    fn config(&self, id: NodeId, incarnation: u64) -> QuorumConfig {
        let voters = self.ids.iter().map(|i| (*i, format!("node-{i}"))).collect();
        let mut config = QuorumConfig::new(id, voters, PathBuf::from("/data/__cluster_metadata-0"));
        config.snapshot_every = 16;
        config.rng_seed = Some(self.seed.wrapping_mul(1_000_003) ^ (id << 32) ^ incarnation);
        config
    }

    async fn start(&mut self, id: NodeId) {
        let incarnation = self.nodes[&id].incarnation + 1;
        let config = self.config(id, incarnation);
        let node = self.nodes.get_mut(&id).unwrap();
        node.incarnation = incarnation;
        node.applied = Arc::new(Mutex::new(Vec::new()));
        let machine = Recorder {
            node: id,
            shared: self.shared.clone(),
            applied: node.applied.clone(),
        };
        let fs: Arc<dyn FileSystem> = node.fs.clone();
        let quorum = Quorum::start(config, fs, self.net.transport(id), Box::new(machine))
            .await
            .unwrap_or_else(|e| panic!("seed {}: start node {id}: {e}", self.seed));
        watch_leaders(&quorum, self.shared.clone());
        self.net.register(quorum.clone());
        node.quorum = Some(quorum);
    }

    /// The machine loses power: nothing it does afterwards reaches the
    /// disk, and what was not fsynced is lost or torn.
    async fn crash(&mut self, id: NodeId) {
        self.net.unregister(id);
        let node = self.nodes.get_mut(&id).unwrap();
        let Some(quorum) = node.quorum.take() else {
            return;
        };
        node.fs.halt();
        if let Err(e) = quorum.shutdown().await {
            // Writes fail once the disk is gone; that is the crash.
            eprintln!("seed {}: node {id} stopped with {e}", self.seed);
        }
        node.fs.power_cut(true);
        node.fs.restart();
    }

    fn live(&self) -> Vec<Quorum> {
        self.nodes
            .values()
            .filter_map(|n| n.quorum.clone())
            .collect()
    }

    /// Whether a majority of the nodes is up and every two of them can
    /// reach each other.
    fn majority_connected(&self) -> bool {
        let up: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.quorum.is_some())
            .map(|(id, _)| *id)
            .collect();
        let majority = self.ids.len() / 2 + 1;
        (0u32..1 << up.len()).any(|subset| {
            let members: Vec<NodeId> = (0..up.len())
                .filter(|i| subset & (1 << i) != 0)
                .map(|i| up[i])
                .collect();
            members.len() >= majority
                && members
                    .iter()
                    .all(|a| members.iter().all(|b| a == b || !self.net.is_cut(*a, *b)))
        })
    }

    fn leader(&self) -> Option<Quorum> {
        self.live()
            .into_iter()
            .find(|q| q.status().borrow().is_leader)
    }

    /// Asks the leader, if any, to remove `id` from the voters if it is
    /// one (while more than two remain; as a learner or altogether), else
    /// to add it back; the outcome
    /// may be an error or a timeout (a fault may stall the change). What
    /// was asked, and how it ended, for the fault log.
    async fn change_voter(&mut self, id: NodeId) -> String {
        let Some(leader) = self.leader() else {
            return format!("no leader to change voter {id}");
        };
        let voters = leader.status().borrow().voters.clone();
        let (what, outcome) = if voters.contains(&id) && voters.len() > 2 {
            // Half the removed voters stay learners (a controller that is
            // also a broker), replicated to until added back.
            let keep = (id + voters.len() as u64).is_multiple_of(2);
            let removed = leader.remove_voter(id, None, keep);
            let what = match keep {
                true => "remove (kept as a learner)",
                false => "remove",
            };
            (what, timeout(VOTER_CHANGE_TIMEOUT, removed).await)
        } else if !voters.contains(&id) {
            let address = format!("node-{id}");
            let added = leader.add_voter(id, &address, None, VOTER_CHANGE_TIMEOUT);
            ("add", timeout(VOTER_CHANGE_TIMEOUT * 2, added).await)
        } else {
            return format!("keep voter {id}");
        };
        let outcome = match outcome {
            Ok(Ok(())) => "done".to_owned(),
            Ok(Err(e)) => format!("refused: {e}"),
            Err(_) => "timed out".to_owned(),
        };
        format!("{what} voter {id}: {outcome}")
    }
}

/// How long the simulation lets one voter change take.
const VOTER_CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Records who led each term, as each node reports it. openraft's leader
/// ids are (term, node id) (its default, `leader_id_adv`): unlike Kafka's
/// epochs, a term may have several leaders one after another, each with a
/// greater node id than the last (a voter grants only a greater vote, and
/// two majorities meet). What must never be seen is a node elected in a
/// term after one with a greater id; an entry applied differently is
/// checked apart (`check_history`).
fn watch_leaders(quorum: &Quorum, shared: SharedRef) {
    let mut status = quorum.status();
    tokio::spawn(async move {
        loop {
            let s = status.borrow_and_update().clone();
            if s.is_leader {
                let mut shared = shared.lock().unwrap();
                shared.leaders.entry(s.term).or_insert(s.node_id);
                let elected = shared.elected.entry(s.term).or_default();
                if !elected.contains(&s.node_id) {
                    let greater = elected.iter().find(|id| **id > s.node_id).copied();
                    elected.push(s.node_id);
                    if let Some(greater) = greater {
                        let msg = format!(
                            "term {}: {} elected after {greater}, whose leader id is greater",
                            s.term, s.node_id
                        );
                        shared.violations.push(msg);
                    }
                }
            }
            if !s.running || status.changed().await.is_err() {
                break;
            }
        }
    });
}

/// Proposes entries one after another, following NotLeader hints.
async fn client(cluster: Arc<tokio::sync::Mutex<Cluster>>, stop: Arc<Mutex<bool>>, seed: u64) {
    let mut k = 0u64;
    let mut target: Option<NodeId> = None;
    while !*stop.lock().unwrap() {
        let quorum = {
            let c = cluster.lock().await;
            let live = c.live();
            let pick = c.net.random(live.len().max(1) as u64 - 1) as usize;
            target
                .and_then(|t| live.iter().find(|q| q.node_id() == t).cloned())
                .or_else(|| live.get(pick).cloned())
        };
        let Some(quorum) = quorum else {
            sleep(Duration::from_millis(100)).await;
            continue;
        };
        let entry = Bytes::from(format!("seed {seed} entry {k}"));
        k += 1;
        match timeout(PROPOSE_TIMEOUT, quorum.propose(entry.clone())).await {
            Ok(Ok(committed)) => {
                let c = cluster.lock().await;
                c.shared.lock().unwrap().acked.push((committed, entry));
                target = Some(quorum.node_id());
            }
            Ok(Err(QuorumError::NotLeader { leader })) => target = leader,
            Ok(Err(_)) | Err(_) => target = None,
        }
        read_barrier(&cluster, &quorum).await;
        sleep(Duration::from_millis(50)).await;
    }
}

/// A read barrier on `quorum` that succeeds must not land below any entry
/// acknowledged before it began: what a controller plans after it must
/// see every change the cluster acknowledged.
async fn read_barrier(cluster: &Arc<tokio::sync::Mutex<Cluster>>, quorum: &Quorum) {
    let acknowledged = {
        let c = cluster.lock().await;
        let shared = c.shared.lock().unwrap();
        shared.acked.iter().map(|(c, _)| c.index).max()
    };
    let Ok(Ok(barrier)) = timeout(PROPOSE_TIMEOUT, quorum.read_barrier()).await else {
        return;
    };
    if let Some(acknowledged) = acknowledged.filter(|a| barrier < *a) {
        let c = cluster.lock().await;
        c.shared.lock().unwrap().violations.push(format!(
            "node {}: read barrier at {barrier}, below entry {acknowledged} acknowledged before it",
            quorum.node_id()
        ));
    }
}

async fn inject_faults(cluster: &Arc<tokio::sync::Mutex<Cluster>>, voter_changes: bool) {
    let mut majority_ms = 0;
    for _ in 0..FAULT_STEPS {
        let pause = {
            let mut c = cluster.lock().await;
            let all = c.ids.clone();
            match c.rng.next(if voter_changes { 7 } else { 5 }) {
                6 | 7 => {
                    let pick = c.rng.next(all.len() as u64 - 1) as usize;
                    let id = *all.iter().nth(pick).unwrap();
                    let what = c.change_voter(id).await;
                    c.shared.lock().unwrap().faults.push(what);
                }
                0 => {
                    let size = 1 + c.rng.next((all.len() as u64 - 1) / 2);
                    let mut side = BTreeSet::new();
                    while (side.len() as u64) < size {
                        let pick = c.rng.next(all.len() as u64 - 1) as usize;
                        side.insert(*all.iter().nth(pick).unwrap());
                    }
                    c.net.partition(&side, &all);
                    c.shared
                        .lock()
                        .unwrap()
                        .faults
                        .push(format!("partition {side:?}"));
                }
                1 => {
                    c.net.heal();
                    c.shared.lock().unwrap().faults.push("heal".into());
                }
                2 | 3 => {
                    let pick = c.rng.next(all.len() as u64 - 1) as usize;
                    let id = *all.iter().nth(pick).unwrap();
                    let up = c.nodes[&id].quorum.is_some();
                    if up {
                        c.crash(id).await;
                    } else {
                        c.start(id).await;
                    }
                    let what = if up { "crash" } else { "restart" };
                    c.shared.lock().unwrap().faults.push(format!("{what} {id}"));
                }
                4 => {
                    let faults = Faults {
                        loss_per_mille: c.rng.next(200),
                        delay_ms_min: 0,
                        delay_ms_max: c.rng.next(80),
                    };
                    c.net.set_faults(faults);
                    c.shared.lock().unwrap().faults.push(format!("{faults:?}"));
                }
                _ => {
                    c.net.set_faults(Faults::NONE);
                    c.shared
                        .lock()
                        .unwrap()
                        .faults
                        .push("no loss or delay".into());
                }
            }
            500 + c.rng.next(2500)
        };
        {
            let c = cluster.lock().await;
            majority_ms = if c.majority_connected() {
                majority_ms + pause
            } else {
                0
            };
            let mut shared = c.shared.lock().unwrap();
            shared.longest_majority_ms = shared.longest_majority_ms.max(majority_ms);
        }
        sleep(Duration::from_millis(pause)).await;
    }
}

/// After the faults: a proposal commits within the deadline.
async fn propose_after_heal(cluster: &Arc<tokio::sync::Mutex<Cluster>>, seed: u64) -> Committed {
    let deadline = Instant::now() + LIVENESS_DEADLINE;
    let entry = Bytes::from(format!("seed {seed} final"));
    while Instant::now() < deadline {
        let leader = cluster.lock().await.leader();
        if let Some(leader) = leader {
            if let Ok(Ok(committed)) = timeout(PROPOSE_TIMEOUT, leader.propose(entry.clone())).await
            {
                let c = cluster.lock().await;
                c.shared.lock().unwrap().acked.push((committed, entry));
                return committed;
            }
        }
        sleep(Duration::from_millis(100)).await;
    }
    panic!("seed {seed}: nothing committed within {LIVENESS_DEADLINE:?} after the faults healed");
}

/// After the faults: every node is a voter again, so that every node
/// must apply the same log.
async fn add_back_every_voter(cluster: &Arc<tokio::sync::Mutex<Cluster>>, seed: u64) {
    let deadline = Instant::now() + LIVENESS_DEADLINE * 2;
    loop {
        let mut c = cluster.lock().await;
        // Only a leader a quorum acknowledged lately: one cut off earlier
        // may still believe it leads, with an older membership.
        let status = c
            .leader()
            .map(|l| l.status().borrow().clone())
            .filter(|s| s.leads_within(Duration::from_secs(1)));
        // Every node a voter, and no change left half done (a joint
        // configuration's voters are both sets).
        let replicated = |s: &tarn_quorum::QuorumStatus| {
            s.voters == c.ids
                && *s.next_voters == c.ids
                && c.ids
                    .iter()
                    .all(|id| *id == s.node_id || s.matched.get(id).copied().flatten().is_some())
        };
        if status.as_ref().is_some_and(replicated) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: the voters are still {:?} after the faults healed; faults: {:?}",
            status.map(|s| s.voters),
            c.shared.lock().unwrap().faults
        );
        if let Some(status) = status {
            let missing = c.ids.difference(&status.voters).next().copied();
            if let Some(id) = missing {
                let what = c.change_voter(id).await;
                c.shared
                    .lock()
                    .unwrap()
                    .faults
                    .push(format!("healed: {what}"));
            }
        }
        drop(c);
        sleep(Duration::from_millis(200)).await;
    }
}

/// Prints how to replay the seed of a failing run.
struct ReplayHint(u64);

impl Drop for ReplayHint {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "failing seed; replay with: TARN_SIM_SEED={} cargo test -p tarn-quorum --test sim",
                self.0
            );
        }
    }
}

/// What a run ended with, to check that a seed replays.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    acked: Vec<(Committed, Bytes)>,
    leaders: BTreeMap<u64, NodeId>,
    faults: Vec<String>,
    longest_majority_ms: u64,
}

async fn run(seed: u64, voter_changes: bool) -> Outcome {
    let n: u64 = if seed.is_multiple_of(2) { 3 } else { 5 };
    let ids: BTreeSet<NodeId> = (1..=n).collect();
    let nodes = ids
        .iter()
        .map(|id| {
            let node = Node {
                fs: Arc::new(SimFileSystem::new(seed ^ (*id << 40))),
                quorum: None,
                applied: Arc::default(),
                incarnation: 0,
            };
            (*id, node)
        })
        .collect();
    let mut cluster = Cluster {
        seed,
        ids: ids.clone(),
        net: SimNetwork::new(seed),
        rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        nodes,
        shared: Arc::default(),
    };
    // Start in a seeded order: bootstrap must not depend on it.
    let mut order: Vec<NodeId> = ids.iter().copied().collect();
    let shift = cluster.rng.next(n - 1) as usize;
    order.rotate_left(shift);
    for id in order {
        cluster.start(id).await;
        sleep(Duration::from_millis(cluster.rng.next(1500))).await;
    }
    let cluster = Arc::new(tokio::sync::Mutex::new(cluster));
    let stop = Arc::new(Mutex::new(false));
    let client = tokio::spawn(client(cluster.clone(), stop.clone(), seed));
    inject_faults(&cluster, voter_changes).await;

    {
        let mut c = cluster.lock().await;
        c.net.heal();
        c.net.set_faults(Faults::NONE);
        for id in c.ids.clone() {
            if c.nodes[&id].quorum.is_none() {
                c.start(id).await;
            }
        }
    }
    *stop.lock().unwrap() = true;
    client.await.unwrap();
    if voter_changes {
        add_back_every_voter(&cluster, seed).await;
    }
    let last = propose_after_heal(&cluster, seed).await;

    // Every node catches up with the last commit.
    let c = cluster.lock().await;
    for quorum in c.live() {
        let mut status = quorum.status();
        let caught_up = status.wait_for(|s| s.applied_index >= Some(last.index));
        if timeout(LIVENESS_DEADLINE, caught_up).await.is_err() {
            panic!(
                "seed {seed}: node {} did not apply {}: {:?}; faults: {:?}",
                quorum.node_id(),
                last.index,
                quorum.status().borrow().clone(),
                c.shared.lock().unwrap().faults
            );
        }
    }
    let outcome = check(&c, seed);
    for quorum in c.live() {
        quorum.shutdown().await.unwrap();
    }
    outcome
}

/// The safety checks at the end of a run.
fn check(c: &Cluster, seed: u64) -> Outcome {
    let shared = c.shared.lock().unwrap();
    assert!(
        shared.violations.is_empty(),
        "seed {seed}: {:#?}\nfaults: {:?}",
        shared.violations.iter().take(5).collect::<Vec<_>>(),
        shared.faults
    );
    let reference: Vec<(u64, Bytes)> = c.nodes[&1].applied.lock().unwrap().clone();
    for (id, node) in &c.nodes {
        let applied = node.applied.lock().unwrap();
        assert_eq!(
            *applied, reference,
            "seed {seed}: node {id} applied another sequence"
        );
    }
    let applied: BTreeMap<u64, Bytes> = reference.into_iter().collect();
    for (committed, entry) in &shared.acked {
        assert_eq!(
            applied.get(&committed.index),
            Some(entry),
            "seed {seed}: acknowledged entry at {} lost or changed",
            committed.index
        );
    }
    Outcome {
        acked: shared.acked.clone(),
        leaders: shared.leaders.clone(),
        faults: shared.faults.clone(),
        longest_majority_ms: shared.longest_majority_ms,
    }
}

fn run_seed(seed: u64) -> Outcome {
    run_seed_with(seed, false)
}

fn run_seed_with(seed: u64, voter_changes: bool) -> Outcome {
    let _hint = ReplayHint(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(run(seed, voter_changes))
}

fn seeds() -> Vec<u64> {
    tarn_storage::sim::seeds_from_env("TARN_SIM", DEFAULT_SEEDS, &[])
}

/// The voter changes' seeds, with those that once found a fault, run
/// every time: 1979 a change whose leader was replaced between its two
/// entries, which left the quorum joint for good.
fn voter_change_seeds() -> Vec<u64> {
    tarn_storage::sim::seeds_from_env("TARN_SIM", DEFAULT_SEEDS, &[1979])
}

#[test]
fn raft_stays_safe_and_live_under_faults() {
    for seed in seeds() {
        let started = std::time::Instant::now();
        let outcome = run_seed(seed);
        eprintln!(
            "seed {seed}: {} acknowledged, {} terms with a leader, a connected majority for {} ms \
             at most, {:?}; faults: {:?}",
            outcome.acked.len(),
            outcome.leaders.len(),
            outcome.longest_majority_ms,
            started.elapsed(),
            outcome.faults,
        );
        // The last acknowledgement is the proposal after the faults heal.
        // Before it, a run whose faults left a majority connected long
        // enough to elect a leader and commit must have committed.
        assert!(
            outcome.acked.len() > 1 || outcome.longest_majority_ms < MAJORITY_MS_TO_COMMIT,
            "seed {seed}: nothing committed while a majority was connected for {} ms",
            outcome.longest_majority_ms
        );
    }
}

/// Voters removed and added back while the faults go on: no acknowledged
/// entry is lost or changed, no two nodes apply different entries at an
/// index, and once the faults heal and every node is a voter again, all
/// apply the same log. (Liveness during the faults is not asserted: a
/// change may leave two voters, which then need each other.)
#[test]
fn voter_changes_under_faults_stay_safe() {
    for seed in voter_change_seeds() {
        let started = std::time::Instant::now();
        let outcome = run_seed_with(seed, true);
        let changes: Vec<&String> = outcome
            .faults
            .iter()
            .filter(|f| f.contains("voter"))
            .collect();
        eprintln!(
            "seed {seed}: {} acknowledged, {:?}; voter changes: {changes:?}",
            outcome.acked.len(),
            started.elapsed(),
        );
    }
}

/// A seed replays its start order and fault schedule exactly. The
/// interleaving of messages does not yet replay bit for bit (see the
/// crate's report), so neither do the acknowledged indexes.
#[test]
fn the_fault_schedule_of_a_seed_replays() {
    let seed = 7;
    let first = run_seed(seed);
    let second = run_seed(seed);
    assert_eq!(first.faults, second.faults);
}
