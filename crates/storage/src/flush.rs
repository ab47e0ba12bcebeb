//! Group commit: fsyncs shared by every append that waits for one.
//!
//! An append that must be durable before it is acknowledged (Kafka's
//! `flush.messages` reached) does not fsync under the partition's lock.
//! Instead the log hands out a [`FlushTarget`] (the active segment's open
//! file, the offset it must cover, and the log's durable-offset cell) and
//! the caller submits it to the [`GroupCommit`] thread with a completion
//! callback. The thread takes every request queued so far as one round,
//! fsyncs each distinct file once (and each directory that gained a
//! segment file), advances each log's durable offset and runs all the
//! callbacks; requests that arrive during a round form the next one. So N
//! concurrent waiters — on one partition or many, from any connection —
//! cost one fsync per file per round instead of N.
//!
//! [`GroupCommit::submit`] never blocks and never fsyncs on the caller's
//! thread (an async worker, in the broker): requests for a log already
//! queued merge into its queued request, so the queue holds at most one
//! request per log ([`GROUP_COMMIT_QUEUE_MAX`] counts logs, not appends),
//! and the callbacks it carries are bounded by the appends in flight, which
//! the server limits. A slow disk delays only the requests waiting for it.
//!
//! Invariant: a log's durable offset only grows, and only after an fsync
//! that began after every byte below it was written and that succeeded;
//! the one exception is a truncation (a follower cutting its log back to
//! its leader's), which sets it to the new log end once the truncated
//! files are fsynced. Each truncation starts a new generation: a flush
//! handed out before it covers bytes that may be gone, so it still runs
//! its fsync but no longer moves the durable offset.
//!
//! A failed fsync is fatal for the log ([`LogDurability::fail`]): Linux may
//! drop the dirty pages of a failed writeback and report the next fsync as
//! a success without them, so no later fsync can be trusted to cover what
//! was written before. Kafka (and PostgreSQL) take the same view: Kafka
//! marks the log directory offline. Tarn keeps the data directory online
//! but takes the failed log offline: its durable offset never moves again,
//! and every append and flush answers [`StorageError::Offline`] (Kafka's
//! KAFKA_STORAGE_ERROR) until the broker restarts and recovers the log from
//! what is really on disk.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::error::StorageError;
use crate::file::{FileHandle, LogEnv};

/// The queue holds one request per log with a flush pending, so it never
/// grows past the number of hosted logs; this is only the capacity
/// reserved up front.
pub const GROUP_COMMIT_QUEUE_MAX: usize = 65_536;

/// One log's durability: the offset below which its data is on disk,
/// whether its directory entries are, and whether an fsync of it ever
/// failed. Shared by the log and the flushes it hands out.
#[derive(Debug, Default)]
pub struct LogDurability {
    /// Offsets below this are on disk (fsynced).
    durable_offset: AtomicI64,
    /// Segment files created so far (a counter, so a flush that started
    /// before a creation cannot claim to cover it).
    dir_changes: AtomicU64,
    /// `dir_changes` as of the start of the last successful directory
    /// fsync.
    dir_synced: AtomicU64,
    /// Truncations so far; a flush only advances the durable offset of
    /// the generation it was prepared in.
    generation: AtomicU64,
    /// Why the log went offline; set once, never cleared.
    failure: parking_lot::Mutex<Option<String>>,
}

impl LogDurability {
    pub(crate) fn new(durable_offset: i64) -> LogDurability {
        LogDurability {
            durable_offset: AtomicI64::new(durable_offset),
            ..LogDurability::default()
        }
    }

    pub fn durable_offset(&self) -> i64 {
        self.durable_offset.load(Ordering::Acquire)
    }

    /// Why the log is offline, if it is.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// `Err(Offline)` once an fsync of this log has failed.
    pub(crate) fn check(&self, dir: &std::path::Path) -> Result<(), StorageError> {
        match &*self.failure.lock() {
            Some(cause) => Err(StorageError::Offline {
                dir: dir.display().to_string(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Takes the log offline for good (see the module docs).
    pub(crate) fn fail(&self, dir: &std::path::Path, error: &StorageError) {
        let mut failure = self.failure.lock();
        if failure.is_none() {
            tracing::error!(dir = %dir.display(), error = %error, "fsync failed; the log is offline until the broker restarts (its unflushed data may be lost)");
            *failure = Some(error.to_string());
        }
    }

    /// Takes the log offline because `what` could not be completed, which
    /// leaves its files in a state only a restart's recovery may trust.
    pub(crate) fn fail_because(&self, dir: &std::path::Path, what: &str, error: &StorageError) {
        let mut failure = self.failure.lock();
        if failure.is_none() {
            tracing::error!(dir = %dir.display(), error = %error, "{what} failed; the log is offline until the broker restarts");
            *failure = Some(format!("{what}: {error}"));
        }
    }

    /// Records that offsets below `upto` are on disk, unless the log went
    /// offline meanwhile or was truncated since generation `generation`
    /// (when the flush was prepared).
    pub(crate) fn advance(&self, upto: i64, generation: u64) {
        let failure = self.failure.lock();
        if failure.is_none() && self.generation.load(Ordering::Acquire) == generation {
            self.durable_offset.fetch_max(upto, Ordering::AcqRel);
        }
    }

    /// The current generation (see the module docs).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The log was truncated to end at `log_end_offset` and the truncated
    /// files were fsynced: starts a new generation, so flushes prepared
    /// before cannot claim bytes that are gone, and sets the durable
    /// offset to the new end (lower, or higher when the fsync covered
    /// unflushed data below it).
    pub(crate) fn truncated(&self, log_end_offset: i64) {
        let failure = self.failure.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        if failure.is_none() {
            self.durable_offset.store(log_end_offset, Ordering::Release);
        }
    }

    pub(crate) fn note_dir_change(&self) {
        self.dir_changes.fetch_add(1, Ordering::AcqRel);
    }

    /// The directory-change count a directory fsync started now covers,
    /// or `None` when the directory holds nothing unsynced.
    pub(crate) fn dir_sync_needed(&self) -> Option<u64> {
        let changes = self.dir_changes.load(Ordering::Acquire);
        (changes > self.dir_synced.load(Ordering::Acquire)).then_some(changes)
    }

    pub(crate) fn dir_synced(&self, changes: u64) {
        self.dir_synced.fetch_max(changes, Ordering::AcqRel);
    }
}

/// What one log needs fsynced so that offsets below `upto` are durable.
#[derive(Debug, Clone)]
pub struct FlushTarget {
    pub(crate) env: LogEnv,
    pub(crate) file: Arc<dyn FileHandle>,
    pub(crate) path: PathBuf,
    /// The log's directory, and the directory-change count to cover when
    /// its entries changed (a new segment file) and must be fsynced too.
    pub(crate) dir: PathBuf,
    pub(crate) dir_changes: Option<u64>,
    pub(crate) upto: i64,
    /// The log's truncation generation when this was prepared.
    pub(crate) generation: u64,
    pub(crate) durability: Arc<LogDurability>,
    /// The segment a roll closed before `file` whose background fsync had
    /// not finished when this was prepared: fsynced first, since offsets
    /// in `file` only count once every segment below them is on disk.
    pub(crate) closed: Option<(Arc<ClosedSegment>, UnflushedSlot)>,
}

impl FlushTarget {
    pub fn upto(&self) -> i64 {
        self.upto
    }

    /// The durability of the log this flush is for: after the flush, its
    /// durable offset says what the flush made durable (nothing, for a
    /// flush prepared before a truncation).
    pub fn durability(&self) -> Arc<LogDurability> {
        self.durability.clone()
    }

    /// Does the fsyncs right here and advances the durable offset. A
    /// failure takes the log offline (see the module docs).
    pub fn run(&self) -> Result<(), StorageError> {
        self.durability.check(&self.dir)?;
        let result = self.sync();
        match &result {
            Ok(()) => self.durability.advance(self.upto, self.generation),
            Err(e) => self.durability.fail(&self.dir, e),
        }
        result
    }

    /// Makes this target cover `other` too (same log, or another log's
    /// target on the same file): the later directory change, and the
    /// offsets of the newer generation, since an older one's may be past
    /// a truncation.
    fn absorb(&mut self, other: &FlushTarget) {
        self.dir_changes = self.dir_changes.max(other.dir_changes);
        // A log has one closed segment waiting at a time, and a newer one
        // waits only once the older is settled, so either will do.
        if self.closed.is_none() {
            self.closed = other.closed.clone();
        }
        if !Arc::ptr_eq(&self.durability, &other.durability) {
            self.upto = self.upto.max(other.upto);
            return;
        }
        match self.generation.cmp(&other.generation) {
            std::cmp::Ordering::Less => {
                self.generation = other.generation;
                self.upto = other.upto;
            }
            std::cmp::Ordering::Equal => self.upto = self.upto.max(other.upto),
            std::cmp::Ordering::Greater => {}
        }
    }

    fn sync(&self) -> Result<(), StorageError> {
        if let Some((closed, slot)) = &self.closed {
            closed.settle(&self.env, slot, &self.durability)?;
        }
        self.file
            .sync()
            .map_err(|e| StorageError::io(format!("fsync {}", self.path.display()), e))?;
        if let Some(changes) = self.dir_changes {
            self.env.sync_dir(&self.dir)?;
            self.durability.dir_synced(changes);
        }
        Ok(())
    }
}

/// What a roll needs done to the disk before it closes the active segment,
/// taken from the log under its lock by `Log::prepare_roll` and run
/// outside it: the segment's fsyncs (its log and indexes), or, when rolls
/// defer those to a [`RollFlusher`], the fsync of the segment closed
/// before (if it still waits) and this one's marker. When the segment has
/// not changed in a way that matters since (grown, for the fsyncs), the
/// roll then skips the work; otherwise it does it inline. Either way,
/// recovery finds every segment it cannot trust marked or active.
#[derive(Debug)]
pub struct RollFlush {
    pub(crate) env: LogEnv,
    pub(crate) files: Vec<crate::file::FileToSync>,
    /// The marker to write, when rolls defer their fsyncs.
    pub(crate) marker: Option<PathBuf>,
    pub(crate) unflushed: UnflushedSlot,
    pub(crate) dir: PathBuf,
    /// The segment and its size the fsyncs cover, and the log's
    /// truncation generation then: after a truncation the same segment
    /// may regrow to the same size with other bytes.
    pub(crate) base_offset: i64,
    pub(crate) size: u64,
    pub(crate) generation: u64,
    /// Where the log learns that they ran.
    pub(crate) synced: Arc<Mutex<Option<RollSynced>>>,
    pub(crate) durability: Arc<LogDurability>,
}

impl RollFlush {
    /// Does the work; a failure takes the log offline, like any flush.
    pub fn run(self) -> Result<(), StorageError> {
        self.durability.check(&self.dir)?;
        settle_closed(&self.env, &self.unflushed, &self.durability)?;
        for (path, file) in &self.files {
            if let Err(e) = file.sync() {
                let e = StorageError::io(format!("fsync {}", path.display()), e);
                self.durability.fail(&self.dir, &e);
                return Err(e);
            }
        }
        if let Some(marker) = &self.marker {
            // Appends racing to roll the same segment may each get here.
            if let Err(e) = self.env.create_durably(marker) {
                self.durability
                    .fail_because(&self.dir, "writing a rolled segment's marker", &e);
                return Err(e);
            }
        }
        *self.synced.lock() = Some(RollSynced {
            generation: self.generation,
            base_offset: self.base_offset,
            size: self.marker.is_none().then_some(self.size),
        });
        Ok(())
    }
}

/// What the last [`RollFlush`] did for the active segment, in truncation
/// generation `generation`: fsynced it at `size` bytes, or (when rolls
/// defer their fsyncs, `size` is then `None`) settled the segment closed
/// before it and wrote its marker, which holds whatever it grows to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RollSynced {
    pub(crate) generation: u64,
    pub(crate) base_offset: i64,
    pub(crate) size: Option<u64>,
}

/// A segment that a roll closed while its fsync runs in the background
/// ([`RollFlusher`]), as Kafka flushes a rolled segment; a log has at most
/// one (a roll settles the one before first). Its marker file (see
/// [`unflushed_marker_name`]), written and fsynced before the segment
/// closed, tells recovery after a crash that the segment may have lost
/// its tail, so it is checked batch by batch as the active segment is.
#[derive(Debug)]
pub(crate) struct ClosedSegment {
    pub(crate) files: Vec<crate::file::FileToSync>,
    pub(crate) marker: PathBuf,
    pub(crate) dir: PathBuf,
    /// The next segment's base: once the files are fsynced, every offset
    /// below it is durable (older segments were settled before this one
    /// closed).
    pub(crate) end_offset: i64,
    /// The log's truncation generation when the segment closed.
    pub(crate) generation: u64,
}

/// The closed segment of a log still waiting for its fsync, shared by the
/// log, its flushes and the background job.
pub(crate) type UnflushedSlot = Arc<Mutex<Option<Arc<ClosedSegment>>>>;

/// The name of the marker that says the segment based at `base_offset`
/// closed before it was fsynced. Kafka's log loader ignores such a file.
pub fn unflushed_marker_name(base_offset: i64) -> String {
    crate::segment::segment_file_name(base_offset, &UNFLUSHED_SUFFIX[1..])
}

/// See [`unflushed_marker_name`].
pub const UNFLUSHED_SUFFIX: &str = ".unflushed";

/// The base offset an [`unflushed_marker_name`] stands for.
pub(crate) fn parse_unflushed_marker_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(UNFLUSHED_SUFFIX)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// fsyncs the closed segment waiting in `slot`, if any, and settles it
/// (see [`ClosedSegment::settle`]).
pub(crate) fn settle_closed(
    env: &LogEnv,
    slot: &UnflushedSlot,
    durability: &LogDurability,
) -> Result<(), StorageError> {
    let waiting = slot.lock().clone();
    match waiting {
        Some(closed) => closed.settle(env, slot, durability),
        None => Ok(()),
    }
}

impl ClosedSegment {
    /// fsyncs the segment's files; then, if it is still the log's waiting
    /// segment, removes its marker (durably: recovery takes a marked
    /// segment that ends short of the next one for a cut one, and a marker
    /// back from the dead must not cost data flushed since), empties the
    /// slot and moves the durable offset to its end. The log (under its
    /// lock) and the background job may both get here for one segment: both
    /// fsync, the first to find it still waiting settles it, holding the
    /// slot meanwhile so that no other marker of the same name (the segment
    /// truncated to and closed again) can be removed in its place. A failed
    /// fsync of the files takes the log offline.
    fn settle(
        self: &Arc<Self>,
        env: &LogEnv,
        slot: &UnflushedSlot,
        durability: &LogDurability,
    ) -> Result<(), StorageError> {
        durability.check(&self.dir)?;
        if !slot.lock().as_ref().is_some_and(|c| Arc::ptr_eq(c, self)) {
            // Settled already, by a successful fsync.
            return Ok(());
        }
        for (path, file) in &self.files {
            if let Err(e) = file.sync() {
                let e = StorageError::io(format!("fsync {}", path.display()), e);
                durability.fail(&self.dir, &e);
                return Err(e);
            }
        }
        let mut waiting = slot.lock();
        if waiting.as_ref().is_some_and(|c| Arc::ptr_eq(c, self)) {
            env.remove_if_exists(&self.marker)?;
            // A directory deleted (or set aside for deletion) since has
            // nothing left to recover.
            if env.is_dir(&self.dir) {
                env.sync_dir(&self.dir)?;
            }
            *waiting = None;
            durability.advance(self.end_offset, self.generation);
        }
        Ok(())
    }
}

/// A closed segment handed to the [`RollFlusher`].
pub(crate) struct RollJob {
    pub(crate) env: LogEnv,
    pub(crate) closed: Arc<ClosedSegment>,
    pub(crate) slot: UnflushedSlot,
    pub(crate) durability: Arc<LogDurability>,
}

impl RollJob {
    fn run(self) {
        if let Err(e) = self.closed.settle(&self.env, &self.slot, &self.durability) {
            // An fsync failure took the log offline and said so; anything
            // else leaves the segment waiting for the log's next flush.
            tracing::error!(dir = %self.closed.dir.display(), error = %e, "background fsync of a rolled segment failed");
        }
    }
}

#[derive(Default)]
struct RollQueue {
    jobs: VecDeque<RollJob>,
    stopping: bool,
}

/// The thread that fsyncs the segments rolls close, so that a roll never
/// waits for the disk to take a segment's worth of dirty pages (Kafka
/// schedules the same flush after its rolls) and writeback is otherwise
/// left to the kernel. Apart from the [`GroupCommit`]: appends waiting on
/// `flush.messages` must not queue behind a whole segment's fsync. Until
/// a closed segment is settled, every flush of its log fsyncs it first,
/// so nothing past it counts as durable before it is.
pub struct RollFlusher {
    queue: Arc<(Mutex<RollQueue>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RollFlusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RollFlusher")
            .field("queued", &self.queued())
            .finish()
    }
}

impl RollFlusher {
    pub fn start() -> Result<RollFlusher, StorageError> {
        let queue: Arc<(Mutex<RollQueue>, Condvar)> = Arc::default();
        let worker = queue.clone();
        let thread = std::thread::Builder::new()
            .name("roll-flush".into())
            .spawn(move || loop {
                let job = {
                    let (lock, wake) = &*worker;
                    let mut queue = lock.lock();
                    loop {
                        if let Some(job) = queue.jobs.pop_front() {
                            break job;
                        }
                        if queue.stopping {
                            return;
                        }
                        wake.wait(&mut queue);
                    }
                };
                job.run();
            })
            .map_err(|e| StorageError::io("start the roll-flush thread", e))?;
        Ok(RollFlusher {
            queue,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A flusher without a thread, for tests and simulations: jobs wait
    /// until [`RollFlusher::run_queued`] (or stopping) runs them.
    pub fn manual() -> RollFlusher {
        RollFlusher {
            queue: Arc::default(),
            thread: Mutex::new(None),
        }
    }

    /// Runs the queued jobs on the caller's thread; returns how many.
    pub fn run_queued(&self) -> usize {
        let jobs: Vec<RollJob> = self.queue.0.lock().jobs.drain(..).collect();
        let ran = jobs.len();
        for job in jobs {
            job.run();
        }
        ran
    }

    /// Closed segments waiting for their fsync.
    pub fn queued(&self) -> usize {
        self.queue.0.lock().jobs.len()
    }

    pub(crate) fn submit(&self, job: RollJob) {
        let (lock, wake) = &*self.queue;
        let mut queue = lock.lock();
        if queue.stopping {
            // The segment stays waiting: its log's next flush or close
            // settles it, and its marker covers a crash before that.
            return;
        }
        queue.jobs.push_back(job);
        wake.notify_one();
    }

    /// Runs what is queued and ends the thread.
    pub fn stop(&self) {
        self.queue.0.lock().stopping = true;
        self.queue.1.notify_all();
        join_or_run(&self.thread, "roll-flush", || {
            self.run_queued();
        });
    }
}

impl Drop for RollFlusher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Called once with the outcome of the round that covered a request.
pub type FlushCallback = Box<dyn FnOnce(Result<(), Arc<StorageError>>) + Send>;

struct Request {
    target: FlushTarget,
    done: Vec<FlushCallback>,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Request>,
    /// Position in `pending` of the request of each log, by the address of
    /// its `LogDurability`.
    by_log: HashMap<usize, usize>,
    stopping: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    rounds: AtomicI64,
    fsyncs: AtomicI64,
}

/// The group-commit thread. Dropping it (or [`GroupCommit::stop`]) runs
/// the queued requests, then ends the thread.
pub struct GroupCommit {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("rounds", &self.rounds())
            .field("fsyncs", &self.fsyncs())
            .finish()
    }
}

impl GroupCommit {
    pub fn start() -> Result<GroupCommit, StorageError> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            rounds: AtomicI64::new(0),
            fsyncs: AtomicI64::new(0),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("group-commit".into())
            .spawn(move || run(&worker))
            .map_err(|e| StorageError::io("start the group-commit thread", e))?;
        Ok(GroupCommit {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A group commit without a thread, for deterministic simulations:
    /// requests wait in the queue until the caller runs them with
    /// [`GroupCommit::run_queued`] (as the thread would, at a moment the
    /// caller picks); stopping or dropping it runs what is queued.
    pub fn manual() -> GroupCommit {
        GroupCommit {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                wake: Condvar::new(),
                rounds: AtomicI64::new(0),
                fsyncs: AtomicI64::new(0),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Runs everything queued so far as one round on the caller's thread
    /// (see [`GroupCommit::manual`]); returns how many requests it ran.
    pub fn run_queued(&self) -> usize {
        let round: Vec<Request> = {
            let mut queue = self.shared.queue.lock();
            queue.by_log.clear();
            queue.pending.drain(..).collect()
        };
        let ran = round.len();
        if ran > 0 {
            self.shared.rounds.fetch_add(1, Ordering::Relaxed);
            run_round(&self.shared, round);
        }
        ran
    }

    /// Queues `target` (merged into the queued request of its log, if
    /// any) without blocking; `done` runs on the group-commit thread once
    /// an fsync round that covers it has finished. After [`GroupCommit::stop`]
    /// `done` is told so at once: closing the log flushes it instead.
    pub fn submit(&self, target: FlushTarget, done: Option<FlushCallback>) {
        let mut queue = self.shared.queue.lock();
        if queue.stopping {
            drop(queue);
            if let Some(done) = done {
                done(Err(Arc::new(StorageError::io(
                    format!("flush {}", target.path.display()),
                    std::io::Error::other("the group commit has stopped (shutting down)"),
                ))));
            }
            return;
        }
        let key = Arc::as_ptr(&target.durability) as usize;
        if let Some(&i) = queue.by_log.get(&key) {
            let queued = &mut queue.pending[i];
            if Arc::ptr_eq(&queued.target.file, &target.file) {
                queued.target.absorb(&target);
                queued.done.extend(done);
                return;
            }
            // The log rolled since: its new active segment is another file,
            // whose flush also covers what the old one needed (a roll fsyncs
            // the segment it closes, or every later flush does until its
            // own fsync is done), so the newer target replaces it.
            let mut replaced = std::mem::replace(
                queued,
                Request {
                    target,
                    done: Vec::new(),
                },
            );
            queued.target.absorb(&replaced.target);
            queued.done.append(&mut replaced.done);
            queued.done.extend(done);
            return;
        }
        let position = queue.pending.len();
        queue.by_log.insert(key, position);
        queue.pending.push_back(Request {
            target,
            done: done.into_iter().collect(),
        });
        self.shared.wake.notify_one();
    }

    /// Requests waiting for the next round (at most one per log).
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().pending.len()
    }

    /// Rounds run so far (each is one batch of requests).
    pub fn rounds(&self) -> i64 {
        self.shared.rounds.load(Ordering::Relaxed)
    }

    /// File fsyncs done so far.
    pub fn fsyncs(&self) -> i64 {
        self.shared.fsyncs.load(Ordering::Relaxed)
    }

    /// Runs what is queued and ends the thread.
    pub fn stop(&self) {
        self.shared.queue.lock().stopping = true;
        self.shared.wake.notify_all();
        join_or_run(&self.thread, "group-commit", || {
            self.run_queued();
        });
    }
}

/// Waits for a stopping queue's thread to finish what is queued, or, for a
/// queue without one (tests, simulations), runs it here.
fn join_or_run(thread: &Mutex<Option<JoinHandle<()>>>, name: &str, run_queued: impl FnOnce()) {
    match thread.lock().take() {
        Some(thread) => {
            if thread.join().is_err() {
                tracing::error!("the {name} thread panicked");
            }
        }
        None => run_queued(),
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(shared: &Shared) {
    loop {
        let round: Vec<Request> = {
            let mut queue = shared.queue.lock();
            while queue.pending.is_empty() && !queue.stopping {
                shared.wake.wait(&mut queue);
            }
            if queue.pending.is_empty() {
                return;
            }
            queue.by_log.clear();
            queue.pending.drain(..).collect()
        };
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        run_round(shared, round);
    }
}

/// One fsync per distinct file (the highest `upto` of its requests), then
/// every callback.
fn run_round(shared: &Shared, round: Vec<Request>) {
    let mut distinct: Vec<(FlushTarget, Vec<usize>)> = Vec::new();
    for (i, request) in round.iter().enumerate() {
        let t = &request.target;
        match distinct
            .iter_mut()
            .find(|(d, _)| Arc::ptr_eq(&d.file, &t.file) || d.path == t.path)
        {
            Some((d, members)) => {
                d.absorb(t);
                members.push(i);
            }
            None => distinct.push((t.clone(), vec![i])),
        }
    }
    let mut results: Vec<Option<Result<(), Arc<StorageError>>>> = vec![None; round.len()];
    for (target, members) in &distinct {
        shared.fsyncs.fetch_add(1, Ordering::Relaxed);
        let result = target.run().map_err(Arc::new);
        if let Err(e) = &result {
            tracing::error!(file = %target.path.display(), error = %e, "group commit fsync failed");
        } else {
            // Requests that shared the file but carried their own
            // durability (a log reopened under the same path) advance too.
            for &i in members {
                let t = &round[i].target;
                if !Arc::ptr_eq(&t.durability, &target.durability) {
                    t.durability.advance(t.upto, t.generation);
                }
            }
        }
        for &i in members {
            results[i] = Some(result.clone());
        }
    }
    for (request, result) in round.into_iter().zip(results) {
        let result = result.unwrap_or(Ok(()));
        for done in request.done {
            done(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::mpsc;

    use tarn_protocol::record_batch::build_batch_for_tests;

    use crate::log::Log;
    use crate::log_config::LogConfig;

    /// A file whose first fsync blocks until the test releases it, and
    /// which counts fsyncs.
    #[derive(Debug)]
    struct GatedFile {
        syncs: AtomicI64,
        started: Mutex<Option<mpsc::Sender<()>>>,
        release: Mutex<Option<mpsc::Receiver<()>>>,
    }

    impl FileHandle for GatedFile {
        fn read_exact_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
            Ok(())
        }
        fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            Ok(())
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            if let Some(started) = self.started.lock().take() {
                started.send(()).unwrap();
                self.release.lock().take().unwrap().recv().unwrap();
            }
            Ok(())
        }
    }

    impl GatedFile {
        /// One whose fsyncs never block.
        fn ungated() -> Arc<GatedFile> {
            Arc::new(GatedFile {
                syncs: AtomicI64::new(0),
                started: Mutex::new(None),
                release: Mutex::new(None),
            })
        }
    }

    /// A flush of `file` (the segment `NAME.log` in the directory `NAME`)
    /// up to `upto`, for the log of `durability` in its current
    /// generation.
    fn flush_of(
        file: &Arc<GatedFile>,
        durability: &Arc<LogDurability>,
        name: &str,
        upto: i64,
    ) -> FlushTarget {
        FlushTarget {
            env: LogEnv::shared_default(),
            file: file.clone(),
            path: PathBuf::from(format!("{name}.log")),
            dir: PathBuf::from(name),
            dir_changes: None,
            upto,
            generation: durability.generation(),
            durability: durability.clone(),
            closed: None,
        }
    }

    #[test]
    fn a_manual_group_commit_runs_its_queue_only_when_told() {
        let file = GatedFile::ungated();
        let durability = Arc::new(LogDurability::new(0));
        let target = |upto: i64| flush_of(&file, &durability, "manual", upto);
        let commit = GroupCommit::manual();
        let (done_tx, done_rx) = mpsc::channel();
        for upto in 1..=3 {
            let done_tx = done_tx.clone();
            commit.submit(
                target(upto),
                Some(Box::new(move |r| done_tx.send((upto, r.is_ok())).unwrap())),
            );
        }
        assert_eq!(
            file.syncs.load(Ordering::SeqCst),
            0,
            "nothing runs by itself"
        );
        assert!(done_rx.try_recv().is_err());
        assert_eq!(commit.run_queued(), 1, "one queued request per log");
        let done: Vec<(i64, bool)> = done_rx.try_iter().collect();
        assert_eq!(done, [(1, true), (2, true), (3, true)]);
        assert_eq!(durability.durable_offset(), 3);
        assert_eq!(commit.run_queued(), 0);
        // Stopping runs what is still queued.
        commit.submit(target(4), None);
        commit.stop();
        assert_eq!(durability.durable_offset(), 4);
        assert_eq!(file.syncs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn waiters_during_an_fsync_share_the_next_one() {
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let file = Arc::new(GatedFile {
            syncs: AtomicI64::new(0),
            started: Mutex::new(Some(started_tx)),
            release: Mutex::new(Some(release_rx)),
        });
        let durability = Arc::new(LogDurability::new(0));
        let target = |upto: i64| flush_of(&file, &durability, "gated", upto);
        let commit = GroupCommit::start().unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let callback = |id: i64| -> Option<FlushCallback> {
            let done_tx = done_tx.clone();
            Some(Box::new(move |r| done_tx.send((id, r.is_ok())).unwrap()))
        };
        commit.submit(target(1), callback(1));
        started_rx.recv().unwrap();
        // The first fsync is in progress: these ten queue up behind it.
        for upto in 2..=11 {
            commit.submit(target(upto), callback(upto));
        }
        assert_eq!(durability.durable_offset(), 0);
        assert_eq!(commit.queued(), 1, "one queued request per log");
        release_tx.send(()).unwrap();
        let mut done: Vec<(i64, bool)> = (0..11).map(|_| done_rx.recv().unwrap()).collect();
        done.sort_unstable();
        assert_eq!(done, (1..=11).map(|i| (i, true)).collect::<Vec<_>>());
        assert_eq!(file.syncs.load(Ordering::SeqCst), 2, "one fsync per round");
        assert_eq!(commit.rounds(), 2);
        assert_eq!(durability.durable_offset(), 11);
        // Once stopped, a submit is refused at once, with no fsync on the
        // caller's thread.
        commit.stop();
        commit.submit(target(12), callback(12));
        assert_eq!(done_rx.recv().unwrap(), (12, false));
        assert_eq!(file.syncs.load(Ordering::SeqCst), 2);
        assert_eq!(durability.durable_offset(), 11);
    }

    #[test]
    fn a_merged_flush_keeps_the_offsets_of_the_newest_generation() {
        let file = GatedFile::ungated();
        let durability = Arc::new(LogDurability::new(0));
        let target = |upto: i64| flush_of(&file, &durability, "truncated", upto);
        let before = target(10);
        // The log is cut back to 3, then grows to 5.
        durability.truncated(3);
        let after = target(5);
        for (mut merged, other) in [(before.clone(), &after), (after.clone(), &before)] {
            merged.absorb(other);
            assert_eq!((merged.upto, merged.generation), (5, 1));
        }
        before.run().unwrap();
        assert_eq!(
            durability.durable_offset(),
            3,
            "the old flush claims nothing"
        );
        let mut merged = before.clone();
        merged.absorb(&after);
        merged.run().unwrap();
        assert_eq!(durability.durable_offset(), 5);
        assert_eq!(file.syncs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn flush_messages_decides_which_appends_wait() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            flush_messages: 5,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, true).unwrap();
        let commit = GroupCommit::start().unwrap();
        let mut due = Vec::new();
        for _ in 0..6 {
            log.append(&build_batch_for_tests(0, 2, 0), 0).unwrap();
            due.push(log.flush_due());
            if log.flush_due() {
                let target = log.prepare_flush().unwrap().expect("data to flush");
                let (tx, rx) = mpsc::channel();
                commit.submit(target, Some(Box::new(move |r| tx.send(r.is_ok()).unwrap())));
                assert!(rx.recv().unwrap());
                assert_eq!(log.durable_offset(), log.log_end_offset());
            }
        }
        // 2, 4, 6 (>= 5: flush), 2, 4, 6 (flush).
        assert_eq!(due, [false, false, true, false, false, true]);
        assert!(!log.has_unflushed_data());
        log.append(&build_batch_for_tests(0, 1, 0), 0).unwrap();
        assert!(log.has_unflushed_data());
        assert!(!log.flush_ms_due(0), "flush.ms defaults to never");
    }

    #[test]
    fn flush_ms_is_due_once_the_last_flush_is_old_enough() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(crate::file::ManualClock::new(10_000));
        let env = LogEnv::new(Arc::new(crate::file::OsFileSystem), 8, clock.clone());
        let config = LogConfig {
            flush_ms: 1_000,
            ..LogConfig::default()
        };
        let mut log = Log::open_in(&env, dir.path(), config, true).unwrap();
        assert!(!log.flush_ms_due(20_000), "nothing to flush");
        log.append(&build_batch_for_tests(0, 1, 0), 0).unwrap();
        assert!(!log.flush_due(), "flush.messages stays at its default");
        assert!(!log.flush_ms_due(10_999));
        assert!(log.flush_ms_due(11_000));
        clock.set(11_000);
        log.prepare_flush().unwrap().unwrap().run().unwrap();
        assert!(!log.flush_ms_due(50_000), "flushed");
        log.append(&build_batch_for_tests(0, 1, 0), 0).unwrap();
        assert!(!log.flush_ms_due(11_999));
        assert!(log.flush_ms_due(12_000));
    }
}
