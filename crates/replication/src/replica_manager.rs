//! ReplicaManager: the partitions this broker hosts and their logs.
//!
//! It follows the metadata image: `sync` compares the new image (and the
//! effective broker config) with the last ones it applied and touches only
//! the topics that changed (found by pointer equality of their
//! `Arc<TopicInfo>`), or every topic when the broker config changed: it
//! opens a log for every new partition assigned here, hands changed
//! settings to live logs, and retires the logs of topics that are gone. So
//! a commit costs in proportion to what it changed, not to the number of
//! partitions. A partition a reassignment moved off this broker (no longer
//! among its replicas) is retired like a deleted one. Appends and reads go
//! through a `Partition`, which checks
//! the leader epoch a client believes in against its own, and every
//! append bumps `data_version` so long-polling fetches wake on new data.
//!
//! A deleted partition's directory is renamed to Kafka's
//! `<topic>-<partition>.<id>-delete` at once and removed by the
//! `LogDeleter` after `file.delete.delay.ms`. Each directory records its
//! topic id (`partition.metadata`), so one an earlier topic of the same name
//! left behind is deleted rather than reopened, and at start-up directories
//! that no partition owns are set aside as `-stray`, not served.
//!
//! A partition also applies its topic's `compression.type` on append:
//! batches already in the topic's codec (or any codec when the topic says
//! `producer`) go to the log as received; others are recompressed first,
//! with decompression capped at the topic's `max.message.bytes`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use tarn_protocol::compression::CompressionError;
use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::record_batch::{
    parse_header, recompress_batch_at, validate_batch, BatchError, Compression, TimestampType,
};
use tarn_protocol::records::FileRegion;
use tarn_protocol::Uuid;
use tarn_storage::partition_metadata::{read_topic_id, sync_topic_id, write_topic_id};
use tarn_storage::{
    AppendError, AppendInfo, CleanupPolicy, FlushTarget, GroupCommit, Log, LogConfig, LogEnv,
    OffsetCheckpointFile, RecordError, RollFlusher, SegmentVerifier, StorageError,
    DELETE_DIR_SUFFIX, REPLICATION_OFFSET_CHECKPOINT_FILE,
};

use tarn_config::BrokerConfig;
use tarn_metadata::{MetadataImage, PartitionInfo, TopicInfo};

use crate::blocking::off_async_workers;
use crate::durability::{AppendCompletion, PartitionDurability};
use crate::episode::{FailureEpisode, StorageFailures};
use crate::isr::ReplicaSet;
use crate::log_deleter::LogDeleter;
pub use crate::roles::ReadLimit;

pub type TopicPartition = (String, i32);

/// The hosted partitions by topic name, then partition index: looked up
/// with a borrowed name on every produce and fetch, so without allocating.
#[derive(Default)]
struct PartitionMap(HashMap<String, HashMap<i32, Arc<Partition>>>);

impl PartitionMap {
    fn get(&self, topic: &str, partition: i32) -> Option<&Arc<Partition>> {
        self.0.get(topic)?.get(&partition)
    }

    fn insert(&mut self, partition: Arc<Partition>) -> Option<Arc<Partition>> {
        self.0
            .entry(partition.topic.clone())
            .or_default()
            .insert(partition.index, partition)
    }

    fn remove(&mut self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let partitions = self.0.get_mut(topic)?;
        let removed = partitions.remove(&partition);
        if partitions.is_empty() {
            self.0.remove(topic);
        }
        removed
    }

    fn values(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.0.values().flat_map(HashMap::values)
    }

    fn of_topic(&self, topic: &str) -> impl Iterator<Item = &Arc<Partition>> {
        self.0.get(topic).into_iter().flat_map(HashMap::values)
    }

    fn drain(&mut self) -> Vec<Arc<Partition>> {
        self.0.drain().flat_map(|(_, p)| p.into_values()).collect()
    }
}

/// What this broker is for a partition it hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Takes produce requests and serves consumers, up to the high watermark.
    Leader,
    /// Holds a copy of the leader's log (follower fetching lands with
    /// replication); clients are sent to the leader.
    Follower,
}

/// See [`ReplicaManager::append_notifier`].
#[derive(Clone)]
pub struct AppendNotifier(watch::Sender<u64>);

impl AppendNotifier {
    /// Wakes every fetch waiting for new data: followers replicating what
    /// was appended, and consumers long-polling for it.
    pub fn notify(&self) {
        self.0.send_modify(|v| *v += 1);
    }
}

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    /// This broker's node id.
    pub(crate) local_node: i32,
    /// The partition's leader as of the last metadata sync (-1: none).
    pub(crate) leader: AtomicI32,
    pub(crate) leader_epoch: AtomicI32,
    /// The offset below which every in-sync replica has the records:
    /// what consumers may read and what `LATEST` answers (see `roles`).
    pub(crate) high_watermark: AtomicI64,
    /// Woken whenever the high watermark moves or leadership changes.
    pub(crate) hw_changes: watch::Sender<i64>,
    /// This broker's log end offset, mirrored outside the log's lock.
    pub(crate) log_end_offset: AtomicI64,
    /// The log end offset when this broker became leader in its epoch.
    pub(crate) leader_epoch_start_offset: AtomicI64,
    /// The leader epoch in which this broker's current run of leadership
    /// began: it stays across epochs that keep the same leader (a
    /// reassignment that drops a replica moves the epoch), so a produce
    /// appended in an earlier epoch of the run may still be acknowledged.
    pub(crate) led_since_epoch: AtomicI32,
    /// The topic's `min.insync.replicas`.
    pub(crate) min_insync_replicas: AtomicI32,
    /// Replicas, ISR and the followers' progress (see `isr`).
    pub(crate) replica_set: Mutex<ReplicaSet>,
    /// The topic's `file.delete.delay.ms` as of the last sync.
    file_delete_delay_ms: AtomicI64,
    /// The topic's `compression.type` as a codec id, or [`KEEP_PRODUCER_CODEC`].
    compression: AtomicU8,
    /// The topic's `compression.<codec>.level` for that codec, or
    /// [`DEFAULT_LEVEL`].
    compression_level: AtomicI32,
    /// The topic's `max.message.bytes`, which also caps decompression.
    max_message_bytes: AtomicU32,
    /// Appends, and reads, failing on storage (a full disk, say): the cause
    /// is logged once and the next success is logged as recovery.
    pub(crate) writes_failing: FailureEpisode,
    reads_failing: FailureEpisode,
    /// The broker's, told of each failure as it starts.
    storage_failures: StorageFailures,
    /// Where this partition's flushes run.
    group_commit: Arc<GroupCommit>,
    /// What is durable, for the completions of appends waiting on it.
    pub(crate) durability: PartitionDurability,
    /// The highest offset a flush was queued to cover; a retried
    /// (duplicate) batch below it waits for that flush too.
    pub(crate) flush_requested_upto: AtomicI64,
    /// Whether `partition.metadata` may not be durable yet: this process
    /// wrote it without fsyncs when it opened the partition (one read back
    /// was made durable by [`ReplicaManager`]'s `syncfs` at start). Synced
    /// before the first append (see
    /// [`Partition::sync_topic_id_before_append`]).
    topic_id_unsynced: AtomicBool,
    pub(crate) log: Mutex<Option<Log>>,
}

/// What an append did, and the completion to wait for before it may be
/// acknowledged.
#[must_use = "an append may not be acknowledged before its completion resolves"]
#[derive(Debug)]
pub struct Appended {
    pub info: AppendInfo,
    pub log_start_offset: i64,
    /// The leader epoch the batches were stamped with (and led in when
    /// they were appended): what an acks=all wait is for.
    pub leader_epoch: i32,
    pub completion: AppendCompletion,
}

/// `compression.type=producer`: batches keep the codec they came with.
const KEEP_PRODUCER_CODEC: u8 = u8::MAX;
/// No `compression.<codec>.level` applies: the codec's default.
const DEFAULT_LEVEL: i32 = i32::MIN;

/// The codec a topic's `compression.type` stores batches in; `None` for
/// `producer`.
pub fn topic_codec(compression_type: &str) -> Option<Compression> {
    match compression_type {
        "uncompressed" => Some(Compression::None),
        "gzip" => Some(Compression::Gzip),
        "snappy" => Some(Compression::Snappy),
        "lz4" => Some(Compression::Lz4),
        "zstd" => Some(Compression::Zstd),
        _ => None,
    }
}

/// What a partition answered, as a Kafka error code plus a message for
/// the operator's log and the client where the API carries one.
#[derive(Debug, Clone)]
pub struct PartitionError {
    pub code: ErrorCode,
    pub message: String,
    /// The refused records of a produce's batch, by index, for Produce
    /// v8+'s `record_errors`; empty for every other refusal.
    pub record_errors: Vec<RecordError>,
}

impl PartitionError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        PartitionError {
            code,
            message: message.into(),
            record_errors: Vec::new(),
        }
    }
}

impl From<StorageError> for PartitionError {
    fn from(e: StorageError) -> Self {
        PartitionError::new(error::KAFKA_STORAGE_ERROR, e.to_string())
    }
}

impl From<AppendError> for PartitionError {
    fn from(e: AppendError) -> Self {
        let code = match &e {
            AppendError::CorruptMessage(_) => error::CORRUPT_MESSAGE,
            AppendError::MessageTooLarge(_) => error::MESSAGE_TOO_LARGE,
            AppendError::UnsupportedMagic => error::UNSUPPORTED_FOR_MESSAGE_FORMAT,
            AppendError::OutOfOrderSequence(_) => error::OUT_OF_ORDER_SEQUENCE_NUMBER,
            AppendError::InvalidProducerEpoch(_) => error::INVALID_PRODUCER_EPOCH,
            AppendError::InvalidRecord(_) => error::INVALID_RECORD,
            AppendError::RecordErrors {
                invalid_timestamp: true,
                ..
            } => error::INVALID_TIMESTAMP,
            AppendError::RecordErrors { .. } => error::INVALID_RECORD,
            AppendError::Storage(_) => error::KAFKA_STORAGE_ERROR,
            // A follower's append of its leader's batches; never a client's.
            AppendError::UnexpectedAppendOffset { .. } | AppendError::OffsetsOutOfOrder(_) => {
                error::UNKNOWN_SERVER_ERROR
            }
        };
        let message = e.to_string();
        let record_errors = match e {
            AppendError::RecordErrors { errors, .. } => errors,
            _ => Vec::new(),
        };
        PartitionError {
            code,
            message,
            record_errors,
        }
    }
}

/// Offsets a reader needs alongside the data.
#[derive(Debug, Clone, Copy)]
pub struct LogOffsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
}

impl Partition {
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// The leader's node id as of the last metadata sync, -1 for none.
    pub fn leader(&self) -> i32 {
        self.leader.load(Ordering::Acquire)
    }

    pub fn role(&self) -> Role {
        if self.leader() == self.local_node {
            Role::Leader
        } else {
            Role::Follower
        }
    }

    /// NOT_LEADER_OR_FOLLOWER unless this broker leads the partition: what
    /// a produce, or a consumer's fetch or list-offsets, gets elsewhere.
    pub fn check_leader(&self) -> Result<(), PartitionError> {
        match self.role() {
            Role::Leader => Ok(()),
            Role::Follower => Err(PartitionError::new(
                error::NOT_LEADER_OR_FOLLOWER,
                format!(
                    "this broker does not lead {}-{}; its leader is {}",
                    self.topic,
                    self.index,
                    self.leader()
                ),
            )),
        }
    }

    /// See the field: the end of the log as readers other than replicas
    /// may see it.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    /// Kafka's check of the epoch a client sent: -1 means "not known".
    pub fn check_epoch(&self, client_epoch: i32) -> Result<(), PartitionError> {
        let ours = self.leader_epoch();
        if client_epoch == -1 || client_epoch == ours {
            Ok(())
        } else if client_epoch < ours {
            Err(PartitionError::new(
                error::FENCED_LEADER_EPOCH,
                format!("leader epoch {client_epoch} is older than the current {ours}"),
            ))
        } else {
            Err(PartitionError::new(
                error::UNKNOWN_LEADER_EPOCH,
                format!("leader epoch {client_epoch} is newer than the current {ours}"),
            ))
        }
    }

    pub(crate) fn with_log<T>(
        &self,
        f: impl FnOnce(&mut Log) -> Result<T, PartitionError>,
    ) -> Result<T, PartitionError> {
        let mut guard = self.log.lock();
        match guard.as_mut() {
            Some(log) => {
                let result = f(log);
                self.update_high_watermark(log);
                result
            }
            None => Err(PartitionError::new(
                error::NOT_LEADER_OR_FOLLOWER,
                format!("{}-{} is closed", self.topic, self.index),
            )),
        }
    }

    /// Logs a storage failure once when it starts and once when the
    /// partition works again, so a full disk cannot flood the log while
    /// every request to the partition answers KAFKA_STORAGE_ERROR; a write
    /// that fails is also reported to the broker's [`StorageFailures`].
    pub(crate) fn note_storage<T>(
        &self,
        episode: &FailureEpisode,
        what: &str,
        result: Result<T, PartitionError>,
    ) -> Result<T, PartitionError> {
        self.note_storage_as(episode, what, result, true)
    }

    /// KAFKA_STORAGE_ERROR once the broker takes no more writes (see
    /// [`StorageFailures::writes_stopped`]); checked under the log's lock
    /// before anything else of an append.
    pub(crate) fn check_writes(&self) -> Result<(), PartitionError> {
        if self.storage_failures.writes_stopped() {
            return Err(PartitionError::new(
                error::KAFKA_STORAGE_ERROR,
                "this broker takes no more writes: it stops after a storage failure",
            ));
        }
        Ok(())
    }

    /// Reports `e` at once when it is a storage failure: under the log's
    /// lock, so that no later append to this log gets past
    /// [`Partition::check_writes`] once writes stop after a failure.
    pub(crate) fn reported(&self, what: &str, e: PartitionError) -> PartitionError {
        if e.code == error::KAFKA_STORAGE_ERROR {
            self.storage_failures
                .report(|| format!("{what} {}-{}: {}", self.topic, self.index, e.message));
        }
        e
    }

    fn note_storage_as<T>(
        &self,
        episode: &FailureEpisode,
        what: &str,
        result: Result<T, PartitionError>,
        report: bool,
    ) -> Result<T, PartitionError> {
        match &result {
            Err(e) if e.code == error::KAFKA_STORAGE_ERROR => {
                if episode.failed() {
                    tracing::error!(topic = %self.topic, partition = self.index, error = %e.message, "{what} failed on storage; answering KAFKA_STORAGE_ERROR until it works again");
                    if report {
                        self.storage_failures.report(|| {
                            format!("{what} {}-{}: {}", self.topic, self.index, e.message)
                        });
                    }
                }
            }
            Ok(_) => {
                if episode.succeeded() {
                    tracing::info!(topic = %self.topic, partition = self.index, "{what} works again");
                }
            }
            Err(_) => {}
        }
        result
    }

    /// Appends one produce request's record batches for this partition,
    /// recompressing them first when the topic's codec says so. The
    /// answer's completion resolves once the append is as durable as
    /// `flush.messages` asks (a flush is then queued on the group commit,
    /// outside this partition's lock); nothing may be acknowledged before.
    /// NOT_LEADER_OR_FOLLOWER unless this broker leads the partition, in
    /// one epoch, from the start of the append to its write (checked under
    /// the log's lock, where a new role or epoch starts).
    pub fn append(&self, records: &[u8]) -> Result<Appended, PartitionError> {
        let converted = match Compression::from_id(self.compression.load(Ordering::Acquire)) {
            Some(target) => {
                let limit = self.max_message_bytes.load(Ordering::Acquire) as usize;
                let level = Some(self.compression_level.load(Ordering::Acquire))
                    .filter(|l| *l != DEFAULT_LEVEL);
                convert_codec(records, target, level, limit)?
            }
            None => None,
        };
        let records = converted.as_deref().unwrap_or(records);
        let epoch = self.leader_epoch();
        // A roll fsyncs the segment it closes (or, when the roll flusher
        // does that, writes the segment's marker): that runs first, outside
        // the partition's lock (reads and other appends go on) and off the
        // async workers, then the append is tried again and its roll finds
        // it done. Whatever may still fsync in the append (a roll that
        // raced with another append, a new leader epoch's checkpoint) stays
        // off the async workers too, so only this request waits for it.
        let mut roll_synced = false;
        let (info, log_start_offset, flush) = loop {
            let step = self.with_log(|log| {
                // Under the log's lock, where a new role or epoch starts:
                // no batch stamped with an epoch this broker no longer
                // leads in lands after it.
                if self.role() != Role::Leader || self.leader_epoch() != epoch {
                    return Err(PartitionError::new(
                        error::NOT_LEADER_OR_FOLLOWER,
                        format!(
                            "{}-{} is no longer led here in epoch {epoch}; its leader is {}",
                            self.topic,
                            self.index,
                            self.leader()
                        ),
                    ));
                }
                self.check_writes()?;
                self.sync_topic_id_before_append(log)?;
                let may_fsync = if roll_synced {
                    log.append_may_fsync(records, epoch)
                } else if let Some(roll) = log.prepare_roll(records)? {
                    return Ok(Err(roll));
                } else {
                    log.epoch_checkpoint_due(epoch)
                };
                let appended = if may_fsync {
                    off_async_workers(|| log.append(records, epoch))
                } else {
                    log.append(records, epoch)
                };
                let info = appended.map_err(|e| self.reported("appending", e.into()))?;
                let flush = if !info.duplicate && log.flush_due() {
                    log.prepare_flush()?
                } else {
                    None
                };
                if let Some(target) = &flush {
                    // Under the lock, so a retry of this batch sees it.
                    self.flush_requested_upto
                        .fetch_max(target.upto(), Ordering::AcqRel);
                }
                Ok(Ok((info, log.log_start_offset(), flush)))
            });
            match self.note_storage(&self.writes_failing, "appending", step)? {
                Ok(appended) => break appended,
                Err(roll) => {
                    let synced = off_async_workers(|| roll.run()).map_err(PartitionError::from);
                    self.note_storage(&self.writes_failing, "rolling", synced)?;
                    roll_synced = true;
                }
            }
        };
        if let Some(target) = flush {
            self.submit_flush(target);
        }
        let end = info.last_offset + 1;
        let completion = if self.flush_requested_upto.load(Ordering::Acquire) >= end {
            self.durability.completion_upto(end)
        } else {
            AppendCompletion::ready()
        };
        Ok(Appended {
            info,
            log_start_offset,
            leader_epoch: epoch,
            completion,
        })
    }

    /// Makes `partition.metadata` durable before this process appends the
    /// first record to the log (under the log's lock, off the async
    /// workers), as Kafka flushes it before any log data: a record that a
    /// power cut keeps must keep the file naming its topic, or the
    /// directory could be taken for a topic made again under the name,
    /// old records and all.
    pub(crate) fn sync_topic_id_before_append(&self, log: &Log) -> Result<(), PartitionError> {
        if !self.topic_id_unsynced.load(Ordering::Acquire) {
            return Ok(());
        }
        off_async_workers(|| sync_topic_id(log.env(), log.dir()))?;
        self.topic_id_unsynced.store(false, Ordering::Release);
        Ok(())
    }

    /// Queues `target` on the group commit; its outcome reaches this
    /// partition's waiting completions.
    pub(crate) fn submit_flush(&self, target: FlushTarget) {
        let publisher = self.durability.publisher();
        let log = target.durability();
        let failures = self.storage_failures.clone();
        let name = format!("{}-{}", self.topic, self.index);
        self.group_commit.submit(
            target,
            Some(Box::new(move |result| match result {
                Ok(()) => publisher.publish(&log),
                Err(e) => {
                    failures.report(|| format!("flushing {name}: {e}"));
                    publisher.failed(e.to_string());
                }
            })),
        );
    }

    /// A completion that resolves once every flush queued for this
    /// partition so far has finished: what a coordinator answer waits for,
    /// since it covers every write the coordinator made before it.
    pub fn durability_barrier(&self) -> AppendCompletion {
        self.durability
            .completion_upto(self.flush_requested_upto.load(Ordering::Acquire))
    }

    /// A completion that resolves once every in-sync replica has every
    /// write made here so far (the high watermark reached the log end),
    /// at most `timeout`: what a coordinator's answer waits for besides
    /// durability, so its writes survive the leader's loss.
    pub fn replication_barrier(self: &Arc<Self>, timeout: Duration) -> AppendCompletion {
        let upto = self.log_end_offset.load(Ordering::Acquire);
        self.replication_completion(upto, self.leader_epoch(), timeout)
    }

    /// A completion that resolves once the high watermark reaches `upto`
    /// while this broker leads in `leader_epoch` (see
    /// [`AppendCompletion::replicated`]); already resolved when it has.
    pub fn replication_completion(
        self: &Arc<Self>,
        upto: i64,
        leader_epoch: i32,
        timeout: Duration,
    ) -> AppendCompletion {
        if self.high_watermark() >= upto {
            return AppendCompletion::ready();
        }
        AppendCompletion::replicated(self.clone(), upto, leader_epoch, timeout)
    }

    /// The log went offline after a failed fsync: it takes no writes until
    /// a restart.
    pub fn is_offline(&self) -> bool {
        self.with_log_ref(|log| log.offline_cause().is_some())
            .unwrap_or(false)
    }

    /// Runs `f` on the open log; `Ok(None)` when the partition is closed.
    pub fn with_log_mut<T>(
        &self,
        f: impl FnOnce(&mut Log) -> Result<T, StorageError>,
    ) -> Result<Option<T>, StorageError> {
        match self.log.lock().as_mut() {
            Some(log) => {
                let result = f(log).map(Some);
                self.update_high_watermark(log);
                result
            }
            None => Ok(None),
        }
    }

    pub fn offsets(&self) -> Result<LogOffsets, PartitionError> {
        self.with_log(|log| {
            Ok(LogOffsets {
                log_start_offset: log.log_start_offset(),
                high_watermark: self.high_watermark(),
            })
        })
    }

    /// The file range holding whole batches from `offset` up to `limit`
    /// (for sendfile), or OFFSET_OUT_OF_RANGE; `None` when there is
    /// nothing to send.
    pub fn read_region(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        limit: ReadLimit,
    ) -> Result<(Option<FileRegion>, LogOffsets), PartitionError> {
        self.read_at(offset, |log| match limit {
            ReadLimit::LogEnd => log.read_region(offset, max_bytes, min_one_batch),
            ReadLimit::HighWatermark => {
                log.read_region_upto(offset, max_bytes, min_one_batch, self.high_watermark())
            }
        })
    }

    /// Reads whole batches from `offset` up to `limit`, or
    /// OFFSET_OUT_OF_RANGE.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        limit: ReadLimit,
    ) -> Result<(Bytes, LogOffsets), PartitionError> {
        self.read_at(offset, |log| match limit {
            ReadLimit::LogEnd => log.read(offset, max_bytes, min_one_batch),
            ReadLimit::HighWatermark => {
                log.read_upto(offset, max_bytes, min_one_batch, self.high_watermark())
            }
        })
    }

    /// The CRC check a read from `offset` still needs (see `read_at`), for
    /// callers that would rather run it on a blocking thread first; `None`
    /// when none is needed or it cannot be prepared (the read then runs it
    /// itself and reports any error).
    pub fn verification_for(&self, offset: i64) -> Option<SegmentVerifier> {
        self.with_log(|log| Ok(log.verification_for(offset)?))
            .ok()
            .flatten()
    }

    /// Runs `read` when `offset` is inside the log (between its start and
    /// its end: a consumer may stand past the high watermark, as after a
    /// leader change, and then reads nothing), with the log's offsets;
    /// OFFSET_OUT_OF_RANGE otherwise. Bytes the read reaches that this
    /// process did not write are CRC-checked first, outside the log's lock
    /// (a whole segment on the first read after a start), so appends and
    /// other reads of the partition do not wait for that.
    fn read_at<T>(
        &self,
        offset: i64,
        read: impl FnOnce(&Log) -> Result<T, StorageError>,
    ) -> Result<(T, LogOffsets), PartitionError> {
        let check = self
            .with_log(|log| {
                log.verification_for(offset)
                    .map_err(|e| self.read_failed(e))
            })
            .and_then(|verifier| match verifier {
                Some(verifier) => verifier.run().map_err(|e| self.read_failed(e)),
                None => Ok(()),
            });
        let result = check.and_then(|()| {
            self.with_log(|log| {
                let offsets = LogOffsets {
                    log_start_offset: log.log_start_offset(),
                    high_watermark: self.high_watermark(),
                };
                let end = log.log_end_offset();
                if offset < offsets.log_start_offset || offset > end {
                    return Err(PartitionError::new(
                        error::OFFSET_OUT_OF_RANGE,
                        format!(
                            "offset {offset} is outside [{}, {end}]",
                            offsets.log_start_offset
                        ),
                    ));
                }
                Ok((read(log).map_err(|e| self.read_failed(e))?, offsets))
            })
        });
        // Reported by `read_failed` only when the device failed.
        self.note_storage_as(&self.reads_failing, "reading", result, false)
    }

    /// A read's storage error as the client's answer. A failing device
    /// (see `StorageError::is_device_failure`) is also reported to the
    /// broker's [`StorageFailures`], as a failed write is: Kafka takes a
    /// log directory offline on an I/O error of any read or write in it,
    /// so a broker in a cluster stops and its partitions move. Damaged
    /// bytes (a batch that fails its CRC) are not: Kafka too tells a
    /// corrupt record from an I/O failure of its directory.
    pub fn read_failed(&self, e: StorageError) -> PartitionError {
        if e.is_device_failure() {
            self.storage_failures
                .report(|| format!("reading {}-{}: {e}", self.topic, self.index));
        }
        e.into()
    }

    pub fn with_log_ref<T>(&self, f: impl FnOnce(&Log) -> T) -> Result<T, PartitionError> {
        self.with_log(|log| Ok(f(log)))
    }

    /// Kafka's DeleteRecords on this partition: -1 means the high
    /// watermark; the log start offset moves up to `offset` (never down).
    /// Returns the new log start offset (the low watermark).
    pub fn delete_records(&self, offset: i64) -> Result<i64, PartitionError> {
        self.with_log(|log| {
            let high_watermark = self.high_watermark();
            let target = if offset == -1 { high_watermark } else { offset };
            if target < 0 {
                return Err(PartitionError::new(
                    error::OFFSET_OUT_OF_RANGE,
                    format!(
                        "The offset {target} for partition {}-{} is not valid",
                        self.topic, self.index
                    ),
                ));
            }
            if target > high_watermark {
                return Err(PartitionError::new(
                    error::OFFSET_OUT_OF_RANGE,
                    format!(
                        "Cannot increment the log start offset to {target} of partition {}-{} since it is larger than the high watermark {high_watermark}",
                        self.topic, self.index
                    ),
                ));
            }
            Ok(log.delete_records_before(target)?)
        })
    }

    /// Hands the log new settings when they differ from its current ones.
    fn update_config(&self, config: LogConfig, file_delete_delay_ms: i64) {
        self.file_delete_delay_ms
            .store(file_delete_delay_ms, Ordering::Release);
        let mut guard = self.log.lock();
        let Some(log) = guard.as_mut() else {
            return;
        };
        if *log.config() == config {
            return;
        }
        match log.update_config(config) {
            Ok(()) => {
                tracing::info!(topic = %self.topic, partition = self.index, "log config updated")
            }
            Err(e) => {
                tracing::error!(topic = %self.topic, partition = self.index, error = %e, "update log config")
            }
        }
    }

    fn close(&self) -> Result<(), StorageError> {
        match self.log.lock().take() {
            Some(log) => log.close(),
            None => Ok(()),
        }
    }

    /// Closes the log and renames its directory for delayed deletion;
    /// returns the new path and how long it should wait.
    fn retire(&self) -> Result<Option<(PathBuf, Duration)>, StorageError> {
        let Some(log) = self.log.lock().take() else {
            return Ok(None);
        };
        let renamed = log.rename_for_deletion(&delete_dir_name(&self.topic, self.index))?;
        let delay_ms = self.file_delete_delay_ms.load(Ordering::Acquire).max(0);
        Ok(Some((renamed, Duration::from_millis(delay_ms as u64))))
    }
}

/// Kafka's suffix for a partition directory that no partition owns.
pub const STRAY_DIR_SUFFIX: &str = "-stray";

/// The metadata log's directory is named like a partition's; it is no stray.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// Kafka's name for a partition directory waiting for deletion:
/// `<topic>-<partition>.<32 hex digits>-delete`, the topic cut short so the
/// name fits in 255 bytes.
pub fn delete_dir_name(topic: &str, partition: i32) -> String {
    set_aside_name(topic, partition, DELETE_DIR_SUFFIX)
}

/// `<topic>-<partition>.<32 hex digits><suffix>`, within 255 bytes.
fn set_aside_name(topic: &str, partition: i32, suffix: &str) -> String {
    let unique: String = tarn_metadata::random_uuid()
        .0
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let suffix = format!("-{partition}.{unique}{suffix}");
    // Topic names are ASCII, so any byte length is a char boundary.
    let keep = topic.len().min(255 - suffix.len());
    format!("{}{suffix}", &topic[..keep])
}

/// `(topic, partition)` for a live partition directory's name,
/// `<topic>-<partition>`; `None` for anything else (set-aside directories
/// end in a suffix, not in a number).
fn parse_partition_dir_name(name: &str) -> Option<(&str, i32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic, partition.parse().ok()?))
}

/// Rewrites `records` with every batch in `target`'s codec; `None` when
/// they all are already (the common case, which costs one header parse per
/// batch). A batch to convert must pass its CRC check first, so corrupt
/// input is never given a fresh CRC.
fn convert_codec(
    records: &[u8],
    target: Compression,
    level: Option<i32>,
    limit: usize,
) -> Result<Option<Vec<u8>>, PartitionError> {
    let corrupt = |position: usize, e: BatchError| -> PartitionError {
        match e {
            BatchError::UnsupportedMagic(_) => PartitionError::new(
                error::UNSUPPORTED_FOR_MESSAGE_FORMAT,
                format!("batch at byte {position}: {e}"),
            ),
            BatchError::Compression(CompressionError::TooLarge { .. }) => PartitionError::new(
                error::MESSAGE_TOO_LARGE,
                format!("batch at byte {position}: {e} (max.message.bytes)"),
            ),
            e => PartitionError::new(
                error::CORRUPT_MESSAGE,
                format!("batch at byte {position}: {e}"),
            ),
        }
    };
    let mut position = 0;
    let mut all_match = true;
    while position < records.len() {
        let header = parse_header(&records[position..]).map_err(|e| corrupt(position, e))?;
        if header.compression() != target && !header.is_control() {
            all_match = false;
            break;
        }
        position += header.total_size();
    }
    if all_match {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(records.len());
    let mut position = 0;
    while position < records.len() {
        let rest = &records[position..];
        let header = validate_batch(rest).map_err(|e| corrupt(position, e))?;
        let batch = &rest[..header.total_size()];
        if header.compression() == target || header.is_control() {
            out.extend_from_slice(batch);
        } else {
            recompress_batch_at(batch, &header, target, level, limit, &mut out)
                .map_err(|e| corrupt(position, e))?;
        }
        position += header.total_size();
    }
    Ok(Some(out))
}

pub struct ReplicaManager {
    data_dir: PathBuf,
    node_id: i32,
    env: LogEnv,
    partitions: RwLock<PartitionMap>,
    data_version: watch::Sender<u64>,
    /// Bumped when a hosted partition changes leader or leader epoch, or
    /// a partition is added: waiting fetches and the group coordinator
    /// look again.
    leadership_version: watch::Sender<u64>,
    /// Bumped when what this broker follows may have changed (a follower
    /// added, any partition removed, a leader or leader epoch changed),
    /// not when it becomes the leader of a new partition: the replica
    /// fetchers look again, and a topic created with this broker as its
    /// only replica does not make them scan every hosted partition.
    following_version: watch::Sender<u64>,
    /// High watermarks as `replication-offset-checkpoint` had them at
    /// start-up, for the partitions opened from it.
    checkpointed: Mutex<HashMap<TopicPartition, i64>>,
    deleter: LogDeleter,
    /// The fsync rounds every hosted partition's flushes go through.
    group_commit: Arc<GroupCommit>,
    /// Where the hosted logs' rolls leave the fsyncs of the segments they
    /// close; without one, a roll fsyncs the segment itself.
    roll_flusher: Option<Arc<RollFlusher>>,
    /// The first storage failure of any hosted partition.
    storage_failures: StorageFailures,
    /// The image and effective broker config the hosted partitions match;
    /// also serializes `sync`.
    synced: Mutex<(Arc<MetadataImage>, BrokerConfig)>,
    /// Whether the previous run shut down cleanly: if not, every log this
    /// run opens is recovered first, whenever the metadata brings it.
    previous_shutdown_clean: AtomicBool,
    /// Whether this process made what earlier ones wrote durable (one
    /// `syncfs`, before the first `partition.metadata` it reads back is
    /// trusted: an earlier process may have written it without fsyncs).
    earlier_writes_synced: Mutex<bool>,
}

/// The storage settings of one topic, from its configs and the broker's.
/// Values were validated when they entered (config file, CreateTopics,
/// AlterConfigs), so a parse failure here is a bug.
pub fn log_config(config: &BrokerConfig, topic: &TopicInfo) -> LogConfig {
    let text = |key: &str| config.topic_value(&topic.configs, key);
    let value = |key: &str| -> i64 {
        text(key)
            .parse()
            .unwrap_or_else(|_| panic!("validated numeric topic config {key}"))
    };
    LogConfig {
        segment_bytes: value("segment.bytes") as u64,
        index_interval_bytes: value("index.interval.bytes") as u32,
        segment_index_bytes: value("segment.index.bytes") as u32,
        max_message_bytes: value("max.message.bytes") as u32,
        segment_ms: value("segment.ms"),
        segment_jitter_ms: value("segment.jitter.ms"),
        retention_ms: value("retention.ms"),
        retention_bytes: value("retention.bytes"),
        cleanup_policy: CleanupPolicy::parse(&text("cleanup.policy"))
            .unwrap_or_else(|e| panic!("validated cleanup.policy: {e}")),
        delete_retention_ms: value("delete.retention.ms"),
        min_cleanable_dirty_ratio: text("min.cleanable.dirty.ratio")
            .parse()
            .unwrap_or_else(|_| panic!("validated min.cleanable.dirty.ratio")),
        min_compaction_lag_ms: value("min.compaction.lag.ms"),
        max_compaction_lag_ms: value("max.compaction.lag.ms"),
        flush_messages: value("flush.messages"),
        flush_ms: value("flush.ms"),
        file_delete_delay_ms: value("file.delete.delay.ms"),
        message_timestamp_type: if text("message.timestamp.type") == "LogAppendTime" {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        },
        message_timestamp_before_max_ms: value("message.timestamp.before.max.ms"),
        message_timestamp_after_max_ms: value("message.timestamp.after.max.ms"),
    }
}

/// The high watermarks of the last checkpoint; none when there is no
/// file, or (logged) one that cannot be read: every partition then starts
/// at 0, which is safe, as followers and the ISR bring it up.
fn read_high_watermark_checkpoint(env: &LogEnv, data_dir: &Path) -> HashMap<TopicPartition, i64> {
    let path = data_dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE);
    match OffsetCheckpointFile::read(env, &path) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "unreadable high-watermark checkpoint; high watermarks start at 0");
            HashMap::new()
        }
    }
}

/// A topic's effective `min.insync.replicas`.
fn min_insync_replicas(config: &BrokerConfig, topic: &TopicInfo) -> i32 {
    config
        .topic_value(&topic.configs, "min.insync.replicas")
        .parse()
        .unwrap_or_else(|_| panic!("validated numeric topic config min.insync.replicas"))
}

/// A topic's effective `file.delete.delay.ms`.
fn file_delete_delay_ms(config: &BrokerConfig, topic: &TopicInfo) -> i64 {
    config
        .topic_value(&topic.configs, "file.delete.delay.ms")
        .parse()
        .unwrap_or_else(|_| panic!("validated numeric topic config file.delete.delay.ms"))
}

fn compression_id(config: &BrokerConfig, topic: &TopicInfo) -> u8 {
    topic_codec(&config.topic_value(&topic.configs, "compression.type"))
        .map_or(KEEP_PRODUCER_CODEC, Compression::id)
}

/// The topic's level for the codec its `compression.type` names (gzip's
/// -1 is its default), or [`DEFAULT_LEVEL`].
fn compression_level(config: &BrokerConfig, topic: &TopicInfo) -> i32 {
    let key = match topic_codec(&config.topic_value(&topic.configs, "compression.type")) {
        Some(Compression::Gzip) => "compression.gzip.level",
        Some(Compression::Lz4) => "compression.lz4.level",
        Some(Compression::Zstd) => "compression.zstd.level",
        _ => return DEFAULT_LEVEL,
    };
    match config.topic_value(&topic.configs, key).parse::<i32>() {
        Ok(-1) if key == "compression.gzip.level" => DEFAULT_LEVEL,
        Ok(level) => level,
        Err(_) => panic!("validated numeric topic config {key}"),
    }
}

impl ReplicaManager {
    pub fn new(data_dir: &Path, node_id: i32, env: LogEnv, group_commit: Arc<GroupCommit>) -> Self {
        let (data_version, _) = watch::channel(0);
        ReplicaManager {
            leadership_version: watch::channel(0).0,
            following_version: watch::channel(0).0,
            checkpointed: Mutex::new(read_high_watermark_checkpoint(&env, data_dir)),
            data_dir: data_dir.to_owned(),
            node_id,
            deleter: LogDeleter::start(env.clone()),
            group_commit,
            roll_flusher: None,
            storage_failures: StorageFailures::default(),
            env,
            partitions: RwLock::new(PartitionMap::default()),
            data_version,
            synced: Mutex::new((Arc::new(MetadataImage::default()), BrokerConfig::default())),
            previous_shutdown_clean: AtomicBool::new(true),
            earlier_writes_synced: Mutex::new(false),
        }
    }

    /// Logs opened from now on leave the fsync of each segment a roll
    /// closes to `flusher` ([`Log::defer_roll_fsyncs`]).
    pub fn with_roll_flusher(mut self, flusher: Arc<RollFlusher>) -> Self {
        self.roll_flusher = Some(flusher);
        self
    }

    /// Where the hosted partitions report their storage failures.
    pub fn storage_failures(&self) -> &StorageFailures {
        &self.storage_failures
    }

    /// Makes everything earlier processes wrote durable, once per process:
    /// a `partition.metadata` read back is then trusted as durable.
    fn sync_earlier_writes(&self) -> Result<(), StorageError> {
        let mut synced = self.earlier_writes_synced.lock();
        if !*synced {
            self.env.sync_file_system(&self.data_dir)?;
            *synced = true;
        }
        Ok(())
    }

    /// Tells the manager how the previous run ended (see the field).
    pub fn set_previous_shutdown_clean(&self, clean: bool) {
        self.previous_shutdown_clean.store(clean, Ordering::Release);
    }

    /// The effective broker config (static and dynamic) the hosted
    /// partitions were last synced with.
    pub fn effective_config(&self) -> BrokerConfig {
        self.synced.lock().1.clone()
    }

    /// Deleted partition directories still waiting for their delay.
    pub fn pending_deletions(&self) -> usize {
        self.deleter.pending()
    }

    pub fn env(&self) -> &LogEnv {
        &self.env
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partitions.read().get(topic, partition).cloned()
    }

    /// Every hosted partition (a snapshot of the set), in no particular
    /// order.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    /// A receiver that changes whenever any partition gets new data.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.data_version.subscribe()
    }

    /// A receiver that changes whenever a hosted partition's leader or
    /// leader epoch changes, or partitions are added.
    pub fn subscribe_leadership(&self) -> watch::Receiver<u64> {
        self.leadership_version.subscribe()
    }

    /// A receiver that changes whenever what this broker follows may have
    /// (see the field `following_version`).
    pub fn subscribe_following(&self) -> watch::Receiver<u64> {
        self.following_version.subscribe()
    }

    /// The hosted partitions of `topic`, in no particular order.
    pub fn topic_partitions(&self, topic: &str) -> Vec<Arc<Partition>> {
        self.partitions.read().of_topic(topic).cloned().collect()
    }

    /// Writes every hosted partition's high watermark to
    /// `replication-offset-checkpoint` (Kafka's file and format), so a
    /// restart starts from what was known replicated rather than from 0.
    pub fn checkpoint_high_watermarks(&self) -> Result<(), StorageError> {
        let mut entries: Vec<(String, i32, i64)> = self
            .partitions()
            .iter()
            .map(|p| (p.topic.clone(), p.index, p.high_watermark()))
            .collect();
        entries.sort();
        OffsetCheckpointFile::write(
            &self.env,
            &self.data_dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE),
            &entries,
        )
    }

    /// The high watermark the checkpoint read at start-up had for the
    /// partition, 0 when none.
    fn checkpointed_high_watermark(&self, topic: &str, partition: i32) -> i64 {
        self.checkpointed
            .lock()
            .get(&(topic.to_owned(), partition))
            .copied()
            .unwrap_or(0)
    }

    /// Wakes every fetch waiting for new data (see [`ReplicaManager::subscribe`]).
    pub fn notify_appended(&self) {
        self.data_version.send_modify(|v| *v += 1);
    }

    /// A handle that wakes waiting fetches, for writers that append to
    /// partitions without going through a produce request (the
    /// coordinators).
    pub fn append_notifier(&self) -> AppendNotifier {
        AppendNotifier(self.data_version.clone())
    }

    /// Makes the hosted partitions match the image: opens new ones, hands
    /// changed settings (from the topic's configs and `config`, the
    /// effective broker config) to live logs, and retires those whose topic
    /// is gone (or was re-created under a new id). Only topics that differ
    /// from the last synced image are looked at, unless `config` changed.
    /// Callers pass the newest image (see `Broker::commit_metadata`).
    pub fn sync(
        &self,
        image: &Arc<MetadataImage>,
        config: &BrokerConfig,
        clean_shutdown: bool,
    ) -> Result<(), StorageError> {
        let mut synced = self.synced.lock();
        let (previous, previous_config) = synced.clone();
        let config_changed = previous_config != *config;
        let mut changed: Vec<(&Arc<TopicInfo>, Option<&Arc<TopicInfo>>)> = Vec::new();
        for topic in image.topics() {
            match previous.topic_by_id(&topic.topic_id) {
                Some(old) if Arc::ptr_eq(old, topic) && !config_changed => {}
                old => changed.push((topic, old)),
            }
        }
        let gone: Vec<Uuid> = previous
            .topics()
            .filter(|t| image.topic_by_id(&t.topic_id).is_none())
            .map(|t| t.topic_id)
            .collect();
        if !gone.is_empty() {
            let stale: Vec<Arc<Partition>> = {
                let mut map = self.partitions.write();
                let keys: Vec<(String, i32)> = map
                    .values()
                    .filter(|p| gone.contains(&p.topic_id))
                    .map(|p| (p.topic.clone(), p.index))
                    .collect();
                keys.iter().filter_map(|(t, i)| map.remove(t, *i)).collect()
            };
            self.retire(&stale)?;
        }
        for (topic, old) in changed {
            self.sync_topic(topic, old, config, config_changed, clean_shutdown)?;
        }
        *synced = (image.clone(), config.clone());
        Ok(())
    }

    /// Like [`ReplicaManager::sync`] after a commit whose records touched
    /// only `topics` (ids) and no broker config: looks at those topics
    /// alone, so a commit costs the same with 10 or 10,000 topics. Falls
    /// back to a whole sync when the effective broker config changed.
    /// Callers must run the commit and this sync as one step, in commit
    /// order (see `Broker::commit_metadata`): each topic's settings are
    /// compared with the previously synced image.
    pub fn sync_topics(
        &self,
        image: &Arc<MetadataImage>,
        config: &BrokerConfig,
        topics: &[Uuid],
    ) -> Result<(), StorageError> {
        let mut synced = self.synced.lock();
        if synced.1 != *config {
            drop(synced);
            return self.sync(image, config, true);
        }
        let previous = synced.0.clone();
        for id in topics {
            match image.topic_by_id(id) {
                Some(topic) => {
                    self.sync_topic(topic, previous.topic_by_id(id), config, false, true)?
                }
                None => {
                    let Some(gone) = previous.topic_by_id(id) else {
                        continue;
                    };
                    let stale: Vec<Arc<Partition>> = {
                        let mut map = self.partitions.write();
                        gone.partitions
                            .iter()
                            .filter_map(|p| map.remove(&gone.name, p.partition_id))
                            .collect()
                    };
                    let (ours, newer): (Vec<_>, Vec<_>) =
                        stale.into_iter().partition(|p| p.topic_id == *id);
                    // A newer topic of the same name: not ours to retire.
                    for partition in newer {
                        self.partitions.write().insert(partition);
                    }
                    self.retire(&ours)?;
                }
            }
        }
        synced.0 = image.clone();
        Ok(())
    }

    /// Closes the partitions' logs, renames their directories for deletion,
    /// makes the renames durable with one fsync of the data directory (not
    /// one per partition: a topic of thousands of partitions goes at once),
    /// then schedules the directories' removal.
    fn retire(&self, partitions: &[Arc<Partition>]) -> Result<(), StorageError> {
        if !partitions.is_empty() {
            self.following_version.send_modify(|v| *v += 1);
        }
        let mut renamed = Vec::with_capacity(partitions.len());
        let mut failed = None;
        for partition in partitions {
            match partition.retire() {
                Ok(Some((dir, delay))) => {
                    tracing::info!(topic = %partition.topic, partition = partition.index, dir = %dir.display(), delay_ms = delay.as_millis() as u64, "deleted partition; files go after file.delete.delay.ms");
                    renamed.push((dir, delay));
                }
                Ok(None) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if !renamed.is_empty() {
            self.env.sync_dir(&self.data_dir)?;
        }
        for (dir, delay) in renamed {
            self.deleter.schedule(dir, delay);
        }
        failed.map_or(Ok(()), Err)
    }

    fn sync_topic(
        &self,
        topic: &Arc<TopicInfo>,
        old: Option<&Arc<TopicInfo>>,
        config: &BrokerConfig,
        config_changed: bool,
        clean_shutdown: bool,
    ) -> Result<(), StorageError> {
        let log_config = log_config(config, topic);
        let delete_delay_ms = file_delete_delay_ms(config, topic);
        let compression = compression_id(config, topic);
        let level = compression_level(config, topic);
        let max_message_bytes = log_config.max_message_bytes;
        let min_insync = min_insync_replicas(config, topic);
        let now_ms = self.env.now_ms();
        let settings_changed = config_changed || old.is_some_and(|o| o.configs != topic.configs);
        let mut removed = Vec::new();
        // The partitions already hosted here first, on several threads
        // when there are many; the loop below skips them.
        let hosted: Vec<(Arc<Partition>, &PartitionInfo)> = topic
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&self.node_id))
            .filter_map(|p| {
                self.get(&topic.name, p.partition_id)
                    .filter(|existing| existing.topic_id == topic.topic_id)
                    .map(|existing| (existing, p))
            })
            .collect();
        let update = |existing: &Partition, p: &PartitionInfo| {
            let high_watermark = existing.high_watermark();
            let changed = existing.apply_assignment(p, p.partition_epoch, min_insync, now_ms);
            if settings_changed {
                existing.compression.store(compression, Ordering::Release);
                existing.compression_level.store(level, Ordering::Release);
                existing
                    .max_message_bytes
                    .store(max_message_bytes, Ordering::Release);
                existing.update_config(log_config.clone(), delete_delay_ms);
            }
            // A smaller ISR can let a leader's high watermark jump.
            (changed, existing.high_watermark() != high_watermark)
        };
        let (mut leadership_changed, high_watermark_moved) =
            update_in_parallel(&self.env, &hosted, update);
        let mut following_changed = leadership_changed;
        for p in &topic.partitions {
            if !p.replicas.contains(&self.node_id) {
                // A reassignment moved the partition off this broker: it
                // stops following and deletes its replica, as Kafka's
                // brokers do for a replica no longer assigned to them.
                let mut map = self.partitions.write();
                if map
                    .get(&topic.name, p.partition_id)
                    .is_some_and(|hosted| hosted.topic_id == topic.topic_id)
                {
                    removed.extend(map.remove(&topic.name, p.partition_id));
                }
                continue;
            }
            if let Some(existing) = self.get(&topic.name, p.partition_id) {
                if existing.topic_id == topic.topic_id {
                    continue; // updated above
                }
                // Same name, new topic id: the old topic is gone.
                let stale = self.partitions.write().remove(&topic.name, p.partition_id);
                if let Some(stale) = stale {
                    self.retire(&[stale])?;
                }
            }
            let dir = self
                .data_dir
                .join(format!("{}-{}", topic.name, p.partition_id));
            let recorded = match read_topic_id(&self.env, &dir) {
                Ok(recorded) => recorded,
                // Written without fsync: a power cut can leave it empty.
                Err(e @ StorageError::Corrupt { .. }) => {
                    tracing::warn!(topic = %topic.name, partition = p.partition_id, error = %e, "unreadable partition.metadata; taking the directory as this topic's and writing it again");
                    None
                }
                Err(e) => return Err(e),
            };
            if let Some(other) = recorded.filter(|id| *id != topic.topic_id) {
                // An earlier topic of this name left its directory behind.
                let name = set_aside_name(&topic.name, p.partition_id, DELETE_DIR_SUFFIX);
                let moved = self.move_aside(&dir, &name)?;
                tracing::warn!(topic = %topic.name, partition = p.partition_id, old_topic_id = %other, dir = %moved.display(), "a partition directory of an earlier topic with this name was left behind; deleting it");
                let delay = Duration::from_millis(delete_delay_ms.max(0) as u64);
                self.deleter.schedule(moved, delay);
            }
            let trusted = clean_shutdown && self.previous_shutdown_clean.load(Ordering::Acquire);
            let mut log = Log::open_in(&self.env, &dir, log_config.clone(), trusted)?;
            if let Some(flusher) = &self.roll_flusher {
                log.defer_roll_fsyncs(flusher.clone());
            }
            let durable_offset = log.durable_offset();
            let log_end_offset = log.log_end_offset();
            let topic_id_written = recorded != Some(topic.topic_id);
            if topic_id_written {
                write_topic_id(&self.env, &dir, topic.topic_id)?;
            } else {
                self.sync_earlier_writes()?;
            }
            // Nothing is known to be replicated until the replicas say so
            // (a leader whose ISR is itself finds its log end at once).
            let high_watermark = self
                .checkpointed_high_watermark(&topic.name, p.partition_id)
                .min(log_end_offset);
            let partition = Arc::new(Partition {
                topic: topic.name.clone(),
                topic_id: topic.topic_id,
                index: p.partition_id,
                local_node: self.node_id,
                leader: AtomicI32::new(p.leader),
                leader_epoch: AtomicI32::new(p.leader_epoch),
                high_watermark: AtomicI64::new(high_watermark),
                hw_changes: watch::channel(high_watermark).0,
                log_end_offset: AtomicI64::new(log_end_offset),
                leader_epoch_start_offset: AtomicI64::new(log_end_offset),
                led_since_epoch: AtomicI32::new(p.leader_epoch),
                min_insync_replicas: AtomicI32::new(min_insync),
                replica_set: Mutex::new(ReplicaSet::new(
                    self.node_id,
                    &p.replicas,
                    &p.isr,
                    p.partition_epoch,
                    now_ms,
                )),
                file_delete_delay_ms: AtomicI64::new(delete_delay_ms),
                compression: AtomicU8::new(compression),
                compression_level: AtomicI32::new(level),
                max_message_bytes: AtomicU32::new(max_message_bytes),
                writes_failing: FailureEpisode::new(),
                reads_failing: FailureEpisode::new(),
                storage_failures: self.storage_failures.clone(),
                group_commit: self.group_commit.clone(),
                durability: PartitionDurability::new(durable_offset),
                flush_requested_upto: AtomicI64::new(0),
                topic_id_unsynced: AtomicBool::new(topic_id_written),
                log: Mutex::new(Some(log)),
            });
            match partition.role() {
                Role::Leader => {
                    partition.maybe_increment_high_watermark();
                }
                Role::Follower => following_changed = true,
            }
            self.partitions.write().insert(partition);
            leadership_changed = true;
        }
        if !removed.is_empty() {
            for partition in &removed {
                tracing::info!(topic = %partition.topic, partition = partition.index, "no longer a replica here; deleting it");
            }
            self.retire(&removed)?;
            leadership_changed = true;
        }
        if high_watermark_moved {
            self.notify_appended();
        }
        if leadership_changed {
            self.leadership_version.send_modify(|v| *v += 1);
        }
        if following_changed {
            self.following_version.send_modify(|v| *v += 1);
        }
        Ok(())
    }

    /// Renames every partition directory under the data directory that no
    /// hosted partition owns to `<topic>-<partition>.<id>-stray` and keeps
    /// it, as Kafka does with stray replicas: its topic is gone from the
    /// metadata (a crash came between a deletion's commit and the rename of
    /// its directories) or was never assigned here (or no longer is: a
    /// reassignment moved it off this broker while it was down). Nothing
    /// is deleted; the operator decides. Call after a `sync` with a
    /// complete image; it waits for a sync under way, which may be creating
    /// a directory not hosted yet. Returns how many.
    pub fn set_aside_strays(&self) -> Result<usize, StorageError> {
        let _syncs_wait = self.synced.lock();
        let mut moved = 0;
        for name in self.env.list_file_names(&self.data_dir)? {
            let Some((topic, partition)) = parse_partition_dir_name(&name) else {
                continue;
            };
            let path = self.data_dir.join(&name);
            if topic == METADATA_TOPIC
                || self.get(topic, partition).is_some()
                || !self.env.is_dir(&path)
            {
                continue;
            }
            let target =
                self.move_aside(&path, &set_aside_name(topic, partition, STRAY_DIR_SUFFIX))?;
            tracing::warn!(topic, partition, dir = %target.display(), "a partition directory belongs to no partition in the metadata; kept aside as stray");
            moved += 1;
        }
        Ok(moved)
    }

    /// Renames `dir` to `name` beside it, durably; returns the new path.
    fn move_aside(&self, dir: &Path, name: &str) -> Result<PathBuf, StorageError> {
        let target = self.data_dir.join(name);
        self.env.rename(dir, &target)?;
        self.env.sync_dir(&self.data_dir)?;
        Ok(target)
    }

    /// Closes every log (flushing data, writing indexes and snapshots).
    /// Deleted directories still waiting for their delay are left for the
    /// next start-up to remove.
    pub fn shutdown(&self) -> Result<(), StorageError> {
        self.deleter.shutdown();
        let mut first_error = None;
        if let Err(e) = self.checkpoint_high_watermarks() {
            tracing::error!(error = %e, "checkpoint high watermarks");
            first_error = Some(e);
        }
        let partitions: Vec<Arc<Partition>> = self.partitions.write().drain();
        // Closing flushes each log: thousands of partitions holding
        // unflushed records took tens of seconds one after another.
        let closed = in_parallel(&self.env, &partitions, |partition| {
            partition.close().map_err(|e| {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "close log");
                e
            })
        });
        for result in closed {
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        // Closing settled every closed segment still waiting; what is left
        // queued finds nothing to do.
        if let Some(flusher) = &self.roll_flusher {
            flusher.stop();
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Partitions updated from one metadata change, or closed at shutdown, at
/// most this many at a time, each on its own thread.
const UPDATE_THREADS: usize = 16;
/// Fewer partitions than this are handled on the calling thread.
const UPDATE_IN_PARALLEL_FROM: usize = 32;

/// Runs `update` on every hosted partition; whether any returned true in
/// each place. A partition that becomes leader of a log with records
/// writes its leader-epoch checkpoint with two fsyncs before it serves as
/// leader: one after another, thousands of them (every partition a failed
/// broker led) kept the last ones refusing produces for tens of seconds.
/// Run from several threads, the fsyncs share the file system's journal
/// commits. Partitions are independent of each other here.
fn update_in_parallel(
    env: &LogEnv,
    partitions: &[(Arc<Partition>, &PartitionInfo)],
    update: impl Fn(&Partition, &PartitionInfo) -> (bool, bool) + Sync,
) -> (bool, bool) {
    in_parallel(env, partitions, |(partition, p)| update(partition, p))
        .into_iter()
        .fold((false, false), |(a, b), (c, d)| (a | c, b | d))
}

/// `work` on every item, from `UPDATE_IN_PARALLEL_FROM` items on spread
/// over up to `UPDATE_THREADS` threads (each item's disk work, its fsyncs
/// above all, then overlaps the others'); the results in no particular
/// order. On a file system that replays (a simulation) all on the calling
/// thread, in order.
fn in_parallel<T: Sync, R: Send>(
    env: &LogEnv,
    items: &[T],
    work: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if items.len() < UPDATE_IN_PARALLEL_FROM || env.replays() {
        return items.iter().map(work).collect();
    }
    let threads = UPDATE_THREADS.min(items.len() / (UPDATE_IN_PARALLEL_FROM / 2));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let run = || {
        let mut results = Vec::new();
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            results.push(work(item));
        }
        results
    };
    off_async_workers(|| {
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(run)).collect();
            let mut results = run();
            for helper in helpers {
                // A panic in `work` is a bug: passed on as it is.
                results.extend(
                    helper
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                );
            }
            results
        })
    })
}

#[cfg(test)]
mod tests {
    use crate::roles::{FollowerRead, IsrChangeAnswer};
    use tarn_metadata::MetadataRecord;

    use super::*;

    fn group_commit() -> Arc<GroupCommit> {
        Arc::new(GroupCommit::start().unwrap())
    }

    fn apply(image: &Arc<MetadataImage>, records: &[MetadataRecord]) -> Arc<MetadataImage> {
        let mut next = (**image).clone();
        for record in records {
            next.apply(record);
        }
        Arc::new(next)
    }

    fn topic(name: &str, id: u8, partitions: i32) -> Vec<MetadataRecord> {
        let mut records = vec![MetadataRecord::Topic {
            name: name.into(),
            topic_id: [id; 16],
        }];
        for partition_id in 0..partitions {
            records.push(MetadataRecord::Partition {
                topic_id: [id; 16],
                partition_id,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
                elr: Vec::new(),
                last_known_elr: Vec::new(),
            });
        }
        records
    }

    /// A partition of topic `[id; 16]` replicated on brokers 2 and 1 (both
    /// in sync), led by `leader` in `leader_epoch` (also its partition
    /// epoch).
    fn on_two(id: u8, partition_id: i32, leader: i32, leader_epoch: i32) -> MetadataRecord {
        MetadataRecord::Partition {
            topic_id: [id; 16],
            partition_id,
            replicas: vec![2, 1],
            isr: vec![2, 1],
            leader,
            leader_epoch,
            partition_epoch: leader_epoch,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        }
    }

    #[test]
    fn a_partition_takes_its_role_and_epoch_from_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let placed = |leader: i32, leader_epoch: i32| on_two(7, 0, leader, leader_epoch);
        let topic = MetadataRecord::Topic {
            name: "placed".into(),
            topic_id: [7; 16],
        };
        let image = apply(&Arc::new(MetadataImage::default()), &[topic, placed(2, 3)]);
        replicas.sync(&image, &config, true).unwrap();
        let partition = replicas.get("placed", 0).expect("a replica is hosted");
        assert_eq!(partition.role(), Role::Follower);
        assert_eq!(partition.leader(), 2);
        let refused = partition.check_leader().unwrap_err();
        assert_eq!(refused.code, error::NOT_LEADER_OR_FOLLOWER);
        assert_eq!(partition.high_watermark(), 0);

        let image = apply(&image, &[placed(1, 4)]);
        replicas.sync(&image, &config, true).unwrap();
        assert_eq!(partition.role(), Role::Leader);
        assert_eq!(partition.leader_epoch(), 4);
        partition.check_leader().unwrap();

        // Leading on in the next epoch (a reassignment dropped a replica)
        // is one run of leadership; a gap in the epochs, or another
        // leader between, starts a new one.
        assert!(partition.leads_since(4) && !partition.leads_since(3));
        let image = apply(&image, &[placed(1, 5)]);
        replicas.sync(&image, &config, true).unwrap();
        assert!(partition.leads_since(4));
        let image = apply(&image, &[placed(1, 7)]);
        replicas.sync(&image, &config, true).unwrap();
        assert!(!partition.leads_since(5) && partition.leads_since(7));
        let image = apply(&image, &[placed(2, 8)]);
        replicas.sync(&image, &config, true).unwrap();
        assert!(!partition.leads_since(8));
        let image = apply(&image, &[placed(1, 9)]);
        replicas.sync(&image, &config, true).unwrap();
        assert!(!partition.leads_since(7) && partition.leads_since(9));
    }

    /// A fetch answer applied after the metadata moved on is refused under
    /// the log's lock, whatever the fetcher checked before: seen in a
    /// faults run, where a follower made leader appended its old leader's
    /// batches past the epoch it had just started, and so answered its
    /// own followers with records its epoch cache placed in no epoch (a
    /// follower fetching them was told to truncate them, forever). A
    /// leader's append stamped with an epoch it no longer leads in is
    /// refused the same way (a produce checked while this broker led and
    /// appended once it followed replaced a committed record in the
    /// replication simulation; see its `REGRESSION_SEEDS`).
    #[test]
    fn steps_for_an_epoch_the_partition_moved_on_from_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let topic = MetadataRecord::Topic {
            name: "moved".into(),
            topic_id: [6; 16],
        };
        let image = apply(
            &Arc::new(MetadataImage::default()),
            &[topic, on_two(6, 0, 2, 1)],
        );
        replicas.sync(&image, &config, true).unwrap();
        let partition = replicas.get("moved", 0).expect("hosted");
        let batch = |base: i64| {
            tarn_protocol::record_batch::RecordBatchBuilder::new()
                .base_offset(base)
                .partition_leader_epoch(1)
                .record(1_000, None, Some(b"v"))
                .record(1_001, None, Some(b"w"))
                .build()
        };
        partition.append_as_follower(1, &batch(0)).unwrap();
        assert_eq!(partition.log_end_offset(), 2);

        // Made leader in epoch 2 while a fetch of epoch 1 was out.
        let image = apply(&image, &[on_two(6, 0, 1, 2)]);
        replicas.sync(&image, &config, true).unwrap();
        for refused in [
            partition.append_as_follower(1, &batch(2)).map(|_| ()),
            partition.truncate_to(1, 1),
            partition.truncate_fully_and_start_at(1, 5),
            partition.follow_log_start_offset(1, 1),
        ] {
            assert_eq!(refused.unwrap_err().code, error::FENCED_LEADER_EPOCH);
        }
        assert!(!partition.update_follower_high_watermark(1, 2));
        assert_eq!(partition.log_end_offset(), 2, "nothing appended or cut");
        assert_eq!(
            partition
                .with_log_ref(|l| l.end_offset_for_epoch(1))
                .unwrap(),
            (1, 2),
            "epoch 1 ends where this leader's epoch 2 starts"
        );

        // And a follower again, in epoch 3: epoch 2's leader appends and
        // epoch 1's follower steps are both refused; epoch 3's are taken.
        let image = apply(&image, &[on_two(6, 0, 2, 3)]);
        replicas.sync(&image, &config, true).unwrap();
        let stamped = partition.append(&batch(0)).unwrap_err();
        assert_eq!(stamped.code, error::NOT_LEADER_OR_FOLLOWER);
        let refused = partition.append_as_follower(1, &batch(2)).unwrap_err();
        assert_eq!(refused.code, error::FENCED_LEADER_EPOCH);
        partition.truncate_to(3, 0).unwrap();
        assert_eq!(partition.log_end_offset(), 0);
    }

    /// An ISR expansion stays pending (its member counted for the high
    /// watermark) until the controller says it applied nothing or the
    /// metadata moves the partition on: one given up while unanswered,
    /// then committed, let the high watermark pass the member the ISR then
    /// held (acknowledged records lost in the replication simulation; see
    /// its `REGRESSION_SEEDS`). A late answer settles only its own change.
    #[test]
    fn an_isr_change_is_pending_until_known_not_committed_or_overtaken() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let led = |isr: Vec<i32>, partition_epoch: i32| MetadataRecord::Partition {
            topic_id: [8; 16],
            partition_id: 0,
            replicas: vec![1, 2],
            isr,
            leader: 1,
            leader_epoch: 1,
            partition_epoch,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        };
        let topic = MetadataRecord::Topic {
            name: "expanding".into(),
            topic_id: [8; 16],
        };
        let image = apply(
            &Arc::new(MetadataImage::default()),
            &[topic, led(vec![1], 1)],
        );
        replicas.sync(&image, &config, true).unwrap();
        let partition = replicas.get("expanding", 0).expect("hosted");
        let produce = |count: usize| {
            for _ in 0..count {
                partition
                    .append(&batch(1))
                    .unwrap()
                    .completion
                    .defer_to_barrier();
            }
        };
        let caught_up = |offset: i64| {
            let (_, outcome) = partition
                .follower_fetch(2, -1, offset, 1, 1 << 20, 10)
                .unwrap();
            outcome.expand_isr
        };
        produce(2);
        assert_eq!(partition.high_watermark(), 2, "the ISR is the leader");
        let change = caught_up(2).expect("broker 2 caught up: an expansion");
        assert_eq!(change.new_isr, vec![1, 2]);
        produce(2);
        assert_eq!(partition.high_watermark(), 2, "the pending member counts");

        // Unanswered: sent again, still pending. Refused as stale: left to
        // the metadata, still pending.
        assert!(partition.isr_change_answered(&change, IsrChangeAnswer::Unanswered));
        assert!(!partition.isr_change_answered(
            &change,
            IsrChangeAnswer::Refused(error::INVALID_UPDATE_VERSION)
        ));
        produce(1);
        assert_eq!(partition.high_watermark(), 2);
        // Committed, but the metadata has not brought it here yet.
        assert!(!partition.isr_change_answered(&change, IsrChangeAnswer::Committed));
        produce(1);
        assert_eq!(partition.high_watermark(), 2);

        // Refused as ineligible: settled, the high watermark counts the
        // committed ISR again.
        assert!(!partition
            .isr_change_answered(&change, IsrChangeAnswer::Refused(error::INELIGIBLE_REPLICA)));
        produce(1);
        assert_eq!(partition.high_watermark(), 7);

        // A new expansion; the old change's late answer leaves it pending.
        let next = caught_up(7).expect("a second expansion");
        assert_ne!(next.id, change.id);
        assert!(!partition
            .isr_change_answered(&change, IsrChangeAnswer::Refused(error::INELIGIBLE_REPLICA)));
        produce(1);
        assert_eq!(partition.high_watermark(), 7);
        // Its commit applied here settles it.
        let image = apply(&image, &[led(vec![1, 2], 2)]);
        replicas.sync(&image, &config, true).unwrap();
        assert_eq!(partition.isr(), vec![1, 2]);
        assert!(!partition.isr_change_answered(&next, IsrChangeAnswer::Unanswered));
    }

    /// The replica fetchers look again when what this broker follows may
    /// have changed, and not when it is made the leader of a new
    /// partition (a topic created here alone costs no scan of every
    /// hosted partition).
    #[test]
    fn the_fetchers_are_told_of_followers_not_of_new_partitions_led_here() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let mut following = replicas.subscribe_following();
        let sync = |records: &[MetadataRecord], image: &Arc<MetadataImage>| {
            let image = apply(image, records);
            replicas.sync(&image, &config, true).unwrap();
            image
        };
        let topic = |id: u8| MetadataRecord::Topic {
            name: format!("t{id}"),
            topic_id: [id; 16],
        };
        let image = Arc::new(MetadataImage::default());
        let image = sync(&[topic(1), on_two(1, 0, 1, 1)], &image);
        assert!(!following.has_changed().unwrap(), "led here");
        assert_eq!(replicas.topic_partitions("t1").len(), 1);
        let image = sync(&[topic(2), on_two(2, 0, 2, 1)], &image);
        assert!(following.has_changed().unwrap(), "a follower added");
        following.mark_unchanged();
        let image = sync(&[on_two(1, 0, 2, 2)], &image);
        assert!(following.has_changed().unwrap(), "a leader moved away");
        following.mark_unchanged();
        sync(&[MetadataRecord::RemoveTopic { topic_id: [2; 16] }], &image);
        assert!(following.has_changed().unwrap(), "a partition removed");
        assert!(replicas.topic_partitions("t2").is_empty());
    }

    /// A broker that takes over the leadership of many partitions with
    /// records at once (the ones a failed broker led) updates them on
    /// several threads: each leads in its new epoch, recorded at its log
    /// end, and the sync still reports the leadership change.
    #[test]
    fn many_partitions_taken_over_at_once_each_lead_in_the_new_epoch() {
        const PARTITIONS: i32 = (UPDATE_IN_PARALLEL_FROM * 3) as i32;
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let placed = |partition_id: i32, leader: i32, leader_epoch: i32| {
            on_two(8, partition_id, leader, leader_epoch)
        };
        let mut records = vec![MetadataRecord::Topic {
            name: "taken".into(),
            topic_id: [8; 16],
        }];
        records.extend((0..PARTITIONS).map(|i| placed(i, 2, 1)));
        let image = apply(&Arc::new(MetadataImage::default()), &records);
        replicas.sync(&image, &config, true).unwrap();
        for i in 0..PARTITIONS {
            let partition = replicas.get("taken", i).expect("hosted");
            let batch = tarn_protocol::record_batch::RecordBatchBuilder::new()
                .partition_leader_epoch(1)
                .record(1_000, None, Some(b"v"))
                .build();
            partition.append_as_follower(1, &batch).unwrap();
        }
        let mut leadership = replicas.leadership_version.subscribe();
        leadership.mark_unchanged();
        let taken: Vec<_> = (0..PARTITIONS).map(|i| placed(i, 1, 2)).collect();
        let image = apply(&image, &taken);
        replicas
            .sync_topics(&image, &config, &[Uuid([8; 16])])
            .unwrap();
        assert!(leadership.has_changed().unwrap(), "leadership moved");
        for i in 0..PARTITIONS {
            let partition = replicas.get("taken", i).expect("hosted");
            assert_eq!(partition.role(), Role::Leader, "partition {i}");
            assert_eq!(partition.leader_epoch(), 2, "partition {i}");
            partition.check_leader().unwrap();
            let recorded = partition
                .with_log_ref(|l| l.end_offset_for_epoch(2))
                .unwrap();
            assert_eq!(
                recorded,
                (2, 1),
                "partition {i}: epoch 2 ends at the log end"
            );
            let before = partition
                .with_log_ref(|l| l.end_offset_for_epoch(1))
                .unwrap();
            assert_eq!(before, (1, 1), "partition {i}: epoch 1 ends where 2 starts");
        }
    }

    /// Shutdown closes every partition (from `UPDATE_IN_PARALLEL_FROM` on,
    /// on several threads): each leaves its producer-state snapshot at its
    /// log end, which only closing the log writes.
    #[test]
    fn shutdown_closes_every_one_of_many_partitions() {
        const PARTITIONS: i32 = (UPDATE_IN_PARALLEL_FROM * 3) as i32;
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let image = apply(
            &Arc::new(MetadataImage::default()),
            &topic("closed", 9, PARTITIONS),
        );
        replicas.sync(&image, &config, true).unwrap();
        for i in 0..PARTITIONS {
            let p = replicas.get("closed", i).expect("hosted");
            p.append(&batch(1)).unwrap().completion.defer_to_barrier();
        }
        replicas.shutdown().unwrap();
        assert!(replicas.get("closed", 0).is_none(), "nothing hosted after");
        for i in 0..PARTITIONS {
            let snapshot = dir
                .path()
                .join(format!("closed-{i}"))
                .join(format!("{:020}.snapshot", 1));
            assert!(snapshot.exists(), "partition {i} was not closed");
        }
    }

    /// Many partitions go to several threads on a real disk, but stay on
    /// the calling thread, in order, on a simulated one: its seeded faults
    /// replay only if its operations come in the same order every run.
    #[test]
    fn partitions_are_handled_on_the_calling_thread_in_a_simulation() {
        let items: Vec<usize> = (0..UPDATE_IN_PARALLEL_FROM * 3).collect();
        let caller = std::thread::current().id();
        let sim = LogEnv::new(
            Arc::new(tarn_storage::sim::SimFileSystem::new(5)),
            8,
            Arc::new(tarn_storage::file::ManualClock::new(0)),
        );
        let seen = in_parallel(&sim, &items, |i| (*i, std::thread::current().id()));
        assert_eq!(seen, items.iter().map(|i| (*i, caller)).collect::<Vec<_>>());
        // The first two items wait for each other, so another thread
        // than the first must take the second.
        let arrived = std::sync::atomic::AtomicUsize::new(0);
        let both = std::sync::Barrier::new(2);
        let os = in_parallel(&LogEnv::os(8), &items, |_| {
            if arrived.fetch_add(1, Ordering::SeqCst) < 2 {
                both.wait();
            }
            std::thread::current().id()
        });
        let threads: std::collections::HashSet<_> = os.into_iter().collect();
        assert!(threads.len() > 1, "a real disk's go to threads");
    }

    /// With `flush.messages=1`, a follower that truncates below what it
    /// had flushed waits for a new flush of what it writes past the cut:
    /// the cut bytes having been durable says nothing of the new ones.
    #[test]
    fn a_follower_waits_for_the_flush_of_what_it_writes_after_a_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::with_overrides([("log.flush.interval.messages", "1")]).unwrap();
        let commit = Arc::new(GroupCommit::manual());
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), commit.clone());
        let topic = MetadataRecord::Topic {
            name: "cut".into(),
            topic_id: [9; 16],
        };
        let followed = on_two(9, 0, 2, 1);
        let image = apply(&Arc::new(MetadataImage::default()), &[topic, followed]);
        replicas.sync(&image, &config, true).unwrap();
        let partition = replicas.get("cut", 0).expect("hosted");
        let leader_batch = |base: i64, n: usize| {
            let mut builder = tarn_protocol::record_batch::RecordBatchBuilder::new()
                .base_offset(base)
                .partition_leader_epoch(1);
            for i in 0..n {
                builder = builder.record(1_000 + i as i64, None, Some(b"v"));
            }
            builder.build()
        };
        partition
            .append_as_follower(1, &leader_batch(0, 10))
            .unwrap();
        assert!(
            !partition.durability_barrier().is_ready(),
            "not flushed yet"
        );
        commit.run_queued();
        assert!(partition.durability_barrier().is_ready());

        partition.truncate_to(1, 5).unwrap();
        assert!(
            partition.durability_barrier().is_ready(),
            "the cut is durable"
        );
        partition
            .append_as_follower(1, &leader_batch(5, 2))
            .unwrap();
        assert!(
            !partition.durability_barrier().is_ready(),
            "offsets 5 and 6 were durable before the cut, not now"
        );
        commit.run_queued();
        assert!(partition.durability_barrier().is_ready());
    }

    /// A batch of `n` records for a leader's append.
    fn batch(n: usize) -> Vec<u8> {
        let mut builder = tarn_protocol::record_batch::RecordBatchBuilder::new();
        for i in 0..n {
            builder = builder.record(1_000 + i as i64, None, Some(b"v"));
        }
        builder.build()
    }

    #[test]
    fn a_consumers_last_fetched_epoch_is_checked_as_kafka_checks_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let topic = MetadataRecord::Topic {
            name: "e".into(),
            topic_id: [4; 16],
        };
        let image = apply(
            &Arc::new(MetadataImage::default()),
            &[topic, on_two(4, 0, 1, 0)],
        );
        replicas.sync(&image, &config, true).unwrap();
        let p = replicas.get("e", 0).unwrap();
        p.append(&batch(3)).unwrap().completion.defer_to_barrier();
        let image = apply(&image, &[on_two(4, 0, 1, 2)]);
        replicas.sync(&image, &config, true).unwrap();
        p.append(&batch(2)).unwrap().completion.defer_to_barrier();
        // Epoch 0 wrote offsets 0-2, epoch 2 offsets 3-4.
        let check = |fetch_offset, epoch| match p.consumer_divergence(fetch_offset, epoch) {
            Ok(None) => Ok(None),
            Ok(Some(FollowerRead::Diverging {
                epoch, end_offset, ..
            })) => Ok(Some((epoch, end_offset))),
            Ok(Some(other)) => panic!("{other:?}"),
            Err(e) => Err(e.code),
        };
        assert_eq!(check(3, -1), Ok(None), "no epoch given");
        assert_eq!(check(3, 0), Ok(None));
        assert_eq!(check(5, 2), Ok(None));
        assert_eq!(check(4, 0), Ok(Some((0, 3))), "epoch 0 ends before 4");
        assert_eq!(check(3, 1), Ok(Some((0, 3))), "epoch 1 never wrote here");
        assert_eq!(check(6, 2), Ok(Some((2, 5))), "past the log end");
        assert_eq!(check(0, 7), Err(error::OFFSET_OUT_OF_RANGE));
        replicas.shutdown().unwrap();
    }

    #[test]
    fn a_read_that_meets_a_failing_device_is_reported_as_a_storage_failure() {
        let fs = Arc::new(tarn_storage::sim::SimFileSystem::new(7));
        let env = LogEnv::new(
            fs.clone(),
            8,
            Arc::new(tarn_storage::file::ManualClock::new(0)),
        );
        let replicas = ReplicaManager::new(Path::new("/data"), 1, env, group_commit());
        let image = apply(&Arc::new(MetadataImage::default()), &topic("t", 3, 1));
        replicas
            .sync(&image, &BrokerConfig::default(), true)
            .unwrap();
        let p = replicas.get("t", 0).unwrap();
        p.append(&batch(3)).unwrap().completion.defer_to_barrier();
        let failures = replicas.storage_failures().subscribe();
        let read = |p: &Partition| p.read(0, 1 << 20, true, ReadLimit::LogEnd);
        read(&p).unwrap();
        assert!(
            failures.borrow().is_none(),
            "a read that works reports nothing"
        );

        let segment = Path::new("/data/t-0/00000000000000000000.log");
        assert!(fs.fail_reads(segment, 1));
        let refused = read(&p).unwrap_err();
        assert_eq!(refused.code, error::KAFKA_STORAGE_ERROR);
        let reported = failures.borrow().clone().expect("reported");
        assert!(reported.starts_with("reading t-0"), "{reported}");
        // The device works again; what the broker does about the failure
        // (a cluster broker stops) is not the partition's to decide.
        assert_eq!(read(&p).unwrap().1.high_watermark, 3);
        replicas.shutdown().unwrap();
    }

    #[test]
    fn the_high_watermark_follows_the_isr_and_min_insync_replicas() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let state = |isr: Vec<i32>, partition_epoch: i32| MetadataRecord::Partition {
            topic_id: [9; 16],
            partition_id: 0,
            replicas: vec![1, 2, 3],
            isr,
            leader: 1,
            leader_epoch: 0,
            partition_epoch,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        };
        let strict = MetadataRecord::TopicConfig {
            topic_id: [9; 16],
            name: "min.insync.replicas".into(),
            value: Some("2".into()),
        };
        let topic = MetadataRecord::Topic {
            name: "r".into(),
            topic_id: [9; 16],
        };
        let image = apply(
            &Arc::new(MetadataImage::default()),
            &[topic, strict, state(vec![1, 2, 3], 0)],
        );
        replicas.sync(&image, &config, true).unwrap();
        let p = replicas.get("r", 0).unwrap();
        let appended = p.append(&batch(3)).unwrap();
        assert_eq!(appended.info.last_offset, 2);
        // No follower has fetched yet: nothing is exposed.
        assert_eq!(p.high_watermark(), 0);
        let now = 1_000;
        p.follower_fetch(2, -1, 3, -1, 1 << 20, now).unwrap();
        assert_eq!(p.high_watermark(), 0, "follower 3 has not fetched");
        p.follower_fetch(3, -1, 1, -1, 1 << 20, now).unwrap();
        assert_eq!(p.high_watermark(), 1);
        p.follower_fetch(3, -1, 3, -1, 1 << 20, now).unwrap();
        assert_eq!(p.high_watermark(), 3);
        // A follower past the leader's end is told so, and does not count.
        let ahead = p.follower_fetch(2, -1, 9, -1, 1 << 20, now).unwrap_err();
        assert_eq!(ahead.code, error::OFFSET_OUT_OF_RANGE);
        // A follower whose last fetched epoch this log lacks past its
        // offset is told where its log diverges.
        match p.follower_fetch(2, -1, 5, 0, 1 << 20, now).unwrap().0 {
            FollowerRead::Diverging {
                epoch, end_offset, ..
            } => {
                assert_eq!((epoch, end_offset), (0, 3))
            }
            other => panic!("expected a divergence, got {other:?}"),
        }

        // Down to one in-sync replica: acks=all is refused, and the high
        // watermark stays where it was while acks=1 appends go on.
        let image = apply(&image, &[state(vec![1], 1)]);
        replicas.sync(&image, &config, true).unwrap();
        assert_eq!(
            p.check_enough_replicas().unwrap_err().code,
            error::NOT_ENOUGH_REPLICAS
        );
        p.append(&batch(1)).unwrap().completion.defer_to_barrier();
        assert_eq!((p.log_end_offset(), p.high_watermark()), (4, 3));
        // Back to two: the high watermark moves to what both have.
        let image = apply(&image, &[state(vec![1, 2], 2)]);
        replicas.sync(&image, &config, true).unwrap();
        p.follower_fetch(2, -1, 4, 0, 1 << 20, now).unwrap();
        assert_eq!(p.high_watermark(), 4);
        p.check_enough_replicas().unwrap();
        replicas.shutdown().unwrap();
    }

    #[test]
    fn min_insync_replicas_above_the_replication_factor_is_capped_by_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let mut records = topic("single", 4, 1);
        records.push(MetadataRecord::TopicConfig {
            topic_id: [4; 16],
            name: "min.insync.replicas".into(),
            value: Some("2".into()),
        });
        let image = apply(&Arc::new(MetadataImage::default()), &records);
        replicas.sync(&image, &config, true).unwrap();
        let p = replicas.get("single", 0).unwrap();
        p.check_enough_replicas().unwrap();
        p.append(&batch(2)).unwrap().completion.defer_to_barrier();
        assert_eq!(p.high_watermark(), 2);
        replicas.shutdown().unwrap();
    }

    #[test]
    fn sync_opens_new_partitions_applies_config_changes_and_deletes_gone_topics() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let empty = Arc::new(MetadataImage::default());
        let image = apply(&empty, &[topic("a", 1, 3), topic("b", 2, 2)].concat());
        replicas.sync(&image, &config, true).unwrap();
        assert_eq!(replicas.partitions().len(), 5);
        let a0 = replicas.get("a", 0).unwrap();
        let retention = |p: &Partition| p.with_log_ref(|l| l.config().retention_ms).unwrap();
        assert_eq!(retention(&a0), 604_800_000);

        let image = apply(
            &image,
            &[MetadataRecord::TopicConfig {
                topic_id: [1; 16],
                name: "retention.ms".into(),
                value: Some("1000".into()),
            }],
        );
        replicas.sync(&image, &config, true).unwrap();
        assert_eq!(retention(&a0), 1000, "live log got the new config");
        assert!(
            Arc::ptr_eq(&a0, &replicas.get("a", 0).unwrap()),
            "not reopened"
        );
        assert_eq!(retention(&replicas.get("b", 0).unwrap()), 604_800_000);

        let image = apply(&image, &[MetadataRecord::RemoveTopic { topic_id: [2; 16] }]);
        replicas.sync(&image, &config, true).unwrap();
        assert!(replicas.get("b", 0).is_none());
        assert!(!dir.path().join("b-0").exists());
        assert!(dir.path().join("a-2").exists());
    }

    #[test]
    fn a_replica_moved_off_this_broker_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let empty = Arc::new(MetadataImage::default());
        let image = apply(&empty, &topic("a", 1, 2));
        replicas.sync(&image, &config, true).unwrap();
        let a1 = replicas.get("a", 1).unwrap();
        assert_eq!(a1.append(&batch(3)).unwrap().info.last_offset, 2);
        // A reassignment moves partition 0 to brokers 2 and 3 and adds
        // them to partition 1: only partition 0 leaves this broker.
        let moved = |partition_id, replicas: &[i32]| MetadataRecord::PartitionChange {
            topic_id: [1; 16],
            partition_id,
            leader: Some(replicas[0]),
            isr: Some(replicas.to_vec()),
            replicas: Some(replicas.to_vec()),
            adding_replicas: Some(Vec::new()),
            removing_replicas: Some(Vec::new()),
            elr: None,
            last_known_elr: None,
        };
        let image = apply(&image, &[moved(0, &[2, 3]), moved(1, &[1, 2, 3])]);
        let topics = [tarn_protocol::Uuid([1; 16])];
        replicas.sync_topics(&image, &config, &topics).unwrap();
        assert!(replicas.get("a", 0).is_none());
        assert!(!dir.path().join("a-0").exists());
        assert_eq!(ending_in(dir.path(), "-delete").len(), 1);
        assert!(
            Arc::ptr_eq(&a1, &replicas.get("a", 1).unwrap()),
            "kept open"
        );
        assert_eq!(a1.log_end_offset(), 3);
    }

    #[test]
    fn sync_topics_touches_only_the_named_topics() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let empty = Arc::new(MetadataImage::default());
        let image = apply(&empty, &[topic("a", 1, 2), topic("b", 2, 1)].concat());
        replicas.sync(&image, &config, true).unwrap();
        let retention = |p: &Partition| p.with_log_ref(|l| l.config().retention_ms).unwrap();

        let image = apply(&image, &topic("c", 3, 1));
        replicas
            .sync_topics(&image, &config, &[Uuid([3; 16])])
            .unwrap();
        assert!(replicas.get("c", 0).is_some());

        let set_retention = |id: u8| MetadataRecord::TopicConfig {
            topic_id: [id; 16],
            name: "retention.ms".into(),
            value: Some("1000".into()),
        };
        // Both topics changed, but the sync is told about "a" only.
        let image = apply(&image, &[set_retention(1), set_retention(2)]);
        replicas
            .sync_topics(&image, &config, &[Uuid([1; 16])])
            .unwrap();
        assert_eq!(retention(&replicas.get("a", 1).unwrap()), 1000);
        assert_eq!(
            retention(&replicas.get("b", 0).unwrap()),
            604_800_000,
            "not named"
        );

        let image = apply(&image, &[MetadataRecord::RemoveTopic { topic_id: [1; 16] }]);
        replicas
            .sync_topics(&image, &config, &[Uuid([1; 16])])
            .unwrap();
        assert!(replicas.get("a", 0).is_none() && replicas.get("a", 1).is_none());
        assert!(replicas.get("b", 0).is_some() && replicas.get("c", 0).is_some());

        // A changed broker config reaches every log, named or not.
        let changed = BrokerConfig::with_overrides([("log.retention.ms", "5000")]).unwrap();
        replicas.sync_topics(&image, &changed, &[]).unwrap();
        assert_eq!(retention(&replicas.get("c", 0).unwrap()), 5000);
    }

    /// Names of the entries under `dir` ending in `suffix`.
    fn ending_in(dir: &Path, suffix: &str) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(suffix))
            .collect()
    }

    #[test]
    fn directories_left_by_an_earlier_topic_are_never_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let empty = Arc::new(MetadataImage::default());
        let old = apply(&empty, &topic("t", 1, 1));
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        replicas.sync(&old, &config, true).unwrap();
        let batch = tarn_protocol::record_batch::build_batch_for_tests(0, 5, 1_700_000_000_000);
        let appended = replicas.get("t", 0).unwrap().append(&batch).unwrap();
        assert!(
            appended.completion.is_ready(),
            "flush.messages is not reached"
        );
        appended.completion.now_or_pending().unwrap().unwrap();
        replicas.shutdown().unwrap();

        // A crash after the deletion's commit, before the rename: the
        // directory of topic id 1 is still `t-0` when `t` comes back as id 2.
        let new = apply(
            &apply(&old, &[MetadataRecord::RemoveTopic { topic_id: [1; 16] }]),
            &topic("t", 2, 1),
        );
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        replicas.sync(&new, &config, false).unwrap();
        let t0 = replicas.get("t", 0).unwrap();
        assert_eq!(
            t0.offsets().unwrap().high_watermark,
            0,
            "the new topic starts empty"
        );
        assert_eq!(
            ending_in(dir.path(), "-delete").len(),
            1,
            "the old directory awaits deletion"
        );
        let recorded = read_topic_id(replicas.env(), &dir.path().join("t-0")).unwrap();
        assert_eq!(recorded, Some(Uuid([2; 16])));
        replicas.shutdown().unwrap();

        // Gone from the metadata altogether: set aside, not served, not deleted.
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        let none = apply(&new, &[MetadataRecord::RemoveTopic { topic_id: [2; 16] }]);
        replicas.sync(&none, &config, true).unwrap();
        assert_eq!(replicas.set_aside_strays().unwrap(), 1);
        assert!(!dir.path().join("t-0").exists());
        let strays = ending_in(dir.path(), STRAY_DIR_SUFFIX);
        assert_eq!(strays.len(), 1);
        assert!(strays[0].starts_with("t-0."), "{strays:?}");
        assert_eq!(
            replicas.set_aside_strays().unwrap(),
            0,
            "set-aside names are not partitions"
        );
    }

    #[test]
    fn an_empty_partition_metadata_file_is_written_again() {
        // What a power cut can leave of a file written without fsync.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("t-0")).unwrap();
        std::fs::write(dir.path().join("t-0").join("partition.metadata"), b"").unwrap();
        let image = apply(&Arc::new(MetadataImage::default()), &topic("t", 3, 1));
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8), group_commit());
        replicas
            .sync(&image, &BrokerConfig::default(), false)
            .unwrap();
        assert!(replicas.get("t", 0).is_some());
        let recorded = read_topic_id(replicas.env(), &dir.path().join("t-0")).unwrap();
        assert_eq!(recorded, Some(Uuid([3; 16])));
    }

    #[test]
    fn partition_directory_names_parse_as_kafka_writes_them() {
        assert_eq!(parse_partition_dir_name("orders-3"), Some(("orders", 3)));
        assert_eq!(parse_partition_dir_name("a-b-12"), Some(("a-b", 12)));
        assert_eq!(parse_partition_dir_name(&delete_dir_name("t", 0)), None);
        for name in ["t", "-1", "t-", "t-x", "meta.properties", "t-99999999999"] {
            assert_eq!(parse_partition_dir_name(name), None, "{name}");
        }
    }
}
