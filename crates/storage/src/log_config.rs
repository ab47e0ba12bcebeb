//! `LogConfig`: the per-partition settings the storage engine enforces,
//! one field per Kafka topic config, with the unit in the field name.
//!
//! The broker builds it from the topic's configs over the broker's `log.*`
//! defaults; [`LogConfig::default`] holds Kafka's defaults. `i64::MAX`
//! stands for Kafka's `Long.MAX_VALUE` ("never") and -1 for "no limit"
//! where Kafka uses it (`retention.ms`, `retention.bytes`).

use tarn_protocol::record_batch::TimestampType;

use crate::error::StorageError;

/// Kafka's `log.segment.bytes` default: 1 GiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 1 << 30;
/// Kafka's `log.index.interval.bytes` default.
pub const DEFAULT_INDEX_INTERVAL_BYTES: u32 = 4096;
/// Kafka's `log.index.size.max.bytes` default: 10 MiB.
pub const DEFAULT_SEGMENT_INDEX_BYTES: u32 = 10 << 20;
/// Kafka's `message.max.bytes` default.
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1_048_588;
/// Kafka 4.0's default `message.timestamp.after.max.ms`: one hour.
pub const DEFAULT_MESSAGE_TIMESTAMP_AFTER_MAX_MS: i64 = 60 * 60 * 1000;
/// Kafka's lower bound for `segment.bytes`.
pub const MIN_SEGMENT_BYTES: u64 = 14;
/// Seven days, Kafka's default for `segment.ms` and `retention.ms`.
pub const SEVEN_DAYS_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// `cleanup.policy`: a list of `delete` and `compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };
    pub const COMPACT: CleanupPolicy = CleanupPolicy {
        delete: false,
        compact: true,
    };

    /// Parses Kafka's comma-separated list, e.g. `compact,delete`.
    pub fn parse(value: &str) -> Result<CleanupPolicy, StorageError> {
        let mut policy = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for item in value.split(',').map(str::trim) {
            match item {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                other => {
                    return Err(StorageError::InvalidConfig(format!(
                        "cleanup.policy item '{other}' is not delete or compact"
                    )))
                }
            }
        }
        Ok(policy)
    }
}

/// Per-partition settings, spelled after Kafka's topic configs.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`
    pub segment_bytes: u64,
    /// `index.interval.bytes`
    pub index_interval_bytes: u32,
    /// `segment.index.bytes`: maximum size of each index file; a full
    /// index rolls the segment.
    pub segment_index_bytes: u32,
    /// `max.message.bytes`
    pub max_message_bytes: u32,
    /// `segment.ms`: roll the active segment once it is this old.
    pub segment_ms: i64,
    /// `segment.jitter.ms`: each segment rolls up to this much earlier
    /// than `segment.ms` (its share fixed per segment: [`Self::roll_ms`]).
    pub segment_jitter_ms: i64,
    /// `retention.ms`: delete segments whose newest record is older; -1 keeps
    /// them forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete the oldest segments while the partition is
    /// larger; -1 means no limit.
    pub retention_bytes: i64,
    /// `cleanup.policy`
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long the cleaner keeps tombstones.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger than this are not compacted.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: records older than this are compacted even
    /// below the dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `flush.messages`: fsync once this many records were appended since
    /// the last fsync, before acknowledging the append that crossed it.
    pub flush_messages: i64,
    /// `flush.ms`: fsync in the background once the oldest unflushed append
    /// is this old.
    pub flush_ms: i64,
    /// `file.delete.delay.ms`: how long deleted segment files linger as
    /// `*.deleted` before they are removed.
    pub file_delete_delay_ms: i64,
    /// `message.timestamp.type`
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`: with CreateTime, how far a record
    /// timestamp may lie behind the broker's clock.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: with CreateTime, how far a record
    /// timestamp may lie ahead of the broker's clock.
    pub message_timestamp_after_max_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            segment_index_bytes: DEFAULT_SEGMENT_INDEX_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            segment_ms: SEVEN_DAYS_MS,
            segment_jitter_ms: 0,
            retention_ms: SEVEN_DAYS_MS,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            file_delete_delay_ms: 60_000,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: DEFAULT_MESSAGE_TIMESTAMP_AFTER_MAX_MS,
        }
    }
}

impl LogConfig {
    /// Kafka's bounds: positions in a segment must fit the index's u32 and
    /// Kafka's signed int, and an index must hold at least one entry.
    pub fn validate(&self) -> Result<(), StorageError> {
        let invalid = |m: String| Err(StorageError::InvalidConfig(m));
        if !(MIN_SEGMENT_BYTES..=i32::MAX as u64).contains(&self.segment_bytes) {
            return invalid(format!(
                "segment.bytes {} is outside [{MIN_SEGMENT_BYTES}, {}]",
                self.segment_bytes,
                i32::MAX
            ));
        }
        if self.segment_index_bytes < 12 {
            return invalid(format!(
                "segment.index.bytes {} is below 12",
                self.segment_index_bytes
            ));
        }
        if self.segment_ms < 1 {
            return invalid(format!("segment.ms {} is below 1", self.segment_ms));
        }
        if self.segment_jitter_ms < 0 {
            return invalid(format!(
                "segment.jitter.ms {} is below 0",
                self.segment_jitter_ms
            ));
        }
        if self.retention_ms < -1 {
            return invalid(format!("retention.ms {} is below -1", self.retention_ms));
        }
        if self.flush_messages < 1 {
            return invalid(format!("flush.messages {} is below 1", self.flush_messages));
        }
        for (name, value) in [
            ("flush.ms", self.flush_ms),
            ("delete.retention.ms", self.delete_retention_ms),
            ("min.compaction.lag.ms", self.min_compaction_lag_ms),
            ("file.delete.delay.ms", self.file_delete_delay_ms),
            (
                "message.timestamp.before.max.ms",
                self.message_timestamp_before_max_ms,
            ),
            (
                "message.timestamp.after.max.ms",
                self.message_timestamp_after_max_ms,
            ),
        ] {
            if value < 0 {
                return invalid(format!("{name} {value} is negative"));
            }
        }
        if self.max_compaction_lag_ms < 1 {
            return invalid(format!(
                "max.compaction.lag.ms {} is below 1",
                self.max_compaction_lag_ms
            ));
        }
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            return invalid(format!(
                "min.cleanable.dirty.ratio {} is outside [0, 1]",
                self.min_cleanable_dirty_ratio
            ));
        }
        Ok(())
    }

    /// Kafka's `maxSegmentMs`: a compacted log also rolls by
    /// `max.compaction.lag.ms`, so its active segment becomes cleanable.
    pub fn max_segment_ms(&self) -> i64 {
        if self.cleanup_policy.compact && self.max_compaction_lag_ms > 0 {
            self.segment_ms.min(self.max_compaction_lag_ms)
        } else {
            self.segment_ms
        }
    }

    /// How old a segment whose jitter draw is `draw` may grow before it
    /// rolls: Kafka's `maxSegmentMs` less the segment's jitter, which
    /// Kafka draws at random per segment below `segment.jitter.ms` (and
    /// below `segment.ms`) so that partitions made together do not roll
    /// together. Tarn's draw is a hash of the partition and the segment's
    /// base offset (`Log::active_roll_ms`), so that a replay rolls alike.
    pub fn roll_ms(&self, draw: u64) -> i64 {
        if self.segment_jitter_ms <= 0 {
            return self.max_segment_ms();
        }
        let bound = self.segment_jitter_ms.min(self.segment_ms).max(1) as u64;
        self.max_segment_ms() - (draw % bound) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_policy_parses_kafka_lists() {
        assert_eq!(
            CleanupPolicy::parse("compact,delete").unwrap(),
            CleanupPolicy {
                delete: true,
                compact: true
            }
        );
        assert_eq!(
            CleanupPolicy::parse("delete").unwrap(),
            CleanupPolicy::DELETE
        );
        assert!(CleanupPolicy::parse("shred").is_err());
    }

    #[test]
    fn validate_names_the_bad_key() {
        assert!(LogConfig::default().validate().is_ok());
        let bad = LogConfig {
            flush_messages: 0,
            ..LogConfig::default()
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("flush.messages"), "{err}");
        let compact = LogConfig {
            cleanup_policy: CleanupPolicy::COMPACT,
            max_compaction_lag_ms: 1000,
            ..LogConfig::default()
        };
        assert_eq!(compact.max_segment_ms(), 1000);
    }
}
