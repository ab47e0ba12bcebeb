//! `partition.metadata`: which topic a partition directory belongs to.
//!
//! A directory's name says only `<topic>-<partition>`, and a topic can be
//! deleted and created again under the same name. The file records the
//! topic id in Kafka's format (`version: 0`, then `topic_id: <base64>`), so
//! a directory that an earlier topic of the same name left behind (say, a
//! crash between a deletion's metadata commit and the rename of its
//! directories, or a broker that was away while a topic was deleted and
//! created again) is never taken for the new topic's. It is written when
//! the broker first opens the partition, by a rename but without fsyncs
//! (two per partition would make creating 10,000 partitions take seconds),
//! and made durable ([`sync_topic_id`]) before the first record is
//! appended to the log, as Kafka flushes it before any log data: records
//! that survive a power cut always survive with the file that names their
//! topic. A file read back at start-up was written by an earlier process,
//! perhaps without fsyncs; the replica manager makes it durable with one
//! `syncfs` before it trusts it. A directory without the file (or with an
//! empty one, left by a power cut before any append) is treated as one
//! from before the file existed, and holds no records that a power cut
//! kept.

use std::path::Path;

use tarn_protocol::codec::Uuid;

use crate::error::StorageError;
use crate::file::LogEnv;

pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// The topic id recorded in `dir`, or `None` when the file is missing
/// (a new directory, or one written before the file existed).
pub fn read_topic_id(env: &LogEnv, dir: &Path) -> Result<Option<Uuid>, StorageError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let Some(bytes) = env.read_optional(&path)? else {
        return Ok(None);
    };
    parse(&bytes)
        .map(Some)
        .map_err(|detail| StorageError::corrupt(path.display().to_string(), detail))
}

/// Records `topic_id` in `dir`.
pub fn write_topic_id(env: &LogEnv, dir: &Path, topic_id: Uuid) -> Result<(), StorageError> {
    let contents = format!("version: 0\ntopic_id: {}\n", topic_id.to_base64());
    env.write_without_sync(&dir.join(PARTITION_METADATA_FILE), contents.as_bytes())
}

/// Makes the file [`write_topic_id`] wrote in `dir` durable: fsyncs it,
/// then the directory that holds its name.
pub fn sync_topic_id(env: &LogEnv, dir: &Path) -> Result<(), StorageError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    env.sync_file(&path)?;
    env.sync_dir(dir)
}

fn parse(bytes: &[u8]) -> Result<Uuid, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
    let mut lines = text.lines();
    match lines.next().map(str::trim) {
        Some("version: 0") => {}
        other => return Err(format!("expected `version: 0`, found {other:?}")),
    }
    let id = lines
        .next()
        .and_then(|line| line.trim().strip_prefix("topic_id:"))
        .ok_or("expected a `topic_id:` line")?
        .trim();
    Uuid::from_base64(id).ok_or_else(|| format!("bad topic id {id:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_did_not_write() {
        let tmp = tempfile::tempdir().unwrap();
        let env = LogEnv::shared_default();
        assert_eq!(read_topic_id(&env, tmp.path()).unwrap(), None);
        let id = Uuid(*b"topic id bytes!!");
        write_topic_id(&env, tmp.path(), id).unwrap();
        assert_eq!(read_topic_id(&env, tmp.path()).unwrap(), Some(id));
        let text = std::fs::read_to_string(tmp.path().join(PARTITION_METADATA_FILE)).unwrap();
        assert_eq!(text, format!("version: 0\ntopic_id: {id}\n"));

        for bad in [
            "",
            "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",
            "version: 0\n",
            "version: 0\ntopic_id: xyz\n",
        ] {
            std::fs::write(tmp.path().join(PARTITION_METADATA_FILE), bad).unwrap();
            let err = read_topic_id(&env, tmp.path()).unwrap_err();
            assert!(
                matches!(err, StorageError::Corrupt { .. }),
                "{bad:?}: {err}"
            );
        }
    }
}
