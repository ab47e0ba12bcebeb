//! Logging a recurring failure once: a `FailureEpisode` says when a
//! failure starts and when it ends, so a condition that fails every
//! request (a full disk, say) is logged twice, not once per request.
//! `StorageFailures` carries the first such failure of any partition
//! beyond its log line, to whoever must act on it: a broker in a cluster
//! stops (see `tarn_server::cluster`), a single node keeps serving.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

#[derive(Debug, Default)]
pub struct FailureEpisode(AtomicBool);

impl FailureEpisode {
    pub const fn new() -> Self {
        FailureEpisode(AtomicBool::new(false))
    }

    /// Records a failure; true when it starts a new episode (log it).
    pub fn failed(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }

    /// Records a success; true when it ends an episode (log the recovery).
    pub fn succeeded(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }
}

/// The first storage failure of a broker's partitions, for the one who
/// decides what the broker does about it. Reporting is cheap and never
/// blocks; only the first report is kept.
#[derive(Debug, Clone, Default)]
pub struct StorageFailures(Arc<Failures>);

#[derive(Debug)]
struct Failures {
    first: watch::Sender<Option<String>>,
    /// Set once a failure is reported.
    failed: AtomicBool,
    /// Whether the broker takes no more writes after a failure.
    stop_writes: AtomicBool,
}

impl Default for Failures {
    fn default() -> Self {
        Failures {
            first: watch::channel(None).0,
            failed: AtomicBool::new(false),
            stop_writes: AtomicBool::new(false),
        }
    }
}

impl StorageFailures {
    /// Records `what` failed, unless a failure was recorded before.
    pub fn report(&self, what: impl FnOnce() -> String) {
        self.0.first.send_if_modified(|first| match first {
            Some(_) => false,
            None => {
                *first = Some(what());
                true
            }
        });
        self.0.failed.store(true, Ordering::Release);
    }

    /// Sees the first failure once it is reported.
    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.0.first.subscribe()
    }

    /// From the first failure on, every append answers
    /// KAFKA_STORAGE_ERROR before it looks at anything else (see
    /// [`StorageFailures::writes_stopped`]): for a broker that stops at its
    /// first failure, as Kafka's offline log directory refuses everything.
    pub fn stop_writes_after_failure(&self) {
        self.0.stop_writes.store(true, Ordering::Release);
    }

    /// Whether appends are refused: a failure was reported to a broker that
    /// stops writing after one. Without that, a producer whose batch failed
    /// would have its next batch refused as OUT_OF_ORDER_SEQUENCE_NUMBER
    /// (its sequence follows the failed one), which makes librdkafka start
    /// a new producer epoch and send again, under new sequence numbers, a
    /// batch this broker had written and replicated but not yet
    /// acknowledged: a duplicate once another broker leads.
    pub fn writes_stopped(&self) -> bool {
        self.0.stop_writes.load(Ordering::Acquire) && self.0.failed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_storage_failure_is_kept() {
        let failures = StorageFailures::default();
        let seen = failures.subscribe();
        assert_eq!(*seen.borrow(), None);
        failures.report(|| "appending t-0: disk full".to_owned());
        failures.report(|| "reading t-1: I/O error".to_owned());
        assert_eq!(seen.borrow().as_deref(), Some("appending t-0: disk full"));
    }

    #[test]
    fn writes_stop_after_a_failure_only_where_asked() {
        let single = StorageFailures::default();
        single.report(|| "appending t-0: disk full".to_owned());
        assert!(!single.writes_stopped());
        let cluster = StorageFailures::default();
        cluster.stop_writes_after_failure();
        assert!(!cluster.writes_stopped());
        cluster
            .clone()
            .report(|| "appending t-0: disk full".to_owned());
        assert!(cluster.writes_stopped());
    }

    #[test]
    fn an_episode_starts_and_ends_once() {
        let episode = FailureEpisode::new();
        assert!(!episode.succeeded());
        assert!(episode.failed());
        assert!(!episode.failed());
        assert!(episode.succeeded());
        assert!(!episode.succeeded());
        assert!(episode.failed());
    }
}
