//! `LogManager`: the broker's background work on its logs, Kafka's
//! scheduled tasks.
//!
//! One thread (`log-manager`) wakes for whichever is due first:
//! - retention, every `log.retention.check.interval.ms`: for each hosted
//!   partition, roll an idle active segment older than `segment.ms` and
//!   delete segments past `retention.ms` / `retention.bytes` / the log
//!   start offset;
//! - removal of `*.deleted` segment files once `file.delete.delay.ms` has
//!   passed (woken at the earliest deadline);
//! - the flush scheduler, every `log.flush.scheduler.interval.ms`: a
//!   background group-commit flush of each log whose `flush.ms` has passed;
//! - producer-id expiration, every
//!   `producer.id.expiration.check.interval.ms`: each log forgets the
//!   producers idle for `producer.id.expiration.ms` (read from the
//!   effective config at each pass, since AlterConfigs may change it).
//!
//! A second thread (`log-cleaner`) compacts `cleanup.policy=compact` logs
//! every `log.cleaner.backoff.ms` (when `log.cleaner.enable`). Errors are
//! logged per partition and never stop the loop. `stop` wakes and joins
//! both threads.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use tarn_protocol::compression::{compress, decompress};
use tarn_protocol::record_batch::Compression;
use tarn_storage::{CleanerConfig, GroupCommit};

use tarn_config::BrokerConfig;

use crate::replica_manager::ReplicaManager;

/// The longest the manager sleeps at once, so a clock jump or a missed
/// wake-up costs at most this much delay.
const MAX_SLEEP: Duration = Duration::from_secs(1);

struct Stop {
    stopping: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    /// Sleeps up to `timeout`; returns true when asked to stop.
    fn sleep(&self, timeout: Duration) -> bool {
        let mut stopping = self.stopping.lock();
        if !*stopping {
            self.wake.wait_for(&mut stopping, timeout.min(MAX_SLEEP));
        }
        *stopping
    }
}

/// Settings the manager reads once at start.
#[derive(Debug, Clone, Copy)]
struct Intervals {
    retention_check_ms: i64,
    flush_scheduler_ms: i64,
    producer_expiration_check_ms: i64,
    cleaner_backoff_ms: i64,
    cleaner_enabled: bool,
    dedupe_buffer_bytes: usize,
}

pub struct LogManager {
    stop: Arc<Stop>,
    threads: Vec<JoinHandle<()>>,
}

impl LogManager {
    pub fn start(
        config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        group_commit: Arc<GroupCommit>,
    ) -> std::io::Result<LogManager> {
        let intervals = Intervals {
            retention_check_ms: config.get_i64("log.retention.check.interval.ms"),
            flush_scheduler_ms: config.get_i64("log.flush.scheduler.interval.ms"),
            producer_expiration_check_ms: config
                .get_i64("producer.id.expiration.check.interval.ms"),
            cleaner_backoff_ms: config.get_i64("log.cleaner.backoff.ms"),
            cleaner_enabled: config.get_bool("log.cleaner.enable"),
            dedupe_buffer_bytes: config.get_i64("log.cleaner.dedupe.buffer.size") as usize,
        };
        let stop = Arc::new(Stop {
            stopping: Mutex::new(false),
            wake: Condvar::new(),
        });
        let mut threads = Vec::new();
        {
            let (stop, replicas) = (stop.clone(), replicas.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("log-manager".into())
                    .spawn(move || run_manager(&stop, &replicas, &group_commit, intervals))?,
            );
        }
        if intervals.cleaner_enabled {
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("log-cleaner".into())
                    .spawn(move || run_cleaner(&stop, &replicas, intervals))?,
            );
        }
        Ok(LogManager { stop, threads })
    }

    pub fn stop(self) {
        *self.stop.stopping.lock() = true;
        self.stop.wake.notify_all();
        for thread in self.threads {
            if thread.join().is_err() {
                tracing::error!("a log manager thread panicked");
            }
        }
    }
}

fn add_ms(at: Instant, ms: i64) -> Instant {
    // Kafka's "never" is Long.MAX_VALUE ms; clamp to something Instant holds.
    at + Duration::from_millis(ms.clamp(0, 1 << 40) as u64)
}

fn run_manager(
    stop: &Stop,
    replicas: &ReplicaManager,
    group_commit: &GroupCommit,
    intervals: Intervals,
) {
    let start = Instant::now();
    let mut next_retention = add_ms(start, intervals.retention_check_ms);
    let mut next_flush = add_ms(start, intervals.flush_scheduler_ms);
    let mut next_expiration = add_ms(start, intervals.producer_expiration_check_ms);
    let mut next_removal: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if now >= next_retention {
            next_removal = earliest(next_removal, retention_pass(replicas));
            next_retention = add_ms(now, intervals.retention_check_ms);
        }
        if next_removal.is_some_and(|at| now >= at) {
            next_removal = removal_pass(replicas);
        }
        if now >= next_flush {
            flush_pass(replicas, group_commit);
            next_flush = add_ms(now, intervals.flush_scheduler_ms);
        }
        if now >= next_expiration {
            producer_expiration_pass(replicas);
            next_expiration = add_ms(now, intervals.producer_expiration_check_ms);
        }
        let next_periodic = next_retention.min(next_flush).min(next_expiration);
        let wake = earliest(Some(next_periodic), next_removal).expect("some deadline");
        if stop.sleep(wake.saturating_duration_since(Instant::now())) {
            return;
        }
    }
}

/// Every log forgets its producers idle for `producer.id.expiration.ms`.
fn producer_expiration_pass(replicas: &ReplicaManager) {
    let expiration_ms = replicas
        .effective_config()
        .get_i64("producer.id.expiration.ms");
    let mut removed = 0;
    for partition in replicas.partitions() {
        match partition.with_log_mut(|log| Ok(log.remove_expired_producers(expiration_ms))) {
            Ok(n) => removed += n.unwrap_or(0),
            Err(e) => {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "expire producer ids")
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            expiration_ms,
            "expired producer ids idle for producer.id.expiration.ms"
        );
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When, from now, the earliest pending file removal of any log is due.
fn removal_deadline(now_ms: i64, due_ms: Option<i64>) -> Option<Instant> {
    due_ms.map(|due| add_ms(Instant::now(), due.saturating_sub(now_ms)))
}

/// Rolls idle segments and applies retention to every partition; returns
/// when the next deleted files are due for removal.
fn retention_pass(replicas: &ReplicaManager) -> Option<Instant> {
    let env = replicas.env().clone();
    let mut next_due: Option<i64> = None;
    for partition in replicas.partitions() {
        let now_ms = env.now_ms();
        let result = partition.with_log_mut(|log| {
            log.roll_if_idle(now_ms)?;
            log.delete_old_segments(now_ms)?;
            log.remove_deleted_segments(now_ms)?;
            Ok(log.next_deleted_removal_ms())
        });
        match result {
            Ok(Some(Some(due))) => next_due = Some(next_due.map_or(due, |d: i64| d.min(due))),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "retention failed")
            }
        }
    }
    removal_deadline(env.now_ms(), next_due)
}

fn removal_pass(replicas: &ReplicaManager) -> Option<Instant> {
    let env = replicas.env().clone();
    let mut next_due: Option<i64> = None;
    for partition in replicas.partitions() {
        let now_ms = env.now_ms();
        let result = partition.with_log_mut(|log| {
            log.remove_deleted_segments(now_ms)?;
            Ok(log.next_deleted_removal_ms())
        });
        match result {
            Ok(Some(Some(due))) => next_due = Some(next_due.map_or(due, |d: i64| d.min(due))),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "removing deleted segments failed")
            }
        }
    }
    removal_deadline(env.now_ms(), next_due)
}

/// Kafka's flush scheduler: a background flush for each log whose
/// `flush.ms` has passed; nobody waits for it.
fn flush_pass(replicas: &ReplicaManager, group_commit: &GroupCommit) {
    let now_ms = replicas.env().now_ms();
    for partition in replicas.partitions() {
        let result = partition.with_log_mut(|log| {
            if log.flush_ms_due(now_ms) {
                log.prepare_flush()
            } else {
                Ok(None)
            }
        });
        match result {
            Ok(Some(Some(target))) => group_commit.submit(target, None),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "scheduled flush failed")
            }
        }
    }
}

fn run_cleaner(stop: &Stop, replicas: &ReplicaManager, intervals: Intervals) {
    loop {
        let deadline = add_ms(Instant::now(), intervals.cleaner_backoff_ms);
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if stop.sleep(deadline - now) {
                return;
            }
        }
        if clean_pass(stop, replicas, intervals.dedupe_buffer_bytes) {
            return;
        }
    }
}

/// The most a compressed batch may expand to for the cleaner to compact
/// it; a batch past this is kept whole (nothing is lost, it is just not
/// compacted).
const CLEANER_DECOMPRESSED_MAX_BYTES: usize = 64 << 20;

/// The cleaner's codecs: Kafka's four, capped.
fn decompress_for_cleaner(codec: Compression, data: &[u8]) -> Result<Vec<u8>, String> {
    decompress(codec, data, CLEANER_DECOMPRESSED_MAX_BYTES).map_err(|e| e.to_string())
}

/// Rewritten batches keep their codec: Kafka's four, in the framings Java
/// clients read (see `tarn_protocol::compression`).
fn compress_for_cleaner(codec: Compression, data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    compress(codec, data, out);
    Ok(())
}

/// Compacts every log whose cleanup policy includes `compact` and whose
/// dirty section is due, one at a time; the partition's lock is held only
/// to plan and to swap. Returns true when asked to stop.
fn clean_pass(stop: &Stop, replicas: &ReplicaManager, dedupe_buffer_bytes: usize) -> bool {
    let env = replicas.env().clone();
    let cleaner = CleanerConfig {
        dedupe_buffer_bytes,
        decompressor: decompress_for_cleaner,
        compressor: compress_for_cleaner,
    };
    for partition in replicas.partitions() {
        if *stop.stopping.lock() {
            return true;
        }
        let now_ms = env.now_ms();
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "{what}");
        };
        let plan = match partition.with_log_mut(|log| log.plan_cleaning(now_ms, cleaner)) {
            Ok(Some(Some(plan))) => plan,
            Ok(_) => continue,
            Err(e) => {
                failed("plan log cleaning", &e);
                continue;
            }
        };
        let cleaned = match plan.run() {
            Ok(cleaned) => cleaned,
            Err(e) => {
                // Retention or a topic deletion may have removed a segment
                // under the cleaner; the next pass starts over.
                failed("clean log", &e);
                continue;
            }
        };
        let mut cleaned = Some(cleaned);
        let result = partition
            .with_log_mut(|log| log.complete_cleaning(cleaned.take().expect("taken once")));
        match result {
            Ok(Some(stats)) => {
                tracing::debug!(topic = %partition.topic, partition = partition.index, ?stats, "cleaned")
            }
            Ok(None) => {
                if let Some(Err(e)) = cleaned.map(|c| c.discard(&env)) {
                    failed("discard cleaned segments of a closed log", &e);
                }
            }
            Err(e) => failed("swap in cleaned segments", &e),
        }
    }
    false
}
