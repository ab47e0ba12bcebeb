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

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tarn_quorum::{ApplyError, Committed, Proposal, Quorum, QuorumError, StateMachine};

use crate::feed::MetadataFeed;
use crate::log::{decode_entry, encode_entry, Appending, MetadataLog, MetadataLogError, Proposed};
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
///
/// Entries are pipelined: [`MetadataLog::begin_append`] hands an entry to
/// Raft and returns, and the store plans the next commit on top of the
/// ones in flight while they commit (Kafka's controller does the same).
pub struct QuorumMetadataLog {
    quorum: Arc<OnceLock<Quorum>>,
    publisher: Arc<MetadataPublisher>,
    runtime: tokio::runtime::Handle,
    /// The term in which this node, leading, last confirmed it had applied
    /// everything committed (see `prepare`).
    caught_up_in_term: Option<u64>,
    /// The term in which a proposal of this node's was left with an
    /// unknown outcome, not settled yet (see the module doc); set by an
    /// entry's wait, which runs without the log.
    unsettled_in_term: Arc<Mutex<Option<u64>>>,
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
            unsettled_in_term: Arc::new(Mutex::new(None)),
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

    /// Hands `records` to the quorum as one entry, in term `term`, and
    /// returns the wait for it to commit and be applied here; an outcome
    /// left unknown marks `term` unsettled.
    fn submit(
        &self,
        quorum: &Quorum,
        term: u64,
        records: &[MetadataRecord],
    ) -> Result<InFlightEntry, MetadataLogError> {
        let entry = fenced_entry(term, records)?;
        let submitted = self.runtime.block_on(tokio::time::timeout(
            self.quorum_timeout,
            quorum.submit(entry),
        ));
        let proposal = match submitted {
            Ok(Ok(proposal)) => proposal,
            Ok(Err(e)) => {
                *self.unsettled_in_term.lock() = Some(term);
                return Err(quorum_error(e));
            }
            Err(_) => {
                *self.unsettled_in_term.lock() = Some(term);
                return Err(MetadataLogError::Quorum(format!(
                    "Raft did not take the entry within {:?}; it may still commit",
                    self.quorum_timeout
                )));
            }
        };
        Ok(InFlightEntry {
            proposal,
            term,
            runtime: self.runtime.clone(),
            unsettled_in_term: self.unsettled_in_term.clone(),
            quorum_timeout: self.quorum_timeout,
        })
    }

    fn quorum(&self) -> Result<&Quorum, MetadataLogError> {
        self.quorum
            .get()
            .ok_or(MetadataLogError::NotController { leader: None })
    }
}

/// An entry handed to the quorum, not yet known to have committed.
struct InFlightEntry {
    proposal: Proposal,
    term: u64,
    runtime: tokio::runtime::Handle,
    unsettled_in_term: Arc<Mutex<Option<u64>>>,
    quorum_timeout: Duration,
}

impl InFlightEntry {
    /// Waits until the entry committed and was applied here (Raft answers
    /// [`Proposal::committed`] only then); an outcome
    /// left unknown marks its term unsettled.
    fn wait(self) -> Result<u64, MetadataLogError> {
        let runtime = self.runtime.clone();
        runtime.block_on(self.settle())
    }

    /// [`InFlightEntry::wait`] on an async task. Dropped before it ends,
    /// even before it is first polled, it leaves the outcome unknown too.
    fn settle(self) -> impl Future<Output = Result<u64, MetadataLogError>> + Send {
        let unknown = Unknown {
            unsettled_in_term: self.unsettled_in_term.clone(),
            term: self.term,
            known: false,
        };
        async move {
            // The guard as a whole, not only the field set below.
            let mut unknown = unknown;
            let outcome =
                tokio::time::timeout(self.quorum_timeout, self.proposal.committed()).await;
            let committed = match outcome {
                // Skipped by every state machine (see `fenced_entry`).
                Ok(Ok(committed)) if committed.term != self.term => {
                    unknown.known = true;
                    return Err(MetadataLogError::NotController { leader: None });
                }
                Ok(Ok(committed)) => committed,
                // Refused before it was appended: nothing can commit later.
                Ok(Err(e @ QuorumError::NotLeader { .. })) => {
                    unknown.known = true;
                    return Err(quorum_error(e));
                }
                Ok(Err(e)) => return Err(quorum_error(e)),
                Err(_) => {
                    return Err(MetadataLogError::Quorum(format!(
                        "the entry was not known to commit within {:?}; it may still commit",
                        self.quorum_timeout
                    )))
                }
            };
            unknown.known = true;
            // Raft answers a proposal once this node's state machine
            // applied it, and entries apply in log order: everything up to
            // it is published here already.
            Ok(committed.index)
        }
    }
}

/// Marks a term unsettled when dropped, unless the outcome of the entry
/// proposed in it became known.
struct Unknown {
    unsettled_in_term: Arc<Mutex<Option<u64>>>,
    term: u64,
    known: bool,
}

impl Drop for Unknown {
    fn drop(&mut self) {
        if !self.known {
            *self.unsettled_in_term.lock() = Some(self.term);
        }
    }
}

/// Waits until this node has applied the log up to `index`: every entry
/// of the metadata up to it is then published (Raft's own entries, a
/// leader's blank one say, hold no metadata and are not).
fn applied(
    quorum: &Quorum,
    runtime: &tokio::runtime::Handle,
    index: u64,
) -> Result<(), MetadataLogError> {
    let mut status = quorum.status();
    let wait = tokio::time::timeout(
        PUBLISH_TIMEOUT,
        status.wait_for(|s| s.applied_index >= Some(index) || !s.running),
    );
    let running = runtime
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
    /// come only from this node, planned by the store on top of its own
    /// entries in flight, so the image is whole — unless one was left with
    /// an unknown outcome (the store waits for every entry in flight to
    /// end before it asks then), which an empty entry settles first; a
    /// node that lost the lead fails at the proposal.
    fn prepare(&mut self) -> Result<bool, MetadataLogError> {
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
        let unsettled = *self.unsettled_in_term.lock();
        match unsettled {
            // An entry of this term may still commit: commit an empty one
            // after it, and apply both.
            Some(unsettled) if unsettled == term => {
                self.submit(&quorum, term, &[])?.wait()?;
                *self.unsettled_in_term.lock() = None;
            }
            // A later term's read barrier below settles it: the entry was
            // committed before the new leader's first one, or never will be.
            Some(_) => *self.unsettled_in_term.lock() = None,
            None => {}
        }
        if self.caught_up_in_term == Some(term) {
            return Ok(unsettled.is_some());
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
        applied(&quorum, &self.runtime, index)?;
        if quorum.status().borrow().term == term {
            self.caught_up_in_term = Some(term);
        }
        Ok(true)
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<u64, MetadataLogError> {
        let quorum = self.quorum()?.clone();
        let term = quorum.status().borrow().term;
        self.submit(&quorum, term, records)?.wait()
    }

    fn begin_append(&mut self, records: &[MetadataRecord]) -> Result<Appending, MetadataLogError> {
        let quorum = self.quorum()?.clone();
        let term = quorum.status().borrow().term;
        let entry = self.submit(&quorum, term, records)?;
        Ok(Appending::InFlight(Box::new(move || entry.wait())))
    }

    /// Once this node leads and has caught up in its term, with nothing
    /// unsettled: `prepare` would return at once.
    fn proposes_without_blocking(&self) -> bool {
        let Some(quorum) = self.quorum.get() else {
            return false;
        };
        let status = quorum.status();
        let status = status.borrow();
        status.is_leader
            && self.caught_up_in_term == Some(status.term)
            && self.unsettled_in_term.lock().is_none()
    }

    fn propose(&mut self, records: &[MetadataRecord]) -> Result<Proposed, MetadataLogError> {
        let quorum = self.quorum()?.clone();
        let term = quorum.status().borrow().term;
        let entry = fenced_entry(term, records)?;
        // Raft takes a proposal into a queue (of 65,536) without waiting.
        let submit = std::pin::pin!(quorum.submit(entry));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let proposal = match submit.poll(&mut cx) {
            std::task::Poll::Ready(Ok(proposal)) => proposal,
            std::task::Poll::Ready(Err(e)) => {
                *self.unsettled_in_term.lock() = Some(term);
                return Err(quorum_error(e));
            }
            // Not sent: the future is dropped before Raft took it.
            std::task::Poll::Pending => {
                return Err(MetadataLogError::Quorum(
                    "Raft's queue of proposals is full; retry".into(),
                ))
            }
        };
        let entry = InFlightEntry {
            proposal,
            term,
            runtime: self.runtime.clone(),
            unsettled_in_term: self.unsettled_in_term.clone(),
            quorum_timeout: self.quorum_timeout,
        };
        Ok(Box::pin(entry.settle()))
    }
}

/// The entry that commits `records` as one change, unfenced (see
/// [`fenced_entry`]): for callers that propose themselves (a simulation
/// driving the quorum directly).
pub fn entry(records: &[MetadataRecord]) -> Result<Bytes, MetadataLogError> {
    Ok(Bytes::from(encode_entry(records)?))
}

/// Marks an entry fenced to a term; an unfenced body is JSON and starts
/// with `{`.
const FENCED: u8 = 1;

/// The entry that commits `records` as one change planned by the leader
/// of `term`: what [`QuorumMetadataLog`] proposes. Every node's state
/// machine skips it if it lands in the log in another term (its leader
/// lost the lead and won it back between planning and appending), since
/// the plan may not have seen what another leader committed meanwhile,
/// or may rest on entries of its own that were lost. Kafka's controller
/// fences its appends with the leader epoch the same way.
pub fn fenced_entry(term: u64, records: &[MetadataRecord]) -> Result<Bytes, MetadataLogError> {
    let body = encode_entry(records)?;
    let mut entry = Vec::with_capacity(9 + body.len());
    entry.push(FENCED);
    entry.extend_from_slice(&term.to_be_bytes());
    entry.extend_from_slice(&body);
    Ok(Bytes::from(entry))
}

/// An entry's fence (the term it was planned in; none for an unfenced
/// entry) and its records.
fn decode_fenced(bytes: &Bytes) -> Result<(Option<u64>, Vec<MetadataRecord>), ApplyError> {
    match bytes.first() {
        Some(&FENCED) => {
            let Some(term) = bytes.get(1..9) else {
                return Err("a fenced metadata entry ends inside its term".into());
            };
            let term = u64::from_be_bytes(term.try_into().expect("eight bytes"));
            Ok((Some(term), decode(&bytes.slice(9..))?))
        }
        _ => Ok((None, decode(bytes)?)),
    }
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
        let (fence, records) = decode_fenced(entry)?;
        if let Some(planned) = fence.filter(|&planned| planned != committed.term) {
            tracing::info!(
                index = committed.index,
                planned,
                term = committed.term,
                "skipping a metadata entry planned in another term than it landed in"
            );
            return Ok(());
        }
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
    use crate::testing::topic;
    use crate::MetadataStore;

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
            // No elections while the tests delay messages on a busy
            // machine: a new leader may drop the entries they look for.
            config.election_timeout_ms = 3000;
            config.fetch_timeout_ms = 6000;
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
        net.set_faults(tarn_quorum::sim::Faults::delay(150));
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

    fn try_async<'a>(
        store: &'a MetadataStore,
        name: &str,
        id: u8,
    ) -> Option<impl std::future::Future<Output = Result<(), Failed>> + 'a> {
        let record = topic(name, id);
        store
            .try_commit_async(move |_| Ok::<_, Failed>((vec![record], ())))
            .ok()
    }

    /// Commits `record` on the blocking path; whether its plan saw topic
    /// `seen`.
    fn commit_seeing(store: &MetadataStore, seen: &str, record: MetadataRecord) -> bool {
        tokio::task::block_in_place(|| {
            store.commit_with(|image| {
                let saw = image.topic(seen).is_some();
                Ok::<_, Failed>((vec![record], saw))
            })
        })
        .unwrap()
    }

    /// [`try_async`] on a leader that has caught up, which a busy machine
    /// may take some elections to settle on: a commit that changes nothing
    /// catches the leader up between tries.
    async fn async_when_caught_up<'a>(
        store: &'a MetadataStore,
        name: &str,
        id: u8,
    ) -> impl std::future::Future<Output = Result<(), Failed>> + 'a {
        for _ in 0..100 {
            if let Some(commit) = try_async(store, name, id) {
                return commit;
            }
            let caught_up = tokio::task::block_in_place(|| {
                store.commit_with(|_| Ok::<_, Failed>((vec![], ())))
            });
            if caught_up.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("the leader never caught up");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_commits_from_an_async_task_once_nothing_is_to_be_waited_for() {
        let fs = Arc::new(SimFileSystem::new(3));
        let (store, quorum) = start(&fs).await;
        // A new leader first confirms it has applied its term's start,
        // which blocks.
        assert!(try_async(&store, "early", 1).is_none());
        commit(&store, topic("first", 2));
        try_async(&store, "second", 3)
            .expect("caught up: no need to block")
            .await
            .unwrap();
        // Published here before the wait ended.
        assert!(store.image().topic("second").is_some());
        // An outcome known leaves nothing to settle: the next one too.
        try_async(&store, "third", 4)
            .expect("nothing left unknown")
            .await
            .unwrap();
        quorum.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_async_commit_dropped_before_its_outcome_is_settled_before_the_next_plan() {
        let net = SimNetwork::new(13);
        let (store, quorums) = three_voters(&net, Duration::from_secs(5)).await;
        // An entry takes about 300 ms to commit; its wait is given up on
        // (the task dropped) long before.
        net.set_faults(tarn_quorum::sim::Faults::delay(150));
        let dropped = async_when_caught_up(&store, "dropped", 2).await;
        assert!(tokio::time::timeout(Duration::from_millis(20), dropped)
            .await
            .is_err());
        // Its outcome is unknown: the next commit must block and settle it.
        assert!(try_async(&store, "next", 3).is_none());
        net.set_faults(tarn_quorum::sim::Faults::NONE);
        assert!(
            commit_seeing(&store, "dropped", topic("next", 3)),
            "planned without an entry that committed before it"
        );
        async_when_caught_up(&store, "after", 4)
            .await
            .await
            .unwrap();
        // The same when the wait is dropped before it was ever polled.
        net.set_faults(tarn_quorum::sim::Faults::delay(150));
        drop(async_when_caught_up(&store, "unpolled", 5).await);
        assert!(try_async(&store, "later", 6).is_none());
        net.set_faults(tarn_quorum::sim::Faults::NONE);
        assert!(
            commit_seeing(&store, "unpolled", topic("later", 6)),
            "planned without an entry that committed before it"
        );
        for quorum in quorums {
            quorum.shutdown().await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_are_pipelined_and_each_plan_sees_the_ones_in_flight() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let net = SimNetwork::new(5);
        let (store, quorums) = three_voters(&net, Duration::from_secs(5)).await;
        // An entry takes about 60 ms to commit: long enough for the
        // others to be planned while it is in flight.
        net.set_faults(tarn_quorum::sim::Faults::delay(30));
        const WRITERS: usize = 8;
        let creators = AtomicUsize::new(0);
        let planned_on_top = AtomicUsize::new(0);
        let start = std::sync::Barrier::new(WRITERS);
        let runtime = tokio::runtime::Handle::current();
        tokio::task::block_in_place(|| {
            std::thread::scope(|scope| {
                for i in 0..WRITERS {
                    let (store, creators, planned_on_top, start, runtime) =
                        (&store, &creators, &planned_on_top, &start, &runtime);
                    scope.spawn(move || {
                        let _runtime = runtime.enter();
                        start.wait();
                        store
                            .commit_with(|image| {
                                if image.topics().count() > store.image().topics().count() {
                                    planned_on_top.fetch_add(1, Ordering::Relaxed);
                                }
                                let mut records = vec![topic(&format!("own-{i}"), 10 + i as u8)];
                                if image.topic("shared").is_none() {
                                    creators.fetch_add(1, Ordering::Relaxed);
                                    records.push(topic("shared", 2));
                                }
                                Ok::<_, Failed>((records, ()))
                            })
                            .unwrap();
                    });
                }
            })
        });
        assert_eq!(
            creators.load(Ordering::Relaxed),
            1,
            "a plan did not see an entry in flight before it"
        );
        assert!(
            planned_on_top.load(Ordering::Relaxed) > 0,
            "no commit was planned while another was in flight"
        );
        let image = store.image();
        for i in 0..WRITERS {
            assert!(image.topic(&format!("own-{i}")).is_some(), "own-{i} lost");
        }
        assert!(image.topic("shared").is_some());
        for quorum in quorums {
            quorum.shutdown().await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_that_lands_in_another_term_than_planned_is_skipped_everywhere() {
        let publisher = Arc::new(MetadataPublisher::new(MetadataImage::default(), 0));
        let mut machine = PublishingMachine::new(publisher.clone());
        let planned = fenced_entry(3, &[topic("stale", 1)]).unwrap();
        machine
            .apply(Committed { index: 1, term: 4 }, &planned)
            .unwrap();
        assert!(publisher.image().topic("stale").is_none());
        let current = fenced_entry(4, &[topic("current", 2)]).unwrap();
        machine
            .apply(Committed { index: 2, term: 4 }, &current)
            .unwrap();
        assert!(publisher.image().topic("current").is_some());
        // Entries written before fencing (bare JSON) still apply.
        machine
            .apply(
                Committed { index: 3, term: 4 },
                &entry(&[topic("old", 3)]).unwrap(),
            )
            .unwrap();
        assert!(publisher.image().topic("old").is_some());
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
