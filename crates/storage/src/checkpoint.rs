//! `OffsetCheckpointFile`: one offset per partition, in the text format of
//! Kafka's `replication-offset-checkpoint` (high watermarks) and
//! `recovery-point-offset-checkpoint`, one file per data directory.
//!
//! The file holds a version line (`0`), an entry-count line, then one
//! `topic partition offset` line per entry, separated by single spaces.
//! Writes replace the file atomically (temporary file, fsync, rename,
//! directory fsync, as Kafka's `CheckpointFile` does), so a reader sees the
//! old entries or the new ones, never a mix. A missing file reads as no
//! entries; so does an empty one and one with only the version line, which
//! Kafka also accepts (it creates the file empty). Anything else that does
//! not parse, a count that disagrees with the lines, and a partition listed
//! twice (Kafka would keep the last) are refused as corrupt with the line
//! that is wrong: a checkpoint is never half-read or guessed at.

use std::collections::HashMap;
use std::path::Path;

use crate::error::StorageError;
use crate::file::LogEnv;

/// Kafka's name for the high-watermark checkpoint in each data directory.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// The only version of the format.
pub const OFFSET_CHECKPOINT_VERSION: u32 = 0;

/// Reads and writes offset checkpoint files (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct OffsetCheckpointFile;

impl OffsetCheckpointFile {
    /// The entries of the checkpoint at `path`, keyed by (topic,
    /// partition); empty when the file does not exist. A malformed file is
    /// `StorageError::Corrupt` naming the path and the line.
    pub fn read(env: &LogEnv, path: &Path) -> Result<HashMap<(String, i32), i64>, StorageError> {
        let Some(bytes) = env.read_optional(path)? else {
            return Ok(HashMap::new());
        };
        parse(&bytes).map_err(|detail| StorageError::corrupt(path.display().to_string(), detail))
    }

    /// Replaces the checkpoint at `path` with `entries`, atomically, in
    /// the order given. A topic name that the format cannot hold (empty,
    /// or with whitespace) or a partition listed twice is refused before
    /// anything is written.
    pub fn write(
        env: &LogEnv,
        path: &Path,
        entries: &[(String, i32, i64)],
    ) -> Result<(), StorageError> {
        let invalid = |detail: String| {
            StorageError::io(
                format!("write {}", path.display()),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, detail),
            )
        };
        let mut seen = std::collections::HashSet::with_capacity(entries.len());
        let mut text = format!("{OFFSET_CHECKPOINT_VERSION}\n{}\n", entries.len());
        for (topic, partition, offset) in entries {
            if topic.is_empty() || topic.chars().any(char::is_whitespace) {
                return Err(invalid(format!(
                    "topic name {topic:?} cannot be written to an offset checkpoint"
                )));
            }
            if !seen.insert((topic.as_str(), *partition)) {
                return Err(invalid(format!(
                    "partition {topic}-{partition} is listed twice"
                )));
            }
            text.push_str(&format!("{topic} {partition} {offset}\n"));
        }
        env.write_atomically(path, text.as_bytes())
    }
}

/// Parses the whole file; `Err` says which line is wrong and why.
fn parse(bytes: &[u8]) -> Result<HashMap<(String, i32), i64>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut lines = text.lines().enumerate().map(|(i, line)| (i + 1, line));
    let Some((_, version)) = lines.next() else {
        return Ok(HashMap::new());
    };
    if version.trim() != OFFSET_CHECKPOINT_VERSION.to_string() {
        return Err(format!(
            "line 1: unsupported version {version:?} (expected {OFFSET_CHECKPOINT_VERSION})"
        ));
    }
    let Some((_, count)) = lines.next() else {
        return Ok(HashMap::new());
    };
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| format!("line 2: bad entry count {count:?}"))?;
    let mut entries = HashMap::with_capacity(count.min(1 << 16));
    for (number, line) in lines {
        let mut fields = line.split_whitespace();
        let (Some(topic), Some(partition), Some(offset), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(format!(
                "line {number}: expected \"topic partition offset\", found {line:?}"
            ));
        };
        let partition: i32 = partition
            .parse()
            .map_err(|_| format!("line {number}: bad partition in {line:?}"))?;
        let offset: i64 = offset
            .parse()
            .map_err(|_| format!("line {number}: bad offset in {line:?}"))?;
        if entries
            .insert((topic.to_string(), partition), offset)
            .is_some()
        {
            return Err(format!(
                "line {number}: partition {topic}-{partition} is listed twice"
            ));
        }
    }
    if entries.len() != count {
        return Err(format!(
            "line 2: says {count} entries, the file holds {}",
            entries.len()
        ));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::file::ManualClock;
    use crate::sim::SimFileSystem;

    fn entries() -> Vec<(String, i32, i64)> {
        vec![
            ("orders".to_string(), 0, 1_234),
            ("orders".to_string(), 3, 0),
            ("__consumer_offsets".to_string(), 17, 99_999_999_999),
        ]
    }

    #[test]
    fn writes_kafkas_format_and_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::shared_default();
        let path = dir.path().join(REPLICATION_OFFSET_CHECKPOINT_FILE);
        assert!(OffsetCheckpointFile::read(&env, &path).unwrap().is_empty());
        OffsetCheckpointFile::write(&env, &path, &entries()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "0\n3\norders 0 1234\norders 3 0\n__consumer_offsets 17 99999999999\n"
        );
        let read = OffsetCheckpointFile::read(&env, &path).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[&("orders".to_string(), 0)], 1_234);
        assert_eq!(read[&("orders".to_string(), 3)], 0);
        assert_eq!(
            read[&("__consumer_offsets".to_string(), 17)],
            99_999_999_999
        );
        // Rewritten whole, and emptied.
        OffsetCheckpointFile::write(&env, &path, &entries()[..1]).unwrap();
        assert_eq!(OffsetCheckpointFile::read(&env, &path).unwrap().len(), 1);
        OffsetCheckpointFile::write(&env, &path, &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0\n0\n");
        assert!(OffsetCheckpointFile::read(&env, &path).unwrap().is_empty());
        assert!(!dir
            .path()
            .join("replication-offset-checkpoint.tmp")
            .exists());
    }

    #[test]
    fn reads_what_kafka_tolerates() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::shared_default();
        let path = dir.path().join(REPLICATION_OFFSET_CHECKPOINT_FILE);
        for (text, expected) in [
            ("", 0),
            ("0\n", 0),
            ("0\n1\nt 0 5", 1),
            ("0\r\n2\r\nt 0 5\r\nt  1\t6\r\n", 2),
        ] {
            std::fs::write(&path, text).unwrap();
            let read = OffsetCheckpointFile::read(&env, &path).unwrap();
            assert_eq!(read.len(), expected, "{text:?}");
        }
        assert_eq!(
            OffsetCheckpointFile::read(&env, &path).unwrap()[&("t".to_string(), 1)],
            6
        );
    }

    #[test]
    fn a_malformed_checkpoint_is_refused_with_its_path_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::shared_default();
        let path = dir.path().join(REPLICATION_OFFSET_CHECKPOINT_FILE);
        for (text, line) in [
            ("1\n0\n", "line 1"),
            ("0\nx\n", "line 2"),
            ("0\n2\nt 0 5\n", "line 2"),
            ("0\n1\nt 0 5\nt 1 6\n", "line 2"),
            ("0\n1\nt 0\n", "line 3"),
            ("0\n1\nt 0 5 7\n", "line 3"),
            ("0\n2\nt 0 5\nt x 6\n", "line 4"),
            ("0\n1\nt 0 five\n", "line 3"),
            ("0\n2\nt 0 5\n\n", "line 4"),
            ("0\n2\nt 0 5\nt 0 6\n", "line 4"),
        ] {
            std::fs::write(&path, text).unwrap();
            match OffsetCheckpointFile::read(&env, &path) {
                Err(StorageError::Corrupt { file, detail }) => {
                    assert_eq!(file, path.display().to_string(), "{text:?}");
                    assert!(detail.starts_with(line), "{text:?}: {detail}");
                }
                other => panic!("{text:?} read as {other:?}"),
            }
        }
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            OffsetCheckpointFile::read(&env, &path),
            Err(StorageError::Corrupt { .. })
        ));
    }

    #[test]
    fn entries_the_format_cannot_hold_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::shared_default();
        let path = dir.path().join(REPLICATION_OFFSET_CHECKPOINT_FILE);
        OffsetCheckpointFile::write(&env, &path, &entries()).unwrap();
        for bad in [
            vec![("my topic".to_string(), 0, 1)],
            vec![(String::new(), 0, 1)],
            vec![("t".to_string(), 0, 1), ("t".to_string(), 0, 2)],
        ] {
            assert!(matches!(
                OffsetCheckpointFile::write(&env, &path, &bad),
                Err(StorageError::Io { .. })
            ));
        }
        assert_eq!(OffsetCheckpointFile::read(&env, &path).unwrap().len(), 3);
    }

    #[test]
    fn a_written_checkpoint_survives_a_power_cut() {
        let fs = Arc::new(SimFileSystem::new(1));
        let env = LogEnv::new(fs.clone(), 4, Arc::new(ManualClock::new(0)));
        let dir = Path::new("/data");
        env.create_dir_all(dir).unwrap();
        let path = dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE);
        OffsetCheckpointFile::write(&env, &path, &entries()).unwrap();
        fs.power_cut(true);
        let read = OffsetCheckpointFile::read(&env, &path).unwrap();
        assert_eq!(read.len(), 3);
    }
}
