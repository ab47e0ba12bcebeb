//! Time as the group coordinator sees it: the broker's wall-clock
//! milliseconds (its storage clock), as Kafka's coordinator uses (commit
//! timestamps and state timestamps are persisted, so they must mean the
//! same thing after a restart). Tests drive a `ManualClock` so that every
//! timeout can be checked without sleeping.

use std::sync::atomic::{AtomicI64, Ordering};

pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// The broker's storage clock (its `LogEnv`'s): the time the logs stamp
/// and check batches by, so the coordinator's records and the log's
/// timestamp checks read the same clock (a simulated one in simulations).
pub struct LogEnvClock(pub tarn_storage::LogEnv);

impl Clock for LogEnvClock {
    fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start_ms: i64) -> Self {
        ManualClock(AtomicI64::new(start_ms))
    }

    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
