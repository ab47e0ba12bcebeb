//! `LogCleaner`: log compaction (`cleanup.policy=compact`).
//!
//! A pass over one log has three phases, so appends and fetches are only
//! blocked for the first and the last, which are short:
//! 1. [`Log::plan_cleaning`] (under the log's lock) decides whether the
//!    dirty section — from the cleaner checkpoint to the first uncleanable
//!    offset (the active segment, or the first segment younger than
//!    `min.compaction.lag.ms`) — is due: its share of the cleanable bytes
//!    reaches `min.cleanable.dirty.ratio`, or its oldest record is older
//!    than `max.compaction.lag.ms`.
//! 2. [`CleaningPlan::run`] (no lock; inactive segments are immutable)
//!    builds a map key -> latest offset over the dirty section (bounded by
//!    `log.cleaner.dedupe.buffer.size`), then rewrites every cleanable
//!    segment, in groups whose cleaned (written) size fits `segment.bytes`
//!    (a segment whose output overflows its group starts the next one; a
//!    group of one may exceed it), keeping a record when no later record
//!    has its key; a tombstone (null value) is also dropped once the
//!    delete horizon on its batch has passed (KIP-534: the first pass that
//!    keeps a tombstone stamps its batch with now + `delete.retention.ms`,
//!    in the base timestamp, flag 0x40, record deltas moved so timestamps
//!    stay). Offsets are kept (gaps are
//!    allowed), as are batch headers' producer id, epoch, base
//!    sequence and last offset delta; the last batch of each idempotent
//!    producer is kept even when emptied, so its sequence survives. Batches
//!    whose records all stay are copied byte for byte (compressed ones
//!    too). A rewritten batch keeps its codec, as in Kafka: its records
//!    are compressed again through a pluggable [`Compressor`]; without one
//!    for the codec, or when the batch is emptied (Kafka writes empty
//!    batches uncompressed), it is written uncompressed. Compressed batches
//!    are decoded through a pluggable [`Decompressor`]; without one for
//!    their codec they are kept whole and their keys do not supersede
//!    older records (nothing is lost, the batch is just not compacted).
//!    Control batches are kept.
//! 3. [`Log::complete_cleaning`] (under the lock) swaps the results in and
//!    moves the cleaner checkpoint to the end of the cleaned range.
//!
//! Recovery side: a cleaned segment is written as `<base>.log.cleaned`,
//! fsynced, renamed to `<base>.log.swap` (the commit point), then the
//! segments it replaces are renamed to `*.deleted` and the swap file is
//! renamed to `<base>.log`. [`recover_interrupted_cleaning`] runs when a
//! log opens and finishes whatever step a crash interrupted: `.cleaned`
//! files are dropped (the originals are intact), a `.swap` file replaces
//! every segment whose base offset falls in its offset range, and
//! `.deleted`/`.tmp` leftovers are removed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tarn_protocol::record_batch::{
    compute_crc, encode_varlong, parse_header, BatchError, Compression, Record, RecordBatchHeader,
    RecordIter, TimestampType, DELETE_HORIZON_FLAG_MASK, LOG_OVERHEAD, RECORD_BATCH_HEADER_SIZE,
};
use tracing::{info, warn};

use crate::error::StorageError;
use crate::file::{LogEnv, SegmentFile};
use crate::log::{is_leftover_file, parse_segment_log_name, Log, CLEANED_SUFFIX, SWAP_SUFFIX};
use crate::segment::{segment_file_name, LogSegment, DELETED_SUFFIX, MAX_RELATIVE_OFFSET};

/// Finishes or undoes an interrupted cleaning in `dir` (whose entries are
/// `names`). Returns whether it changed anything.
pub(crate) fn recover_interrupted_cleaning(
    env: &LogEnv,
    dir: &Path,
    names: &[String],
) -> Result<bool, StorageError> {
    let mut changed = false;
    for name in names.iter().filter(|n| is_leftover_file(n)) {
        env.remove_if_exists(&dir.join(name))?;
        changed = true;
    }
    let mut swaps: Vec<i64> = names
        .iter()
        .filter_map(|n| n.strip_suffix(SWAP_SUFFIX))
        .filter_map(parse_segment_log_name)
        .collect();
    swaps.sort_unstable();
    for base in swaps {
        let swap = dir.join(format!("{}{SWAP_SUFFIX}", segment_file_name(base, "log")));
        let last_offset = last_offset_in(env, &swap)?.unwrap_or(base);
        warn!(file = %swap.display(), last_offset, "completing an interrupted compaction swap");
        for old in names.iter().filter_map(|n| parse_segment_log_name(n)) {
            if (base..=last_offset).contains(&old) {
                for suffix in ["log", "index", "timeindex"] {
                    env.remove_if_exists(&dir.join(segment_file_name(old, suffix)))?;
                }
            }
        }
        for suffix in ["index", "timeindex"] {
            env.remove_if_exists(&dir.join(segment_file_name(base, suffix)))?;
        }
        env.rename(&swap, &dir.join(segment_file_name(base, "log")))?;
        env.sync_dir(dir)?;
        changed = true;
    }
    Ok(changed)
}

/// The last offset of the last whole batch in a segment file, by walking
/// the batch headers.
fn last_offset_in(env: &LogEnv, path: &Path) -> Result<Option<i64>, StorageError> {
    let file = SegmentFile::open(env, path)?;
    let mut position = 0u64;
    let mut last = None;
    let mut header_buf = [0u8; RECORD_BATCH_HEADER_SIZE];
    while position + RECORD_BATCH_HEADER_SIZE as u64 <= file.size() {
        file.read_at(position, &mut header_buf)?;
        let Ok(header) = parse_header(&header_buf) else {
            break;
        };
        if position + header.total_size() as u64 > file.size() {
            break;
        }
        last = Some(header.last_offset());
        position += header.total_size() as u64;
    }
    Ok(last)
}

/// Holds the offset up to which the log has been cleaned (Kafka keeps it in
/// `cleaner-offset-checkpoint` per data directory).
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// Fixed per-entry cost charged against the dedupe buffer for each key.
const MAP_ENTRY_OVERHEAD_BYTES: usize = 48;
/// Output is written in chunks of this size.
const WRITE_CHUNK_BYTES: usize = 1 << 20;

/// Decodes a compressed batch's records section. `Err` means "cannot":
/// the batch is then kept whole.
pub type Decompressor = fn(Compression, &[u8]) -> Result<Vec<u8>, String>;

/// The default, when the caller plugs in no codec (the broker plugs in the
/// protocol crate's, capped): every compressed batch is kept as it is.
pub fn no_decompressor(codec: Compression, _: &[u8]) -> Result<Vec<u8>, String> {
    Err(format!(
        "no {codec:?} decompressor is available to the cleaner"
    ))
}

/// Encodes a rewritten batch's records section with the codec of the batch
/// it came from, appending to the buffer. `Err` means "cannot": the batch
/// is then written uncompressed (whatever was appended is dropped).
pub type Compressor = fn(Compression, &[u8], &mut Vec<u8>) -> Result<(), String>;

/// The default, when the caller plugs in no codec: every rewritten batch
/// is written uncompressed.
pub fn no_compressor(codec: Compression, _: &[u8], _: &mut Vec<u8>) -> Result<(), String> {
    Err(format!(
        "no {codec:?} compressor is available to the cleaner"
    ))
}

/// Settings of the cleaner itself (broker-wide).
#[derive(Debug, Clone, Copy)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size`: memory for the key -> offset map.
    pub dedupe_buffer_bytes: usize,
    pub decompressor: Decompressor,
    pub compressor: Compressor,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_bytes: 128 << 20,
            decompressor: no_decompressor,
            compressor: no_compressor,
        }
    }
}

/// One segment to read: its base offset and its size when planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SourceSegment {
    base_offset: i64,
    size: u64,
}

/// What phase 1 decided; run it with [`CleaningPlan::run`].
#[derive(Debug)]
pub struct CleaningPlan {
    env: LogEnv,
    dir: PathBuf,
    config: CleanerConfig,
    segment_bytes: u64,
    /// Every cleanable segment, oldest first; the dirty ones start at
    /// index `first_dirty_index`.
    segments: Vec<SourceSegment>,
    first_dirty_index: usize,
    /// Base offset of the first segment not cleaned (the range end).
    end_offset: i64,
    /// When the plan was made: tombstones of batches whose delete horizon
    /// is at or before it go, and batches stamped now get
    /// `now_ms + delete.retention.ms` (KIP-534).
    now_ms: i64,
    delete_retention_ms: i64,
    /// producer id -> base offset of its last batch in the log.
    last_batch_of_producer: HashMap<i64, i64>,
    /// The log's truncation generation when planned.
    generation: u64,
}

/// Phase 2's output: cleaned groups waiting in `.swap` files.
#[derive(Debug)]
pub struct CleanedSegments {
    groups: Vec<CleanedGroup>,
    end_offset: i64,
    stats: CleanStats,
    /// The log's truncation generation when planned.
    generation: u64,
}

#[derive(Debug)]
struct CleanedGroup {
    base_offset: i64,
    members: Vec<SourceSegment>,
    swap: PathBuf,
}

impl CleanedSegments {
    /// Drops the results (the log closed meanwhile): removes the swap files
    /// so a later open does not apply them.
    pub fn discard(self, env: &LogEnv) -> Result<(), StorageError> {
        for group in self.groups {
            env.remove_if_exists(&group.swap)?;
        }
        Ok(())
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub segments_read: usize,
    pub segments_written: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Compressed batches kept whole for lack of a decompressor.
    pub batches_not_decoded: u64,
    /// Rewritten batches of a compressed batch that had to be written
    /// uncompressed for lack of a compressor.
    pub batches_not_recompressed: u64,
    /// Batches that kept a tombstone and got their KIP-534 delete horizon.
    pub batches_stamped: u64,
}

/// Where a test wants `complete_cleaning` to stop, as if the process died.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CrashPoint {
    SwapFilesWritten,
    OldSegmentsRenamed,
    FirstGroupSwapped,
}

impl Log {
    /// Phase 1: the cleaning to do now, if any (see the module docs).
    pub fn plan_cleaning(
        &mut self,
        now_ms: i64,
        config: CleanerConfig,
    ) -> Result<Option<CleaningPlan>, StorageError> {
        if !self.config.cleanup_policy.compact {
            return Ok(None);
        }
        let active = self.active_segment().base_offset();
        let lag_ms = self.config.min_compaction_lag_ms;
        let env = self.env.clone();
        let mut segments = Vec::new();
        for segment in self.segments.values() {
            if segment.base_offset() == active {
                break;
            }
            if lag_ms > 0 && now_ms.saturating_sub(segment.largest_timestamp(&env)?) <= lag_ms {
                break;
            }
            segments.push(SourceSegment {
                base_offset: segment.base_offset(),
                size: segment.size(),
            });
        }
        let Some(end_offset) = self
            .segments
            .keys()
            .copied()
            .find(|b| segments.last().is_some_and(|s| *b > s.base_offset))
        else {
            return Ok(None);
        };
        let checkpoint = read_checkpoint(&self.env, &self.dir)?.unwrap_or(0);
        let first_dirty_index = segments
            .iter()
            .position(|s| s.base_offset >= checkpoint)
            .unwrap_or(segments.len());
        let clean_bytes: u64 = segments[..first_dirty_index].iter().map(|s| s.size).sum();
        let dirty_bytes: u64 = segments[first_dirty_index..].iter().map(|s| s.size).sum();
        if dirty_bytes == 0 {
            return Ok(None);
        }
        let ratio = dirty_bytes as f64 / (clean_bytes + dirty_bytes) as f64;
        let first_dirty_base = segments[first_dirty_index].base_offset;
        let overdue = {
            let first_dirty = self
                .segments
                .get_mut(&first_dirty_base)
                .expect("planned segment");
            first_dirty.time_waited_for_roll(now_ms, now_ms)? > self.config.max_compaction_lag_ms
        };
        if ratio < self.config.min_cleanable_dirty_ratio && !overdue {
            return Ok(None);
        }
        let last_batch_of_producer = self
            .producer_state
            .last_batches()
            .map(|(id, b)| (id, b.base_offset))
            .collect();
        Ok(Some(CleaningPlan {
            env: self.env.clone(),
            dir: self.dir.clone(),
            config,
            segment_bytes: self.config.segment_bytes,
            segments,
            first_dirty_index,
            end_offset,
            now_ms,
            delete_retention_ms: self.config.delete_retention_ms,
            last_batch_of_producer,
            generation: self.truncation_generation(),
        }))
    }

    /// Phase 3: replaces the cleaned segments with their `.swap` files and
    /// records the new checkpoint. Groups whose segments changed since the
    /// plan (retention deleted them) are dropped, and so is everything
    /// after a truncation since the plan: a truncated segment can regrow
    /// to its planned size with other batches.
    pub fn complete_cleaning(
        &mut self,
        cleaned: CleanedSegments,
    ) -> Result<CleanStats, StorageError> {
        self.complete_cleaning_until(cleaned, None)
    }

    pub(crate) fn complete_cleaning_until(
        &mut self,
        cleaned: CleanedSegments,
        #[cfg(test)] crash: Option<CrashPoint>,
        #[cfg(not(test))] _crash: Option<()>,
    ) -> Result<CleanStats, StorageError> {
        let now_ms = self.env.now_ms();
        let deadline = now_ms.saturating_add(self.config.file_delete_delay_ms);
        let mut groups = Vec::new();
        let truncated = cleaned.generation != self.truncation_generation();
        for group in cleaned.groups {
            let intact = !truncated
                && group.members.iter().all(|m| {
                    self.segments
                        .get(&m.base_offset)
                        .is_some_and(|s| s.size() == m.size)
                })
                && self.active_segment().base_offset() > group.base_offset;
            if intact {
                groups.push(group);
            } else {
                warn!(dir = %self.dir.display(), base_offset = group.base_offset, "segments changed while cleaning; dropping the cleaned group");
                self.env.remove_if_exists(&group.swap)?;
            }
        }
        #[cfg(test)]
        if crash == Some(CrashPoint::SwapFilesWritten) {
            return Ok(cleaned.stats);
        }
        for group in &groups {
            for member in &group.members {
                let mut old = self
                    .segments
                    .remove(&member.base_offset)
                    .expect("checked above");
                old.add_suffix(DELETED_SUFFIX)?;
                self.pending_deletes.push((deadline, old));
            }
            #[cfg(test)]
            if crash == Some(CrashPoint::OldSegmentsRenamed) {
                return Ok(cleaned.stats);
            }
            let base = group.base_offset;
            self.env
                .rename(&group.swap, &self.dir.join(segment_file_name(base, "log")))?;
            let segment =
                LogSegment::open(&self.env, &self.dir, base, &self.config, true, &mut |_| {})?;
            self.segments.insert(base, Box::new(segment));
            #[cfg(test)]
            if base == groups[0].base_offset && crash == Some(CrashPoint::FirstGroupSwapped) {
                return Ok(cleaned.stats);
            }
        }
        self.env.sync_dir(&self.dir)?;
        if !truncated {
            write_checkpoint(&self.env, &self.dir, cleaned.end_offset)?;
        }
        self.max_timestamp = self.rebuild_max_timestamp()?;
        info!(
            dir = %self.dir.display(),
            end_offset = cleaned.end_offset,
            stats = ?cleaned.stats,
            "cleaned log"
        );
        Ok(cleaned.stats)
    }

    /// All three phases at once, holding `&mut self` throughout.
    pub fn clean(
        &mut self,
        now_ms: i64,
        config: CleanerConfig,
    ) -> Result<Option<CleanStats>, StorageError> {
        let Some(plan) = self.plan_cleaning(now_ms, config)? else {
            return Ok(None);
        };
        let cleaned = plan.run()?;
        self.complete_cleaning(cleaned).map(Some)
    }

    /// The cleaner checkpoint: offsets below it have been cleaned.
    pub fn cleaner_checkpoint(&self) -> Result<i64, StorageError> {
        Ok(read_checkpoint(&self.env, &self.dir)?.unwrap_or(0))
    }
}

fn read_checkpoint(env: &LogEnv, dir: &Path) -> Result<Option<i64>, StorageError> {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    let Some(bytes) = env.read_optional(&path)? else {
        return Ok(None);
    };
    String::from_utf8_lossy(&bytes)
        .trim()
        .parse()
        .map(Some)
        .map_err(|_| StorageError::corrupt(path.display().to_string(), "not an offset"))
}

/// Lowers the cleaner checkpoint to `log_end_offset` when a truncation
/// left it past the end: batches appended there later were never cleaned
/// (Kafka's `LogCleaner.maybeTruncateCheckpoint`).
pub(crate) fn truncate_checkpoint(
    env: &LogEnv,
    dir: &Path,
    log_end_offset: i64,
) -> Result<(), StorageError> {
    match read_checkpoint(env, dir)? {
        Some(checkpoint) if checkpoint > log_end_offset => {
            write_checkpoint(env, dir, log_end_offset)
        }
        _ => Ok(()),
    }
}

fn write_checkpoint(env: &LogEnv, dir: &Path, offset: i64) -> Result<(), StorageError> {
    env.write_atomically(
        &dir.join(CLEANER_CHECKPOINT_FILE),
        format!("{offset}\n").as_bytes(),
    )
}

/// One cleaned segment being written: the source segments it replaces,
/// its `.cleaned` file, and bytes not yet appended to it.
struct GroupWriter {
    base_offset: i64,
    members: Vec<SourceSegment>,
    out: SegmentFile,
    buffer: Vec<u8>,
}

impl GroupWriter {
    /// Bytes written so far, buffered ones included.
    fn size(&self) -> u64 {
        self.out.size() + self.buffer.len() as u64
    }

    fn flush(&mut self) -> Result<(), StorageError> {
        if !self.buffer.is_empty() {
            self.out.append(&self.buffer)?;
            self.buffer.clear();
        }
        Ok(())
    }

    /// Moves everything written from file position `position` on (file
    /// tail and buffer) to the end of `to`.
    fn move_tail(&mut self, position: u64, to: &mut GroupWriter) -> Result<(), StorageError> {
        to.flush()?;
        let mut chunk = vec![0u8; WRITE_CHUNK_BYTES.min((self.out.size() - position) as usize)];
        let mut at = position;
        while at < self.out.size() {
            let len = chunk.len().min((self.out.size() - at) as usize);
            self.out.read_at(at, &mut chunk[..len])?;
            to.out.append(&chunk[..len])?;
            at += len as u64;
        }
        to.buffer.append(&mut self.buffer);
        self.out.truncate(position)
    }
}

/// Reads the batches of one segment file in order.
struct BatchReader {
    file: SegmentFile,
    position: u64,
}

impl BatchReader {
    fn open(env: &LogEnv, dir: &Path, base_offset: i64) -> Result<BatchReader, StorageError> {
        let file = SegmentFile::open(env, &dir.join(segment_file_name(base_offset, "log")))?;
        Ok(BatchReader { file, position: 0 })
    }

    fn next(&mut self) -> Result<Option<(RecordBatchHeader, Vec<u8>)>, StorageError> {
        if self.position >= self.file.size() {
            return Ok(None);
        }
        let corrupt = |position: u64, detail: String| {
            StorageError::corrupt(
                self.file.path().display().to_string(),
                format!("at position {position}: {detail}"),
            )
        };
        let mut header_buf = [0u8; RECORD_BATCH_HEADER_SIZE];
        if self.position + header_buf.len() as u64 > self.file.size() {
            return Err(corrupt(self.position, "partial batch header".into()));
        }
        self.file.read_at(self.position, &mut header_buf)?;
        let header =
            parse_header(&header_buf).map_err(|e| corrupt(self.position, e.to_string()))?;
        let size = header.total_size() as u64;
        if self.position + size > self.file.size() {
            return Err(corrupt(self.position, "batch runs past the end".into()));
        }
        let mut batch = vec![0u8; size as usize];
        self.file.read_at(self.position, &mut batch)?;
        self.position += size;
        Ok(Some((header, batch)))
    }
}

/// The records of `batch` as an uncompressed batch (the batch itself, or a
/// copy with the records section decompressed); `None` when it cannot be
/// decoded.
fn decoded(
    header: &RecordBatchHeader,
    batch: Vec<u8>,
    decompressor: Decompressor,
) -> Option<(RecordBatchHeader, Vec<u8>)> {
    let codec = header.compression();
    if codec == Compression::None {
        return Some((*header, batch));
    }
    let records = decompressor(codec, &batch[RECORD_BATCH_HEADER_SIZE..]).ok()?;
    let mut plain = Vec::with_capacity(RECORD_BATCH_HEADER_SIZE + records.len());
    plain.extend_from_slice(&batch[..RECORD_BATCH_HEADER_SIZE]);
    plain.extend_from_slice(&records);
    let length = i32::try_from(plain.len() - LOG_OVERHEAD).ok()?;
    plain[8..12].copy_from_slice(&length.to_be_bytes());
    let attributes = header.attributes & !COMPRESSION_MASK;
    plain[21..23].copy_from_slice(&attributes.to_be_bytes());
    let plain_header = parse_header(&plain).ok()?;
    Some((plain_header, plain))
}

const COMPRESSION_MASK: i16 = 0x07;

impl CleaningPlan {
    /// Phase 2 (see the module docs). On error, every file it wrote is
    /// removed again.
    pub fn run(self) -> Result<CleanedSegments, StorageError> {
        let mut written = Vec::new();
        let result = self.run_inner(&mut written);
        if result.is_err() {
            for path in &written {
                if let Err(e) = self.env.remove_if_exists(path) {
                    warn!(file = %path.display(), error = %e, "remove a partial cleaned segment");
                }
            }
        }
        result
    }

    fn run_inner(&self, written: &mut Vec<PathBuf>) -> Result<CleanedSegments, StorageError> {
        let mut stats = CleanStats::default();
        let (map, end_index) = self.build_offset_map(&mut stats)?;
        let segments = &self.segments[..end_index];
        let end_offset = self
            .segments
            .get(end_index)
            .map_or(self.end_offset, |s| s.base_offset);
        // Groups are cut by what is actually written (compaction shrinks
        // segments; a recompressed batch may be larger than the original),
        // so a member whose output overflows `segment.bytes` moves on to
        // start the next group.
        let mut groups = Vec::new();
        let mut current: Option<GroupWriter> = None;
        for (i, segment) in segments.iter().enumerate() {
            let end = segments.get(i + 1).map_or(end_offset, |s| s.base_offset);
            let mut group = match current.take() {
                Some(g) if end - g.base_offset <= MAX_RELATIVE_OFFSET => g,
                Some(g) => {
                    groups.push(self.finish_group(g, written, &mut stats)?);
                    self.start_group(segment.base_offset, written)?
                }
                None => self.start_group(segment.base_offset, written)?,
            };
            group.flush()?;
            let mark = group.out.size();
            self.clean_segment(segment, &map, &mut group.out, &mut group.buffer, &mut stats)?;
            if !group.members.is_empty() && group.size() > self.segment_bytes {
                let mut next = self.start_group(segment.base_offset, written)?;
                group.move_tail(mark, &mut next)?;
                groups.push(self.finish_group(group, written, &mut stats)?);
                group = next;
            }
            group.members.push(*segment);
            current = Some(group);
        }
        if let Some(group) = current {
            groups.push(self.finish_group(group, written, &mut stats)?);
        }
        // The swap files are the commit point: make their names durable.
        self.env.sync_dir(&self.dir)?;
        Ok(CleanedSegments {
            groups,
            end_offset,
            stats,
            generation: self.generation,
        })
    }

    /// A new group starting at `base_offset`, written to
    /// `<base>.log.cleaned` (recorded in `written`).
    fn start_group(
        &self,
        base_offset: i64,
        written: &mut Vec<PathBuf>,
    ) -> Result<GroupWriter, StorageError> {
        let cleaned = self.dir.join(format!(
            "{}{CLEANED_SUFFIX}",
            segment_file_name(base_offset, "log")
        ));
        written.push(cleaned.clone());
        self.env.remove_if_exists(&cleaned)?;
        Ok(GroupWriter {
            base_offset,
            members: Vec::new(),
            out: SegmentFile::open(&self.env, &cleaned)?,
            buffer: Vec::new(),
        })
    }

    /// Writes out and fsyncs a group, then renames it to `<base>.log.swap`.
    fn finish_group(
        &self,
        group: GroupWriter,
        written: &mut [PathBuf],
        stats: &mut CleanStats,
    ) -> Result<CleanedGroup, StorageError> {
        let GroupWriter {
            base_offset,
            members,
            mut out,
            buffer,
        } = group;
        out.append(&buffer)?;
        // Created even when empty: the swap file must replace its members.
        out.handle()?;
        out.sync()?;
        stats.bytes_written += out.size();
        stats.segments_written += 1;
        let cleaned = out.path().to_path_buf();
        let swap = self.dir.join(format!(
            "{}{SWAP_SUFFIX}",
            segment_file_name(base_offset, "log")
        ));
        drop(out);
        self.env.rename(&cleaned, &swap)?;
        if let Some(path) = written.iter_mut().find(|p| **p == cleaned) {
            *path = swap.clone();
        }
        Ok(CleanedGroup {
            base_offset,
            members,
            swap,
        })
    }

    /// key -> offset of its latest record in the dirty section, and the
    /// index of the first segment left out because the map was full.
    fn build_offset_map(
        &self,
        stats: &mut CleanStats,
    ) -> Result<(HashMap<Vec<u8>, i64>, usize), StorageError> {
        let mut map: HashMap<Vec<u8>, i64> = HashMap::new();
        let mut used = 0usize;
        for (index, segment) in self
            .segments
            .iter()
            .enumerate()
            .skip(self.first_dirty_index)
        {
            let mut latest: HashMap<Vec<u8>, i64> = HashMap::new();
            let mut reader = BatchReader::open(&self.env, &self.dir, segment.base_offset)?;
            while let Some((header, batch)) = reader.next()? {
                if header.is_control() {
                    continue;
                }
                let Some((plain_header, plain)) = decoded(&header, batch, self.config.decompressor)
                else {
                    continue;
                };
                for record in records(&plain_header, &plain, segment.base_offset, &self.dir)? {
                    if let Some(key) = record.key {
                        let offset = plain_header
                            .base_offset
                            .saturating_add(i64::from(record.offset_delta));
                        latest.insert(key.to_vec(), offset);
                    }
                }
            }
            let added: usize = latest
                .keys()
                .filter(|k| !map.contains_key(*k))
                .map(|k| k.len() + MAP_ENTRY_OVERHEAD_BYTES)
                .sum();
            if used + added > self.config.dedupe_buffer_bytes && index > self.first_dirty_index {
                // This segment does not fit: clean up to the one before it.
                info!(dir = %self.dir.display(), base_offset = segment.base_offset, "dedupe buffer full; cleaning a shorter range");
                return Ok((map, index));
            }
            used += added;
            map.extend(latest);
            stats.segments_read += 1;
        }
        Ok((map, self.segments.len()))
    }

    fn clean_segment(
        &self,
        segment: &SourceSegment,
        map: &HashMap<Vec<u8>, i64>,
        out: &mut SegmentFile,
        buffer: &mut Vec<u8>,
        stats: &mut CleanStats,
    ) -> Result<(), StorageError> {
        let mut reader = BatchReader::open(&self.env, &self.dir, segment.base_offset)?;
        stats.bytes_read += segment.size;
        while let Some((header, batch)) = reader.next()? {
            if header.is_control() {
                buffer.extend_from_slice(&batch);
                continue;
            }
            let batch_codec = header.compression();
            let Some((plain_header, plain)) =
                decoded(&header, batch.clone(), self.config.decompressor)
            else {
                stats.batches_not_decoded += 1;
                warn!(dir = %self.dir.display(), offset = header.base_offset, codec = ?header.compression(), "keeping a compressed batch the cleaner cannot decode");
                buffer.extend_from_slice(&batch);
                continue;
            };
            // KIP-534: a batch's tombstones may go once the delete horizon
            // the cleaner stamped on it has passed. A batch that keeps a
            // tombstone and has no stamp yet gets one now, so consumers
            // have delete.retention.ms from this pass to see the delete,
            // whatever timestamps the producer gave it.
            let horizon = plain_header.delete_horizon_ms();
            let tombstones_expire = horizon.is_some_and(|h| self.now_ms >= h);
            let mut records_kept = Vec::new();
            let mut max_timestamp = -1i64;
            let mut all = 0i32;
            for record in records(&plain_header, &plain, segment.base_offset, &self.dir)? {
                all += 1;
                let offset = plain_header
                    .base_offset
                    .saturating_add(i64::from(record.offset_delta));
                let superseded = record
                    .key
                    .and_then(|k| map.get(k))
                    .is_some_and(|latest| *latest > offset);
                let expired_tombstone = record.value.is_none() && tombstones_expire;
                if superseded || expired_tombstone {
                    stats.records_removed += 1;
                    if expired_tombstone && !superseded {
                        stats.tombstones_removed += 1;
                    }
                    continue;
                }
                max_timestamp = max_timestamp.max(
                    plain_header
                        .base_timestamp
                        .saturating_add(record.timestamp_delta),
                );
                records_kept.push(record);
            }
            stats.records_read += all as u64;
            let kept_count = records_kept.len() as i32;
            let stamp = (horizon.is_none() && records_kept.iter().any(|r| r.value.is_none()))
                .then(|| self.now_ms.saturating_add(self.delete_retention_ms));
            if kept_count == all && stamp.is_none() {
                buffer.extend_from_slice(&batch);
            } else if kept_count > 0 || self.is_last_batch_of_producer(&header) {
                let mut header = plain_header;
                if let Some(horizon) = stamp {
                    // Record timestamps are base + delta: move the deltas
                    // so every record keeps its timestamp.
                    for record in &mut records_kept {
                        // Saturating: the deltas come from the file; only an
                        // absurd timestamp (near i64::MAX) can saturate.
                        record.timestamp_delta = header
                            .base_timestamp
                            .saturating_add(record.timestamp_delta)
                            .saturating_sub(horizon);
                    }
                    header.base_timestamp = horizon;
                    header.attributes |= DELETE_HORIZON_FLAG_MASK;
                    stats.batches_stamped += 1;
                }
                let mut kept = Vec::new();
                for record in &records_kept {
                    encode_record(record, &mut kept);
                }
                if header.timestamp_type() == TimestampType::LogAppendTime || kept_count == 0 {
                    max_timestamp = header.max_timestamp;
                }
                let codec = batch_codec;
                let compressor = self.config.compressor;
                if let Some(reason) = rebuild_batch(
                    &header,
                    codec,
                    compressor,
                    &kept,
                    kept_count,
                    max_timestamp,
                    buffer,
                ) {
                    stats.batches_not_recompressed += 1;
                    warn!(dir = %self.dir.display(), offset = header.base_offset, ?codec, %reason, "writing a rewritten batch uncompressed");
                }
            }
            if buffer.len() >= WRITE_CHUNK_BYTES {
                out.append(buffer)?;
                buffer.clear();
            }
        }
        Ok(())
    }

    fn is_last_batch_of_producer(&self, header: &RecordBatchHeader) -> bool {
        header.has_producer_id()
            && self.last_batch_of_producer.get(&header.producer_id) == Some(&header.base_offset)
    }
}

/// Decodes every record of an uncompressed batch.
fn records<'a>(
    header: &RecordBatchHeader,
    batch: &'a [u8],
    segment: i64,
    dir: &Path,
) -> Result<Vec<Record<'a>>, StorageError> {
    let corrupt = |e: BatchError| {
        StorageError::corrupt(
            dir.join(segment_file_name(segment, "log"))
                .display()
                .to_string(),
            format!("batch at offset {}: {e}", header.base_offset),
        )
    };
    RecordIter::new(batch, header)
        .map_err(corrupt)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(corrupt)
}

fn encode_nullable(bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    match bytes {
        None => encode_varlong(-1, out),
        Some(b) => {
            encode_varlong(b.len() as i64, out);
            out.extend_from_slice(b);
        }
    }
}

/// Appends one record in the v2 format, deltas unchanged.
fn encode_record(record: &Record<'_>, out: &mut Vec<u8>) {
    let mut body = vec![record.attributes as u8];
    encode_varlong(record.timestamp_delta, &mut body);
    encode_varlong(i64::from(record.offset_delta), &mut body);
    encode_nullable(record.key, &mut body);
    encode_nullable(record.value, &mut body);
    encode_varlong(record.headers.len() as i64, &mut body);
    for (key, value) in &record.headers {
        encode_nullable(Some(key), &mut body);
        encode_nullable(*value, &mut body);
    }
    encode_varlong(body.len() as i64, out);
    out.extend_from_slice(&body);
}

/// Appends a batch holding `records` (`count` uncompressed records) with
/// `original`'s offsets (base and last), producer fields, epoch, flags and
/// base timestamp. Its records section is compressed with `codec`, as
/// Kafka's cleaner does, unless the batch is empty (Kafka writes empty
/// batches uncompressed) or `compressor` cannot; then it is written
/// uncompressed and the reason is returned.
fn rebuild_batch(
    original: &RecordBatchHeader,
    codec: Compression,
    compressor: Compressor,
    records: &[u8],
    count: i32,
    max_timestamp: i64,
    out: &mut Vec<u8>,
) -> Option<String> {
    let start = out.len();
    out.extend_from_slice(&original.base_offset.to_be_bytes());
    out.extend_from_slice(&[0; 4]); // length, set below
    out.extend_from_slice(&original.partition_leader_epoch.to_be_bytes());
    out.push(original.magic as u8);
    out.extend_from_slice(&[0; 4]); // CRC, set below
    out.extend_from_slice(&[0; 2]); // attributes, set below
    out.extend_from_slice(&original.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&original.base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&original.producer_id.to_be_bytes());
    out.extend_from_slice(&original.producer_epoch.to_be_bytes());
    out.extend_from_slice(&original.base_sequence.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    let section = out.len();
    let mut stored = Compression::None;
    let mut fallback = None;
    if codec != Compression::None && count > 0 {
        match compressor(codec, records, out) {
            Ok(()) if i32::try_from(out.len() - start - LOG_OVERHEAD).is_ok() => stored = codec,
            Ok(()) => fallback = Some(format!("{codec:?} output does not fit a batch")),
            Err(e) => fallback = Some(e),
        }
    }
    if stored == Compression::None {
        out.truncate(section);
        out.extend_from_slice(records);
    }
    // An uncompressed section is no larger than the decoded batch, whose
    // length fitted an i32.
    let length = i32::try_from(out.len() - start - LOG_OVERHEAD).expect("batch length fits");
    let attributes = (original.attributes & !COMPRESSION_MASK) | i16::from(stored.id());
    let batch = &mut out[start..];
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    fallback
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use tarn_protocol::record_batch::{BatchIter, RecordBatchBuilder};

    use super::*;
    use crate::file::{ManualClock, OsFileSystem};
    use crate::log_config::{CleanupPolicy, LogConfig};

    type Entry = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

    fn env() -> LogEnv {
        LogEnv::new(Arc::new(OsFileSystem), 32, Arc::new(ManualClock::new(0)))
    }

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 600,
            index_interval_bytes: 100,
            cleanup_policy: CleanupPolicy::COMPACT,
            delete_retention_ms: 1_000_000,
            file_delete_delay_ms: 0,
            ..LogConfig::default()
        }
    }

    fn put(log: &mut Log, key: &str, value: Option<&str>, ts: i64) -> i64 {
        let batch = RecordBatchBuilder::new()
            .record(ts, Some(key.as_bytes()), value.map(str::as_bytes))
            .build();
        log.append(&batch, 0).unwrap().base_offset
    }

    /// Everything a consumer reading from the start would see.
    fn read_all(log: &Log) -> Vec<Entry> {
        let mut out = Vec::new();
        for_each_batch(log, &mut |header, batch| {
            let (header, batch) = decoded(header, batch.to_vec(), reversed).unwrap();
            for record in RecordIter::new(&batch, &header).unwrap() {
                let record = record.unwrap();
                out.push((
                    header.base_offset + i64::from(record.offset_delta),
                    record.key.map(<[u8]>::to_vec),
                    record.value.map(<[u8]>::to_vec),
                ));
            }
        });
        out
    }

    /// Every batch of the log as stored, in offset order.
    fn for_each_batch(log: &Log, visit: &mut dyn FnMut(&RecordBatchHeader, &[u8])) {
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            let bytes = log.read(next, usize::MAX, true).unwrap();
            if bytes.is_empty() {
                break;
            }
            for item in BatchIter::new(&bytes) {
                let (position, header) = item.unwrap();
                visit(&header, &bytes[position..position + header.total_size()]);
                next = header.last_offset() + 1;
            }
        }
    }

    /// key -> (offset, value) of the newest record of each key.
    fn latest(entries: &[Entry]) -> BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)> {
        let mut map = BTreeMap::new();
        for (offset, key, value) in entries {
            map.insert(key.clone().unwrap(), (*offset, value.clone()));
        }
        map
    }

    fn fill(log: &mut Log, rounds: usize, keys: usize) {
        for round in 0..rounds {
            for k in 0..keys {
                put(
                    log,
                    &format!("key-{k}"),
                    Some(&format!("value-{round}-{k}")),
                    1_000 + round as i64,
                );
            }
        }
    }

    #[test]
    fn keeps_exactly_the_latest_value_of_each_key_with_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
        fill(&mut log, 10, 7);
        let before = read_all(&log);
        let expected = latest(&before);
        let active = *log.segment_base_offsets().last().unwrap();
        let stats = log
            .clean(10_000, CleanerConfig::default())
            .unwrap()
            .expect("due");
        assert!(stats.records_removed > 0, "{stats:?}");
        let after = read_all(&log);
        assert_eq!(latest(&after), expected);
        // Offsets strictly increase, and below the active segment each key
        // appears once; the active segment is untouched.
        assert!(after.windows(2).all(|w| w[0].0 < w[1].0));
        let cleaned: Vec<&Entry> = after.iter().filter(|e| e.0 < active).collect();
        let mut keys: Vec<_> = cleaned.iter().map(|e| e.1.clone()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            cleaned.len(),
            "one record per key below the active segment"
        );
        let tail: Vec<&Entry> = before.iter().filter(|e| e.0 >= active).collect();
        assert_eq!(
            after.iter().filter(|e| e.0 >= active).collect::<Vec<_>>(),
            tail
        );
        assert_eq!(log.cleaner_checkpoint().unwrap(), active);
        assert_eq!(log.log_end_offset(), 70);
        // Survives a reopen, clean or not.
        drop(log);
        let log = Log::open_in(&env(), dir.path(), config(), false).unwrap();
        assert_eq!(read_all(&log), after);
    }

    #[test]
    fn dirty_ratio_and_lags_decide_when_to_clean() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
        fill(&mut log, 10, 7);
        assert!(log
            .clean(10_000, CleanerConfig::default())
            .unwrap()
            .is_some());
        // New dirty data, but below a 0.99 ratio: nothing to do.
        fill(&mut log, 3, 7);
        let mut strict = config();
        strict.min_cleanable_dirty_ratio = 0.99;
        log.update_config(strict.clone()).unwrap();
        assert!(log
            .clean(10_000, CleanerConfig::default())
            .unwrap()
            .is_none());
        // max.compaction.lag.ms forces it once the dirty data is old enough.
        let mut lagged = strict;
        lagged.max_compaction_lag_ms = 5_000;
        log.update_config(lagged.clone()).unwrap();
        assert!(log
            .clean(5_500, CleanerConfig::default())
            .unwrap()
            .is_none());
        assert!(log
            .clean(1_000_000, CleanerConfig::default())
            .unwrap()
            .is_some());
        // min.compaction.lag.ms holds back segments younger than the lag.
        let dir2 = tempfile::tempdir().unwrap();
        let young = LogConfig {
            min_compaction_lag_ms: 60_000,
            ..config()
        };
        let mut log2 = Log::open_in(&env(), dir2.path(), young, true).unwrap();
        fill(&mut log2, 10, 7);
        assert!(log2
            .clean(30_000, CleanerConfig::default())
            .unwrap()
            .is_none());
        assert!(log2
            .clean(100_000, CleanerConfig::default())
            .unwrap()
            .is_some());
    }

    #[test]
    fn tombstones_stay_for_delete_retention_ms_then_go() {
        let dir = tempfile::tempdir().unwrap();
        let conf = LogConfig {
            delete_retention_ms: 10_000,
            ..config()
        };
        let mut log = Log::open_in(&env(), dir.path(), conf, true).unwrap();
        fill(&mut log, 3, 5);
        put(&mut log, "key-1", None, 2_000);
        put(&mut log, "key-3", None, 2_000);
        fill(&mut log, 3, 0);
        for i in 0..30 {
            put(&mut log, &format!("other-{i}"), Some("x"), 3_000);
        }
        log.clean(5_000, CleanerConfig::default())
            .unwrap()
            .expect("due");
        let after = latest(&read_all(&log));
        assert_eq!(
            after[b"key-1".as_slice()].1,
            None,
            "tombstone kept within delete.retention.ms"
        );
        assert!(after.contains_key(b"key-0".as_slice()));
        // Later, with more dirty data, the tombstones expire.
        for i in 0..60 {
            put(&mut log, &format!("other-{i}"), Some("y"), 20_000);
        }
        clean_removes_the_two_tombstones(&mut log, 20_000);
    }

    /// Every batch header of the log with the timestamps of its records.
    fn stamped(log: &Log) -> Vec<(RecordBatchHeader, Vec<i64>)> {
        let mut out = Vec::new();
        for_each_batch(log, &mut |header, batch| {
            tarn_protocol::record_batch::validate_batch(batch).unwrap();
            let times = RecordIter::new(batch, header)
                .unwrap()
                .map(|r| header.base_timestamp + r.unwrap().timestamp_delta)
                .collect();
            out.push((*header, times));
        });
        out
    }

    /// Cleans at `now_ms` and checks that the tombstones of key-1 and
    /// key-3 went and key-4's value stayed.
    fn clean_removes_the_two_tombstones(log: &mut Log, now_ms: i64) {
        let stats = log
            .clean(now_ms, CleanerConfig::default())
            .unwrap()
            .expect("due");
        assert_eq!(stats.tombstones_removed, 2, "{stats:?}");
        let after = latest(&read_all(log));
        assert!(!after.contains_key(b"key-1".as_slice()));
        assert!(!after.contains_key(b"key-3".as_slice()));
        assert!(after.contains_key(b"key-4".as_slice()));
    }

    #[test]
    fn tombstones_get_a_delete_horizon_from_the_cleaner_whatever_their_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let conf = LogConfig {
            delete_retention_ms: 10_000,
            ..config()
        };
        let mut log = Log::open_in(&env(), dir.path(), conf, true).unwrap();
        fill(&mut log, 3, 5);
        // Tombstones the producer dated long ago (a replay, a mirror).
        put(&mut log, "key-1", None, 7);
        put(&mut log, "key-3", None, 8);
        for i in 0..30 {
            put(&mut log, &format!("other-{i}"), Some("x"), 3_000);
        }
        let stats = log
            .clean(1_000_000, CleanerConfig::default())
            .unwrap()
            .expect("due");
        assert_eq!(
            stats.tombstones_removed, 0,
            "first pass only stamps: {stats:?}"
        );
        assert_eq!(stats.batches_stamped, 2, "{stats:?}");
        let after = latest(&read_all(&log));
        assert_eq!(
            after[b"key-1".as_slice()].1,
            None,
            "the delete is still visible"
        );
        let tombstones: Vec<_> = stamped(&log)
            .into_iter()
            .filter(|(h, _)| h.delete_horizon_ms().is_some())
            .collect();
        assert_eq!(tombstones.len(), 2);
        for ((header, times), ts) in tombstones.iter().zip([7, 8]) {
            assert_eq!(header.delete_horizon_ms(), Some(1_010_000));
            assert_eq!(times, &vec![ts], "record timestamps survive the stamp");
            assert_eq!(header.max_timestamp, ts);
        }

        // Cleaned again before the horizon: kept, stamp unchanged.
        for i in 0..60 {
            put(&mut log, &format!("other-{i}"), Some("y"), 3_000);
        }
        let stats = log
            .clean(1_009_999, CleanerConfig::default())
            .unwrap()
            .expect("due");
        assert_eq!(
            (stats.tombstones_removed, stats.batches_stamped),
            (0, 0),
            "{stats:?}"
        );
        assert_eq!(latest(&read_all(&log))[b"key-3".as_slice()].1, None);

        // At the horizon they go.
        for i in 0..200 {
            put(&mut log, &format!("other-{i}"), Some("z"), 3_000);
        }
        clean_removes_the_two_tombstones(&mut log, 1_010_000);
    }

    #[test]
    fn idempotent_producers_keep_their_last_batch_and_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
        for round in 0..10 {
            let seq = round;
            let batch = RecordBatchBuilder::new()
                .producer(42, 3, seq)
                .record(1_000, Some(b"k"), Some(format!("v{round}").as_bytes()))
                .build();
            log.append(&batch, 0).unwrap();
            // Another writer supersedes "k" later in the log.
            fill(&mut log, 1, 4);
        }
        put(&mut log, "k", Some("final"), 2_000);
        fill(&mut log, 4, 4);
        let last = *log
            .producer_state()
            .entry(42)
            .unwrap()
            .batches
            .back()
            .unwrap();
        log.clean(10_000, CleanerConfig::default())
            .unwrap()
            .expect("due");
        // The producer's last batch is still there, empty, at its offsets.
        let bytes = log.read(last.base_offset, usize::MAX, true).unwrap();
        let (_, header) = BatchIter::new(&bytes).next().unwrap().unwrap();
        assert_eq!(
            (
                header.base_offset,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.records_count
            ),
            (last.base_offset, 42, 3, 9, 0)
        );
        drop(log);
        let mut log = Log::open_in(&env(), dir.path(), config(), false).unwrap();
        let retry = RecordBatchBuilder::new()
            .producer(42, 3, 9)
            .record(1_000, Some(b"k"), Some(b"v9"))
            .build();
        assert!(log.append(&retry.clone(), 0).unwrap().duplicate);
        let next = RecordBatchBuilder::new()
            .producer(42, 3, 10)
            .record(1_000, Some(b"k"), Some(b"v10"))
            .build();
        assert!(!log.append(&next, 0).unwrap().duplicate);
    }

    /// A "codec" for tests: a compressed records section is a padding
    /// length byte, that many padding bytes, then the records reversed.
    fn reversed(_: Compression, data: &[u8]) -> Result<Vec<u8>, String> {
        let (&pad, rest) = data.split_first().ok_or("empty")?;
        let records = rest.get(usize::from(pad)..).ok_or("short padding")?;
        Ok(records.iter().rev().copied().collect())
    }

    /// The test codec's compressor, without padding.
    fn reversed_into(_: Compression, data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.push(0);
        out.extend(data.iter().rev());
        Ok(())
    }

    /// The test codec's compressor, inflating every section by 201 bytes.
    fn padded_into(_: Compression, data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.push(200);
        out.extend([0xEE; 200]);
        out.extend(data.iter().rev());
        Ok(())
    }

    /// A batch flagged with `codec` whose records section is in the test
    /// codec, holding `key` and "shared" (both with `value`). The log's
    /// validator cannot decompress it: tests appending it set
    /// `skip_record_checks`.
    fn fake_compressed(codec: Compression, key: &str, value: &str) -> Vec<u8> {
        let plain = RecordBatchBuilder::new()
            .record(1_000, Some(key.as_bytes()), Some(value.as_bytes()))
            .record(1_000, Some(b"shared"), Some(value.as_bytes()))
            .build();
        let mut batch = plain[..RECORD_BATCH_HEADER_SIZE].to_vec();
        reversed_into(codec, &plain[RECORD_BATCH_HEADER_SIZE..], &mut batch).unwrap();
        let length = (batch.len() - LOG_OVERHEAD) as i32;
        batch[8..12].copy_from_slice(&length.to_be_bytes());
        batch[22] |= codec.id();
        let crc = compute_crc(&batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// Every batch of the log as stored: header and raw bytes.
    fn stored_batches(log: &Log) -> Vec<(RecordBatchHeader, Vec<u8>)> {
        let bytes = log.read(0, usize::MAX, true).unwrap();
        let mut out = Vec::new();
        let mut next = 0;
        while next < log.log_end_offset() {
            let bytes = log.read(next, usize::MAX, true).unwrap();
            if bytes.is_empty() {
                break;
            }
            for item in BatchIter::new(&bytes) {
                let (position, header) = item.unwrap();
                out.push((
                    header,
                    bytes[position..position + header.total_size()].to_vec(),
                ));
                next = header.last_offset() + 1;
            }
        }
        assert!(!bytes.is_empty());
        out
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Codecs {
        Both,
        DecompressorOnly,
        Neither,
    }

    #[test]
    fn compressed_batches_are_decoded_when_possible_and_kept_whole_otherwise() {
        for codecs in [Codecs::Both, Codecs::DecompressorOnly, Codecs::Neither] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
            log.skip_record_checks = true;
            let codec_of = |i: usize| [Compression::Gzip, Compression::Lz4][i % 2];
            for i in 0..8 {
                let batch = fake_compressed(codec_of(i), &format!("c{i}"), &format!("v{i}"));
                log.append(&batch, 0).unwrap();
                fill(&mut log, 1, 3);
            }
            put(&mut log, "shared", Some("newest"), 5_000);
            fill(&mut log, 3, 3);
            let cleaner = CleanerConfig {
                decompressor: if codecs == Codecs::Neither {
                    no_decompressor
                } else {
                    reversed
                },
                compressor: if codecs == Codecs::Both {
                    reversed_into
                } else {
                    no_compressor
                },
                ..CleanerConfig::default()
            };
            let stats = log.clean(10_000, cleaner).unwrap().expect("due");
            let stored = stored_batches(&log);
            let c_batch = |i: usize| {
                let key = format!("c{i}").into_bytes();
                stored
                    .iter()
                    .find(|(header, batch)| {
                        let (header, plain) = decoded(header, batch.clone(), reversed).unwrap();
                        RecordIter::new(&plain, &header)
                            .unwrap()
                            .any(|r| r.unwrap().key == Some(&key))
                    })
                    .unwrap_or_else(|| panic!("c{i} is gone"))
            };
            if codecs == Codecs::Neither {
                assert_eq!(stats.batches_not_decoded, 8);
                for i in 0..8 {
                    let (header, _) = c_batch(i);
                    assert_eq!(header.compression(), codec_of(i), "kept whole");
                    assert_eq!(header.records_count, 2, "kept whole");
                }
                continue;
            }
            assert_eq!(stats.batches_not_decoded, 0);
            // Every compressed batch lost its "shared" record and was
            // rewritten; its own key survives, at its offset.
            let after = read_all(&log);
            let shared: Vec<_> = after
                .iter()
                .filter(|e| e.1.as_deref() == Some(b"shared"))
                .collect();
            assert_eq!(shared.len(), 1);
            assert_eq!(shared[0].2.as_deref(), Some(b"newest".as_slice()));
            let expected_codec = |i| match codecs {
                Codecs::Both => codec_of(i),
                _ => Compression::None,
            };
            for i in 0..8 {
                let (header, batch) = c_batch(i);
                assert_eq!(header.compression(), expected_codec(i), "{codecs:?} c{i}");
                assert_eq!(
                    (header.records_count, header.last_offset_delta),
                    (1, 1),
                    "one record left, offsets kept"
                );
                let section = &batch[RECORD_BATCH_HEADER_SIZE..];
                if codecs == Codecs::Both {
                    assert_eq!(section[0], 0, "the section is in the test codec");
                }
                let offset = after
                    .iter()
                    .find(|e| e.1.as_deref() == Some(format!("c{i}").as_bytes()))
                    .unwrap()
                    .0;
                assert_eq!(offset, header.base_offset);
            }
            let not_recompressed = if codecs == Codecs::Both { 0 } else { 8 };
            assert_eq!(stats.batches_not_recompressed, not_recompressed);
            // The rewritten batches read back after a reopen (which
            // validates every batch's length and CRC).
            drop(log);
            let log = Log::open_in(&env(), dir.path(), config(), false).unwrap();
            assert_eq!(read_all(&log), after);
        }
    }

    #[test]
    fn an_emptied_compressed_batch_kept_for_its_producer_is_uncompressed() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
        log.skip_record_checks = true;
        let mut batch = fake_compressed(Compression::Zstd, "gone", "v");
        // Producer id 7, epoch 1, base sequence 0 (the CRC covers them).
        batch[43..51].copy_from_slice(&7i64.to_be_bytes());
        batch[51..53].copy_from_slice(&1i16.to_be_bytes());
        batch[53..57].copy_from_slice(&0i32.to_be_bytes());
        let crc = compute_crc(&batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        let base = log.append(&batch, 0).unwrap().base_offset;
        put(&mut log, "gone", Some("newer"), 2_000);
        put(&mut log, "shared", Some("newer"), 2_000);
        fill(&mut log, 6, 4);
        let cleaner = CleanerConfig {
            decompressor: reversed,
            compressor: reversed_into,
            ..CleanerConfig::default()
        };
        log.clean(10_000, cleaner).unwrap().expect("due");
        let (header, _) = stored_batches(&log)
            .into_iter()
            .find(|(h, _)| h.base_offset == base)
            .expect("the producer's last batch is kept");
        assert_eq!(
            (
                header.compression(),
                header.records_count,
                header.producer_id,
                header.last_offset_delta,
                header.total_size()
            ),
            (Compression::None, 0, 7, 1, RECORD_BATCH_HEADER_SIZE)
        );
    }

    /// Size on disk of every segment but the active one, oldest first.
    fn inactive_segment_sizes(dir: &Path, log: &Log) -> Vec<u64> {
        let bases = log.segment_base_offsets();
        bases[..bases.len() - 1]
            .iter()
            .map(|b| {
                std::fs::metadata(dir.join(segment_file_name(*b, "log")))
                    .unwrap()
                    .len()
            })
            .collect()
    }

    #[test]
    fn segments_that_shrink_are_merged_up_to_segment_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
        // Unique keys survive, so every segment keeps something.
        for round in 0..12 {
            put(&mut log, &format!("unique-{round}"), Some("u"), 1_000);
            fill(&mut log, 1, 6);
        }
        let before = read_all(&log);
        let segments_before = log.segment_base_offsets().len();
        let stats = log
            .clean(10_000, CleanerConfig::default())
            .unwrap()
            .expect("due");
        // Each source segment nearly fills segment.bytes, so only their
        // cleaned sizes let several share one cleaned segment.
        assert!(
            stats.segments_written * 2 <= stats.segments_read,
            "{stats:?}"
        );
        assert!(log.segment_base_offsets().len() < segments_before);
        let sizes = inactive_segment_sizes(dir.path(), &log);
        assert!(sizes.iter().all(|s| *s <= 600), "{sizes:?}");
        assert_eq!(latest(&read_all(&log)), latest(&before));
    }

    #[test]
    fn a_segment_whose_output_overflows_its_group_starts_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
        log.skip_record_checks = true;
        for i in 0..12 {
            let value = format!("{i:0>100}");
            let batch = fake_compressed(Compression::Snappy, &format!("c{i}"), &value);
            log.append(&batch, 0).unwrap();
        }
        put(&mut log, "shared", Some("newest"), 5_000);
        fill(&mut log, 2, 3);
        let before = read_all(&log);
        // Source segments of at most 600 bytes would pair up under 1200,
        // but each rewritten batch grows by 201 bytes of padding, so no
        // two cleaned segments fit together.
        let segment_bytes = 1_200;
        log.update_config(LogConfig {
            segment_bytes,
            ..config()
        })
        .unwrap();
        let cleaner = CleanerConfig {
            decompressor: reversed,
            compressor: padded_into,
            ..CleanerConfig::default()
        };
        let plan = log.plan_cleaning(10_000, cleaner).unwrap().expect("due");
        let sources = plan.segments.len();
        let cleaned = plan.run().unwrap();
        assert_eq!(cleaned.groups.len(), sources);
        for group in &cleaned.groups {
            let size = std::fs::metadata(&group.swap).unwrap().len();
            assert!(size <= segment_bytes, "{size} bytes from {group:?}");
            assert!(size > group.members[0].size, "the padding made it grow");
        }
        log.complete_cleaning(cleaned).unwrap();
        assert_eq!(latest(&read_all(&log)), latest(&before));
    }

    #[test]
    fn a_truncation_while_cleaning_drops_what_was_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
        fill(&mut log, 12, 6);
        let bases = log.segment_base_offsets();
        let sizes = inactive_segment_sizes(dir.path(), &log);
        let before = read_all(&log);
        let plan = log
            .plan_cleaning(10_000, CleanerConfig::default())
            .unwrap()
            .expect("due");
        let cleaned = plan.run().unwrap();
        let swaps: Vec<PathBuf> = cleaned.groups.iter().map(|g| g.swap.clone()).collect();
        assert!(!swaps.is_empty());
        // A follower cuts one batch off its active segment: every planned
        // segment keeps its size, yet the plan is about another log now.
        let end = log.log_end_offset();
        log.truncate_to(end - 1).unwrap();
        log.complete_cleaning(cleaned).unwrap();
        assert_eq!(log.segment_base_offsets(), bases);
        assert_eq!(inactive_segment_sizes(dir.path(), &log), sizes);
        assert_eq!(read_all(&log), before[..before.len() - 1]);
        assert!(swaps.iter().all(|swap| !swap.exists()));
        assert_eq!(log.cleaner_checkpoint().unwrap(), 0, "nothing was cleaned");
    }

    #[test]
    fn large_segments_move_between_groups_intact() {
        // Outputs larger than the write chunk, so a moved segment's bytes
        // are partly in the file and partly still buffered.
        let dir = tempfile::tempdir().unwrap();
        let big = LogConfig {
            segment_bytes: 3 * WRITE_CHUNK_BYTES as u64 / 2,
            ..config()
        };
        let mut log = Log::open_in(&env(), dir.path(), big.clone(), true).unwrap();
        let value = "x".repeat(40_000);
        for i in 0..100 {
            put(&mut log, &format!("big-{i}"), Some(&value), 1_000);
            if i == 70 {
                put(&mut log, "big-0", Some("small"), 2_000);
            }
        }
        let before = read_all(&log);
        let segments_before = log.segment_base_offsets().len();
        assert!(segments_before >= 3, "{segments_before}");
        log.update_config(LogConfig {
            segment_bytes: 2 * WRITE_CHUNK_BYTES as u64,
            ..big
        })
        .unwrap();
        let stats = log
            .clean(10_000, CleanerConfig::default())
            .unwrap()
            .expect("due");
        assert_eq!(stats.records_removed, 1, "{stats:?}");
        assert_eq!(log.segment_base_offsets().len(), segments_before);
        let sizes = inactive_segment_sizes(dir.path(), &log);
        assert!(
            sizes.iter().all(|s| *s > WRITE_CHUNK_BYTES as u64),
            "{sizes:?}"
        );
        let expected: Vec<Entry> = before.iter().skip(1).cloned().collect();
        assert_eq!(read_all(&log), expected);
        drop(log);
        let log = Log::open_in(&env(), dir.path(), big, false).unwrap();
        assert_eq!(read_all(&log), expected);
    }

    #[test]
    fn a_crash_at_any_step_of_the_swap_recovers_to_the_old_or_new_contents() {
        for crash in [
            CrashPoint::SwapFilesWritten,
            CrashPoint::OldSegmentsRenamed,
            CrashPoint::FirstGroupSwapped,
        ] {
            for stop_before_swap in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let mut log = Log::open_in(&env(), dir.path(), config(), true).unwrap();
                fill(&mut log, 12, 6);
                let before = read_all(&log);
                let plan = log
                    .plan_cleaning(10_000, CleanerConfig::default())
                    .unwrap()
                    .unwrap();
                let cleaned = plan.run().unwrap();
                if stop_before_swap {
                    // Crash while a .cleaned file was still being written.
                    let swap = &cleaned.groups[0].swap;
                    let name = swap.to_string_lossy().replace(SWAP_SUFFIX, CLEANED_SUFFIX);
                    std::fs::rename(swap, &name).unwrap();
                    for g in &cleaned.groups[1..] {
                        std::fs::remove_file(&g.swap).unwrap();
                    }
                } else {
                    log.complete_cleaning_until(cleaned, Some(crash)).unwrap();
                }
                drop(log);
                let log = Log::open_in(&env(), dir.path(), config(), false).unwrap();
                let after = read_all(&log);
                assert_eq!(
                    latest(&after),
                    latest(&before),
                    "{crash:?} {stop_before_swap}"
                );
                assert!(after.windows(2).all(|w| w[0].0 < w[1].0));
                let names: Vec<String> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                assert!(
                    !names.iter().any(|n| n.ends_with(".swap")
                        || n.ends_with(".cleaned")
                        || n.ends_with(".deleted")),
                    "{names:?}"
                );
                if stop_before_swap {
                    assert_eq!(after, before, "an unfinished clean changes nothing");
                }
            }
        }
    }
}
