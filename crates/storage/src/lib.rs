//! Kafka-format partition logs: segments of v2 record batches with sparse
//! offset and time indexes, crash recovery, leader-epoch checkpoints and
//! idempotent-producer state. No sockets live here; all file-system access
//! goes through the `file` module.

mod error;
mod file;
pub mod index;
pub mod leader_epoch;
pub mod log;
pub mod metrics;
pub mod producer_state;
pub mod segment;

pub use error::{AppendError, StorageError};
pub use index::{OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset};
pub use leader_epoch::{EpochEntry, LeaderEpochFileCache, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
pub use log::{
    delete_dir, remove_dirs_marked_for_deletion, AppendInfo, Log, LogConfig, DELETE_DIR_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT_FILE,
};
pub use producer_state::{BatchMetadata, ProducerStateEntry, ProducerStateManager, SequenceCheck};
pub use segment::LogSegment;
