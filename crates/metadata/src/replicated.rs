//! The metadata log replicated by the quorum (`tarn_quorum`): the
//! [`MetadataLog`] a controller commits through, and the state machine
//! that publishes every committed entry on every node.
//!
//! An entry is the same versioned body the local log writes (one commit,
//! one entry). A snapshot is the image as the records that rebuild it
//! (`MetadataImage::to_records`), in that same body.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tarn_quorum::{ApplyError, Committed, Quorum, QuorumError, StateMachine};

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
        }
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
    /// already whole; a node that lost the lead fails at the proposal.
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
        if self.caught_up_in_term == Some(term) {
            return Ok(());
        }
        let index = self
            .runtime
            .block_on(tokio::time::timeout(QUORUM_TIMEOUT, quorum.read_barrier()))
            .map_err(|_| {
                MetadataLogError::Quorum(format!(
                    "no quorum confirmed this leader within {QUORUM_TIMEOUT:?}"
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
        let entry = entry(records)?;
        let committed = self
            .runtime
            .block_on(tokio::time::timeout(
                QUORUM_TIMEOUT,
                self.quorum()?.propose(entry),
            ))
            .map_err(|_| {
                MetadataLogError::Quorum(format!(
                    "the entry was not known to commit within {QUORUM_TIMEOUT:?}; it may still commit"
                ))
            })?
            .map_err(quorum_error)?;
        self.applied(committed.index)?;
        Ok(committed.index)
    }
}

/// The entry that commits `records` as one change: what
/// [`QuorumMetadataLog`] proposes, for callers that propose themselves (a
/// simulation driving the quorum directly).
pub fn entry(records: &[MetadataRecord]) -> Result<Bytes, MetadataLogError> {
    Ok(Bytes::from(encode_entry(records)?))
}

/// The quorum's state machine on every node: publishes each committed
/// entry (and each installed snapshot) through the node's publisher.
pub struct PublishingMachine {
    publisher: Arc<MetadataPublisher>,
}

impl PublishingMachine {
    pub fn new(publisher: Arc<MetadataPublisher>) -> Self {
        PublishingMachine { publisher }
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
        if let Err(e) = self.publisher.publish(committed.index, &records) {
            tracing::error!(error = %e, "applying a committed metadata entry on this node");
        }
        Ok(())
    }

    fn snapshot(&self) -> Bytes {
        let records = self.publisher.image().to_records();
        Bytes::from(encode_entry(&records).expect("an image's records encode"))
    }

    fn install_snapshot(&mut self, last: Committed, image: &Bytes) -> Result<(), ApplyError> {
        let mut rebuilt = MetadataImage::default();
        for record in decode(image)? {
            rebuilt.apply(&record);
        }
        if let Err(e) = self.publisher.install(last.index, rebuilt) {
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
