//! The metadata log replicated by the quorum (`tarn_quorum`): the
//! [`MetadataLog`] a controller commits through, and the state machine
//! that publishes every committed entry on every node.
//!
//! An entry is the same versioned body the local log writes (one commit,
//! one entry). A snapshot is the image as the records that rebuild it
//! (`MetadataImage::to_records`), in that same body.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tarn_quorum::{ApplyError, Committed, Quorum, QuorumError, StateMachine};

use crate::log::{decode_entry, encode_entry, MetadataLog, MetadataLogError};
use crate::{MetadataImage, MetadataPublisher, MetadataRecord};

/// How long a commit waits for its own entry to be published here.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);

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
pub struct QuorumMetadataLog {
    quorum: Quorum,
    publisher: Arc<MetadataPublisher>,
    runtime: tokio::runtime::Handle,
}

impl QuorumMetadataLog {
    pub fn new(
        quorum: Quorum,
        publisher: Arc<MetadataPublisher>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        QuorumMetadataLog {
            quorum,
            publisher,
            runtime,
        }
    }

    /// Waits until the entry at `offset` is published on this node.
    fn published(&self, offset: u64) -> Result<(), MetadataLogError> {
        let wait = tokio::time::timeout(PUBLISH_TIMEOUT, self.publisher.wait_for(offset));
        self.runtime.block_on(wait).map_err(|_| {
            MetadataLogError::Quorum(format!(
                "entry {offset} is committed but was not applied here within {PUBLISH_TIMEOUT:?}"
            ))
        })
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

    fn prepare(&mut self) -> Result<(), MetadataLogError> {
        let index = self
            .runtime
            .block_on(self.quorum.read_barrier())
            .map_err(quorum_error)?;
        self.published(index)
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<u64, MetadataLogError> {
        let entry = Bytes::from(encode_entry(records)?);
        let committed = self
            .runtime
            .block_on(self.quorum.propose(entry))
            .map_err(quorum_error)?;
        self.published(committed.index)?;
        Ok(committed.index)
    }
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
