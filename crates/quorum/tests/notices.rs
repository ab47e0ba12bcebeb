//! How a leader tells followers what committed: a commit notice (an
//! AppendEntries with no entries) waits briefly for the next entries to
//! carry it, so one change at a time costs each follower one AppendEntries
//! rather than two; a commit with nothing after it still reaches every
//! follower soon after; and while a caller awaits the followers
//! (`followers_awaited`), no notice waits.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tarn_quorum::sim::SimNetwork;
use tarn_quorum::{
    ApplyError, Committed, NodeId, Quorum, QuorumConfig, RpcKind, StateMachine, Transport,
    TransportError,
};
use tarn_storage::sim::SimFileSystem;
use tarn_storage::FileSystem;
use tokio::time::Instant;

/// The indexes a node applied.
#[derive(Default, Clone)]
struct Applied(Arc<Mutex<Vec<u64>>>);

impl Applied {
    fn has(&self, index: u64) -> bool {
        self.0.lock().unwrap().contains(&index)
    }
}

impl StateMachine for Applied {
    fn apply(&mut self, committed: Committed, _entry: &Bytes) -> Result<(), ApplyError> {
        self.0.lock().unwrap().push(committed.index);
        Ok(())
    }
    fn snapshot(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(&*self.0.lock().unwrap()).unwrap())
    }
    fn install_snapshot(&mut self, _last: Committed, image: &Bytes) -> Result<(), ApplyError> {
        *self.0.lock().unwrap() = serde_json::from_slice(image)?;
        Ok(())
    }
}

/// A node's transport that counts the AppendEntries it sends.
struct Counting {
    inner: Arc<dyn Transport>,
    appends: Arc<AtomicU64>,
}

impl Transport for Counting {
    fn call(
        &self,
        target: NodeId,
        kind: RpcKind,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, TransportError>> {
        if kind == RpcKind::AppendEntries {
            self.appends.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.call(target, kind, body)
    }

    fn learn(&self, target: NodeId, address: &str, directory_id: Option<&str>) {
        self.inner.learn(target, address, directory_id);
    }
}

struct Node {
    quorum: Quorum,
    applied: Applied,
}

/// Three voters on one simulated network, once one of them leads; and
/// the AppendEntries they have sent, all counted together.
async fn three_nodes() -> (BTreeMap<NodeId, Node>, Arc<AtomicU64>) {
    let net = SimNetwork::new(7);
    let appends = Arc::new(AtomicU64::new(0));
    let voters: BTreeMap<NodeId, String> = (1..=3).map(|i| (i, format!("node-{i}"))).collect();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let mut config = QuorumConfig::new(
            id,
            voters.clone(),
            PathBuf::from("/data/__cluster_metadata-0"),
        );
        config.rng_seed = Some(id);
        let fs: Arc<dyn FileSystem> = Arc::new(SimFileSystem::new(id));
        let transport = Arc::new(Counting {
            inner: net.transport(id),
            appends: appends.clone(),
        });
        let applied = Applied::default();
        let quorum = Quorum::start(config, fs, transport, Box::new(applied.clone()))
            .await
            .unwrap();
        net.register(quorum.clone());
        nodes.insert(id, Node { quorum, applied });
    }
    (nodes, appends)
}

/// The leader, once there is one, and the other nodes' ids.
async fn leader(nodes: &BTreeMap<NodeId, Node>) -> (Quorum, Vec<NodeId>) {
    loop {
        for (id, node) in nodes {
            if node.quorum.status().borrow().is_leader {
                let followers = nodes.keys().copied().filter(|f| f != id).collect();
                return (node.quorum.clone(), followers);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long after now every follower has applied `index`.
async fn applied_by_followers(
    nodes: &BTreeMap<NodeId, Node>,
    followers: &[NodeId],
    index: u64,
) -> Duration {
    let start = Instant::now();
    while !followers.iter().all(|f| nodes[f].applied.has(index)) {
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    start.elapsed()
}

/// Proposes change `i` and checks every follower applied it within
/// `within` of its commit.
async fn change_applied_within(
    nodes: &BTreeMap<NodeId, Node>,
    leader: &Quorum,
    followers: &[NodeId],
    i: u32,
    within: Duration,
) {
    let committed = leader
        .propose(Bytes::from(format!("change {i}")))
        .await
        .unwrap();
    let took = applied_by_followers(nodes, followers, committed.index).await;
    assert!(
        took <= within,
        "the followers applied entry {} {took:?} after it committed",
        committed.index
    );
}

async fn shutdown(nodes: BTreeMap<NodeId, Node>) {
    for node in nodes.into_values() {
        node.quorum.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn one_change_at_a_time_costs_each_follower_one_append_entries() {
    let (nodes, appends) = three_nodes().await;
    let (leader, followers) = leader(&nodes).await;
    let warm = leader.propose(Bytes::from("warm-up")).await.unwrap();
    applied_by_followers(&nodes, &followers, warm.index).await;

    let before = appends.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut last = warm;
    for i in 0..20 {
        last = leader
            .propose(Bytes::from(format!("change {i}")))
            .await
            .unwrap();
    }
    let sent = appends.load(Ordering::Relaxed) - before;
    // The leader's heartbeats (every quarter of the election timeout)
    // are AppendEntries too.
    let heartbeats = 2 * (started.elapsed().as_millis() as u64 / 250 + 1);
    assert!(
        sent <= 2 * 20 + heartbeats,
        "{sent} AppendEntries to two followers for 20 changes one at a time ({heartbeats} heartbeats allowed)"
    );
    applied_by_followers(&nodes, &followers, last.index).await;
    shutdown(nodes).await;
}

#[tokio::test(start_paused = true)]
async fn a_commit_with_nothing_after_it_reaches_the_followers_soon() {
    let (nodes, _) = three_nodes().await;
    let (leader, followers) = leader(&nodes).await;
    for i in 0..5 {
        // Well before the next heartbeat (250 ms) would have carried it.
        change_applied_within(&nodes, &leader, &followers, i, Duration::from_millis(10)).await;
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    shutdown(nodes).await;
}

#[tokio::test(start_paused = true)]
async fn followers_hear_at_once_of_commits_a_caller_awaits() {
    let (nodes, _) = three_nodes().await;
    let (leader, followers) = leader(&nodes).await;
    for i in 0..5 {
        let awaited = leader.followers_awaited();
        // The simulated disk and network take a millisecond; a held
        // notice would add the hold (2 ms) to it.
        change_applied_within(&nodes, &leader, &followers, i, Duration::from_micros(1500)).await;
        drop(awaited);
    }
    shutdown(nodes).await;
}
