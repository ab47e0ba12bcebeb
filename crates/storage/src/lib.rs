//! Kafka-format partition logs: segments of v2 record batches with sparse
//! offset and time indexes, crash recovery, leader-epoch checkpoints,
//! idempotent-producer state, what a follower replica's log needs (appends
//! of a leader's batches, truncation), and the per-directory offset
//! checkpoint files. No sockets live here; all file-system access
//! goes through the `file` module's `FileSystem` trait, so tests can inject
//! faults.

pub mod checkpoint;
pub mod cleaner;
mod error;
pub mod file;
pub mod flush;
pub mod index;
pub mod leader_epoch;
pub mod log;
pub mod log_config;
pub mod log_validator;
pub mod metrics;
pub mod partition_metadata;
pub mod producer_state;
pub mod retention;
pub mod segment;
pub mod sim;

pub use checkpoint::{OffsetCheckpointFile, REPLICATION_OFFSET_CHECKPOINT_FILE};
pub use cleaner::{CleanStats, CleanerConfig, CleaningPlan, Compressor, Decompressor};
pub use error::{AppendError, RecordError, StorageError};
pub use file::{Clock, FileCache, FileSystem, LogEnv, ManualClock, OsFileSystem, SystemClock};
pub use flush::{
    unflushed_marker_name, FlushCallback, FlushTarget, GroupCommit, LogDurability, RollFlush,
    RollFlusher,
};
pub use index::{OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset};
pub use leader_epoch::{EpochEntry, LeaderEpochFileCache, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
pub use log::{remove_dirs_marked_for_deletion, AppendInfo, Log, DELETE_DIR_SUFFIX};
pub use log_config::{CleanupPolicy, LogConfig};
pub use producer_state::{BatchMetadata, ProducerStateEntry, ProducerStateManager, SequenceCheck};
pub use segment::{LogSegment, SegmentVerifier};
