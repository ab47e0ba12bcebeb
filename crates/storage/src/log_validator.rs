//! `LogValidator`: Kafka's checks of a client's record batch against the
//! records it carries, run by [`crate::Log::append`] before any offset is
//! assigned.
//!
//! It owns the rules of Kafka's `LogValidator` for v2 batches from clients:
//! the header's record count and last offset delta agree
//! (`records_count == last_offset_delta + 1 > 0`); clients write no control
//! batches; an idempotent batch has a sequence; the records section holds
//! exactly `records_count` well-formed records whose offset deltas are
//! 0, 1, 2, ...; on a compacted topic every record has a key; with
//! `CreateTime` every record timestamp lies within
//! `message.timestamp.before.max.ms` / `message.timestamp.after.max.ms` of
//! the broker's clock. A batch-wide fault refuses the batch with one error;
//! per-record faults (keys, timestamps) are collected for every record, as
//! Produce v8+ reports them in `record_errors`.
//!
//! Cost: records are walked with [`RecordSkim`], which reads varints and
//! skips key, value and header bytes without copying or allocating, so an
//! uncompressed batch is validated where it lies in the request frame and
//! the write path stays zero-copy. A compressed batch is decompressed to
//! walk its records (Kafka does the same; it is the only way to check inner
//! offsets and keys), capped at [`DECOMPRESSED_BATCH_MAX_BYTES`]; the
//! compressed bytes are still what is written.
//!
//! The largest record timestamp is returned so the log can correct a
//! `CreateTime` header whose max timestamp disagrees with its records, as
//! Kafka rewrites it rather than refusing the batch.

use tarn_protocol::compression::{self, CompressionError};
use tarn_protocol::record_batch::{
    BatchError, Compression, RecordBatchHeader, RecordSkim, RecordSummary, TimestampType,
    RECORD_BATCH_HEADER_SIZE,
};

use crate::error::{AppendError, RecordError};

/// The most a compressed batch may expand to while its records are
/// validated; a larger one is refused as MESSAGE_TOO_LARGE. Bounds the
/// memory one produce can make the broker allocate.
pub const DECOMPRESSED_BATCH_MAX_BYTES: usize = 64 << 20;

/// The most record errors one refusal carries; the rest are counted in its
/// message. Bounds the response a batch of keyless records can cause.
pub const RECORD_ERRORS_MAX: usize = 1_000;

/// Record timestamp of a record without one.
const NO_TIMESTAMP: i64 = -1;

/// The topic settings and the clock a batch is validated against.
#[derive(Debug, Clone, Copy)]
pub struct ValidationConfig {
    /// `cleanup.policy` includes `compact`: every record needs a key.
    pub compacted: bool,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`.
    pub timestamp_after_max_ms: i64,
    /// The broker's clock now.
    pub now_ms: i64,
}

/// What validation found out about a valid batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidatedBatch {
    /// The largest record timestamp (-1 when no record has one), which a
    /// `CreateTime` batch's header must carry as its max timestamp.
    pub max_timestamp: i64,
}

/// Validates one batch (`batch` is exactly the batch's bytes, CRC already
/// checked) at byte `position` of a produce's records.
pub fn validate_client_batch(
    position: usize,
    batch: &[u8],
    header: &RecordBatchHeader,
    config: &ValidationConfig,
) -> Result<ValidatedBatch, AppendError> {
    validate_header(position, header)?;
    let section = batch
        .get(RECORD_BATCH_HEADER_SIZE..header.total_size())
        .ok_or_else(|| {
            corrupt(
                position,
                BatchError::Truncated {
                    needed: header.total_size(),
                    available: batch.len(),
                },
            )
        })?;
    if header.compression() == Compression::None {
        return validate_records(position, section, header, config);
    }
    DECOMPRESSED.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let decompressed = compression::decompress_reusing(
            header.compression(),
            section,
            DECOMPRESSED_BATCH_MAX_BYTES,
            &mut scratch,
        )
        .map_err(|e| match e {
            CompressionError::TooLarge { .. } => AppendError::MessageTooLarge(format!(
                "batch at byte {position} decompresses to more than \
                 {DECOMPRESSED_BATCH_MAX_BYTES} bytes"
            )),
            e => corrupt(position, BatchError::Compression(e)),
        })
        .and_then(|()| validate_records(position, scratch.bytes(), header, config));
        scratch.release_above(DECOMPRESSED_KEPT_BYTES);
        decompressed
    })
}

thread_local! {
    /// Each thread's buffer for the records of compressed batches, reused
    /// from batch to batch: a fresh one per batch cost the allocation, the
    /// zeroing of its pages and, for lz4, a copy of every block.
    static DECOMPRESSED: std::cell::RefCell<compression::Decompressed> =
        std::cell::RefCell::new(compression::Decompressed::default());
}

/// A thread's decompression buffer larger than this (after a large batch)
/// is let go once used.
const DECOMPRESSED_KEPT_BYTES: usize = 4 << 20;

/// The checks Kafka's `validateBatch` makes of a client batch's header.
fn validate_header(position: usize, header: &RecordBatchHeader) -> Result<(), AppendError> {
    if header.records_count <= 0 {
        return Err(AppendError::InvalidRecord(format!(
            "batch at byte {position} reports {} records; a batch holds at least one",
            header.records_count
        )));
    }
    if i64::from(header.records_count) != header.offset_count() {
        return Err(AppendError::InvalidRecord(format!(
            "batch at byte {position} reports {} records but its last offset delta {} spans {} offsets",
            header.records_count,
            header.last_offset_delta,
            header.offset_count()
        )));
    }
    if header.is_control() {
        return Err(AppendError::InvalidRecord(format!(
            "batch at byte {position} is a control batch; clients may not write control records"
        )));
    }
    if header.has_producer_id() && header.base_sequence < 0 {
        return Err(AppendError::InvalidRecord(format!(
            "batch at byte {position} from producer {} has invalid sequence {}",
            header.producer_id, header.base_sequence
        )));
    }
    Ok(())
}

/// Walks the records section: structure and offset deltas refuse the
/// batch at the first fault; keys and timestamps are checked for every
/// record and refused together.
fn validate_records(
    position: usize,
    records: &[u8],
    header: &RecordBatchHeader,
    config: &ValidationConfig,
) -> Result<ValidatedBatch, AppendError> {
    let mut skim = RecordSkim::new(records, header.records_count);
    let mut refused = Refusals::default();
    let mut max_timestamp = NO_TIMESTAMP;
    for (index, record) in (0i32..).zip(skim.by_ref()) {
        let record = record.map_err(|e| corrupt(position, e))?;
        if record.offset_delta != index {
            return Err(AppendError::InvalidRecord(format!(
                "record {index} of batch at byte {position} has offset delta {}; \
                 the records of a batch must have offset deltas 0, 1, 2, ...",
                record.offset_delta
            )));
        }
        let timestamp = record_timestamp(header, &record);
        max_timestamp = max_timestamp.max(timestamp);
        if config.compacted && !record.has_key {
            refused.add(
                index,
                false,
                "compacted topic cannot accept a record without a key".to_string(),
            );
        } else if let Some(problem) = timestamp_problem(header, timestamp, config) {
            refused.add(index, true, problem);
        }
    }
    skim.finish().map_err(|e| corrupt(position, e))?;
    refused.into_result(position)?;
    Ok(ValidatedBatch { max_timestamp })
}

/// A record's timestamp as Kafka reads it: in a LogAppendTime batch every
/// record carries the batch's max timestamp.
fn record_timestamp(header: &RecordBatchHeader, record: &RecordSummary) -> i64 {
    match header.timestamp_type() {
        TimestampType::LogAppendTime => header.max_timestamp,
        TimestampType::CreateTime => header.base_timestamp.saturating_add(record.timestamp_delta),
    }
}

/// Kafka's `validateTimestamp`: a CreateTime topic bounds record timestamps
/// around the broker's clock; a producer may never claim LogAppendTime
/// (except that on a CreateTime topic its max timestamp is then checked
/// like any record timestamp).
fn timestamp_problem(
    header: &RecordBatchHeader,
    timestamp: i64,
    config: &ValidationConfig,
) -> Option<String> {
    if config.timestamp_type == TimestampType::CreateTime && timestamp != NO_TIMESTAMP {
        // i128: the limits default to i64::MAX, so the differences overflow i64.
        let behind = i128::from(config.now_ms) - i128::from(timestamp);
        if behind > i128::from(config.timestamp_before_max_ms)
            || -behind > i128::from(config.timestamp_after_max_ms)
        {
            let earliest = i128::from(config.now_ms) - i128::from(config.timestamp_before_max_ms);
            let latest = i128::from(config.now_ms) + i128::from(config.timestamp_after_max_ms);
            return Some(format!(
                "timestamp {timestamp} is out of range [{earliest}, {latest}] \
                 (message.timestamp.before.max.ms, message.timestamp.after.max.ms)"
            ));
        }
        None
    } else if header.timestamp_type() == TimestampType::LogAppendTime {
        Some("a producer may not set the timestamp type to LogAppendTime".to_string())
    } else {
        None
    }
}

/// Record errors collected over a batch.
#[derive(Default)]
struct Refusals {
    errors: Vec<RecordError>,
    total: usize,
    invalid_timestamp: bool,
}

impl Refusals {
    fn add(&mut self, batch_index: i32, invalid_timestamp: bool, message: String) {
        self.total += 1;
        self.invalid_timestamp |= invalid_timestamp;
        if self.errors.len() < RECORD_ERRORS_MAX {
            self.errors.push(RecordError {
                batch_index,
                message,
            });
        }
    }

    fn into_result(self, position: usize) -> Result<(), AppendError> {
        let Some(first) = self.errors.first() else {
            return Ok(());
        };
        let reason = if self.invalid_timestamp {
            "with an invalid timestamp"
        } else {
            "that are invalid"
        };
        let message = format!(
            "batch at byte {position} holds {} records {reason}; the first, record {}: {}",
            self.total, first.batch_index, first.message
        );
        Err(AppendError::RecordErrors {
            invalid_timestamp: self.invalid_timestamp,
            message,
            errors: self.errors,
        })
    }
}

fn corrupt(position: usize, error: BatchError) -> AppendError {
    AppendError::CorruptMessage(format!("batch at byte {position}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::record_batch::{
        encode_varlong, parse_header, validate_batch, RecordBatchBuilder,
    };

    const NOW_MS: i64 = 1_700_000_000_000;

    fn config() -> ValidationConfig {
        ValidationConfig {
            compacted: false,
            timestamp_type: TimestampType::CreateTime,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            now_ms: NOW_MS,
        }
    }

    fn validate(batch: &[u8], config: &ValidationConfig) -> Result<ValidatedBatch, AppendError> {
        let header = validate_batch(batch).expect("a well-formed test batch");
        validate_client_batch(0, batch, &header, config)
    }

    /// Rewrites the header field at `at` (big-endian) and fixes the CRC, as
    /// a hostile client would.
    fn patch(batch: &mut [u8], at: usize, bytes: &[u8]) {
        batch[at..at + bytes.len()].copy_from_slice(bytes);
        let crc = tarn_protocol::record_batch::compute_crc(batch);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    /// An uncompressed batch whose records are encoded by hand:
    /// `(offset_delta, timestamp_delta, key)` each.
    fn hand_made(records: &[(i64, i64, Option<&[u8]>)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (offset_delta, timestamp_delta, key) in records {
            let mut record = vec![0u8];
            encode_varlong(*timestamp_delta, &mut record);
            encode_varlong(*offset_delta, &mut record);
            match key {
                Some(k) => {
                    encode_varlong(k.len() as i64, &mut record);
                    record.extend_from_slice(k);
                }
                None => encode_varlong(-1, &mut record),
            }
            encode_varlong(1, &mut record);
            record.push(b'v');
            encode_varlong(0, &mut record);
            encode_varlong(record.len() as i64, &mut body);
            body.extend_from_slice(&record);
        }
        let mut batch = RecordBatchBuilder::new().record(NOW_MS, None, None).build();
        batch.truncate(RECORD_BATCH_HEADER_SIZE);
        batch.extend_from_slice(&body);
        let length = (batch.len() - 12) as i32;
        batch[8..12].copy_from_slice(&length.to_be_bytes());
        let count = records.len() as i32;
        batch[57..61].copy_from_slice(&count.to_be_bytes());
        patch(&mut batch, 23, &(count - 1).max(0).to_be_bytes());
        batch
    }

    fn builder_batch(count: usize) -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new();
        for i in 0..count {
            builder = builder.record(NOW_MS + i as i64, Some(b"k"), Some(b"v"));
        }
        builder.build()
    }

    #[test]
    fn a_well_formed_batch_passes_and_reports_its_max_timestamp() {
        let batch = builder_batch(5);
        assert_eq!(
            validate(&batch, &config()).unwrap(),
            ValidatedBatch {
                max_timestamp: NOW_MS + 4
            }
        );
    }

    #[test]
    fn last_offset_delta_must_match_the_record_count() {
        // The batch: one record, last offset delta 2^30.
        let mut batch = builder_batch(1);
        patch(&mut batch, 23, &(1i32 << 30).to_be_bytes());
        let e = validate(&batch, &config()).unwrap_err();
        assert!(
            matches!(&e, AppendError::InvalidRecord(m) if m.contains("last offset delta")),
            "{e}"
        );
        // Too small a delta for the count is refused too.
        let mut batch = builder_batch(3);
        patch(&mut batch, 23, &1i32.to_be_bytes());
        assert!(matches!(
            validate(&batch, &config()),
            Err(AppendError::InvalidRecord(_))
        ));
    }

    #[test]
    fn a_batch_without_records_is_refused() {
        let batch = RecordBatchBuilder::new().build();
        assert!(matches!(
            validate(&batch, &config()),
            Err(AppendError::InvalidRecord(m)) if m.contains("at least one")
        ));
    }

    #[test]
    fn record_count_must_match_the_records_section() {
        // Claims four records, holds three (deltas consistent with the claim).
        let mut batch = builder_batch(3);
        batch[57..61].copy_from_slice(&4i32.to_be_bytes());
        patch(&mut batch, 23, &3i32.to_be_bytes());
        assert!(matches!(
            validate(&batch, &config()),
            Err(AppendError::CorruptMessage(_))
        ));
        // Claims two, holds three: bytes are left over.
        let mut batch = builder_batch(3);
        batch[57..61].copy_from_slice(&2i32.to_be_bytes());
        patch(&mut batch, 23, &1i32.to_be_bytes());
        assert!(matches!(
            validate(&batch, &config()),
            Err(AppendError::CorruptMessage(m)) if m.contains("left after")
        ));
    }

    #[test]
    fn offset_deltas_must_count_from_zero() {
        let batch = hand_made(&[(0, 0, Some(b"a")), (2, 0, Some(b"b")), (1, 0, Some(b"c"))]);
        let e = validate(&batch, &config()).unwrap_err();
        assert!(
            matches!(&e, AppendError::InvalidRecord(m) if m.contains("record 1")),
            "{e}"
        );
        let batch = hand_made(&[(0, 0, None), (1, 0, None)]);
        assert!(validate(&batch, &config()).is_ok());
    }

    #[test]
    fn inner_offsets_of_compressed_batches_are_checked() {
        let plain = hand_made(&[(0, 0, None), (5, 0, None)]);
        let header = parse_header(&plain).unwrap();
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut packed = Vec::new();
            tarn_protocol::record_batch::recompress_batch(
                &plain,
                &header,
                codec,
                1 << 20,
                &mut packed,
            )
            .unwrap();
            assert!(
                matches!(
                    validate(&packed, &config()),
                    Err(AppendError::InvalidRecord(_))
                ),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn record_lengths_are_checked() {
        let mut batch = builder_batch(2);
        // The first record's length varint (one byte, zigzag): one more.
        let first = RECORD_BATCH_HEADER_SIZE;
        batch[first] += 2;
        patch(&mut batch, 23, &1i32.to_be_bytes());
        assert!(matches!(
            validate(&batch, &config()),
            Err(AppendError::CorruptMessage(_))
        ));
    }

    #[test]
    fn control_batches_from_clients_are_refused() {
        let batch = RecordBatchBuilder::new()
            .control(true)
            .record(NOW_MS, Some(b"k"), Some(b"v"))
            .build();
        assert!(matches!(
            validate(&batch, &config()),
            Err(AppendError::InvalidRecord(m)) if m.contains("control")
        ));
    }

    #[test]
    fn idempotent_batches_need_a_sequence() {
        let batch = RecordBatchBuilder::new()
            .producer(7, 0, -1)
            .record(NOW_MS, None, None)
            .build();
        assert!(matches!(
            validate(&batch, &config()),
            Err(AppendError::InvalidRecord(m)) if m.contains("sequence")
        ));
    }

    #[test]
    fn keyless_records_on_a_compacted_topic_are_each_reported() {
        let mut builder = RecordBatchBuilder::new();
        for i in 0..100 {
            let key = (i % 10 != 3).then_some(&b"k"[..]);
            builder = builder.record(NOW_MS, key, Some(b"v"));
        }
        let batch = builder.build();
        let compacted = ValidationConfig {
            compacted: true,
            ..config()
        };
        assert!(validate(&batch, &config()).is_ok());
        let Err(AppendError::RecordErrors {
            invalid_timestamp,
            errors,
            ..
        }) = validate(&batch, &compacted)
        else {
            panic!("keyless records must be refused");
        };
        assert!(!invalid_timestamp);
        let indexes: Vec<i32> = errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(indexes, (0..10).map(|i| i * 10 + 3).collect::<Vec<_>>());
    }

    #[test]
    fn timestamps_outside_the_configured_window_are_each_reported() {
        let batch = RecordBatchBuilder::new()
            .record(NOW_MS, None, None)
            .record(NOW_MS - 10_000, None, None)
            .record(NOW_MS + 10_000, None, None)
            .record(-1, None, None)
            .build();
        let window = ValidationConfig {
            timestamp_before_max_ms: 5_000,
            timestamp_after_max_ms: 5_000,
            ..config()
        };
        assert!(validate(&batch, &config()).is_ok());
        let Err(AppendError::RecordErrors {
            invalid_timestamp,
            errors,
            ..
        }) = validate(&batch, &window)
        else {
            panic!("out-of-range timestamps must be refused");
        };
        assert!(invalid_timestamp);
        let indexes: Vec<i32> = errors.iter().map(|e| e.batch_index).collect();
        // Record 3's timestamp is base + (-1 - base) = -1: no timestamp.
        assert_eq!(indexes, vec![1, 2]);
        // LogAppendTime topics do not bound producer timestamps.
        let log_append = ValidationConfig {
            timestamp_type: TimestampType::LogAppendTime,
            ..window
        };
        assert!(validate(&batch, &log_append).is_ok());
    }

    #[test]
    fn producers_may_not_claim_log_append_time() {
        let batch = RecordBatchBuilder::new()
            .log_append_time(true)
            .record(NOW_MS, None, None)
            .build();
        let log_append = ValidationConfig {
            timestamp_type: TimestampType::LogAppendTime,
            ..config()
        };
        assert!(matches!(
            validate(&batch, &log_append),
            Err(AppendError::RecordErrors {
                invalid_timestamp: true,
                ..
            })
        ));
    }

    #[test]
    fn record_errors_are_capped() {
        let mut builder = RecordBatchBuilder::new();
        for _ in 0..RECORD_ERRORS_MAX + 5 {
            builder = builder.record(NOW_MS, None, None);
        }
        let compacted = ValidationConfig {
            compacted: true,
            ..config()
        };
        let Err(AppendError::RecordErrors {
            errors, message, ..
        }) = validate(&builder.build(), &compacted)
        else {
            panic!("keyless records must be refused");
        };
        assert_eq!(errors.len(), RECORD_ERRORS_MAX);
        assert!(
            message.contains(&(RECORD_ERRORS_MAX + 5).to_string()),
            "{message}"
        );
    }

    #[test]
    fn the_max_timestamp_comes_from_the_records() {
        let mut batch = builder_batch(3);
        patch(&mut batch, 35, &5i64.to_be_bytes());
        assert_eq!(
            validate(&batch, &config()).unwrap().max_timestamp,
            NOW_MS + 2
        );
    }
}
