//! Where the coordinator's records go: the partitions of the internal
//! compacted topic `__consumer_offsets`, written through the normal `Log`
//! append path as uncompressed v2 batches, one batch per coordinator
//! write, so that one commit request is persisted whole or not at all.
//!
//! Every write honours the partition's durability settings like a
//! produce: the append's completion is handed to the partition's
//! durability barrier, and each group API awaits
//! [`GroupStore::durability_barrier`] of the group's partition before it
//! answers (so an OffsetCommit under `flush.messages=1` is acknowledged
//! only once its record is fsynced). A partition whose log went offline
//! after a failed fsync is no longer local: its groups answer
//! NOT_COORDINATOR rather than serve state that may not be on disk.
//!
//! A group lives in partition `abs(java_hash(group_id)) % partitions`,
//! Kafka's rule (Java's `String.hashCode` and `Utils.abs`), so that
//! Kafka's tools agree on where a group's records are. The loader reads
//! every record of a partition back at start-up; a record it cannot decode
//! is reported and skipped, never a panic.

use std::sync::Arc;

use parking_lot::RwLock;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::record_batch::{BatchIter, RecordBatchBuilder, RecordIter};

use tarn_replication::durability::AppendCompletion;
use tarn_replication::replica_manager::{AppendNotifier, Partition, PartitionError, ReadLimit};

use super::records::CoordinatorRecord;

/// Kafka's name of the offsets topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// How much of a partition the loader reads at a time.
const LOAD_CHUNK_BYTES: usize = 4 << 20;

/// Java's `String.hashCode`: over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Kafka's `Utils.abs(groupId.hashCode) % partitions`.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "the offsets topic has partitions");
    let hash = java_string_hash(group_id);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % partitions
}

/// The durable side of the coordinator, abstracted so that the state
/// machine can be tested with an in-memory store and injected failures.
pub trait GroupStore: Send + Sync {
    /// Partitions of the offsets topic, or None while it does not exist.
    fn partition_count(&self) -> Option<i32>;
    /// True when this broker leads `partition` of the offsets topic.
    fn is_local(&self, partition: i32) -> bool;
    /// Appends `records` to `partition` as one batch stamped `now_ms`;
    /// the completion resolves once it is as durable as configured.
    /// Errors are already translated to what a group API answers.
    fn append(
        &self,
        partition: i32,
        records: &[CoordinatorRecord],
        now_ms: i64,
    ) -> Result<AppendCompletion, ErrorCode>;
    /// Resolves once every write to `partition` so far is as durable as
    /// configured.
    fn durability_barrier(&self, partition: i32) -> AppendCompletion;
}

/// Builds the batch for `records`.
pub fn build_batch(records: &[CoordinatorRecord], now_ms: i64) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new();
    for record in records {
        let (key, value) = record.encode();
        builder = builder.record(now_ms, Some(&key), value.as_deref());
    }
    builder.build()
}

/// Kafka's translation of an append error into what a group API returns
/// (GroupMetadataManager): the client should find the coordinator again,
/// or its commit was too large.
pub fn coordinator_error(code: ErrorCode) -> ErrorCode {
    match code {
        error::UNKNOWN_TOPIC_OR_PARTITION
        | error::NOT_ENOUGH_REPLICAS
        | error::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | error::REQUEST_TIMED_OUT => error::COORDINATOR_NOT_AVAILABLE,
        error::NOT_LEADER_OR_FOLLOWER | error::KAFKA_STORAGE_ERROR => error::NOT_COORDINATOR,
        error::MESSAGE_TOO_LARGE | error::RECORD_LIST_TOO_LARGE | error::INVALID_FETCH_SIZE => {
            error::INVALID_COMMIT_OFFSET_SIZE
        }
        error::CORRUPT_MESSAGE | error::INVALID_RECORD => error::UNKNOWN_SERVER_ERROR,
        other => other,
    }
}

/// How long a coordinator's answer waits for its writes to reach the
/// in-sync replicas (Kafka's `offsets.commit.timeout.ms` default).
const OFFSET_COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5000);

/// The offsets topic's partitions hosted here, attached once the topic
/// exists (at start-up, or when the first group API creates it).
pub struct OffsetsTopicStore {
    /// Indexed by partition id; None where this broker is not the leader.
    partitions: RwLock<Option<Vec<Option<Arc<Partition>>>>>,
    /// Wakes the followers' fetches after each write, so that a commit
    /// waits for replication, not for a follower's fetch to time out.
    appended: AppendNotifier,
}

impl OffsetsTopicStore {
    pub fn new(appended: AppendNotifier) -> OffsetsTopicStore {
        OffsetsTopicStore {
            partitions: RwLock::new(None),
            appended,
        }
    }

    pub fn is_attached(&self) -> bool {
        self.partitions.read().is_some()
    }

    /// Starts serving the given partitions (index = partition id).
    pub fn attach(&self, partitions: Vec<Option<Arc<Partition>>>) {
        *self.partitions.write() = Some(partitions);
    }

    /// Serves offsets partition `index` from `partition`, or stops (None).
    /// No-op before the topic is attached or for an index beyond it.
    pub fn set_partition(&self, index: i32, partition: Option<Arc<Partition>>) {
        let mut guard = self.partitions.write();
        if let Some(slot) = guard
            .as_mut()
            .and_then(|all| usize::try_from(index).ok().and_then(|i| all.get_mut(i)))
        {
            *slot = partition;
        }
    }

    pub fn partition(&self, partition: i32) -> Option<Arc<Partition>> {
        let guard = self.partitions.read();
        let all = guard.as_ref()?;
        usize::try_from(partition)
            .ok()
            .and_then(|i| all.get(i))
            .cloned()
            .flatten()
    }
}

impl GroupStore for OffsetsTopicStore {
    fn partition_count(&self) -> Option<i32> {
        self.partitions
            .read()
            .as_ref()
            .map(|p| i32::try_from(p.len()).unwrap_or(i32::MAX))
    }

    fn is_local(&self, partition: i32) -> bool {
        self.partition(partition).is_some_and(|p| !p.is_offline())
    }

    fn append(
        &self,
        partition: i32,
        records: &[CoordinatorRecord],
        now_ms: i64,
    ) -> Result<AppendCompletion, ErrorCode> {
        let Some(target) = self.partition(partition) else {
            return Err(error::NOT_COORDINATOR);
        };
        let batch = build_batch(records, now_ms);
        match target.append(&batch) {
            Ok(appended) => {
                self.appended.notify();
                Ok(appended.completion)
            }
            Err(PartitionError { code, message, .. }) if code == error::NOT_LEADER_OR_FOLLOWER => {
                // The leadership moved (the append checks it under the log's
                // lock); the client finds the new coordinator.
                tracing::info!(partition, error = %message, "{OFFSETS_TOPIC} moved away; not appended");
                Err(coordinator_error(code))
            }
            Err(PartitionError { code, message, .. }) => {
                tracing::error!(
                    partition,
                    code,
                    error = %message,
                    "append to {OFFSETS_TOPIC} failed"
                );
                Err(coordinator_error(code))
            }
        }
    }

    /// Durability as the partition's flush settings ask, and replication
    /// to every in-sync replica (as an acks=all produce), so an answered
    /// commit survives this leader's loss.
    fn durability_barrier(&self, partition: i32) -> AppendCompletion {
        match self.partition(partition) {
            Some(p) => p
                .durability_barrier()
                .and(p.replication_barrier(OFFSET_COMMIT_TIMEOUT)),
            None => AppendCompletion::ready(),
        }
    }
}

/// Why a partition of the offsets topic could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("load {OFFSETS_TOPIC}-{partition}: {message}")]
pub struct LoadError {
    pub partition: i32,
    pub message: String,
}

/// Reads every record of one offsets-topic partition, oldest first, to
/// its log end. Bad
/// records are logged and skipped; a storage error stops the load.
pub fn load_partition(
    partition: &Partition,
    mut on_record: impl FnMut(CoordinatorRecord),
) -> Result<usize, LoadError> {
    let load_error = |message: String| LoadError {
        partition: partition.index,
        message,
    };
    let offsets = partition.offsets().map_err(|e| load_error(e.message))?;
    let mut next = offsets.log_start_offset;
    let mut loaded = 0;
    // To the log end, not the high watermark: a new leader's log is the
    // partition's, and what it has past the high watermark is committed
    // as soon as the followers catch up.
    let end = partition.log_end_offset();
    while next < end {
        let (data, _) = partition
            .read(next, LOAD_CHUNK_BYTES, true, ReadLimit::LogEnd)
            .map_err(|e| load_error(e.message))?;
        if data.is_empty() {
            break;
        }
        let mut iter = BatchIter::new(&data);
        for item in &mut iter {
            let (position, header) = item.map_err(|e| load_error(e.to_string()))?;
            next = header.last_offset() + 1;
            if header.is_control() {
                continue;
            }
            let batch = &data[position..position + header.total_size()];
            let records = match RecordIter::new(batch, &header) {
                Ok(records) => records,
                Err(e) => {
                    tracing::error!(partition = partition.index, offset = header.base_offset, error = %e, "skipping unreadable batch in {OFFSETS_TOPIC}");
                    continue;
                }
            };
            for record in records {
                let record = match record {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(partition = partition.index, offset = header.base_offset, error = %e, "skipping malformed record in {OFFSETS_TOPIC}");
                        break;
                    }
                };
                match CoordinatorRecord::decode(record.key, record.value) {
                    Ok(decoded) => {
                        loaded += 1;
                        on_record(decoded);
                    }
                    Err(e) => tracing::error!(
                        partition = partition.index,
                        offset = header.base_offset + i64::from(record.offset_delta),
                        error = %e,
                        "skipping undecodable record in {OFFSETS_TOPIC}"
                    ),
                }
            }
        }
    }
    Ok(loaded)
}

#[cfg(test)]
pub mod memory {
    //! An in-memory store for state-machine tests, with failure injection.
    use super::*;
    use parking_lot::Mutex;

    #[derive(Default)]
    pub struct MemoryStore {
        pub written: Mutex<Vec<(i32, Vec<CoordinatorRecord>)>>,
        /// When set, every append fails with this code.
        pub fail_with: Mutex<Option<ErrorCode>>,
        /// When set, appends succeed but never become durable: barriers
        /// fail with this code (a failed fsync).
        pub durability_fails_with: Mutex<Option<ErrorCode>>,
        pub partitions: i32,
        /// Whether this broker leads the partitions (else NOT_COORDINATOR).
        pub local: bool,
    }

    impl MemoryStore {
        pub fn new(partitions: i32) -> Self {
            MemoryStore {
                partitions,
                local: true,
                ..Default::default()
            }
        }

        pub fn records(&self) -> Vec<CoordinatorRecord> {
            self.written
                .lock()
                .iter()
                .flat_map(|(_, r)| r.clone())
                .collect()
        }
    }

    impl GroupStore for MemoryStore {
        fn partition_count(&self) -> Option<i32> {
            Some(self.partitions)
        }

        fn is_local(&self, partition: i32) -> bool {
            self.local && (0..self.partitions).contains(&partition)
        }

        fn append(
            &self,
            partition: i32,
            records: &[CoordinatorRecord],
            _now_ms: i64,
        ) -> Result<AppendCompletion, ErrorCode> {
            if let Some(code) = *self.fail_with.lock() {
                return Err(code);
            }
            self.written.lock().push((partition, records.to_vec()));
            Ok(self.durability_barrier(partition))
        }

        fn durability_barrier(&self, _partition: i32) -> AppendCompletion {
            match *self.durability_fails_with.lock() {
                Some(code) => AppendCompletion::failed(PartitionError::new(code, "simulated")),
                None => AppendCompletion::ready(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_follow_java_string_hash_code() {
        // Values of Java's "…".hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99162322);
        assert_eq!(java_string_hash("console-consumer-12345"), 158455506);
        // Non-BMP characters hash as their UTF-16 surrogate pair.
        assert_eq!(java_string_hash("😀"), 1772899);
        assert_eq!(partition_for("hello", 50), 22);
        assert_eq!(partition_for("b", 50), 48);
        assert_eq!(partition_for("console-consumer-12345", 50), 6);
        // "polygenelubricants" hashes to Integer.MIN_VALUE; Utils.abs maps it to 0.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
    }

    #[test]
    fn append_errors_map_like_kafka() {
        assert_eq!(
            coordinator_error(error::NOT_LEADER_OR_FOLLOWER),
            error::NOT_COORDINATOR
        );
        assert_eq!(
            coordinator_error(error::MESSAGE_TOO_LARGE),
            error::INVALID_COMMIT_OFFSET_SIZE
        );
        assert_eq!(
            coordinator_error(error::UNKNOWN_TOPIC_OR_PARTITION),
            error::COORDINATOR_NOT_AVAILABLE
        );
    }
}
