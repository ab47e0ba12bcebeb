//! `LeaderEpochFileCache`: which leader epoch started at which offset, kept
//! in Kafka's `leader-epoch-checkpoint` text file in the partition directory.
//!
//! The file holds a version line ("0"), an entry-count line, then one
//! "epoch startOffset" line per entry. Invariant: epochs and start offsets
//! both strictly increase through the entries. Every change is written to
//! the file atomically (temp file, fsync, rename) before it is visible, so
//! the checkpoint is never torn.

use std::path::{Path, PathBuf};

use tracing::warn;

use crate::error::StorageError;
use crate::file::LogEnv;

pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;
const CHECKPOINT_VERSION: u32 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Debug)]
pub struct LeaderEpochFileCache {
    env: LogEnv,
    path: PathBuf,
    entries: Vec<EpochEntry>,
}

impl LeaderEpochFileCache {
    /// Loads `<dir>/leader-epoch-checkpoint`, or starts empty without one.
    pub fn open(env: &LogEnv, dir: &Path) -> Result<LeaderEpochFileCache, StorageError> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let entries = match env.read_optional(&path)? {
            Some(bytes) => parse_checkpoint(&bytes)
                .map_err(|detail| StorageError::corrupt(path.display().to_string(), detail))?,
            None => Vec::new(),
        };
        Ok(LeaderEpochFileCache {
            env: env.clone(),
            path,
            entries,
        })
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The epoch that wrote `offset`: the latest one starting at or before
    /// it; `None` before the first entry.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .take_while(|e| e.start_offset <= offset)
            .last()
            .map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`, if `epoch` is newer
    /// than the latest known; an older or equal epoch changes nothing.
    /// Returns whether the cache (and file) changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool, StorageError> {
        if epoch < 0 {
            return Ok(false);
        }
        if let Some(latest) = self.entries.last() {
            if epoch <= latest.epoch {
                if epoch < latest.epoch {
                    warn!(epoch, latest = latest.epoch, file = %self.path.display(), "ignoring append with an older leader epoch");
                }
                return Ok(false);
            }
            if start_offset < latest.start_offset {
                return Err(StorageError::corrupt(
                    self.path.display().to_string(),
                    format!(
                        "epoch {epoch} would start at {start_offset}, before epoch {} at {}",
                        latest.epoch, latest.start_offset
                    ),
                ));
            }
        }
        let mut entries = self.entries.clone();
        // An epoch that started where the previous one did replaces it: the
        // previous epoch never held a record.
        if entries
            .last()
            .is_some_and(|e| e.start_offset == start_offset)
        {
            entries.pop();
        }
        entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        self.write(entries)?;
        Ok(true)
    }

    /// Drops entries that start at or after `end_offset` (after the log was
    /// truncated to end there), as Kafka's `truncateFromEnd` does.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<(), StorageError> {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        let entries = self.entries[..keep].to_vec();
        self.write(entries)
    }

    /// Drops every entry (Kafka's `clearAndFlush`), for a log that starts
    /// over empty.
    pub fn clear(&mut self) -> Result<(), StorageError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        self.write(Vec::new())
    }

    /// Kafka's OffsetForLeaderEpoch answer: the largest epoch <= `requested`
    /// and the start offset of the next higher epoch, or `log_end_offset`
    /// when `requested` is the latest epoch. An epoch above every known one
    /// (or an empty cache) gives (-1, -1); an epoch below every known one
    /// gives (requested, first start offset), exactly as Kafka does.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let Some(next) = self.entries.get(higher) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        match higher.checked_sub(1) {
            Some(floor) => (self.entries[floor].epoch, next.start_offset),
            None => (requested, next.start_offset),
        }
    }

    /// [`LeaderEpochFileCache::end_offset_for`] on the leader of epoch
    /// `current`, which records an epoch only with its first append: until
    /// then the answer counts `current` as starting at the log end, as
    /// Kafka's leader, which records its epoch when elected, answers.
    pub fn end_offset_for_leader(
        &self,
        requested: i32,
        log_end_offset: i64,
        current: i32,
    ) -> (i32, i64) {
        if current < 0 || self.latest_epoch().is_some_and(|e| e >= current) {
            return self.end_offset_for(requested, log_end_offset);
        }
        if requested == UNDEFINED_EPOCH || requested > current {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if requested == current {
            return (current, log_end_offset);
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let next = self
            .entries
            .get(higher)
            .map_or(log_end_offset, |e| e.start_offset);
        match higher.checked_sub(1) {
            Some(floor) => (self.entries[floor].epoch, next),
            None => (requested, next),
        }
    }

    fn write(&mut self, entries: Vec<EpochEntry>) -> Result<(), StorageError> {
        let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
        for e in &entries {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        self.env.write_atomically(&self.path, text.as_bytes())?;
        self.entries = entries;
        Ok(())
    }
}

fn parse_checkpoint(bytes: &[u8]) -> Result<Vec<EpochEntry>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
    let mut lines = text.lines();
    let version = lines.next().ok_or("missing version line")?;
    if version.trim() != CHECKPOINT_VERSION.to_string() {
        return Err(format!("unsupported version {version:?}"));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("missing or bad entry count")?;
    let mut entries: Vec<EpochEntry> = Vec::with_capacity(count.min(1024));
    for i in 0..count {
        let line = lines
            .next()
            .ok_or(format!("expected {count} entries, found {i}"))?;
        let mut fields = line.split_whitespace();
        let (Some(epoch), Some(offset), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(format!("bad entry line {line:?}"));
        };
        let entry = EpochEntry {
            epoch: epoch
                .parse()
                .map_err(|_| format!("bad epoch in {line:?}"))?,
            start_offset: offset
                .parse()
                .map_err(|_| format!("bad offset in {line:?}"))?,
        };
        if let Some(prev) = entries.last() {
            if entry.epoch <= prev.epoch || entry.start_offset < prev.start_offset {
                return Err(format!(
                    "entry {line:?} does not follow {} {}",
                    prev.epoch, prev.start_offset
                ));
            }
        }
        entries.push(entry);
    }
    if lines.any(|l| !l.trim().is_empty()) {
        return Err("more entries than the count says".to_string());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_end_offset_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochFileCache::open(&LogEnv::shared_default(), dir.path()).unwrap();
        assert_eq!(cache.epoch_for_offset(0), None);
        assert_eq!(
            cache.end_offset_for(0, 10),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        assert!(cache.assign(2, 0).unwrap());
        assert!(!cache.assign(2, 5).unwrap());
        assert!(!cache.assign(1, 6).unwrap());
        assert!(cache.assign(4, 10).unwrap());
        assert!(cache.assign(7, 25).unwrap());
        assert_eq!(cache.latest_epoch(), Some(7));
        assert_eq!(
            [0, 9, 10, 24, 25, 99].map(|o| cache.epoch_for_offset(o)),
            [2, 2, 4, 4, 7, 7].map(Some)
        );

        assert_eq!(cache.end_offset_for(7, 40), (7, 40));
        assert_eq!(cache.end_offset_for(4, 40), (4, 25));
        assert_eq!(cache.end_offset_for(5, 40), (4, 25));
        assert_eq!(cache.end_offset_for(3, 40), (2, 10));
        assert_eq!(cache.end_offset_for(1, 40), (1, 0));
        assert_eq!(
            cache.end_offset_for(8, 40),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        assert_eq!(
            cache.end_offset_for(UNDEFINED_EPOCH, 40),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );

        let text = std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
        assert_eq!(text, "0\n3\n2 0\n4 10\n7 25\n");
        let reloaded = LeaderEpochFileCache::open(&LogEnv::shared_default(), dir.path()).unwrap();
        assert_eq!(reloaded.entries(), cache.entries());

        cache.truncate_from_end(10).unwrap();
        assert_eq!(
            cache.entries(),
            &[EpochEntry {
                epoch: 2,
                start_offset: 0
            }]
        );
        assert_eq!(
            LeaderEpochFileCache::open(&LogEnv::shared_default(), dir.path())
                .unwrap()
                .entries(),
            cache.entries()
        );
    }

    #[test]
    fn a_leader_that_has_not_written_in_its_epoch_counts_it_from_the_log_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochFileCache::open(&LogEnv::shared_default(), dir.path()).unwrap();
        // Elected in epoch 1 of an empty log, nothing written yet: Kafka's
        // cache would hold (1, 0).
        assert_eq!(cache.end_offset_for_leader(0, 0, 1), (0, 0));
        assert_eq!(cache.end_offset_for_leader(1, 0, 1), (1, 0));
        assert_eq!(
            cache.end_offset_for_leader(2, 0, 1),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        // Epochs 2 (from 0) and 4 (from 10) written, led now in epoch 6
        // with the log ending at 15.
        assert!(cache.assign(2, 0).unwrap());
        assert!(cache.assign(4, 10).unwrap());
        let answers = [
            (1, (1, 0)),
            (2, (2, 10)),
            (3, (2, 10)),
            (4, (4, 15)),
            (5, (4, 15)),
        ];
        for (requested, answer) in answers {
            assert_eq!(
                cache.end_offset_for_leader(requested, 15, 6),
                answer,
                "{requested}"
            );
        }
        assert_eq!(cache.end_offset_for_leader(6, 15, 6), (6, 15));
        // Once it writes in its epoch, the cache answers as it is.
        assert!(cache.assign(6, 15).unwrap());
        assert_eq!(
            cache.end_offset_for_leader(4, 20, 6),
            cache.end_offset_for(4, 20)
        );
        assert_eq!(cache.end_offset_for_leader(6, 20, 6), (6, 20));
    }

    #[test]
    fn corrupt_checkpoint_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE);
        for bad in ["1\n0\n", "0\n2\n1 0\n", "0\n2\n3 0\n2 5\n", "0\n1\nx 0\n"] {
            std::fs::write(&path, bad).unwrap();
            assert!(
                LeaderEpochFileCache::open(&LogEnv::shared_default(), dir.path()).is_err(),
                "{bad:?} accepted"
            );
        }
    }
}
