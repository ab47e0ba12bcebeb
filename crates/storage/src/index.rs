//! The sparse per-segment indexes: `OffsetIndex` (.index) and `TimeIndex`
//! (.timeindex), in Kafka's on-disk format.
//!
//! An `.index` entry is 8 bytes: offset relative to the segment's base
//! offset (u32) and the file position of a batch that starts there (u32). A
//! `.timeindex` entry is 12 bytes: a timestamp (i64) and a relative offset
//! (u32); it says every batch up to and including the one at that offset has
//! a max timestamp no greater than the entry's. All big-endian.
//!
//! Entries live in memory (they are sparse: one per `index.interval.bytes`
//! of log) and are appended to the file lazily, when the segment is rolled,
//! flushed or closed. They are also read lazily: an index is only read
//! from its file on the first lookup, and an inactive segment's entries
//! can be dropped again ([`OffsetIndex::unload`]) since they are all in
//! the file; an index that cannot be read then serves as an empty one
//! (lookups scan from the segment start) with a warning. Any prefix of a valid index is itself a valid index
//! (a missing entry only makes a lookup scan further), so a file that lags
//! the log is harmless; after a crash the active segment's indexes are
//! rebuilt from the log anyway. Invariants: offset entries have strictly
//! increasing offsets and positions; time entries have strictly increasing
//! timestamps and non-decreasing offsets.

use std::path::Path;
use std::sync::OnceLock;

use crate::error::StorageError;
use crate::file::{LogEnv, SegmentFile};

pub const OFFSET_INDEX_ENTRY_SIZE: usize = 8;
pub const TIME_INDEX_ENTRY_SIZE: usize = 12;

/// An offset-index entry, in absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A time-index entry, in absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// Entry storage shared by both indexes: decoded entries in memory, read
/// from the file on first use. The file holds the first
/// `file.size() / E::SIZE` of them.
#[derive(Debug)]
struct IndexFile<E> {
    file: SegmentFile,
    entries: OnceLock<Vec<E>>,
    max_entries: usize,
    /// Why the file's contents were rejected at open, if they were.
    load_problem: Option<String>,
}

trait IndexEntry: Copy {
    const SIZE: usize;
    fn decode(bytes: &[u8]) -> Self;
    fn encode(&self, out: &mut Vec<u8>);
}

#[derive(Debug, Clone, Copy)]
struct RawOffsetEntry {
    relative_offset: u32,
    position: u32,
}

#[derive(Debug, Clone, Copy)]
struct RawTimeEntry {
    timestamp: i64,
    relative_offset: u32,
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"))
}

impl IndexEntry for RawOffsetEntry {
    const SIZE: usize = OFFSET_INDEX_ENTRY_SIZE;
    fn decode(bytes: &[u8]) -> Self {
        RawOffsetEntry {
            relative_offset: be_u32(&bytes[0..4]),
            position: be_u32(&bytes[4..8]),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
}

impl IndexEntry for RawTimeEntry {
    const SIZE: usize = TIME_INDEX_ENTRY_SIZE;
    fn decode(bytes: &[u8]) -> Self {
        RawTimeEntry {
            timestamp: i64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes")),
            relative_offset: be_u32(&bytes[8..12]),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
    }
}

impl<E: IndexEntry> IndexFile<E> {
    /// Opens the index without reading it (a stat only).
    fn open(env: &LogEnv, path: &Path, max_index_bytes: u32) -> Result<IndexFile<E>, StorageError> {
        let file = SegmentFile::open(env, path)?;
        let size = file.size();
        let load_problem = (size % E::SIZE as u64 != 0)
            .then(|| format!("size {size} is not a multiple of {}", E::SIZE));
        Ok(IndexFile {
            file,
            entries: OnceLock::new(),
            max_entries: (max_index_bytes as usize / E::SIZE).max(1),
            load_problem,
        })
    }

    fn entries(&self) -> &Vec<E> {
        self.entries.get_or_init(|| self.load())
    }

    fn entries_mut(&mut self) -> &mut Vec<E> {
        self.entries();
        self.entries.get_mut().expect("initialized above")
    }

    fn load(&self) -> Vec<E> {
        let size = self.file.size() as usize;
        if self.load_problem.is_some() || size == 0 {
            return Vec::new();
        }
        let mut bytes = vec![0u8; size];
        match self.file.read_at(0, &mut bytes) {
            Ok(()) => bytes.chunks_exact(E::SIZE).map(E::decode).collect(),
            Err(e) => {
                tracing::warn!(file = %self.file.path().display(), error = %e, "index unreadable; lookups scan the segment");
                Vec::new()
            }
        }
    }

    /// Entries already in the file.
    fn file_entries(&self) -> usize {
        self.file.size() as usize / E::SIZE
    }

    /// The last entry, read from the file alone when not loaded.
    fn last_entry(&self) -> Result<Option<E>, StorageError> {
        if let Some(entries) = self.entries.get() {
            return Ok(entries.last().copied());
        }
        let count = self.file_entries();
        if self.load_problem.is_some() || count == 0 {
            return Ok(None);
        }
        let mut bytes = vec![0u8; E::SIZE];
        self.file
            .read_at(((count - 1) * E::SIZE) as u64, &mut bytes)?;
        Ok(Some(E::decode(&bytes)))
    }

    fn push(&mut self, entry: E) {
        self.entries_mut().push(entry);
    }

    fn is_full(&self) -> bool {
        let count = self.entries.get().map_or(self.file_entries(), Vec::len);
        count >= self.max_entries
    }

    /// Appends the entries not yet in the file, with one write.
    fn persist(&mut self) -> Result<(), StorageError> {
        let from = self.file_entries();
        let Some(entries) = self.entries.get() else {
            return Ok(());
        };
        if entries.len() <= from {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity((entries.len() - from) * E::SIZE);
        for entry in &entries[from..] {
            entry.encode(&mut bytes);
        }
        self.file.append(&bytes)
    }

    /// Creates the file, empty, if no entry has made it yet.
    fn ensure_file(&mut self) -> Result<(), StorageError> {
        if !self.file.exists() {
            self.file.handle()?;
        }
        Ok(())
    }

    /// Writes pending entries and forgets them in memory; the next lookup
    /// reads them back.
    fn unload(&mut self) -> Result<(), StorageError> {
        self.persist()?;
        self.entries = OnceLock::new();
        Ok(())
    }

    /// Drops every entry, in memory and on disk.
    fn clear(&mut self) -> Result<(), StorageError> {
        self.file.truncate(0)?;
        self.entries = OnceLock::from(Vec::new());
        self.load_problem = None;
        Ok(())
    }

    /// Keeps the first `keep` entries, in memory and in the file (which
    /// may hold fewer of them, since entries reach it lazily).
    fn truncate_entries(&mut self, keep: usize) -> Result<(), StorageError> {
        if self.load_problem.is_some() {
            // Unreadable contents served as an empty index: drop them.
            return self.clear();
        }
        self.entries_mut().truncate(keep);
        if self.file_entries() > keep {
            self.file.truncate((keep * E::SIZE) as u64)?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        self.persist()?;
        self.file.sync()
    }

    /// Writes pending entries; then the file's path and handle, to fsync
    /// elsewhere, or `None` when it was never created.
    fn persisted_handle(&mut self) -> Result<Option<crate::file::FileToSync>, StorageError> {
        self.persist()?;
        if !self.file.exists() {
            return Ok(None);
        }
        Ok(Some((self.file.path().to_path_buf(), self.file.handle()?)))
    }

    fn rename_to(&mut self, to: &Path) -> Result<(), StorageError> {
        self.file.rename_to(to)
    }

    fn delete(&mut self) -> Result<(), StorageError> {
        self.file.delete()
    }
}

fn relative(base_offset: i64, offset: i64) -> u32 {
    let relative = offset - base_offset;
    assert!(
        (0..=i64::from(u32::MAX)).contains(&relative),
        "offset {offset} does not fit an index of a segment based at {base_offset}"
    );
    relative as u32
}

/// Maps offsets to file positions in one segment's .log (Kafka's `.index`).
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    inner: IndexFile<RawOffsetEntry>,
}

impl OffsetIndex {
    /// Opens (or creates) the index; unreadable contents are not an error
    /// here but are reported by [`OffsetIndex::problem`].
    pub fn open(
        env: &LogEnv,
        path: &Path,
        base_offset: i64,
        max_index_bytes: u32,
    ) -> Result<OffsetIndex, StorageError> {
        Ok(OffsetIndex {
            base_offset,
            inner: IndexFile::open(env, path, max_index_bytes)?,
        })
    }

    /// Why this index cannot be trusted for a log of `log_size` bytes, if so.
    pub fn problem(&self, log_size: u64) -> Option<String> {
        if let Some(problem) = &self.inner.load_problem {
            return Some(problem.clone());
        }
        let mut previous: Option<RawOffsetEntry> = None;
        for (i, entry) in self.inner.entries().iter().enumerate() {
            if u64::from(entry.position) >= log_size {
                return Some(format!(
                    "entry {i} points to position {} beyond the log size {log_size}",
                    entry.position
                ));
            }
            if let Some(prev) = previous {
                if entry.relative_offset <= prev.relative_offset || entry.position <= prev.position
                {
                    return Some(format!("entry {i} is not after entry {}", i - 1));
                }
            }
            previous = Some(*entry);
        }
        None
    }

    /// Adds an entry for a batch starting at `offset` and `position`.
    pub fn append(&mut self, offset: i64, position: u32) {
        let entry = RawOffsetEntry {
            relative_offset: relative(self.base_offset, offset),
            position,
        };
        if let Some(last) = self.inner.entries().last() {
            assert!(
                entry.relative_offset > last.relative_offset && entry.position > last.position,
                "offset index entries must increase: {last:?} then {entry:?}"
            );
        }
        self.inner.push(entry);
    }

    /// The greatest entry whose offset is <= `target`, or the segment start.
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let entries = self.inner.entries();
        let count =
            entries.partition_point(|e| self.base_offset + i64::from(e.relative_offset) <= target);
        match count.checked_sub(1).map(|i| entries[i]) {
            Some(e) => self.absolute(e),
            None => OffsetPosition {
                offset: self.base_offset,
                position: 0,
            },
        }
    }

    /// The last entry whose position is in `(after, at_most]` and whose
    /// offset is <= `max_offset`: a batch boundary a forward read from
    /// `after` may jump to without reading the headers in between. Every
    /// batch before such an entry starts below `max_offset`, whichever
    /// offset of its batch an entry names (Tarn's the base offset, Kafka's
    /// the last). Entries grow in both offset and position, so the ones
    /// that qualify by both bounds are a prefix.
    pub fn last_boundary_within(
        &self,
        after: u64,
        at_most: u64,
        max_offset: i64,
    ) -> Option<OffsetPosition> {
        let entries = self.inner.entries();
        let count = entries.partition_point(|e| {
            u64::from(e.position) <= at_most
                && self.base_offset + i64::from(e.relative_offset) <= max_offset
        });
        let last = self.absolute(*entries.get(count.checked_sub(1)?)?);
        (u64::from(last.position) > after).then_some(last)
    }

    pub fn last_entry(&self) -> Option<OffsetPosition> {
        self.inner.entries().last().map(|e| self.absolute(*e))
    }

    pub fn entries(&self) -> Vec<OffsetPosition> {
        self.inner
            .entries()
            .iter()
            .map(|e| self.absolute(*e))
            .collect()
    }

    fn absolute(&self, e: RawOffsetEntry) -> OffsetPosition {
        OffsetPosition {
            offset: self.base_offset + i64::from(e.relative_offset),
            position: e.position,
        }
    }

    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    pub fn persist(&mut self) -> Result<(), StorageError> {
        self.inner.persist()
    }

    /// See `IndexFile::persisted_handle`.
    pub(crate) fn persisted_handle(
        &mut self,
    ) -> Result<Option<crate::file::FileToSync>, StorageError> {
        self.inner.persisted_handle()
    }

    /// Drops the entries for offsets at or after `offset` (Kafka's
    /// `OffsetIndex.truncateTo`), in memory and in the file.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        let base_offset = self.base_offset;
        let keep = self
            .inner
            .entries()
            .partition_point(|e| base_offset + i64::from(e.relative_offset) < offset);
        self.inner.truncate_entries(keep)
    }

    pub fn clear(&mut self) -> Result<(), StorageError> {
        self.inner.clear()
    }

    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.inner.sync()
    }

    pub fn rename_to(&mut self, to: &Path) -> Result<(), StorageError> {
        self.inner.rename_to(to)
    }

    pub fn delete(&mut self) -> Result<(), StorageError> {
        self.inner.delete()
    }

    pub fn path(&self) -> &Path {
        self.inner.file.path()
    }

    pub fn file_exists(&self) -> bool {
        self.inner.file.exists()
    }

    /// Creates the file, empty, if it does not exist: a closed segment has
    /// both index files, as Kafka's tools (kafka-dump-log) expect.
    pub fn ensure_file(&mut self) -> Result<(), StorageError> {
        self.inner.ensure_file()
    }

    /// Writes pending entries and frees the in-memory copy.
    pub fn unload(&mut self) -> Result<(), StorageError> {
        self.inner.unload()
    }

    /// Whether the entries are in memory now.
    pub fn is_loaded(&self) -> bool {
        self.inner.entries.get().is_some()
    }

    /// Whether the file's size is a whole number of entries.
    pub fn size_is_sane(&self) -> bool {
        self.inner.load_problem.is_none()
    }
}

/// Maps timestamps to offsets in one segment (Kafka's `.timeindex`).
#[derive(Debug)]
pub struct TimeIndex {
    base_offset: i64,
    inner: IndexFile<RawTimeEntry>,
}

impl TimeIndex {
    pub fn open(
        env: &LogEnv,
        path: &Path,
        base_offset: i64,
        max_index_bytes: u32,
    ) -> Result<TimeIndex, StorageError> {
        Ok(TimeIndex {
            base_offset,
            inner: IndexFile::open(env, path, max_index_bytes)?,
        })
    }

    /// Why this index cannot be trusted for a segment whose offsets end
    /// before `next_offset`, if so.
    pub fn problem(&self, next_offset: i64) -> Option<String> {
        if let Some(problem) = &self.inner.load_problem {
            return Some(problem.clone());
        }
        let mut previous: Option<RawTimeEntry> = None;
        for (i, entry) in self.inner.entries().iter().enumerate() {
            if self.base_offset + i64::from(entry.relative_offset) >= next_offset {
                return Some(format!(
                    "entry {i} points past the last offset {}",
                    next_offset - 1
                ));
            }
            if let Some(prev) = previous {
                if entry.timestamp <= prev.timestamp || entry.relative_offset < prev.relative_offset
                {
                    return Some(format!("entry {i} is not after entry {}", i - 1));
                }
            }
            previous = Some(*entry);
        }
        None
    }

    /// The last entry, reading only that entry from the file when the
    /// index is not loaded.
    pub fn last_entry_in_file(&self) -> Result<Option<TimestampOffset>, StorageError> {
        Ok(self.inner.last_entry()?.map(|e| self.absolute(e)))
    }

    /// Adds an entry when `timestamp` exceeds the last entry's, as Kafka's
    /// `TimeIndex.maybeAppend` does. Returns whether one was added.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> bool {
        let entry = RawTimeEntry {
            timestamp,
            relative_offset: relative(self.base_offset, offset),
        };
        if let Some(last) = self.inner.entries().last() {
            if timestamp <= last.timestamp {
                return false;
            }
            assert!(
                entry.relative_offset >= last.relative_offset,
                "time index offsets must not decrease: {last:?} then {entry:?}"
            );
        }
        self.inner.push(entry);
        true
    }

    /// The greatest entry whose timestamp is < `target`: every batch up to
    /// its offset has a max timestamp below `target`.
    pub fn lookup_before(&self, target: i64) -> Option<TimestampOffset> {
        let entries = self.inner.entries();
        let count = entries.partition_point(|e| e.timestamp < target);
        count.checked_sub(1).map(|i| self.absolute(entries[i]))
    }

    pub fn last_entry(&self) -> Option<TimestampOffset> {
        self.inner.entries().last().map(|e| self.absolute(*e))
    }

    pub fn entries(&self) -> Vec<TimestampOffset> {
        self.inner
            .entries()
            .iter()
            .map(|e| self.absolute(*e))
            .collect()
    }

    fn absolute(&self, e: RawTimeEntry) -> TimestampOffset {
        TimestampOffset {
            timestamp: e.timestamp,
            offset: self.base_offset + i64::from(e.relative_offset),
        }
    }

    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    pub fn persist(&mut self) -> Result<(), StorageError> {
        self.inner.persist()
    }

    /// See `IndexFile::persisted_handle`.
    pub(crate) fn persisted_handle(
        &mut self,
    ) -> Result<Option<crate::file::FileToSync>, StorageError> {
        self.inner.persisted_handle()
    }

    /// Drops the entries whose offset is at or after `offset` (Kafka's
    /// `TimeIndex.truncateTo`); the rest still hold for the batches left,
    /// since each speaks only of batches up to its own offset.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        let base_offset = self.base_offset;
        let keep = self
            .inner
            .entries()
            .partition_point(|e| base_offset + i64::from(e.relative_offset) < offset);
        self.inner.truncate_entries(keep)
    }

    pub fn clear(&mut self) -> Result<(), StorageError> {
        self.inner.clear()
    }

    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.inner.sync()
    }

    pub fn rename_to(&mut self, to: &Path) -> Result<(), StorageError> {
        self.inner.rename_to(to)
    }

    pub fn delete(&mut self) -> Result<(), StorageError> {
        self.inner.delete()
    }

    pub fn path(&self) -> &Path {
        self.inner.file.path()
    }

    pub fn file_exists(&self) -> bool {
        self.inner.file.exists()
    }

    /// Creates the file, empty, if it does not exist: a closed segment has
    /// both index files, as Kafka's tools (kafka-dump-log) expect.
    pub fn ensure_file(&mut self) -> Result<(), StorageError> {
        self.inner.ensure_file()
    }

    /// Writes pending entries and frees the in-memory copy.
    pub fn unload(&mut self) -> Result<(), StorageError> {
        self.inner.unload()
    }

    /// Whether the entries are in memory now.
    pub fn is_loaded(&self) -> bool {
        self.inner.entries.get().is_some()
    }

    /// Whether the file's size is a whole number of entries.
    pub fn size_is_sane(&self) -> bool {
        self.inner.load_problem.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut index = OffsetIndex::open(&LogEnv::shared_default(), &path, 100, 1024).unwrap();
        assert_eq!(
            index.lookup(150),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        index.append(110, 400);
        index.append(120, 800);
        assert_eq!(
            index.lookup(109),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            index.lookup(110),
            OffsetPosition {
                offset: 110,
                position: 400
            }
        );
        assert_eq!(
            index.lookup(119),
            OffsetPosition {
                offset: 110,
                position: 400
            }
        );
        assert_eq!(
            index.lookup(500),
            OffsetPosition {
                offset: 120,
                position: 800
            }
        );
        index.persist().unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            [0, 0, 0, 10, 0, 0, 1, 144, 0, 0, 0, 20, 0, 0, 3, 32]
        );

        let reopened = OffsetIndex::open(&LogEnv::shared_default(), &path, 100, 1024).unwrap();
        assert_eq!(reopened.entries(), index.entries());
        assert_eq!(reopened.problem(801), None);
        assert!(
            reopened.problem(800).is_some(),
            "position beyond the log must be caught"
        );
    }

    #[test]
    fn boundaries_within_a_range_respect_both_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut index = OffsetIndex::open(&LogEnv::shared_default(), &path, 100, 1024).unwrap();
        assert_eq!(index.last_boundary_within(0, 10_000, i64::MAX), None);
        index.append(110, 400);
        index.append(120, 800);
        index.append(130, 1200);
        let at = |offset, position| Some(OffsetPosition { offset, position });
        assert_eq!(
            index.last_boundary_within(0, 10_000, i64::MAX),
            at(130, 1200)
        );
        assert_eq!(index.last_boundary_within(0, 1199, i64::MAX), at(120, 800));
        assert_eq!(index.last_boundary_within(0, 800, i64::MAX), at(120, 800));
        assert_eq!(index.last_boundary_within(0, 10_000, 129), at(120, 800));
        assert_eq!(index.last_boundary_within(0, 10_000, 110), at(110, 400));
        assert_eq!(index.last_boundary_within(0, 10_000, 109), None);
        assert_eq!(index.last_boundary_within(0, 399, i64::MAX), None);
        // Only entries past `after`: a read already there gains nothing.
        assert_eq!(index.last_boundary_within(800, 1000, i64::MAX), None);
        assert_eq!(
            index.last_boundary_within(799, 1000, i64::MAX),
            at(120, 800)
        );
    }

    #[test]
    fn offset_index_problems_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.index");
        std::fs::write(&path, [0u8; 7]).unwrap();
        assert!(OffsetIndex::open(&LogEnv::shared_default(), &path, 0, 1024)
            .unwrap()
            .problem(1 << 20)
            .is_some());
        std::fs::write(&path, [0, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0, 4, 0, 0, 0, 10]).unwrap();
        assert!(OffsetIndex::open(&LogEnv::shared_default(), &path, 0, 1024)
            .unwrap()
            .problem(1 << 20)
            .is_some());
    }

    #[test]
    fn offset_index_fills_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::open(
            &LogEnv::shared_default(),
            &dir.path().join("a.index"),
            0,
            16,
        )
        .unwrap();
        index.append(1, 10);
        assert!(!index.is_full());
        index.append(2, 20);
        assert!(index.is_full());
    }

    #[test]
    fn time_index_only_grows_in_timestamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.timeindex");
        let mut index = TimeIndex::open(&LogEnv::shared_default(), &path, 0, 1024).unwrap();
        assert!(index.maybe_append(1_000, 0));
        assert!(!index.maybe_append(1_000, 5));
        assert!(!index.maybe_append(900, 6));
        assert!(index.maybe_append(2_000, 10));
        assert_eq!(index.lookup_before(1_000), None);
        assert_eq!(
            index.lookup_before(1_001),
            Some(TimestampOffset {
                timestamp: 1_000,
                offset: 0
            })
        );
        assert_eq!(
            index.lookup_before(5_000),
            Some(TimestampOffset {
                timestamp: 2_000,
                offset: 10
            })
        );
        index.persist().unwrap();
        let reopened = TimeIndex::open(&LogEnv::shared_default(), &path, 0, 1024).unwrap();
        assert_eq!(reopened.entries(), index.entries());
        assert_eq!(reopened.problem(11), None);
        assert!(reopened.problem(10).is_some());
    }
}
