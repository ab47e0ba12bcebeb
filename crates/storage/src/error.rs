//! Error types of the storage crate.
//!
//! `StorageError` is what the disk or our own files can go wrong with; every
//! I/O error carries a short context naming the operation and the file.
//! `AppendError` is what a produce can be refused for, one variant per Kafka
//! error code the broker will send back, plus the two ways a follower's
//! append of its leader's batches can be refused, which stay in the broker.

use std::io;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum StorageError {
    /// An operating-system I/O error; `context` says what we were doing, e.g.
    /// "open segment 00000000000000001000.log".
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A file of ours holds bytes we cannot make sense of.
    #[error("corrupt {file}: {detail}")]
    Corrupt { file: String, detail: String },
    /// A fetch or lookup asked for an offset outside [log_start, log_end].
    #[error("offset {offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    #[error("invalid log config: {0}")]
    InvalidConfig(String),
    /// An fsync of this log failed earlier, so nothing written since its
    /// last good fsync can be called durable: the log takes no writes
    /// until a restart recovers it (see the `flush` module).
    #[error(
        "log {dir} is offline after a failed fsync ({cause}); restart the broker to recover it"
    )]
    Offline { dir: String, cause: String },
}

impl StorageError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> StorageError {
        StorageError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corrupt(file: impl Into<String>, detail: impl Into<String>) -> StorageError {
        StorageError::Corrupt {
            file: file.into(),
            detail: detail.into(),
        }
    }

    /// Whether the device failed (EIO and its kin), as opposed to bytes
    /// that do not make sense, a file that went away (a segment deleted
    /// while it was being read) or a process limit: what makes Kafka take
    /// a log directory offline, and a broker in a cluster stop.
    pub fn is_device_failure(&self) -> bool {
        match self {
            StorageError::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::EIO | libc::ENXIO | libc::ENODEV | libc::EUCLEAN)
            ),
            StorageError::Offline { .. } => true,
            _ => false,
        }
    }
}

/// One refused record: its index in the batch and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

/// Why `Log::append` refused a produce. Nothing was written when this is
/// returned, except that `Storage` errors may leave a new empty segment.
#[derive(Debug, Error)]
pub enum AppendError {
    /// Kafka CORRUPT_MESSAGE: bad lengths, CRC mismatch, trailing bytes.
    #[error("corrupt message: {0}")]
    CorruptMessage(String),
    /// Kafka MESSAGE_TOO_LARGE (RecordTooLarge / RecordBatchTooLarge).
    #[error("message too large: {0}")]
    MessageTooLarge(String),
    /// Kafka UNSUPPORTED_FOR_MESSAGE_FORMAT: magic other than 2.
    #[error("unsupported record batch magic (only v2 is supported)")]
    UnsupportedMagic,
    /// Kafka OUT_OF_ORDER_SEQUENCE_NUMBER.
    #[error("out of order sequence: {0}")]
    OutOfOrderSequence(String),
    /// Kafka INVALID_PRODUCER_EPOCH (PRODUCER_FENCED for transactional producers).
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    /// Kafka INVALID_RECORD.
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Some records of a batch were refused (a keyless record on a
    /// compacted topic, a timestamp out of range): Kafka INVALID_TIMESTAMP
    /// when any timestamp was, else INVALID_RECORD, with each refused
    /// record's index for Produce v8+'s `record_errors`.
    #[error("{message}")]
    RecordErrors {
        invalid_timestamp: bool,
        message: String,
        errors: Vec<RecordError>,
    },
    /// Replication only (never sent to a client): a leader's batches start
    /// below this replica's log end offset (Kafka's
    /// `UnexpectedAppendOffsetException`). `last_offset` is the last offset
    /// of the whole append, so a fetcher can tell a log start offset that
    /// falls inside a batch (then Kafka truncates fully and starts at
    /// `first_offset`) from a real divergence.
    #[error("unexpected append offset: the first offset {first_offset} (append up to {last_offset}) is below the log end offset {log_end_offset}")]
    UnexpectedAppendOffset {
        first_offset: i64,
        last_offset: i64,
        log_end_offset: i64,
    },
    /// Replication only: a leader's batches overlap or go backwards
    /// (Kafka's `OffsetsOutOfOrderException`).
    #[error("out of order offsets: {0}")]
    OffsetsOutOfOrder(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failing_device_is_a_device_failure() {
        let io = |e: io::Error| StorageError::io("read segment", e);
        assert!(io(io::Error::from_raw_os_error(libc::EIO)).is_device_failure());
        assert!(io(io::Error::from_raw_os_error(libc::EUCLEAN)).is_device_failure());
        for not in [
            io(io::Error::from_raw_os_error(libc::ENOENT)),
            io(io::Error::from_raw_os_error(libc::EMFILE)),
            io(io::Error::new(io::ErrorKind::UnexpectedEof, "short")),
            StorageError::corrupt("00.log", "CRC mismatch"),
        ] {
            assert!(!not.is_device_failure(), "{not}");
        }
    }
}
