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
pub use log::{
    Appending, FileMetadataLog, MetadataLog, MetadataLogError, Proposed, METADATA_LOG_FILE,
};
pub use publisher::{MetadataDelta, MetadataListener, MetadataPublisher, PublishError};
pub use records::{Endpoint, MetadataRecord};

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use rand::RngCore;

use tarn_protocol::Uuid;

/// The metadata log together with the publisher that applies what it
/// commits.
pub struct MetadataStore {
    planner: Mutex<Planner>,
    publisher: Arc<MetadataPublisher>,
    in_flight: Mutex<InFlight>,
    /// Signalled whenever an entry in flight ends.
    ended: Condvar,
}

/// What plans commits, one at a time: the log, and the image that holds
/// this node's entries in flight.
struct Planner {
    log: Box<dyn MetadataLog>,
    /// The published image with every entry in flight applied, in order;
    /// `None` when nothing is in flight (plans see the published image).
    speculative: Option<Arc<MetadataImage>>,
}

/// The entries begun and not ended yet, numbered in the order begun.
#[derive(Default)]
struct InFlight {
    outstanding: BTreeSet<u64>,
    next: u64,
    /// Entries that ended without committing, ever.
    failures: u64,
    /// An entry ended without committing since plans last started from
    /// the published image: later plans made on top of it are void.
    poisoned: bool,
}

impl MetadataStore {
    /// A store over a replicated log whose entries reach `publisher`
    /// through the quorum (see `replicated`).
    pub fn replicated(log: Box<dyn MetadataLog>, publisher: Arc<MetadataPublisher>) -> Self {
        MetadataStore {
            planner: Mutex::new(Planner {
                log,
                speculative: None,
            }),
            publisher,
            in_flight: Mutex::new(InFlight::default()),
            ended: Condvar::new(),
        }
    }

    /// Replays the whole log into a fresh image.
    pub fn open(log: Box<dyn MetadataLog>) -> Result<Self, MetadataLogError> {
        let mut image = MetadataImage::default();
        for record in log.replay()? {
            image.apply(&record);
        }
        let offset = log.end_offset();
        Ok(MetadataStore::replicated(
            log,
            Arc::new(MetadataPublisher::new(image, offset)),
        ))
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
    ///
    /// Over a replicated log, commits are pipelined: `build` sees the
    /// image with this node's entries still in flight applied, and the
    /// lock is released once the entry is handed to the log, so the next
    /// commit is planned while this one commits. Entries commit in the
    /// order begun, so an entry that commits proves every plan it was made
    /// on top of; an answer that commits nothing waits for the entries in
    /// flight when it was made.
    pub fn commit_with<T, E>(
        &self,
        build: impl FnOnce(&MetadataImage) -> Result<(Vec<MetadataRecord>, T), E>,
    ) -> Result<T, E>
    where
        E: From<MetadataLogError> + From<PublishError>,
    {
        let mut planner = self.planner.lock();
        let mut fresh = self.drain_if_poisoned();
        fresh |= planner.log.prepare()?;
        let (seen_failures, begun) = {
            let in_flight = self.in_flight.lock();
            if fresh || in_flight.outstanding.is_empty() {
                planner.speculative = None;
            }
            (in_flight.failures, in_flight.next)
        };
        let base = planner.speculative.clone().unwrap_or_else(|| self.image());
        let (records, value) = build(&base)?;
        if records.is_empty() {
            let on_top = planner.speculative.is_some();
            drop(planner);
            if on_top {
                self.await_begun_before(begun, seen_failures)?;
            }
            return Ok(value);
        }
        let wait = match planner.log.begin_append(&records) {
            Ok(Appending::Done(offset)) => {
                self.publisher.publish(offset, &records)?;
                return Ok(value);
            }
            Ok(Appending::InFlight(wait)) => wait,
            // It may still commit (a submission that timed out) without
            // being in the image later plans see: start them afresh.
            Err(e) => {
                self.in_flight.lock().poisoned = true;
                return Err(e.into());
            }
        };
        let mut ending = self.begin_in_flight(&mut planner, &base, &records);
        drop(planner);
        let outcome = wait();
        ending.failed = outcome.is_err();
        drop(ending);
        let offset = outcome?;
        self.publisher.publish(offset, &records)?;
        Ok(value)
    }

    /// [`MetadataStore::commit_with`] for an async task, when nothing has
    /// to be waited for before the plan: the log proposes without blocking
    /// (a quorum leader that has caught up in its term), no entry is in
    /// flight or failed, and no other commit is being planned. `build`
    /// runs now and the returned future waits for the entry without a
    /// thread of its own. Otherwise `build` comes back untouched, for the
    /// blocking path.
    pub fn try_commit_async<'a, T, E, F>(
        &'a self,
        build: F,
    ) -> Result<impl std::future::Future<Output = Result<T, E>> + Send + 'a, F>
    where
        F: FnOnce(&MetadataImage) -> Result<(Vec<MetadataRecord>, T), E>,
        E: From<MetadataLogError> + From<PublishError> + Send + 'a,
        T: Send + 'a,
    {
        let Some(mut planner) = self.planner.try_lock() else {
            return Err(build);
        };
        if !planner.log.proposes_without_blocking() {
            return Err(build);
        }
        {
            let in_flight = self.in_flight.lock();
            if in_flight.poisoned || !in_flight.outstanding.is_empty() {
                return Err(build);
            }
        }
        // Nothing in flight: the plan starts from the published image.
        planner.speculative = None;
        let base = self.image();
        let begun = match build(&base) {
            Err(e) => Begun::Failed(e),
            Ok((records, value)) if records.is_empty() => Begun::Nothing(value),
            Ok((records, value)) => match planner.log.propose(&records) {
                Ok(wait) => {
                    // Made now: the future may be dropped before it is
                    // first polled, and the entry must end all the same.
                    let ending = self.begin_in_flight(&mut planner, &base, &records);
                    Begun::InFlight {
                        value,
                        records,
                        ending,
                        wait,
                    }
                }
                // It may still commit without being in the image later
                // plans see: start them afresh.
                Err(e) => {
                    self.in_flight.lock().poisoned = true;
                    Begun::Failed(e.into())
                }
            },
        };
        drop(planner);
        Ok(async move {
            match begun {
                Begun::Failed(e) => Err(e),
                Begun::Nothing(value) => Ok(value),
                Begun::InFlight {
                    value,
                    records,
                    mut ending,
                    wait,
                } => {
                    let outcome = wait.await;
                    ending.failed = outcome.is_err();
                    drop(ending);
                    self.publisher.publish(outcome?, &records)?;
                    Ok(value)
                }
            }
        })
    }

    /// Records an entry of `records`, planned on `base`, as in flight:
    /// later plans see it applied, and it is numbered in the order begun.
    /// The returned guard ends it (as failed unless told otherwise).
    fn begin_in_flight(
        &self,
        planner: &mut Planner,
        base: &MetadataImage,
        records: &[MetadataRecord],
    ) -> Ending<'_> {
        let mut next = base.clone();
        for record in records {
            next.apply(record);
        }
        planner.speculative = Some(Arc::new(next));
        let mut in_flight = self.in_flight.lock();
        let number = in_flight.next;
        in_flight.next += 1;
        in_flight.outstanding.insert(number);
        Ending {
            store: self,
            number,
            failed: true,
        }
    }

    /// After an entry in flight failed, waits for every other one to end
    /// so that the next plan starts from the published image (and the log
    /// can settle what the failure left unknown). True when it did.
    fn drain_if_poisoned(&self) -> bool {
        let mut in_flight = self.in_flight.lock();
        if !in_flight.poisoned {
            return false;
        }
        while !in_flight.outstanding.is_empty() {
            self.ended.wait(&mut in_flight);
        }
        in_flight.poisoned = false;
        true
    }

    /// Waits until every entry numbered below `before` has ended; an
    /// error if any entry failed since `seen_failures` was read (an answer
    /// planned on top of it may be void).
    fn await_begun_before(&self, before: u64, seen_failures: u64) -> Result<(), MetadataLogError> {
        let mut in_flight = self.in_flight.lock();
        while in_flight
            .outstanding
            .first()
            .is_some_and(|&first| first < before)
        {
            self.ended.wait(&mut in_flight);
        }
        if in_flight.failures != seen_failures {
            return Err(MetadataLogError::Quorum(
                "a metadata change this answer was planned on did not commit; retry".into(),
            ));
        }
        Ok(())
    }
}

/// What planning an async commit came to.
enum Begun<'a, T, E> {
    Failed(E),
    /// Nothing to commit (and nothing in flight it was planned on).
    Nothing(T),
    /// An entry in flight, which `ending` ends.
    InFlight {
        value: T,
        records: Vec<MetadataRecord>,
        ending: Ending<'a>,
        wait: Proposed,
    },
}

/// Ends an entry in flight when dropped, even if its wait panicked
/// (which counts as a failure): the other commits must not wait for it
/// forever.
struct Ending<'a> {
    store: &'a MetadataStore,
    number: u64,
    failed: bool,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        {
            let mut in_flight = self.store.in_flight.lock();
            in_flight.outstanding.remove(&self.number);
            if self.failed {
                in_flight.failures += 1;
                in_flight.poisoned = true;
            }
        }
        self.store.ended.notify_all();
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

/// Helpers for this crate's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::MetadataRecord;

    /// A topic record whose id is `id` sixteen times.
    pub fn topic(name: &str, id: u8) -> MetadataRecord {
        MetadataRecord::Topic {
            name: name.into(),
            topic_id: [id; 16],
        }
    }
}
