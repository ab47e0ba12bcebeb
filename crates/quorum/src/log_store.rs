//! The durable Raft log and vote, over `tarn_storage::FileSystem`.
//!
//! Files in the quorum directory:
//! - `quorum-state`: the vote, one frame, replaced atomically and fsynced
//!   before `save_vote` returns.
//! - `log-start`: the last purged log id, one frame, replaced the same
//!   way; entries at or below it are ignored at recovery.
//! - `<20-digit first index>.log`: segments of framed entries (JSON),
//!   indexes consecutive across segments. An append is written at once
//!   and fsynced by the store's flusher (a thread of its own) before
//!   openraft is told it is flushed: openraft starts replicating an entry
//!   once its append returns, so the leader's fsync overlaps its
//!   followers' (it counts itself towards the quorum only once flushed).
//!   The flusher fsyncs every append queued behind the one it syncs at
//!   once, and tells openraft in append order. A truncation, a purge and a
//!   vote wait until every append before them is flushed.
//!   A node that does not lead (its vote is not its own committed one)
//!   fsyncs an append itself, before `append` returns, when nothing is
//!   queued for the flusher: its answer to the leader waits for that fsync
//!   anyway, and waking the flusher and then openraft's core again cost a
//!   follower a third of its thread switches per entry (Kafka's followers
//!   too fsync on their Raft thread). openraft hands this store one call at
//!   a time, so nothing is appended while it syncs.
//!
//! Invariants: entries in memory are exactly the entries written above
//! `log-start` (durable once synced); segments are
//! only ever deleted whole, after `log-start` covering them is durable; a
//! truncation is durable (file cut and fsynced, later segments removed and
//! the directory fsynced) before it returns.
//! Recovery cuts a torn tail of the last segment and stops on anything
//! else it cannot read.
//!
//! All entries above the last purge stay in memory: the snapshot policy
//! bounds them to about `snapshot_every`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use tarn_storage::{file::FileHandle, FileSystem};

use crate::frame::{self, TEMP_SUFFIX};
use crate::types::{Entry, LogId, TypeConfig, Vote};

const VOTE_FILE: &str = "quorum-state";
const LOG_START_FILE: &str = "log-start";
const SEGMENT_SUFFIX: &str = ".log";
/// A segment is rolled once it holds this many bytes.
pub const SEGMENT_BYTES_MAX: u64 = 16 << 20;

/// The log store; clones share it (openraft's reader is a clone).
#[derive(Debug, Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
    flush: Arc<Flush>,
}

/// The appends written and not yet known to be flushed.
#[derive(Debug)]
struct Flush {
    jobs: tokio::sync::mpsc::UnboundedSender<FlushJob>,
    /// Appends handed to the flusher, numbered from 1.
    submitted: std::sync::atomic::AtomicU64,
    /// The number of the last append the flusher finished.
    finished: tokio::sync::watch::Receiver<u64>,
    /// Moved on by the flusher, or by an append that fsyncs itself.
    finish: Arc<tokio::sync::watch::Sender<u64>>,
    /// This node: while its own committed vote is the store's, it leads
    /// and leaves every fsync to the flusher.
    node_id: u64,
}

/// One append's fsyncs and whom to tell when they are done.
struct FlushJob {
    number: u64,
    segments: Vec<(u64, Arc<dyn FileHandle>)>,
    callback: IOFlushed<TypeConfig>,
}

impl Debug for FlushJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushJob")
            .field("number", &self.number)
            .finish()
    }
}

/// The flusher: fsyncs the segments of each append queued, all appends
/// waiting at once, and completes their callbacks in order. A failed
/// fsync fails every append it covered (openraft then stops: what the
/// disk holds is unknown). On a multi-threaded runtime it is a thread of
/// its own, blocked in `recv` or in fsync: moving a worker aside for each
/// fsync (`block_in_place`) woke a thread to take over its tasks every
/// time. A single-threaded runtime (the simulations) runs it as a task,
/// so that a seed replays.
fn spawn_flusher(
    runtime: &tokio::runtime::Handle,
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<FlushJob>,
    finished: Arc<tokio::sync::watch::Sender<u64>>,
) -> io::Result<()> {
    match runtime.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => {
            std::thread::Builder::new()
                .name("quorum-flusher".into())
                .spawn(move || {
                    while let Some(first) = jobs.blocking_recv() {
                        flush_batch(first, &mut jobs, &finished);
                    }
                })
                .map_err(|e| ctx("start the log store's flusher", e))?;
        }
        _ => {
            runtime.spawn(async move {
                while let Some(first) = jobs.recv().await {
                    flush_batch(first, &mut jobs, &finished);
                }
            });
        }
    }
    Ok(())
}

/// Fsyncs `first` and every job queued behind it, then completes them.
fn flush_batch(
    first: FlushJob,
    jobs: &mut tokio::sync::mpsc::UnboundedReceiver<FlushJob>,
    finished: &tokio::sync::watch::Sender<u64>,
) {
    let mut batch = vec![first];
    while let Ok(more) = jobs.try_recv() {
        batch.push(more);
    }
    let mut segments: Vec<(u64, Arc<dyn FileHandle>)> = Vec::new();
    for job in &batch {
        for (base, handle) in &job.segments {
            if !segments.iter().any(|(b, _)| b == base) {
                segments.push((*base, handle.clone()));
            }
        }
    }
    let synced = sync_segments(&segments);
    let last = batch.last().map_or(0, |job| job.number);
    for job in batch {
        let result = synced
            .clone()
            .map_err(|(kind, message)| io::Error::new(kind, message));
        job.callback.io_completed(result);
    }
    finished.send_replace(last);
}

/// Fsyncs each of `segments`; the error names the segment.
fn sync_segments(segments: &[(u64, Arc<dyn FileHandle>)]) -> Result<(), (io::ErrorKind, String)> {
    segments.iter().try_for_each(|(base, handle)| {
        handle
            .sync()
            .map_err(|e| (e.kind(), format!("fsync {}: {e}", segment_name(*base))))
    })
}

#[derive(Debug)]
struct Segment {
    handle: Arc<dyn FileHandle>,
    len: u64,
}

#[derive(Debug)]
struct LogInner {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    vote: Option<Vote>,
    purged: Option<LogId>,
    entries: BTreeMap<u64, Entry>,
    /// index -> (segment base, position in it)
    positions: BTreeMap<u64, (u64, u64)>,
    segments: BTreeMap<u64, Segment>,
    /// The next append starts a new segment (set by a purge, so the old
    /// one stops growing and can be deleted by a later purge).
    roll_next: bool,
}

fn segment_name(base: u64) -> String {
    format!("{base:020}{SEGMENT_SUFFIX}")
}

fn ctx(what: impl Into<String>, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", what.into()))
}

fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Reads a file holding exactly one frame.
fn read_single<T: serde::de::DeserializeOwned>(
    fs: &dyn FileSystem,
    path: &Path,
) -> io::Result<Option<T>> {
    let Some(buf) =
        frame::read_file(fs, path).map_err(|e| ctx(format!("read {}", path.display()), e))?
    else {
        return Ok(None);
    };
    // These files are only ever renamed into place after an fsync, so any
    // damage is corruption, not a torn write.
    let decoded = frame::decode(&buf).map_err(|e| corrupt(format!("{}: {e}", path.display())))?;
    match decoded.frames.as_slice() {
        [(_, payload)] if decoded.valid_len == buf.len() as u64 => serde_json::from_slice(payload)
            .map(Some)
            .map_err(|e| corrupt(format!("decode {}: {e}", path.display()))),
        _ => Err(corrupt(format!(
            "{} is not one intact record",
            path.display()
        ))),
    }
}

fn write_single<T: serde::Serialize>(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    name: &str,
    value: &T,
) -> io::Result<()> {
    let payload = serde_json::to_vec(value).map_err(io::Error::other)?;
    let mut buf = Vec::with_capacity(payload.len() + frame::FRAME_HEADER_BYTES);
    frame::encode(&payload, &mut buf);
    frame::replace_file(fs, dir, name, &buf).map_err(|e| ctx(format!("write {name}"), e))
}

impl LogStore {
    /// Opens (creating when missing) the log of node `node_id` in `dir`
    /// and recovers it.
    pub fn open(fs: Arc<dyn FileSystem>, dir: &Path, node_id: u64) -> io::Result<LogStore> {
        fs.create_dir_all(dir)
            .map_err(|e| ctx(format!("create {}", dir.display()), e))?;
        let mut inner = LogInner {
            vote: read_single(fs.as_ref(), &dir.join(VOTE_FILE))?,
            purged: read_single(fs.as_ref(), &dir.join(LOG_START_FILE))?,
            fs,
            dir: dir.to_path_buf(),
            entries: BTreeMap::new(),
            positions: BTreeMap::new(),
            segments: BTreeMap::new(),
            roll_next: false,
        };
        inner.recover()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            io::Error::other(format!("the log store's flusher needs a runtime: {e}"))
        })?;
        let (jobs, queue) = tokio::sync::mpsc::unbounded_channel();
        let (finish, finished) = tokio::sync::watch::channel(0);
        let finish = Arc::new(finish);
        spawn_flusher(&runtime, queue, finish.clone())?;
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
            flush: Arc::new(Flush {
                jobs,
                submitted: std::sync::atomic::AtomicU64::new(0),
                finished,
                finish,
                node_id,
            }),
        })
    }

    /// Returns once every append made so far is flushed (or failed to be).
    pub(crate) async fn flushed(&self) -> io::Result<()> {
        let submitted = self
            .flush
            .submitted
            .load(std::sync::atomic::Ordering::Acquire);
        let mut finished = self.flush.finished.clone();
        finished
            .wait_for(|f| *f >= submitted)
            .await
            .map(|_| ())
            .map_err(|_| io::Error::other("the log store's flusher stopped"))
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, LogInner>> {
        self.inner
            .lock()
            .map_err(|_| io::Error::other("log store lock poisoned"))
    }

    /// The vote as last saved.
    pub fn vote(&self) -> io::Result<Option<Vote>> {
        Ok(self.lock()?.vote)
    }
}

impl LogInner {
    fn recover(&mut self) -> io::Result<()> {
        let names = self
            .fs
            .list(&self.dir)
            .map_err(|e| ctx(format!("list {}", self.dir.display()), e))?;
        let mut bases = Vec::new();
        for name in &names {
            if name.ends_with(TEMP_SUFFIX) {
                // A replacement that never got renamed into place.
                self.fs
                    .remove_file(&self.dir.join(name))
                    .map_err(|e| ctx(format!("remove {name}"), e))?;
            } else if let Some(stem) = name.strip_suffix(SEGMENT_SUFFIX) {
                let base = stem
                    .parse::<u64>()
                    .map_err(|_| corrupt(format!("unexpected segment name {name}")))?;
                bases.push(base);
            }
        }
        bases.sort_unstable();
        let purged_index = self.purged.map(|p| p.index);
        let mut next: Option<u64> = None;
        for (i, &base) in bases.iter().enumerate() {
            // Segments follow each other, except that a gap may come after
            // segments that hold only purged entries.
            let behind_purge = |i: u64| purged_index.is_some_and(|p| i <= p + 1);
            if next.is_some_and(|n| n != base && !(behind_purge(n) && behind_purge(base))) {
                return Err(corrupt(format!(
                    "{} does not follow the previous segment, which ends before {}",
                    segment_name(base),
                    next.unwrap_or_default()
                )));
            }
            let is_last = i + 1 == bases.len();
            next = Some(self.recover_segment(base, is_last, purged_index)?);
        }
        if let (Some(purged), Some(first)) = (purged_index, self.entries.keys().next()) {
            if *first != purged + 1 {
                return Err(corrupt(format!(
                    "the log resumes at {first} after the purge point {purged}"
                )));
            }
        }
        // A last segment that holds only purged entries (its removal was
        // not yet durable) must not take the next entry after a gap.
        self.roll_next = next.is_some_and(|n| n != self.next_index());
        Ok(())
    }

    /// Reads one segment; returns the index the next segment starts at.
    fn recover_segment(
        &mut self,
        base: u64,
        is_last: bool,
        purged: Option<u64>,
    ) -> io::Result<u64> {
        let name = segment_name(base);
        let path = self.dir.join(&name);
        let buf = frame::read_file(self.fs.as_ref(), &path)
            .map_err(|e| ctx(format!("read {name}"), e))?
            .unwrap_or_default();
        let decoded = frame::decode(&buf).map_err(|e| corrupt(format!("{name}: {e}")))?;
        if decoded.valid_len < buf.len() as u64 && !is_last {
            // Only the last segment can have been written without an fsync
            // completing: a segment is synced before the next is created.
            return Err(corrupt(format!(
                "{name} has a torn tail but is not the last segment"
            )));
        }
        let mut expected = base;
        for (position, payload) in &decoded.frames {
            let entry: Entry = serde_json::from_slice(payload)
                .map_err(|e| corrupt(format!("{name}: entry at {position}: {e}")))?;
            if entry.log_id.index != expected {
                return Err(corrupt(format!(
                    "{name}: entry at {position} has index {}, expected {expected}",
                    entry.log_id.index
                )));
            }
            expected += 1;
            if purged.is_some_and(|p| entry.log_id.index <= p) {
                continue;
            }
            self.positions.insert(entry.log_id.index, (base, *position));
            self.entries.insert(entry.log_id.index, entry);
        }
        let handle = self
            .fs
            .open(&path, false)
            .map_err(|e| ctx(format!("open {name}"), e))?;
        if decoded.valid_len < buf.len() as u64 {
            tracing::warn!(
                segment = %name,
                cut_bytes = buf.len() as u64 - decoded.valid_len,
                "cutting the torn tail of the metadata log"
            );
            handle
                .set_len(decoded.valid_len)
                .and_then(|()| handle.sync())
                .map_err(|e| ctx(format!("cut torn tail of {name}"), e))?;
        }
        self.segments.insert(
            base,
            Segment {
                handle,
                len: decoded.valid_len,
            },
        );
        Ok(expected)
    }

    fn last_log_id(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.purged)
    }

    fn next_index(&self) -> u64 {
        self.last_log_id().map_or(0, |l| l.index + 1)
    }

    /// The segment the next entry (at `index`) goes to, rolling when due.
    fn active_segment(&mut self, index: u64) -> io::Result<u64> {
        if let Some((&base, segment)) = self.segments.iter().next_back() {
            if !self.roll_next && segment.len < SEGMENT_BYTES_MAX {
                return Ok(base);
            }
        }
        let name = segment_name(index);
        let path = self.dir.join(&name);
        if self.fs.len(&path)?.is_some() {
            // Left by a truncation that emptied it; start it afresh.
            self.fs.remove_file(&path)?;
        }
        let handle = self
            .fs
            .open(&path, true)
            .map_err(|e| ctx(format!("create {name}"), e))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| ctx(format!("sync {}", self.dir.display()), e))?;
        self.segments.insert(index, Segment { handle, len: 0 });
        self.roll_next = false;
        Ok(index)
    }

    /// Writes `entries` and returns the segments they went to, which the
    /// caller must fsync before the entries count as appended.
    fn append(&mut self, entries: Vec<Entry>) -> io::Result<Vec<(u64, Arc<dyn FileHandle>)>> {
        let mut touched: Vec<u64> = Vec::new();
        for entry in entries {
            let index = entry.log_id.index;
            if index != self.next_index() {
                return Err(io::Error::other(format!(
                    "append of index {index} where {} was due",
                    self.next_index()
                )));
            }
            let payload = serde_json::to_vec(&entry).map_err(io::Error::other)?;
            let mut buf = Vec::with_capacity(payload.len() + frame::FRAME_HEADER_BYTES);
            frame::encode(&payload, &mut buf);
            let base = self.active_segment(index)?;
            let segment = self.segments.get_mut(&base).expect("active segment exists");
            segment
                .handle
                .write_all_at(&buf, segment.len)
                .map_err(|e| ctx(format!("write {}", segment_name(base)), e))?;
            self.positions.insert(index, (base, segment.len));
            segment.len += buf.len() as u64;
            self.entries.insert(index, entry);
            if touched.last() != Some(&base) {
                touched.push(base);
            }
        }
        Ok(touched
            .into_iter()
            .map(|base| (base, self.segments[&base].handle.clone()))
            .collect())
    }

    /// Removes every entry after `last` (all of them with `None`).
    fn truncate_after(&mut self, last: Option<u64>) -> io::Result<()> {
        let first_removed = last.map_or(0, |l| l + 1);
        let Some(&(base, position)) = self.positions.get(&first_removed) else {
            return Ok(()); // Nothing above `last`.
        };
        let doomed: Vec<u64> = self.segments.range(base..).map(|(b, _)| *b).collect();
        for b in doomed {
            if b == base && position > 0 {
                let segment = self.segments.get_mut(&b).expect("listed");
                segment
                    .handle
                    .set_len(position)
                    .and_then(|()| segment.handle.sync())
                    .map_err(|e| ctx(format!("truncate {}", segment_name(b)), e))?;
                segment.len = position;
            } else {
                self.segments.remove(&b);
                self.fs
                    .remove_file(&self.dir.join(segment_name(b)))
                    .map_err(|e| ctx(format!("remove {}", segment_name(b)), e))?;
            }
        }
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| ctx(format!("sync {}", self.dir.display()), e))?;
        self.entries.split_off(&first_removed);
        self.positions.split_off(&first_removed);
        Ok(())
    }

    /// Forgets every entry up to `log_id`, durably, and deletes the
    /// segments that then hold nothing.
    fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        if self.purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        write_single(&self.fs, &self.dir, LOG_START_FILE, &log_id)?;
        self.purged = Some(log_id);
        self.entries = self.entries.split_off(&(log_id.index + 1));
        self.positions = self.positions.split_off(&(log_id.index + 1));
        self.roll_next = true;
        // A segment can go once no kept entry lives in it.
        let live: std::collections::BTreeSet<u64> = self.positions.values().map(|p| p.0).collect();
        let dead: Vec<u64> = self
            .segments
            .keys()
            .copied()
            .filter(|b| !live.contains(b))
            .collect();
        for base in dead {
            self.segments.remove(&base);
            self.fs
                .remove_file(&self.dir.join(segment_name(base)))
                .map_err(|e| ctx(format!("remove {}", segment_name(base)), e))?;
        }
        // Not needed for safety (a segment that comes back holds only
        // purged entries), but it keeps start-up from reading it again.
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| ctx(format!("sync {}", self.dir.display()), e))
    }

    fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        write_single(&self.fs, &self.dir, VOTE_FILE, vote)?;
        self.vote = Some(*vote);
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<Entry>> {
        let inner = self.lock()?;
        Ok(inner.entries.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.vote()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let inner = self.lock()?;
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: inner.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        self.flushed().await?;
        self.lock()?.save_vote(vote)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        // Written now, fsynced before openraft hears that it is flushed.
        // Numbered under the lock, so jobs queue in the order their writes
        // were made.
        let mut inner = self.lock()?;
        let segments = inner.append(entries)?;
        let number = self
            .flush
            .submitted
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1;
        let leading = inner
            .vote
            .is_some_and(|v| v.committed && v.leader_id.node_id == self.flush.node_id);
        let flusher_idle = *self.flush.finished.borrow() + 1 == number;
        if !leading && flusher_idle {
            // Not under the lock: readers of the log need not wait for the
            // disk, and no other append can come meanwhile (see the module
            // docs).
            drop(inner);
            let synced =
                sync_segments(&segments).map_err(|(kind, message)| io::Error::new(kind, message));
            callback.io_completed(synced);
            self.flush.finish.send_replace(number);
            return Ok(());
        }
        let job = FlushJob {
            number,
            segments,
            callback,
        };
        self.flush
            .jobs
            .send(job)
            .map_err(|_| io::Error::other("the log store's flusher stopped"))
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        self.flushed().await?;
        self.lock()?.truncate_after(last_log_id.map(|l| l.index))
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        self.flushed().await?;
        self.lock()?.purge(log_id)
    }
}

#[cfg(test)]
mod tests {
    use openraft::impls::leader_id_adv::LeaderId;
    use openraft::EntryPayload;
    use tarn_storage::sim::SimFileSystem;

    use super::*;
    use crate::types::Data;

    const DIR: &str = "/meta/__cluster_metadata-0";

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(LeaderId { term, node_id: 1 }, index),
            payload: EntryPayload::Normal(Data(bytes::Bytes::from(format!("t{term} i{index}")))),
        }
    }

    fn setup(seed: u64) -> (Arc<SimFileSystem>, Arc<dyn FileSystem>, LogStore) {
        let sim = Arc::new(SimFileSystem::new(seed));
        let fs: Arc<dyn FileSystem> = sim.clone();
        let store = LogStore::open(fs.clone(), Path::new(DIR), 1).unwrap();
        (sim, fs, store)
    }

    /// A crash: the machine loses power, tearing unsynced tails, and comes
    /// back; the log is opened afresh.
    fn crash(sim: &SimFileSystem, fs: &Arc<dyn FileSystem>) -> io::Result<LogStore> {
        sim.halt();
        sim.power_cut(true);
        sim.restart();
        LogStore::open(fs.clone(), Path::new(DIR), 1)
    }

    /// Appends and waits for openraft's callback, which tells an append
    /// is durable.
    async fn append(store: &mut LogStore, entries: Vec<Entry>) -> io::Result<()> {
        use openraft::type_config::TypeConfigExt;
        let (flushed, done) = TypeConfig::oneshot();
        store.append(entries, IOFlushed::signal(flushed)).await?;
        done.await.map_err(io::Error::other)?
    }

    async fn ids(store: &mut LogStore) -> Vec<(u64, u64)> {
        let entries = store.try_get_log_entries(..).await.unwrap();
        entries
            .iter()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect()
    }

    #[tokio::test]
    async fn append_truncate_and_purge_are_durable() {
        let (sim, fs, mut store) = setup(1);
        append(&mut store, (0..10).map(|i| entry(1, i)).collect())
            .await
            .unwrap();
        store
            .truncate_after(Some(LogId::new(
                LeaderId {
                    term: 1,
                    node_id: 1,
                },
                6,
            )))
            .await
            .unwrap();
        append(&mut store, vec![entry(2, 7), entry(2, 8)])
            .await
            .unwrap();
        store
            .purge(LogId::new(
                LeaderId {
                    term: 1,
                    node_id: 1,
                },
                3,
            ))
            .await
            .unwrap();
        append(&mut store, vec![entry(2, 9)]).await.unwrap();
        let expected: Vec<(u64, u64)> = (4..=6)
            .map(|i| (1, i))
            .chain((7..=9).map(|i| (2, i)))
            .collect();
        assert_eq!(ids(&mut store).await, expected);

        let mut store = crash(&sim, &fs).unwrap();
        assert_eq!(ids(&mut store).await, expected);
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(3));
        assert_eq!(state.last_log_id.map(|l| l.index), Some(9));

        // A purge past the last entry (after installing a snapshot)
        // empties the log; the next append follows the purge point.
        store
            .purge(LogId::new(
                LeaderId {
                    term: 3,
                    node_id: 1,
                },
                20,
            ))
            .await
            .unwrap();
        assert!(ids(&mut store).await.is_empty());
        assert_eq!(
            fs.list(Path::new(DIR))
                .unwrap()
                .iter()
                .filter(|n| n.ends_with(SEGMENT_SUFFIX))
                .count(),
            0,
            "segments behind the purge point are deleted"
        );
        append(&mut store, vec![entry(3, 21)]).await.unwrap();
        let mut store = crash(&sim, &fs).unwrap();
        assert_eq!(ids(&mut store).await, vec![(3, 21)]);
        assert!(
            append(&mut store, vec![entry(3, 23)]).await.is_err(),
            "a gap"
        );
    }

    /// Starts an append and says whether openraft has been told it is
    /// flushed by the time `append` returned, then waits until it is.
    async fn flushed_on_return(store: &mut LogStore, entries: Vec<Entry>) -> bool {
        use futures_util::FutureExt;
        use openraft::type_config::TypeConfigExt;
        let (flushed, done) = TypeConfig::oneshot();
        store
            .append(entries, IOFlushed::signal(flushed))
            .await
            .unwrap();
        let mut done = Box::pin(done);
        match (&mut done).now_or_never() {
            Some(flushed) => {
                flushed.unwrap().unwrap();
                true
            }
            None => {
                done.await.unwrap().unwrap();
                false
            }
        }
    }

    #[tokio::test]
    async fn a_follower_fsyncs_its_appends_itself_and_a_leader_leaves_them_to_the_flusher() {
        // On this single-threaded runtime the flusher is a task, which
        // cannot have run before `append` returns.
        let (sim, fs, mut store) = setup(6);
        assert!(flushed_on_return(&mut store, vec![entry(1, 0)]).await);
        store.save_vote(&Vote::new_committed(1, 2)).await.unwrap();
        assert!(flushed_on_return(&mut store, vec![entry(1, 1)]).await);
        store.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        assert!(!flushed_on_return(&mut store, vec![entry(2, 2)]).await);
        assert!(!flushed_on_return(&mut store, vec![entry(2, 3)]).await);
        // Both kinds survive a power cut once openraft was told.
        let mut store = crash(&sim, &fs).unwrap();
        assert_eq!(ids(&mut store).await, vec![(1, 0), (1, 1), (2, 2), (2, 3)]);
        // Leading no more (a newer term's vote for another node): its own
        // fsyncs again.
        store.save_vote(&Vote::new_committed(3, 3)).await.unwrap();
        assert!(flushed_on_return(&mut store, vec![entry(3, 4)]).await);
    }

    #[tokio::test]
    async fn a_purged_segment_that_comes_back_takes_no_new_entries() {
        let (sim, fs, mut store) = setup(5);
        append(&mut store, (0..5).map(|i| entry(1, i)).collect())
            .await
            .unwrap();
        let segment = Path::new(DIR).join(segment_name(0));
        let saved = frame::read_file(fs.as_ref(), &segment).unwrap().unwrap();
        store
            .purge(LogId::new(
                LeaderId {
                    term: 2,
                    node_id: 1,
                },
                9,
            ))
            .await
            .unwrap();
        // The removal did not reach the disk: the segment is back.
        let handle = fs.open(&segment, true).unwrap();
        handle.write_all_at(&saved, 0).unwrap();
        handle.sync().unwrap();
        let mut store = crash(&sim, &fs).unwrap();
        assert!(ids(&mut store).await.is_empty());
        append(&mut store, vec![entry(2, 10)]).await.unwrap();
        let mut store = crash(&sim, &fs).unwrap();
        assert_eq!(ids(&mut store).await, vec![(2, 10)]);
    }

    #[tokio::test]
    async fn truncating_everything_removes_the_segments() {
        let (sim, fs, mut store) = setup(2);
        append(&mut store, (0..3).map(|i| entry(1, i)).collect())
            .await
            .unwrap();
        store.truncate_after(None).await.unwrap();
        let mut store = crash(&sim, &fs).unwrap();
        assert!(ids(&mut store).await.is_empty());
        append(&mut store, vec![entry(2, 0)]).await.unwrap();
        let mut store = crash(&sim, &fs).unwrap();
        assert_eq!(ids(&mut store).await, vec![(2, 0)]);
    }

    #[tokio::test]
    async fn acknowledged_appends_survive_a_power_cut_that_tears_the_tail() {
        let segment = Path::new(DIR).join(segment_name(0));
        for seed in 0..40 {
            let (sim, fs, mut store) = setup(seed);
            let batches = 1 + sim.random(8);
            let mut next = 0;
            for _ in 0..batches {
                let n = 1 + sim.random(5);
                append(&mut store, (next..next + n).map(|i| entry(1, i)).collect())
                    .await
                    .unwrap();
                next += n;
            }
            let acked = next;
            // The next append is written and the power fails before its
            // fsync: the tail is torn at a seeded point.
            let n = 1 + sim.random(5);
            let mut tail = Vec::new();
            for i in next..next + n {
                frame::encode(&serde_json::to_vec(&entry(1, i)).unwrap(), &mut tail);
            }
            let end = fs.len(&segment).unwrap().unwrap();
            let handle = fs.open(&segment, false).unwrap();
            handle.write_all_at(&tail, end).unwrap();
            let mut store = crash(&sim, &fs).unwrap();
            let got = ids(&mut store).await;
            assert!(got.len() as u64 >= acked, "seed {seed}: lost acked entries");
            assert!(got.len() as u64 <= acked + n, "seed {seed}");
            assert!(got.iter().enumerate().all(|(i, id)| *id == (1, i as u64)));
            // The cut left a clean end: appends continue and survive.
            let end = got.len() as u64;
            append(&mut store, vec![entry(2, end)]).await.unwrap();
            let mut store = crash(&sim, &fs).unwrap();
            assert_eq!(ids(&mut store).await.len() as u64, end + 1, "seed {seed}");
        }
    }

    #[tokio::test]
    async fn a_damaged_entry_before_the_tail_stops_recovery() {
        let (sim, fs, mut store) = setup(3);
        append(&mut store, (0..3).map(|i| entry(1, i)).collect())
            .await
            .unwrap();
        let segment = Path::new(DIR).join(segment_name(0));
        let handle = fs.open(&segment, false).unwrap();
        handle.write_all_at(b"X", 9).unwrap(); // inside the first payload
        handle.sync().unwrap();
        let err = crash(&sim, &fs).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }

    #[tokio::test]
    async fn the_vote_is_durable_when_save_vote_returns() {
        let (sim, fs, mut store) = setup(4);
        assert_eq!(store.read_vote().await.unwrap(), None);
        let vote = Vote::new(5, 2);
        store.save_vote(&vote).await.unwrap();
        let committed = Vote::new_committed(6, 3);
        store.save_vote(&committed).await.unwrap();
        let mut store = crash(&sim, &fs).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(committed));
    }
}
