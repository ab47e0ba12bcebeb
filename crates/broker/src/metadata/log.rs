//! The metadata log on local disk (a quorum of one).
//!
//! Each entry is `length u32 | crc32c u32 | JSON record`, big-endian. An
//! append is fsynced before it returns: metadata changes are rare and must
//! not be lost. On replay, a torn or corrupt tail (a crash mid-append) is
//! cut off; every entry before it is kept.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tarn_storage::metrics::timed_fsync;

use super::records::MetadataRecord;

#[derive(Debug, thiserror::Error)]
pub enum MetadataLogError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("encode metadata record: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Where metadata records are made durable. A Raft quorum implements this
/// in a cluster; tests may implement it in memory.
pub trait MetadataLog: Send {
    fn replay(&self) -> Result<Vec<MetadataRecord>, MetadataLogError>;
    fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataLogError>;
}

pub struct FileMetadataLog {
    path: PathBuf,
    file: File,
}

const MAX_ENTRY_BYTES: usize = 16 << 20;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> MetadataLogError {
    let context = context.into();
    move |source| MetadataLogError::Io { context, source }
}

impl FileMetadataLog {
    /// Opens (creating if needed) `dir/metadata.log`, truncating a torn tail.
    pub fn open(dir: &Path) -> Result<Self, MetadataLogError> {
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        let path = dir.join("metadata.log");
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io(format!("open {}", path.display())))?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(io(format!("read {}", path.display())))?;
        let (_, valid_len) = parse_entries(&data);
        if valid_len < data.len() {
            tracing::warn!(
                path = %path.display(),
                valid_len,
                file_len = data.len(),
                "truncating torn tail of the metadata log"
            );
            file.set_len(valid_len as u64)
                .map_err(io(format!("truncate {}", path.display())))?;
            timed_fsync(|| file.sync_all()).map_err(io(format!("fsync {}", path.display())))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(io(format!("seek {}", path.display())))?;
        Ok(FileMetadataLog { path, file })
    }
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
        let data =
            std::fs::read(&self.path).map_err(io(format!("read {}", self.path.display())))?;
        Ok(parse_entries(&data).0)
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataLogError> {
        let mut buf = Vec::new();
        for record in records {
            let body = serde_json::to_vec(record)?;
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
            buf.extend_from_slice(&body);
        }
        let before = self
            .file
            .metadata()
            .map_err(io(format!("stat {}", self.path.display())))?
            .len();
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| timed_fsync(|| self.file.sync_data()));
        if let Err(e) = written {
            // A partial entry would hide every later one from replay: cut
            // the file back to where this append started.
            if let Err(undo) = self.file.set_len(before) {
                tracing::error!(path = %self.path.display(), error = %undo, "undo a failed metadata append");
            }
            return Err(io(format!("append to {}", self.path.display()))(e));
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
        {
            let mut log = FileMetadataLog::open(dir.path()).unwrap();
            log.append(&[topic("a"), topic("b")]).unwrap();
        }
        let path = dir.path().join("metadata.log");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0, 0, 0, 50, 1, 2]).unwrap();
        drop(f);
        let mut log = FileMetadataLog::open(dir.path()).unwrap();
        assert_eq!(log.replay().unwrap(), vec![topic("a"), topic("b")]);
        log.append(&[topic("c")]).unwrap();
        assert_eq!(log.replay().unwrap().len(), 3);
    }

    #[test]
    fn corrupt_entry_ends_the_replay() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = FileMetadataLog::open(dir.path()).unwrap();
        log.append(&[topic("a"), topic("b")]).unwrap();
        let path = dir.path().join("metadata.log");
        let mut data = std::fs::read(&path).unwrap();
        let last = data.len() - 2;
        data[last] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        assert_eq!(log.replay().unwrap(), vec![topic("a")]);
    }
}
