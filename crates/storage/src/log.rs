//! `Log`: one partition's directory of segments, with its leader-epoch
//! cache and producer state, and the only entry point the broker uses.
//!
//! The log owns offset assignment and the segment list. Invariants: segments
//! are keyed by base offset and cover increasing, non-overlapping offset
//! ranges (with gaps once compaction or retention removed data); only the
//! last (active) segment is appended to; `log_end_offset` is the active
//! segment's next offset; `log_start_offset` is at or after the first
//! segment's base offset; a produce is either applied whole or not at all
//! (validation, sequence checks and the leader-epoch checkpoint all happen
//! before the single write); every segment but the active one has been
//! fsynced, except at most one that a roll closed while its fsync runs in
//! the background, which carries a marker file until that fsync is done
//! (without a [`RollFlusher`], a roll fsyncs the segment it closes before
//! the next one exists; either way the disk work runs, for appends,
//! beforehand outside the log's lock through [`Log::prepare_roll`]). So
//! recovery after a crash repairs the active segment and a marked one
//! only. Recovery on open also finishes
//! or undoes an interrupted compaction swap, removes leftover `.deleted` and
//! `.cleaned` files, rebuilds any inconsistent index, then rebuilds the max
//! timestamp and producer state. Retention lives in `retention.rs`, the
//! cleaner in `cleaner.rs`, what a follower replica needs (appending a
//! leader's batches as they are, truncating to the leader's log) in
//! `log/follower.rs`. Reads can be bounded by a high watermark
//! ([`Log::read_upto`]).
//!
//! Nothing counts as durable unless the fsync covering it succeeded: a
//! failed fsync (of a flush, a roll or a close) takes the log offline, so
//! every later append and flush fails with `StorageError::Offline` instead
//! of trusting a later fsync that Linux may report as a success without
//! the lost pages (see `flush.rs`). A restart recovers the log from disk.

use std::collections::BTreeMap;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tarn_protocol::record_batch::{
    parse_header, set_base_offset, set_log_append_time, set_max_timestamp,
    set_partition_leader_epoch, validate_batch, BatchError, RecordBatchHeader, TimestampType,
    RECORD_BATCH_HEADER_SIZE,
};
use tarn_protocol::records::FileRegion;
use tracing::{info, warn};

use crate::error::{AppendError, StorageError};
use crate::file::LogEnv;
use crate::flush::{
    parse_unflushed_marker_name, settle_closed, unflushed_marker_name, ClosedSegment, FlushTarget,
    LogDurability, RollFlush, RollFlusher, RollJob, RollSynced, UnflushedSlot,
};
use crate::leader_epoch::LeaderEpochFileCache;
pub use crate::log_config::*;
use crate::log_validator::{validate_client_batch, ValidationConfig};
use crate::producer_state::{
    parse_snapshot_name, snapshot_path, ProducerStateError, ProducerStateManager, SequenceCheck,
};
use crate::segment::{
    first_record_at_or_after, first_record_at_or_after_from, segment_file_name, LogSegment,
    SegmentVerifier, DELETED_SUFFIX,
};

mod follower;

/// Holds the log start offset when DeleteRecords moved it past the first
/// segment's base offset (Kafka keeps it in `log-start-offset-checkpoint`).
pub const LOG_START_OFFSET_FILE: &str = "log-start-offset";
/// Suffix of a compacted segment being written.
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a compacted segment that is complete and replaces the
/// segments it overlaps.
pub const SWAP_SUFFIX: &str = ".swap";

/// What an append did, for the produce response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker's time stamped on the batches when the topic's
    /// `message.timestamp.type` is LogAppendTime; -1 with CreateTime.
    pub log_append_time: i64,
    /// The batch was a retry of one already in the log; the offsets are the
    /// original ones and nothing was appended.
    pub duplicate: bool,
    pub record_count: i64,
}

/// Largest batch timestamp in the log, the base offset of the first batch
/// carrying it, and that batch's leader epoch. The exact record is found
/// only when asked (ListOffsets), so appends never decode records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaxTimestamp {
    pub(crate) timestamp: i64,
    /// The base offset of the batch holding the max timestamp.
    pub(crate) offset: i64,
    pub(crate) epoch: i32,
}

pub(crate) const NO_MAX_TIMESTAMP: MaxTimestamp = MaxTimestamp {
    timestamp: -1,
    offset: -1,
    epoch: -1,
};

/// One partition's log. Not internally synchronized: the caller serializes
/// appends (`&mut self`); reads only need `&self`.
#[derive(Debug)]
pub struct Log {
    pub(crate) env: LogEnv,
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    /// A hash of `dir` as the log was opened, which each segment's
    /// `segment.jitter.ms` draw starts from (see `active_roll_ms`).
    jitter_seed: u64,
    /// Boxed: a B-tree leaf holds 11 slots, so an idle partition with one
    /// segment would otherwise pay for eleven.
    pub(crate) segments: BTreeMap<i64, Box<LogSegment>>,
    pub(crate) log_start_offset: i64,
    pub(crate) log_end_offset: i64,
    leader_epoch_cache: LeaderEpochFileCache,
    pub(crate) producer_state: ProducerStateManager,
    pub(crate) max_timestamp: MaxTimestamp,
    /// Records appended since the last flush was started.
    unflushed_messages: i64,
    /// When the last flush was started (ms), for `flush.ms`.
    last_flush_ms: i64,
    /// What is on disk, shared with the flushes handed out; also whether
    /// the log went offline after a failed fsync.
    durability: Arc<LogDurability>,
    /// The active segment as last fsynced by a [`RollFlush`], so the roll
    /// that follows need not fsync it again.
    roll_synced: Arc<parking_lot::Mutex<Option<RollSynced>>>,
    /// Where rolls hand the fsync of the segment they close, when they do
    /// not do it themselves ([`Log::defer_roll_fsyncs`]).
    roll_flusher: Option<Arc<RollFlusher>>,
    /// The segment the last roll closed, until its fsync is done.
    unflushed_closed: UnflushedSlot,
    /// Segments renamed to `*.deleted`, with when to remove their files.
    pub(crate) pending_deletes: Vec<(i64, Box<LogSegment>)>,
    /// Tests of the cleaner append batches in a stand-in codec that the
    /// validator cannot decompress; they skip its record checks.
    #[cfg(test)]
    pub(crate) skip_record_checks: bool,
}

impl Log {
    /// Opens the partition directory (creating it if missing) in the
    /// process-wide default environment; see [`Log::open_in`].
    pub fn open(dir: &Path, config: LogConfig, clean_shutdown: bool) -> Result<Log, StorageError> {
        Log::open_in(&LogEnv::shared_default(), dir, config, clean_shutdown)
    }

    /// Opens the partition directory (creating it if missing) and recovers
    /// it. With `clean_shutdown == false` the active segment, and a segment
    /// a roll closed before its background fsync finished (it has a marker,
    /// see [`RollFlusher`]), are validated batch by batch and truncated at
    /// the first bad one; a closed segment that lost bytes takes every
    /// later segment with it (as Kafka's recovery does when it cuts one),
    /// since their offsets no longer follow on.
    pub fn open_in(
        env: &LogEnv,
        dir: &Path,
        config: LogConfig,
        clean_shutdown: bool,
    ) -> Result<Log, StorageError> {
        config.validate()?;
        env.create_dir_all(dir)?;
        let mut names = env.list_file_names(dir)?;
        if crate::cleaner::recover_interrupted_cleaning(env, dir, &names)? {
            names = env.list_file_names(dir)?;
        }
        let mut base_offsets: Vec<i64> = names
            .iter()
            .filter_map(|n| parse_segment_log_name(n))
            .collect();
        base_offsets.sort_unstable();
        if base_offsets.is_empty() {
            base_offsets.push(0);
        }
        let mut leader_epoch_cache = LeaderEpochFileCache::open(env, dir)?;
        let mut recovered_epochs: Vec<(i32, i64)> = Vec::new();
        let mut note_epoch = |header: &RecordBatchHeader| {
            if recovered_epochs
                .last()
                .is_none_or(|(epoch, _)| *epoch != header.partition_leader_epoch)
            {
                recovered_epochs.push((header.partition_leader_epoch, header.base_offset));
            }
        };
        let markers: Vec<i64> = names
            .iter()
            .filter_map(|n| parse_unflushed_marker_name(n))
            .collect();
        let mut segments = BTreeMap::new();
        let last_base = *base_offsets.last().expect("at least one segment");
        let mut recovered_closed = Vec::new();
        for (i, &base_offset) in base_offsets.iter().enumerate() {
            if base_offset != last_base {
                let next_base = base_offsets[i + 1];
                if clean_shutdown || !markers.contains(&base_offset) {
                    // Fsynced when it was rolled, or since: trust it, and
                    // read its indexes only when needed.
                    let segment =
                        LogSegment::open_inactive(env, dir, base_offset, next_base, &config)?;
                    segments.insert(base_offset, Box::new(segment));
                    continue;
                }
                info!(dir = %dir.display(), base_offset, "recovering a segment closed before its fsync was done");
                let (mut segment, truncated) =
                    LogSegment::open_recovered(env, dir, base_offset, &config, &mut note_epoch)?;
                recovered_closed.push(base_offset);
                // A cut, or batches that end short of the next segment (the
                // file lost pages and what is left is whole), leaves a hole
                // before the next segment. A marked segment was settled by
                // no flush, so nothing after it was promised durable; a
                // follower whose leader left a compaction gap there loses
                // what it fetches again.
                if truncated == 0 && segment.next_offset() >= next_base {
                    segment.unload_indexes()?;
                    segments.insert(base_offset, Box::new(segment));
                    continue;
                }
                segments.insert(base_offset, Box::new(segment));
                for &later in &base_offsets[i + 1..] {
                    warn!(dir = %dir.display(), base_offset = later, "deleting a segment that followed a closed segment which lost its tail");
                    for suffix in ["log", "index", "timeindex"] {
                        env.remove_if_exists(&dir.join(segment_file_name(later, suffix)))?;
                    }
                }
                break;
            }
            let recover = !clean_shutdown;
            let segment =
                LogSegment::open(env, dir, base_offset, &config, recover, &mut note_epoch)?;
            segments.insert(base_offset, Box::new(segment));
        }
        let active_base = *segments.keys().next_back().expect("at least one segment");
        // What recovery kept of a marked segment (and its truncation, and
        // the deletion of what followed a cut) may be in the page cache
        // only, if the process died and the machine did not: all of it is
        // made durable before the marker goes, which may leave the segment
        // trusted as an inactive one at the next start.
        for base in &recovered_closed {
            if let Some(segment) = segments.get_mut(base) {
                segment.flush()?;
            }
        }
        if !markers.is_empty() {
            env.sync_dir(dir)?;
            for base in markers {
                env.remove_if_exists(&dir.join(unflushed_marker_name(base)))?;
            }
            // A marker back after another crash could cost what is
            // appended and flushed from now on (see `ClosedSegment`).
            env.sync_dir(dir)?;
        }
        let log_end_offset = segments[&active_base].next_offset();
        // Epochs seen in recovered batches are recorded as Kafka's segment
        // recovery does; then anything at or past the end is dropped.
        for (epoch, start_offset) in recovered_epochs {
            leader_epoch_cache.assign(epoch, start_offset)?;
        }
        leader_epoch_cache.truncate_from_end(log_end_offset)?;
        let first_base = *segments.keys().next().expect("at least one segment");
        let log_start_offset = read_log_start_offset(env, dir)?
            .map_or(first_base, |o| o.clamp(first_base, log_end_offset));
        let durable = if clean_shutdown {
            log_end_offset
        } else {
            active_base
        };
        let mut log = Log {
            env: env.clone(),
            dir: dir.to_path_buf(),
            jitter_seed: {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::hash::DefaultHasher::new();
                dir.hash(&mut hasher);
                hasher.finish()
            },
            config,
            segments,
            log_start_offset,
            log_end_offset,
            leader_epoch_cache,
            producer_state: ProducerStateManager::new(),
            max_timestamp: NO_MAX_TIMESTAMP,
            unflushed_messages: 0,
            last_flush_ms: env.now_ms(),
            durability: Arc::new(LogDurability::new(durable)),
            roll_synced: Arc::default(),
            roll_flusher: None,
            unflushed_closed: Arc::default(),
            pending_deletes: Vec::new(),
            #[cfg(test)]
            skip_record_checks: false,
        };
        log.rebuild_producer_state(&names)?;
        log.max_timestamp = log.rebuild_max_timestamp()?;
        tracing::debug!(
            dir = %log.dir.display(),
            segments = log.segments.len(),
            log_start_offset = log.log_start_offset,
            log_end_offset,
            clean_shutdown,
            "opened log"
        );
        Ok(log)
    }

    /// Loads the newest usable producer snapshot and replays batch headers
    /// after it; without one, replays the whole log. Snapshots past the log
    /// end (the log was truncated below them) are deleted.
    fn rebuild_producer_state(&mut self, names: &[String]) -> Result<(), StorageError> {
        let mut snapshots: Vec<i64> = names
            .iter()
            .filter_map(|n| parse_snapshot_name(n))
            .collect();
        snapshots.sort_unstable_by(|a, b| b.cmp(a));
        let mut replay_from = self.log_start_offset;
        for offset in snapshots {
            let path = snapshot_path(&self.dir, offset);
            if offset > self.log_end_offset {
                warn!(file = %path.display(), log_end_offset = self.log_end_offset, "deleting producer snapshot past the log end");
                self.env.remove_file(&path)?;
                continue;
            }
            match ProducerStateManager::load_snapshot(&self.env, &path) {
                Ok(state) => {
                    self.producer_state = state;
                    replay_from = replay_from.max(offset);
                    break;
                }
                Err(e) => {
                    warn!(file = %path.display(), error = %e, "deleting unreadable producer snapshot");
                    self.env.remove_file(&path)?;
                }
            }
        }
        let state = &mut self.producer_state;
        for segment in self.segments.values() {
            if segment.next_offset() > replay_from {
                segment.for_each_header_from(replay_from, &mut |header| state.update(header))?;
            }
        }
        Ok(())
    }

    /// The segment maxima are known from open; this finds the first segment
    /// holding the overall max and reads that batch's header for its epoch.
    pub(crate) fn rebuild_max_timestamp(&self) -> Result<MaxTimestamp, StorageError> {
        let mut best: Option<(&LogSegment, i64, i64)> = None;
        for segment in self.segments.values() {
            let (timestamp, offset) = segment.max_timestamp();
            if timestamp >= 0 && best.is_none_or(|(_, ts, _)| timestamp > ts) {
                best = Some((segment, timestamp, offset));
            }
        }
        let Some((segment, timestamp, offset)) = best else {
            return Ok(NO_MAX_TIMESTAMP);
        };
        let Some((position, header)) = segment.find_batch(offset)? else {
            return Err(StorageError::corrupt(
                format!("segment {}", segment.base_offset()),
                format!("max timestamp points at offset {offset}, which has no batch"),
            ));
        };
        debug_assert!(position < segment.size());
        Ok(MaxTimestamp {
            timestamp,
            offset: header.base_offset,
            epoch: header.partition_leader_epoch,
        })
    }

    /// Appends one produce request's batches for this partition: validates
    /// them all, checks producer sequences, assigns offsets starting at the
    /// log end, stamps `leader_epoch`, and writes them with one write call.
    /// On any error nothing is appended. Data goes to the page cache only;
    /// when [`Log::flush_due`] says so afterwards, the caller must make it
    /// durable ([`Log::prepare_flush`] or [`Log::flush`]) before it
    /// acknowledges the append.
    pub fn append(&mut self, records: &[u8], leader_epoch: i32) -> Result<AppendInfo, AppendError> {
        self.durability.check(&self.dir)?;
        let mut batches = self.validate_records(records)?;
        if let [(_, header)] = batches.as_slice() {
            let check = self.producer_state.check(header).map_err(|e| match e {
                ProducerStateError::OutOfOrderSequence(m) => AppendError::OutOfOrderSequence(m),
                ProducerStateError::InvalidProducerEpoch(m) => AppendError::InvalidProducerEpoch(m),
            })?;
            if let SequenceCheck::Duplicate(original) = check {
                return Ok(AppendInfo {
                    base_offset: original.base_offset,
                    last_offset: original.last_offset,
                    // Kafka answers a duplicate with the original batch's
                    // timestamp as its append time, whatever the type.
                    log_append_time: original.timestamp,
                    duplicate: true,
                    record_count: i64::from(header.records_count),
                });
            }
        }
        let base_offset = self.log_end_offset;
        let mut next_offset = base_offset;
        let mut max_timestamp = -1;
        let log_append_time = match self.config.message_timestamp_type {
            TimestampType::LogAppendTime => self.env.now_ms(),
            TimestampType::CreateTime => -1,
        };
        // The request's bytes are never copied or changed: each batch's
        // header is patched in a small copy (offset, epoch, and append time
        // with a new CRC) and written before the batch's records.
        let mut headers: Vec<[u8; RECORD_BATCH_HEADER_SIZE]> = Vec::with_capacity(batches.len());
        for (position, header) in &mut batches {
            let batch = &records[*position..*position + header.total_size()];
            let (head, body) = batch.split_at(RECORD_BATCH_HEADER_SIZE);
            let mut patched: [u8; RECORD_BATCH_HEADER_SIZE] =
                head.try_into().expect("validated batch has a full header");
            set_base_offset(&mut patched, next_offset).expect("a full header");
            set_partition_leader_epoch(&mut patched, leader_epoch).expect("a full header");
            if log_append_time >= 0 {
                set_log_append_time(&mut patched, body, log_append_time);
                *header = parse_header(&patched).expect("a stamped header stays valid");
            } else {
                // Validation put the largest record timestamp in the header;
                // a client that sent another one gets it corrected, as
                // Kafka does, at the cost of a CRC pass over its records.
                if parse_header(head).map_or(true, |h| h.max_timestamp != header.max_timestamp) {
                    set_max_timestamp(&mut patched, body, header.max_timestamp);
                }
                header.base_offset = next_offset;
                header.partition_leader_epoch = leader_epoch;
            }
            headers.push(patched);
            next_offset = header.last_offset() + 1;
            max_timestamp = max_timestamp.max(header.max_timestamp);
        }
        let last_offset = next_offset - 1;
        self.maybe_roll(
            records.len() as u64,
            base_offset,
            last_offset,
            max_timestamp,
        )?;
        // The checkpoint goes first: if the write below fails, an epoch that
        // starts at the unchanged log end is harmless.
        self.leader_epoch_cache.assign(leader_epoch, base_offset)?;
        let created = !self.active_segment().exists();
        let mut parts = Vec::with_capacity(batches.len() * 2);
        for ((position, header), patched) in batches.iter().zip(&headers) {
            parts.push(IoSlice::new(patched));
            parts.push(IoSlice::new(
                &records[*position + RECORD_BATCH_HEADER_SIZE..*position + header.total_size()],
            ));
        }
        self.active_segment_mut().append(&parts, &batches)?;
        if created {
            self.durability.note_dir_change();
        }
        for (_, header) in &batches {
            self.producer_state.update(header);
            if header.max_timestamp > self.max_timestamp.timestamp {
                self.max_timestamp = MaxTimestamp {
                    timestamp: header.max_timestamp,
                    offset: header.base_offset,
                    epoch: leader_epoch,
                };
            }
        }
        self.log_end_offset = next_offset;
        let record_count = batches
            .iter()
            .map(|(_, h)| i64::from(h.records_count))
            .sum();
        self.unflushed_messages = self.unflushed_messages.saturating_add(record_count);
        Ok(AppendInfo {
            base_offset,
            last_offset,
            log_append_time,
            duplicate: false,
            record_count,
        })
    }

    /// Whether appending `records` with `leader_epoch` would fsync on the
    /// caller's thread: a roll fsyncs the segment it closes (or, with a
    /// [`RollFlusher`], writes its marker), and a new leader epoch
    /// rewrites the epoch checkpoint. Reads only the batch
    /// headers (no CRC check), so the caller can move such an append off
    /// an async worker first. Input that does not parse answers false (the
    /// append refuses it without touching the disk).
    pub fn append_may_fsync(&mut self, records: &[u8], leader_epoch: i32) -> bool {
        self.epoch_checkpoint_due(leader_epoch)
            || (self.append_would_roll(records) && !self.active_segment_roll_synced())
    }

    /// Whether an append with `leader_epoch` rewrites (and fsyncs) the
    /// leader-epoch checkpoint.
    pub fn epoch_checkpoint_due(&self, leader_epoch: i32) -> bool {
        leader_epoch >= 0 && self.latest_epoch().is_none_or(|e| e < leader_epoch)
    }

    /// For an append of `records` that will roll: writes the closing
    /// segment's final index entries and hands out the fsyncs the roll
    /// needs, to run outside this log's lock ([`RollFlush::run`]) before
    /// the append. `None` when the append will not roll (or they ran).
    pub fn prepare_roll(&mut self, records: &[u8]) -> Result<Option<RollFlush>, StorageError> {
        self.durability.check(&self.dir)?;
        if !self.append_would_roll(records) || self.active_segment_roll_synced() {
            return Ok(None);
        }
        self.roll_flush().map(Some)
    }

    /// What closing the active segment needs from the disk first (see
    /// [`RollFlush`]).
    fn roll_flush(&mut self) -> Result<RollFlush, StorageError> {
        let deferred = self.roll_flusher.is_some();
        let active = self.active_segment_mut();
        let files = if deferred {
            Vec::new()
        } else {
            active.files_to_sync_before_roll()?
        };
        let (base_offset, size) = (active.base_offset(), active.size());
        Ok(RollFlush {
            env: self.env.clone(),
            files,
            marker: deferred.then(|| self.dir.join(unflushed_marker_name(base_offset))),
            unflushed: self.unflushed_closed.clone(),
            dir: self.dir.clone(),
            base_offset,
            size,
            generation: self.durability.generation(),
            synced: self.roll_synced.clone(),
            durability: self.durability.clone(),
        })
    }

    /// A [`RollFlush`] covered the active segment as it is now.
    fn active_segment_roll_synced(&self) -> bool {
        let active = self.active_segment();
        let size = (self.roll_flusher.is_none()).then_some(active.size());
        *self.roll_synced.lock()
            == Some(RollSynced {
                generation: self.durability.generation(),
                base_offset: active.base_offset(),
                size,
            })
    }

    /// Rolls from now on close a segment without fsyncing it: `flusher`
    /// does that in the background, as Kafka's scheduler does after a
    /// roll, and the kernel writes pages back as it sees fit meanwhile.
    /// What that leaves unsynced is marked for recovery (see
    /// [`Log::open_in`]) and fsynced by any flush of the log first.
    pub fn defer_roll_fsyncs(&mut self, flusher: Arc<RollFlusher>) {
        self.roll_flusher = Some(flusher);
    }

    /// Whether appending `records` rolls first (from the batch headers).
    fn append_would_roll(&mut self, records: &[u8]) -> bool {
        let mut next_offset = self.log_end_offset;
        let mut max_timestamp = -1;
        let mut position = 0;
        while position < records.len() {
            let Ok(header) = parse_header(&records[position..]) else {
                return false;
            };
            if header.total_size() < RECORD_BATCH_HEADER_SIZE {
                return false;
            }
            next_offset += i64::from(header.last_offset_delta) + 1;
            max_timestamp = max_timestamp.max(header.max_timestamp);
            position += header.total_size();
        }
        let now_ms = self.env.now_ms();
        let segment_bytes = self.config.segment_bytes;
        let segment_ms = self.active_roll_ms();
        self.active_segment_mut()
            .should_roll(
                records.len() as u64,
                next_offset - 1,
                max_timestamp,
                now_ms,
                segment_bytes,
                segment_ms,
            )
            // A header that cannot be read makes the append fail and
            // report it; until then, assume the worst.
            .unwrap_or(true)
    }

    /// Checks that `records` is exactly a sequence of whole, valid v2
    /// batches within the size limits, each passing Kafka's log validator
    /// (`log_validator.rs`); returns each batch's position and header, the
    /// header's max timestamp being the largest record timestamp.
    fn validate_records(
        &self,
        records: &[u8],
    ) -> Result<Vec<(usize, RecordBatchHeader)>, AppendError> {
        if records.is_empty() {
            return Err(AppendError::InvalidRecord(
                "produce request holds no record batches".into(),
            ));
        }
        let validation = ValidationConfig {
            compacted: self.config.cleanup_policy.compact,
            timestamp_type: self.config.message_timestamp_type,
            timestamp_before_max_ms: self.config.message_timestamp_before_max_ms,
            timestamp_after_max_ms: self.config.message_timestamp_after_max_ms,
            now_ms: self.env.now_ms(),
        };
        let batches = self.split_batches(records, Some(&validation))?;
        if batches.len() > 1 && batches.iter().any(|(_, h)| h.has_producer_id()) {
            return Err(AppendError::InvalidRecord(
                "a produce from an idempotent producer must hold exactly one batch per partition"
                    .into(),
            ));
        }
        Ok(batches)
    }

    /// Splits `records` into whole v2 batches with valid headers and CRCs,
    /// within `segment.bytes` in all; returns each batch's position and
    /// header. With `client` (a produce) each batch must also be within
    /// `max.message.bytes` and pass the record-level checks of Kafka's log
    /// validator, and its header's max timestamp is set to the largest
    /// record timestamp. A leader's batches (replication) get neither: the
    /// leader ran them, as Kafka's follower append skips them too.
    fn split_batches(
        &self,
        records: &[u8],
        client: Option<&ValidationConfig>,
    ) -> Result<Vec<(usize, RecordBatchHeader)>, AppendError> {
        if records.len() as u64 > self.config.segment_bytes {
            return Err(AppendError::MessageTooLarge(format!(
                "record batches of {} bytes exceed segment.bytes {}",
                records.len(),
                self.config.segment_bytes
            )));
        }
        let mut batches = Vec::new();
        let mut position = 0;
        while position < records.len() {
            let rest = &records[position..];
            let mut header = parse_header(rest).map_err(|e| batch_error(position, e))?;
            if client.is_some() && header.total_size() > self.config.max_message_bytes as usize {
                return Err(AppendError::MessageTooLarge(format!(
                    "batch at byte {position} is {} bytes, above max.message.bytes {}",
                    header.total_size(),
                    self.config.max_message_bytes
                )));
            }
            validate_batch(rest).map_err(|e| batch_error(position, e))?;
            if let Some(validation) = client.filter(|_| self.checks_records()) {
                let batch = &rest[..header.total_size()];
                let validated = validate_client_batch(position, batch, &header, validation)?;
                if header.timestamp_type() == TimestampType::CreateTime {
                    header.max_timestamp = validated.max_timestamp;
                }
            }
            batches.push((position, header));
            position += header.total_size();
        }
        Ok(batches)
    }

    #[cfg(not(test))]
    fn checks_records(&self) -> bool {
        true
    }

    #[cfg(test)]
    fn checks_records(&self) -> bool {
        !self.skip_record_checks
    }

    /// Rolls first when an append of `bytes` from `first_offset` (the log
    /// end, or past it after a compaction gap in a leader's batches) to
    /// `last_offset` does not belong in the active segment.
    fn maybe_roll(
        &mut self,
        bytes: u64,
        first_offset: i64,
        last_offset: i64,
        max_timestamp: i64,
    ) -> Result<(), StorageError> {
        let now_ms = self.env.now_ms();
        let segment_bytes = self.config.segment_bytes;
        let segment_ms = self.active_roll_ms();
        if self.active_segment_mut().should_roll(
            bytes,
            last_offset,
            max_timestamp,
            now_ms,
            segment_bytes,
            segment_ms,
        )? {
            self.roll_at(first_offset)?;
        }
        Ok(())
    }

    /// Starts a new active segment at the log end. The old one gets its
    /// final index entries and is fsynced first, or marked and handed to
    /// the [`RollFlusher`] (see the module docs), which keeps every segment
    /// recovery does not check on disk. The new segment's (empty) file is
    /// created at once, so a restart finds the log end even when retention
    /// then deletes every older segment.
    pub(crate) fn roll(&mut self) -> Result<(), StorageError> {
        self.roll_at(self.log_end_offset)
    }

    /// [`Log::roll`] to a segment based at `new_base`, at or past the log
    /// end. A follower rolls at the first offset its leader sent, which
    /// compaction may have put far past the end (as Kafka's `maybeRoll`
    /// does, so the new segment's relative offsets cover it); the log end
    /// then moves up to `new_base`, since no offset below it can come.
    fn roll_at(&mut self, new_base: i64) -> Result<(), StorageError> {
        assert!(
            new_base >= self.log_end_offset,
            "roll of {} at {new_base}, below the log end {}",
            self.dir.display(),
            self.log_end_offset
        );
        if self.active_segment().base_offset() == new_base && self.active_segment().size() == 0 {
            return Ok(());
        }
        // Already done by a RollFlush outside the lock when the segment has
        // not changed since in a way that matters; the final index entries
        // then add nothing.
        let synced = self.active_segment_roll_synced();
        let deferred = self.roll_flusher.clone();
        if deferred.is_some() && !synced {
            self.roll_flush()?.run()?;
        }
        let old = self.active_segment_mut();
        old.on_become_inactive()?;
        let closed_files = if deferred.is_some() {
            old.files_to_sync()?
        } else {
            if !synced {
                if let Err(e) = old.flush() {
                    self.durability.fail(&self.dir, &e);
                    return Err(e);
                }
            }
            Vec::new()
        };
        let old_base = old.base_offset();
        old.unload_indexes()?;
        // Leftover index files at the new base offset (with no .log) are
        // found inconsistent with the empty log and rebuilt by open.
        let mut segment = LogSegment::open(
            &self.env,
            &self.dir,
            new_base,
            &self.config,
            false,
            &mut |_| {},
        )?;
        segment.log_handle()?;
        self.durability.note_dir_change();
        info!(dir = %self.dir.display(), base_offset = new_base, "rolled new segment");
        self.segments.insert(new_base, Box::new(segment));
        self.log_end_offset = new_base;
        if let Some(flusher) = deferred {
            let closed = Arc::new(ClosedSegment {
                files: closed_files,
                marker: self.dir.join(unflushed_marker_name(old_base)),
                dir: self.dir.clone(),
                end_offset: new_base,
                generation: self.durability.generation(),
            });
            *self.unflushed_closed.lock() = Some(closed.clone());
            flusher.submit(RollJob {
                env: self.env.clone(),
                closed,
                slot: self.unflushed_closed.clone(),
                durability: self.durability.clone(),
            });
        }
        Ok(())
    }

    pub(crate) fn active_segment(&self) -> &LogSegment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has a segment")
    }

    /// How old the active segment may grow before it rolls
    /// ([`LogConfig::roll_ms`]): its jitter draw hashes this log's
    /// directory (hashed once, at open) and the segment's base offset.
    pub(crate) fn active_roll_ms(&self) -> i64 {
        use std::hash::{Hash, Hasher};
        if self.config.segment_jitter_ms <= 0 {
            return self.config.max_segment_ms();
        }
        let mut hasher = std::hash::DefaultHasher::new();
        self.jitter_seed.hash(&mut hasher);
        self.active_segment().base_offset().hash(&mut hasher);
        self.config.roll_ms(hasher.finish())
    }

    pub(crate) fn active_segment_mut(&mut self) -> &mut LogSegment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has a segment")
    }

    /// Whole batches starting with the one containing `fetch_offset`, at
    /// most `max_bytes` of them unless `min_one_batch` and the first is
    /// larger (then exactly that batch). Skips offset gaps left by
    /// compaction. Empty at the log end; `OffsetOutOfRange` outside
    /// [start, end].
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<Bytes, StorageError> {
        self.read_upto(fetch_offset, max_bytes, min_one_batch, self.log_end_offset)
    }

    /// Like [`Log::read`], but only whole batches whose base offset is
    /// below `max_offset` (exclusive; a high watermark, which lies on a
    /// batch boundary). `min_one_batch` only applies to a first batch
    /// below it. `fetch_offset` is still checked against [start, end]
    /// (`OffsetOutOfRange`); within that, a `fetch_offset` at or past
    /// `max_offset` reads nothing. The bound adds no I/O to the read.
    pub fn read_upto(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        max_offset: i64,
    ) -> Result<Bytes, StorageError> {
        Ok(self
            .read_from_segments(fetch_offset, max_offset, |segment| {
                segment.read_upto(fetch_offset, max_bytes, min_one_batch, max_offset)
            })?
            .unwrap_or_default())
    }

    /// Checks `fetch_offset` against [start, end] and asks the segments
    /// from the one holding it onwards, in order, until one answers: the
    /// next holds the following batch when compaction emptied the rest of
    /// one. Segments based at or past `max_offset` hold nothing to read.
    fn read_from_segments<'a, T>(
        &'a self,
        fetch_offset: i64,
        max_offset: i64,
        read: impl Fn(&'a LogSegment) -> Result<Option<T>, StorageError>,
    ) -> Result<Option<T>, StorageError> {
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset: fetch_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        if fetch_offset >= max_offset {
            return Ok(None);
        }
        let first = self
            .segments
            .range(..=fetch_offset)
            .next_back()
            .map_or(self.log_start_offset, |(base, _)| *base);
        let candidates = self
            .segments
            .range(first..)
            .take_while(|(base, _)| **base < max_offset);
        for (_, segment) in candidates {
            if let Some(found) = read(segment)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The check a read from `fetch_offset` still needs before it may
    /// serve bytes this process did not write (see
    /// [`LogSegment::verification_for`]); run it without the log's lock,
    /// then read. `None` when the read needs none (or is out of range,
    /// which the read itself answers).
    pub fn verification_for(
        &self,
        fetch_offset: i64,
    ) -> Result<Option<SegmentVerifier>, StorageError> {
        // Usually nothing is left to check (only segments a start opened
        // without recovery are): answer without an index lookup.
        let first = self
            .segments
            .range(..=fetch_offset)
            .next_back()
            .map_or(self.log_start_offset, |(base, _)| *base);
        if !self
            .segments
            .range(first..)
            .any(|(_, s)| s.awaits_verification())
        {
            return Ok(None);
        }
        // The segment that answers the read: the first holding a batch at
        // or past the offset.
        let found = match self.read_from_segments(fetch_offset, self.log_end_offset, |segment| {
            Ok(segment
                .find_batch(fetch_offset)?
                .map(|(position, _)| (segment, position)))
        }) {
            Ok(found) => found,
            Err(StorageError::OffsetOutOfRange { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        match found {
            Some((segment, position)) => segment.verification_for(position),
            None => Ok(None),
        }
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// Kafka's ListOffsets by timestamp: the first record at or after the
    /// log start whose timestamp is >= `timestamp`, answered as (offset,
    /// timestamp, leader epoch of its batch); records are decoded
    /// (decompressed if need be), and every record of a LogAppendTime
    /// batch has the batch's timestamp. `None` when no record qualifies:
    /// one below the log start does not, as in Kafka.
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<(i64, i64, i32)>, StorageError> {
        let start = self.log_start_offset;
        for segment in self.segments.values() {
            if segment.max_timestamp().0 < timestamp || segment.next_offset() <= start {
                continue;
            }
            let mut position = 0;
            while let Some((at, header)) =
                segment.find_batch_by_timestamp_from(timestamp, start, position)?
            {
                let batch = segment.read_bytes(at, header.total_size() as u64)?;
                if let Some((offset, record_timestamp)) =
                    first_record_at_or_after_from(&batch, &header, timestamp, start)
                {
                    return Ok(Some((
                        offset,
                        record_timestamp,
                        header.partition_leader_epoch,
                    )));
                }
                // Only a batch across the log start gets here.
                position = at + header.total_size() as u64;
            }
        }
        Ok(None)
    }

    /// (max timestamp, offset of its first record, leader epoch of its
    /// batch); (-1, -1, -1) when no batch has a timestamp. The offset is
    /// exact for uncompressed CreateTime batches, the batch base offset
    /// otherwise; finding it reads that one batch.
    pub fn max_timestamp(&self) -> Result<(i64, i64, i32), StorageError> {
        let m = self.max_timestamp;
        if m.timestamp < 0 {
            return Ok((-1, -1, -1));
        }
        let Some(segment) = self.segments.range(..=m.offset).next_back().map(|(_, s)| s) else {
            return Ok((m.timestamp, m.offset, m.epoch));
        };
        let Some((position, header)) = segment.find_batch(m.offset)? else {
            return Err(StorageError::corrupt(
                format!("segment {}", segment.base_offset()),
                format!(
                    "max timestamp points at offset {}, which has no batch",
                    m.offset
                ),
            ));
        };
        let batch = segment.read_bytes(position, header.total_size() as u64)?;
        let (offset, _) = first_record_at_or_after(&batch, &header, m.timestamp);
        Ok((m.timestamp, offset, m.epoch))
    }

    /// Like [`Log::read`], but answers with the file range holding those
    /// batches (for sendfile) instead of their bytes; `None` when there is
    /// nothing to send. The range stays valid after appends, which only
    /// add bytes past it, and retention, since the file stays open while
    /// the region holds it; a truncation below its end shortens it (see
    /// [`Log::read_region_upto`]).
    pub fn read_region(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<Option<FileRegion>, StorageError> {
        self.read_region_upto(fetch_offset, max_bytes, min_one_batch, self.log_end_offset)
    }

    /// [`Log::read_upto`] as a file range, like [`Log::read_region`]. A
    /// region handed out stays valid until the log is truncated below its
    /// end ([`Log::truncate_to`]): then the file is shorter, and a send of
    /// the region comes up short.
    pub fn read_region_upto(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        max_offset: i64,
    ) -> Result<Option<FileRegion>, StorageError> {
        let region = self.read_from_segments(fetch_offset, max_offset, |segment| {
            segment.read_region_upto(fetch_offset, max_bytes, min_one_batch, max_offset)
        })?;
        Ok(region.filter(|r| r.len > 0))
    }

    /// Kafka's DeleteRecords: moves the log start offset up to `offset`
    /// (never down), persists it before answering and deletes the segments
    /// wholly below it. Returns the new log start offset;
    /// `OffsetOutOfRange` when `offset` is negative or past the end.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64, StorageError> {
        if offset < 0 || offset > self.log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let now_ms = self.env.now_ms();
        self.advance_log_start_offset(offset, now_ms)
    }

    /// Closes the log without flushing (its data is being deleted) and
    /// renames its directory to `new_name` beside it, as Kafka does before
    /// deleting a partition after `file.delete.delay.ms`. Returns the new
    /// path; the caller makes the rename durable (`LogEnv::sync_dir` of the
    /// parent, once for all the partitions it retires) and removes the
    /// directory later (`LogEnv::remove_dir_all`).
    pub fn rename_for_deletion(self, new_name: &str) -> Result<PathBuf, StorageError> {
        let dir = self.dir.clone();
        let env = self.env.clone();
        drop(self);
        let parent = dir.parent().unwrap_or(Path::new("."));
        let target = parent.join(new_name);
        env.rename(&dir, &target)?;
        Ok(target)
    }

    /// Kafka's OffsetForLeaderEpoch; see [`LeaderEpochFileCache::end_offset_for`].
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.leader_epoch_cache
            .end_offset_for(epoch, self.log_end_offset)
    }

    /// [`Log::end_offset_for_epoch`] as the leader of epoch `current`
    /// answers it (see [`crate::leader_epoch::LeaderEpochFileCache::end_offset_for_leader`]).
    pub fn end_offset_for_epoch_as_leader(&self, epoch: i32, current: i32) -> (i32, i64) {
        self.leader_epoch_cache
            .end_offset_for_leader(epoch, self.log_end_offset, current)
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.leader_epoch_cache.latest_epoch()
    }

    /// Records that `epoch` starts at the log end, as Kafka's `makeLeader`
    /// does when this replica becomes the leader: a follower that fetches
    /// with an epoch between the last one this log wrote and `epoch` (one a
    /// leader that lost its records wrote) is then told where it diverges
    /// instead of being taken for a prefix. A log without records skips
    /// it (a follower ahead of it is told it is out of range, and its
    /// first append records the epoch), which spares each new partition
    /// the checkpoint's fsyncs. A failed checkpoint write takes the log
    /// offline.
    pub fn assign_leader_epoch(&mut self, epoch: i32) -> Result<(), StorageError> {
        self.durability.check(&self.dir)?;
        if self.log_end_offset == self.log_start_offset {
            return Ok(());
        }
        if let Err(e) = self.leader_epoch_cache.assign(epoch, self.log_end_offset) {
            self.durability
                .fail_because(&self.dir, "record the new leader epoch", &e);
            return Err(e);
        }
        Ok(())
    }

    /// Truncations so far (see `flush.rs`): work planned outside the lock
    /// checks it did not change before it commits.
    pub(crate) fn truncation_generation(&self) -> u64 {
        self.durability.generation()
    }

    /// The leader epoch that wrote `offset` (see
    /// [`LeaderEpochFileCache::epoch_for_offset`]).
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.leader_epoch_cache.epoch_for_offset(offset)
    }

    /// Kafka's check after an append: `flush.messages` or more records were
    /// appended since the last flush started, so the append that got here
    /// must not be acknowledged before a flush covers it.
    pub fn flush_due(&self) -> bool {
        self.unflushed_messages >= self.config.flush_messages
    }

    /// Whether `flush.ms` has passed since the last flush with data still
    /// waiting (the background flusher's check).
    pub fn flush_ms_due(&self, now_ms: i64) -> bool {
        self.has_unflushed_data()
            && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_ms
    }

    pub fn has_unflushed_data(&self) -> bool {
        self.durability.durable_offset() < self.log_end_offset
            || self.durability.dir_sync_needed().is_some()
    }

    /// Offsets below this are on disk.
    pub fn durable_offset(&self) -> i64 {
        self.durability.durable_offset()
    }

    /// What the log's fsyncs made durable so far, shared with its flushes.
    pub fn durability(&self) -> Arc<LogDurability> {
        self.durability.clone()
    }

    /// Why the log is offline (an fsync failed), or `None` while it works.
    pub fn offline_cause(&self) -> Option<String> {
        self.durability.failure()
    }

    /// Starts a flush of everything appended so far, to be run by the
    /// group-commit thread (or by [`FlushTarget::run`]) outside this log's
    /// lock. `None` when everything is already durable; `Offline` once an
    /// fsync of this log has failed.
    pub fn prepare_flush(&mut self) -> Result<Option<FlushTarget>, StorageError> {
        self.durability.check(&self.dir)?;
        self.unflushed_messages = 0;
        self.last_flush_ms = self.env.now_ms();
        if !self.has_unflushed_data() {
            return Ok(None);
        }
        let dir_changes = self.durability.dir_sync_needed();
        let upto = self.log_end_offset;
        let active = self.active_segment_mut();
        let path = active.log_path().to_path_buf();
        let file = active.log_handle()?;
        Ok(Some(FlushTarget {
            env: self.env.clone(),
            file,
            path,
            dir: self.dir.clone(),
            dir_changes,
            upto,
            generation: self.durability.generation(),
            durability: self.durability.clone(),
            closed: self
                .unflushed_closed
                .lock()
                .clone()
                .map(|closed| (closed, self.unflushed_closed.clone())),
        }))
    }

    /// fsyncs the active segment with its indexes (and the directory, and
    /// first a closed segment still waiting for its fsync) here and now. A
    /// failure takes the log offline, as in [`FlushTarget::run`].
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.durability.check(&self.dir)?;
        self.unflushed_messages = 0;
        self.last_flush_ms = self.env.now_ms();
        let result = self.sync_active_and_dir();
        match &result {
            Ok(()) => self
                .durability
                .advance(self.log_end_offset, self.durability.generation()),
            Err(e) => self.durability.fail(&self.dir, e),
        }
        result
    }

    fn sync_active_and_dir(&mut self) -> Result<(), StorageError> {
        settle_closed(&self.env, &self.unflushed_closed, &self.durability)?;
        let dir_changes = self.durability.dir_sync_needed();
        self.active_segment_mut().flush()?;
        if let Some(changes) = dir_changes {
            self.env.sync_dir(&self.dir)?;
            self.durability.dir_synced(changes);
        }
        Ok(())
    }

    /// Applies new settings to the live log (`AlterConfigs`); they govern
    /// the next append, roll, flush, retention and cleaning.
    pub fn update_config(&mut self, config: LogConfig) -> Result<(), StorageError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// Flushes, writes the final index entries and a producer-state
    /// snapshot at the log end (removing older snapshots), and removes
    /// segment files still waiting for deletion.
    pub fn close(mut self) -> Result<(), StorageError> {
        self.active_segment_mut().on_become_inactive()?;
        self.flush()?;
        for (_, mut segment) in std::mem::take(&mut self.pending_deletes) {
            segment.delete_files()?;
        }
        let written =
            self.producer_state
                .write_snapshot(&self.env, &self.dir, self.log_end_offset)?;
        for name in self.env.list_file_names(&self.dir)? {
            if parse_snapshot_name(&name).is_some() && self.dir.join(&name) != written {
                self.env.remove_file(&self.dir.join(&name))?;
            }
        }
        Ok(())
    }

    /// Removes the partition directory and everything in it.
    pub fn delete(self) -> Result<(), StorageError> {
        let dir = self.dir.clone();
        let env = self.env.clone();
        drop(self);
        env.remove_dir_all(&dir)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn env(&self) -> &LogEnv {
        &self.env
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }

    /// Total bytes of the segments' .log files.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size()).sum()
    }

    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.producer_state
    }

    /// Forgets idle producer ids (see
    /// [`ProducerStateManager::remove_expired_producers`]), with the time
    /// from this log's clock; returns how many.
    pub fn remove_expired_producers(&mut self, expiration_ms: i64) -> usize {
        let now_ms = self.env.now_ms();
        self.producer_state
            .remove_expired_producers(now_ms, expiration_ms)
    }

    /// Persists `log_start_offset` when it lies past the first segment's
    /// base offset (otherwise the segment files say it).
    pub(crate) fn persist_log_start_offset(&self) -> Result<(), StorageError> {
        let path = self.dir.join(LOG_START_OFFSET_FILE);
        let first_base = *self
            .segments
            .keys()
            .next()
            .expect("a log always has a segment");
        if self.log_start_offset > first_base {
            self.env
                .write_atomically(&path, format!("{}\n", self.log_start_offset).as_bytes())
        } else {
            self.env.remove_if_exists(&path)
        }
    }
}

fn read_log_start_offset(env: &LogEnv, dir: &Path) -> Result<Option<i64>, StorageError> {
    let path = dir.join(LOG_START_OFFSET_FILE);
    let Some(bytes) = env.read_optional(&path)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes);
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| StorageError::corrupt(path.display().to_string(), "not an offset"))
}

fn batch_error(position: usize, error: BatchError) -> AppendError {
    match error {
        BatchError::UnsupportedMagic(_) => AppendError::UnsupportedMagic,
        e => AppendError::CorruptMessage(format!("batch at byte {position}: {e}")),
    }
}

/// Kafka's suffix for a partition directory waiting to be deleted.
pub const DELETE_DIR_SUFFIX: &str = "-delete";

/// Removes every `*-delete` directory directly under `data_dir` (left by a
/// run that stopped before their delay passed); returns how many.
pub fn remove_dirs_marked_for_deletion(
    env: &LogEnv,
    data_dir: &Path,
) -> Result<usize, StorageError> {
    let mut removed = 0;
    for name in env.list_file_names(data_dir)? {
        let path = data_dir.join(&name);
        if name.ends_with(DELETE_DIR_SUFFIX) && env.is_dir(&path) {
            env.remove_dir_all(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The base offset a `<20 digits>.log` file name stands for.
pub(crate) fn parse_segment_log_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Whether `name` is a leftover a crash can leave behind and open removes:
/// a segment file awaiting deletion or an unfinished cleaned segment.
pub(crate) fn is_leftover_file(name: &str) -> bool {
    name.ends_with(DELETED_SUFFIX) || name.ends_with(CLEANED_SUFFIX) || name.ends_with(".tmp")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader_epoch::LEADER_EPOCH_CHECKPOINT_FILE;
    use tarn_protocol::record_batch::{build_batch_for_tests, BatchIter, RecordBatchBuilder};

    pub(super) fn small_config() -> LogConfig {
        LogConfig {
            segment_bytes: 1_000,
            index_interval_bytes: 1,
            ..LogConfig::default()
        }
    }

    pub(super) fn headers(bytes: &[u8]) -> Vec<RecordBatchHeader> {
        BatchIter::new(bytes).map(|r| r.unwrap().1).collect()
    }

    pub(super) fn append_plain(log: &mut Log, records: usize, timestamp: i64) -> AppendInfo {
        let batch = build_batch_for_tests(0, records, timestamp);
        log.append(&batch, 0).unwrap()
    }

    pub(super) fn idempotent(pid: i64, epoch: i16, seq: i32, records: usize) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new().producer(pid, epoch, seq);
        for i in 0..records {
            builder = builder.record(1_000 + i as i64, None, Some(b"x"));
        }
        builder.build()
    }

    pub(super) fn file_len(dir: &Path, name: &str) -> u64 {
        std::fs::metadata(dir.join(name)).unwrap().len()
    }

    /// Reads everything from `from` to the log end, batch run by batch run.
    pub(super) fn read_all(log: &Log, from: i64) -> Vec<RecordBatchHeader> {
        let mut out = Vec::new();
        let mut next = from;
        while next < log.log_end_offset() {
            let bytes = log.read(next, usize::MAX, true).unwrap();
            let batch_headers = headers(&bytes);
            assert!(!batch_headers.is_empty(), "no data at offset {next}");
            next = batch_headers.last().unwrap().last_offset() + 1;
            out.extend(batch_headers);
        }
        out
    }

    #[test]
    fn idle_logs_hold_no_open_files_and_busy_ones_share_a_bounded_cache() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::os(3);
        let mut logs: Vec<Log> = (0..20)
            .map(|i| {
                Log::open_in(
                    &env,
                    &dir.path().join(format!("t-{i}")),
                    small_config(),
                    true,
                )
                .unwrap()
            })
            .collect();
        assert_eq!(env.cache.open_count(), 0);
        // A new partition is only a directory until data arrives.
        assert!(std::fs::read_dir(dir.path().join("t-0"))
            .unwrap()
            .next()
            .is_none());
        for (i, log) in logs.iter_mut().enumerate() {
            for _ in 0..12 {
                append_plain(log, 2, i as i64);
            }
            assert!(env.cache.open_count() <= 3);
        }
        for (i, log) in logs.iter().enumerate() {
            let got = read_all(log, 0);
            assert_eq!(got.len(), 12, "log {i}");
            assert!(env.cache.open_count() <= 3);
        }
        for log in logs {
            log.close().unwrap();
        }
        assert_eq!(env.cache.open_count(), 0);
    }

    #[test]
    fn log_append_time_and_keyless_records_on_compacted_topics() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(crate::file::ManualClock::new(777_000));
        let env = LogEnv::new(Arc::new(crate::file::OsFileSystem), 8, clock);
        let config = LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            cleanup_policy: crate::log_config::CleanupPolicy::COMPACT,
            ..LogConfig::default()
        };
        let mut log = Log::open_in(&env, dir.path(), config, true).unwrap();
        let batch = RecordBatchBuilder::new()
            .record(5, Some(b"k"), Some(b"v"))
            .build();
        let info = log.append(&batch, 0).unwrap();
        assert_eq!(info.log_append_time, 777_000);
        let stored = validate_batch(&log.read(0, usize::MAX, true).unwrap()).unwrap();
        assert_eq!(stored.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(stored.max_timestamp, 777_000);
        assert_eq!(log.max_timestamp().unwrap().0, 777_000);
        let keyless = RecordBatchBuilder::new()
            .record(5, None, Some(b"v"))
            .build();
        assert!(matches!(
            log.append(&keyless, 0),
            Err(AppendError::RecordErrors { errors, .. }) if errors[0].message.contains("without a key")
        ));
    }

    #[test]
    fn inactive_segment_indexes_are_read_only_when_needed() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        for i in 0..60 {
            append_plain(&mut log, 2, 1_000 + i);
        }
        let bases = log.segment_base_offsets();
        assert!(bases.len() > 4);
        let loaded = |log: &Log| -> Vec<bool> {
            log.segments.values().map(|s| s.indexes_loaded()).collect()
        };
        // A roll frees the entries of the segment it closes.
        assert!(loaded(&log)[..bases.len() - 1].iter().all(|l| !l));
        let max = log.max_timestamp().unwrap();
        log.close().unwrap();
        for clean in [true, false] {
            let log = Log::open(dir.path(), small_config(), clean).unwrap();
            // Only what open needed: the max-timestamp segment's index.
            let before = loaded(&log);
            assert!(before.iter().filter(|l| **l).count() <= 2, "{before:?}");
            assert_eq!(log.max_timestamp().unwrap(), max);
            // Reading from the middle loads that segment's index only.
            let target = bases[2] + 1;
            let got = headers(&log.read(target, 1, true).unwrap());
            assert!(got[0].base_offset <= target && target <= got[0].last_offset());
            assert!(log.segments[&bases[2]].indexes_loaded());
            assert_eq!(read_all(&log, 0).len(), 60);
        }
    }

    #[test]
    fn append_and_read_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
        let mut sizes = Vec::new();
        for (i, count) in [3usize, 1, 4].into_iter().enumerate() {
            let batch = build_batch_for_tests(12345, count, 100 * i as i64);
            sizes.push(batch.len());
            let original = batch.clone();
            let info = log.append(&batch, 7).unwrap();
            let expected_base = [0, 3, 4][i];
            assert_eq!(
                info,
                AppendInfo {
                    base_offset: expected_base,
                    last_offset: expected_base + count as i64 - 1,
                    log_append_time: -1,
                    duplicate: false,
                    record_count: count as i64,
                }
            );
            // The caller's buffer is left as it was; the log's copy carries
            // the assigned offset and epoch.
            assert_eq!(batch, original);
            let stored = log.read(expected_base, usize::MAX, true).unwrap();
            let stored = validate_batch(&stored).unwrap();
            assert_eq!(
                (stored.base_offset, stored.partition_leader_epoch),
                (expected_base, 7)
            );
        }
        assert_eq!(log.log_end_offset(), 8);

        let all = log.read(0, usize::MAX, false).unwrap();
        assert_eq!(all.len(), sizes.iter().sum::<usize>());
        let all_headers = headers(&all);
        assert_eq!(
            all_headers
                .iter()
                .map(|h| h.base_offset)
                .collect::<Vec<_>>(),
            vec![0, 3, 4]
        );
        assert!(all_headers.iter().all(|h| h.partition_leader_epoch == 7));

        // From the middle of a batch: that whole batch first.
        let middle = headers(&log.read(5, usize::MAX, false).unwrap());
        assert_eq!(middle.len(), 1);
        assert_eq!(middle[0].base_offset, 4);
        assert_eq!(
            headers(&log.read(1, usize::MAX, false).unwrap())[0].base_offset,
            0
        );

        // max_bytes counts whole batches only.
        let limited = log.read(0, sizes[0] + sizes[1] + 1, false).unwrap();
        assert_eq!(headers(&limited).len(), 2);
        assert!(log.read(0, sizes[0] - 1, false).unwrap().is_empty());
        assert_eq!(log.read(0, 1, true).unwrap().len(), sizes[0]);

        assert!(log.read(8, 1_000, true).unwrap().is_empty());
        assert!(matches!(
            log.read(9, 1_000, true),
            Err(StorageError::OffsetOutOfRange { offset: 9, .. })
        ));
        assert!(matches!(
            log.read(-1, 1_000, true),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
    }

    #[test]
    fn reads_stop_below_the_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        let mut sizes = Vec::new();
        // Batches [0, 3), [3, 4), [4, 8).
        for count in [3usize, 1, 4] {
            let batch = build_batch_for_tests(0, count, 0);
            sizes.push(batch.len());
            log.append(&batch, 0).unwrap();
        }
        let bases = |bytes: &[u8]| {
            headers(bytes)
                .iter()
                .map(|h| h.base_offset)
                .collect::<Vec<_>>()
        };
        let upto = |fetch: i64, max_bytes: usize, min_one: bool, max_offset: i64| {
            let bytes = log
                .read_upto(fetch, max_bytes, min_one, max_offset)
                .unwrap();
            let region = log
                .read_region_upto(fetch, max_bytes, min_one, max_offset)
                .unwrap();
            assert_eq!(
                region.as_ref().map_or(0, |r| r.len as usize),
                bytes.len(),
                "the region covers the same bytes"
            );
            if let Some(region) = region {
                assert_eq!(
                    region.records,
                    headers(&bytes)
                        .iter()
                        .map(|h| h.records_count as u64)
                        .sum::<u64>()
                );
            }
            bases(&bytes)
        };
        assert_eq!(upto(0, usize::MAX, false, 8), [0, 3, 4]);
        assert_eq!(upto(0, usize::MAX, false, 5), [0, 3, 4], "4 is below 5");
        assert_eq!(upto(0, usize::MAX, false, 4), [0, 3]);
        assert_eq!(upto(0, usize::MAX, false, 3), [0]);
        assert_eq!(upto(1, usize::MAX, false, 3), [0], "the batch holding 1");
        assert_eq!(upto(0, usize::MAX, false, 1), [0]);
        assert!(upto(3, usize::MAX, true, 3).is_empty(), "at the bound");
        assert!(upto(5, usize::MAX, true, 3).is_empty(), "past the bound");
        assert!(upto(0, usize::MAX, true, 0).is_empty());
        // max_bytes and min_one_batch still apply, below the bound only.
        assert_eq!(upto(0, sizes[0] + sizes[1], false, 8), [0, 3]);
        assert_eq!(upto(0, 1, true, 8), [0]);
        assert!(upto(0, 1, false, 8).is_empty());
        assert!(upto(4, 1, true, 4).is_empty());
        // The range check is the plain read's.
        assert!(matches!(
            log.read_upto(9, 100, true, 3),
            Err(StorageError::OffsetOutOfRange { offset: 9, .. })
        ));
        assert!(log.read_upto(8, 100, true, 20).unwrap().is_empty());
        assert_eq!(
            log.read(0, usize::MAX, false).unwrap(),
            log.read_upto(0, usize::MAX, false, i64::MAX).unwrap()
        );
    }

    #[test]
    fn a_bounded_read_touches_no_segment_at_or_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        for i in 0..60 {
            append_plain(&mut log, 2, 1_000 + i);
        }
        let bases = log.segment_base_offsets();
        assert!(bases.len() > 4);
        log.close().unwrap();
        let log = Log::open(dir.path(), small_config(), true).unwrap();
        let loaded = |log: &Log| -> Vec<bool> {
            log.segments.values().map(|s| s.indexes_loaded()).collect()
        };
        let before = loaded(&log);
        // From the last batch of segment 1, bounded at segment 2's base:
        // one batch, and segment 2 (which would answer an empty read of
        // segment 1's tail) is never opened.
        let got = headers(
            &log.read_upto(bases[2] - 2, usize::MAX, true, bases[2])
                .unwrap(),
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].base_offset, bases[2] - 2);
        assert!(log
            .read_upto(bases[2], usize::MAX, true, bases[2])
            .unwrap()
            .is_empty());
        let after = loaded(&log);
        for (i, base) in bases.iter().enumerate() {
            if *base != bases[1] {
                assert_eq!(after[i], before[i], "segment {base}");
            }
        }
    }

    #[test]
    fn multiple_batches_in_one_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        append_plain(&mut log, 2, 0);
        let records = [
            build_batch_for_tests(0, 3, 10),
            build_batch_for_tests(0, 2, 20),
        ]
        .concat();
        let info = log.append(&records, 1).unwrap();
        assert_eq!(
            (info.base_offset, info.last_offset, info.record_count),
            (2, 6, 5)
        );
        let read = headers(&log.read(2, usize::MAX, false).unwrap());
        assert_eq!(
            read.iter().map(|h| h.base_offset).collect::<Vec<_>>(),
            vec![2, 5]
        );
    }

    /// The hardening issue's request: two one-record batches whose last
    /// offset delta claims 2^30 offsets each (CRCs valid) once tripped the
    /// segment's relative-offset assertion; the validator refuses them.
    #[test]
    fn batches_whose_offset_range_disagrees_with_their_count_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        let mut batch = build_batch_for_tests(0, 1, 10);
        batch[23..27].copy_from_slice(&(1i32 << 30).to_be_bytes());
        let crc = tarn_protocol::record_batch::compute_crc(&batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        let records = [batch.clone(), batch].concat();
        let e = log.append(&records, 0).unwrap_err();
        assert!(
            matches!(&e, AppendError::InvalidRecord(m) if m.contains("last offset delta")),
            "{e}"
        );
        assert_eq!(log.log_end_offset(), 0);
        assert_eq!(append_plain(&mut log, 2, 0).base_offset, 0);
    }

    #[test]
    fn a_wrong_max_timestamp_is_corrected_from_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        let mut batch = build_batch_for_tests(0, 3, 1_000);
        batch[35..43].copy_from_slice(&99_999i64.to_be_bytes());
        let crc = tarn_protocol::record_batch::compute_crc(&batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        log.append(&batch, 0).unwrap();
        let stored = validate_batch(&log.read(0, usize::MAX, true).unwrap()).unwrap();
        assert_eq!(stored.max_timestamp, 1_002);
        assert_eq!(log.max_timestamp().unwrap().0, 1_002);
    }

    #[test]
    fn rolls_segments_and_reads_across_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        for i in 0..40 {
            append_plain(&mut log, 2, i);
        }
        assert_eq!(log.log_end_offset(), 80);
        let bases = log.segment_base_offsets();
        assert!(bases.len() > 3, "expected several segments, got {bases:?}");
        for base in &bases {
            assert!(file_len(dir.path(), &segment_file_name(*base, "log")) <= 1_000);
            if base == bases.last().unwrap() {
                // The active segment's index entries are written lazily.
                continue;
            }
            assert!(dir.path().join(segment_file_name(*base, "index")).exists());
            assert!(dir
                .path()
                .join(segment_file_name(*base, "timeindex"))
                .exists());
        }
        // A read stops at the end of its segment.
        let first = headers(&log.read(0, usize::MAX, false).unwrap());
        assert_eq!(first.last().unwrap().last_offset() + 1, bases[1]);
        for offset in 0..80 {
            let h = headers(&log.read(offset, 1, true).unwrap());
            assert_eq!(h[0].base_offset, offset / 2 * 2, "offset {offset}");
        }
        let all: Vec<i64> = read_all(&log, 0).iter().map(|h| h.base_offset).collect();
        assert_eq!(all, (0..40).map(|i| i * 2).collect::<Vec<_>>());

        log.close().unwrap();
        let log = Log::open(dir.path(), small_config(), true).unwrap();
        assert_eq!(log.segment_base_offsets(), bases);
        assert_eq!(log.log_end_offset(), 80);
        assert_eq!(read_all(&log, 0).len(), 40);
    }

    #[test]
    fn a_corrupted_byte_in_a_closed_segment_is_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        for i in 0..40 {
            append_plain(&mut log, 2, i);
        }
        let bases = log.segment_base_offsets();
        log.close().unwrap();
        // Flip a byte inside the third batch of the first (closed) segment.
        let path = dir.path().join(segment_file_name(bases[0], "log"));
        let mut bytes = std::fs::read(&path).unwrap();
        let batch_size = validate_batch(&bytes).unwrap().total_size();
        bytes[2 * batch_size + 70] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();

        // A clean open does not recover closed segments; the first read
        // that reaches the bytes checks them, inline here.
        let log = Log::open(dir.path(), small_config(), true).unwrap();
        let served = headers(&log.read(0, usize::MAX, false).unwrap());
        assert_eq!(
            served.iter().map(|h| h.base_offset).collect::<Vec<_>>(),
            vec![0, 2],
            "only the batches before the corrupt one"
        );
        for offset in [4, 5] {
            let err = log.read(offset, usize::MAX, true).unwrap_err();
            assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
        }
        // Later segments are unaffected.
        assert_eq!(
            headers(&log.read(bases[1], 1, true).unwrap())[0].base_offset,
            bases[1]
        );

        // The same through a verifier run apart from the log (as the broker
        // does, without the partition's lock): it is offered once, for
        // reads that start among the bytes not yet checked, and the read
        // then finds its answer.
        let log = Log::open(dir.path(), small_config(), true).unwrap();
        assert!(
            log.verification_for(log.log_end_offset())
                .unwrap()
                .is_none(),
            "nothing to read"
        );
        let verifier = log
            .verification_for(0)
            .unwrap()
            .expect("first read of a closed segment");
        let again = log.verification_for(2).unwrap().expect("not checked yet");
        verifier.run().unwrap();
        again.run().unwrap();
        assert!(log.verification_for(0).unwrap().is_none(), "checked once");
        let served = headers(&log.read(0, usize::MAX, false).unwrap());
        assert_eq!(
            served.iter().map(|h| h.base_offset).collect::<Vec<_>>(),
            vec![0, 2]
        );
        assert!(matches!(
            log.read(4, usize::MAX, true).unwrap_err(),
            StorageError::Corrupt { .. }
        ));
        assert!(
            log.verification_for(bases[1]).unwrap().is_some(),
            "each segment on its own"
        );
    }

    #[test]
    fn reopen_clean_and_unclean_continue_at_the_log_end() {
        for clean in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), small_config(), true).unwrap();
            for i in 0..15 {
                append_plain(&mut log, 3, i);
            }
            let before = read_all(&log, 0);
            if clean {
                log.close().unwrap();
            } else {
                drop(log); // kill -9: the page cache keeps what was written
            }
            let mut log = Log::open(dir.path(), small_config(), clean).unwrap();
            assert_eq!(log.log_end_offset(), 45, "clean={clean}");
            assert_eq!(read_all(&log, 0), before, "clean={clean}");
            assert_eq!(append_plain(&mut log, 1, 99).base_offset, 45);
            assert_eq!(log.log_end_offset(), 46);
        }
    }

    pub(super) fn active_log_name(log: &Log) -> String {
        segment_file_name(*log.segment_base_offsets().last().unwrap(), "log")
    }

    #[test]
    fn torn_tail_is_truncated_on_unclean_open() {
        for tail in [
            build_batch_for_tests(0, 3, 0)[..70].to_vec(),
            vec![0xAB; 5],
            vec![0; 200],
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), small_config(), true).unwrap();
            for i in 0..12 {
                append_plain(&mut log, 2, i);
            }
            let before = read_all(&log, 0);
            let name = active_log_name(&log);
            let good_len = file_len(dir.path(), &name);
            drop(log);
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.path().join(&name))
                .unwrap();
            std::io::Write::write_all(&mut file, &tail).unwrap();
            drop(file);

            let mut log = Log::open(dir.path(), small_config(), false).unwrap();
            assert_eq!(
                file_len(dir.path(), &name),
                good_len,
                "tail of {} bytes",
                tail.len()
            );
            assert_eq!(log.log_end_offset(), 24);
            assert_eq!(read_all(&log, 0), before);
            assert_eq!(append_plain(&mut log, 2, 50).base_offset, 24);
            assert_eq!(read_all(&log, 0).len(), 13);
        }
    }

    #[test]
    fn corrupt_crc_in_active_tail_is_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        let mut ends = Vec::new();
        for i in 0..5 {
            append_plain(&mut log, 2, i);
            ends.push(file_len(dir.path(), &active_log_name(&log)));
        }
        let name = active_log_name(&log);
        log.close().unwrap();
        let path = dir.path().join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        // Flip a record byte inside the fourth batch.
        bytes[ends[2] as usize + 70] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();

        let mut log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!(file_len(dir.path(), &name), ends[2]);
        assert_eq!(log.log_end_offset(), 6);
        assert_eq!(read_all(&log, 0).len(), 3);
        assert_eq!(append_plain(&mut log, 1, 0).base_offset, 6);
    }

    #[test]
    fn index_lookups_with_a_small_interval_survive_reopen_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 4_000,
            index_interval_bytes: 150,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config.clone(), true).unwrap();
        for i in 0..60 {
            append_plain(&mut log, (i % 3 + 1) as usize, i);
        }
        let expected = read_all(&log, 0);
        log.close().unwrap();
        let bases = {
            let log = Log::open(dir.path(), config.clone(), true).unwrap();
            let bases = log.segment_base_offsets();
            assert!(bases.len() >= 2);
            for base in &bases {
                let len = file_len(dir.path(), &segment_file_name(*base, "index"));
                assert!(
                    len > 0 && len.is_multiple_of(8),
                    "index of {base} has {len} bytes"
                );
            }
            bases
        };
        // Damage the first segment's index: it must be rebuilt, not trusted.
        let index_path = dir.path().join(segment_file_name(bases[0], "index"));
        std::fs::write(&index_path, [0xFF; 13]).unwrap();
        let log = Log::open(dir.path(), config, true).unwrap();
        assert_eq!(
            file_len(dir.path(), &segment_file_name(bases[0], "index")) % 8,
            0
        );
        for h in &expected {
            for offset in h.base_offset..=h.last_offset() {
                let got = headers(&log.read(offset, 1, true).unwrap());
                assert_eq!(got[0], *h, "offset {offset}");
            }
        }
    }

    #[test]
    fn offset_for_timestamp_finds_the_first_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
        // Batch i holds records with timestamps 1000*i, 1000*i+1, 1000*i+2.
        for i in 0..20 {
            let batch = build_batch_for_tests(0, 3, 1_000 * i);
            log.append(&batch, (i / 5) as i32).unwrap();
        }
        assert!(log.segment_base_offsets().len() > 1);
        assert_eq!(log.offset_for_timestamp(-5).unwrap(), Some((0, 0, 0)));
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 0, 0)));
        assert_eq!(log.offset_for_timestamp(1).unwrap(), Some((1, 1, 0)));
        assert_eq!(
            log.offset_for_timestamp(7_002).unwrap(),
            Some((23, 7_002, 1))
        );
        assert_eq!(
            log.offset_for_timestamp(7_003).unwrap(),
            Some((24, 8_000, 1))
        );
        assert_eq!(
            log.offset_for_timestamp(19_002).unwrap(),
            Some((59, 19_002, 3))
        );
        assert_eq!(log.offset_for_timestamp(19_003).unwrap(), None);
        log.close().unwrap();
        let log = Log::open(dir.path(), small_config(), false).unwrap();
        assert_eq!(
            log.offset_for_timestamp(13_001).unwrap(),
            Some((40, 13_001, 2))
        );
    }

    /// A record below the log start is not an answer, even where the
    /// log start falls inside its batch; the search goes on past it.
    #[test]
    fn offset_for_timestamp_answers_nothing_below_the_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        // Batch i holds records with timestamps 1000*i, 1000*i+1, 1000*i+2.
        for i in 0..20 {
            let batch = build_batch_for_tests(0, 3, 1_000 * i);
            log.append(&batch, 0).unwrap();
        }
        assert!(log.segment_base_offsets().len() > 1);
        // Inside batch 10 (offsets 30-32).
        log.delete_records_before(31).unwrap();
        assert_eq!(log.offset_for_timestamp(-5).unwrap(), Some((31, 10_001, 0)));
        assert_eq!(
            log.offset_for_timestamp(500).unwrap(),
            Some((31, 10_001, 0))
        );
        assert_eq!(
            log.offset_for_timestamp(10_001).unwrap(),
            Some((31, 10_001, 0))
        );
        assert_eq!(
            log.offset_for_timestamp(10_002).unwrap(),
            Some((32, 10_002, 0))
        );
        assert_eq!(
            log.offset_for_timestamp(10_003).unwrap(),
            Some((33, 11_000, 0))
        );
        // Everything from the log start on is older than this.
        log.delete_records_before(60).unwrap();
        assert_eq!(log.offset_for_timestamp(19_000).unwrap(), None);
        log.close().unwrap();
    }

    #[test]
    fn max_timestamp_is_tracked_and_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), (-1, -1, -1));
        for (i, ts) in [500i64, 900, 300, 900, 100].into_iter().enumerate() {
            let batch = RecordBatchBuilder::new()
                .record(ts - 50, None, Some(b"a"))
                .record(ts, None, Some(b"b"))
                .record(ts - 10, None, Some(b"c"))
                .build();
            log.append(&batch, i as i32).unwrap();
        }
        // First batch reaching 900 is the second (offsets 3..=5); its max record is offset 4.
        assert_eq!(log.max_timestamp().unwrap(), (900, 4, 1));
        for _ in 0..20 {
            append_plain(&mut log, 2, 0);
        }
        assert!(log.segment_base_offsets().len() > 1);
        drop(log);
        let log = Log::open(dir.path(), small_config(), false).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), (900, 4, 1));
        log.close().unwrap();
        let log = Log::open(dir.path(), small_config(), true).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), (900, 4, 1));
    }

    #[test]
    fn leader_epochs_are_checkpointed_and_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        assert_eq!(log.latest_epoch(), None);
        assert_eq!(log.end_offset_for_epoch(0), (-1, -1));
        for epoch in [1, 1, 3, 3, 3, 6] {
            let batch = build_batch_for_tests(0, 2, 0);
            log.append(&batch, epoch).unwrap();
        }
        assert_eq!(log.latest_epoch(), Some(6));
        assert_eq!(log.end_offset_for_epoch(1), (1, 4));
        assert_eq!(log.end_offset_for_epoch(2), (1, 4));
        assert_eq!(log.end_offset_for_epoch(3), (3, 10));
        assert_eq!(log.end_offset_for_epoch(6), (6, 12));
        assert_eq!(log.end_offset_for_epoch(7), (-1, -1));
        assert_eq!(log.end_offset_for_epoch(0), (0, 0));
        let checkpoint = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE);
        assert_eq!(
            std::fs::read_to_string(&checkpoint).unwrap(),
            "0\n3\n1 0\n3 4\n6 10\n"
        );
        log.close().unwrap();

        let log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        assert_eq!(log.end_offset_for_epoch(3), (3, 10));
        drop(log);
        // Without the checkpoint, unclean recovery of the active segment
        // rebuilds it from the batches' leader epochs.
        std::fs::remove_file(&checkpoint).unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!(log.latest_epoch(), Some(6));
        assert_eq!(log.end_offset_for_epoch(1), (1, 4));
        assert_eq!(log.end_offset_for_epoch(3), (3, 10));
    }

    #[test]
    fn epochs_past_a_truncated_tail_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        let batch = build_batch_for_tests(0, 2, 0);
        log.append(&batch, 1).unwrap();
        let name = active_log_name(&log);
        let good_len = file_len(dir.path(), &name);
        let batch = build_batch_for_tests(0, 2, 0);
        log.append(&batch, 2).unwrap();
        drop(log);
        let path = dir.path().join(&name);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(good_len + 10)
            .unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!(log.log_end_offset(), 2);
        assert_eq!(log.latest_epoch(), Some(1));
    }

    #[test]
    fn idempotent_producer_sequences() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        append_plain(&mut log, 1, 0);
        let first = log.append(&idempotent(10, 0, 0, 3), 0).unwrap();
        assert_eq!(
            (first.base_offset, first.last_offset, first.duplicate),
            (1, 3, false)
        );
        let second = log.append(&idempotent(10, 0, 3, 2), 0).unwrap();
        assert_eq!((second.base_offset, second.last_offset), (4, 5));
        let size = file_len(dir.path(), &active_log_name(&log));

        let retry = log.append(&idempotent(10, 0, 0, 3), 0).unwrap();
        assert_eq!(
            retry,
            AppendInfo {
                base_offset: 1,
                last_offset: 3,
                // The original batch's max timestamp, as Kafka answers.
                log_append_time: 1002,
                duplicate: true,
                record_count: 3
            }
        );
        assert_eq!(log.log_end_offset(), 6);
        assert_eq!(file_len(dir.path(), &active_log_name(&log)), size);

        assert!(matches!(
            log.append(&idempotent(10, 0, 7, 1), 0),
            Err(AppendError::OutOfOrderSequence(_))
        ));
        assert!(matches!(
            log.append(&idempotent(10, 1, 5, 1), 0),
            Err(AppendError::OutOfOrderSequence(_))
        ));
        let bumped = log.append(&idempotent(10, 1, 0, 1), 0).unwrap();
        assert_eq!(bumped.base_offset, 6);
        assert!(matches!(
            log.append(&idempotent(10, 0, 5, 1), 0),
            Err(AppendError::InvalidProducerEpoch(_))
        ));
        assert_eq!(log.log_end_offset(), 7);
        assert_eq!(
            file_len(dir.path(), &active_log_name(&log)),
            size + idempotent(10, 1, 0, 1).len() as u64
        );

        // One batch per partition for idempotent producers.
        let two = [idempotent(12, 0, 0, 1), idempotent(12, 0, 1, 1)].concat();
        assert!(matches!(
            log.append(&two, 0),
            Err(AppendError::InvalidRecord(_))
        ));
        let no_seq = RecordBatchBuilder::new()
            .producer(13, 0, -1)
            .record(0, None, None)
            .build();
        assert!(matches!(
            log.append(&no_seq, 0),
            Err(AppendError::InvalidRecord(_))
        ));
        // A producer the log does not know may start at any sequence
        // (KIP-360), and goes on from there.
        assert_eq!(
            log.append(&idempotent(11, 0, 4, 1), 0).unwrap().base_offset,
            7
        );
        assert!(log.append(&idempotent(11, 0, 5, 1), 0).is_ok());
        assert!(matches!(
            log.append(&idempotent(11, 0, 9, 1), 0),
            Err(AppendError::OutOfOrderSequence(_))
        ));
    }

    #[test]
    fn producer_state_survives_clean_and_unclean_reopen() {
        // 0: clean close (snapshot), 1: no close at all (full replay),
        // 2: snapshot, more appends, then crash (snapshot + replay).
        for scenario in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), small_config(), true).unwrap();
            let mut seq = 0;
            for i in 0..10 {
                append_plain(&mut log, 2, i);
                log.append(&idempotent(5, 2, seq, 2), 0).unwrap();
                seq += 2;
            }
            if scenario == 2 {
                log.close().unwrap();
                log = Log::open(dir.path(), small_config(), true).unwrap();
                log.append(&idempotent(5, 2, seq, 2), 0).unwrap();
                seq += 2;
            }
            let last = log
                .producer_state()
                .entry(5)
                .unwrap()
                .batches
                .back()
                .copied()
                .unwrap();
            let clean = scenario == 0;
            if clean {
                log.close().unwrap();
                assert!(dir
                    .path()
                    .join(format!("{:020}.snapshot", last.last_offset + 1))
                    .exists());
            } else {
                drop(log);
            }
            let mut log = Log::open(dir.path(), small_config(), clean).unwrap();
            assert_eq!(
                log.producer_state().entry(5).unwrap().batches.back(),
                Some(&last),
                "scenario {scenario}"
            );
            let retry = log.append(&idempotent(5, 2, seq - 2, 2), 0).unwrap();
            assert!(retry.duplicate, "scenario {scenario}");
            assert_eq!(
                (retry.base_offset, retry.last_offset),
                (last.base_offset, last.last_offset)
            );
            assert!(matches!(
                log.append(&idempotent(5, 2, seq + 1, 1), 0),
                Err(AppendError::OutOfOrderSequence(_))
            ));
            assert!(matches!(
                log.append(&idempotent(5, 1, 0, 1), 0),
                Err(AppendError::InvalidProducerEpoch(_))
            ));
            assert!(!log.append(&idempotent(5, 2, seq, 1), 0).unwrap().duplicate);
        }
    }

    #[test]
    fn idle_producer_ids_expire_and_stay_out_of_snapshots() {
        const EXPIRATION_MS: i64 = 100_000;
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(crate::file::ManualClock::new(1_000_000));
        let env = LogEnv::new(Arc::new(crate::file::OsFileSystem), 8, clock.clone());
        let at = |pid: i64, seq: i32, timestamp: i64| {
            RecordBatchBuilder::new()
                .producer(pid, 0, seq)
                .record(timestamp, None, Some(b"x"))
                .build()
        };
        let mut log = Log::open_in(&env, dir.path(), LogConfig::default(), true).unwrap();
        log.append(&at(1, 0, 1_000_000), 0).unwrap();
        log.append(&at(2, 0, 1_000_000), 0).unwrap();
        clock.set(1_050_000);
        log.append(&at(2, 1, 1_050_000), 0).unwrap();
        clock.set(1_099_999);
        assert_eq!(log.remove_expired_producers(EXPIRATION_MS), 0);
        clock.set(1_100_000);
        assert_eq!(log.remove_expired_producers(EXPIRATION_MS), 1);
        assert!(log.producer_state().entry(1).is_none(), "idle for 100 s");
        assert!(log.producer_state().entry(2).is_some(), "wrote 50 s ago");
        log.close().unwrap();
        let log = Log::open_in(&env, dir.path(), LogConfig::default(), true).unwrap();
        assert_eq!(log.producer_state().producer_count(), 1, "the snapshot");
    }

    #[test]
    fn a_clean_restart_rebuilds_no_index_of_a_segment_without_entries() {
        // One batch per partition, small or larger than index.interval.bytes
        // (no entry either way: the first batch of a segment never gets
        // one), and a few batches for comparison.
        let value = vec![b'v'; 6_000];
        let cases: Vec<Vec<Vec<u8>>> = vec![
            vec![build_batch_for_tests(0, 1, 1_000)],
            vec![RecordBatchBuilder::new()
                .record(1_000, None, Some(&value))
                .build()],
            (0..3)
                .map(|i| {
                    RecordBatchBuilder::new()
                        .record(1_000 + i, None, Some(&value))
                        .build()
                })
                .collect(),
        ];
        for (case, batches) in cases.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
            for batch in batches {
                log.append(batch, 0).unwrap();
            }
            let expected = read_all(&log, 0);
            log.close().unwrap();
            let log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
            assert!(
                log.active_segment().awaits_verification(),
                "case {case}: the segment was rebuilt"
            );
            assert_eq!(read_all(&log, 0), expected, "case {case}");
            for h in &expected {
                let got = headers(&log.read(h.base_offset, 1, true).unwrap());
                assert_eq!(got[0], *h, "case {case}: lookup of {}", h.base_offset);
            }
        }
    }

    #[test]
    fn rolled_segments_of_one_large_batch_open_without_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 10_000,
            ..LogConfig::default()
        };
        let value = vec![b'v'; 6_000];
        let mut log = Log::open(dir.path(), config.clone(), true).unwrap();
        for i in 0..4 {
            let batch = RecordBatchBuilder::new()
                .record(1_000 + i, None, Some(&value))
                .build();
            log.append(&batch, 0).unwrap();
        }
        assert_eq!(log.segment_base_offsets(), [0, 1, 2, 3]);
        let expected = read_all(&log, 0);
        log.close().unwrap();
        let log = Log::open(dir.path(), config, true).unwrap();
        for segment in log.segments.values() {
            assert!(
                segment.awaits_verification(),
                "segment {} was rebuilt",
                segment.base_offset()
            );
        }
        assert_eq!(read_all(&log, 0), expected);
    }

    #[test]
    fn append_may_fsync_predicts_rolls_and_new_epochs() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        let batch = build_batch_for_tests(0, 2, 0);
        assert!(
            log.append_may_fsync(&batch, 0),
            "the first epoch is checkpointed"
        );
        log.append(&batch, 0).unwrap();
        assert!(!log.append_may_fsync(&batch, 0));
        assert!(log.append_may_fsync(&batch, 1), "a new epoch");
        assert!(!log.append_may_fsync(b"not a batch", 0));
        // Fill the segment up to the next roll, checking each prediction.
        for _ in 0..40 {
            let before = log.segment_base_offsets().len();
            let predicted = log.append_may_fsync(&batch, 0);
            log.append(&batch, 0).unwrap();
            let rolled = log.segment_base_offsets().len() > before;
            assert_eq!(predicted, rolled, "at offset {}", log.log_end_offset());
        }
        assert!(log.segment_base_offsets().len() > 2);
    }

    #[test]
    fn stale_snapshot_past_the_log_end_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        log.append(&idempotent(5, 0, 0, 2), 0).unwrap();
        let name = active_log_name(&log);
        let good_len = file_len(dir.path(), &name);
        log.append(&idempotent(5, 0, 2, 2), 0).unwrap();
        log.close().unwrap();
        // The second batch is lost (torn), but the snapshot at 4 remembers it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(&name))
            .unwrap()
            .set_len(good_len + 3)
            .unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!(log.log_end_offset(), 2);
        assert!(!dir.path().join(format!("{:020}.snapshot", 4)).exists());
        let again = log.append(&idempotent(5, 0, 2, 2), 0).unwrap();
        assert!(!again.duplicate);
        assert_eq!(again.base_offset, 2);
    }

    #[test]
    fn bad_produce_input_appends_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            max_message_bytes: 200,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, true).unwrap();
        append_plain(&mut log, 1, 0);
        let name = active_log_name(&log);
        let size = file_len(dir.path(), &name);

        let big = build_batch_for_tests(0, 30, 0);
        assert!(big.len() > 200);
        assert!(matches!(
            log.append(&big, 0),
            Err(AppendError::MessageTooLarge(_))
        ));

        let good = build_batch_for_tests(0, 2, 0);
        let trailing = [good.clone(), good[..20].to_vec()].concat();
        assert!(matches!(
            log.append(&trailing, 0),
            Err(AppendError::CorruptMessage(_))
        ));

        let mut bad_crc = [good.clone(), good.clone()].concat();
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        assert!(matches!(
            log.append(&bad_crc, 0),
            Err(AppendError::CorruptMessage(_))
        ));

        let mut old_magic = good.clone();
        old_magic[16] = 1;
        assert!(matches!(
            log.append(&old_magic, 0),
            Err(AppendError::UnsupportedMagic)
        ));

        let mut short_length = good.clone();
        short_length[8..12].copy_from_slice(&10i32.to_be_bytes());
        assert!(matches!(
            log.append(&short_length, 0),
            Err(AppendError::CorruptMessage(_))
        ));

        assert!(matches!(
            log.append(&[], 0),
            Err(AppendError::InvalidRecord(_))
        ));
        let empty_batch = RecordBatchBuilder::new().build();
        assert!(matches!(
            log.append(&empty_batch, 0),
            Err(AppendError::InvalidRecord(_))
        ));

        assert_eq!(log.log_end_offset(), 1);
        assert_eq!(file_len(dir.path(), &name), size);
        assert_eq!(log.latest_epoch(), Some(0));
    }

    #[test]
    fn invalid_config_is_refused_and_delete_removes_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 1 << 32,
            ..LogConfig::default()
        };
        assert!(matches!(
            Log::open(&dir.path().join("t-0"), config, true),
            Err(StorageError::InvalidConfig(_))
        ));
        let partition = dir.path().join("t-0");
        let mut log = Log::open(&partition, LogConfig::default(), true).unwrap();
        append_plain(&mut log, 1, 0);
        log.flush().unwrap();
        assert!(partition.join("00000000000000000000.log").exists());
        log.delete().unwrap();
        assert!(!partition.exists());
    }
}
