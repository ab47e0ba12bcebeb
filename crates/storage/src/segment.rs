//! `LogSegment`: one `.log` file of concatenated v2 record batches plus its
//! `.index` and `.timeindex`, named by the 20-digit base offset.
//!
//! The segment owns the rules that keep the three files consistent: every
//! batch's offsets lie in `[base_offset, base_offset + i32::MAX]` and
//! strictly increase through the file; an index entry is added before a
//! batch once at least `index_interval_bytes` were appended since the last
//! one; the time index records the running max timestamp. On open it either
//! trusts its indexes (after a sanity check and a scan of the unindexed
//! tail) or, when asked to recover or when an index is inconsistent,
//! validates every batch (CRC included), truncates the file at the first bad
//! one and rebuilds both indexes from the log.

use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tarn_protocol::record_batch::{
    decompressed_records, parse_header, validate_batch, Compression, RecordBatchHeader, RecordIter,
    TimestampType, RECORD_BATCH_HEADER_SIZE,
};
use tarn_protocol::records::FileRegion;
use tracing::warn;

use crate::error::StorageError;
use crate::file::{FileHandle, LogEnv, SegmentFile};
use crate::index::{OffsetIndex, TimeIndex};
use crate::log_config::LogConfig;

/// Largest offset distance from the segment base; Kafka keeps relative
/// offsets within a signed 32-bit int.
pub const MAX_RELATIVE_OFFSET: i64 = i32::MAX as i64;

/// `00000000000000001000.log` and friends.
/// Opens (without reading) a segment's `.log`, `.index` and `.timeindex`.
fn open_files(
    env: &LogEnv,
    dir: &Path,
    base_offset: i64,
    config: &LogConfig,
) -> Result<(SegmentFile, OffsetIndex, TimeIndex), StorageError> {
    let log = SegmentFile::open(env, &dir.join(segment_file_name(base_offset, "log")))?;
    let offset_index = OffsetIndex::open(
        env,
        &dir.join(segment_file_name(base_offset, "index")),
        base_offset,
        config.segment_index_bytes,
    )?;
    let time_index = TimeIndex::open(
        env,
        &dir.join(segment_file_name(base_offset, "timeindex")),
        base_offset,
        config.segment_index_bytes,
    )?;
    Ok((log, offset_index, time_index))
}

pub fn segment_file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}.{suffix}")
}

/// Why a scan of the log file stopped before the end.
#[derive(Debug, Clone)]
struct InvalidBatch {
    position: u64,
    reason: String,
}

/// Bytes a [`scan`] reads: a segment's file, or a verifier's handle on it.
trait ScanSource {
    fn size(&self) -> u64;
    fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), StorageError>;
}

impl ScanSource for SegmentFile {
    fn size(&self) -> u64 {
        SegmentFile::size(self)
    }
    fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        SegmentFile::read_at(self, position, buf)
    }
}

/// The CRC check of the bytes a segment held when it was opened without
/// recovery (see [`LogSegment::verification_for`]). It holds its own handle
/// on the file, so it runs without the log's lock: a 1 GiB segment is read
/// once while appends and other reads go on. Those bytes never change
/// (appends go past them), and the result is kept in the segment.
#[derive(Debug)]
pub struct SegmentVerifier {
    file: Arc<dyn FileHandle>,
    path: PathBuf,
    base_offset: i64,
    unverified_bytes: u64,
    result: Arc<OnceLock<Option<InvalidBatch>>>,
}

impl ScanSource for SegmentVerifier {
    fn size(&self) -> u64 {
        self.unverified_bytes
    }
    fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.file
            .read_exact_at(buf, position)
            .map_err(|e| StorageError::io(format!("read {}", self.path.display()), e))
    }
}

impl SegmentVerifier {
    /// Checks every batch of the bytes (unless another caller already
    /// did) and records the first that fails, if any.
    pub fn run(&self) -> Result<(), StorageError> {
        if self.result.get().is_some() {
            return Ok(());
        }
        let found = scan(
            self,
            0,
            self.base_offset,
            self.base_offset,
            true,
            &mut |_, _| {},
        )?;
        if let Some(bad) = &found {
            warn!(file = %self.path.display(), position = bad.position, reason = %bad.reason, "a batch fails validation; reads stop before it");
        }
        self.result.get_or_init(|| found);
        Ok(())
    }
}

#[derive(Debug)]
pub struct LogSegment {
    log: SegmentFile,
    state: IndexState,
    /// Wall-clock time this segment object was created (Kafka's `created`),
    /// the fallback for time-based rolls when batches carry no timestamp.
    created_ms: i64,
    /// Max timestamp of the first batch, the base of time-based rolls;
    /// read lazily from the file.
    rolling_base_timestamp: Option<i64>,
    /// Bytes that were in the file when it was opened without recovery and
    /// whose CRCs have not been checked since (appends are checked as they
    /// come, recovery checks everything).
    unverified_bytes: u64,
    /// Set by the first read that reaches the unverified bytes: the first
    /// batch among them that fails validation, if any. Reads stop before
    /// it, so a corrupted byte is never served as good data.
    verified: Arc<OnceLock<Option<InvalidBatch>>>,
}

/// The file-name suffix a segment's files get when retention or the
/// cleaner removes them; they are deleted after `file.delete.delay.ms`.
pub const DELETED_SUFFIX: &str = ".deleted";

/// What a header scan after the last offset-index entry found: where it
/// began, the next offset, and the tail's (max timestamp, its batch's base
/// offset) when it holds a batch.
#[derive(Debug)]
struct UnindexedTail {
    start: u64,
    next_offset: i64,
    max_timestamp: Option<(i64, i64)>,
}

/// Everything derived from the log's contents: the indexes and the running
/// values that decide the next index entry. Kept apart from the log file so
/// a scan can read the file while this is updated.
#[derive(Debug)]
struct IndexState {
    base_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    index_interval_bytes: u64,
    /// Last offset + 1 of the last batch, or `base_offset` when empty.
    next_offset: i64,
    bytes_since_last_index_entry: u64,
    /// Greatest batch max timestamp so far (-1 when none) and the base
    /// offset of the first batch that carried it.
    max_timestamp_so_far: i64,
    offset_of_max_timestamp_so_far: i64,
}

impl IndexState {
    fn reset(&mut self) -> Result<(), StorageError> {
        self.offset_index.clear()?;
        self.time_index.clear()?;
        self.next_offset = self.base_offset;
        self.bytes_since_last_index_entry = 0;
        self.max_timestamp_so_far = -1;
        self.offset_of_max_timestamp_so_far = self.base_offset;
        Ok(())
    }

    /// Updates index state for a batch that now sits at `position`.
    fn index_batch(&mut self, position: u64, header: &RecordBatchHeader) {
        assert!(
            header.base_offset >= self.next_offset,
            "offsets must strictly increase in segment {}: batch at {} starts at {} but the next offset is {}",
            self.base_offset,
            position,
            header.base_offset,
            self.next_offset
        );
        if header.max_timestamp > self.max_timestamp_so_far {
            self.max_timestamp_so_far = header.max_timestamp;
            self.offset_of_max_timestamp_so_far = header.base_offset;
        }
        if self.bytes_since_last_index_entry >= self.index_interval_bytes {
            let position = u32::try_from(position)
                .expect("segment positions fit u32 (segment.bytes <= i32::MAX)");
            self.offset_index.append(header.base_offset, position);
            self.time_index.maybe_append(
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
            );
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += header.total_size() as u64;
        self.next_offset = header.last_offset().saturating_add(1);
    }

    /// Adds the final time-index entry for the segment's max timestamp.
    fn append_final_time_entry(&mut self) {
        if self.next_offset > self.base_offset {
            self.time_index.maybe_append(
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
            );
        }
    }
}

impl LogSegment {
    /// Opens or creates the segment's three files. With `recover`, or when an
    /// index is unusable, every batch is validated and the log truncated at
    /// the first invalid one; `on_recovered_batch` sees each valid batch of
    /// such a full scan (so the caller can rebuild its own state).
    pub fn open(
        env: &LogEnv,
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        recover: bool,
        on_recovered_batch: &mut dyn FnMut(&RecordBatchHeader),
    ) -> Result<LogSegment, StorageError> {
        let (log, offset_index, time_index) = open_files(env, dir, base_offset, config)?;
        let mut segment = LogSegment::assemble(
            env,
            config,
            (log, offset_index, time_index),
            base_offset,
            base_offset,
            (-1, base_offset),
        );
        if recover {
            segment.recover(on_recovered_batch)?;
        } else if let Err(problem) = segment.load_from_indexes() {
            warn!(
                file = %segment.log.path().display(),
                %problem,
                "rebuilding segment indexes"
            );
            segment.recover(on_recovered_batch)?;
        } else {
            segment.unverified_bytes = segment.log.size();
        }
        Ok(segment)
    }

    /// Opens the segment and checks every batch, truncating at the first
    /// invalid one, as [`LogSegment::open`] with `recover` does; also
    /// answers how many bytes that cut.
    pub fn open_recovered(
        env: &LogEnv,
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        on_recovered_batch: &mut dyn FnMut(&RecordBatchHeader),
    ) -> Result<(LogSegment, u64), StorageError> {
        let files = open_files(env, dir, base_offset, config)?;
        let mut segment = LogSegment::assemble(
            env,
            config,
            files,
            base_offset,
            base_offset,
            (-1, base_offset),
        );
        let truncated = segment.recover(on_recovered_batch)?;
        Ok((segment, truncated))
    }

    /// Opens an inactive segment (every batch before `next_base_offset`,
    /// the following segment's base) without reading its log or indexes:
    /// the max timestamp comes from the time index's last entry (written
    /// when the segment was rolled) and the offset index is read on the
    /// first lookup. Falls back to [`LogSegment::open`] when an index file
    /// is visibly damaged (a partial entry, or missing for a segment large
    /// enough to need one), so it is rebuilt. `next_offset` is then the
    /// upper bound `next_base_offset`.
    pub fn open_inactive(
        env: &LogEnv,
        dir: &Path,
        base_offset: i64,
        next_base_offset: i64,
        config: &LogConfig,
    ) -> Result<LogSegment, StorageError> {
        let (log, offset_index, time_index) = open_files(env, dir, base_offset, config)?;
        let index_files_missing = !offset_index.file_exists() || !time_index.file_exists();
        let needs_rebuild = !offset_index.size_is_sane()
            || !time_index.size_is_sane()
            || (index_files_missing
                && index_entry_expected(&log, u64::from(config.index_interval_bytes))?);
        if needs_rebuild {
            drop((log, offset_index, time_index));
            return LogSegment::open(env, dir, base_offset, config, false, &mut |_| {});
        }
        let max_timestamp = match time_index.last_entry_in_file()? {
            Some(last) => (last.timestamp, last.offset),
            None => (-1, base_offset),
        };
        let mut segment = LogSegment::assemble(
            env,
            config,
            (log, offset_index, time_index),
            base_offset,
            next_base_offset.max(base_offset),
            max_timestamp,
        );
        segment.unverified_bytes = segment.log.size();
        Ok(segment)
    }

    /// A segment based at `base_offset` over opened files whose batches end
    /// before `next_offset`, with `max_timestamp` = (largest timestamp,
    /// offset of its batch); nothing is marked unverified.
    fn assemble(
        env: &LogEnv,
        config: &LogConfig,
        (log, offset_index, time_index): (SegmentFile, OffsetIndex, TimeIndex),
        base_offset: i64,
        next_offset: i64,
        (max_timestamp, max_offset): (i64, i64),
    ) -> LogSegment {
        LogSegment {
            log,
            state: IndexState {
                base_offset,
                offset_index,
                time_index,
                index_interval_bytes: u64::from(config.index_interval_bytes),
                next_offset,
                bytes_since_last_index_entry: 0,
                max_timestamp_so_far: max_timestamp,
                offset_of_max_timestamp_so_far: max_offset,
            },
            created_ms: env.now_ms(),
            rolling_base_timestamp: None,
            unverified_bytes: 0,
            verified: Arc::default(),
        }
    }

    /// Frees the in-memory index entries of an inactive segment (they are
    /// in the files and are read back on the next lookup).
    pub fn unload_indexes(&mut self) -> Result<(), StorageError> {
        self.state.offset_index.unload()?;
        self.state.time_index.unload()
    }

    /// Whether the offset index is in memory now.
    pub fn indexes_loaded(&self) -> bool {
        self.state.offset_index.is_loaded()
    }

    /// Trusts the index files: checks them, then scans batch headers from the
    /// last offset-index entry to the end to find the next offset and the
    /// max timestamp of the unindexed tail.
    fn load_from_indexes(&mut self) -> Result<(), String> {
        let state = &self.state;
        if !state.offset_index.file_exists()
            && index_entry_expected(&self.log, state.index_interval_bytes)
                .map_err(|e| e.to_string())?
        {
            return Err("offset index file is missing".to_string());
        }
        if let Some(problem) = state.offset_index.problem(self.log.size()) {
            return Err(format!("offset index: {problem}"));
        }
        let tail = match self.scan_unindexed_tail().map_err(|e| e.to_string())? {
            Ok(tail) => tail,
            Err(invalid) => {
                return Err(format!(
                    "invalid batch at position {}: {}",
                    invalid.position, invalid.reason
                ))
            }
        };
        if let Some(problem) = self.state.time_index.problem(tail.next_offset) {
            return Err(format!("time index: {problem}"));
        }
        self.apply_tail(&tail);
        Ok(())
    }

    /// Reads the batch headers from the last offset-index entry to the end
    /// of the file (at most one index interval, plus the last batch); the
    /// inner `Err` says where and why they stopped making sense.
    fn scan_unindexed_tail(&self) -> Result<Result<UnindexedTail, InvalidBatch>, StorageError> {
        let state = &self.state;
        let last_entry = state.offset_index.last_entry();
        let start = u64::from(last_entry.map_or(0, |e| e.position));
        let mut max_timestamp: Option<(i64, i64)> = None;
        let mut next_offset = last_entry.map_or(state.base_offset, |e| e.offset);
        let end = scan(
            &self.log,
            start,
            state.base_offset,
            next_offset,
            false,
            &mut |_, header| {
                if max_timestamp.is_none_or(|(ts, _)| header.max_timestamp > ts) {
                    max_timestamp = Some((header.max_timestamp, header.base_offset));
                }
                next_offset = header.last_offset().saturating_add(1);
            },
        )?;
        Ok(match end {
            Some(invalid) => Err(invalid),
            None => Ok(UnindexedTail {
                start,
                next_offset,
                max_timestamp,
            }),
        })
    }

    /// Sets the running values from the indexes and the scanned tail: the
    /// time index's last entry covers every batch up to the last offset
    /// entry, the tail the rest.
    fn apply_tail(&mut self, tail: &UnindexedTail) {
        let state = &mut self.state;
        state.next_offset = tail.next_offset;
        state.bytes_since_last_index_entry = self.log.size() - tail.start;
        (
            state.max_timestamp_so_far,
            state.offset_of_max_timestamp_so_far,
        ) = state
            .time_index
            .last_entry()
            .map_or((-1, state.base_offset), |last| {
                (last.timestamp, last.offset)
            });
        if let Some((ts, offset)) = tail.max_timestamp {
            if ts > state.max_timestamp_so_far {
                state.max_timestamp_so_far = ts;
                state.offset_of_max_timestamp_so_far = offset;
            }
        }
    }

    /// Removes every batch at or after `offset` from the log file and both
    /// indexes (Kafka's `LogSegment.truncateTo`). A batch that holds
    /// `offset` without starting there goes whole, so the segment always
    /// ends at a batch boundary, at or below `offset`. The next offset and
    /// max timestamp are then found as on open: from the indexes and a
    /// header scan of the last index interval. Returns the bytes removed.
    /// `now_ms` restarts the time-based roll clock when nothing is left.
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> Result<u64, StorageError> {
        let (position, first_removed) = match self.find_batch(offset)? {
            Some((position, header)) => (position, header.base_offset),
            None => (self.log.size(), offset),
        };
        // Indexes first: a prefix of a valid index stays valid whatever
        // the log file holds, so a crash in between leaves nothing wrong.
        self.state.offset_index.truncate_to(first_removed)?;
        self.state.time_index.truncate_to(first_removed)?;
        let removed = self.log.size() - position;
        if removed > 0 {
            self.log.truncate(position)?;
        }
        if position < self.unverified_bytes {
            self.forget_unverified_from(position);
        }
        self.rolling_base_timestamp = None;
        if self.log.size() == 0 {
            self.created_ms = now_ms;
        }
        match self.scan_unindexed_tail()? {
            Ok(tail) => self.apply_tail(&tail),
            Err(invalid) => return Err(self.corrupt(invalid.position, &invalid.reason)),
        }
        Ok(removed)
    }

    /// The unverified bytes now end at `position`. A finished check keeps
    /// what it found below it (a bad batch past it is gone, so the rest
    /// checked out); a check still running elsewhere read bytes that were
    /// cut, so its result goes to a cell nobody reads any more.
    fn forget_unverified_from(&mut self, position: u64) {
        self.unverified_bytes = position;
        self.verified = Arc::new(match self.verified.get() {
            Some(Some(bad)) if bad.position < position => OnceLock::from(Some(bad.clone())),
            Some(_) => OnceLock::from(None),
            None => OnceLock::new(),
        });
    }

    /// Validates every batch, truncates at the first invalid one, and
    /// rebuilds both indexes. Returns the number of bytes truncated.
    pub fn recover(
        &mut self,
        on_batch: &mut dyn FnMut(&RecordBatchHeader),
    ) -> Result<u64, StorageError> {
        self.rolling_base_timestamp = None;
        self.unverified_bytes = 0;
        let state = &mut self.state;
        state.reset()?;
        let end = scan(
            &self.log,
            0,
            state.base_offset,
            state.base_offset,
            true,
            &mut |position, header| {
                state.index_batch(position, header);
                on_batch(header);
            },
        )?;
        let mut truncated = 0;
        if let Some(invalid) = end {
            truncated = self.log.size() - invalid.position;
            warn!(
                file = %self.log.path().display(),
                position = invalid.position,
                truncated_bytes = truncated,
                reason = %invalid.reason,
                "truncating segment at invalid or partial batch"
            );
            self.log.truncate(invalid.position)?;
        }
        let state = &mut self.state;
        state.append_final_time_entry();
        state.offset_index.persist()?;
        state.time_index.persist()?;
        Ok(truncated)
    }

    /// Appends already validated batches (with offsets assigned) in one
    /// vectored write of `parts`, whose concatenation is the batches.
    /// `batches` holds each batch's position within that concatenation.
    pub fn append(
        &mut self,
        parts: &[IoSlice<'_>],
        batches: &[(usize, RecordBatchHeader)],
    ) -> Result<(), StorageError> {
        let start = self.log.size();
        if let Some((_, last)) = batches.last() {
            assert!(
                last.last_offset() - self.state.base_offset <= MAX_RELATIVE_OFFSET,
                "append past the relative offset range of segment {}",
                self.state.base_offset
            );
        }
        self.log
            .reserve_for(parts.iter().map(|p| p.len() as u64).sum());
        self.log.append_vectored(parts)?;
        if start == 0 {
            self.rolling_base_timestamp = batches.first().map(|(_, h)| h.max_timestamp);
        }
        for (position, header) in batches {
            self.state.index_batch(start + *position as u64, header);
        }
        Ok(())
    }

    /// Whether `bytes` more bytes ending at `last_offset`, whose largest
    /// timestamp is `max_timestamp`, belong in a new segment (Kafka's
    /// `LogSegment.shouldRoll`: size, relative offset range, full indexes,
    /// or the segment is older than `segment_ms`).
    pub fn should_roll(
        &mut self,
        bytes: u64,
        last_offset: i64,
        max_timestamp: i64,
        now_ms: i64,
        segment_bytes: u64,
        segment_ms: i64,
    ) -> Result<bool, StorageError> {
        let size = self.log.size();
        let full = size + bytes > segment_bytes;
        Ok(
            (size > 0 && (full || self.time_waited_for_roll(now_ms, max_timestamp)? > segment_ms))
                || last_offset - self.state.base_offset > MAX_RELATIVE_OFFSET
                || self.state.offset_index.is_full()
                || self.state.time_index.is_full(),
        )
    }

    /// Kafka's `timeWaitedForRoll`: how far `timestamp` is past the first
    /// batch's max timestamp, or, when batches carry none, how long ago
    /// this segment was created.
    pub fn time_waited_for_roll(
        &mut self,
        now_ms: i64,
        timestamp: i64,
    ) -> Result<i64, StorageError> {
        if self.rolling_base_timestamp.is_none() && self.log.size() > 0 {
            self.rolling_base_timestamp = Some(self.header_at(0)?.max_timestamp);
        }
        Ok(match self.rolling_base_timestamp {
            Some(base) if base >= 0 => timestamp.saturating_sub(base),
            _ => now_ms.saturating_sub(self.created_ms),
        })
    }

    /// The segment's largest timestamp for retention: the max batch
    /// timestamp, or the file's modification time when no batch has one.
    pub fn largest_timestamp(&self, env: &LogEnv) -> Result<i64, StorageError> {
        let (timestamp, _) = self.max_timestamp();
        if timestamp >= 0 || !self.log.exists() {
            return Ok(timestamp);
        }
        env.modified_ms(self.log.path())
    }

    /// A handle on the .log file for an fsync outside the log's lock.
    pub fn log_handle(
        &mut self,
    ) -> Result<std::sync::Arc<dyn crate::file::FileHandle>, StorageError> {
        self.log.handle()
    }

    pub fn log_path(&self) -> &Path {
        self.log.path()
    }

    /// Writes the pending index entries (without fsync).
    pub fn persist_indexes(&mut self) -> Result<(), StorageError> {
        self.state.offset_index.persist()?;
        self.state.time_index.persist()
    }

    /// Renames all three files by appending `suffix` to their names.
    pub fn add_suffix(&mut self, suffix: &str) -> Result<(), StorageError> {
        let with = |p: &Path| {
            let mut name = p.as_os_str().to_owned();
            name.push(suffix);
            std::path::PathBuf::from(name)
        };
        let to = with(self.log.path());
        self.log.rename_to(&to)?;
        let to = with(self.state.offset_index.path());
        self.state.offset_index.rename_to(&to)?;
        let to = with(self.state.time_index.path());
        self.state.time_index.rename_to(&to)
    }

    /// Deletes all three files.
    pub fn delete_files(&mut self) -> Result<(), StorageError> {
        self.log.delete()?;
        self.state.offset_index.delete()?;
        self.state.time_index.delete()
    }

    /// Called when a newer segment takes over appends: records the final max
    /// timestamp (as Kafka does) and writes the index files.
    pub fn on_become_inactive(&mut self) -> Result<(), StorageError> {
        self.log.release_reserved();
        self.state.append_final_time_entry();
        self.ensure_index_files()?;
        self.state.offset_index.persist()?;
        self.state.time_index.persist()
    }

    /// A closed segment keeps both index files, empty when no entry was
    /// due (a segment of one large batch), as Kafka's do; an idle active
    /// segment keeps none, so idle partitions cost no files.
    fn ensure_index_files(&mut self) -> Result<(), StorageError> {
        if self.log.exists() {
            self.state.offset_index.ensure_file()?;
            self.state.time_index.ensure_file()?;
        }
        Ok(())
    }

    /// Writes the final index entries (as a roll does) and answers the
    /// files to fsync, with their paths, so that a roll about to close this
    /// segment can have them fsynced outside the log's lock first.
    pub(crate) fn files_to_sync_before_roll(
        &mut self,
    ) -> Result<Vec<crate::file::FileToSync>, StorageError> {
        self.state.append_final_time_entry();
        self.ensure_index_files()?;
        self.files_to_sync()
    }

    /// The files that hold this segment (those that exist), with their
    /// paths, after writing the pending index entries.
    pub(crate) fn files_to_sync(&mut self) -> Result<Vec<crate::file::FileToSync>, StorageError> {
        let mut files = Vec::with_capacity(3);
        if self.log.exists() {
            files.push((self.log.path().to_path_buf(), self.log.handle()?));
        }
        files.extend(self.state.offset_index.persisted_handle()?);
        files.extend(self.state.time_index.persisted_handle()?);
        Ok(files)
    }

    /// fsync the log and write + fsync both indexes.
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.log.sync()?;
        self.state.offset_index.sync()?;
        self.state.time_index.sync()
    }

    pub fn base_offset(&self) -> i64 {
        self.state.base_offset
    }

    pub fn next_offset(&self) -> i64 {
        self.state.next_offset
    }

    pub fn size(&self) -> u64 {
        self.log.size()
    }

    /// Whether the .log file exists on disk (it is created by the first
    /// append or by a roll).
    pub fn exists(&self) -> bool {
        self.log.exists()
    }

    /// `(max timestamp, base offset of the first batch carrying it)`; the
    /// timestamp is -1 when no batch has one.
    pub fn max_timestamp(&self) -> (i64, i64) {
        (
            self.state.max_timestamp_so_far,
            self.state.offset_of_max_timestamp_so_far,
        )
    }

    pub fn offset_index(&self) -> &OffsetIndex {
        &self.state.offset_index
    }

    pub fn time_index(&self) -> &TimeIndex {
        &self.state.time_index
    }

    /// Position and header of the first batch whose last offset is >=
    /// `offset`, found through the offset index; `None` when the segment
    /// ends before it.
    pub fn find_batch(
        &self,
        offset: i64,
    ) -> Result<Option<(u64, RecordBatchHeader)>, StorageError> {
        let start = self.state.offset_index.lookup(offset).position;
        self.find_from(u64::from(start), |h| h.last_offset() >= offset)
    }

    /// First batch at or after `position` for which `wanted` holds.
    fn find_from(
        &self,
        mut position: u64,
        wanted: impl Fn(&RecordBatchHeader) -> bool,
    ) -> Result<Option<(u64, RecordBatchHeader)>, StorageError> {
        while position < self.log.size() {
            let header = self.header_at(position)?;
            if wanted(&header) {
                return Ok(Some((position, header)));
            }
            position += header.total_size() as u64;
        }
        Ok(None)
    }

    /// Reads and parses the batch header at `position`. Data below the
    /// segment's size was validated on append or recovery, so a bad header
    /// here is reported as corruption.
    pub fn header_at(&self, position: u64) -> Result<RecordBatchHeader, StorageError> {
        let mut buf = [0u8; RECORD_BATCH_HEADER_SIZE];
        if position + buf.len() as u64 > self.log.size() {
            return Err(self.corrupt(position, "partial batch header"));
        }
        self.log.read_at(position, &mut buf)?;
        let header = parse_header(&buf).map_err(|e| self.corrupt(position, &e.to_string()))?;
        if position + header.total_size() as u64 > self.log.size() {
            return Err(self.corrupt(position, "batch runs past the end of the file"));
        }
        Ok(header)
    }

    fn corrupt(&self, position: u64, detail: &str) -> StorageError {
        StorageError::corrupt(
            self.log.path().display().to_string(),
            format!("at position {position}: {detail}"),
        )
    }

    /// Reads whole batches starting with the one containing `fetch_offset`:
    /// at most `max_bytes`, except that with `min_one_batch` the first batch
    /// is returned even when larger. `None` when the segment holds no batch
    /// with offsets at or after `fetch_offset`.
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<Option<Bytes>, StorageError> {
        self.read_upto(fetch_offset, max_bytes, min_one_batch, i64::MAX)
    }

    /// Like [`LogSegment::read`], but only batches whose base offset is
    /// below `max_offset` (a high watermark); `Some` and empty when the
    /// first batch from `fetch_offset` starts at or past it.
    pub fn read_upto(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        max_offset: i64,
    ) -> Result<Option<Bytes>, StorageError> {
        Ok(self
            .batch_range(fetch_offset, max_bytes, min_one_batch, max_offset)?
            .map(|(start, end, _)| self.read_bytes(start, end - start))
            .transpose()?
            .map(Bytes::from))
    }

    /// Like [`LogSegment::read`], but answers with the file range instead
    /// of its bytes, for zero-copy sending.
    pub fn read_region(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<Option<FileRegion>, StorageError> {
        self.read_region_upto(fetch_offset, max_bytes, min_one_batch, i64::MAX)
    }

    /// [`LogSegment::read_upto`] as a file range.
    pub fn read_region_upto(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        max_offset: i64,
    ) -> Result<Option<FileRegion>, StorageError> {
        let Some((start, end, records)) =
            self.batch_range(fetch_offset, max_bytes, min_one_batch, max_offset)?
        else {
            return Ok(None);
        };
        Ok(Some(FileRegion {
            file: self.log.os_file()?,
            position: start,
            len: u32::try_from(end - start).expect("segment positions fit u32"),
            records,
        }))
    }

    /// The whole batches a read from `fetch_offset` returns: file positions
    /// [start, end) and how many offsets they span (their records, unless
    /// compaction left gaps). At most `max_bytes`, except that with
    /// `min_one_batch` a first batch larger than that is returned whole;
    /// only batches whose base offset is below `max_offset`; `None` when no
    /// batch holds `fetch_offset`.
    ///
    /// As Kafka does, the end is found through the offset index rather than
    /// batch by batch: the read jumps to the last indexed batch inside both
    /// bounds and reads headers only from there (about
    /// `index.interval.bytes` of batches), so a read of small batches costs
    /// a few header reads rather than one per batch.
    fn batch_range(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        max_offset: i64,
    ) -> Result<Option<(u64, u64, u64)>, StorageError> {
        let Some((start, first)) = self.find_batch(fetch_offset)? else {
            return Ok(None);
        };
        if first.base_offset >= max_offset {
            return Ok(Some((start, start, 0)));
        }
        let limit = self.readable_end(start)?;
        let spanned = |end_offset: i64| u64::try_from(end_offset - first.base_offset).unwrap_or(0);
        let max_bytes = max_bytes as u64;
        let first_size = first.total_size() as u64;
        if first_size > max_bytes {
            return Ok(Some(if min_one_batch {
                (start, start + first_size, spanned(first.last_offset() + 1))
            } else {
                (start, start, 0)
            }));
        }
        let mut end = start + first_size;
        let mut end_offset = first.last_offset() + 1;
        let last_byte = start.saturating_add(max_bytes).min(limit.saturating_sub(1));
        if let Some(boundary) = self
            .state
            .offset_index
            .last_boundary_within(end, last_byte, max_offset)
        {
            end = u64::from(boundary.position);
        }
        while end < limit {
            let header = self.header_at(end)?;
            end_offset = header.base_offset;
            let size = header.total_size() as u64;
            if header.base_offset >= max_offset || end - start + size > max_bytes {
                break;
            }
            end += size;
            end_offset = header.last_offset() + 1;
        }
        Ok(Some((start, end, spanned(end_offset))))
    }

    /// Whether some bytes of this segment still wait for their check.
    pub fn awaits_verification(&self) -> bool {
        self.unverified_bytes > 0 && self.verified.get().is_none()
    }

    /// The check a read from file position `position` still needs: the
    /// bytes this process did not write or recover, when the read starts
    /// among them and nobody has checked them yet. Run it without the log's
    /// lock ([`SegmentVerifier::run`]); the read then finds the answer.
    pub fn verification_for(&self, position: u64) -> Result<Option<SegmentVerifier>, StorageError> {
        if position >= self.unverified_bytes || !self.awaits_verification() {
            return Ok(None);
        }
        Ok(Some(SegmentVerifier {
            file: self.log.read_handle()?,
            path: self.log.path().to_path_buf(),
            base_offset: self.state.base_offset,
            unverified_bytes: self.unverified_bytes,
            result: self.verified.clone(),
        }))
    }

    /// Where reads starting at `start` must stop: the end of the file, or
    /// the first batch that failed validation when the bytes this process
    /// did not write or recover were checked (once, by
    /// [`LogSegment::verification_for`]'s verifier or, if no caller ran
    /// one, here). A read starting at a failed batch is an error.
    fn readable_end(&self, start: u64) -> Result<u64, StorageError> {
        if start >= self.unverified_bytes {
            return Ok(self.log.size());
        }
        if let Some(verifier) = self.verification_for(start)? {
            verifier.run()?;
        }
        let invalid = self.verified.get().expect("set by the verifier");
        match invalid {
            Some(bad) if bad.position <= start => Err(self.corrupt(
                bad.position,
                &format!("batch fails validation on read: {}", bad.reason),
            )),
            Some(bad) => Ok(bad.position),
            None => Ok(self.log.size()),
        }
    }

    pub fn read_bytes(&self, position: u64, len: u64) -> Result<Vec<u8>, StorageError> {
        let mut buf = vec![0u8; len as usize];
        self.log.read_at(position, &mut buf)?;
        Ok(buf)
    }

    /// The first batch whose max timestamp is >= `timestamp`, using the time
    /// index to skip batches known to be older.
    pub fn find_batch_by_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<(u64, RecordBatchHeader)>, StorageError> {
        self.find_batch_by_timestamp_from(timestamp, i64::MIN, 0)
    }

    /// [`LogSegment::find_batch_by_timestamp`] among the batches that hold
    /// an offset at or after `min_offset`, from `position` on (the time
    /// index may start the search later).
    pub fn find_batch_by_timestamp_from(
        &self,
        timestamp: i64,
        min_offset: i64,
        position: u64,
    ) -> Result<Option<(u64, RecordBatchHeader)>, StorageError> {
        let indexed = match self.state.time_index.lookup_before(timestamp) {
            Some(entry) => {
                let offset = entry.offset.max(min_offset);
                u64::from(self.state.offset_index.lookup(offset).position)
            }
            None => 0,
        };
        self.find_from(position.max(indexed), |h| {
            h.max_timestamp >= timestamp && h.last_offset() >= min_offset
        })
    }

    /// Visits every batch header at or after offset `from_offset`.
    pub fn for_each_header_from(
        &self,
        from_offset: i64,
        visit: &mut dyn FnMut(&RecordBatchHeader),
    ) -> Result<(), StorageError> {
        let Some((mut position, _)) = self.find_batch(from_offset)? else {
            return Ok(());
        };
        while position < self.log.size() {
            let header = self.header_at(position)?;
            if header.base_offset >= from_offset {
                visit(&header);
            }
            position += header.total_size() as u64;
        }
        Ok(())
    }
}

/// Walks the batches of `log` from `position`, checking lengths, magic, that
/// offsets increase from `next_offset` and stay in the segment's range, and
/// with `validate_crc` also the CRC (which needs the whole batch read).
/// Returns where and why it stopped early, if it did.
/// Whether a segment's offset index must hold an entry: appends index a
/// batch once `index.interval.bytes` have been written since the last
/// entry, so the first entry belongs to the first batch starting at or past
/// that position. A segment without one (a few small batches, or one large
/// batch) may have no index file at all. Reads only the headers before
/// that position; a header it cannot read counts as "expected", so a
/// damaged segment is rebuilt.
fn index_entry_expected(
    log: &SegmentFile,
    index_interval_bytes: u64,
) -> Result<bool, StorageError> {
    let size = log.size();
    let mut position = 0;
    let mut header_buf = [0u8; RECORD_BATCH_HEADER_SIZE];
    while position < size {
        if position >= index_interval_bytes || size - position < RECORD_BATCH_HEADER_SIZE as u64 {
            return Ok(true);
        }
        log.read_at(position, &mut header_buf)?;
        let Ok(header) = parse_header(&header_buf) else {
            return Ok(true);
        };
        position += header.total_size() as u64;
    }
    Ok(false)
}

fn scan(
    log: &dyn ScanSource,
    mut position: u64,
    base_offset: i64,
    mut next_offset: i64,
    validate_crc: bool,
    visit: &mut dyn FnMut(u64, &RecordBatchHeader),
) -> Result<Option<InvalidBatch>, StorageError> {
    let size = log.size();
    let mut header_buf = [0u8; RECORD_BATCH_HEADER_SIZE];
    let mut batch_buf = Vec::new();
    while position < size {
        let invalid = |reason: String| Ok(Some(InvalidBatch { position, reason }));
        if size - position < RECORD_BATCH_HEADER_SIZE as u64 {
            return invalid(format!("partial batch header ({} bytes)", size - position));
        }
        log.read_at(position, &mut header_buf)?;
        let header = match parse_header(&header_buf) {
            Ok(header) => header,
            Err(e) => return invalid(e.to_string()),
        };
        let total = header.total_size() as u64;
        if position + total > u64::from(u32::MAX) {
            return invalid("batch ends beyond the 4 GiB a segment index can address".to_string());
        }
        if total > size - position {
            return invalid(format!(
                "partial batch: {total} bytes, {} left in the file",
                size - position
            ));
        }
        if header.base_offset < next_offset
            || header.last_offset() - base_offset > MAX_RELATIVE_OFFSET
        {
            return invalid(format!(
                "batch offsets {}..={} do not follow offset {}",
                header.base_offset,
                header.last_offset(),
                next_offset - 1
            ));
        }
        if validate_crc {
            batch_buf.resize(total as usize, 0);
            log.read_at(position, &mut batch_buf)?;
            if let Err(e) = validate_batch(&batch_buf) {
                return invalid(e.to_string());
            }
        }
        visit(position, &header);
        next_offset = header.last_offset().saturating_add(1);
        position += total;
    }
    Ok(None)
}

/// The most a compressed batch may expand to when a timestamp lookup reads
/// the records inside it; past this the batch's base offset answers.
const TIMESTAMP_LOOKUP_DECOMPRESSED_MAX_BYTES: usize = 64 << 20;

/// Offset and timestamp of the first record in `batch` with timestamp >=
/// `timestamp`, as Kafka answers ListOffsets (by timestamp, and for the
/// max timestamp): compressed batches are decompressed to find it. In a
/// LogAppendTime batch every record has the batch's max timestamp, so the
/// answer is its base offset. If the records cannot be read (or expand past
/// [`TIMESTAMP_LOOKUP_DECOMPRESSED_MAX_BYTES`]) the answer is the batch's
/// base offset and max timestamp, a safe lower bound for a consumer to
/// start at.
pub fn first_record_at_or_after(
    batch: &[u8],
    header: &RecordBatchHeader,
    timestamp: i64,
) -> (i64, i64) {
    first_record_at_or_after_from(batch, header, timestamp, i64::MIN)
        .unwrap_or((header.base_offset, header.max_timestamp))
}

/// [`first_record_at_or_after`] among the records at or after offset
/// `min_offset` (the log start, which may fall inside the batch); `None`
/// when none of those qualifies. Every record of a LogAppendTime batch
/// has the batch's timestamp.
pub fn first_record_at_or_after_from(
    batch: &[u8],
    header: &RecordBatchHeader,
    timestamp: i64,
    min_offset: i64,
) -> Option<(i64, i64)> {
    let fallback = Some((header.base_offset.max(min_offset), header.max_timestamp));
    if header.timestamp_type() == TimestampType::LogAppendTime {
        return fallback;
    }
    let decompressed;
    let records = if header.compression() == Compression::None {
        match RecordIter::new(batch, header) {
            Ok(records) => records,
            Err(_) => return fallback,
        }
    } else {
        match decompressed_records(batch, header, TIMESTAMP_LOOKUP_DECOMPRESSED_MAX_BYTES) {
            Ok(bytes) => {
                decompressed = bytes;
                RecordIter::over_records(&decompressed, header.records_count)
            }
            Err(_) => return fallback,
        }
    };
    for record in records {
        let Ok(record) = record else {
            return fallback;
        };
        let record_timestamp = header.base_timestamp.saturating_add(record.timestamp_delta);
        let offset = header
            .base_offset
            .saturating_add(i64::from(record.offset_delta));
        if record_timestamp >= timestamp && offset >= min_offset {
            return Some((offset, record_timestamp));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::record_batch::{build_batch_for_tests, RecordBatchBuilder};

    fn config(index_interval_bytes: u32) -> LogConfig {
        LogConfig {
            index_interval_bytes,
            ..LogConfig::default()
        }
    }

    fn append(segment: &mut LogSegment, batch: Vec<u8>) {
        let header = validate_batch(&batch).unwrap();
        segment
            .append(&[IoSlice::new(&batch)], &[(0, header)])
            .unwrap();
    }

    #[test]
    fn index_entries_follow_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let mut segment = LogSegment::open(
            &LogEnv::shared_default(),
            dir.path(),
            0,
            &config(200),
            false,
            &mut |_| {},
        )
        .unwrap();
        let mut positions = Vec::new();
        for i in 0..10 {
            positions.push(segment.size());
            append(&mut segment, build_batch_for_tests(i * 3, 3, 1_000 + i));
        }
        let batch_size = positions[1];
        assert!(
            batch_size < 200,
            "test assumes small batches ({batch_size})"
        );
        let entries = segment.offset_index().entries();
        assert!(!entries.is_empty());
        let per_entry = 200u64.div_ceil(batch_size);
        for entry in &entries {
            let batch = (entry.offset / 3) as usize;
            assert_eq!(u64::from(entry.position), positions[batch]);
            assert_eq!(batch as u64 % per_entry, 0, "entry at batch {batch}");
        }
        for target in 0..30 {
            let (position, header) = segment.find_batch(target).unwrap().unwrap();
            assert_eq!(header.base_offset, target / 3 * 3);
            assert_eq!(position, positions[(target / 3) as usize]);
        }
        assert!(segment.find_batch(30).unwrap().is_none());
    }

    #[test]
    fn reads_through_the_index_end_where_a_batch_by_batch_scan_would() {
        let dir = tempfile::tempdir().unwrap();
        let mut segment = LogSegment::open(
            &LogEnv::shared_default(),
            dir.path(),
            0,
            &config(300),
            false,
            &mut |_| {},
        )
        .unwrap();
        // Batches of 1 to 4 records: positions[i] is where batch i starts,
        // bases[i] its base offset; one more entry marks the end.
        let (mut positions, mut bases) = (vec![0u64], vec![0i64]);
        for i in 0..40 {
            let count = 1 + i % 4;
            let base = *bases.last().unwrap();
            append(
                &mut segment,
                build_batch_for_tests(base, count as usize, 1_000 + i),
            );
            positions.push(segment.size());
            bases.push(base + count);
        }
        assert!(segment.offset_index().entries().len() > 5);
        let end_offset = *bases.last().unwrap();
        for fetch_offset in (0..end_offset).step_by(7) {
            let first = bases.partition_point(|b| *b <= fetch_offset) - 1;
            for max_bytes in [1, 100, 350, 1000, 2500, 100_000, usize::MAX] {
                for max_offset in [0, 5, 33, 60, end_offset - 1, i64::MAX] {
                    // Batch by batch: whole batches from `first` that fit
                    // and start below `max_offset`.
                    let mut last = first;
                    while last < 40
                        && bases[last] < max_offset
                        && positions[last + 1] - positions[first] <= max_bytes as u64
                    {
                        last += 1;
                    }
                    if last == first && bases[first] < max_offset {
                        last = first + 1; // min_one_batch
                    }
                    let region = segment
                        .read_region_upto(fetch_offset, max_bytes, true, max_offset)
                        .unwrap()
                        .unwrap();
                    let case = format!("from {fetch_offset}, {max_bytes} B, below {max_offset}");
                    assert_eq!(region.position, positions[first], "{case}");
                    assert_eq!(
                        region.position + u64::from(region.len),
                        positions[last],
                        "{case}"
                    );
                    let spanned = if last > first {
                        bases[last] - bases[first]
                    } else {
                        0
                    };
                    assert_eq!(region.records, spanned as u64, "{case}");
                }
            }
        }
    }

    #[test]
    fn truncate_to_cuts_the_log_and_both_indexes_at_a_batch() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::shared_default();
        let open = |scanned: &mut usize| {
            LogSegment::open(&env, dir.path(), 100, &config(1), false, &mut |_| {
                *scanned += 1
            })
            .unwrap()
        };
        let mut segment = open(&mut 0);
        let mut positions = Vec::new();
        // Batches at 100, 102, .., 108 whose max timestamps are 51, 91,
        // 71, 96, 61: the max is recomputed, not just kept.
        for (i, ts) in [50, 90, 70, 95, 60].into_iter().enumerate() {
            positions.push(segment.size());
            append(
                &mut segment,
                build_batch_for_tests(100 + 2 * i as i64, 2, ts),
            );
        }
        let total = segment.size();
        // As a rolled segment: index files written, entries unloaded.
        segment.on_become_inactive().unwrap();
        segment.unload_indexes().unwrap();

        assert_eq!(segment.truncate_to(106, 7).unwrap(), total - positions[3]);
        assert_eq!(segment.size(), positions[3]);
        assert_eq!(segment.next_offset(), 106);
        assert_eq!(segment.max_timestamp(), (91, 102));
        let offsets: Vec<(i64, u64)> = segment
            .offset_index()
            .entries()
            .iter()
            .map(|e| (e.offset, u64::from(e.position)))
            .collect();
        assert_eq!(offsets, [(102, positions[1]), (104, positions[2])]);
        assert!(segment
            .time_index()
            .entries()
            .iter()
            .all(|e| e.offset < 106));
        assert!(segment.find_batch(106).unwrap().is_none());

        // Inside a batch: the whole batch goes.
        segment.truncate_to(103, 7).unwrap();
        assert_eq!(segment.size(), positions[1]);
        assert_eq!(segment.next_offset(), 102);
        assert_eq!(segment.max_timestamp(), (51, 100));
        assert!(segment.offset_index().entries().is_empty());
        assert!(segment.time_index().entries().is_empty());
        // The files say the same: a reopen trusts them.
        drop(segment);
        let mut scanned = 0;
        let mut segment = open(&mut scanned);
        assert_eq!(scanned, 0, "a truncated index must not need a rebuild");
        assert_eq!(segment.next_offset(), 102);
        assert_eq!(segment.max_timestamp(), (51, 100));
        append(&mut segment, build_batch_for_tests(102, 2, 40));
        assert_eq!(segment.next_offset(), 104);

        segment.truncate_to(100, 7).unwrap();
        assert_eq!((segment.size(), segment.next_offset()), (0, 100));
        assert_eq!(segment.max_timestamp(), (-1, 100));
        assert_eq!(
            segment.time_waited_for_roll(10, -1).unwrap(),
            3,
            "created anew at 7"
        );
        assert_eq!(
            std::fs::metadata(segment.offset_index().path())
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn reopen_trusts_indexes_and_scans_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut segment = LogSegment::open(
            &LogEnv::shared_default(),
            dir.path(),
            100,
            &config(1),
            false,
            &mut |_| {},
        )
        .unwrap();
        for i in 0..5 {
            append(&mut segment, build_batch_for_tests(100 + i * 2, 2, 50 - i));
        }
        segment.on_become_inactive().unwrap();
        let entries = segment.offset_index().entries();
        drop(segment);
        let mut scanned = 0;
        let segment = LogSegment::open(
            &LogEnv::shared_default(),
            dir.path(),
            100,
            &config(1),
            false,
            &mut |_| scanned += 1,
        )
        .unwrap();
        assert_eq!(scanned, 0, "a sane index must not trigger a rebuild");
        assert_eq!(segment.offset_index().entries(), entries);
        assert_eq!(segment.next_offset(), 110);
        assert_eq!(segment.max_timestamp(), (51, 100));
    }

    #[test]
    fn first_record_at_or_after_uses_record_timestamps() {
        let batch = RecordBatchBuilder::new()
            .base_offset(10)
            .record(100, None, Some(b"a"))
            .record(300, None, Some(b"b"))
            .record(200, None, Some(b"c"))
            .build();
        let header = validate_batch(&batch).unwrap();
        assert_eq!(first_record_at_or_after(&batch, &header, 50), (10, 100));
        assert_eq!(first_record_at_or_after(&batch, &header, 150), (11, 300));
        assert_eq!(first_record_at_or_after(&batch, &header, 300), (11, 300));
    }

    #[test]
    fn first_record_at_or_after_reads_inside_compressed_batches() {
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batch = RecordBatchBuilder::new()
                .base_offset(10)
                .compression(codec)
                .record(100, None, Some(b"a"))
                .record(300, None, Some(b"b"))
                .record(200, None, Some(b"c"))
                .record(300, None, Some(b"d"))
                .build();
            let header = validate_batch(&batch).unwrap();
            assert_eq!(header.compression(), codec);
            // Kafka answers the first record at or after the timestamp, not
            // the batch's base offset.
            assert_eq!(
                first_record_at_or_after(&batch, &header, 150),
                (11, 300),
                "{codec:?}"
            );
            assert_eq!(
                first_record_at_or_after(&batch, &header, 50),
                (10, 100),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn first_record_at_or_after_falls_back_to_the_base_offset() {
        let batch = RecordBatchBuilder::new()
            .base_offset(10)
            .log_append_time(true)
            .record(100, None, Some(b"a"))
            .record(300, None, Some(b"b"))
            .build();
        let header = validate_batch(&batch).unwrap();
        let max = header.max_timestamp;
        assert_eq!(first_record_at_or_after(&batch, &header, max), (10, max));

        // A compressed payload that does not decompress: the base offset,
        // never a panic.
        let mut batch = RecordBatchBuilder::new()
            .base_offset(20)
            .compression(Compression::Zstd)
            .record(100, None, Some(b"a"))
            .record(300, None, Some(b"b"))
            .build();
        let end = batch.len();
        batch[end - 4..].copy_from_slice(b"junk");
        let header = parse_header(&batch).unwrap();
        assert_eq!(first_record_at_or_after(&batch, &header, 200), (20, 300));
    }
}
