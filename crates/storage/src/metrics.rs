//! Process-wide storage counters: how many fsyncs ran and how long they
//! took. `file.rs` records every fsync here; the broker's `/metrics`
//! endpoint reads them. Only atomics, so recording costs a few relaxed
//! increments and never blocks.
//!
//! [`LatencyHistogram`] is a fixed-bucket histogram in Prometheus' shape
//! (cumulative buckets are derived when read); the broker reuses it for
//! request latencies.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds (Prometheus `le`).
/// From 50 µs (an fsync on a fast NVMe device) to 10 s (a stuck disk or a
/// fetch that waited its whole `max_wait_ms`).
pub const LATENCY_BUCKETS_SECONDS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];
const BUCKETS: usize = LATENCY_BUCKETS_SECONDS.len();

/// A latency histogram: per-bucket counts (not cumulative), a count and a
/// sum in nanoseconds. Observations above the last bound count only in
/// the `+Inf` bucket, which is `count`.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKETS],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// A point-in-time copy of a [`LatencyHistogram`], buckets cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistogramSnapshot {
    /// `cumulative[i]` observations were <= `LATENCY_BUCKETS_SECONDS[i]`.
    pub cumulative: [u64; BUCKETS],
    pub count: u64,
    pub sum_ns: u64,
}

impl LatencyHistogram {
    pub const fn new() -> LatencyHistogram {
        LatencyHistogram {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS_SECONDS.iter().position(|le| seconds <= *le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The counts so far. Taken without a lock, so a concurrent observation
    /// may be in `count` but not yet in its bucket; Prometheus tolerates
    /// that, and the next scrape is consistent again.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = [0u64; BUCKETS];
        let mut running = 0u64;
        for (i, bucket) in self.buckets.iter().enumerate() {
            running += bucket.load(Ordering::Relaxed);
            cumulative[i] = running;
        }
        HistogramSnapshot {
            cumulative,
            count: self.count.load(Ordering::Relaxed).max(running),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

/// Every fsync of a segment, index or metadata file in this process.
pub static FSYNC_LATENCY: LatencyHistogram = LatencyHistogram::new();

/// Runs one fsync (or fdatasync) and records its latency in
/// [`FSYNC_LATENCY`], whether it succeeded or not.
pub fn timed_fsync(sync: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    let result = sync();
    FSYNC_LATENCY.observe(started.elapsed());
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_count_includes_overflow() {
        let h = LatencyHistogram::new();
        h.observe(Duration::from_micros(10)); // first bucket
        h.observe(Duration::from_millis(3)); // le=0.005
        h.observe(Duration::from_secs(60)); // above every bound
        let s = h.snapshot();
        assert_eq!(s.cumulative[0], 1);
        let le_5ms = LATENCY_BUCKETS_SECONDS
            .iter()
            .position(|b| *b == 0.005)
            .unwrap();
        assert_eq!(s.cumulative[le_5ms - 1], 1);
        assert_eq!(s.cumulative[le_5ms], 2);
        assert_eq!(s.cumulative[BUCKETS - 1], 2);
        assert_eq!(s.count, 3);
        assert_eq!(s.sum_ns, 10_000 + 3_000_000 + 60_000_000_000);
    }

    #[test]
    fn bounds_are_increasing() {
        assert!(LATENCY_BUCKETS_SECONDS.windows(2).all(|w| w[0] < w[1]));
    }
}
