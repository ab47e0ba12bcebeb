//! The metadata log on local disk (a quorum of one).
//!
//! Each entry is `length u32 | crc32c u32 | JSON record`, big-endian. An
//! append is fsynced before it returns: metadata changes are rare and must
//! not be lost. On replay, a torn or corrupt tail (a crash mid-append) is
//! cut off; every entry before it is kept.

use std::path::Path;

use tarn_storage::file::SegmentFile;
use tarn_storage::{LogEnv, StorageError};

use super::records::MetadataRecord;

#[derive(Debug, thiserror::Error)]
pub enum MetadataLogError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("encode metadata record: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Where metadata records are made durable. A Raft quorum implements this
/// in a cluster; tests may implement it in memory.
pub trait MetadataLog: Send {
    fn replay(&self) -> Result<Vec<MetadataRecord>, MetadataLogError>;
    fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataLogError>;
}

/// The metadata log in one file, through the storage crate's file system
/// (the real one, or a simulated one that can lose power).
pub struct FileMetadataLog {
    file: SegmentFile,
}

const MAX_ENTRY_BYTES: usize = 16 << 20;

impl FileMetadataLog {
    /// Opens (creating if needed) `dir/metadata.log`, truncating a torn tail.
    pub fn open(env: &LogEnv, dir: &Path) -> Result<Self, MetadataLogError> {
        env.create_dir_all(dir)?;
        let path = dir.join("metadata.log");
        let mut file = SegmentFile::open(env, &path)?;
        let data = read_all(&file)?;
        let (_, valid_len) = parse_entries(&data);
        if valid_len < data.len() {
            tracing::warn!(
                path = %path.display(),
                valid_len,
                file_len = data.len(),
                "truncating torn tail of the metadata log"
            );
            file.truncate(valid_len as u64)?;
            file.sync()?;
        }
        Ok(FileMetadataLog { file })
    }
}

fn read_all(file: &SegmentFile) -> Result<Vec<u8>, StorageError> {
    let mut data = vec![0u8; file.size() as usize];
    file.read_at(0, &mut data)?;
    Ok(data)
}

/// Parses entries, stopping at the first torn or corrupt one. Returns the
/// records and the length of the valid prefix.
fn parse_entries(data: &[u8]) -> (Vec<MetadataRecord>, usize) {
    let mut records = Vec::new();
    let mut pos = 0;
    while data.len() - pos >= 8 {
        let len = u32::from_be_bytes(data[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(data[pos + 4..pos + 8].try_into().expect("4 bytes"));
        if len > MAX_ENTRY_BYTES || data.len() - pos - 8 < len {
            break;
        }
        let body = &data[pos + 8..pos + 8 + len];
        if crc32c::crc32c(body) != crc {
            break;
        }
        match serde_json::from_slice(body) {
            Ok(record) => records.push(record),
            Err(_) => break,
        }
        pos += 8 + len;
    }
    (records, pos)
}

impl MetadataLog for FileMetadataLog {
    fn replay(&self) -> Result<Vec<MetadataRecord>, MetadataLogError> {
        Ok(parse_entries(&read_all(&self.file)?).0)
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataLogError> {
        let mut buf = Vec::new();
        for record in records {
            let body = serde_json::to_vec(record)?;
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
            buf.extend_from_slice(&body);
        }
        let before = self.file.size();
        // A failed write is cut back by `append` itself.
        self.file.append(&buf)?;
        if let Err(e) = self.file.sync() {
            // Not known to be on disk: cut the entry off so that a partial
            // one cannot hide later ones from replay.
            if let Err(undo) = self.file.truncate(before) {
                tracing::error!(path = %self.file.path().display(), error = %undo, "undo a failed metadata append");
            }
            return Err(e.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str) -> MetadataRecord {
        MetadataRecord::Topic {
            name: name.into(),
            topic_id: [1; 16],
        }
    }

    #[test]
    fn replays_what_was_appended_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let env = LogEnv::shared_default();
        {
            let mut log = FileMetadataLog::open(&env, dir.path()).unwrap();
            log.append(&[topic("a"), topic("b")]).unwrap();
        }
        let path = dir.path().join("metadata.log");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, &[0, 0, 0, 50, 1, 2]).unwrap();
        drop(f);
        let mut log = FileMetadataLog::open(&env, dir.path()).unwrap();
        assert_eq!(log.replay().unwrap(), vec![topic("a"), topic("b")]);
        log.append(&[topic("c")]).unwrap();
        assert_eq!(log.replay().unwrap().len(), 3);
    }

    #[test]
    fn corrupt_entry_ends_the_replay() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = FileMetadataLog::open(&LogEnv::shared_default(), dir.path()).unwrap();
        log.append(&[topic("a"), topic("b")]).unwrap();
        let path = dir.path().join("metadata.log");
        let mut data = std::fs::read(&path).unwrap();
        let last = data.len() - 2;
        data[last] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        assert_eq!(log.replay().unwrap(), vec![topic("a")]);
    }
}
