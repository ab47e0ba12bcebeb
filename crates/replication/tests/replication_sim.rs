//! A deterministic simulation of data replication: three brokers, each a
//! real `ReplicaManager` on its own simulated file system, and a
//! controller that commits the metadata with the real planners
//! (`tarn_metadata::elections`, `brokers`). Generators of the seed pick
//! every step: acks=all produces to whoever believes it leads (some
//! appended steps after the leader was looked up), follower fetches
//! (Fetch's checks, divergence truncation, out-of-range settling, ISR
//! expansion; some answers applied steps later, as a replica fetcher
//! applies one after the metadata may have moved on), ISR shrinks as
//! time passes, ISR changes reaching the controller late or answered
//! never (committed all the same), reassignments (replicas moved off a
//! broker and back, or cancelled), metadata reaching each broker late,
//! process crashes, power cuts (torn unsynced bytes), and a broker cut
//! off from the others and the controller (a zombie leader). A third test
//! also deletes the topic and makes it again under its name (a new topic
//! id, new replicas) while brokers lag the metadata.
//! Then every fault heals, the replicas converge, and the checks run:
//!
//! - every acknowledged record is on the final leader at its offset;
//! - an offset below a leader's high watermark never holds two different
//!   records, in any read, on any replica;
//! - every replica ends with the same records, and no broker that is not
//!   a replica keeps one (hosted, or as a directory under its own name);
//! - no record is stored twice, and none appended to an earlier topic of
//!   the name is in the final one.
//!
//! Two flush settings: with none (Kafka's default, durability from
//! replication) a power cut hits a broker only while every other one is in
//! sync and up; with `flush.messages=1` power cuts hit any broker at any
//! time, several at once.
//!
//! `TARN_REPLICATION_SIM_SEEDS=N` runs seeds 0..N per setting (default 64;
//! M..M+N with `TARN_REPLICATION_SIM_SEEDS_FROM=M`) and the seeds that once
//! found a fault (`REGRESSION_SEEDS`);
//! `TARN_REPLICATION_SIM_SEED=S` replays one. A failure names its seed and
//! its last steps; `TARN_REPLICATION_SIM_TRACE=PREFIX` writes all of a
//! seed's steps to `PREFIX.SEED.SETTING`. The group commit's fsync rounds
//! run when the seed says; `TARN_REPLICATION_SIM_THREADED=1` gives it its
//! own thread instead, which races the steps as it races request handlers
//! in a broker: a hunt for races whose seeds do not replay exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use tarn_config::BrokerConfig;
use tarn_metadata::brokers;
use tarn_metadata::elections::{self, alter_partition, AlterPartition};
use tarn_metadata::reassignments::{alter_reassignment, Reassignment};
use tarn_metadata::topics::{create_topic_records, NewTopic};
use tarn_metadata::{MetadataImage, MetadataRecord};
use tarn_protocol::error;
use tarn_protocol::messages::create_topics::CreatableReplicaAssignment;
use tarn_protocol::record_batch::{BatchIter, RecordBatchBuilder, RecordBatchHeader, RecordIter};
use tarn_protocol::Uuid;
use tarn_replication::replica_manager::{Partition, ReadLimit, ReplicaManager, Role};
use tarn_replication::roles::{FollowerRead, IsrChange, IsrChangeAnswer};
use tarn_storage::sim::SimFileSystem;
use tarn_storage::{GroupCommit, RollFlusher};
use tarn_storage::{LogEnv, ManualClock};

const BROKERS: i32 = 3;
const PARTITIONS: i32 = 2;
const TOPIC: &str = "sim";
const STEPS: usize = 3000;
const LAG_MAX_MS: i64 = 30_000;
const START_MS: i64 = 1_700_000_000_000;
/// How many fetch rounds the healed cluster may take to converge.
const CONVERGE_ROUNDS: usize = 400;

/// xorshift64*, seeded.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flush {
    /// No fsync on append: durability from replication alone.
    None,
    /// `flush.messages=1` on every log.
    EveryMessage,
}

struct Node {
    fs: Arc<SimFileSystem>,
    env: LogEnv,
    /// `None` while the process is down.
    replicas: Option<ReplicaManager>,
    /// Its current registration.
    epoch: i64,
    /// How many of the controller's images it has applied.
    applied: usize,
    /// Cut off from the other brokers and the controller (clients still
    /// reach it).
    isolated: bool,
}

/// A follower's fetch answer not applied yet: the replica fetcher applies
/// an answer a while after the leader made it, and the follower's role or
/// epoch may change in between (it may even lead by then).
struct InFlight {
    node: i32,
    partition: Arc<Partition>,
    leader: i32,
    /// The epoch the fetch was sent in.
    leader_epoch: i32,
    answer: Answer,
}

enum Answer {
    Diverging {
        epoch: i32,
        end_offset: i64,
    },
    Records {
        bytes: bytes::Bytes,
        high_watermark: i64,
    },
    /// The follower is past the leader's end (ListOffsets LATEST).
    Ahead {
        leader_end: i64,
    },
}

/// A produce request the leader checked and has not appended yet: the
/// handler appends a while after it looked up the leader, and the
/// partition may have moved on in between.
struct HeldProduce {
    node: i32,
    partition: Arc<Partition>,
    value: String,
    batch: Vec<u8>,
}

/// An ISR change a leader sent and has no answer to yet.
struct HeldIsrChange {
    node: i32,
    partition: Arc<Partition>,
    change: IsrChange,
}

/// An acks=all produce waiting for its high watermark.
struct Pending {
    node: i32,
    partition: Arc<Partition>,
    leader_epoch: i32,
    offset: i64,
    value: String,
}

struct Sim {
    seed: u64,
    flush: Flush,
    rng: Rng,
    clock: Arc<ManualClock>,
    now_ms: i64,
    config: BrokerConfig,
    group_commit: Arc<GroupCommit>,
    /// Runs with the group commit: rolls leave their fsyncs to it.
    roll_flusher: Arc<RollFlusher>,
    /// Whether `group_commit` has its own thread.
    threaded: bool,
    runtime: tokio::runtime::Runtime,
    /// Every image the controller committed, in order.
    images: Vec<Arc<MetadataImage>>,
    nodes: Vec<Node>,
    pending: Vec<Pending>,
    in_flight: Vec<InFlight>,
    held_produces: Vec<HeldProduce>,
    held_isr_changes: Vec<HeldIsrChange>,
    /// Picks which fetch answers and produces are held and when they
    /// land: apart from `rng`, so the other steps draw as they did before
    /// anything was held.
    delays: Rng,
    /// The same for ISR changes, and which answers to them are lost.
    isr_delays: Rng,
    /// Picks when a partition is reassigned, and to what (apart from
    /// `rng`, as `delays`).
    moves: Rng,
    /// Picks when the topic is deleted and made again, and its replicas
    /// then; `None` in the tests that keep one topic throughout.
    recreations: Option<Rng>,
    /// (topic id, partition, offset) -> value, of every acknowledged
    /// produce.
    acked: BTreeMap<(Uuid, i32, i64), String>,
    /// (topic id, partition, offset) -> value, of everything seen below a
    /// leader's high watermark.
    committed: BTreeMap<(Uuid, i32, i64), String>,
    /// value -> the topic id of the log it was appended to.
    appended_to: BTreeMap<String, Uuid>,
    produced: usize,
    log: Vec<String>,
}

impl Sim {
    fn new(seed: u64, flush: Flush, recreate: bool) -> Sim {
        let clock = Arc::new(ManualClock::new(START_MS));
        let threaded = std::env::var_os("TARN_REPLICATION_SIM_THREADED").is_some();
        // Small segments, so that logs roll (and rolled segments wait for
        // their background fsync) while the faults happen.
        let mut overrides: Vec<(&str, &str)> = vec![("log.segment.bytes", "2048")];
        if flush == Flush::EveryMessage {
            overrides.push(("log.flush.interval.messages", "1"));
        }
        let config = BrokerConfig::with_overrides(overrides).expect("valid settings");
        let nodes = (1..=BROKERS)
            .map(|id| {
                let fs = Arc::new(SimFileSystem::new(seed * 31 + id as u64));
                let env = LogEnv::new(fs.clone(), 64, clock.clone());
                Node {
                    fs,
                    env,
                    replicas: None,
                    epoch: -1,
                    applied: 0,
                    isolated: false,
                }
            })
            .collect();
        let mut sim = Sim {
            seed,
            flush,
            rng: Rng::new(seed),
            clock,
            now_ms: START_MS,
            config,
            // Its rounds run when the simulation says (see `wait`, `tick`,
            // `step`), not when a thread gets to them: a seed replays
            // exactly. TARN_REPLICATION_SIM_THREADED=1 gives it its thread
            // back, racing the simulation as it races request handlers in
            // a broker: a hunt for races, whose seeds do not replay.
            group_commit: Arc::new(if threaded {
                GroupCommit::start().expect("group commit")
            } else {
                GroupCommit::manual()
            }),
            roll_flusher: Arc::new(if threaded {
                RollFlusher::start().expect("roll flusher")
            } else {
                RollFlusher::manual()
            }),
            threaded,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("runtime"),
            images: vec![Arc::new(MetadataImage::default())],
            nodes,
            pending: Vec::new(),
            in_flight: Vec::new(),
            held_produces: Vec::new(),
            held_isr_changes: Vec::new(),
            delays: Rng::new(seed ^ 0x5eed_f00d),
            isr_delays: Rng::new(seed ^ 0x15_c4a6e),
            moves: Rng::new(seed ^ 0x3e_a551),
            recreations: recreate.then(|| Rng::new(seed ^ 0x7e_c4ea7e)),
            acked: BTreeMap::new(),
            committed: BTreeMap::new(),
            appended_to: BTreeMap::new(),
            produced: 0,
            log: Vec::new(),
        };
        for id in 1..=BROKERS {
            sim.register(id, false);
        }
        let replicas: Vec<Vec<i32>> = (0..PARTITIONS)
            .map(|_| shuffled_brokers(&mut sim.rng))
            .collect();
        if let Err(e) = sim.create_topic(replicas) {
            sim.fail(format!("cannot create the topic: {e}"));
        }
        for id in 1..=BROKERS {
            sim.start(id);
        }
        sim
    }

    /// The controller creates the topic with `replicas` for each
    /// partition, in an order the seed picks (the placer would draw its
    /// own, unseeded, start), the first leading. Refused (as Kafka's
    /// controller refuses) when every broker a partition names is fenced.
    fn create_topic(&mut self, replicas: Vec<Vec<i32>>) -> Result<(), String> {
        let assignments: Vec<CreatableReplicaAssignment> = replicas
            .into_iter()
            .zip(0..)
            .map(|(broker_ids, partition_index)| CreatableReplicaAssignment {
                partition_index,
                broker_ids,
            })
            .collect();
        let image = self.image();
        let (records, _) = create_topic_records(
            &image,
            &self.config,
            &NewTopic {
                name: TOPIC,
                num_partitions: -1,
                replication_factor: -1,
                assignments: Some(&assignments),
                configs: vec![("min.insync.replicas".into(), Some("2".into()))],
            },
        )
        .map_err(|e| e.message)?;
        self.commit(records);
        Ok(())
    }

    /// The topic's id in the controller's latest image, if it exists.
    fn topic_id(&self) -> Option<Uuid> {
        self.image().topic(TOPIC).map(|t| t.topic_id)
    }

    /// The controller deletes the topic, or makes it again under its name
    /// (new replicas, in a drawn order) when it is deleted.
    fn delete_or_recreate(&mut self) {
        let Some(rng) = self.recreations.as_mut() else {
            return;
        };
        let replicas: Vec<Vec<i32>> = (0..PARTITIONS)
            .map(|_| {
                let mut ids = shuffled_brokers(rng);
                ids.truncate(2 + rng.below(2) as usize);
                ids
            })
            .collect();
        match self.topic_id() {
            Some(id) => {
                self.note(format!("delete the topic ({id:?})"));
                self.commit(vec![MetadataRecord::RemoveTopic { topic_id: id.0 }]);
            }
            None => match self.create_topic(replicas.clone()) {
                Ok(()) => {
                    let id = self.topic_id().expect("created");
                    self.note(format!("make the topic again ({id:?}) on {replicas:?}"));
                }
                Err(e) => self.note(format!("making the topic again is refused: {e}")),
            },
        }
    }

    fn fail(&self, what: String) -> ! {
        self.write_trace();
        let tail: Vec<&String> = self.log.iter().rev().take(40).collect();
        panic!(
            "seed {} ({:?}): {what}\nlast steps, newest first:\n{}",
            self.seed,
            self.flush,
            tail.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// With `TARN_REPLICATION_SIM_TRACE=PREFIX`, every step so far to
    /// the file `PREFIX.SEED.SETTING`.
    fn write_trace(&self) {
        if let Ok(prefix) = std::env::var("TARN_REPLICATION_SIM_TRACE") {
            let path = format!("{prefix}.{}.{:?}", self.seed, self.flush);
            std::fs::write(&path, self.log.join("\n")).expect("write the trace");
        }
    }

    fn note(&mut self, step: String) {
        self.log.push(step);
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.images.last().expect("an image").clone()
    }

    fn commit(&mut self, records: Vec<MetadataRecord>) {
        if records.is_empty() {
            return;
        }
        let before = self.image();
        let mut next = (*before).clone();
        for r in &records {
            next.apply(r);
        }
        // The trace shows every partition state the controller commits.
        if let (Some(old), Some(new)) = (before.topic(TOPIC), next.topic(TOPIC)) {
            for (o, n) in old.partitions.iter().zip(&new.partitions) {
                if o != n {
                    self.log.push(format!(
                        "committed p{}: leader {} epoch {} replicas {:?} isr {:?} adding {:?} removing {:?}",
                        n.partition_id,
                        n.leader,
                        n.leader_epoch,
                        n.replicas,
                        n.isr,
                        n.adding_replicas,
                        n.removing_replicas
                    ));
                }
            }
        }
        self.images.push(Arc::new(next));
    }

    fn node(&self, id: i32) -> &Node {
        &self.nodes[id as usize - 1]
    }

    fn node_mut(&mut self, id: i32) -> &mut Node {
        &mut self.nodes[id as usize - 1]
    }

    /// A new registration of broker `id` (fenced when `fenced`).
    fn register(&mut self, id: i32, fenced: bool) {
        let epoch = self.node(id).epoch + 1;
        self.node_mut(id).epoch = epoch;
        self.commit(vec![MetadataRecord::RegisterBroker {
            broker_id: id,
            host: "sim".into(),
            port: 9000 + id,
            rack: None,
            incarnation_id: [epoch as u8; 16],
            broker_epoch: epoch,
            listeners: Vec::new(),
            fenced,
        }]);
    }

    /// Starts broker `id`'s process on its file system as it is.
    fn start(&mut self, id: i32) {
        let node = self.node(id);
        let replicas = ReplicaManager::new(
            Path::new("/data"),
            id,
            node.env.clone(),
            self.group_commit.clone(),
        )
        .with_roll_flusher(self.roll_flusher.clone());
        self.node_mut(id).replicas = Some(replicas);
        self.node_mut(id).applied = 0;
        self.propagate(id, usize::MAX);
        // Caught up at once, as a broker is when unfenced: directories of
        // partitions no longer assigned here are set aside.
        let strays = self
            .node(id)
            .replicas
            .as_ref()
            .expect("running")
            .set_aside_strays();
        match strays {
            Ok(0) => {}
            Ok(n) => self.note(format!("broker {id} sets {n} stray directories aside")),
            Err(e) => self.fail(format!("broker {id} cannot set strays aside: {e}")),
        }
    }

    /// Broker `id` applies up to `count` more of the controller's images.
    fn propagate(&mut self, id: i32, count: usize) {
        let target = self
            .images
            .len()
            .min(self.node(id).applied.saturating_add(count));
        if self.node(id).replicas.is_none() || target <= self.node(id).applied {
            return;
        }
        let image = self.images[target - 1].clone();
        let clean = self.node(id).applied > 0;
        let hosted_before: Vec<Option<Arc<Partition>>> =
            (0..PARTITIONS).map(|p| self.partition(id, p)).collect();
        let node = self.node(id);
        if let Err(e) = node
            .replicas
            .as_ref()
            .expect("running")
            .sync(&image, &self.config, clean)
        {
            self.fail(format!("broker {id} cannot apply the metadata: {e}"));
        }
        self.node_mut(id).applied = target;
        // The trace shows every replica a broker opens or drops.
        for (p, before) in hosted_before.into_iter().enumerate() {
            let now = self.partition(id, p as i32);
            match (before, now) {
                (None, Some(opened)) => self.note(format!(
                    "broker {id} opens p{p} at {}..{}",
                    opened.offsets().map_or(-1, |o| o.log_start_offset),
                    opened.log_end_offset()
                )),
                (Some(_), None) => self.note(format!("broker {id} drops p{p}")),
                _ => {}
            }
        }
    }

    fn up(&self, id: i32) -> bool {
        self.node(id).replicas.is_some()
    }

    fn connected(&self, a: i32, b: i32) -> bool {
        self.up(a) && self.up(b) && !self.node(a).isolated && !self.node(b).isolated
    }

    fn partition(&self, id: i32, p: i32) -> Option<Arc<Partition>> {
        self.node(id).replicas.as_ref()?.get(TOPIC, p)
    }

    /// Waits for `f`, which a flush completes: the queued group-commit
    /// rounds run first (the thread would have run them meanwhile).
    fn wait<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        if self.threaded {
            let bounded =
                async { tokio::time::timeout(std::time::Duration::from_secs(30), f).await };
            return self
                .runtime
                .block_on(bounded)
                .expect("a flush the group-commit thread never completed");
        }
        let group_commit = self.group_commit.clone();
        let roll_flusher = self.roll_flusher.clone();
        self.runtime.block_on(async move {
            tokio::pin!(f);
            for _ in 0..100 {
                roll_flusher.run_queued();
                group_commit.run_queued();
                tokio::select! {
                    biased;
                    out = &mut f => return out,
                    () = tokio::task::yield_now() => {}
                }
            }
            panic!("a wait was not completed by the queued flushes");
        })
    }

    /// The client sends one acks=all record to broker `id` for `p`.
    fn produce(&mut self, id: i32, p: i32) {
        let Some(partition) = self.partition(id, p) else {
            return;
        };
        if partition.role() != Role::Leader || partition.check_enough_replicas().is_err() {
            return;
        }
        self.produced += 1;
        let value = format!("v{}", self.produced);
        let batch = RecordBatchBuilder::new()
            .record(self.now_ms, None, Some(value.as_bytes()))
            .build()
            .to_vec();
        let held = HeldProduce {
            node: id,
            partition,
            value,
            batch,
        };
        if self.delays.chance(20) {
            self.note(format!("produce {} to {id} p{p} is held", held.value));
            self.held_produces.push(held);
        } else {
            self.append_produce(held);
        }
    }

    /// A held produce lands, if any is held.
    fn land_a_produce(&mut self) {
        if let Some(held) = take_one(&mut self.delays, &mut self.held_produces) {
            self.append_produce(held);
        }
    }

    /// Whether `partition` is still the one node `id` hosts: the process
    /// that took a request or sent a fetch is not gone.
    fn still_hosted(&self, id: i32, partition: &Arc<Partition>) -> bool {
        self.partition(id, partition.index)
            .is_some_and(|now| Arc::ptr_eq(&now, partition))
    }

    /// The leader appends a produce it checked earlier; the append itself
    /// refuses it if the partition moved on since.
    fn append_produce(&mut self, held: HeldProduce) {
        let HeldProduce {
            node: id,
            partition,
            value,
            batch,
        } = held;
        let p = partition.index;
        if !self.still_hosted(id, &partition) {
            return;
        }
        let appended = match partition.append(&batch) {
            Ok(appended) => appended,
            Err(e) => {
                self.note(format!("produce {value} to {id} p{p}: {}", e.message));
                return;
            }
        };
        let leader_epoch = appended.leader_epoch;
        self.appended_to.insert(value.clone(), partition.topic_id);
        // The flush `flush.messages` asks for, before any acknowledgement.
        if let Err(e) = self.wait(appended.completion.wait()) {
            self.note(format!("produce {value} to {id} p{p}: flush {}", e.message));
            return;
        }
        let offset = appended.info.last_offset;
        self.note(format!(
            "produce {value} to {id} p{p} at {offset} (epoch {leader_epoch})"
        ));
        self.pending.push(Pending {
            node: id,
            partition,
            leader_epoch,
            offset,
            value,
        });
    }

    /// Answers the produces whose records the ISR now has, and fails those
    /// whose leader moved on or died.
    fn settle_produces(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        for w in pending {
            if !self.still_hosted(w.node, &w.partition) || !w.partition.leads_since(w.leader_epoch)
            {
                self.note(format!("produce {} failed: its leader moved", w.value));
                continue;
            }
            if w.partition.high_watermark() > w.offset {
                self.note(format!(
                    "ack {} at p{} {}",
                    w.value, w.partition.index, w.offset
                ));
                self.acked
                    .insert((w.partition.topic_id, w.partition.index, w.offset), w.value);
            } else {
                self.pending.push(w);
            }
        }
    }

    /// An ISR change the leader `id` asks the controller for: sent now,
    /// or held for a later step (the leader goes on meanwhile).
    fn alter_isr(&mut self, id: i32, partition: Arc<Partition>, change: IsrChange) {
        let sent = HeldIsrChange {
            node: id,
            partition,
            change,
        };
        if self.isr_delays.chance(30) {
            self.note(format!(
                "isr change of p{} -> {:?} by {id} is held",
                sent.partition.index, sent.change.new_isr
            ));
            self.held_isr_changes.push(sent);
        } else {
            self.send_isr_change(sent);
        }
    }

    /// A held ISR change reaches the controller, if any is held.
    fn land_an_isr_change(&mut self) {
        if let Some(held) = take_one(&mut self.isr_delays, &mut self.held_isr_changes) {
            self.send_isr_change(held);
        }
    }

    /// The controller takes an ISR change, and the leader settles it by the
    /// answer, as the ISR change sender does: sent again when unanswered
    /// (the leader is cut off, or the answer to a commit is lost).
    fn send_isr_change(&mut self, sent: HeldIsrChange) {
        let HeldIsrChange {
            node: id,
            partition,
            change,
        } = sent;
        let p = partition.index;
        if !self.still_hosted(id, &partition) {
            return;
        }
        let answer = if self.node(id).isolated {
            IsrChangeAnswer::Unanswered
        } else {
            let image = self.image();
            // The sender names the topic by the id of its log, as the
            // broker's does.
            let request = AlterPartition {
                broker_id: id,
                broker_epoch: self.node(id).epoch,
                topic_id: partition.topic_id.0,
                partition_id: p,
                leader_epoch: change.leader_epoch,
                partition_epoch: change.partition_epoch,
                new_isr: change.new_isr.clone(),
                new_isr_epochs: change.broker_epochs.clone(),
            };
            match alter_partition(&image, &self.config, &request) {
                Ok((records, _)) => {
                    self.note(format!(
                        "isr of p{p} -> {:?} (asked by {id})",
                        change.new_isr
                    ));
                    self.commit(records);
                    if self.isr_delays.chance(20) {
                        self.note(format!("the answer to {id}'s isr change of p{p} is lost"));
                        IsrChangeAnswer::Unanswered
                    } else {
                        // The answer comes once the leader has the change.
                        self.propagate(id, usize::MAX);
                        IsrChangeAnswer::Committed
                    }
                }
                Err(e) => {
                    self.note(format!(
                        "isr change of p{p} -> {:?} by {id} refused: {}",
                        change.new_isr, e.message
                    ));
                    self.propagate(id, usize::MAX);
                    IsrChangeAnswer::Refused(e.code)
                }
            }
        };
        if partition.isr_change_answered(&change, answer) {
            self.held_isr_changes.push(HeldIsrChange {
                node: id,
                partition,
                change,
            });
        }
    }

    /// Follower `id` fetches `p` from the leader it knows, as the replica
    /// fetcher and the Fetch handler do. The answer is applied now, or
    /// held for a later step (one in flight per partition and epoch).
    fn fetch(&mut self, id: i32, p: i32) {
        let Some(follower) = self.partition(id, p) else {
            return;
        };
        let leader_id = follower.leader();
        if follower.role() != Role::Follower || leader_id < 0 || !self.connected(id, leader_id) {
            return;
        }
        let leader_epoch = follower.leader_epoch();
        if self
            .in_flight
            .iter()
            .any(|f| f.node == id && f.partition.index == p && f.leader_epoch == leader_epoch)
        {
            return;
        }
        let Some(leader) = self.partition(leader_id, p) else {
            return;
        };
        // A replica fetcher names the topic by its id: a leader hosting
        // another topic of the name answers INCONSISTENT_TOPIC_ID (or
        // UNKNOWN_TOPIC_ID, when its image lacks the id).
        if leader.topic_id != follower.topic_id {
            self.note(format!(
                "{id} p{p} fetches from {leader_id}: another topic of the name there"
            ));
            return;
        }
        if leader.check_epoch(leader_epoch).is_err() || leader.role() != Role::Leader {
            return;
        }
        let (fetch_offset, last_epoch, _) = match follower.fetch_position() {
            Ok(position) => position,
            Err(e) => self.fail(format!("broker {id} p{p}: fetch position: {}", e.message)),
        };
        self.note(format!(
            "{id} p{p} fetches from {leader_id} at {fetch_offset} (last epoch {last_epoch})"
        ));
        // The simulated file system has no OS files to sendfile from: the
        // fetch's checks and bookkeeping, then a plain read.
        let answer = match leader.follower_position(
            id,
            self.node(id).epoch,
            fetch_offset,
            last_epoch,
            self.now_ms,
        ) {
            Ok(Err(FollowerRead::Diverging {
                epoch, end_offset, ..
            })) => Answer::Diverging { epoch, end_offset },
            Ok(Err(FollowerRead::Records { .. })) => {
                self.fail("a position answered records".into())
            }
            Ok(Ok(outcome)) => {
                let (bytes, offsets) = leader
                    .read(fetch_offset, 1 << 20, true, ReadLimit::LogEnd)
                    .unwrap_or_else(|e| self.fail(format!("leader read: {}", e.message)));
                if let Some(change) = outcome.expand_isr {
                    self.alter_isr(leader_id, leader.clone(), change);
                }
                Answer::Records {
                    bytes,
                    high_watermark: offsets.high_watermark,
                }
            }
            Err(e) if e.code == error::OFFSET_OUT_OF_RANGE => Answer::Ahead {
                leader_end: leader.log_end_offset(),
            },
            Err(e) => {
                self.note(format!("{id} fetch p{p} from {leader_id}: {}", e.message));
                return;
            }
        };
        let answered = InFlight {
            node: id,
            partition: follower,
            leader: leader_id,
            leader_epoch,
            answer,
        };
        if self.delays.chance(25) {
            self.note(format!("{id} p{p}: the answer from {leader_id} is held"));
            self.in_flight.push(answered);
        } else {
            self.apply_answer(answered);
        }
    }

    /// A held answer lands, if any is held.
    fn land_an_answer(&mut self) {
        if let Some(answered) = take_one(&mut self.delays, &mut self.in_flight) {
            self.apply_answer(answered);
        }
    }

    /// The follower takes a fetch answer, as the replica fetcher does,
    /// each step refused (and the rest dropped) once the partition moved
    /// on from the epoch the fetch was sent in.
    fn apply_answer(&mut self, answered: InFlight) {
        let InFlight {
            node: id,
            partition: follower,
            leader: leader_id,
            leader_epoch,
            answer,
        } = answered;
        let p = follower.index;
        if !self.still_hosted(id, &follower) {
            return;
        }
        let moved_on =
            |result: Result<(), tarn_replication::replica_manager::PartitionError>| match result {
                Ok(()) => Ok(false),
                Err(e) if e.code == error::FENCED_LEADER_EPOCH => Ok(true),
                Err(e) => Err(e.message),
            };
        let step = match answer {
            Answer::Diverging { epoch, end_offset } => {
                let to = follower
                    .divergence_truncation_offset(epoch, end_offset)
                    .unwrap_or_else(|e| self.fail(format!("divergence offset: {}", e.message)));
                self.note(format!(
                    "{id} p{p} diverges from {leader_id}: truncate to {to}"
                ));
                moved_on(follower.truncate_to(leader_epoch, to))
            }
            Answer::Ahead { leader_end: to } => {
                self.note(format!("{id} p{p} ahead of {leader_id}: truncate to {to}"));
                moved_on(follower.truncate_to(leader_epoch, to))
            }
            Answer::Records {
                bytes,
                high_watermark,
            } => {
                let appended = if bytes.is_empty() {
                    Ok(false)
                } else {
                    moved_on(
                        follower
                            .append_as_follower(leader_epoch, &bytes)
                            .map(|_| ()),
                    )
                };
                if appended == Ok(false) {
                    // The replica fetcher waits for a flush made due
                    // before it fetches (and so reports its log end) again.
                    if !bytes.is_empty() {
                        if let Err(e) = self.wait(follower.durability_barrier().wait()) {
                            self.fail(format!("{id} p{p}: follower flush: {}", e.message));
                        }
                    }
                    follower.update_follower_high_watermark(leader_epoch, high_watermark);
                }
                appended
            }
        };
        match step {
            Ok(false) => {}
            Ok(true) => self.note(format!(
                "{id} p{p}: the answer of epoch {leader_epoch} from {leader_id} is stale; dropped"
            )),
            Err(e) => self.fail(format!("{id} p{p}: applying a fetch answer: {e}")),
        }
    }

    /// Time passes; leaders shrink the ISR of followers that fell behind.
    fn tick(&mut self, ms: i64) {
        // Flushes nobody waited for have run by now.
        self.roll_flusher.run_queued();
        self.group_commit.run_queued();
        self.now_ms += ms;
        self.clock.set(self.now_ms);
        for id in 1..=BROKERS {
            for p in 0..PARTITIONS {
                let Some(partition) = self.partition(id, p) else {
                    continue;
                };
                if let Some(change) = partition.maybe_shrink_isr(self.now_ms, LAG_MAX_MS) {
                    self.alter_isr(id, partition, change);
                }
            }
        }
    }

    /// An AlterPartitionReassignments the controller carries out: a
    /// partition moves to two or three brokers in a drawn order (a broker
    /// left out stops hosting it and deletes its replica, one taken in
    /// starts empty and catches up), or its reassignment is cancelled.
    fn reassign(&mut self) {
        let p = self.moves.below(PARTITIONS as u64) as i32;
        let target = if self.moves.chance(15) {
            None
        } else {
            let mut ids = shuffled_brokers(&mut self.moves);
            ids.truncate(2 + self.moves.below(2) as usize);
            Some(ids)
        };
        let request = Reassignment {
            topic: TOPIC.into(),
            partition_id: p,
            target: target.clone(),
        };
        match alter_reassignment(&self.image(), &request, true) {
            Ok(Some(record)) => {
                self.note(format!("reassign p{p} to {target:?}"));
                self.commit(vec![record]);
            }
            Ok(None) => {}
            Err(e) => self.note(format!(
                "reassign p{p} to {target:?} refused: {}",
                e.message
            )),
        }
    }

    /// The controller fences broker `id` (its session lapsed, or its
    /// connection closed).
    fn fence(&mut self, id: i32) {
        let image = self.image();
        let records = brokers::fence(&image, &self.config, id, self.node(id).epoch);
        self.note(format!("fence {id}"));
        self.commit(records);
    }

    /// Broker `id` caught up: the controller unfences it.
    fn maybe_unfence(&mut self, id: i32) {
        let image = self.image();
        let fenced = image.brokers.get(&id).is_some_and(|b| b.fenced);
        if !fenced
            || !self.up(id)
            || self.node(id).isolated
            || self.node(id).applied < self.images.len()
        {
            return;
        }
        let records = brokers::unfence(&image, &self.config, id, self.node(id).epoch);
        self.note(format!("unfence {id}"));
        self.commit(records);
    }

    /// Whether a power cut may hit broker `id` now without the settings
    /// promising more than they keep: always with every message flushed;
    /// without flushes, only while every other broker is up, connected,
    /// current and in every ISR (a single fault).
    fn power_cut_allowed(&self, id: i32) -> bool {
        if self.flush == Flush::EveryMessage {
            return true;
        }
        let image = self.image();
        let Some(topic) = image.topic(TOPIC) else {
            return false;
        };
        (1..=BROKERS).filter(|o| *o != id).all(|o| {
            self.up(o) && !self.node(o).isolated && self.node(o).applied == self.images.len()
        }) && topic
            .partitions
            .iter()
            .all(|p| p.isr.len() == p.replicas.len())
    }

    /// Broker `id`'s process dies; with `power`, its machine loses what
    /// was not fsynced (torn at seeded points).
    fn crash(&mut self, id: i32, power: bool) {
        let node = self.node_mut(id);
        let Some(replicas) = node.replicas.take() else {
            return;
        };
        node.fs.halt();
        assert!(
            replicas.shutdown().is_err(),
            "a halted machine writes nothing"
        );
        drop(replicas);
        if power {
            node.fs.power_cut(true);
        }
        node.fs.restart();
        self.note(format!("crash {id} (power cut: {power})"));
        self.fence(id);
    }

    fn restart(&mut self, id: i32) {
        self.note(format!("restart {id}"));
        self.register(id, true);
        // Every restart here follows a crash: an unclean stop, which takes
        // the broker out of every ISR and ELR it is in (KIP-966).
        let image = self.image();
        let records = elections::changes_for_unclean_shutdown(&image, &self.config, id);
        if !records.is_empty() {
            self.note(format!(
                "{id} stopped uncleanly: out of {} ISRs and ELRs",
                records.len()
            ));
            self.commit(records);
        }
        self.start(id);
        self.maybe_unfence(id);
    }

    /// Every record below each leader's high watermark, checked against
    /// what was seen committed before.
    fn observe_committed(&mut self) {
        for id in 1..=BROKERS {
            for p in 0..PARTITIONS {
                let Some(partition) = self.partition(id, p) else {
                    continue;
                };
                if partition.role() != Role::Leader {
                    continue;
                }
                let hw = partition.high_watermark();
                let topic_id = partition.topic_id;
                for (offset, value) in records_of(&partition, ReadLimit::HighWatermark) {
                    if offset >= hw {
                        continue;
                    }
                    match self.committed.get(&(topic_id, p, offset)) {
                        Some(seen) if *seen != value => self.fail(format!(
                            "p{p} offset {offset} was committed as {seen}, leader {id} now has {value}"
                        )),
                        Some(_) => {}
                        None => {
                            self.committed.insert((topic_id, p, offset), value);
                        }
                    }
                }
            }
        }
    }

    fn step(&mut self) {
        // The group-commit thread gets to the flushes nobody waits for
        // (a roll's, a barrier's) at moments of its own.
        if self.rng.chance(50) {
            self.roll_flusher.run_queued();
            self.group_commit.run_queued();
        }
        if self.delays.chance(40) {
            self.land_an_answer();
        }
        if self.delays.chance(40) {
            self.land_a_produce();
        }
        if self.isr_delays.chance(30) {
            self.land_an_isr_change();
        }
        if self.moves.chance(2) {
            self.reassign();
        }
        // About every 300 steps the topic goes; it comes back about 20
        // steps later.
        let deleted = self.topic_id().is_none();
        let due = self.recreations.as_mut().is_some_and(|rng| {
            if deleted {
                rng.chance(5)
            } else {
                rng.below(1000) < 3
            }
        });
        if due {
            self.delete_or_recreate();
        }
        let id = 1 + self.rng.below(BROKERS as u64) as i32;
        let p = self.rng.below(PARTITIONS as u64) as i32;
        match self.rng.below(100) {
            0..=29 => {
                // The client sends to the leader its metadata (that of a
                // broker it asked, perhaps behind) names.
                let applied = self.node(id).applied;
                let leader = (applied > 0)
                    .then(|| {
                        self.images[applied - 1]
                            .topic(TOPIC)
                            .map(|t| t.partitions[p as usize].leader)
                    })
                    .flatten()
                    .unwrap_or(-1);
                if leader > 0 {
                    self.produce(leader, p);
                }
            }
            30..=64 => self.fetch(id, p),
            65..=79 => {
                let count = 1 + self.rng.below(3) as usize;
                self.propagate(id, count);
                self.maybe_unfence(id);
            }
            80..=87 => {
                let ms = 1 + self.rng.below(15_000) as i64;
                self.tick(ms);
            }
            88..=90 => {
                if self.up(id) && self.rng.chance(50) {
                    let power = self.rng.chance(50) && self.power_cut_allowed(id);
                    self.crash(id, power);
                }
            }
            91..=94 => {
                if !self.up(id) {
                    self.restart(id);
                }
            }
            95..=96 => {
                if self.up(id) && !self.node(id).isolated && self.rng.chance(30) {
                    self.note(format!("isolate {id}"));
                    self.node_mut(id).isolated = true;
                    self.fence(id);
                }
            }
            97..=98 => {
                if self.node(id).isolated {
                    self.note(format!("heal {id}"));
                    self.node_mut(id).isolated = false;
                    self.propagate(id, usize::MAX);
                    self.maybe_unfence(id);
                }
            }
            _ => self.observe_committed(),
        }
        self.settle_produces();
    }

    /// Every fault heals; fetches run until every replica is in every ISR
    /// with the leader's whole log.
    fn heal_and_converge(&mut self) {
        for id in 1..=BROKERS {
            if !self.up(id) {
                self.restart(id);
            }
            if self.node(id).isolated {
                self.node_mut(id).isolated = false;
            }
        }
        for _ in 0..CONVERGE_ROUNDS {
            while !self.in_flight.is_empty() {
                self.land_an_answer();
            }
            while !self.held_produces.is_empty() {
                self.land_a_produce();
            }
            for held in std::mem::take(&mut self.held_isr_changes) {
                self.send_isr_change(held);
            }
            for id in 1..=BROKERS {
                self.propagate(id, usize::MAX);
                self.maybe_unfence(id);
            }
            if self.topic_id().is_none() {
                self.delete_or_recreate();
                continue;
            }
            for id in 1..=BROKERS {
                for p in 0..PARTITIONS {
                    self.fetch(id, p);
                }
            }
            self.settle_produces();
            self.tick(100);
            if self.converged() {
                return;
            }
        }
        let image = self.image();
        self.fail(format!(
            "the healed cluster did not converge: {:?}",
            image.topic(TOPIC).map(|t| t.partitions.clone())
        ));
    }

    fn converged(&self) -> bool {
        let image = self.image();
        let Some(topic) = image.topic(TOPIC) else {
            return false;
        };
        topic.partitions.iter().all(|p| {
            if p.leader < 0 || p.isr.len() != p.replicas.len() {
                return false;
            }
            let Some(leader) = self.partition(p.leader, p.partition_id) else {
                return false;
            };
            let end = leader.log_end_offset();
            leader.high_watermark() == end
                && p.replicas.iter().all(|r| {
                    self.node(*r).applied == self.images.len()
                        && self
                            .partition(*r, p.partition_id)
                            .is_some_and(|f| f.log_end_offset() == end)
                })
        })
    }

    fn check(&mut self) {
        self.observe_committed();
        let image = self.image();
        let topic = image.topic(TOPIC).expect("topic").clone();
        for p in &topic.partitions {
            let index = p.partition_id;
            let leader = self.partition(p.leader, index).expect("leader hosted");
            let final_log: BTreeMap<i64, String> =
                records_of(&leader, ReadLimit::LogEnd).into_iter().collect();
            for ((topic_id, q, offset), value) in &self.acked {
                if *q != index || *topic_id != topic.topic_id {
                    continue;
                }
                match final_log.get(offset) {
                    Some(v) if v == value => {}
                    other => self.fail(format!(
                        "acknowledged {value} at p{index} {offset} is lost: the final leader {} has {other:?}",
                        p.leader
                    )),
                }
            }
            let values: BTreeSet<&String> = final_log.values().collect();
            if values.len() != final_log.len() {
                self.fail(format!("p{index}: a record is stored twice"));
            }
            for value in values {
                let appended_to = self.appended_to.get(value);
                if appended_to != Some(&topic.topic_id) {
                    self.fail(format!(
                        "p{index}: {value} was appended to topic {appended_to:?}, and is in topic {:?}",
                        topic.topic_id
                    ));
                }
            }
            for r in &p.replicas {
                let replica = self.partition(*r, index).expect("replica hosted");
                if replica.topic_id != topic.topic_id {
                    self.fail(format!(
                        "p{index}: replica {r} hosts topic {:?}, not {:?}",
                        replica.topic_id, topic.topic_id
                    ));
                }
                if let Some(stray) = batch_outside_its_epoch(&replica) {
                    self.fail(format!("p{index}: replica {r}: {stray}"));
                }
                let copy: BTreeMap<i64, String> = records_of(&replica, ReadLimit::LogEnd)
                    .into_iter()
                    .collect();
                if copy != final_log {
                    self.fail(format!(
                        "p{index}: replica {r} has {} records, the leader {} has {}",
                        copy.len(),
                        p.leader,
                        final_log.len()
                    ));
                }
            }
            for id in (1..=BROKERS).filter(|id| !p.replicas.contains(id)) {
                let dirs = self
                    .node(id)
                    .env
                    .list_file_names(Path::new("/data"))
                    .unwrap_or_else(|e| self.fail(format!("broker {id}: listing /data: {e}")));
                let dir = format!("{TOPIC}-{index}");
                if self.partition(id, index).is_some() || dirs.contains(&dir) {
                    self.fail(format!(
                        "p{index}: broker {id} still keeps a replica, not being one of {:?}",
                        p.replicas
                    ));
                }
            }
        }
    }
}

/// Every broker id, in an order `rng` draws (Fisher-Yates).
fn shuffled_brokers(rng: &mut Rng) -> Vec<i32> {
    let mut ids: Vec<i32> = (1..=BROKERS).collect();
    for i in (1..ids.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        ids.swap(i, j);
    }
    ids
}

/// One of `held`, picked by `rng`, taken out; `None` when none is held.
fn take_one<T>(rng: &mut Rng, held: &mut Vec<T>) -> Option<T> {
    if held.is_empty() {
        return None;
    }
    let i = rng.below(held.len() as u64) as usize;
    Some(held.swap_remove(i))
}

/// (offset, value) of every record of `partition` up to `limit`.
fn records_of(partition: &Partition, limit: ReadLimit) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    walk_batches::<()>(partition, limit, |batch, header| {
        for record in RecordIter::new(batch, header).expect("uncompressed") {
            let record = record.expect("record");
            let offset = header.base_offset + i64::from(record.offset_delta);
            let value = String::from_utf8(record.value.expect("a value").to_vec()).expect("utf-8");
            out.push((offset, value));
        }
        ControlFlow::Continue(())
    });
    out
}

/// The first batch whose leader epoch is not the one the replica's epoch
/// cache places at its offset: a leader answers OffsetForLeaderEpoch and
/// follower fetches from that cache, so such a batch makes its followers
/// truncate it, fetch it again and truncate it again, for good.
fn batch_outside_its_epoch(partition: &Partition) -> Option<String> {
    walk_batches(partition, ReadLimit::LogEnd, |_, header| {
        let epoch = header.partition_leader_epoch;
        let ((found, end), (_, previous_end)) = partition
            .with_log_ref(|log| {
                (
                    log.end_offset_for_epoch(epoch),
                    log.end_offset_for_epoch(epoch - 1),
                )
            })
            .expect("open");
        if found != epoch || end <= header.last_offset() || previous_end > header.base_offset {
            return ControlFlow::Break(format!(
                "the batch at {}..={} has epoch {epoch}, which the epoch cache ends at {end} (as epoch {found}; the one before ends at {previous_end})",
                header.base_offset,
                header.last_offset()
            ));
        }
        ControlFlow::Continue(())
    })
}

/// Calls `visit` with every batch of `partition` up to `limit` (its bytes
/// and header), from the log start, until it breaks with a value.
fn walk_batches<T>(
    partition: &Partition,
    limit: ReadLimit,
    mut visit: impl FnMut(&[u8], &RecordBatchHeader) -> ControlFlow<T>,
) -> Option<T> {
    let mut next = partition.offsets().expect("offsets").log_start_offset;
    loop {
        let (bytes, _) = partition.read(next, usize::MAX, true, limit).expect("read");
        if bytes.is_empty() {
            return None;
        }
        for item in BatchIter::new(&bytes) {
            let (position, header) = item.expect("stored batches are valid");
            let batch = &bytes[position..position + header.total_size()];
            if let ControlFlow::Break(found) = visit(batch, &header) {
                return Some(found);
            }
            next = header.last_offset() + 1;
        }
    }
}

/// What one seed did, for its summary line.
struct Ran {
    produced: usize,
    acked: usize,
    /// Log lines by what they start with after the broker: crash, power
    /// cuts, isolations, truncations.
    counts: BTreeMap<&'static str, usize>,
}

fn run(seed: u64, flush: Flush, recreate: bool) -> Ran {
    let mut sim = Sim::new(seed, flush, recreate);
    for _ in 0..STEPS {
        sim.step();
    }
    sim.heal_and_converge();
    sim.check();
    sim.write_trace();
    let mut counts = BTreeMap::new();
    for (kind, needle) in [
        ("crashes", "crash "),
        ("power cuts", "power cut: true"),
        ("isolations", "isolate "),
        ("truncations", "truncate to"),
        ("isr changes", "isr of"),
        ("re-creations", "make the topic again"),
    ] {
        counts.insert(kind, sim.log.iter().filter(|l| l.contains(needle)).count());
    }
    Ran {
        produced: sim.produced,
        acked: sim.acked.len(),
        counts,
    }
}

fn seeds() -> Vec<u64> {
    // Seeds that once found a fault, run every time: 293 a follower whose
    // records of a lost leader's epoch were taken for the new leader's
    // (with a leader that does not record its epoch at the log end).
    tarn_storage::sim::seeds_from_env("TARN_REPLICATION_SIM", 64, &REGRESSION_SEEDS)
}

/// Seeds that find a fault with its fix taken out, as the generators draw
/// now (a new generator changes what every seed does, so each is checked
/// again then): 66 and 726, a follower appending an answer of an epoch it
/// moved on from (a batch outside its epoch); 10 and 756, a leader
/// appending a produce after it lost the epoch (a committed record
/// replaced, replicas that differ); 517 and 1776, a leader giving up an
/// unanswered ISR expansion the controller committed (its high watermark
/// passed a member the ISR then held: acknowledged records lost); 12 and
/// 66, a replica removed and added back while behind on the metadata,
/// taken into the ISR on fetches made before it emptied its log, then
/// elected (without the leader epoch a reassignment that drops a replica
/// moves).
const REGRESSION_SEEDS: [u64; 7] = [10, 12, 66, 517, 726, 756, 1776];

#[test]
fn acknowledged_records_survive_crashes_and_partitions_without_flushes() {
    for seed in seeds() {
        let ran = run(seed, Flush::None, false);
        println!(
            "seed {seed} (no flush): {} produced, {} acknowledged, {:?}",
            ran.produced, ran.acked, ran.counts
        );
        assert!(ran.acked > 0, "seed {seed}: nothing was acknowledged");
    }
}

#[test]
fn acknowledged_records_survive_power_cuts_anywhere_with_every_message_flushed() {
    for seed in seeds() {
        let ran = run(seed, Flush::EveryMessage, false);
        println!(
            "seed {seed} (flush.messages=1): {} produced, {} acknowledged, {:?}",
            ran.produced, ran.acked, ran.counts
        );
        assert!(ran.acked > 0, "seed {seed}: nothing was acknowledged");
    }
}

/// Found when it was written: a broker cut off by a power cut while the
/// topic was deleted and made again came back with its old log, its
/// `partition.metadata` (written without fsyncs) gone and its records
/// (fsynced by `flush.messages=1`) kept, took the directory for the new
/// topic's and was elected with the old records (seeds 14, 39 and 53 of
/// the default range, with flush.messages=1, when the file is not fsynced
/// before the first append).
#[test]
fn topics_deleted_and_made_again_keep_their_records_apart() {
    for seed in seeds() {
        for flush in [Flush::None, Flush::EveryMessage] {
            let ran = run(seed, flush, true);
            println!(
                "seed {seed} ({flush:?}, re-created): {} produced, {} acknowledged, {:?}",
                ran.produced, ran.acked, ran.counts
            );
            assert!(ran.acked > 0, "seed {seed}: nothing was acknowledged");
        }
    }
}
