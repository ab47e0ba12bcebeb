//! `SimFileSystem`: an in-memory [`FileSystem`] that can lose power.
//!
//! Each file keeps two copies of its bytes: what has been written and
//! what has been fsynced. [`SimFileSystem::power_cut`] throws away
//! everything not fsynced, and with `tear` keeps a random prefix of each
//! file's unsynced appended tail instead (a write torn at a random byte),
//! drawn from a seeded generator so a failing seed replays exactly.
//! Simplification: directory operations (create, rename, remove) are
//! durable at once, as on a journaling file system after the metadata
//! commit; file contents are not. [`SimFileSystem::halt`] makes every
//! operation fail, so a crashed process writes nothing after the cut.
//!
//! [`SimFileSystem::fail_fsyncs`] makes the next fsyncs of a file or
//! directory fail. A file whose fsync failed then behaves as Linux may
//! after a failed writeback, in the worst case: its dirty pages were
//! dropped, so reads still see the written bytes but every later fsync
//! reports success while persisting nothing new.
//! [`SimFileSystem::fail_reads`] makes the next reads of a file fail with
//! EIO, as a failing device does.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::file::{FileHandle, FileSystem};

#[derive(Debug, Default)]
struct Contents {
    written: Vec<u8>,
    durable: Vec<u8>,
    modified_ms: i64,
    /// How many of the next fsyncs fail.
    failing_syncs: u32,
    /// How many of the next reads fail, with EIO.
    failing_reads: u32,
    /// An fsync failed: later ones "succeed" without persisting anything.
    writeback_lost: bool,
    /// fsyncs asked for, failed or not, for tests.
    syncs: u64,
}

#[derive(Debug, Default)]
struct Inode(Mutex<Contents>);

/// An open file, and the file system's halt switch.
#[derive(Debug)]
struct SimHandle(Arc<Inode>, Arc<AtomicBool>);

impl SimHandle {
    fn check(&self) -> io::Result<()> {
        check(&self.1)
    }
}

/// Every operation fails while the file system is halted (see
/// [`SimFileSystem::halt`]).
fn check(halted: &AtomicBool) -> io::Result<()> {
    if halted.load(Ordering::Acquire) {
        Err(io::Error::other("simulated machine is down"))
    } else {
        Ok(())
    }
}

impl FileHandle for SimHandle {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        self.check()?;
        let mut contents = self.0 .0.lock();
        if contents.failing_reads > 0 {
            contents.failing_reads -= 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let start = position as usize;
        let end = start + buf.len();
        if end > contents.written.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end",
            ));
        }
        buf.copy_from_slice(&contents.written[start..end]);
        Ok(())
    }

    fn write_all_at(&self, data: &[u8], position: u64) -> io::Result<()> {
        self.check()?;
        let mut contents = self.0 .0.lock();
        let start = position as usize;
        if contents.written.len() < start + data.len() {
            contents.written.resize(start + data.len(), 0);
        }
        contents.written[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.0 .0.lock().written.resize(len as usize, 0);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.check()?;
        let mut contents = self.0 .0.lock();
        contents.syncs += 1;
        if contents.failing_syncs > 0 {
            contents.failing_syncs -= 1;
            contents.writeback_lost = true;
            return Err(io::Error::other("simulated fsync failure (EIO)"));
        }
        if !contents.writeback_lost {
            contents.durable = contents.written.clone();
        }
        Ok(())
    }
}

#[derive(Debug)]
struct State {
    files: HashMap<PathBuf, Arc<Inode>>,
    dirs: BTreeSet<PathBuf>,
    rng: u64,
    halted: Arc<AtomicBool>,
    /// How many of the next fsyncs of each directory fail.
    failing_dir_syncs: HashMap<PathBuf, u32>,
}

/// See the module docs.
#[derive(Debug)]
pub struct SimFileSystem(Mutex<State>);

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl SimFileSystem {
    pub fn new(seed: u64) -> SimFileSystem {
        SimFileSystem(Mutex::new(State {
            files: HashMap::new(),
            dirs: BTreeSet::from([PathBuf::from("/")]),
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            halted: Arc::default(),
            failing_dir_syncs: HashMap::new(),
        }))
    }

    /// The next `count` fsyncs of `path` (a file, through any handle, or a
    /// directory) fail with an I/O error; see the module docs for what a
    /// file is like afterwards. Returns false when nothing is at `path`.
    pub fn fail_fsyncs(&self, path: &Path, count: u32) -> bool {
        let mut state = self.0.lock();
        if let Some(inode) = state.files.get(path) {
            inode.0.lock().failing_syncs = count;
            true
        } else if state.dirs.contains(path) {
            state.failing_dir_syncs.insert(path.to_path_buf(), count);
            true
        } else {
            false
        }
    }

    /// The next `count` reads of the file at `path`, through any handle,
    /// fail with EIO (a failing device). Returns false when there is no
    /// file at `path`.
    pub fn fail_reads(&self, path: &Path, count: u32) -> bool {
        let state = self.0.lock();
        match state.files.get(path) {
            Some(inode) => {
                inode.0.lock().failing_reads = count;
                true
            }
            None => false,
        }
    }

    /// fsyncs asked of the file at `path` so far (0 when there is none).
    pub fn fsyncs(&self, path: &Path) -> u64 {
        let state = self.0.lock();
        state
            .files
            .get(path)
            .map_or(0, |inode| inode.0.lock().syncs)
    }

    /// The machine stops: from now on every operation, through any handle,
    /// fails, so a process still running writes nothing more. With
    /// [`SimFileSystem::power_cut`] and [`SimFileSystem::restart`] this is
    /// a crash of the whole machine.
    pub fn halt(&self) {
        self.0.lock().halted.store(true, Ordering::Release);
    }

    /// The machine is back: operations work again (on what survived).
    pub fn restart(&self) {
        self.0.lock().halted.store(false, Ordering::Release);
    }

    /// A number in `0..=max` from the seeded generator (xorshift64*).
    pub fn random(&self, max: u64) -> u64 {
        let mut state = self.0.lock();
        random(&mut state.rng, max)
    }

    /// Loses everything not fsynced; with `tear`, each file keeps a random
    /// prefix of its unsynced appended bytes. Open handles keep working on
    /// the surviving contents.
    pub fn power_cut(&self, tear: bool) {
        let mut state = self.0.lock();
        let mut inodes: Vec<(PathBuf, Arc<Inode>)> = state
            .files
            .iter()
            .map(|(p, i)| (p.clone(), i.clone()))
            .collect();
        inodes.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, inode) in inodes {
            let mut contents = inode.0.lock();
            let durable_len = contents.durable.len();
            let appended_only = contents.written.len() > durable_len
                && contents.written[..durable_len] == contents.durable[..];
            let keep = if tear && appended_only {
                random(
                    &mut state.rng,
                    (contents.written.len() - durable_len) as u64,
                ) as usize
            } else {
                0
            };
            // A file shrunk since its last fsync (truncated) comes back as
            // it was then: the truncation was not made durable either.
            let mut survived = contents.durable.clone();
            if keep > 0 {
                survived.extend_from_slice(&contents.written[durable_len..durable_len + keep]);
            }
            contents.written = survived;
        }
    }
}

fn random(rng: &mut u64, max: u64) -> u64 {
    *rng ^= *rng >> 12;
    *rng ^= *rng << 25;
    *rng ^= *rng >> 27;
    let value = rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
    if max == u64::MAX {
        value
    } else {
        value % (max + 1)
    }
}

impl FileSystem for SimFileSystem {
    fn replays(&self) -> bool {
        true
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FileHandle>> {
        let mut state = self.0.lock();
        check(&state.halted)?;
        if let Some(inode) = state.files.get(path) {
            return Ok(Arc::new(SimHandle(inode.clone(), state.halted.clone())));
        }
        let parent = path.parent().ok_or_else(|| not_found(path))?;
        if !create || !state.dirs.contains(parent) {
            return Err(not_found(path));
        }
        let inode = Arc::new(Inode::default());
        state.files.insert(path.to_path_buf(), inode.clone());
        Ok(Arc::new(SimHandle(inode, state.halted.clone())))
    }

    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        let state = self.0.lock();
        check(&state.halted)?;
        Ok(state
            .files
            .get(path)
            .map(|i| i.0.lock().written.len() as u64))
    }

    fn modified_ms(&self, path: &Path) -> io::Result<i64> {
        let state = self.0.lock();
        check(&state.halted)?;
        let inode = state.files.get(path).ok_or_else(|| not_found(path))?;
        let modified = inode.0.lock().modified_ms;
        Ok(modified)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.0.lock();
        check(&state.halted)?;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let child_name = |p: &PathBuf| {
            (p.parent() == Some(dir))
                .then(|| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .flatten()
        };
        let mut names: Vec<String> = state.files.keys().filter_map(child_name).collect();
        names.extend(state.dirs.iter().filter_map(child_name));
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.0.lock();
        check(&state.halted)?;
        for ancestor in dir.ancestors() {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.0.lock();
        check(&state.halted)?;
        state
            .files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.0.lock();
        check(&state.halted)?;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        state.files.retain(|p, _| !p.starts_with(dir));
        state.dirs.retain(|p| !p.starts_with(dir));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.0.lock();
        check(&state.halted)?;
        if let Some(inode) = state.files.remove(from) {
            state.files.insert(to.to_path_buf(), inode);
            return Ok(());
        }
        if !state.dirs.contains(from) {
            return Err(not_found(from));
        }
        // A directory: everything below it moves.
        let moved = |p: &Path| to.join(p.strip_prefix(from).expect("below the directory"));
        let files: Vec<PathBuf> = state
            .files
            .keys()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for path in files {
            let inode = state.files.remove(&path).expect("listed");
            state.files.insert(moved(&path), inode);
        }
        let dirs: Vec<PathBuf> = state
            .dirs
            .iter()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for dir in dirs {
            state.dirs.remove(&dir);
            state.dirs.insert(moved(&dir));
        }
        Ok(())
    }

    fn sync_file_system(&self, _dir: &Path) -> io::Result<()> {
        let state = self.0.lock();
        check(&state.halted)?;
        for inode in state.files.values() {
            let mut contents = inode.0.lock();
            contents.syncs += 1;
            if !contents.writeback_lost {
                contents.durable = contents.written.clone();
            }
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.0.lock();
        check(&state.halted)?;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        match state.failing_dir_syncs.get_mut(dir) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Err(io::Error::other("simulated directory fsync failure (EIO)"))
            }
            _ => Ok(()),
        }
    }
}

/// The seeds a simulation test runs, from the environment under
/// `prefix` (`TARN_SIM`, say): `{prefix}_SEED=n` replays seed n alone;
/// otherwise `{prefix}_SEEDS` seeds (`count` by default) from
/// `{prefix}_SEEDS_FROM` (0 by default), then every seed of `regression`
/// (seeds that once found a fault) not among them. A seed's faults are
/// fixed by its number, so a later hunt starts where the last stopped.
pub fn seeds_from_env(prefix: &str, count: u64, regression: &[u64]) -> Vec<u64> {
    let var = |suffix: &str| {
        let name = format!("{prefix}_{suffix}");
        std::env::var(&name).ok().map(|v| {
            v.parse::<u64>()
                .unwrap_or_else(|_| panic!("{name} is a number"))
        })
    };
    if let Some(seed) = var("SEED") {
        return vec![seed];
    }
    let count = var("SEEDS").unwrap_or(count);
    let from = var("SEEDS_FROM").unwrap_or(0);
    let range = from..from + count;
    let mut seeds: Vec<u64> = range.clone().collect();
    seeds.extend(regression.iter().filter(|s| !range.contains(*s)));
    seeds
}

#[cfg(test)]
mod tests {
    use tarn_protocol::record_batch::{
        set_base_offset, set_partition_leader_epoch, BatchIter, RecordBatchBuilder,
    };

    use super::*;
    use crate::error::StorageError;
    use crate::file::{LogEnv, ManualClock};
    use crate::log::Log;
    use crate::log_config::LogConfig;

    const SEEDS: u64 = 60;

    fn setup(seed: u64) -> (Arc<SimFileSystem>, LogEnv, PathBuf) {
        let fs = Arc::new(SimFileSystem::new(seed));
        let env = LogEnv::new(fs.clone(), 4, Arc::new(ManualClock::new(0)));
        (fs, env, PathBuf::from("/data/t-0"))
    }

    fn config(flush_messages: i64) -> LogConfig {
        LogConfig {
            segment_bytes: 700,
            index_interval_bytes: 64,
            flush_messages,
            ..LogConfig::default()
        }
    }

    fn batch(seed: u64, i: u64, records: u64) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new();
        for r in 0..records {
            let value = format!("seed {seed} append {i} record {r}");
            builder = builder.record(i as i64, Some(b"k"), Some(value.as_bytes()));
        }
        builder.build()
    }

    /// Every batch of the log, as stored.
    fn batches(log: &Log) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            let bytes = log.read(next, usize::MAX, true).unwrap();
            assert!(!bytes.is_empty(), "no batch at {next} below the log end");
            for item in BatchIter::new(&bytes) {
                let (position, header) = item.expect("recovered batches are valid");
                out.push(bytes[position..position + header.total_size()].to_vec());
                next = header.last_offset() + 1;
            }
        }
        assert_eq!(next, log.log_end_offset());
        out
    }

    /// Appends a random number of batches; with `flush`, fsyncs (as the
    /// group commit would) and acknowledges each, except that the last
    /// append may be cut off before its fsync. With `deferred`, rolls leave
    /// their fsyncs to a roll flusher, which runs now and then. Returns the
    /// acknowledged batches, every written batch, and how many were in
    /// rolled segments (or, `deferred`, below the durable offset).
    fn run(seed: u64, flush: bool, deferred: bool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, usize) {
        let (fs, env, dir) = setup(seed);
        let mut log =
            Log::open_in(&env, &dir, config(if flush { 1 } else { i64::MAX }), true).unwrap();
        let flusher = Arc::new(crate::flush::RollFlusher::manual());
        if deferred {
            log.defer_roll_fsyncs(flusher.clone());
        }
        let appends = 1 + fs.random(60);
        let crash_before_last_fsync = fs.random(1) == 0;
        let (mut acked, mut written) = (Vec::new(), Vec::new());
        for i in 0..appends {
            let mut data = batch(seed, i, 1 + fs.random(4));
            if let Some(roll) = log.prepare_roll(&data).unwrap() {
                roll.run().unwrap();
            }
            let info = log.append(&data, 0).unwrap();
            if fs.random(2) == 0 {
                flusher.run_queued();
            }
            // What the log wrote: the batch with its assigned offset and epoch.
            set_base_offset(&mut data, info.base_offset).unwrap();
            set_partition_leader_epoch(&mut data, 0).unwrap();
            written.push(data.clone());
            assert_eq!(log.flush_due(), flush);
            if flush && !(i + 1 == appends && crash_before_last_fsync) {
                log.prepare_flush()
                    .unwrap()
                    .expect("unflushed data")
                    .run()
                    .unwrap();
                acked.push(data);
            }
        }
        let durable_end = if deferred {
            log.durable_offset()
        } else {
            *log.segment_base_offsets().last().unwrap()
        };
        let in_rolled = written
            .iter()
            .filter(|b| i64::from_be_bytes(b[..8].try_into().unwrap()) < durable_end)
            .count();
        fs.power_cut(true);
        drop(log);
        let mut log = Log::open_in(&env, &dir, config(1), false).unwrap();
        let got = batches(&log);
        // Recovery left a clean end: the next append lands right after it.
        let end = log.log_end_offset();
        let info = log.append(&batch(seed, 999, 1), 0).unwrap();
        assert_eq!(info.base_offset, end);
        assert!(
            written.starts_with(&got),
            "seed {seed}: recovered batches are not a prefix of what was written"
        );
        (acked, got, in_rolled)
    }

    #[test]
    fn a_file_shrunk_since_its_last_fsync_comes_back_as_it_was_synced() {
        use crate::file::FileSystem;
        let fs = SimFileSystem::new(3);
        fs.create_dir_all(Path::new("/d")).unwrap();
        let path = Path::new("/d/f");
        let file = fs.open(path, true).unwrap();
        file.write_all_at(&[7; 36], 0).unwrap();
        file.sync().unwrap();
        file.set_len(24).unwrap();
        fs.power_cut(true);
        assert_eq!(
            fs.len(path).unwrap(),
            Some(36),
            "the shrink was never fsynced"
        );
    }

    #[test]
    fn with_flush_messages_1_every_acknowledged_append_survives_a_power_cut() {
        for (seed, deferred) in (0..SEEDS).flat_map(|s| [(s, false), (s, true)]) {
            let (acked, got, _) = run(seed, true, deferred);
            assert!(
                got.starts_with(&acked),
                "seed {seed}: lost acknowledged data ({} acked, {} recovered)",
                acked.len(),
                got.len()
            );
            assert!(got.len() <= acked.len() + 1, "seed {seed}");
        }
    }

    #[test]
    fn without_flushes_recovery_yields_a_valid_prefix() {
        for (seed, deferred) in (0..SEEDS).flat_map(|s| [(s, false), (s, true)]) {
            let (_, got, in_rolled) = run(seed, false, deferred);
            // Rolled segments were fsynced by the roll, or (deferred) by the
            // flusher, so what they hold survives.
            assert!(
                got.len() >= in_rolled,
                "seed {seed}, deferred {deferred}: {} < {in_rolled}",
                got.len()
            );
        }
    }

    #[test]
    fn a_deferred_roll_marks_the_segment_it_closes_until_its_fsync_is_done() {
        let (fs, env, dir) = setup(12);
        let mut log = Log::open_in(&env, &dir, config(i64::MAX), true).unwrap();
        let flusher = Arc::new(crate::flush::RollFlusher::manual());
        log.defer_roll_fsyncs(flusher.clone());
        let first = dir.join("00000000000000000000.log");
        let marker = dir.join(crate::flush::unflushed_marker_name(0));
        let mut i = 0;
        while log.segment_base_offsets().len() < 2 {
            if let Some(roll) = log.prepare_roll(&batch(12, i, 4)).unwrap() {
                roll.run().unwrap();
                assert!(
                    fs.len(&marker).unwrap().is_some(),
                    "marked before it closes"
                );
            }
            log.append(&batch(12, i, 4), 0).unwrap();
            i += 1;
        }
        assert_eq!(
            fs.fsyncs(&first),
            0,
            "the roll left the fsync to the flusher"
        );
        assert_eq!(flusher.queued(), 1);
        assert_eq!(log.durable_offset(), 0);
        let second_base = log.segment_base_offsets()[1];

        // A flush of the new active segment covers the closed one first.
        let flush = log.prepare_flush().unwrap().unwrap();
        flush.run().unwrap();
        assert_eq!(fs.fsyncs(&first), 1);
        assert_eq!(log.durable_offset(), log.log_end_offset());
        assert!(fs.len(&marker).unwrap().is_none(), "settled, so unmarked");
        assert_eq!(flusher.run_queued(), 1, "the job finds nothing left to do");
        assert_eq!(fs.fsyncs(&first), 1, "and does not fsync again");

        // A second roll while the first closed segment still waits settles
        // it before it closes another.
        while log.segment_base_offsets().len() < 3 {
            log.append(&batch(12, i, 4), 0).unwrap();
            i += 1;
        }
        let second = dir.join(format!("{second_base:020}.log"));
        let synced = fs.fsyncs(&second);
        while log.segment_base_offsets().len() < 4 {
            log.append(&batch(12, i, 4), 0).unwrap();
            i += 1;
        }
        assert_eq!(fs.fsyncs(&second), synced + 1, "settled by the next roll");
        assert!(log.durable_offset() >= log.segment_base_offsets()[2]);
        assert_eq!(flusher.run_queued(), 2);
        assert_eq!(log.durable_offset(), log.segment_base_offsets()[3]);
        let names = env.list_file_names(&dir).unwrap();
        assert!(
            !names.iter().any(|n| n.ends_with(".unflushed")),
            "{names:?}"
        );

        // Closing settles what waits, so a clean start finds no marker.
        while flusher.queued() == 0 {
            log.append(&batch(12, i, 4), 0).unwrap();
            i += 1;
        }
        log.close().unwrap();
        let names = env.list_file_names(&dir).unwrap();
        assert!(
            !names.iter().any(|n| n.ends_with(".unflushed")),
            "{names:?}"
        );
    }

    #[test]
    fn a_closed_segment_that_lost_its_tail_takes_the_segments_after_it() {
        let (fs, env, dir) = setup(13);
        let mut log = Log::open_in(&env, &dir, config(i64::MAX), true).unwrap();
        let flusher = Arc::new(crate::flush::RollFlusher::manual());
        log.defer_roll_fsyncs(flusher.clone());
        log.append(&batch(13, 0, 4), 0).unwrap();
        log.flush().unwrap();
        let durable = log.log_end_offset();
        let mut i = 1;
        while log.segment_base_offsets().len() < 2 {
            log.append(&batch(13, i, 4), 0).unwrap();
            i += 1;
        }
        // The new segment reaches the disk (the kernel may write it back
        // at any moment), the closed one does not.
        log.append(&batch(13, i, 4), 0).unwrap();
        let active = log.segment_base_offsets()[1];
        env.sync_file(&dir.join(format!("{active:020}.log")))
            .unwrap();
        env.sync_dir(&dir).unwrap();
        fs.power_cut(false);
        drop(log);
        let log = Log::open_in(&env, &dir, config(i64::MAX), false).unwrap();
        assert_eq!(
            log.log_end_offset(),
            durable,
            "cut back to what was fsynced"
        );
        assert_eq!(log.segment_base_offsets(), vec![0]);
        assert_eq!(batches(&log).len(), 1);
        let names = env.list_file_names(&dir).unwrap();
        assert!(
            !names.iter().any(|n| n.ends_with(".unflushed")),
            "{names:?}"
        );

        // Without the marker, the torn segment would have been trusted:
        // the same crash on a log that rolls inline keeps everything the
        // roll fsynced.
        let (fs, env, dir) = setup(13);
        let mut log = Log::open_in(&env, &dir, config(i64::MAX), true).unwrap();
        let mut i = 0;
        while log.segment_base_offsets().len() < 2 {
            log.append(&batch(13, i, 4), 0).unwrap();
            i += 1;
        }
        let rolled_end = log.segment_base_offsets()[1];
        fs.power_cut(false);
        drop(log);
        let log = Log::open_in(&env, &dir, config(i64::MAX), false).unwrap();
        assert_eq!(log.log_end_offset(), rolled_end);
    }

    #[test]
    fn a_failed_fsync_takes_the_log_offline_and_nothing_it_covered_counts_as_durable() {
        let (fs, env, dir) = setup(7);
        let mut log = Log::open_in(&env, &dir, config(1), true).unwrap();
        log.append(&batch(7, 0, 2), 0).unwrap();
        log.prepare_flush().unwrap().unwrap().run().unwrap();
        assert_eq!(log.durable_offset(), 2);
        log.append(&batch(7, 1, 2), 0).unwrap();
        let segment = dir.join("00000000000000000000.log");
        assert!(fs.fail_fsyncs(&segment, 1));
        let flush = log.prepare_flush().unwrap().unwrap();
        assert!(flush.run().is_err(), "the fsync failed");
        assert_eq!(log.durable_offset(), 2, "the failed fsync covered nothing");
        assert!(log.offline_cause().is_some());
        // The next fsync would "succeed" (the sim, like Linux, dropped the
        // dirty pages), so the log must not try it and claim durability.
        assert!(matches!(
            log.append(&batch(7, 2, 1), 0),
            Err(crate::AppendError::Storage(StorageError::Offline { .. }))
        ));
        assert!(matches!(
            log.prepare_flush(),
            Err(StorageError::Offline { .. })
        ));
        assert!(matches!(flush.run(), Err(StorageError::Offline { .. })));
        assert!(matches!(log.flush(), Err(StorageError::Offline { .. })));
        assert_eq!(log.durable_offset(), 2);
        assert_eq!(log.log_end_offset(), 4);
        // A restart recovers what is really on disk: the first batch only.
        fs.power_cut(false);
        drop(log);
        let log = Log::open_in(&env, &dir, config(1), false).unwrap();
        assert_eq!(log.log_end_offset(), 2);
        assert!(log.offline_cause().is_none());
    }

    #[test]
    fn a_failed_directory_fsync_is_retried_not_forgotten() {
        let (fs, env, dir) = setup(8);
        let mut log = Log::open_in(&env, &dir, config(1), true).unwrap();
        log.append(&batch(8, 0, 1), 0).unwrap();
        assert!(fs.fail_fsyncs(&dir, 1));
        let flush = log.prepare_flush().unwrap().unwrap();
        assert!(flush.run().is_err());
        assert_eq!(log.durable_offset(), 0);
        assert!(
            log.has_unflushed_data(),
            "the directory still needs its fsync"
        );
        assert!(matches!(log.flush(), Err(StorageError::Offline { .. })));
    }

    #[test]
    fn a_directory_change_during_a_flush_is_left_for_the_next_one() {
        let (_fs, env, dir) = setup(9);
        let mut log = Log::open_in(&env, &dir, config(1), true).unwrap();
        log.append(&batch(9, 0, 1), 0).unwrap();
        let first = log.prepare_flush().unwrap().unwrap();
        // A roll creates a segment file before the first flush runs.
        log.roll().unwrap();
        first.run().unwrap();
        assert!(
            log.has_unflushed_data(),
            "the new segment's entry is unsynced"
        );
        log.prepare_flush().unwrap().unwrap().run().unwrap();
        assert!(!log.has_unflushed_data());
    }

    #[test]
    fn a_prepared_roll_fsyncs_before_the_append_and_rolled_segments_survive() {
        let (fs, env, dir) = setup(11);
        let mut log = Log::open_in(&env, &dir, config(i64::MAX), true).unwrap();
        let first = dir.join("00000000000000000000.log");
        let mut written = 0;
        let big = |i| batch(11, i, 4);
        // Fill the first segment until the next big batch would roll it.
        let roll = loop {
            if let Some(roll) = log.prepare_roll(&big(written)).unwrap() {
                break roll;
            }
            log.append(&big(written), 0).unwrap();
            written += 1;
        };
        let syncs = fs.fsyncs(&first);
        roll.run().unwrap();
        assert_eq!(fs.fsyncs(&first), syncs + 1);
        assert!(!log.append_may_fsync(&big(written), 0), "the roll is done");
        log.append(&big(written), 0).unwrap();
        written += 1;
        assert_eq!(log.segment_base_offsets().len(), 2);
        assert_eq!(fs.fsyncs(&first), syncs + 1, "the roll did not fsync again");

        // A segment that grew after its prepared fsync is fsynced by the
        // roll itself, as before.
        let second = dir.join(format!("{:020}.log", log.segment_base_offsets()[1]));
        let roll = loop {
            if let Some(roll) = log.prepare_roll(&big(written)).unwrap() {
                break roll;
            }
            log.append(&big(written), 0).unwrap();
            written += 1;
        };
        roll.run().unwrap();
        let syncs = fs.fsyncs(&second);
        let small = batch(11, 999, 1);
        if log.prepare_roll(&small).unwrap().is_none() {
            log.append(&small, 0).unwrap();
            written += 1;
            assert!(log.append_may_fsync(&big(written), 0));
        }
        log.append(&big(written), 0).unwrap();
        written += 1;
        assert_eq!(log.segment_base_offsets().len(), 3);
        assert!(fs.fsyncs(&second) > syncs, "the grown segment was fsynced");

        // Rolled segments are on disk whatever the power cut leaves.
        let rolled_end = log.segment_base_offsets()[2];
        fs.power_cut(true);
        drop(log);
        let log = Log::open_in(&env, &dir, config(i64::MAX), false).unwrap();
        assert!(log.log_end_offset() >= rolled_end, "{written} written");
    }

    #[test]
    fn syncing_the_file_system_makes_every_file_durable() {
        let fs = SimFileSystem::new(7);
        fs.create_dir_all(Path::new("/d/e")).unwrap();
        let a = fs.open(Path::new("/d/a"), true).unwrap();
        let b = fs.open(Path::new("/d/e/b"), true).unwrap();
        a.write_all_at(b"one", 0).unwrap();
        b.write_all_at(b"two", 0).unwrap();
        fs.sync_file_system(Path::new("/d")).unwrap();
        b.write_all_at(b" and more", 3).unwrap();
        fs.power_cut(false);
        assert_eq!(fs.len(Path::new("/d/a")).unwrap(), Some(3));
        assert_eq!(fs.len(Path::new("/d/e/b")).unwrap(), Some(3));
    }

    #[test]
    fn power_cut_is_replayable_and_tears_at_a_seeded_point() {
        let survivors = |seed| {
            let fs = SimFileSystem::new(seed);
            fs.create_dir_all(Path::new("/d")).unwrap();
            let f = fs.open(Path::new("/d/f"), true).unwrap();
            f.write_all_at(b"durable", 0).unwrap();
            f.sync().unwrap();
            f.write_all_at(b" and then some unsynced bytes", 7).unwrap();
            fs.power_cut(true);
            let len = fs.len(Path::new("/d/f")).unwrap().unwrap();
            let mut buf = vec![0; len as usize];
            f.read_exact_at(&mut buf, 0).unwrap();
            buf
        };
        let lengths: BTreeSet<usize> = (0..20).map(|s| survivors(s).len()).collect();
        assert!(
            lengths.len() > 1,
            "tears land at different points: {lengths:?}"
        );
        for seed in 0..20 {
            let a = survivors(seed);
            assert_eq!(a, survivors(seed), "seed {seed} replays");
            assert!(a.starts_with(b"durable"));
        }
    }
}
