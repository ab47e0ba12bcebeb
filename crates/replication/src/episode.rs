//! Logging a recurring failure once: a `FailureEpisode` says when a
//! failure starts and when it ends, so a condition that fails every
//! request (a full disk, say) is logged twice, not once per request.

use std::sync::atomic::{AtomicBool, Ordering};

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

#[cfg(test)]
mod tests {
    use super::*;

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
