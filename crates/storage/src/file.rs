//! The only place that touches the file system.
//!
//! All I/O goes through the [`FileSystem`] and [`FileHandle`] traits, so a
//! test can swap the real file system ([`OsFileSystem`]) for a simulated one
//! that loses everything not fsynced (`crate::sim::SimFileSystem`).
//!
//! `SegmentFile` is one file of a segment (a .log, .index or .timeindex):
//! it knows its path and size without holding a file descriptor, creates
//! the file on the first write, and borrows an open handle from the shared,
//! bounded [`FileCache`] (LRU) for each operation. So an idle partition holds
//! no open file, and the process holds at most `log.open.files.max`
//! descriptors for segments, plus those in use by operations in flight.
//! Every error names the operation and the path.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::error::StorageError;
use crate::metrics::timed_fsync;

/// Most buffers one `pwritev` call takes (Linux's IOV_MAX).
const MAX_IOVECS: usize = 1024;

/// One open file: positional reads and writes, truncation, fsync.
/// A file to fsync away from where its handle was taken, with its path
/// for the error message.
pub(crate) type FileToSync = (std::path::PathBuf, Arc<dyn FileHandle>);

pub trait FileHandle: Send + Sync + Debug {
    /// Reads exactly `buf.len()` bytes at `position`.
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()>;
    /// Writes all of `data` at `position`.
    fn write_all_at(&self, data: &[u8], position: u64) -> io::Result<()>;
    /// Writes the concatenation of `parts` at `position`; the real file
    /// system does it without first copying them into one buffer.
    fn write_vectored_at(&self, parts: &[IoSlice<'_>], position: u64) -> io::Result<()> {
        let joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        self.write_all_at(&joined, position)
    }
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes everything written so far durable (fsync).
    fn sync(&self) -> io::Result<()>;
    /// The OS file behind this handle, for sendfile(2); `None` in a
    /// simulated file system.
    fn os_file(&self) -> Option<Arc<File>> {
        None
    }
    /// Allocates disk blocks for `len` bytes at `position` without
    /// changing the file's size (`fallocate` with `FALLOC_FL_KEEP_SIZE`),
    /// so that writes there later skip the file system's allocation of
    /// each page. What is reserved past the end reads as nothing (the
    /// size is unchanged) and is given back by `set_len`.
    fn reserve(&self, _position: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

/// Directory-level operations plus opening files.
pub trait FileSystem: Send + Sync + Debug {
    /// Opens `path` for reading and writing; with `create`, creates it when
    /// missing.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FileHandle>>;
    /// The size of `path`, or `None` when it does not exist.
    fn len(&self, path: &Path) -> io::Result<Option<u64>>;
    /// Last modification time in ms since the epoch.
    fn modified_ms(&self, path: &Path) -> io::Result<i64>;
    /// Names (not paths) of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsync a directory so created, renamed and removed entries are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes everything written to the file system that holds `dir`
    /// durable, file contents and directories alike (Linux's `syncfs`).
    fn sync_file_system(&self, dir: &Path) -> io::Result<()>;
    /// Whether what it does is drawn from a seeded generator that a run
    /// must consume in a fixed order to replay (the simulated file
    /// system): its callers then keep their operations on one thread.
    fn replays(&self) -> bool {
        false
    }
}

/// The real file system.
#[derive(Debug, Default)]
pub struct OsFileSystem;

/// A real file; shared (`Arc`) so a fetch can send a range of it with
/// sendfile after the partition lock is released and even after the cache
/// closed its own handle. Appends never change bytes below the size a
/// reader saw.
#[derive(Debug)]
struct OsFile(Arc<File>);

impl FileHandle for OsFile {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, position)
    }
    fn write_all_at(&self, data: &[u8], position: u64) -> io::Result<()> {
        self.0.write_all_at(data, position)
    }
    fn write_vectored_at(&self, parts: &[IoSlice<'_>], position: u64) -> io::Result<()> {
        pwritev_all(&self.0, parts, position)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        timed_fsync(|| self.0.sync_data())
    }
    fn os_file(&self) -> Option<Arc<File>> {
        Some(self.0.clone())
    }
    fn reserve(&self, position: u64, len: u64) -> io::Result<()> {
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(position), libc::off_t::try_from(len))
        else {
            return Err(io::Error::other("reserved range beyond off_t"));
        };
        // SAFETY: a plain syscall on an open fd; no memory is passed.
        let rc =
            unsafe { libc::fallocate(self.0.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, offset, len) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Writes all of `parts` at `position`, resuming after short writes.
fn pwritev_all(file: &File, parts: &[IoSlice<'_>], mut position: u64) -> io::Result<()> {
    let mut owned: Vec<IoSlice<'_>> = parts.iter().filter(|p| !p.is_empty()).copied().collect();
    let mut rest = &mut owned[..];
    while !rest.is_empty() {
        let count = rest.len().min(MAX_IOVECS);
        let offset = libc::off_t::try_from(position)
            .map_err(|_| io::Error::other("file position beyond off_t"))?;
        // SAFETY: IoSlice is ABI-compatible with iovec, `count` slices are
        // valid for the duration of the call, and the fd is open.
        let written = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                rest.as_ptr().cast::<libc::iovec>(),
                count as libc::c_int,
                offset,
            )
        };
        if written < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if written == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        position += written as u64;
        IoSlice::advance_slices(&mut rest, written as usize);
    }
    Ok(())
}

impl FileSystem for OsFileSystem {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FileHandle>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(OsFile(Arc::new(file))))
    }
    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        match fs::metadata(path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn modified_ms(&self, path: &Path) -> io::Result<i64> {
        let modified = fs::metadata(path)?.modified()?;
        Ok(modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let dir = File::open(dir)?;
        timed_fsync(|| dir.sync_all())
    }

    fn sync_file_system(&self, dir: &Path) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let dir = File::open(dir)?;
        // SAFETY: syncfs only reads the descriptor, which `dir` keeps open
        // for the call.
        if unsafe { libc::syncfs(dir.as_raw_fd()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Default for `log.open.files.max`: how many segment files stay open.
pub const DEFAULT_OPEN_FILES_MAX: usize = 128;

/// A bounded LRU of open segment files, keyed by each `SegmentFile`'s
/// unique id (not its path, which a rename can give to another file).
#[derive(Debug)]
pub struct FileCache {
    max_open: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    /// id -> (handle, last-use stamp)
    open: HashMap<u64, (Arc<dyn FileHandle>, u64)>,
    /// last-use stamp -> id, oldest first
    by_use: BTreeMap<u64, u64>,
    next_stamp: u64,
}

impl FileCache {
    pub fn new(max_open: usize) -> FileCache {
        FileCache {
            max_open: max_open.max(1),
            inner: Mutex::new(CacheInner::default()),
        }
    }

    pub fn max_open(&self) -> usize {
        self.max_open
    }

    /// How many handles the cache holds now.
    pub fn open_count(&self) -> usize {
        self.inner.lock().open.len()
    }

    fn get(&self, id: u64) -> Option<Arc<dyn FileHandle>> {
        let mut inner = self.inner.lock();
        let stamp = inner.next_stamp;
        let (handle, old) = {
            let entry = inner.open.get_mut(&id)?;
            let old = entry.1;
            entry.1 = stamp;
            (entry.0.clone(), old)
        };
        inner.next_stamp += 1;
        inner.by_use.remove(&old);
        inner.by_use.insert(stamp, id);
        Some(handle)
    }

    fn insert(&self, id: u64, handle: Arc<dyn FileHandle>) {
        let mut inner = self.inner.lock();
        while inner.open.len() >= self.max_open {
            let Some((_, victim)) = inner.by_use.pop_first() else {
                break;
            };
            inner.open.remove(&victim);
        }
        let stamp = inner.next_stamp;
        inner.next_stamp += 1;
        if let Some((_, old)) = inner.open.insert(id, (handle, stamp)) {
            inner.by_use.remove(&old);
        }
        inner.by_use.insert(stamp, id);
    }

    fn remove(&self, id: u64) {
        let mut inner = self.inner.lock();
        if let Some((_, stamp)) = inner.open.remove(&id) {
            inner.by_use.remove(&stamp);
        }
    }
}

/// Wall-clock time for the storage layer; tests substitute their own.
pub trait Clock: Send + Sync + Debug {
    fn now_ms(&self) -> i64;
}

#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A clock tests move by hand.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    pub fn new(now_ms: i64) -> ManualClock {
        ManualClock(std::sync::atomic::AtomicI64::new(now_ms))
    }
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
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

/// What every log of a broker shares: the file system, the handle cache
/// and the clock.
#[derive(Debug, Clone)]
pub struct LogEnv {
    pub fs: Arc<dyn FileSystem>,
    pub cache: Arc<FileCache>,
    pub clock: Arc<dyn Clock>,
}

impl LogEnv {
    pub fn new(fs: Arc<dyn FileSystem>, open_files_max: usize, clock: Arc<dyn Clock>) -> LogEnv {
        LogEnv {
            fs,
            cache: Arc::new(FileCache::new(open_files_max)),
            clock,
        }
    }

    /// The real file system and clock, with a cache of `open_files_max`.
    /// See [`FileSystem::replays`].
    pub fn replays(&self) -> bool {
        self.fs.replays()
    }

    pub fn os(open_files_max: usize) -> LogEnv {
        LogEnv::new(
            Arc::new(OsFileSystem),
            open_files_max,
            Arc::new(SystemClock),
        )
    }

    /// One process-wide real environment, for callers that do not care.
    pub fn shared_default() -> LogEnv {
        static DEFAULT: std::sync::OnceLock<LogEnv> = std::sync::OnceLock::new();
        DEFAULT
            .get_or_init(|| LogEnv::os(DEFAULT_OPEN_FILES_MAX))
            .clone()
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn create_dir_all(&self, dir: &Path) -> Result<(), StorageError> {
        self.fs
            .create_dir_all(dir)
            .map_err(|e| StorageError::io(format!("create directory {}", dir.display()), e))
    }

    pub fn remove_dir_all(&self, dir: &Path) -> Result<(), StorageError> {
        self.fs
            .remove_dir_all(dir)
            .map_err(|e| StorageError::io(format!("remove directory {}", dir.display()), e))
    }

    pub fn remove_file(&self, path: &Path) -> Result<(), StorageError> {
        self.fs
            .remove_file(path)
            .map_err(|e| StorageError::io(format!("remove {}", path.display()), e))
    }

    /// Removes `path` if it exists.
    pub fn remove_if_exists(&self, path: &Path) -> Result<(), StorageError> {
        match self.fs.remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StorageError::io(format!("remove {}", path.display()), e)),
        }
    }

    pub fn rename(&self, from: &Path, to: &Path) -> Result<(), StorageError> {
        self.fs.rename(from, to).map_err(|e| {
            StorageError::io(format!("rename {} to {}", from.display(), to.display()), e)
        })
    }

    pub fn len(&self, path: &Path) -> Result<Option<u64>, StorageError> {
        self.fs
            .len(path)
            .map_err(|e| StorageError::io(format!("stat {}", path.display()), e))
    }

    pub fn modified_ms(&self, path: &Path) -> Result<i64, StorageError> {
        self.fs
            .modified_ms(path)
            .map_err(|e| StorageError::io(format!("stat {}", path.display()), e))
    }

    /// File names (not paths) of the entries in `dir`.
    pub fn list_file_names(&self, dir: &Path) -> Result<Vec<String>, StorageError> {
        self.fs
            .list(dir)
            .map_err(|e| StorageError::io(format!("list directory {}", dir.display()), e))
    }

    pub fn sync_dir(&self, dir: &Path) -> Result<(), StorageError> {
        self.fs
            .sync_dir(dir)
            .map_err(|e| StorageError::io(format!("fsync directory {}", dir.display()), e))
    }

    /// Makes everything written to the file system holding `dir` durable.
    pub fn sync_file_system(&self, dir: &Path) -> Result<(), StorageError> {
        self.fs
            .sync_file_system(dir)
            .map_err(|e| StorageError::io(format!("syncfs {}", dir.display()), e))
    }

    /// Fsyncs the existing file at `path`.
    pub fn sync_file(&self, path: &Path) -> Result<(), StorageError> {
        let context = |what: &str| format!("{what} {}", path.display());
        self.fs
            .open(path, false)
            .map_err(|e| StorageError::io(context("open"), e))?
            .sync()
            .map_err(|e| StorageError::io(context("fsync"), e))
    }

    /// Whether `path` is a directory this file system can list.
    pub fn is_dir(&self, path: &Path) -> bool {
        self.fs.list(path).is_ok()
    }

    /// Reads a whole small file; `Ok(None)` when it does not exist.
    pub fn read_optional(&self, path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
        let context = || format!("read {}", path.display());
        let Some(len) = self.len(path)? else {
            return Ok(None);
        };
        let handle = match self.fs.open(path, false) {
            Ok(h) => h,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StorageError::io(context(), e)),
        };
        let mut buf = vec![0u8; len as usize];
        handle
            .read_exact_at(&mut buf, 0)
            .map_err(|e| StorageError::io(context(), e))?;
        Ok(Some(buf))
    }

    /// Replaces `path` with `contents` (a temporary file renamed over it)
    /// without fsyncs: cheap, but after a power cut the file may be old,
    /// missing or empty. For files whose readers can live with that.
    pub fn write_without_sync(&self, path: &Path, contents: &[u8]) -> Result<(), StorageError> {
        let tmp = path.with_extension("tmp");
        let file = self.fresh_temp(&tmp)?;
        file.write_all_at(contents, 0)
            .map_err(|e| StorageError::io(format!("write {}", tmp.display()), e))?;
        drop(file);
        self.rename(&tmp, path)
    }

    /// Creates `tmp` empty, removing a leftover of an earlier attempt
    /// rather than truncating it: ext4 starts writing back, when it is
    /// closed, a file that was truncated to nothing, a disk write on every
    /// call that nothing waits for.
    fn fresh_temp(&self, tmp: &Path) -> Result<Arc<dyn FileHandle>, StorageError> {
        if self.len(tmp)?.is_some() {
            self.fs
                .remove_file(tmp)
                .map_err(|e| StorageError::io(format!("remove {}", tmp.display()), e))?;
        }
        self.fs
            .open(tmp, true)
            .map_err(|e| StorageError::io(format!("create {}", tmp.display()), e))
    }

    /// Creates `path` empty if it does not exist and makes its existence
    /// durable (the file and its directory fsynced). Idempotent, so that
    /// callers racing to create the same marker all succeed.
    pub fn create_durably(&self, path: &Path) -> Result<(), StorageError> {
        let context = |what: &str| format!("{what} {}", path.display());
        self.fs
            .open(path, true)
            .map_err(|e| StorageError::io(context("create"), e))?
            .sync()
            .map_err(|e| StorageError::io(context("fsync"), e))?;
        match path.parent() {
            Some(dir) => self.sync_dir(dir),
            None => Ok(()),
        }
    }

    /// Replaces `path` with `contents` atomically: write a temporary file,
    /// fsync it, rename it over `path`, fsync the directory. A crash leaves
    /// either the old or the new contents, never a mix.
    pub fn write_atomically(&self, path: &Path, contents: &[u8]) -> Result<(), StorageError> {
        let tmp = path.with_extension("tmp");
        let context = |what: &str, p: &Path| format!("{what} {}", p.display());
        let file = self.fresh_temp(&tmp)?;
        file.write_all_at(contents, 0)
            .map_err(|e| StorageError::io(context("write", &tmp), e))?;
        file.sync()
            .map_err(|e| StorageError::io(context("fsync", &tmp), e))?;
        drop(file);
        self.rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            self.sync_dir(dir)?;
        }
        Ok(())
    }
}

static NEXT_FILE_ID: AtomicU64 = AtomicU64::new(1);

/// How much [`SegmentFile::reserve_for`] reserves past an append's end.
pub const RESERVE_AHEAD: u64 = 1 << 20;
/// Files smaller than this reserve nothing ([`SegmentFile::reserve_for`]).
pub const RESERVE_FROM: u64 = 4 << 20;

/// A file that is only ever appended to, truncated, or read at a position,
/// opened on demand through the shared [`FileCache`].
#[derive(Debug)]
pub struct SegmentFile {
    path: PathBuf,
    size: u64,
    /// Blocks are reserved up to here ([`SegmentFile::reserve_for`]); at
    /// most `size` when nothing is reserved past the end.
    reserved: u64,
    /// Whether the file exists on disk; it is created by the first write.
    exists: bool,
    id: u64,
    env: LogEnv,
}

impl SegmentFile {
    /// A handle on `path`, which need not exist yet; only a stat is done.
    pub fn open(env: &LogEnv, path: &Path) -> Result<SegmentFile, StorageError> {
        let len = env.len(path)?;
        Ok(SegmentFile {
            path: path.to_path_buf(),
            size: len.unwrap_or(0),
            reserved: len.unwrap_or(0),
            exists: len.is_some(),
            id: NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed),
            env: env.clone(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn exists(&self) -> bool {
        self.exists
    }

    /// An open handle, from the cache or freshly opened (creating the file
    /// when `create`).
    pub fn handle(&mut self) -> Result<Arc<dyn FileHandle>, StorageError> {
        self.handle_inner(true)
    }

    fn handle_inner(&mut self, create: bool) -> Result<Arc<dyn FileHandle>, StorageError> {
        if let Some(handle) = self.env.cache.get(self.id) {
            return Ok(handle);
        }
        let handle = self
            .env
            .fs
            .open(&self.path, create)
            .map_err(|e| StorageError::io(format!("open {}", self.path.display()), e))?;
        self.exists = true;
        self.env.cache.insert(self.id, handle.clone());
        Ok(handle)
    }

    /// A handle for reading; the file must exist (reads below `size` imply it).
    /// A handle for reading, from the cache or opened for it.
    pub(crate) fn read_handle(&self) -> Result<Arc<dyn FileHandle>, StorageError> {
        if let Some(handle) = self.env.cache.get(self.id) {
            return Ok(handle);
        }
        let handle = self
            .env
            .fs
            .open(&self.path, false)
            .map_err(|e| StorageError::io(format!("open {}", self.path.display()), e))?;
        self.env.cache.insert(self.id, handle.clone());
        Ok(handle)
    }

    /// Reads exactly `buf.len()` bytes at `position`.
    pub fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        if buf.is_empty() {
            return Ok(());
        }
        self.read_handle()?
            .read_exact_at(buf, position)
            .map_err(|e| {
                StorageError::io(
                    format!(
                        "read {} bytes at {} of {}",
                        buf.len(),
                        position,
                        self.path.display()
                    ),
                    e,
                )
            })
    }

    /// Appends `data` at the end with one write call. On failure the file
    /// is truncated back to its old size, so a failed append leaves nothing
    /// behind.
    pub fn append(&mut self, data: &[u8]) -> Result<(), StorageError> {
        let handle = self.handle()?;
        match handle.write_all_at(data, self.size) {
            Ok(()) => {
                self.size += data.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Best effort: the append error is the one worth reporting.
                if let Err(undo) = handle.set_len(self.size) {
                    tracing::error!(file = %self.path.display(), error = %undo, "undo a failed append");
                }
                Err(StorageError::io(
                    format!("append {} bytes to {}", data.len(), self.path.display()),
                    e,
                ))
            }
        }
    }

    /// Appends the concatenation of `parts` at the end (one `pwritev` per
    /// 1024 parts on the real file system), without copying them into one
    /// buffer. On failure the file is truncated back, as with `append`.
    pub fn append_vectored(&mut self, parts: &[IoSlice<'_>]) -> Result<(), StorageError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let handle = self.handle()?;
        match handle.write_vectored_at(parts, self.size) {
            Ok(()) => {
                self.size += total as u64;
                Ok(())
            }
            Err(e) => {
                if let Err(undo) = handle.set_len(self.size) {
                    tracing::error!(file = %self.path.display(), error = %undo, "undo a failed append");
                }
                Err(StorageError::io(
                    format!("append {total} bytes to {}", self.path.display()),
                    e,
                ))
            }
        }
    }

    /// Before an append of `len` bytes that leaves the file holding at
    /// least [`RESERVE_FROM`]: reserves disk blocks for it and for
    /// [`RESERVE_AHEAD`] more, unless they are reserved already. Writing
    /// into reserved blocks costs the file system (ext4's delayed
    /// allocation above all) about a quarter less CPU per byte, in the
    /// write and in its writeback. Small files reserve nothing, so a small
    /// disk fills as it did and what is reserved past the ends stays
    /// under a quarter of what the files hold. Only a hint: a failure is
    /// logged (at warn the first time in this process) and the append
    /// goes on without.
    pub fn reserve_for(&mut self, len: u64) {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let end = self.size + len;
        if end <= self.reserved || end < RESERVE_FROM {
            return;
        }
        let from = self.reserved.max(self.size);
        let to = end + RESERVE_AHEAD;
        let result = self.handle().and_then(|h| {
            h.reserve(from, to - from).map_err(|e| {
                StorageError::io(format!("reserve blocks of {}", self.path.display()), e)
            })
        });
        match result {
            Ok(()) => self.reserved = to,
            Err(e) => {
                // Not retried for this file: another append tries the range
                // past `end` only.
                self.reserved = end;
                if WARNED.swap(true, Ordering::Relaxed) {
                    tracing::debug!(error = %e, "could not reserve blocks");
                } else {
                    tracing::warn!(error = %e, "could not reserve blocks ahead of appends; appends go on without (logged once)");
                }
            }
        }
    }

    /// Gives back the blocks reserved past the end (a file that will not
    /// grow any more: a segment that stops being the active one). A
    /// failure only leaves them allocated until the file is truncated or
    /// deleted, so it is logged and not returned.
    pub fn release_reserved(&mut self) {
        if self.reserved <= self.size {
            return;
        }
        let size = self.size;
        match self.handle().and_then(|h| {
            h.set_len(size).map_err(|e| {
                StorageError::io(
                    format!("give back reserved blocks of {}", self.path.display()),
                    e,
                )
            })
        }) {
            Ok(()) => self.reserved = size,
            Err(e) => tracing::warn!(error = %e, "reserved blocks stay allocated past the end"),
        }
    }

    /// The OS file, for sending a range of it with sendfile(2).
    pub fn os_file(&self) -> Result<Arc<File>, StorageError> {
        self.read_handle()?.os_file().ok_or_else(|| {
            StorageError::io(
                format!("send {}", self.path.display()),
                io::Error::new(io::ErrorKind::Unsupported, "not an OS file"),
            )
        })
    }

    pub fn truncate(&mut self, size: u64) -> Result<(), StorageError> {
        if !self.exists && size == 0 {
            return Ok(());
        }
        self.handle()?.set_len(size).map_err(|e| {
            StorageError::io(format!("truncate {} to {}", self.path.display(), size), e)
        })?;
        self.size = size;
        self.reserved = size;
        Ok(())
    }

    /// fsync; a file never created has nothing to sync.
    pub fn sync(&mut self) -> Result<(), StorageError> {
        if !self.exists {
            return Ok(());
        }
        self.handle_inner(false)?
            .sync()
            .map_err(|e| StorageError::io(format!("fsync {}", self.path.display()), e))
    }

    /// Renames the file (if it exists) and keeps using it under the new name.
    pub fn rename_to(&mut self, to: &Path) -> Result<(), StorageError> {
        if self.exists {
            self.env.rename(&self.path, to)?;
        }
        self.path = to.to_path_buf();
        Ok(())
    }

    /// Deletes the file (if it exists) and forgets its handle.
    pub fn delete(&mut self) -> Result<(), StorageError> {
        self.env.cache.remove(self.id);
        if self.exists {
            self.env.remove_if_exists(&self.path)?;
            self.exists = false;
        }
        self.size = 0;
        self.reserved = 0;
        Ok(())
    }
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        self.env.cache.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keeps_at_most_its_limit_and_files_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::os(2);
        let mut files: Vec<SegmentFile> = (0..5)
            .map(|i| SegmentFile::open(&env, &dir.path().join(format!("{i}.log"))).unwrap())
            .collect();
        assert!(files.iter().all(|f| !f.exists()));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        for (i, f) in files.iter_mut().enumerate() {
            f.append(format!("file {i}").as_bytes()).unwrap();
            assert!(env.cache.open_count() <= 2);
        }
        for (i, f) in files.iter().enumerate() {
            let mut buf = vec![0u8; f.size() as usize];
            f.read_at(0, &mut buf).unwrap();
            assert_eq!(buf, format!("file {i}").as_bytes());
            assert!(env.cache.open_count() <= 2);
        }
        files[0].sync().unwrap();
        files.truncate(1);
        assert!(env.cache.open_count() <= 1);
    }

    /// Bytes the file system allocated to `path`.
    fn allocated(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[test]
    fn blocks_reserved_ahead_of_appends_are_given_back_and_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::os(4);
        let path = dir.path().join("0.log");
        let mut file = SegmentFile::open(&env, &path).unwrap();
        let chunk = vec![7u8; 1_500_000];
        for _ in 0..4 {
            file.reserve_for(chunk.len() as u64);
            file.append(&chunk).unwrap();
            if file.size() < RESERVE_FROM {
                assert!(
                    file.reserved <= file.size(),
                    "a small file reserves nothing"
                );
            }
        }
        let size = 4 * chunk.len() as u64;
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        assert_eq!(std::fs::read(&path).unwrap(), chunk.repeat(4));
        // Reserved past the end (where the file system can reserve at
        // all): the third append reserved to 4,500,000 + RESERVE_AHEAD,
        // the fourth found that used up and reserved to 6,000,000 +
        // RESERVE_AHEAD.
        let reserved = file.reserved;
        assert!(
            reserved == size || reserved == size + RESERVE_AHEAD,
            "{reserved}"
        );
        if reserved > size {
            assert!(
                allocated(&path) >= reserved - 4096,
                "{} {reserved}",
                allocated(&path)
            );
        }
        file.release_reserved();
        assert_eq!(file.reserved, size);
        assert!(
            allocated(&path) < size + 64 * 1024,
            "{} {size}",
            allocated(&path)
        );
        assert_eq!(std::fs::read(&path).unwrap(), chunk.repeat(4));
        // A truncation gives back what was reserved past the new end.
        file.reserve_for(10);
        file.truncate(1000).unwrap();
        assert_eq!(file.reserved, 1000);
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 1000]);
    }

    #[test]
    fn a_rewrite_replaces_a_leftover_temporary_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::os(2);
        let path = dir.path().join("partition.metadata");
        for write in [LogEnv::write_without_sync, LogEnv::write_atomically] {
            // Left by a crash between writing it and renaming it.
            std::fs::write(path.with_extension("tmp"), b"a longer leftover").unwrap();
            write(&env, &path, b"new").unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"new");
            assert!(!path.with_extension("tmp").exists());
            write(&env, &path, b"newer").unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"newer");
        }
    }
}
