//! What a follower replica's log needs beyond a leader's, after Kafka's
//! `UnifiedLog.appendAsFollower`, `truncateTo` and
//! `truncateFullyAndStartAt`: appending the batches a leader sent exactly
//! as they are, and cutting the log back to the leader's after a leader
//! change (or starting over when the leader no longer has what the
//! follower would fetch next).
//!
//! Invariants, on top of [`Log`]'s: a follower append is whole or nothing,
//! like a produce, and keeps every byte the leader sent (offsets, partition
//! leader epochs, producer ids and sequences, timestamps), so the
//! follower's segments hold the leader's batches unchanged. Offsets only
//! move forward, but may skip (compaction on the leader leaves gaps). A
//! truncation leaves the log as if the removed batches had never been
//! appended: segment files and indexes, the leader-epoch checkpoint,
//! producer state and its snapshots, the max timestamp, the cleaner
//! checkpoint and the durable offset all end at the new log end, and the
//! truncated files are fsynced before it returns, so a crash cannot bring
//! removed batches back. A truncation that fails part-way takes the log
//! offline, as a failed fsync does: only a restart's recovery may trust
//! its files then. Truncations fsync inline; run them off async workers.

use std::collections::BTreeMap;
use std::io::IoSlice;

use tarn_protocol::record_batch::RecordBatchHeader;
use tracing::{error, info};

use super::{AppendInfo, Log, MaxTimestamp, NO_MAX_TIMESTAMP};
use crate::error::{AppendError, StorageError};
use crate::producer_state::{parse_snapshot_name, ProducerStateManager};
use crate::segment::{LogSegment, DELETED_SUFFIX, MAX_RELATIVE_OFFSET};

impl Log {
    /// Kafka's `appendAsFollower`: appends batches fetched from the leader
    /// as they are, bytes unchanged. Each batch's header and CRC are
    /// checked; the record-level checks, `max.message.bytes` and producer
    /// sequences are not (the leader did that). The first batch must start
    /// at or past the log end ([`AppendError::UnexpectedAppendOffset`]) and
    /// each batch after the one before it ([`AppendError::OffsetsOutOfOrder`]);
    /// a gap is accepted, since compaction on the leader leaves them. Each
    /// batch's partition leader epoch newer than the latest known starts
    /// that epoch at the batch's base offset; producer state, the max
    /// timestamp, the indexes and the unflushed count are kept as
    /// [`Log::append`] keeps them, so [`Log::flush_due`] and
    /// [`Log::prepare_flush`] work the same. A roll does its disk work
    /// (an fsync, or a marker) inline. On any
    /// error nothing is appended.
    ///
    /// An empty `records` (a fetch that brought nothing) is a no-op that
    /// answers `base_offset` = the log end, `last_offset` = the log end - 1
    /// and `record_count` = 0. `log_append_time` is always -1: the leader
    /// stamped whatever it stamped, and nothing is stamped here.
    pub fn append_as_follower(&mut self, records: &[u8]) -> Result<AppendInfo, AppendError> {
        if records.is_empty() {
            return Ok(AppendInfo {
                base_offset: self.log_end_offset,
                last_offset: self.log_end_offset - 1,
                log_append_time: -1,
                duplicate: false,
                record_count: 0,
            });
        }
        self.durability.check(&self.dir)?;
        let batches = self.split_batches(records, None)?;
        let (first_offset, last_offset) = self.check_leader_offsets(&batches)?;
        let max_timestamp = batches
            .iter()
            .map(|(_, h)| h.max_timestamp)
            .max()
            .unwrap_or(-1);
        self.maybe_roll(
            records.len() as u64,
            first_offset,
            last_offset,
            max_timestamp,
        )?;
        // As in `append`, the epoch checkpoint goes first; here the epochs
        // may start past the unchanged log end, so a failed write takes
        // them back out.
        if let Err(e) = self.write_leader_batches(records, &batches) {
            if let Err(undo) = self
                .leader_epoch_cache
                .truncate_from_end(self.log_end_offset)
            {
                error!(dir = %self.dir.display(), error = %undo, "undo the leader epochs of a failed follower append");
            }
            return Err(e.into());
        }
        for (_, header) in &batches {
            self.producer_state.update(header);
            if header.max_timestamp > self.max_timestamp.timestamp {
                self.max_timestamp = MaxTimestamp {
                    timestamp: header.max_timestamp,
                    offset: header.base_offset,
                    epoch: header.partition_leader_epoch,
                };
            }
        }
        self.log_end_offset = last_offset + 1;
        let record_count = batches
            .iter()
            .map(|(_, h)| i64::from(h.records_count))
            .sum();
        self.unflushed_messages = self.unflushed_messages.saturating_add(record_count);
        Ok(AppendInfo {
            base_offset: first_offset,
            last_offset,
            log_append_time: -1,
            duplicate: false,
            record_count,
        })
    }

    /// Kafka's checks of offsets a leader assigned: the first batch may not
    /// start below the log end, each later one must start after the one
    /// before ends, and the whole append must fit the relative offsets of
    /// one segment (with room for a next offset). Returns the first and
    /// last offset.
    fn check_leader_offsets(
        &self,
        batches: &[(usize, RecordBatchHeader)],
    ) -> Result<(i64, i64), AppendError> {
        let (Some((_, first)), Some((_, last))) = (batches.first(), batches.last()) else {
            unreachable!("records that are not empty hold at least one batch");
        };
        let (first_offset, last_offset) = (first.base_offset, last.last_offset());
        if first_offset < self.log_end_offset {
            return Err(AppendError::UnexpectedAppendOffset {
                first_offset,
                last_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        for pair in batches.windows(2) {
            let ((_, before), (position, after)) = (&pair[0], &pair[1]);
            if after.base_offset <= before.last_offset() {
                return Err(AppendError::OffsetsOutOfOrder(format!(
                    "the batch at byte {position} starts at offset {} but the one before it ends at {}",
                    after.base_offset,
                    before.last_offset()
                )));
            }
        }
        if last_offset - first_offset > MAX_RELATIVE_OFFSET || last_offset == i64::MAX {
            return Err(AppendError::InvalidRecord(format!(
                "offsets {first_offset}..={last_offset} do not fit one segment \
                 (at most {MAX_RELATIVE_OFFSET} past its base, below i64::MAX); \
                 append these batches in smaller groups"
            )));
        }
        Ok((first_offset, last_offset))
    }

    /// Starts each batch's leader epoch, when newer than the latest, at the
    /// batch's base offset (Kafka's `maybeAssignEpochStartOffset`), then
    /// writes `records` to the active segment with one write call.
    fn write_leader_batches(
        &mut self,
        records: &[u8],
        batches: &[(usize, RecordBatchHeader)],
    ) -> Result<(), StorageError> {
        for (_, header) in batches {
            if self.epoch_checkpoint_due(header.partition_leader_epoch) {
                self.leader_epoch_cache
                    .assign(header.partition_leader_epoch, header.base_offset)?;
            }
        }
        let created = !self.active_segment().exists();
        self.active_segment_mut()
            .append(&[IoSlice::new(records)], batches)?;
        if created {
            self.durability.note_dir_change();
        }
        Ok(())
    }

    /// Kafka's `truncateTo`: removes every record at or after `offset`, as
    /// a follower does to match its leader's log after a leader change.
    /// Segments based past `offset` are deleted, the one holding it is cut
    /// at the batch boundary there (log file and both indexes) and fsynced,
    /// the leader epochs starting at or past the new end are dropped,
    /// producer snapshots past it are deleted and producer state is rebuilt
    /// (the newest snapshot at or below the end, then a replay of batch
    /// headers), and the max timestamp, cleaner checkpoint and durable
    /// offset are lowered to match.
    ///
    /// `offset` should be a batch boundary, as a leader's offsets are; if
    /// it falls inside a batch, that whole batch goes. The new log end is
    /// the end of the last batch kept: `offset`, unless a batch was cut
    /// that way or compaction left a gap just below `offset`. It is never
    /// below the log start offset, which is lowered to the new end when the
    /// cut batch began below it. At or past the log end nothing is removed,
    /// but, as in Kafka, leader epochs starting at the end (an elected
    /// leader's, which appended nothing) are dropped. Below the log start
    /// offset this is [`Log::truncate_fully_and_start_at`].
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        self.durability.check(&self.dir)?;
        if offset >= self.log_end_offset {
            return self
                .leader_epoch_cache
                .truncate_from_end(self.log_end_offset);
        }
        if offset < self.log_start_offset {
            return self.truncate_fully_and_start_at(offset);
        }
        let old_end = self.log_end_offset;
        let result = self.truncate_segments_to(offset);
        match &result {
            Ok(()) => {
                info!(dir = %self.dir.display(), offset, old_end, log_end_offset = self.log_end_offset, "truncated log");
            }
            Err(e) => self.durability.fail_because(
                &self.dir,
                &format!("truncate the log to offset {offset}"),
                e,
            ),
        }
        result
    }

    fn truncate_segments_to(&mut self, offset: i64) -> Result<(), StorageError> {
        // Newest first, so a crash part-way leaves a shorter log, never one
        // with a hole. The segment holding `offset` stays (the first one is
        // based at or below the log start offset, so there is one).
        let doomed: Vec<i64> = self
            .segments
            .range(offset + 1..)
            .rev()
            .map(|(base, _)| *base)
            .collect();
        for base in doomed {
            let mut segment = self.segments.remove(&base).expect("listed above");
            segment.delete_files()?;
            self.durability.note_dir_change();
        }
        let now_ms = self.env.now_ms();
        let active = self.active_segment_mut();
        active.truncate_to(offset, now_ms)?;
        self.log_end_offset = active.next_offset();
        self.sync_truncation(now_ms)?;
        if self.log_start_offset > self.log_end_offset {
            self.log_start_offset = self.log_end_offset;
            self.persist_log_start_offset()?;
        }
        self.leader_epoch_cache
            .truncate_from_end(self.log_end_offset)?;
        crate::cleaner::truncate_checkpoint(&self.env, &self.dir, self.log_end_offset)?;
        self.producer_state = ProducerStateManager::new();
        let names = self.env.list_file_names(&self.dir)?;
        self.rebuild_producer_state(&names)?;
        self.max_timestamp = self.rebuild_max_timestamp()?;
        Ok(())
    }

    /// Kafka's `truncateFullyAndStartAt`: deletes every segment and starts
    /// an empty log whose start and end offset are `offset`, as a follower
    /// does when the offset it would fetch next is below its leader's log
    /// start. The leader-epoch checkpoint and producer state (with its
    /// snapshots) are cleared, the log start offset is persisted as
    /// [`Log::delete_records_before`] does, the cleaner checkpoint is
    /// lowered to `offset` if past it, and the new empty segment and the
    /// directory are fsynced before it returns. `OffsetOutOfRange` for a
    /// negative `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), StorageError> {
        self.durability.check(&self.dir)?;
        if offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let old_end = self.log_end_offset;
        let result = self.start_over_at(offset);
        match &result {
            Ok(()) => {
                info!(dir = %self.dir.display(), offset, old_end, "truncated the whole log and started over");
            }
            Err(e) => self.durability.fail_because(
                &self.dir,
                &format!("truncate the whole log and start at offset {offset}"),
                e,
            ),
        }
        result
    }

    fn start_over_at(&mut self, offset: i64) -> Result<(), StorageError> {
        // The old segments are renamed away first: a crash from here on
        // leaves them as leftovers that the next open removes, and the new
        // segment may take the name of one of them.
        for segment in self.segments.values_mut().rev() {
            segment.add_suffix(DELETED_SUFFIX)?;
        }
        self.durability.note_dir_change();
        let mut fresh = LogSegment::open(
            &self.env,
            &self.dir,
            offset,
            &self.config,
            false,
            &mut |_| {},
        )?;
        // Created now, as a roll does, so a restart finds the log end.
        fresh.log_handle()?;
        let old = std::mem::replace(
            &mut self.segments,
            BTreeMap::from([(offset, Box::new(fresh))]),
        );
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        for (_, mut segment) in old {
            segment.delete_files()?;
        }
        let now_ms = self.env.now_ms();
        self.persist_log_start_offset()?;
        self.sync_truncation(now_ms)?;
        self.leader_epoch_cache.clear()?;
        self.producer_state = ProducerStateManager::new();
        for name in self.env.list_file_names(&self.dir)? {
            if parse_snapshot_name(&name).is_some() {
                self.env.remove_file(&self.dir.join(&name))?;
            }
        }
        crate::cleaner::truncate_checkpoint(&self.env, &self.dir, offset)?;
        self.max_timestamp = NO_MAX_TIMESTAMP;
        Ok(())
    }

    /// fsyncs the (truncated or new) active segment and the directory, then
    /// starts a new durability generation at the new log end: everything
    /// below it is on disk now, and flushes or roll fsyncs handed out
    /// before cover bytes that may be gone, so they no longer count.
    fn sync_truncation(&mut self, now_ms: i64) -> Result<(), StorageError> {
        self.sync_active_and_dir()?;
        self.durability.truncated(self.log_end_offset);
        *self.roll_synced.lock() = None;
        self.unflushed_messages = 0;
        self.last_flush_ms = now_ms;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use tarn_protocol::record_batch::RecordBatchBuilder;

    use super::super::tests::{
        active_log_name, append_plain, file_len, headers, idempotent, read_all, small_config,
    };
    use super::*;
    use crate::file::{LogEnv, ManualClock};
    use crate::leader_epoch::{EpochEntry, LEADER_EPOCH_CHECKPOINT_FILE};
    use crate::log::LOG_START_OFFSET_FILE;
    use crate::log_config::{CleanupPolicy, LogConfig};
    use crate::segment::segment_file_name;
    use crate::sim::SimFileSystem;

    /// A batch as a leader holds it: offsets from `base_offset`, stamped
    /// with `epoch`, one record per millisecond from `timestamp`.
    fn leader_batch(base_offset: i64, epoch: i32, records: usize, timestamp: i64) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new()
            .base_offset(base_offset)
            .partition_leader_epoch(epoch);
        for i in 0..records {
            builder = builder.record(timestamp + i as i64, None, Some(b"v"));
        }
        builder.build()
    }

    /// A leader's log over several segments: plain batches and batches of
    /// idempotent producer 7, two records each, under epochs 1, 3 and 6
    /// (from the 10th and the 20th append on).
    fn leader_log(dir: &Path) -> Log {
        let mut log = Log::open(dir, small_config(), true).unwrap();
        let mut seq = 0;
        for i in 0..30 {
            let epoch = [1, 3, 6][i / 10];
            if i % 2 == 0 {
                log.append(&leader_batch(0, -1, 2, 1_000 + i as i64), epoch)
                    .unwrap();
            } else {
                log.append(&idempotent(7, 0, seq, 2), epoch).unwrap();
                seq += 2;
            }
        }
        assert!(log.segment_base_offsets().len() > 2, "several segments");
        log
    }

    /// Fetches from `leader` into `follower` until it has caught up,
    /// `max_bytes` at a time, as a replica fetcher does.
    fn replicate(leader: &Log, follower: &mut Log, max_bytes: usize) {
        while follower.log_end_offset() < leader.log_end_offset() {
            let bytes = leader
                .read(follower.log_end_offset(), max_bytes, true)
                .unwrap();
            let info = follower.append_as_follower(&bytes).unwrap();
            assert!(info.record_count > 0);
        }
    }

    fn epochs(log: &Log) -> Vec<EpochEntry> {
        log.leader_epoch_cache.entries().to_vec()
    }

    fn entry(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    /// Everything a fetcher can compare between two logs.
    fn assert_same_log(a: &Log, b: &Log, context: &str) {
        assert_eq!(a.log_end_offset(), b.log_end_offset(), "{context}");
        assert_eq!(read_all(a, 0), read_all(b, 0), "{context}");
        assert_eq!(epochs(a), epochs(b), "{context}");
        assert_eq!(
            a.producer_state().entry(7),
            b.producer_state().entry(7),
            "{context}"
        );
        assert_eq!(a.max_timestamp().unwrap(), b.max_timestamp().unwrap());
        for epoch in -1..8 {
            assert_eq!(
                a.end_offset_for_epoch(epoch),
                b.end_offset_for_epoch(epoch),
                "{context}: epoch {epoch}"
            );
        }
    }

    #[test]
    fn a_follower_holds_the_leaders_batches_byte_for_byte() {
        let leader_dir = tempfile::tempdir().unwrap();
        let leader = leader_log(leader_dir.path());
        // One batch per fetch: the follower rolls where the leader did, so
        // even the segment files are the same.
        let dir = tempfile::tempdir().unwrap();
        let mut follower = Log::open(dir.path(), small_config(), true).unwrap();
        replicate(&leader, &mut follower, 1);
        assert_same_log(&leader, &follower, "one batch per fetch");
        assert_eq!(
            follower.segment_base_offsets(),
            leader.segment_base_offsets()
        );
        for base in leader.segment_base_offsets() {
            let name = segment_file_name(base, "log");
            assert_eq!(
                std::fs::read(dir.path().join(&name)).unwrap(),
                std::fs::read(leader_dir.path().join(&name)).unwrap(),
                "{name}"
            );
            assert_eq!(
                follower.segments[&base].offset_index().entries(),
                leader.segments[&base].offset_index().entries()
            );
        }
        assert_eq!(epochs(&follower), [entry(1, 0), entry(3, 20), entry(6, 40)]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap(),
            "0\n3\n1 0\n3 20\n6 40\n"
        );
        let producer = follower.producer_state().entry(7).unwrap();
        assert_eq!(producer.batches.back().unwrap().last_offset, 59);

        // Many batches per fetch: the same batches, rolled elsewhere.
        let dir = tempfile::tempdir().unwrap();
        let mut follower = Log::open(dir.path(), small_config(), true).unwrap();
        replicate(&leader, &mut follower, 300);
        assert_same_log(&leader, &follower, "300 bytes per fetch");
        follower.close().unwrap();
        for clean in [true, false] {
            let follower = Log::open(dir.path(), small_config(), clean).unwrap();
            assert_same_log(&leader, &follower, &format!("reopened, clean={clean}"));
        }
    }

    #[test]
    fn follower_appends_refuse_what_does_not_follow_the_log_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        let info = log.append_as_follower(&leader_batch(0, 1, 3, 100)).unwrap();
        assert_eq!(
            info,
            AppendInfo {
                base_offset: 0,
                last_offset: 2,
                log_append_time: -1,
                duplicate: false,
                record_count: 3
            }
        );
        let name = active_log_name(&log);
        let size = file_len(dir.path(), &name);
        let refused = |log: &mut Log, records: &[u8]| log.append_as_follower(records).unwrap_err();

        let e = refused(&mut log, &leader_batch(0, 9, 3, 100));
        assert!(
            matches!(
                e,
                AppendError::UnexpectedAppendOffset {
                    first_offset: 0,
                    last_offset: 2,
                    log_end_offset: 3
                }
            ),
            "{e}"
        );
        let straddling = [leader_batch(2, 9, 2, 100), leader_batch(4, 9, 1, 100)].concat();
        assert!(matches!(
            refused(&mut log, &straddling),
            AppendError::UnexpectedAppendOffset {
                first_offset: 2,
                last_offset: 4,
                log_end_offset: 3
            }
        ));
        let overlapping = [leader_batch(3, 9, 2, 100), leader_batch(4, 9, 1, 100)].concat();
        let e = refused(&mut log, &overlapping);
        assert!(
            matches!(&e, AppendError::OffsetsOutOfOrder(m) if m.contains("ends at 4")),
            "{e}"
        );
        let backwards = [leader_batch(10, 9, 1, 100), leader_batch(3, 9, 1, 100)].concat();
        assert!(matches!(
            refused(&mut log, &backwards),
            AppendError::OffsetsOutOfOrder(_)
        ));
        let too_wide = [
            leader_batch(3, 9, 1, 100),
            leader_batch(3 + MAX_RELATIVE_OFFSET + 1, 9, 1, 100),
        ]
        .concat();
        assert!(matches!(
            refused(&mut log, &too_wide),
            AppendError::InvalidRecord(_)
        ));
        let mut bad_crc = leader_batch(3, 9, 2, 100);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        assert!(matches!(
            refused(&mut log, &bad_crc),
            AppendError::CorruptMessage(_)
        ));
        let good = leader_batch(3, 9, 2, 100);
        let trailing = [good.clone(), good[..30].to_vec()].concat();
        assert!(matches!(
            refused(&mut log, &trailing),
            AppendError::CorruptMessage(_)
        ));
        // Nothing of the refused appends stayed, not even an epoch.
        assert_eq!(log.log_end_offset(), 3);
        assert_eq!(file_len(dir.path(), &name), size);
        assert_eq!(epochs(&log), [entry(1, 0)]);

        let nothing = log.append_as_follower(&[]).unwrap();
        assert_eq!(
            (
                nothing.base_offset,
                nothing.last_offset,
                nothing.record_count
            ),
            (3, 2, 0)
        );
        assert_eq!(file_len(dir.path(), &name), size);

        // A gap (compaction on the leader) is fine, and reads skip it.
        let info = log
            .append_as_follower(&leader_batch(10, 2, 2, 200))
            .unwrap();
        assert_eq!((info.base_offset, info.last_offset), (10, 11));
        assert_eq!(log.log_end_offset(), 12);
        assert_eq!(
            headers(&log.read(3, usize::MAX, true).unwrap())[0].base_offset,
            10
        );
        assert_eq!(log.end_offset_for_epoch(1), (1, 10));
    }

    #[test]
    fn follower_appends_skip_the_checks_the_leader_made() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            cleanup_policy: CleanupPolicy::COMPACT,
            max_message_bytes: 100,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, true).unwrap();
        // Keyless records on a compacted topic, a batch above
        // max.message.bytes, a producer whose first batch is not at
        // sequence 0, and several of its batches in one append: a leader
        // took them all (under its own settings, or before a config
        // change), so the follower must too.
        let keyless = leader_batch(0, 0, 20, 100);
        assert!(keyless.len() > 100);
        assert!(log.append(&keyless, 0).is_err(), "a produce is refused");
        log.append_as_follower(&keyless).unwrap();
        let producer = |base: i64, seq: i32| {
            RecordBatchBuilder::new()
                .base_offset(base)
                .partition_leader_epoch(0)
                .producer(5, 0, seq)
                .record(100, Some(b"k"), Some(b"v"))
                .build()
        };
        let produced = |seq: i32| {
            RecordBatchBuilder::new()
                .producer(5, 0, seq)
                .record(100, Some(b"k"), Some(b"v"))
                .build()
        };
        let two = [producer(20, 7), producer(21, 8)].concat();
        let info = log.append_as_follower(&two).unwrap();
        assert_eq!((info.base_offset, info.last_offset), (20, 21));
        let last = *log
            .producer_state()
            .entry(5)
            .unwrap()
            .batches
            .back()
            .unwrap();
        assert_eq!((last.first_seq, last.base_offset), (8, 21));
        // The producer state the leader's batches built refuses what a
        // client might send next out of sequence, as on the leader.
        assert!(matches!(
            log.append(&produced(10), 0),
            Err(AppendError::OutOfOrderSequence(_))
        ));
        assert_eq!(log.append(&produced(9), 0).unwrap().base_offset, 22);
    }

    #[test]
    fn a_gap_past_a_segments_offsets_rolls_at_the_leaders_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        log.append_as_follower(&leader_batch(0, 0, 2, 100)).unwrap();
        let far = 5_000_000_000;
        log.append_as_follower(&leader_batch(far, 0, 2, 200))
            .unwrap();
        assert_eq!(log.segment_base_offsets(), [0, far]);
        assert_eq!(log.log_end_offset(), far + 2);
        let read = headers(&log.read(2, usize::MAX, true).unwrap());
        assert_eq!(read[0].base_offset, far);
        log.close().unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!(log.segment_base_offsets(), [0, far]);
        assert_eq!(log.log_end_offset(), far + 2);
    }

    #[test]
    fn follower_appends_keep_the_flush_bookkeeping() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            flush_messages: 3,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, true).unwrap();
        log.append_as_follower(&leader_batch(0, 0, 2, 0)).unwrap();
        assert!(!log.flush_due());
        assert!(log.has_unflushed_data());
        log.append_as_follower(&leader_batch(2, 0, 2, 0)).unwrap();
        assert!(log.flush_due());
        let target = log.prepare_flush().unwrap().expect("data to flush");
        assert_eq!(target.upto(), 4);
        target.run().unwrap();
        assert_eq!(log.durable_offset(), 4);
        assert!(!log.flush_due() && !log.has_unflushed_data());
    }

    /// The leader log's batch headers below `offset`.
    fn below(all: &[RecordBatchHeader], offset: i64) -> Vec<RecordBatchHeader> {
        all.iter()
            .filter(|h| h.base_offset < offset)
            .copied()
            .collect()
    }

    #[test]
    fn truncate_to_removes_every_record_from_the_offset_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = leader_log(dir.path());
        let bases = log.segment_base_offsets();
        let all = read_all(&log, 0);
        // The second batch of epoch 3: epoch 6 and later segments go.
        let target = 22;
        let holding = *bases.iter().rfind(|b| **b <= target).unwrap();
        assert_ne!(bases.last(), Some(&holding), "later segments go");
        let kept_bytes: u64 = (holding..target)
            .step_by(2)
            .map(|o| log.read(o, 1, true).unwrap().len() as u64)
            .sum();
        log.truncate_to(target).unwrap();

        assert_eq!(log.log_end_offset(), target);
        let kept: Vec<i64> = bases.iter().copied().filter(|b| *b <= target).collect();
        assert_eq!(log.segment_base_offsets(), kept);
        for base in bases.iter().filter(|b| **b > target) {
            for suffix in ["log", "index", "timeindex"] {
                let name = segment_file_name(*base, suffix);
                assert!(!dir.path().join(&name).exists(), "{name}");
            }
        }
        assert_eq!(
            file_len(dir.path(), &segment_file_name(holding, "log")),
            kept_bytes
        );
        let active = log.active_segment();
        assert!(active
            .offset_index()
            .entries()
            .iter()
            .all(|e| e.offset < target));
        assert!(active
            .time_index()
            .entries()
            .iter()
            .all(|e| e.offset < target));
        assert_eq!(read_all(&log, 0), below(&all, target));
        assert_eq!(epochs(&log), [entry(1, 0), entry(3, 20)]);
        assert_eq!(log.end_offset_for_epoch(3), (3, target));
        assert_eq!(log.end_offset_for_epoch(6), (-1, -1));
        // The max timestamp was in the removed tail; now it is the last
        // kept batch's (timestamps grow with each append).
        // (Its second record carries it.)
        assert_eq!(log.max_timestamp().unwrap(), (1_011, 21, 3));
        assert_eq!(log.durable_offset(), target);
        assert!(!log.has_unflushed_data(), "the truncation was fsynced");

        // Appends go on from the new end, in a segment that can roll.
        let batch = leader_batch(0, -1, 2, 5_000);
        assert_eq!(log.append(&batch, 6).unwrap().base_offset, target);
        let after = read_all(&log, 0);
        for _ in 0..20 {
            log.append(&batch, 6).unwrap();
        }
        assert!(log.segment_base_offsets().len() > kept.len());
        log.close().unwrap();
        for clean in [true, false] {
            let log = Log::open(dir.path(), small_config(), clean).unwrap();
            assert_eq!(log.log_end_offset(), target + 42, "clean={clean}");
            assert_eq!(read_all(&log, 0)[..after.len()], after[..]);
            assert_eq!(
                epochs(&log),
                [entry(1, 0), entry(3, 20), entry(6, 22)],
                "clean={clean}"
            );
        }
    }

    #[test]
    fn a_truncated_log_reopens_at_its_truncated_end() {
        for clean in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = leader_log(dir.path());
            let all = read_all(&log, 0);
            log.truncate_to(30).unwrap();
            if clean {
                log.close().unwrap();
            } else {
                drop(log);
            }
            let log = Log::open(dir.path(), small_config(), clean).unwrap();
            assert_eq!(log.log_end_offset(), 30, "clean={clean}");
            assert_eq!(read_all(&log, 0), below(&all, 30));
            assert_eq!(epochs(&log), [entry(1, 0), entry(3, 20)]);
            let retained = log
                .producer_state()
                .entry(7)
                .unwrap()
                .batches
                .back()
                .copied();
            assert_eq!(retained.map(|b| b.last_offset), Some(27));
        }
    }

    #[test]
    fn truncating_inside_a_batch_cuts_to_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        log.append_as_follower(&leader_batch(0, 1, 3, 100)).unwrap();
        let size = file_len(dir.path(), &active_log_name(&log));
        log.append_as_follower(&leader_batch(3, 2, 3, 200)).unwrap();
        log.truncate_to(4).unwrap();
        assert_eq!(log.log_end_offset(), 3);
        assert_eq!(file_len(dir.path(), &active_log_name(&log)), size);
        assert_eq!(epochs(&log), [entry(1, 0)]);
        assert_eq!(log.max_timestamp().unwrap().0, 102);
        log.append_as_follower(&leader_batch(3, 4, 1, 300)).unwrap();
        assert_eq!(log.log_end_offset(), 4);
    }

    #[test]
    fn truncation_forgets_the_producer_batches_it_removed() {
        // (snapshot at offset 4 first, truncate to): without a snapshot;
        // below a snapshot (deleted); at a snapshot (kept and used).
        for (snapshot, target) in [(false, 4), (true, 2), (true, 4)] {
            let context = format!("snapshot={snapshot} target={target}");
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), small_config(), true).unwrap();
            log.append(&idempotent(5, 0, 0, 2), 0).unwrap();
            log.append(&idempotent(5, 0, 2, 2), 0).unwrap();
            let snapshot_file = dir.path().join(format!("{:020}.snapshot", 4));
            if snapshot {
                log.close().unwrap();
                log = Log::open(dir.path(), small_config(), true).unwrap();
                assert!(snapshot_file.exists());
            }
            log.append(&idempotent(5, 0, 4, 2), 0).unwrap();
            log.truncate_to(target).unwrap();
            assert_eq!(snapshot_file.exists(), snapshot && target == 4, "{context}");

            let kept = log.producer_state().entry(5).unwrap().batches.clone();
            assert_eq!(kept.back().unwrap().last_offset, target - 1, "{context}");
            // The sequence that followed the removed batches is a gap now.
            assert!(
                matches!(
                    log.append(&idempotent(5, 0, 6, 1), 0),
                    Err(AppendError::OutOfOrderSequence(_))
                ),
                "{context}"
            );
            // The first removed batch is new again, and lands at the end.
            let seq = target as i32;
            let retry = log.append(&idempotent(5, 0, seq, 2), 0).unwrap();
            assert!(!retry.duplicate, "{context}");
            assert_eq!(retry.base_offset, target, "{context}");
            // The last kept one is still a duplicate.
            let again = log.append(&idempotent(5, 0, seq - 2, 2), 0).unwrap();
            assert!(again.duplicate, "{context}");
            assert_eq!(again.base_offset, target - 2);
            drop(log);
            let log = Log::open(dir.path(), small_config(), false).unwrap();
            let last = log
                .producer_state()
                .entry(5)
                .unwrap()
                .batches
                .back()
                .copied();
            assert_eq!(last.map(|b| b.base_offset), Some(target), "{context}");
        }
    }

    #[test]
    fn truncating_at_or_past_the_end_only_drops_a_dangling_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        log.append_as_follower(&leader_batch(0, 1, 2, 100)).unwrap();
        let size = file_len(dir.path(), &active_log_name(&log));
        // An elected leader checkpoints its epoch before it appends; it
        // lost the lead before it did.
        log.leader_epoch_cache.assign(4, 2).unwrap();
        log.truncate_to(7).unwrap();
        assert_eq!(epochs(&log), [entry(1, 0)]);
        log.truncate_to(2).unwrap();
        assert_eq!(log.log_end_offset(), 2);
        assert_eq!(file_len(dir.path(), &active_log_name(&log)), size);
    }

    #[test]
    fn end_offset_for_epoch_answers_as_kafkas_offset_for_leader_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        assert_eq!(log.end_offset_for_epoch(0), (-1, -1), "no epochs");
        for (base, epoch, records) in [(0, 1, 2), (2, 1, 2), (4, 3, 3), (7, 3, 3), (10, 6, 2)] {
            log.append_as_follower(&leader_batch(base, epoch, records, 0))
                .unwrap();
        }
        let expected = |log: &Log, answers: &[(i32, (i32, i64))]| {
            for (epoch, answer) in answers {
                assert_eq!(log.end_offset_for_epoch(*epoch), *answer, "epoch {epoch}");
            }
        };
        // The largest epoch <= the one asked for, ending where the next
        // larger one starts (or at the log end for the latest); below the
        // first epoch, the one asked for with the first start offset;
        // above the latest (or -1), undefined.
        expected(
            &log,
            &[
                (-1, (-1, -1)),
                (0, (0, 0)),
                (1, (1, 4)),
                (2, (1, 4)),
                (3, (3, 10)),
                (5, (3, 10)),
                (6, (6, 12)),
                (7, (-1, -1)),
            ],
        );
        log.truncate_to(7).unwrap();
        let after = [(1, (1, 4)), (3, (3, 7)), (5, (-1, -1)), (6, (-1, -1))];
        expected(&log, &after);
        drop(log);
        let log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        expected(&log, &after);
    }

    #[test]
    fn a_new_leaders_epoch_starts_at_the_log_end_until_a_truncation_or_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        log.assign_leader_epoch(2).unwrap();
        assert_eq!(log.latest_epoch(), None, "a log without records skips it");
        log.append_as_follower(&leader_batch(0, 1, 3, 0)).unwrap();
        log.assign_leader_epoch(4).unwrap();
        assert_eq!(log.latest_epoch(), Some(4));
        // Epoch 3 (a leader whose records this log never had) ends where
        // 4 starts; 4, the latest, at the log end.
        let answers = [(3, (1, 3)), (4, (4, 3)), (1, (1, 3))];
        for (epoch, answer) in answers {
            assert_eq!(log.end_offset_for_epoch(epoch), answer, "epoch {epoch}");
        }
        // Following another leader: a truncation to the end drops the
        // epoch it never wrote in, so it is not sent as the last fetched.
        log.truncate_to(3).unwrap();
        assert_eq!(log.latest_epoch(), Some(1));
        // As opening the log does (Kafka's recovery too); leading again
        // assigns it again.
        log.assign_leader_epoch(4).unwrap();
        drop(log);
        let mut log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!(log.latest_epoch(), Some(1));
        log.assign_leader_epoch(4).unwrap();
        for (epoch, answer) in answers {
            assert_eq!(log.end_offset_for_epoch(epoch), answer, "epoch {epoch}");
        }
    }

    #[test]
    fn truncating_below_the_log_start_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = leader_log(dir.path());
        log.delete_records_before(30).unwrap();
        log.truncate_to(10).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (10, 10));
        assert_eq!(log.segment_base_offsets(), [10]);
        assert_eq!(epochs(&log), []);
        log.append_as_follower(&leader_batch(10, 8, 2, 0)).unwrap();
        assert_eq!(log.log_end_offset(), 12);
    }

    #[test]
    fn a_cut_batch_that_began_below_the_log_start_lowers_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        log.append_as_follower(&leader_batch(0, 1, 5, 0)).unwrap();
        log.append_as_follower(&leader_batch(5, 1, 5, 0)).unwrap();
        log.delete_records_before(7).unwrap();
        log.truncate_to(8).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (5, 5));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LOG_START_OFFSET_FILE)).unwrap(),
            "5\n"
        );
        drop(log);
        let log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (5, 5));
    }

    #[test]
    fn a_truncation_lowers_the_cleaner_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = leader_log(dir.path());
        let checkpoint = dir.path().join(crate::cleaner::CLEANER_CHECKPOINT_FILE);
        std::fs::write(&checkpoint, "40\n").unwrap();
        log.truncate_to(50).unwrap();
        assert_eq!(log.cleaner_checkpoint().unwrap(), 40, "below the end");
        log.truncate_to(30).unwrap();
        assert_eq!(log.cleaner_checkpoint().unwrap(), 30);
        log.truncate_fully_and_start_at(100).unwrap();
        assert_eq!(log.cleaner_checkpoint().unwrap(), 30, "below the start");
    }

    #[test]
    fn truncate_fully_and_start_at_leaves_an_empty_log_there() {
        let dir = tempfile::tempdir().unwrap();
        leader_log(dir.path()).close().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        log.delete_records_before(5).unwrap();
        assert!(dir.path().join(LOG_START_OFFSET_FILE).exists());
        log.truncate_fully_and_start_at(1_000).unwrap();

        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (1_000, 1_000)
        );
        assert_eq!(log.segment_base_offsets(), [1_000]);
        let mut names = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>();
        names.sort();
        assert_eq!(
            names,
            [
                "00000000000000001000.log".to_string(),
                LEADER_EPOCH_CHECKPOINT_FILE.to_string()
            ],
            "no old segment, snapshot or log start offset file"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap(),
            "0\n0\n"
        );
        assert_eq!(log.latest_epoch(), None);
        assert_eq!(log.producer_state().producer_count(), 0);
        assert_eq!(log.max_timestamp().unwrap(), (-1, -1, -1));
        assert!(log.read(1_000, usize::MAX, true).unwrap().is_empty());
        assert!(matches!(
            log.read(999, usize::MAX, true),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert!(!log.has_unflushed_data());

        log.append_as_follower(&leader_batch(1_000, 9, 2, 0))
            .unwrap();
        assert_eq!(log.end_offset_for_epoch(9), (9, 1_002));
        drop(log);
        let log = Log::open(dir.path(), small_config(), false).unwrap();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (1_000, 1_002)
        );
        assert_eq!(epochs(&log), [entry(9, 1_000)]);
        assert_eq!(log.producer_state().producer_count(), 0);
    }

    #[test]
    fn truncate_fully_and_start_at_can_reuse_a_segments_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), true).unwrap();
        append_plain(&mut log, 10, 0);
        log.truncate_fully_and_start_at(0).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
        assert_eq!(file_len(dir.path(), &segment_file_name(0, "log")), 0);
        assert!(matches!(
            log.truncate_fully_and_start_at(-1),
            Err(StorageError::OffsetOutOfRange { offset: -1, .. })
        ));
        assert_eq!(append_plain(&mut log, 1, 0).base_offset, 0);
        drop(log);
        let log = Log::open(dir.path(), LogConfig::default(), false).unwrap();
        assert_eq!(log.log_end_offset(), 1);
    }

    fn sim_log(seed: u64) -> (Arc<SimFileSystem>, LogEnv, PathBuf, LogConfig) {
        let fs = Arc::new(SimFileSystem::new(seed));
        let env = LogEnv::new(fs.clone(), 4, Arc::new(ManualClock::new(0)));
        let config = LogConfig {
            segment_bytes: 700,
            index_interval_bytes: 64,
            ..LogConfig::default()
        };
        (fs, env, PathBuf::from("/data/t-0"), config)
    }

    #[test]
    fn a_truncation_is_on_disk_when_it_returns() {
        let (fs, env, dir, config) = sim_log(3);
        let mut log = Log::open_in(&env, &dir, config.clone(), true).unwrap();
        for i in 0..30 {
            log.append_as_follower(&leader_batch(2 * i, 1, 2, i))
                .unwrap();
        }
        log.flush().unwrap();
        assert!(log.segment_base_offsets().len() > 2);
        log.append_as_follower(&leader_batch(60, 2, 2, 0)).unwrap();
        // A flush handed out before the truncation, run after it: its
        // fsync covers bytes that are gone, so it claims nothing.
        let stale = log.prepare_flush().unwrap().expect("unflushed data");
        assert_eq!(stale.upto(), 62);
        log.truncate_to(20).unwrap();
        assert_eq!(log.durable_offset(), 20);
        stale.run().unwrap();
        assert_eq!(log.durable_offset(), 20);
        log.append_as_follower(&leader_batch(20, 3, 2, 0)).unwrap();
        assert_eq!(log.durable_offset(), 20);
        assert!(log.has_unflushed_data());
        // Without its fsync the truncated file would come back whole.
        fs.power_cut(false);
        drop(log);
        let log = Log::open_in(&env, &dir, config, false).unwrap();
        assert_eq!(log.log_end_offset(), 20);
        assert_eq!(epochs(&log), [entry(1, 0)]);
    }

    #[test]
    fn a_roll_fsync_prepared_before_a_truncation_does_not_count_after_it() {
        let (_fs, env, dir, config) = sim_log(4);
        let mut log = Log::open_in(&env, &dir, config, true).unwrap();
        let batch = |base: i64| leader_batch(base, 1, 4, 0);
        let roll = loop {
            let next = batch(log.log_end_offset());
            if let Some(roll) = log.prepare_roll(&next).unwrap() {
                break roll;
            }
            log.append_as_follower(&next).unwrap();
        };
        // The last batch goes and an equal one takes its place: the same
        // segment at the same size, but not the bytes the fsync saw.
        let end = log.log_end_offset();
        log.truncate_to(end - 4).unwrap();
        log.append_as_follower(&leader_batch(end - 4, 2, 4, 0))
            .unwrap();
        roll.run().unwrap();
        assert!(!log.active_segment_roll_synced());
    }

    #[test]
    fn a_failed_truncation_takes_the_log_offline() {
        let (fs, env, dir, config) = sim_log(5);
        let mut log = Log::open_in(&env, &dir, config, true).unwrap();
        // Until the active segment holds two batches, a segment or more on.
        while log.log_end_offset() < 10
            || log.active_segment().base_offset() >= log.log_end_offset() - 2
        {
            let end = log.log_end_offset();
            log.append_as_follower(&leader_batch(end, 1, 2, 0)).unwrap();
        }
        let target = log.log_end_offset() - 2;
        let active_base = log.active_segment().base_offset();
        assert!(fs.fail_fsyncs(&dir.join(segment_file_name(active_base, "log")), 1));
        assert!(log.truncate_to(target).is_err());
        assert!(log.offline_cause().is_some());
        assert!(matches!(
            log.append_as_follower(&leader_batch(target + 2, 1, 2, 0)),
            Err(AppendError::Storage(StorageError::Offline { .. }))
        ));
        assert!(log
            .offline_cause()
            .unwrap()
            .contains("truncate the log to offset"));
        assert!(matches!(
            log.truncate_to(0),
            Err(StorageError::Offline { .. })
        ));
    }

    #[test]
    fn a_crc_checked_later_still_guards_what_a_truncation_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        for i in 0..10 {
            log.append_as_follower(&leader_batch(2 * i, 1, 2, 0))
                .unwrap();
        }
        let name = active_log_name(&log);
        log.close().unwrap();
        // Corrupt the last batch, then open without recovery: the bytes
        // wait for their CRC check.
        let path = dir.path().join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let mut log = Log::open(dir.path(), small_config(), true).unwrap();
        assert!(log.active_segment().awaits_verification());
        log.truncate_to(18).unwrap();
        assert_eq!(read_all(&log, 0).len(), 9, "the corrupt batch went");
        // What is appended past the cut (checked as it comes) is served,
        // not judged by a check of the bytes that were there before.
        log.append_as_follower(&leader_batch(18, 1, 3, 0)).unwrap();
        assert_eq!(read_all(&log, 0).len(), 10);
        assert_eq!(log.log_end_offset(), 21);
    }
}
