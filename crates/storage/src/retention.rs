//! Retention: deleting whole segments by time (`retention.ms`), by size
//! (`retention.bytes`) and below the log start offset (DeleteRecords),
//! rolling idle segments (`segment.ms`), and removing deleted files after
//! `file.delete.delay.ms` — Kafka's `deleteOldSegments`.
//!
//! Rules (Kafka's): segments are considered oldest first and deletion
//! stops at the first one that must stay; the active segment counts only
//! when it is not empty, and if every segment goes, a new empty active
//! segment is rolled first so the log end offset survives. Time retention
//! uses each segment's largest record timestamp (the file's modification
//! time when no batch has one). Deleted segments are renamed to
//! `*.deleted` at once and removed `file.delete.delay.ms` later; the log
//! start offset moves to the first remaining segment (or stays where
//! DeleteRecords put it, if that is later).

use tracing::info;

use crate::error::StorageError;
use crate::log::Log;
use crate::segment::{LogSegment, DELETED_SUFFIX};

/// Why segments were deleted, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionReason {
    Time,
    Size,
    LogStartOffset,
}

impl Log {
    /// Runs every retention rule that applies to this log's cleanup policy
    /// and returns how many segments were deleted. The log-start-offset
    /// rule applies to every log; time and size only with `delete` in
    /// `cleanup.policy`.
    pub fn delete_old_segments(&mut self, now_ms: i64) -> Result<usize, StorageError> {
        let mut deleted = self.delete_log_start_offset_breached_segments(now_ms)?;
        if self.config.cleanup_policy.delete {
            deleted += self.delete_retention_ms_breached_segments(now_ms)?;
            deleted += self.delete_retention_size_breached_segments(now_ms)?;
        }
        Ok(deleted)
    }

    fn delete_retention_ms_breached_segments(
        &mut self,
        now_ms: i64,
    ) -> Result<usize, StorageError> {
        let retention_ms = self.config.retention_ms;
        if retention_ms < 0 {
            return Ok(0);
        }
        let env = self.env.clone();
        let mut count = 0;
        for segment in self.deletion_candidates() {
            if now_ms.saturating_sub(segment.largest_timestamp(&env)?) > retention_ms {
                count += 1;
            } else {
                break;
            }
        }
        self.delete_oldest_segments(count, RetentionReason::Time, now_ms)
    }

    fn delete_retention_size_breached_segments(
        &mut self,
        now_ms: i64,
    ) -> Result<usize, StorageError> {
        let retention_bytes = self.config.retention_bytes;
        if retention_bytes < 0 {
            return Ok(0);
        }
        let mut excess = self.size_bytes() as i64 - retention_bytes;
        let mut count = 0;
        for segment in self.deletion_candidates() {
            if excess - segment.size() as i64 >= 0 {
                excess -= segment.size() as i64;
                count += 1;
            } else {
                break;
            }
        }
        self.delete_oldest_segments(count, RetentionReason::Size, now_ms)
    }

    fn delete_log_start_offset_breached_segments(
        &mut self,
        now_ms: i64,
    ) -> Result<usize, StorageError> {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let count = bases
            .windows(2)
            .take_while(|w| w[1] <= self.log_start_offset)
            .count();
        self.delete_oldest_segments(count, RetentionReason::LogStartOffset, now_ms)
    }

    /// Segments retention may delete, oldest first: all but an empty
    /// active segment.
    fn deletion_candidates(&self) -> impl Iterator<Item = &LogSegment> {
        let active = self.active_segment().base_offset();
        self.segments
            .values()
            .map(|s| &**s)
            .filter(move |s| s.base_offset() != active || s.size() > 0)
    }

    fn delete_oldest_segments(
        &mut self,
        count: usize,
        reason: RetentionReason,
        now_ms: i64,
    ) -> Result<usize, StorageError> {
        if count == 0 {
            return Ok(0);
        }
        if count >= self.segments.len() {
            self.roll()?;
        }
        let bases: Vec<i64> = self.segments.keys().take(count).copied().collect();
        let deadline = now_ms.saturating_add(self.config.file_delete_delay_ms);
        for base in &bases {
            let mut segment = self.segments.remove(base).expect("listed segment");
            segment.add_suffix(DELETED_SUFFIX)?;
            self.pending_deletes.push((deadline, segment));
        }
        self.env.sync_dir(&self.dir)?;
        let first = *self
            .segments
            .keys()
            .next()
            .expect("a log always has a segment");
        self.log_start_offset = self.log_start_offset.max(first);
        self.persist_log_start_offset()?;
        if self.max_timestamp.offset < self.log_start_offset {
            self.max_timestamp = self.rebuild_max_timestamp()?;
        }
        info!(
            dir = %self.dir.display(),
            segments = bases.len(),
            ?reason,
            log_start_offset = self.log_start_offset,
            "deleted old segments"
        );
        Ok(bases.len())
    }

    /// Moves the log start offset forward to `offset` (at most the log end)
    /// and deletes the segments wholly below it. Reads below the new start
    /// are refused with OffsetOutOfRange. Returns the new log start offset.
    pub fn advance_log_start_offset(
        &mut self,
        offset: i64,
        now_ms: i64,
    ) -> Result<i64, StorageError> {
        let offset = offset.min(self.log_end_offset);
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            self.persist_log_start_offset()?;
            self.delete_log_start_offset_breached_segments(now_ms)?;
        }
        Ok(self.log_start_offset)
    }

    /// Rolls a non-empty active segment that is older than `segment.ms`
    /// (or `max.compaction.lag.ms` for compacted logs), even without new
    /// appends, so retention and the cleaner can reach its data. Returns
    /// whether it rolled.
    pub fn roll_if_idle(&mut self, now_ms: i64) -> Result<bool, StorageError> {
        let segment_ms = self.active_roll_ms();
        let active = self.active_segment_mut();
        if active.size() == 0 || active.time_waited_for_roll(now_ms, now_ms)? <= segment_ms {
            return Ok(false);
        }
        self.roll()?;
        Ok(true)
    }

    /// Removes the files of deleted segments whose delay has passed;
    /// returns how many segments' files were removed.
    pub fn remove_deleted_segments(&mut self, now_ms: i64) -> Result<usize, StorageError> {
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_deletes)
            .into_iter()
            .partition(|(deadline, _)| *deadline <= now_ms);
        self.pending_deletes = waiting;
        let count = due.len();
        for (_, mut segment) in due {
            segment.delete_files()?;
        }
        Ok(count)
    }

    /// When the next deleted segment's files are due for removal.
    pub fn next_deleted_removal_ms(&self) -> Option<i64> {
        self.pending_deletes.iter().map(|(due, _)| *due).min()
    }

    /// How many deleted segments still wait for their files to be removed.
    pub fn pending_deleted_segments(&self) -> usize {
        self.pending_deletes.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tarn_protocol::record_batch::{build_batch_for_tests, BatchIter, RecordBatchBuilder};

    use super::*;
    use crate::error::StorageError;
    use crate::file::{LogEnv, ManualClock, OsFileSystem};
    use crate::log_config::{CleanupPolicy, LogConfig};

    fn env_at(now_ms: i64) -> (LogEnv, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(now_ms));
        (
            LogEnv::new(Arc::new(OsFileSystem), 16, clock.clone()),
            clock,
        )
    }

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 500,
            index_interval_bytes: 1,
            file_delete_delay_ms: 1_000,
            ..LogConfig::default()
        }
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Appends `batches` batches of 3 records with timestamps from `ts`.
    fn fill(log: &mut Log, batches: i64, ts: i64) {
        for i in 0..batches {
            let t = ts + i * 10;
            let batch = RecordBatchBuilder::new()
                .record(t, Some(b"a"), Some(b"v0"))
                .record(t + 1, Some(b"b"), Some(b"v1"))
                .record(t + 2, Some(b"c"), Some(b"v2"))
                .build();
            log.append(&batch, 0).unwrap();
        }
    }

    #[test]
    fn size_retention_deletes_oldest_whole_segments_after_the_delay() {
        let dir = tempfile::tempdir().unwrap();
        let (env, _) = env_at(1_000_000);
        let mut log = Log::open_in(&env, dir.path(), config(), true).unwrap();
        fill(&mut log, 40, 1_000_000);
        let bases = log.segment_base_offsets();
        assert!(bases.len() >= 4, "{bases:?}");
        let total = log.size_bytes() as i64;
        let first_size = log.segments[&bases[0]].size() as i64;
        let second_size = log.segments[&bases[1]].size() as i64;
        // Room for everything but the two oldest segments (and a byte less).
        log.config.retention_bytes = total - first_size - second_size;
        assert_eq!(log.delete_old_segments(1_000_000).unwrap(), 2);
        assert_eq!(log.log_start_offset(), bases[2]);
        assert_eq!(log.segment_base_offsets(), bases[2..].to_vec());
        assert!(matches!(
            log.read(bases[2] - 1, 100, true),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        let read = log.read(bases[2], usize::MAX, true).unwrap();
        assert_eq!(
            BatchIter::new(&read).next().unwrap().unwrap().1.base_offset,
            bases[2]
        );
        let deleted = format!("{:020}.log.deleted", bases[0]);
        assert!(names(dir.path()).contains(&deleted));
        assert_eq!(log.remove_deleted_segments(1_000_500).unwrap(), 0);
        assert_eq!(log.remove_deleted_segments(1_001_000).unwrap(), 2);
        assert!(!names(dir.path()).iter().any(|n| n.ends_with(".deleted")));
        // Nothing more to do at the same limit.
        assert_eq!(log.delete_old_segments(1_000_000).unwrap(), 0);
        log.close().unwrap();
        let log = Log::open_in(&env, dir.path(), config(), true).unwrap();
        assert_eq!(log.log_start_offset(), bases[2]);
        assert_eq!(log.log_end_offset(), 120);
    }

    #[test]
    fn time_retention_rolls_an_expired_active_segment_and_keeps_the_log_end() {
        let dir = tempfile::tempdir().unwrap();
        let (env, _) = env_at(0);
        let conf = LogConfig {
            retention_ms: 10_000,
            ..config()
        };
        let mut log = Log::open_in(&env, dir.path(), conf.clone(), true).unwrap();
        fill(&mut log, 20, 1_000);
        let old_segments = log.segment_base_offsets().len();
        fill(&mut log, 20, 50_000);
        // At 55_000 only the segments whose newest record is before 45_000 go.
        let deleted = log.delete_old_segments(55_000).unwrap();
        assert!(
            deleted >= old_segments - 1 && deleted <= old_segments,
            "{deleted}"
        );
        assert!(log.read(log.log_start_offset(), usize::MAX, true).is_ok());
        // Later, everything is expired: the active segment is rolled first.
        let end = log.log_end_offset();
        assert!(log.delete_old_segments(1_000_000).unwrap() > 0);
        assert_eq!(log.segment_base_offsets(), vec![end]);
        assert_eq!(log.log_start_offset(), end);
        drop(log);
        let mut log = Log::open_in(&env, dir.path(), conf, false).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (end, end));
        let info = log
            .append(&build_batch_for_tests(0, 1, 2_000_000), 0)
            .unwrap();
        assert_eq!(info.base_offset, end);
    }

    #[test]
    fn compact_only_logs_ignore_time_and_size_retention() {
        let dir = tempfile::tempdir().unwrap();
        let (env, _) = env_at(0);
        let conf = LogConfig {
            retention_ms: 1,
            retention_bytes: 1,
            cleanup_policy: CleanupPolicy::COMPACT,
            ..config()
        };
        let mut log = Log::open_in(&env, dir.path(), conf, true).unwrap();
        fill(&mut log, 20, 1_000);
        assert_eq!(log.delete_old_segments(1_000_000).unwrap(), 0);
        assert_eq!(log.log_start_offset(), 0);
    }

    #[test]
    fn log_start_offset_moves_persists_and_frees_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (env, _) = env_at(0);
        let mut log = Log::open_in(&env, dir.path(), config(), true).unwrap();
        fill(&mut log, 30, 1_000);
        let bases = log.segment_base_offsets();
        let target = bases[1] + 1;
        assert_eq!(log.advance_log_start_offset(target, 0).unwrap(), target);
        assert_eq!(log.segment_base_offsets()[0], bases[1]);
        assert!(matches!(
            log.read(target - 1, 100, true),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        // Never backwards, never past the end.
        assert_eq!(log.advance_log_start_offset(0, 0).unwrap(), target);
        drop(log);
        let mut log = Log::open_in(&env, dir.path(), config(), false).unwrap();
        assert_eq!(log.log_start_offset(), target);
        let end = log.log_end_offset();
        assert_eq!(log.advance_log_start_offset(end + 100, 0).unwrap(), end);
    }

    #[test]
    fn idle_active_segment_rolls_after_segment_ms() {
        let dir = tempfile::tempdir().unwrap();
        let (env, clock) = env_at(10_000);
        let conf = LogConfig {
            segment_ms: 5_000,
            segment_bytes: 1 << 20,
            ..config()
        };
        let mut log = Log::open_in(&env, dir.path(), conf, true).unwrap();
        assert!(
            !log.roll_if_idle(100_000).unwrap(),
            "empty segments never roll"
        );
        fill(&mut log, 2, 10_000);
        assert!(!log.roll_if_idle(14_000).unwrap());
        assert!(log.roll_if_idle(15_003).unwrap());
        assert_eq!(log.segment_base_offsets(), vec![0, 6]);
        // An append whose timestamp is segment.ms past the first batch rolls.
        clock.set(20_000);
        fill(&mut log, 1, 20_000);
        fill(&mut log, 1, 25_001);
        assert_eq!(log.segment_base_offsets(), vec![0, 6, 9]);
    }

    #[test]
    fn segment_jitter_rolls_each_segment_a_little_early() {
        let conf = LogConfig {
            segment_ms: 5_000,
            segment_jitter_ms: 1_000,
            segment_bytes: 1 << 20,
            ..config()
        };
        for draw in [0, 1, 999, 1_000, 123_456_789] {
            let roll_ms = conf.roll_ms(draw);
            assert!((4_001..=5_000).contains(&roll_ms), "{draw}: {roll_ms}");
        }
        // Jitter is bounded by segment.ms itself.
        let wide = LogConfig {
            segment_jitter_ms: 50_000,
            ..conf.clone()
        };
        assert_eq!(wide.roll_ms(4_999), 1);
        assert_eq!(
            LogConfig {
                segment_jitter_ms: 0,
                ..conf.clone()
            }
            .roll_ms(77),
            5_000
        );
        // A log rolls its idle segment at segment.ms less its draw, the
        // same draw every time it is asked, and no later than segment.ms.
        let dir = tempfile::tempdir().unwrap();
        let (env, _clock) = env_at(10_000);
        let mut log = Log::open_in(&env, dir.path(), conf, true).unwrap();
        fill(&mut log, 2, 10_000);
        let roll_ms = log.active_roll_ms();
        assert_eq!(roll_ms, log.active_roll_ms());
        assert!((4_001..=5_000).contains(&roll_ms), "{roll_ms}");
        // The first batch's newest record is at 10_002.
        assert!(!log.roll_if_idle(10_002 + roll_ms).unwrap());
        assert!(log.roll_if_idle(10_002 + roll_ms + 1).unwrap());
    }
}
