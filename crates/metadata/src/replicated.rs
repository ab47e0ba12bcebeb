//! The metadata log replicated by the quorum (`tarn_quorum`): the
//! [`MetadataLog`] a controller commits through, and the state machine
//! that publishes every committed entry on every node.
//!
//! An entry is the same versioned body the local log writes (one commit,
//! one entry). A snapshot is the image as the records that rebuild it
//! (`MetadataImage::to_records`), in that same body.
//!
//! A commit is planned against the image, so the image must hold every
//! entry that can still commit before it: once per term after a read
//! barrier, and again after one of this node's own proposals was left with
//! an unknown outcome (it timed out, or committed but was not applied here
//! in time). That entry may commit later, after a plan made without it (a
//! fence planned on an image where the broker still leads, say); an empty
//! entry committed after it settles it, since entries commit in log order.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tarn_quorum::{ApplyError, Committed, Quorum, QuorumError, StateMachine};

use crate::feed::MetadataFeed;
use crate::log::{decode_entry, encode_entry, MetadataLog, MetadataLogError};
use crate::{MetadataImage, MetadataPublisher, MetadataRecord};

/// How long a commit waits for its own entry to be published here.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a read barrier or a proposal may wait for the quorum: a
/// leader cut off from it would otherwise wait forever (and hold up every
/// other commit, and the node's shutdown).
const QUORUM_TIMEOUT: Duration = Duration::from_secs(5);

fn quorum_error(e: QuorumError) -> MetadataLogError {
    match e {
        QuorumError::NotLeader { leader } => MetadataLogError::NotController {
            leader: leader.and_then(|id| i32::try_from(id).ok()),
        },
        other => MetadataLogError::Quorum(other.to_string()),
    }
}

/// Commits through the quorum. Its calls block (the store runs them off
/// the async workers) and must run inside a multi-threaded tokio runtime.
/// The quorum is set once it has started (its state machine must exist
/// first); until then nothing commits.
pub struct QuorumMetadataLog {
    quorum: Arc<OnceLock<Quorum>>,
    publisher: Arc<MetadataPublisher>,
    runtime: tokio::runtime::Handle,
    /// The term in which this node, leading, last confirmed it had applied
    /// everything committed (see `prepare`).
    caught_up_in_term: Option<u64>,
    /// The term in which a proposal of this node's was left with an
    /// unknown outcome, not settled yet (see the module doc).
    unsettled_in_term: Option<u64>,
    /// How long a read barrier or a proposal may wait for the quorum.
    quorum_timeout: Duration,
}

impl QuorumMetadataLog {
    pub fn new(
        quorum: Arc<OnceLock<Quorum>>,
        publisher: Arc<MetadataPublisher>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        QuorumMetadataLog {
            quorum,
            publisher,
            runtime,
            caught_up_in_term: None,
            unsettled_in_term: None,
            quorum_timeout: QUORUM_TIMEOUT,
        }
    }

    /// The same log with another quorum timeout, for tests that make
    /// proposals time out.
    #[cfg(test)]
    fn with_quorum_timeout(mut self, timeout: Duration) -> Self {
        self.quorum_timeout = timeout;
        self
    }

    /// Proposes `records` as one entry and waits until it is applied
    /// here; an outcome left unknown marks `term` unsettled.
    fn propose_and_apply(
        &mut self,
        quorum: &Quorum,
        term: u64,
        records: &[MetadataRecord],
    ) -> Result<u64, MetadataLogError> {
        let entry = entry(records)?;
        let proposed = self.runtime.block_on(tokio::time::timeout(
            self.quorum_timeout,
            quorum.propose(entry),
        ));
        let committed = match proposed {
            Ok(Ok(committed)) => committed,
            // Refused before it was appended: nothing can commit later.
            Ok(Err(e @ QuorumError::NotLeader { .. })) => return Err(quorum_error(e)),
            Ok(Err(e)) => {
                self.unsettled_in_term = Some(term);
                return Err(quorum_error(e));
            }
            Err(_) => {
                self.unsettled_in_term = Some(term);
                return Err(MetadataLogError::Quorum(format!(
                    "the entry was not known to commit within {:?}; it may still commit",
                    self.quorum_timeout
                )));
            }
        };
        if let Err(e) = self.applied(committed.index) {
            self.unsettled_in_term = Some(term);
            return Err(e);
        }
        Ok(committed.index)
    }

    fn quorum(&self) -> Result<&Quorum, MetadataLogError> {
        self.quorum
            .get()
            .ok_or(MetadataLogError::NotController { leader: None })
    }

    /// Waits until this node has applied the log up to `index`: every
    /// entry of the metadata up to it is then published (Raft's own
    /// entries, a leader's blank one say, hold no metadata and are not).
    fn applied(&self, index: u64) -> Result<(), MetadataLogError> {
        let mut status = self.quorum()?.status();
        let wait = tokio::time::timeout(
            PUBLISH_TIMEOUT,
            status.wait_for(|s| s.applied_index >= Some(index) || !s.running),
        );
        let running = self
            .runtime
            .block_on(wait)
            .map(|seen| seen.map(|s| s.running).unwrap_or(false));
        match running {
            Ok(true) => Ok(()),
            Ok(false) => Err(MetadataLogError::Quorum("the quorum stopped".into())),
            Err(_) => Err(MetadataLogError::Quorum(format!(
                "entry {index} is committed but was not applied here within {PUBLISH_TIMEOUT:?}"
            ))),
        }
    }
}

impl MetadataLog for QuorumMetadataLog {
    /// The quorum replays its own log into the state machine.
    fn replay(&self) -> Result<Vec<MetadataRecord>, MetadataLogError> {
        Ok(Vec::new())
    }

    fn end_offset(&self) -> u64 {
        self.publisher.published_offset()
    }

    /// Once per term: a new leader may not have applied its
    /// predecessors' last entries yet, so it confirms its leadership with
    /// the quorum and waits until it has. Later commits in the same term
    /// come only from this node, each applied here before the next is
    /// planned (the store runs them one at a time), so the image is
    /// already whole — unless one was left with an unknown outcome, which
    /// an empty entry settles first; a node that lost the lead fails at
    /// the proposal.
    fn prepare(&mut self) -> Result<(), MetadataLogError> {
        let quorum = self.quorum()?.clone();
        let term = {
            let status = quorum.status();
            let status = status.borrow();
            if !status.is_leader {
                return Err(MetadataLogError::NotController {
                    leader: status.leader.and_then(|id| i32::try_from(id).ok()),
                });
            }
            status.term
        };
        match self.unsettled_in_term {
            // An entry of this term may still commit: commit an empty one
            // after it, and apply both.
            Some(unsettled) if unsettled == term => {
                self.propose_and_apply(&quorum, term, &[])?;
                self.unsettled_in_term = None;
            }
            // A later term's read barrier below settles it: the entry was
            // committed before the new leader's first one, or never will be.
            Some(_) => self.unsettled_in_term = None,
            None => {}
        }
        if self.caught_up_in_term == Some(term) {
            return Ok(());
        }
        let index = self
            .runtime
            .block_on(tokio::time::timeout(
                self.quorum_timeout,
                quorum.read_barrier(),
            ))
            .map_err(|_| {
                MetadataLogError::Quorum(format!(
                    "no quorum confirmed this leader within {:?}",
                    self.quorum_timeout
                ))
            })?
            .map_err(quorum_error)?;
        self.applied(index)?;
        if quorum.status().borrow().term == term {
            self.caught_up_in_term = Some(term);
        }
        Ok(())
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<u64, MetadataLogError> {
        let quorum = self.quorum()?.clone();
        let term = quorum.status().borrow().term;
        self.propose_and_apply(&quorum, term, records)
    }
}

/// The entry that commits `records` as one change: what
/// [`QuorumMetadataLog`] proposes, for callers that propose themselves (a
/// simulation driving the quorum directly).
pub fn entry(records: &[MetadataRecord]) -> Result<Bytes, MetadataLogError> {
    Ok(Bytes::from(encode_entry(records)?))
}

/// The quorum's state machine on every node: publishes each committed
/// entry (and each installed snapshot) through the node's publisher, by
/// way of the feed that serves them to nodes that are not voters.
pub struct PublishingMachine {
    feed: Arc<MetadataFeed>,
}

impl PublishingMachine {
    pub fn new(publisher: Arc<MetadataPublisher>) -> Self {
        PublishingMachine {
            feed: Arc::new(MetadataFeed::new(publisher)),
        }
    }

    /// What this node serves to brokers that follow the log.
    pub fn feed(&self) -> Arc<MetadataFeed> {
        self.feed.clone()
    }
}

fn decode(bytes: &Bytes) -> Result<Vec<MetadataRecord>, ApplyError> {
    let mut records = Vec::new();
    decode_entry(bytes, &mut records).map_err(|reason| -> ApplyError {
        format!("a committed metadata entry cannot be read: {reason}").into()
    })?;
    Ok(records)
}

impl StateMachine for PublishingMachine {
    fn apply(&mut self, committed: Committed, entry: &Bytes) -> Result<(), ApplyError> {
        let records = decode(entry)?;
        // A listener's failure is logged by the publisher and leaves the
        // entry published: the image must not stop at it.
        if let Err(e) = self.feed.publish(committed.index, records) {
            tracing::error!(error = %e, "applying a committed metadata entry on this node");
        }
        Ok(())
    }

    fn snapshot(&self) -> Bytes {
        let records = self.feed.publisher().image().to_records();
        Bytes::from(encode_entry(&records).expect("an image's records encode"))
    }

    fn install_snapshot(&mut self, last: Committed, image: &Bytes) -> Result<(), ApplyError> {
        let mut rebuilt = MetadataImage::default();
        for record in decode(image)? {
            rebuilt.apply(&record);
        }
        if let Err(e) = self.feed.install(last.index, rebuilt) {
            tracing::error!(error = %e, "installing a metadata snapshot on this node");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use tarn_quorum::sim::SimNetwork;
    use tarn_quorum::QuorumConfig;
    use tarn_storage::sim::SimFileSystem;
    use tarn_storage::FileSystem;

    use super::*;
    use crate::MetadataStore;

    fn topic(name: &str, id: u8) -> MetadataRecord {
        MetadataRecord::Topic {
            name: name.into(),
            topic_id: [id; 16],
        }
    }

    /// A store over a quorum of one, on a simulated disk.
    async fn start(fs: &Arc<SimFileSystem>) -> (MetadataStore, Quorum) {
        let publisher = Arc::new(MetadataPublisher::new(MetadataImage::default(), 0));
        let cell = Arc::new(OnceLock::new());
        let log = QuorumMetadataLog::new(
            cell.clone(),
            publisher.clone(),
            tokio::runtime::Handle::current(),
        );
        let store = MetadataStore::replicated(Box::new(log), publisher.clone());
        let voters = BTreeMap::from([(1, "node-1".to_string())]);
        let mut config = QuorumConfig::new(1, voters, PathBuf::from("/data/__cluster_metadata-0"));
        config.snapshot_every = 4;
        let fs: Arc<dyn FileSystem> = fs.clone();
        let quorum = Quorum::start(
            config,
            fs,
            SimNetwork::new(1).transport(1),
            Box::new(PublishingMachine::new(publisher)),
        )
        .await
        .unwrap();
        cell.set(quorum.clone()).unwrap();
        quorum.status().wait_for(|s| s.is_leader).await.unwrap();
        (store, quorum)
    }

    #[derive(Debug)]
    #[allow(dead_code)] // read by the panic message of `unwrap`
    struct Failed(String);

    impl From<MetadataLogError> for Failed {
        fn from(e: MetadataLogError) -> Self {
            Failed(e.to_string())
        }
    }

    impl From<crate::PublishError> for Failed {
        fn from(e: crate::PublishError) -> Self {
            Failed(e.to_string())
        }
    }

    fn commit(store: &MetadataStore, record: MetadataRecord) {
        tokio::task::block_in_place(|| store.commit_with(|_| Ok::<_, Failed>((vec![record], ()))))
            .unwrap();
    }

    /// Three voters on a simulated network, each with a store whose
    /// proposals time out after `timeout`; the store of the leader, which
    /// has committed topic "ready".
    async fn three_voters(
        net: &Arc<SimNetwork>,
        timeout: Duration,
    ) -> (MetadataStore, Vec<Quorum>) {
        let voters: BTreeMap<u64, String> = (1..=3).map(|i| (i, format!("node-{i}"))).collect();
        let mut stores = BTreeMap::new();
        let mut quorums = Vec::new();
        for id in 1..=3u64 {
            let publisher = Arc::new(MetadataPublisher::new(MetadataImage::default(), 0));
            let cell = Arc::new(OnceLock::new());
            let log = QuorumMetadataLog::new(
                cell.clone(),
                publisher.clone(),
                tokio::runtime::Handle::current(),
            )
            .with_quorum_timeout(timeout);
            stores.insert(
                id,
                MetadataStore::replicated(Box::new(log), publisher.clone()),
            );
            let mut config = QuorumConfig::new(
                id,
                voters.clone(),
                PathBuf::from("/data/__cluster_metadata-0"),
            );
            config.rng_seed = Some(id);
            let fs: Arc<dyn FileSystem> = Arc::new(SimFileSystem::new(id));
            let quorum = Quorum::start(
                config,
                fs,
                net.transport(id),
                Box::new(PublishingMachine::new(publisher)),
            )
            .await
            .unwrap();
            net.register(quorum.clone());
            cell.set(quorum.clone()).unwrap();
            quorums.push(quorum);
        }
        // Elections may still be settling: the store that commits first
        // belongs to the leader.
        for _ in 0..200 {
            for (id, store) in &stores {
                let ready = tokio::task::block_in_place(|| {
                    store.commit_with(|_| Ok::<_, Failed>((vec![topic("ready", 1)], ())))
                });
                if ready.is_ok() {
                    let id = *id;
                    return (stores.remove(&id).unwrap(), quorums);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no leader committed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_with_an_unknown_outcome_is_settled_before_the_next_plan() {
        let net = SimNetwork::new(11);
        let (store, quorums) = three_voters(&net, Duration::from_millis(100)).await;
        // Each message now takes 150 ms: an entry needs about 300 ms to
        // commit, and the proposal gives up after 100 ms.
        net.set_faults(tarn_quorum::sim::Faults {
            loss_per_mille: 0,
            delay_ms_min: 150,
            delay_ms_max: 150,
        });
        let first = tokio::task::block_in_place(|| {
            store.commit_with(|_| Ok::<_, Failed>((vec![topic("first", 2)], ())))
        });
        assert!(first.is_err(), "the proposal should have timed out");
        // A plan made now must see "first", which may still commit; until
        // the commit is settled, no plan is made at all.
        let plans_without_first = std::sync::atomic::AtomicUsize::new(0);
        let plan = |name: &str, id: u8| {
            tokio::task::block_in_place(|| {
                store.commit_with(|image| {
                    if image.topic("first").is_none() {
                        plans_without_first.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok::<_, Failed>((vec![topic(name, id)], ()))
                })
            })
        };
        let _ = plan("second", 3);
        net.set_faults(tarn_quorum::sim::Faults::NONE);
        let mut third = plan("third", 4);
        for _ in 0..50 {
            if third.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            third = plan("third", 4);
        }
        third.unwrap();
        assert_eq!(
            plans_without_first.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "a plan saw an image without an entry that committed before it"
        );
        assert!(store.image().topic("first").is_some());
        for quorum in quorums {
            quorum.shutdown().await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commits_are_published_and_survive_a_restart_through_snapshots() {
        let fs = Arc::new(SimFileSystem::new(7));
        let (store, quorum) = start(&fs).await;
        for i in 0..10u8 {
            commit(&store, topic(&format!("t{i}"), i + 1));
        }
        assert_eq!(store.image().topics().count(), 10);
        quorum.shutdown().await.unwrap();

        let (store, quorum) = start(&fs).await;
        // Leading again is not having applied the log: the entries after
        // the snapshot are applied once this term confirms its commit
        // index, as the store waits for before it plans (see `prepare`).
        let index = quorum.read_barrier().await.unwrap();
        quorum
            .status()
            .wait_for(|s| s.applied_index >= Some(index))
            .await
            .unwrap();
        assert_eq!(
            store.image().topics().count(),
            10,
            "replayed from snapshot and log"
        );
        commit(&store, topic("after", 99));
        assert!(store.image().topic("after").is_some());
        quorum.shutdown().await.unwrap();
    }
}
