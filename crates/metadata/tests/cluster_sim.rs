//! A deterministic simulation of the metadata of a whole cluster: every
//! node runs the quorum (over the in-process network, on its own simulated
//! disk) and the state machine that publishes committed entries to the
//! node's image, as a broker does. A client commits topics through
//! whichever node leads, while the schedule partitions the network, drops
//! and delays messages, and cuts nodes' power.
//!
//! Checked at every step: a node's image holds only committed topics, and
//! every acknowledged topic at or below the offset it has published (the
//! image is a prefix of the committed log). After the faults heal: a new
//! commit succeeds, and every node's image is the same and holds every
//! acknowledged topic.
//!
//! `TARN_SIM_SEED=n` replays one seed; `TARN_SIM_SEEDS=n` runs n seeds
//! (8 by default); scripts/sim-cluster.sh runs many.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tarn_metadata::replicated::{entry, PublishingMachine};
use tarn_metadata::{MetadataImage, MetadataPublisher, MetadataRecord};
use tarn_quorum::sim::{Faults, SimNetwork};
use tarn_quorum::{NodeId, Quorum, QuorumConfig};
use tarn_storage::sim::SimFileSystem;
use tarn_storage::FileSystem;

struct Node {
    fs: Arc<SimFileSystem>,
    quorum: Option<Quorum>,
    publisher: Arc<MetadataPublisher>,
}

/// The schedule's generator (xorshift64*), apart from the network's.
struct Rng(u64);

impl Rng {
    fn next(&mut self, max: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % (max + 1)
    }
}

struct Sim {
    seed: u64,
    rng: Rng,
    net: Arc<SimNetwork>,
    nodes: BTreeMap<NodeId, Node>,
    /// Every topic proposed, acknowledged or not.
    proposed: BTreeSet<String>,
    /// Acknowledged topics by the offset they were committed at.
    acked: BTreeMap<u64, String>,
    starts: u64,
}

fn topic(name: &str, n: u64) -> MetadataRecord {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&n.to_be_bytes());
    id[15] = 1;
    MetadataRecord::Topic {
        name: name.to_owned(),
        topic_id: id,
    }
}

impl Sim {
    fn new(seed: u64, size: u64) -> Sim {
        let nodes = (1..=size)
            .map(|id| {
                let node = Node {
                    fs: Arc::new(SimFileSystem::new(seed ^ id)),
                    quorum: None,
                    publisher: Arc::new(MetadataPublisher::new(MetadataImage::default(), 0)),
                };
                (id, node)
            })
            .collect();
        Sim {
            seed,
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            net: SimNetwork::new(seed),
            nodes,
            proposed: BTreeSet::new(),
            acked: BTreeMap::new(),
            starts: 0,
        }
    }

    fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    async fn start(&mut self, id: NodeId) {
        self.starts += 1;
        let voters = self
            .ids()
            .iter()
            .map(|i| (*i, format!("node-{i}")))
            .collect();
        let mut config = QuorumConfig::new(id, voters, PathBuf::from("/data/__cluster_metadata-0"));
        config.snapshot_every = 8;
        config.rng_seed = Some(self.seed.wrapping_mul(31) ^ (id << 32) ^ self.starts);
        let node = self.nodes.get_mut(&id).expect("a node");
        // A restarted node builds its image again from its disk.
        node.publisher = Arc::new(MetadataPublisher::new(MetadataImage::default(), 0));
        let fs: Arc<dyn FileSystem> = node.fs.clone();
        let machine = PublishingMachine::new(node.publisher.clone());
        let quorum = Quorum::start(config, fs, self.net.transport(id), Box::new(machine))
            .await
            .unwrap_or_else(|e| panic!("seed {}: start node {id}: {e}", self.seed));
        self.net.register(quorum.clone());
        node.quorum = Some(quorum);
    }

    async fn crash(&mut self, id: NodeId) {
        self.net.unregister(id);
        let node = self.nodes.get_mut(&id).expect("a node");
        let Some(quorum) = node.quorum.take() else {
            return;
        };
        node.fs.halt();
        // Writes fail once the power is gone: that is the crash.
        if let Err(e) = quorum.shutdown().await {
            eprintln!("seed {}: node {id} stopped with {e}", self.seed);
        }
        node.fs.power_cut(true);
        node.fs.restart();
    }

    fn leader(&self) -> Option<Quorum> {
        self.nodes
            .values()
            .filter_map(|n| n.quorum.clone())
            .find(|q| q.status().borrow().is_leader)
    }

    /// One topic through the leader, if there is one; acknowledged or not.
    async fn propose(&mut self, n: u64) {
        let Some(leader) = self.leader() else {
            return;
        };
        let name = format!("t{n}");
        self.proposed.insert(name.clone());
        let body = entry(&[topic(&name, n)]).expect("encode an entry");
        let proposal = tokio::time::timeout(Duration::from_secs(5), leader.propose(body));
        if let Ok(Ok(committed)) = proposal.await {
            self.acked.insert(committed.index, name);
        }
    }

    /// The prefix property, on every running node.
    fn check(&self, step: &str) {
        for (id, node) in &self.nodes {
            if node.quorum.is_none() {
                continue;
            }
            let image = node.publisher.image();
            let published = node.publisher.published_offset();
            for t in image.topics() {
                assert!(
                    self.proposed.contains(&t.name),
                    "seed {}: {step}: node {id} holds {} that nobody proposed",
                    self.seed,
                    t.name
                );
            }
            for (index, name) in self.acked.range(..=published) {
                assert!(
                    image.topic(name).is_some(),
                    "seed {}: {step}: node {id} published offset {published} but lacks {name}, acknowledged at {index}",
                    self.seed
                );
            }
        }
    }
}

async fn run(seed: u64) {
    let size = if seed.is_multiple_of(2) { 3 } else { 5 };
    let mut sim = Sim::new(seed, size);
    for id in sim.ids().into_iter().rev() {
        sim.start(id).await;
    }
    let ids = sim.ids();
    let all: BTreeSet<NodeId> = ids.iter().copied().collect();
    let mut n = 0;
    for step in 0..12 {
        match sim.rng.next(5) {
            0 => {
                let victim = ids[sim.rng.next(ids.len() as u64 - 1) as usize];
                sim.net.partition(&BTreeSet::from([victim]), &all);
            }
            1 => sim.net.heal(),
            2 => {
                let victim = ids[sim.rng.next(ids.len() as u64 - 1) as usize];
                sim.crash(victim).await;
            }
            3 => {
                let down: Vec<NodeId> = sim
                    .nodes
                    .iter()
                    .filter(|(_, node)| node.quorum.is_none())
                    .map(|(id, _)| *id)
                    .collect();
                if let Some(id) = down.first() {
                    sim.start(*id).await;
                }
            }
            4 => sim.net.set_faults(Faults {
                loss_per_mille: sim.rng.next(150),
                delay_ms_min: 0,
                delay_ms_max: sim.rng.next(60),
            }),
            _ => sim.net.set_faults(Faults::NONE),
        }
        for _ in 0..4 {
            n += 1;
            sim.propose(n).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sim.check(&format!("step {step}"));
    }

    // Heal everything; the cluster must commit again and converge.
    sim.net.heal();
    sim.net.set_faults(Faults::NONE);
    let down: Vec<NodeId> = sim
        .nodes
        .iter()
        .filter(|(_, node)| node.quorum.is_none())
        .map(|(id, _)| *id)
        .collect();
    for id in down {
        sim.start(id).await;
    }
    let mut committed = None;
    for _ in 0..300 {
        n += 1;
        sim.propose(n).await;
        if sim.acked.values().any(|t| *t == format!("t{n}")) {
            committed = Some(n);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = committed.unwrap_or_else(|| panic!("seed {seed}: no commit after healing"));
    let last_index = *sim.acked.keys().last().expect("an acknowledged entry");
    for _ in 0..600 {
        if sim
            .nodes
            .values()
            .all(|node| node.publisher.published_offset() >= last_index)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.check("healed");
    let images: Vec<Arc<MetadataImage>> = sim
        .nodes
        .values()
        .map(|node| node.publisher.image())
        .collect();
    for (i, image) in images.iter().enumerate() {
        assert_eq!(
            **image,
            *images[0],
            "seed {seed}: node {} differs from node 1",
            i + 1
        );
        for name in sim.acked.values() {
            assert!(
                image.topic(name).is_some(),
                "seed {seed}: {name} lost (last t{last})"
            );
        }
    }
    println!(
        "seed {seed}: {size} nodes, {} starts, {} of {} proposals acknowledged",
        sim.starts,
        sim.acked.len(),
        sim.proposed.len()
    );
    for node in sim.nodes.values_mut() {
        if let Some(quorum) = node.quorum.take() {
            quorum.shutdown().await.expect("shut down");
        }
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("TARN_SIM_SEED") {
        return vec![seed.parse().expect("TARN_SIM_SEED is a number")];
    }
    let count = std::env::var("TARN_SIM_SEEDS")
        .ok()
        .map_or(8, |n| n.parse().expect("TARN_SIM_SEEDS is a number"));
    (0..count).collect()
}

#[test]
fn every_image_is_a_prefix_of_the_committed_log_under_faults() {
    for seed in seeds() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        println!("seed {seed} (replay: TARN_SIM_SEED={seed} cargo test -p tarn-metadata --test cluster_sim)");
        runtime.block_on(run(seed));
    }
}
