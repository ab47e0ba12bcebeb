//! `AppendCompletion`: the one obligation an append hands back, resolved
//! when the write is as durable as the partition is configured to make it.
//!
//! A partition whose append reached `flush.messages` queues a flush on the
//! group commit and answers with a completion that waits until the
//! partition's durable offset covers the append; an append that needs no
//! flush answers with a completion that is already resolved. The caller
//! must consume it before acknowledging anything: [`AppendCompletion::wait`],
//! folding it into another with [`AppendCompletion::and`], or
//! [`AppendCompletion::defer_to_barrier`] when the one answer for the write
//! awaits the partition's barrier instead (the group coordinator). It is
//! `#[must_use]` and it is the only way to learn whether the write may be
//! acknowledged. The flush itself was queued by the partition, so a
//! completion dropped unresolved (a request abandoned because its
//! connection closed) loses no fsync; it only means nobody is answered,
//! which is why dropping one is allowed rather than a panic. A failed fsync
//! resolves every waiting completion of the partition with
//! KAFKA_STORAGE_ERROR, and the log stays offline (see
//! `tarn_storage::flush`), so nothing is acknowledged on the strength of a
//! later fsync.
//!
//! Replication extends the same value: [`AppendCompletion::replicated`]
//! waits for the in-sync replicas to reach an offset (the partition's high
//! watermark), so a coordinator's answer covers both with one barrier.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tarn_protocol::error;
use tarn_storage::LogDurability;

use crate::replica_manager::{Partition, PartitionError};

/// What a partition has made durable, published to its waiting completions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableState {
    /// Offsets below this are on disk.
    pub durable_offset: i64,
    /// Why the partition's log went offline (an fsync failed).
    pub failure: Option<String>,
}

/// A partition's side of its completions.
#[derive(Debug)]
pub struct PartitionDurability {
    state: Arc<watch::Sender<DurableState>>,
}

impl PartitionDurability {
    pub fn new(durable_offset: i64) -> PartitionDurability {
        let (state, _) = watch::channel(DurableState {
            durable_offset,
            failure: None,
        });
        PartitionDurability {
            state: Arc::new(state),
        }
    }

    /// A completion that resolves once offsets below `upto` are durable.
    pub fn completion_upto(&self, upto: i64) -> AppendCompletion {
        AppendCompletion::pending(Wait::Durable {
            upto,
            state: self.state.subscribe(),
        })
    }

    /// The publisher a flush's outcome is reported to.
    pub fn publisher(&self) -> DurablePublisher {
        DurablePublisher(self.state.clone())
    }

    pub fn current(&self) -> DurableState {
        self.state.borrow().clone()
    }
}

/// Reports a flush's outcome to the partition's completions (from the
/// group-commit thread).
#[derive(Debug, Clone)]
pub struct DurablePublisher(Arc<watch::Sender<DurableState>>);

impl DurablePublisher {
    pub fn durable(&self, upto: i64) {
        self.0.send_if_modified(|s| {
            let advanced = upto > s.durable_offset;
            s.durable_offset = s.durable_offset.max(upto);
            advanced
        });
    }

    /// Publishes the log's durable offset as it is now: what its fsyncs
    /// made durable, which a truncation lowers to the new log end. A flush
    /// prepared before a truncation advances nothing, so the bytes it
    /// covered, cut and written again, are not taken for durable.
    pub fn publish(&self, log: &LogDurability) {
        self.0.send_if_modified(|s| {
            let durable = log.durable_offset();
            let changed = durable != s.durable_offset;
            s.durable_offset = durable;
            changed
        });
    }

    pub fn failed(&self, cause: String) {
        self.0.send_if_modified(|s| {
            if s.failure.is_some() {
                return false;
            }
            s.failure = Some(cause);
            true
        });
    }
}

#[derive(Debug)]
enum Wait {
    Ready(Result<(), PartitionError>),
    Durable {
        upto: i64,
        state: watch::Receiver<DurableState>,
    },
    /// Until the high watermark of `partition` reaches `upto` while it
    /// is led here in `leader_epoch`, at most `timeout`.
    Replicated {
        partition: Arc<Partition>,
        upto: i64,
        leader_epoch: i32,
        timeout: Duration,
    },
    All(Vec<Wait>),
}

impl Wait {
    fn replicated_now(partition: &Partition, upto: i64, leader_epoch: i32) -> bool {
        partition.high_watermark() >= upto
            && partition.leader_epoch() == leader_epoch
            && partition.role() == crate::replica_manager::Role::Leader
    }
}

/// See the module docs.
#[must_use = "an append may not be acknowledged before its completion resolves"]
#[derive(Debug)]
pub struct AppendCompletion {
    /// `None` once consumed.
    wait: Option<Wait>,
}

impl AppendCompletion {
    /// The write needed nothing more (no flush due).
    pub fn ready() -> AppendCompletion {
        AppendCompletion::pending(Wait::Ready(Ok(())))
    }

    /// The write cannot be made durable.
    pub fn failed(e: PartitionError) -> AppendCompletion {
        AppendCompletion::pending(Wait::Ready(Err(e)))
    }

    /// Resolves once every in-sync replica of `partition` has everything
    /// below `upto` (its high watermark reached it), while this broker
    /// leads it in `leader_epoch`: NOT_LEADER_OR_FOLLOWER if leadership
    /// moves first, REQUEST_TIMED_OUT after `timeout`.
    pub fn replicated(
        partition: Arc<Partition>,
        upto: i64,
        leader_epoch: i32,
        timeout: Duration,
    ) -> AppendCompletion {
        AppendCompletion::pending(Wait::Replicated {
            partition,
            upto,
            leader_epoch,
            timeout,
        })
    }

    fn pending(wait: Wait) -> AppendCompletion {
        AppendCompletion { wait: Some(wait) }
    }

    fn take(&mut self) -> Wait {
        self.wait.take().expect("a completion is consumed once")
    }

    /// One completion that resolves when both have; fails with the first
    /// failure.
    pub fn and(mut self, mut other: AppendCompletion) -> AppendCompletion {
        let waits = match (self.take(), other.take()) {
            (Wait::Ready(Ok(())), w) | (w, Wait::Ready(Ok(()))) => return Self::pending(w),
            (Wait::All(mut a), Wait::All(b)) => {
                a.extend(b);
                a
            }
            (Wait::All(mut a), w) | (w, Wait::All(mut a)) => {
                a.push(w);
                a
            }
            (a, b) => vec![a, b],
        };
        Self::pending(Wait::All(waits))
    }

    /// Whether it has resolved successfully already (no waiting needed).
    pub fn is_ready(&self) -> bool {
        fn ready(w: &Wait) -> bool {
            match w {
                Wait::Ready(r) => r.is_ok(),
                Wait::Durable { upto, state } => {
                    let s = state.borrow();
                    s.failure.is_none() && s.durable_offset >= *upto
                }
                Wait::Replicated {
                    partition,
                    upto,
                    leader_epoch,
                    ..
                } => Wait::replicated_now(partition, *upto, *leader_epoch),
                Wait::All(all) => all.iter().all(ready),
            }
        }
        self.wait.as_ref().is_some_and(ready)
    }

    /// Consumes the completion without waiting, because the one answer
    /// that acknowledges this write awaits its partition's
    /// `Partition::durability_barrier`, taken after the write, instead
    /// (the group coordinator's writes: see `group::store`).
    pub fn defer_to_barrier(mut self) {
        self.wait = None;
    }

    /// The outcome, when it is known without waiting; otherwise the
    /// completion back, still to be consumed.
    pub fn now_or_pending(mut self) -> Result<Result<(), PartitionError>, AppendCompletion> {
        fn now(w: &Wait) -> Option<Result<(), PartitionError>> {
            match w {
                Wait::Ready(r) => Some(r.clone()),
                Wait::Durable { upto, state } => {
                    let s = state.borrow();
                    if s.durable_offset >= *upto {
                        Some(Ok(()))
                    } else {
                        s.failure.as_ref().map(|cause| {
                            Err(PartitionError::new(
                                error::KAFKA_STORAGE_ERROR,
                                format!("flush failed: {cause}"),
                            ))
                        })
                    }
                }
                Wait::Replicated {
                    partition,
                    upto,
                    leader_epoch,
                    ..
                } => Wait::replicated_now(partition, *upto, *leader_epoch).then_some(Ok(())),
                Wait::All(all) => {
                    let mut outcome = Ok(());
                    for w in all {
                        match now(w)? {
                            Ok(()) => {}
                            Err(e) => outcome = outcome.and(Err(e)),
                        }
                    }
                    Some(outcome)
                }
            }
        }
        match self.wait.as_ref().and_then(now) {
            Some(outcome) => {
                self.wait = None;
                Ok(outcome)
            }
            None => Err(self),
        }
    }

    /// Resolves when the write is as durable as configured; a failed fsync
    /// answers KAFKA_STORAGE_ERROR.
    pub async fn wait(mut self) -> Result<(), PartitionError> {
        let wait = self.take();
        resolve(wait).await
    }
}

async fn resolve(wait: Wait) -> Result<(), PartitionError> {
    match wait {
        Wait::Ready(result) => result,
        Wait::Durable { upto, mut state } => loop {
            {
                let s = state.borrow_and_update();
                if let Some(cause) = &s.failure {
                    // Offsets made durable before the failure stay durable.
                    if s.durable_offset >= upto {
                        return Ok(());
                    }
                    return Err(PartitionError::new(
                        error::KAFKA_STORAGE_ERROR,
                        format!("flush failed: {cause}"),
                    ));
                }
                if s.durable_offset >= upto {
                    return Ok(());
                }
            }
            if state.changed().await.is_err() {
                return Err(PartitionError::new(
                    error::KAFKA_STORAGE_ERROR,
                    "the partition closed before its flush finished",
                ));
            }
        },
        Wait::Replicated {
            partition,
            upto,
            leader_epoch,
            timeout,
        } => partition.wait_replicated(upto, leader_epoch, timeout).await,
        Wait::All(all) => {
            let mut first_error = None;
            for w in all {
                if let Err(e) = Box::pin(resolve(w)).await {
                    first_error.get_or_insert(e);
                }
            }
            first_error.map_or(Ok(()), Err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn completions_resolve_on_durability_and_fail_on_a_failed_flush() {
        let durability = PartitionDurability::new(0);
        assert!(AppendCompletion::ready().wait().await.is_ok());
        let first = durability.completion_upto(5);
        let second = durability.completion_upto(9);
        assert!(!first.is_ready());
        let publisher = durability.publisher();
        publisher.durable(5);
        assert!(first.is_ready());
        assert!(first.wait().await.is_ok());
        let waiting = tokio::spawn(second.and(AppendCompletion::ready()).wait());
        publisher.failed("EIO".into());
        let e = waiting.await.unwrap().unwrap_err();
        assert_eq!(e.code, error::KAFKA_STORAGE_ERROR);
        // What was durable before the failure stays durable.
        assert!(durability.completion_upto(5).wait().await.is_ok());
        let both =
            durability
                .completion_upto(1)
                .and(AppendCompletion::failed(PartitionError::new(
                    error::KAFKA_STORAGE_ERROR,
                    "x",
                )));
        assert!(both.wait().await.is_err());
    }
}
