//! The only place that touches the file system.
//!
//! `SegmentFile` wraps one open file (a segment's .log, .index or .timeindex)
//! with positional reads, appends and truncation, and tracks its size so
//! callers never ask the OS for it. The free functions cover directory work
//! (listing, creating, removing) and atomic whole-file replacement for small
//! metadata files. Every error names the operation and the path. Keeping all
//! raw I/O here lets a fault-injecting layer replace this module later.

use std::fs::{self, File, OpenOptions};
use std::io::{IoSlice, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StorageError;
use crate::metrics::timed_fsync;

/// Most buffers one `pwritev` call takes (Linux's IOV_MAX).
const MAX_IOVECS: usize = 1024;

/// An open file that is only ever appended to, truncated, or read at a
/// position. The handle is shared (`Arc`) so that a fetch can send a range
/// of it after the partition lock is released; appends never change bytes
/// below the size a reader saw.
#[derive(Debug)]
pub struct SegmentFile {
    path: PathBuf,
    file: Arc<File>,
    size: u64,
}

impl SegmentFile {
    /// Opens `path` for reading and appending, creating it when missing.
    pub fn open(path: &Path) -> Result<SegmentFile, StorageError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StorageError::io(format!("open {}", path.display()), e))?;
        let size = file
            .metadata()
            .map_err(|e| StorageError::io(format!("stat {}", path.display()), e))?
            .len();
        Ok(SegmentFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            size,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The shared handle, for zero-copy reads (sendfile) by the caller.
    pub fn handle(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Reads exactly `buf.len()` bytes at `position`.
    pub fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.file.read_exact_at(buf, position).map_err(|e| {
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

    /// Appends `data` at the end with one write call (retried only if the OS
    /// writes less). On failure the file is truncated back to its old size,
    /// so a failed append leaves nothing behind.
    pub fn append(&mut self, data: &[u8]) -> Result<(), StorageError> {
        match self.file.write_all_at(data, self.size) {
            Ok(()) => {
                self.size += data.len() as u64;
                Ok(())
            }
            Err(e) => {
                let old_size = self.size;
                // Best effort: the append error is the one worth reporting.
                let _ = self.file.set_len(old_size);
                Err(StorageError::io(
                    format!("append {} bytes to {}", data.len(), self.path.display()),
                    e,
                ))
            }
        }
    }

    /// Appends the concatenation of `parts` at the end with as few
    /// `pwritev` calls as the OS allows (usually one per 1024 parts),
    /// without copying them into one buffer first. On failure the file is
    /// truncated back to its old size, as with [`SegmentFile::append`].
    pub fn append_vectored(&mut self, parts: &[IoSlice<'_>]) -> Result<(), StorageError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        match pwritev_all(&self.file, parts, self.size) {
            Ok(()) => {
                self.size += total as u64;
                Ok(())
            }
            Err(e) => {
                // Best effort: the append error is the one worth reporting.
                let _ = self.file.set_len(self.size);
                Err(StorageError::io(
                    format!("append {total} bytes to {}", self.path.display()),
                    e,
                ))
            }
        }
    }

    pub fn truncate(&mut self, size: u64) -> Result<(), StorageError> {
        self.file.set_len(size).map_err(|e| {
            StorageError::io(format!("truncate {} to {}", self.path.display(), size), e)
        })?;
        self.size = size;
        Ok(())
    }

    /// fsync: data and metadata reach the disk.
    pub fn sync(&self) -> Result<(), StorageError> {
        timed_fsync(|| self.file.sync_all())
            .map_err(|e| StorageError::io(format!("fsync {}", self.path.display()), e))
    }
}

/// Writes all of `parts` at `position`, resuming after short writes.
fn pwritev_all(file: &File, parts: &[IoSlice<'_>], mut position: u64) -> std::io::Result<()> {
    let mut owned: Vec<IoSlice<'_>> = parts.iter().filter(|p| !p.is_empty()).copied().collect();
    let mut rest = &mut owned[..];
    while !rest.is_empty() {
        let count = rest.len().min(MAX_IOVECS);
        let offset = libc::off_t::try_from(position)
            .map_err(|_| std::io::Error::other("file position beyond off_t"))?;
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
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if written == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        position += written as u64;
        IoSlice::advance_slices(&mut rest, written as usize);
    }
    Ok(())
}

pub fn create_dir_all(dir: &Path) -> Result<(), StorageError> {
    fs::create_dir_all(dir)
        .map_err(|e| StorageError::io(format!("create directory {}", dir.display()), e))
}

pub fn remove_dir_all(dir: &Path) -> Result<(), StorageError> {
    fs::remove_dir_all(dir)
        .map_err(|e| StorageError::io(format!("remove directory {}", dir.display()), e))
}

/// Renames a file or directory; both paths are in the same file system.
pub fn rename(from: &Path, to: &Path) -> Result<(), StorageError> {
    fs::rename(from, to)
        .map_err(|e| StorageError::io(format!("rename {} to {}", from.display(), to.display()), e))
}

pub fn remove_file(path: &Path) -> Result<(), StorageError> {
    fs::remove_file(path).map_err(|e| StorageError::io(format!("remove {}", path.display()), e))
}

/// File names (not paths) of the regular entries in `dir`.
pub fn list_file_names(dir: &Path) -> Result<Vec<String>, StorageError> {
    let context = || format!("list directory {}", dir.display());
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| StorageError::io(context(), e))? {
        let entry = entry.map_err(|e| StorageError::io(context(), e))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// Reads a whole small file; `Ok(None)` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(format!("read {}", path.display()), e)),
    }
}

/// Replaces `path` with `contents` atomically: write a temporary file, fsync
/// it, rename it over `path`, fsync the directory. A crash leaves either the
/// old or the new contents, never a mix.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), StorageError> {
    let tmp = path.with_extension("tmp");
    let context = |what: &str, p: &Path| format!("{what} {}", p.display());
    let mut file = File::create(&tmp).map_err(|e| StorageError::io(context("create", &tmp), e))?;
    file.write_all(contents)
        .map_err(|e| StorageError::io(context("write", &tmp), e))?;
    timed_fsync(|| file.sync_all()).map_err(|e| StorageError::io(context("fsync", &tmp), e))?;
    fs::rename(&tmp, path).map_err(|e| {
        StorageError::io(format!("rename {} to {}", tmp.display(), path.display()), e)
    })?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// fsync a directory so created, renamed and removed entries are durable.
pub fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| timed_fsync(|| d.sync_all()))
        .map_err(|e| StorageError::io(format!("fsync directory {}", dir.display()), e))
}
