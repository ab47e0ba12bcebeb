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
#[derive(Debug, Clone)]
pub struct StorageFailures(Arc<watch::Sender<Option<String>>>);

impl Default for StorageFailures {
    fn default() -> Self {
        StorageFailures(Arc::new(watch::channel(None).0))
    }
}

impl StorageFailures {
    /// Records `what` failed, unless a failure was recorded before.
    pub fn report(&self, what: impl FnOnce() -> String) {
        self.0.send_if_modified(|first| match first {
            Some(_) => false,
            None => {
                *first = Some(what());
                true
            }
        });
    }

    /// Sees the first failure once it is reported.
    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.0.subscribe()
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
