//! Cluster metadata: a log of records applied to an immutable image.
//!
//! Nothing changes metadata except appending records through
//! `MetadataStore::commit`, which makes them durable in the `MetadataLog`
//! first and only then publishes a new `MetadataImage`. A single node runs
//! this over a local file; a cluster will put a Raft quorum (openraft)
//! behind the same `MetadataLog` trait.

pub mod brokers;
pub mod client_quotas;
pub mod dynamic_config;
pub mod elections;
pub mod feed;
mod image;
mod log;
pub mod placement;
pub mod publisher;
pub mod reassignments;
mod records;
pub mod replicated;
pub mod topics;

pub use image::{BrokerInfo, MetadataImage, PartitionInfo, QuotaEntity, TopicInfo, NO_LEADER};
pub use log::{FileMetadataLog, MetadataLog, MetadataLogError};
pub use publisher::{MetadataDelta, MetadataListener, MetadataPublisher, PublishError};
pub use records::{Endpoint, MetadataRecord};

use std::sync::Arc;

use parking_lot::Mutex;
use rand::RngCore;

use tarn_protocol::Uuid;

/// The metadata log together with the publisher that applies what it
/// commits.
pub struct MetadataStore {
    log: Mutex<Box<dyn MetadataLog>>,
    publisher: Arc<MetadataPublisher>,
}

impl MetadataStore {
    /// A store over a replicated log whose entries reach `publisher`
    /// through the quorum (see `replicated`).
    pub fn replicated(log: Box<dyn MetadataLog>, publisher: Arc<MetadataPublisher>) -> Self {
        MetadataStore {
            log: Mutex::new(log),
            publisher,
        }
    }

    /// Replays the whole log into a fresh image.
    pub fn open(log: Box<dyn MetadataLog>) -> Result<Self, MetadataLogError> {
        let mut image = MetadataImage::default();
        for record in log.replay()? {
            image.apply(&record);
        }
        let offset = log.end_offset();
        Ok(MetadataStore {
            log: Mutex::new(log),
            publisher: Arc::new(MetadataPublisher::new(image, offset)),
        })
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.publisher.image()
    }

    pub fn publisher(&self) -> &Arc<MetadataPublisher> {
        &self.publisher
    }

    /// Builds records from the current image and commits them atomically
    /// with respect to other commits: `build` sees the image as it is under
    /// the commit lock, so check-then-act (e.g. "topic does not exist yet")
    /// cannot race. `build` returns the records and a value for the caller.
    /// The entry is published (and its listeners run) before this returns;
    /// a listener's failure is the caller's error, though the entry stays
    /// committed.
    pub fn commit_with<T, E>(
        &self,
        build: impl FnOnce(&MetadataImage) -> Result<(Vec<MetadataRecord>, T), E>,
    ) -> Result<T, E>
    where
        E: From<MetadataLogError> + From<PublishError>,
    {
        let mut log = self.log.lock();
        log.prepare()?;
        let current = self.image();
        let (records, value) = build(&current)?;
        if records.is_empty() {
            return Ok(value);
        }
        let offset = log.append(&records)?;
        self.publisher.publish(offset, &records)?;
        Ok(value)
    }
}

/// A random topic or cluster id, never one Kafka reserves.
pub fn random_uuid() -> Uuid {
    let mut bytes = [0u8; 16];
    loop {
        rand::thread_rng().fill_bytes(&mut bytes);
        // Kafka reserves the all-zero id and ids whose base64 starts with '-'.
        if bytes != [0; 16] && bytes[0] & 0xfc != 0xf8 {
            return Uuid(bytes);
        }
    }
}
