//! ReplicaManager: the partitions this broker hosts and their logs.
//!
//! It follows the metadata image: `sync` compares the new image with the
//! last one it applied and touches only the topics that changed (found by
//! pointer equality of their `Arc<TopicInfo>`): it opens a log for every
//! new partition assigned here, applies changed topic configs to live
//! logs, and closes and deletes the logs of topics that are gone. So a
//! commit costs in proportion to what it changed, not to the number of
//! partitions. Appends and reads go through a `Partition`, which checks
//! the leader epoch a client believes in against its own, and every
//! append bumps `data_version` so long-polling fetches wake on new data.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::record_batch::TimestampType;
use tarn_protocol::Uuid;
use tarn_storage::{
    AppendError, AppendInfo, CleanupPolicy, FlushTarget, Log, LogConfig, LogEnv, StorageError,
};

use crate::config::BrokerConfig;
use crate::metadata::{MetadataImage, TopicInfo};

pub type TopicPartition = (String, i32);

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    leader_epoch: AtomicI32,
    log: Mutex<Option<Log>>,
}

/// What a partition answered, as a Kafka error code plus a message for
/// the operator's log and the client where the API carries one.
#[derive(Debug, Clone)]
pub struct PartitionError {
    pub code: ErrorCode,
    pub message: String,
}

impl PartitionError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        PartitionError {
            code,
            message: message.into(),
        }
    }
}

impl From<StorageError> for PartitionError {
    fn from(e: StorageError) -> Self {
        tracing::error!(error = %e, "storage error");
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
            AppendError::Storage(_) => error::KAFKA_STORAGE_ERROR,
        };
        if code == error::KAFKA_STORAGE_ERROR {
            tracing::error!(error = %e, "append failed");
        }
        PartitionError::new(code, e.to_string())
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

    fn with_log<T>(
        &self,
        f: impl FnOnce(&mut Log) -> Result<T, PartitionError>,
    ) -> Result<T, PartitionError> {
        let mut guard = self.log.lock();
        match guard.as_mut() {
            Some(log) => f(log),
            None => Err(PartitionError::new(
                error::NOT_LEADER_OR_FOLLOWER,
                format!("{}-{} is closed", self.topic, self.index),
            )),
        }
    }

    /// Appends `records`. When `flush.messages` says this append must be
    /// durable before it is acknowledged, also returns the flush to wait
    /// for (run it through the group commit, outside this partition's lock).
    pub fn append(
        &self,
        records: &mut [u8],
    ) -> Result<(AppendInfo, i64, Option<FlushTarget>), PartitionError> {
        let epoch = self.leader_epoch();
        self.with_log(|log| {
            let info = log.append(records, epoch)?;
            let flush = if !info.duplicate && log.flush_due() {
                log.prepare_flush()?
            } else {
                None
            };
            Ok((info, log.log_start_offset(), flush))
        })
    }

    /// Runs `f` on the open log; `Ok(None)` when the partition is closed.
    pub fn with_log_mut<T>(
        &self,
        f: impl FnOnce(&mut Log) -> Result<T, StorageError>,
    ) -> Result<Option<T>, StorageError> {
        match self.log.lock().as_mut() {
            Some(log) => f(log).map(Some),
            None => Ok(None),
        }
    }

    pub fn offsets(&self) -> Result<LogOffsets, PartitionError> {
        self.with_log(|log| {
            Ok(LogOffsets {
                log_start_offset: log.log_start_offset(),
                high_watermark: log.log_end_offset(),
            })
        })
    }

    /// Reads whole batches from `offset`, or OFFSET_OUT_OF_RANGE.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<(Bytes, LogOffsets), PartitionError> {
        self.with_log(|log| {
            let offsets = LogOffsets {
                log_start_offset: log.log_start_offset(),
                high_watermark: log.log_end_offset(),
            };
            if offset < offsets.log_start_offset || offset > offsets.high_watermark {
                return Err(PartitionError::new(
                    error::OFFSET_OUT_OF_RANGE,
                    format!(
                        "offset {offset} is outside [{}, {}]",
                        offsets.log_start_offset, offsets.high_watermark
                    ),
                ));
            }
            let data = log.read(offset, max_bytes, min_one_batch)?;
            Ok((data, offsets))
        })
    }

    pub fn with_log_ref<T>(&self, f: impl FnOnce(&Log) -> T) -> Result<T, PartitionError> {
        self.with_log(|log| Ok(f(log)))
    }

    fn close(&self) -> Result<(), StorageError> {
        match self.log.lock().take() {
            Some(log) => log.close(),
            None => Ok(()),
        }
    }

    fn delete(&self) -> Result<(), StorageError> {
        match self.log.lock().take() {
            Some(log) => log.delete(),
            None => Ok(()),
        }
    }
}

pub struct ReplicaManager {
    data_dir: PathBuf,
    node_id: i32,
    env: LogEnv,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    data_version: watch::Sender<u64>,
    /// The image the hosted partitions match; also serializes `sync`.
    synced: Mutex<Arc<MetadataImage>>,
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
    }
}

impl ReplicaManager {
    pub fn new(data_dir: &Path, node_id: i32, env: LogEnv) -> Self {
        let (data_version, _) = watch::channel(0);
        ReplicaManager {
            data_dir: data_dir.to_owned(),
            node_id,
            env,
            partitions: RwLock::new(HashMap::new()),
            data_version,
            synced: Mutex::new(Arc::new(MetadataImage::default())),
        }
    }

    pub fn env(&self) -> &LogEnv {
        &self.env
    }

    /// Every hosted partition (a snapshot of the set).
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .get(&(topic.to_owned(), partition))
            .cloned()
    }

    /// A receiver that changes whenever any partition gets new data.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.data_version.subscribe()
    }

    pub fn notify_appended(&self) {
        self.data_version.send_modify(|v| *v += 1);
    }

    /// Makes the hosted partitions match the image: opens new ones, applies
    /// changed configs, deletes those whose topic is gone (or was
    /// re-created under a new id). Only topics that differ from the last
    /// synced image are looked at.
    pub fn sync(
        &self,
        image: &Arc<MetadataImage>,
        config: &BrokerConfig,
        clean_shutdown: bool,
    ) -> Result<(), StorageError> {
        let mut synced = self.synced.lock();
        let previous = synced.clone();
        let mut changed: Vec<(&Arc<TopicInfo>, Option<&Arc<TopicInfo>>)> = Vec::new();
        for topic in image.topics() {
            match previous.topic_by_id(&topic.topic_id) {
                Some(old) if Arc::ptr_eq(old, topic) => {}
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
                let keys: Vec<TopicPartition> = map
                    .iter()
                    .filter(|(_, p)| gone.contains(&p.topic_id))
                    .map(|(tp, _)| tp.clone())
                    .collect();
                keys.iter().filter_map(|tp| map.remove(tp)).collect()
            };
            for partition in stale {
                tracing::info!(topic = %partition.topic, partition = partition.index, "deleting partition");
                partition.delete()?;
            }
        }
        for (topic, old) in changed {
            self.sync_topic(topic, old, config, clean_shutdown)?;
        }
        *synced = image.clone();
        Ok(())
    }

    fn sync_topic(
        &self,
        topic: &Arc<TopicInfo>,
        old: Option<&Arc<TopicInfo>>,
        config: &BrokerConfig,
        clean_shutdown: bool,
    ) -> Result<(), StorageError> {
        let log_config = log_config(config, topic);
        let configs_changed = old.is_some_and(|o| o.configs != topic.configs);
        for p in &topic.partitions {
            if !p.replicas.contains(&self.node_id) {
                continue;
            }
            if let Some(existing) = self.get(&topic.name, p.partition_id) {
                if existing.topic_id == topic.topic_id {
                    existing
                        .leader_epoch
                        .store(p.leader_epoch, Ordering::Release);
                    if configs_changed {
                        existing.with_log_mut(|log| log.update_config(log_config.clone()))?;
                    }
                    continue;
                }
                // Same name, new topic id: the old topic is gone.
                if let Some(stale) = self
                    .partitions
                    .write()
                    .remove(&(topic.name.clone(), p.partition_id))
                {
                    stale.delete()?;
                }
            }
            let dir = self
                .data_dir
                .join(format!("{}-{}", topic.name, p.partition_id));
            let log = Log::open_in(&self.env, &dir, log_config.clone(), clean_shutdown)?;
            let partition = Arc::new(Partition {
                topic: topic.name.clone(),
                topic_id: topic.topic_id,
                index: p.partition_id,
                leader_epoch: AtomicI32::new(p.leader_epoch),
                log: Mutex::new(Some(log)),
            });
            self.partitions
                .write()
                .insert((topic.name.clone(), p.partition_id), partition);
        }
        Ok(())
    }

    /// Closes every log (flushing data, writing indexes and snapshots).
    pub fn shutdown(&self) -> Result<(), StorageError> {
        let partitions: Vec<Arc<Partition>> =
            self.partitions.write().drain().map(|(_, p)| p).collect();
        let mut first_error = None;
        for partition in partitions {
            if let Err(e) = partition.close() {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "close log");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetadataRecord;

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
            });
        }
        records
    }

    #[test]
    fn sync_opens_new_partitions_applies_config_changes_and_deletes_gone_topics() {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::default();
        let replicas = ReplicaManager::new(dir.path(), 1, LogEnv::os(8));
        let empty = Arc::new(MetadataImage::default());
        let image = apply(&empty, &[topic("a", 1, 3), topic("b", 2, 2)].concat());
        replicas.sync(&image, &config, true).unwrap();
        assert_eq!(replicas.all_partitions().len(), 5);
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
}
