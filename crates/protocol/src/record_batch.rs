//! Zero-copy view of Kafka v2 (magic = 2) record batches.
//!
//! This module owns the byte layout of a record batch: parsing and validating
//! its 61-byte header, walking a buffer of concatenated batches, patching the
//! two fields a broker is allowed to change (base offset and partition leader
//! epoch), and decoding the records of an uncompressed batch. It never copies
//! record data and never does I/O. Invariant: a header returned by
//! [`parse_header`] has a sane length, magic 2, a known compression codec and
//! non-negative record count and last offset delta; a header returned by
//! [`validate_batch`] additionally has a matching CRC-32C and lies wholly
//! inside the buffer.
//!
//! Layout (big-endian): baseOffset i64 @0, batchLength i32 @8,
//! partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17, attributes i16
//! @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27, maxTimestamp i64 @35,
//! producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
//! recordsCount i32 @57, records @61. The CRC covers bytes 21..end, so the
//! base offset and the partition leader epoch may be rewritten without
//! recomputing it.

use thiserror::Error;

use crate::compression::{self, CompressionError};

/// Bytes before the batch length field is counted: baseOffset + batchLength.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed v2 batch header; records start here.
pub const RECORD_BATCH_HEADER_SIZE: usize = 61;
/// Smallest legal batchLength: the header minus [`LOG_OVERHEAD`].
pub const MIN_BATCH_LENGTH: i32 = (RECORD_BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32;
/// The only record batch format this module understands.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a batch written by a non-idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch of a batch written by a non-idempotent producer.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Base sequence of a batch written by a non-idempotent producer.
pub const NO_SEQUENCE: i32 = -1;

const BASE_OFFSET_OFFSET: usize = 0;
const BATCH_LENGTH_OFFSET: usize = 8;
const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const BASE_TIMESTAMP_OFFSET: usize = 27;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const PRODUCER_ID_OFFSET: usize = 43;
const PRODUCER_EPOCH_OFFSET: usize = 51;
const BASE_SEQUENCE_OFFSET: usize = 53;
const RECORDS_COUNT_OFFSET: usize = 57;

const COMPRESSION_CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_FLAG_MASK: i16 = 0x10;
const CONTROL_FLAG_MASK: i16 = 0x20;
/// KIP-534: the base timestamp holds the batch's tombstone delete horizon.
pub const DELETE_HORIZON_FLAG_MASK: i16 = 0x40;

/// Why a byte slice is not a usable v2 record batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    #[error("truncated batch: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("invalid batch length {0} (minimum {MIN_BATCH_LENGTH})")]
    InvalidLength(i32),
    #[error("unsupported record batch magic {0} (only magic 2 is supported)")]
    UnsupportedMagic(i8),
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("invalid records count {0}")]
    InvalidRecordsCount(i32),
    #[error("invalid last offset delta {0}")]
    InvalidLastOffsetDelta(i32),
    #[error("unknown compression codec {0}")]
    UnknownCompression(u8),
    #[error("malformed record: {0}")]
    MalformedRecord(&'static str),
    #[error(transparent)]
    Compression(#[from] CompressionError),
}

/// Compression codec from attribute bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn from_id(id: u8) -> Option<Compression> {
        match id {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }

    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

/// Attribute bit 3: how the batch's timestamps were assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// Every field of a v2 record batch header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl RecordBatchHeader {
    /// Offset of the last record, counting gaps left by compaction. A base
    /// offset near `i64::MAX` (which only a hostile request or a damaged
    /// file holds) saturates instead of overflowing, so the callers' range
    /// checks refuse it.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// Number of offsets the batch occupies (last offset delta + 1).
    pub fn offset_count(&self) -> i64 {
        i64::from(self.last_offset_delta) + 1
    }

    /// Whole batch size in bytes, including the base offset and length fields.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    pub fn compression(&self) -> Compression {
        // parse_header rejected unknown codecs, so this cannot fail.
        Compression::from_id((self.attributes & COMPRESSION_CODEC_MASK) as u8)
            .unwrap_or(Compression::None)
    }

    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_MASK != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG_MASK != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG_MASK != 0
    }

    /// KIP-534: when the log cleaner has stamped the batch, the time (ms)
    /// after which its tombstones may be removed; the stamp is stored in
    /// the base timestamp (record timestamp deltas are relative to it).
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_FLAG_MASK != 0).then_some(self.base_timestamp)
    }

    /// True when the batch came from an idempotent (or transactional) producer.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Sequence number of the last record, wrapping past `i32::MAX` to 0 as
    /// Kafka's `DefaultRecordBatch.incrementSequence` does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// `sequence + increment`, wrapping past `i32::MAX` to 0.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

fn read_i16(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([buf[at], buf[at + 1]])
}

fn read_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4-byte slice"))
}

fn read_i64(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8-byte slice"))
}

fn ensure_len(buf: &[u8], needed: usize) -> Result<(), BatchError> {
    if buf.len() < needed {
        return Err(BatchError::Truncated {
            needed,
            available: buf.len(),
        });
    }
    Ok(())
}

/// Parses the 61-byte header at the start of `buf`. Only the header needs to
/// be present, so callers can parse headers read from disk without the
/// records. Checks everything the header alone can tell; see
/// [`validate_batch`] for the CRC.
pub fn parse_header(buf: &[u8]) -> Result<RecordBatchHeader, BatchError> {
    // The magic byte sits at the same position in every message format, so
    // read it first: an old-format message set gets UnsupportedMagic, not a
    // confusing length error.
    ensure_len(buf, MAGIC_OFFSET + 1)?;
    let batch_length = read_i32(buf, BATCH_LENGTH_OFFSET);
    let magic = buf[MAGIC_OFFSET] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic(magic));
    }
    if batch_length < MIN_BATCH_LENGTH {
        return Err(BatchError::InvalidLength(batch_length));
    }
    ensure_len(buf, RECORD_BATCH_HEADER_SIZE)?;
    let header = RecordBatchHeader {
        base_offset: read_i64(buf, BASE_OFFSET_OFFSET),
        batch_length,
        partition_leader_epoch: read_i32(buf, PARTITION_LEADER_EPOCH_OFFSET),
        magic,
        crc: read_i32(buf, CRC_OFFSET) as u32,
        attributes: read_i16(buf, ATTRIBUTES_OFFSET),
        last_offset_delta: read_i32(buf, LAST_OFFSET_DELTA_OFFSET),
        base_timestamp: read_i64(buf, BASE_TIMESTAMP_OFFSET),
        max_timestamp: read_i64(buf, MAX_TIMESTAMP_OFFSET),
        producer_id: read_i64(buf, PRODUCER_ID_OFFSET),
        producer_epoch: read_i16(buf, PRODUCER_EPOCH_OFFSET),
        base_sequence: read_i32(buf, BASE_SEQUENCE_OFFSET),
        records_count: read_i32(buf, RECORDS_COUNT_OFFSET),
    };
    if header.records_count < 0 {
        return Err(BatchError::InvalidRecordsCount(header.records_count));
    }
    if header.last_offset_delta < 0 {
        return Err(BatchError::InvalidLastOffsetDelta(header.last_offset_delta));
    }
    let codec = (header.attributes & COMPRESSION_CODEC_MASK) as u8;
    if Compression::from_id(codec).is_none() {
        return Err(BatchError::UnknownCompression(codec));
    }
    Ok(header)
}

/// CRC-32C (Castagnoli) of the CRC'd part of a whole batch (bytes 21..end).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..])
}

/// Parses the header at the start of `buf` and checks that the whole batch
/// is present and its CRC-32C matches. Bytes after the batch are ignored.
pub fn validate_batch(buf: &[u8]) -> Result<RecordBatchHeader, BatchError> {
    let header = parse_header(buf)?;
    ensure_len(buf, header.total_size())?;
    let computed = compute_crc(&buf[..header.total_size()]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Rewrites the base offset. The field lies outside the CRC'd range, so the
/// CRC stays valid.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<(), BatchError> {
    ensure_len(batch, RECORD_BATCH_HEADER_SIZE)?;
    batch[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    Ok(())
}

/// Rewrites the partition leader epoch. The field lies outside the CRC'd
/// range, so the CRC stays valid.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<(), BatchError> {
    ensure_len(batch, RECORD_BATCH_HEADER_SIZE)?;
    batch[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
        .copy_from_slice(&epoch.to_be_bytes());
    Ok(())
}

/// Stamps LogAppendTime on a batch whose first [`RECORD_BATCH_HEADER_SIZE`]
/// bytes are `header` and whose records section is `records`: sets the
/// timestamp-type attribute, sets the max timestamp to `now_ms`, and
/// recomputes the CRC over the new header and the unchanged records.
pub fn set_log_append_time(
    header: &mut [u8; RECORD_BATCH_HEADER_SIZE],
    records: &[u8],
    now_ms: i64,
) {
    let attributes = read_i16(header, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_MASK;
    header[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    header[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[ATTRIBUTES_OFFSET..]), records);
    header[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Sets the max timestamp of a batch whose first [`RECORD_BATCH_HEADER_SIZE`]
/// bytes are `header` and whose records section is `records`, and
/// recomputes the CRC; as Kafka's validator does when a CreateTime batch's
/// header disagrees with the largest record timestamp.
pub fn set_max_timestamp(
    header: &mut [u8; RECORD_BATCH_HEADER_SIZE],
    records: &[u8],
    max_timestamp: i64,
) {
    header[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[ATTRIBUTES_OFFSET..]), records);
    header[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// The records section of a validated batch, decompressed, holding at most
/// `limit` bytes, and checked to hold exactly the header's record count
/// with nothing after the last record.
pub fn decompressed_records(
    batch: &[u8],
    header: &RecordBatchHeader,
    limit: usize,
) -> Result<Vec<u8>, BatchError> {
    ensure_len(batch, header.total_size())?;
    let section = &batch[RECORD_BATCH_HEADER_SIZE..header.total_size()];
    let records = compression::decompress(header.compression(), section, limit)?;
    let mut iter = RecordIter::over_records(&records, header.records_count);
    for record in iter.by_ref() {
        record?;
    }
    if iter.position() != records.len() {
        return Err(BatchError::MalformedRecord(
            "bytes left after the last record",
        ));
    }
    Ok(records)
}

/// Re-encodes a validated batch with the `target` codec, appending it to
/// `out`: every header field (offsets, timestamps, producer id, epoch and
/// sequence, flags) is kept, the codec bits, length and CRC are new.
/// Decompression is capped at `limit` bytes of records.
pub fn recompress_batch(
    batch: &[u8],
    header: &RecordBatchHeader,
    target: Compression,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), BatchError> {
    recompress_batch_at(batch, header, target, None, limit, out)
}

/// Like [`recompress_batch`], compressing at `level` (see
/// [`compression::compress_at`]).
pub fn recompress_batch_at(
    batch: &[u8],
    header: &RecordBatchHeader,
    target: Compression,
    level: Option<i32>,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), BatchError> {
    let records = decompressed_records(batch, header, limit)?;
    let start = out.len();
    out.extend_from_slice(&batch[..RECORD_BATCH_HEADER_SIZE]);
    compression::compress_at(target, level, &records, out);
    let batch_length = i32::try_from(out.len() - start - LOG_OVERHEAD)
        .map_err(|_| BatchError::InvalidLength(i32::MAX))?;
    let new = &mut out[start..];
    new[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&batch_length.to_be_bytes());
    let attributes = (header.attributes & !COMPRESSION_CODEC_MASK) | i16::from(target.id());
    new[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(new);
    new[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Walks a buffer of concatenated batches, validating each (CRC included)
/// and yielding `(position, header)`. After the first error it yields that
/// error once and then stops; [`BatchIter::position`] then tells where the
/// valid prefix ends, so the caller can decide whether to truncate.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    position: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> BatchIter<'a> {
        BatchIter {
            buf,
            position: 0,
            failed: false,
        }
    }

    /// End of the last batch yielded successfully.
    pub fn position(&self) -> usize {
        self.position
    }
}

impl Iterator for BatchIter<'_> {
    type Item = Result<(usize, RecordBatchHeader), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.buf.len() {
            return None;
        }
        match validate_batch(&self.buf[self.position..]) {
            Ok(header) => {
                let start = self.position;
                self.position += header.total_size();
                Some(Ok((start, header)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// One record of an uncompressed batch, borrowing from the batch bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

/// Iterates the records of an uncompressed batch. The batch must already
/// have passed [`validate_batch`]; a compressed batch yields an error.
pub struct RecordIter<'a> {
    buf: &'a [u8],
    position: usize,
    remaining: i32,
}

impl<'a> RecordIter<'a> {
    pub fn new(batch: &'a [u8], header: &RecordBatchHeader) -> Result<RecordIter<'a>, BatchError> {
        if header.compression() != Compression::None {
            return Err(BatchError::MalformedRecord(
                "cannot iterate records of a compressed batch",
            ));
        }
        ensure_len(batch, header.total_size())?;
        Ok(RecordIter {
            buf: &batch[..header.total_size()],
            position: RECORD_BATCH_HEADER_SIZE,
            remaining: header.records_count,
        })
    }

    /// Iterates `count` records laid out back to back in `records` (a
    /// batch's records section, decompressed if need be).
    pub fn over_records(records: &'a [u8], count: i32) -> RecordIter<'a> {
        RecordIter {
            buf: records,
            position: 0,
            remaining: count,
        }
    }

    /// Bytes of the buffer consumed by the records yielded so far.
    pub fn position(&self) -> usize {
        self.position
    }

    #[inline(always)]
    fn varlong(&mut self) -> Result<i64, BatchError> {
        let (value, used) = decode_varlong(&self.buf[self.position..])?;
        self.position += used;
        Ok(value)
    }

    #[inline(always)]
    fn varint(&mut self) -> Result<i32, BatchError> {
        i32::try_from(self.varlong()?).map_err(|_| BatchError::MalformedRecord("varint overflow"))
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8], BatchError> {
        let end = self
            .position
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or(BatchError::MalformedRecord("field runs past the record"))?;
        let out = &self.buf[self.position..end];
        self.position = end;
        Ok(out)
    }

    fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, BatchError> {
        match self.varint()? {
            -1 => Ok(None),
            len if len < 0 => Err(BatchError::MalformedRecord("negative length")),
            len => self.bytes(len as usize).map(Some),
        }
    }

    #[inline(always)]
    fn record(&mut self) -> Result<Record<'a>, BatchError> {
        let length = self.varint()?;
        if length < 0 {
            return Err(BatchError::MalformedRecord("negative record length"));
        }
        let end = self.position + length as usize;
        if end > self.buf.len() {
            return Err(BatchError::MalformedRecord("record runs past the batch"));
        }
        let attributes = self.bytes(1)?[0] as i8;
        let timestamp_delta = self.varlong()?;
        let offset_delta = self.varint()?;
        let key = self.nullable_bytes()?;
        let value = self.nullable_bytes()?;
        let header_count = self.varint()?;
        if header_count < 0 {
            return Err(BatchError::MalformedRecord("negative header count"));
        }
        let mut headers = Vec::new();
        for _ in 0..header_count {
            let key_len = self.varint()?;
            if key_len < 0 {
                return Err(BatchError::MalformedRecord("null header key"));
            }
            let header_key = self.bytes(key_len as usize)?;
            headers.push((header_key, self.nullable_bytes()?));
        }
        if self.position != end {
            return Err(BatchError::MalformedRecord("record length mismatch"));
        }
        Ok(Record {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        })
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining <= 0 {
            return None;
        }
        self.remaining -= 1;
        let record = self.record();
        if record.is_err() {
            self.remaining = 0;
        }
        Some(record)
    }
}

/// What the log validator needs of one record, read without copying or
/// allocating: the fields of a record before its key, and whether it has
/// a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSummary {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub has_key: bool,
}

/// Walks `count` records laid out back to back in `records` (a batch's
/// records section, decompressed if need be), checking each record's
/// structure (every length inside the record, the header count, the record
/// length against its fields) as [`RecordIter`] does, but only reading
/// varints: no record is decoded into memory. After the last record,
/// [`RecordSkim::finish`] checks that no bytes are left over.
pub struct RecordSkim<'a> {
    buf: &'a [u8],
    position: usize,
    remaining: i32,
}

impl<'a> RecordSkim<'a> {
    pub fn new(records: &'a [u8], count: i32) -> RecordSkim<'a> {
        RecordSkim {
            buf: records,
            position: 0,
            remaining: count,
        }
    }

    /// After every record was yielded: an error when bytes follow the last
    /// record.
    pub fn finish(&self) -> Result<(), BatchError> {
        if self.position != self.buf.len() {
            return Err(BatchError::MalformedRecord(
                "bytes left after the last record",
            ));
        }
        Ok(())
    }

    fn varlong(&mut self) -> Result<i64, BatchError> {
        let rest = self.buf.get(self.position..).unwrap_or_default();
        let (value, used) = decode_varlong(rest)?;
        self.position += used;
        Ok(value)
    }

    fn varint(&mut self) -> Result<i32, BatchError> {
        i32::try_from(self.varlong()?).map_err(|_| BatchError::MalformedRecord("varint overflow"))
    }

    #[inline(always)]
    fn skip(&mut self, len: usize, end: usize) -> Result<(), BatchError> {
        self.position = self
            .position
            .checked_add(len)
            .filter(|next| *next <= end)
            .ok_or(BatchError::MalformedRecord("field runs past the record"))?;
        Ok(())
    }

    /// Skips a nullable length-prefixed field; returns whether it was
    /// present (not null).
    #[inline(always)]
    fn skip_nullable(&mut self, end: usize) -> Result<bool, BatchError> {
        match self.varint()? {
            -1 => Ok(false),
            len if len < 0 => Err(BatchError::MalformedRecord("negative length")),
            len => self.skip(len as usize, end).map(|()| true),
        }
    }

    fn record(&mut self) -> Result<RecordSummary, BatchError> {
        let length = self.varint()?;
        if length < 0 {
            return Err(BatchError::MalformedRecord("negative record length"));
        }
        let end = self
            .position
            .checked_add(length as usize)
            .filter(|end| *end <= self.buf.len())
            .ok_or(BatchError::MalformedRecord("record runs past the batch"))?;
        let attributes = *self
            .buf
            .get(self.position)
            .filter(|_| self.position < end)
            .ok_or(BatchError::MalformedRecord("field runs past the record"))?
            as i8;
        self.position += 1;
        let timestamp_delta = self.varlong()?;
        let offset_delta = self.varint()?;
        let has_key = self.skip_nullable(end)?;
        self.skip_nullable(end)?;
        let header_count = self.varint()?;
        if header_count < 0 {
            return Err(BatchError::MalformedRecord("negative header count"));
        }
        for _ in 0..header_count {
            if !self.skip_nullable(end)? {
                return Err(BatchError::MalformedRecord("null header key"));
            }
            self.skip_nullable(end)?;
            if self.position > end {
                break;
            }
        }
        if self.position != end {
            return Err(BatchError::MalformedRecord("record length mismatch"));
        }
        Ok(RecordSummary {
            attributes,
            timestamp_delta,
            offset_delta,
            has_key,
        })
    }
}

impl Iterator for RecordSkim<'_> {
    type Item = Result<RecordSummary, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining <= 0 {
            return None;
        }
        self.remaining -= 1;
        let record = self.record();
        if record.is_err() {
            self.remaining = 0;
        }
        Some(record)
    }
}

/// Decodes a zigzag varlong; returns the value and the bytes consumed.
#[inline]
pub fn decode_varlong(buf: &[u8]) -> Result<(i64, usize), BatchError> {
    // Most varints of a record (attributes aside, its lengths and deltas)
    // fit one or two bytes: decode those without the loop.
    match buf {
        [b0, ..] if b0 & 0x80 == 0 => Ok((zigzag(u64::from(*b0)), 1)),
        [b0, b1, ..] if b1 & 0x80 == 0 => {
            Ok((zigzag(u64::from(b0 & 0x7f) | (u64::from(*b1) << 7)), 2))
        }
        _ => decode_long_varlong(buf),
    }
}

#[inline]
fn zigzag(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

#[cold]
fn decode_long_varlong(buf: &[u8]) -> Result<(i64, usize), BatchError> {
    let mut raw: u64 = 0;
    for (i, byte) in buf.iter().enumerate().take(10) {
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((zigzag(raw), i + 1));
        }
    }
    Err(BatchError::MalformedRecord("unterminated varint"))
}

/// Appends a zigzag varlong (varints use the same encoding).
pub fn encode_varlong(value: i64, out: &mut Vec<u8>) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

fn encode_nullable(bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    match bytes {
        None => encode_varlong(-1, out),
        Some(b) => {
            encode_varlong(b.len() as i64, out);
            out.extend_from_slice(b);
        }
    }
}

/// Bytes a zigzag varlong takes.
pub fn varlong_len(value: i64) -> usize {
    let raw = ((value << 1) ^ (value >> 63)) as u64;
    (64 - raw.max(1).leading_zeros() as usize).div_ceil(7)
}

fn nullable_len(bytes: Option<&[u8]>) -> usize {
    match bytes {
        None => 1,
        Some(b) => varlong_len(b.len() as i64) + b.len(),
    }
}

/// Encodes records straight into a batch's records section, for clients
/// (the perf and console tools): no per-record allocation. Records get
/// consecutive offset deltas from 0.
#[derive(Debug, Default)]
pub struct BatchWriter {
    records: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchWriter {
    pub fn new() -> BatchWriter {
        BatchWriter::default()
    }

    pub fn record_count(&self) -> i32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Size of the batch if it were finished uncompressed now.
    pub fn size(&self) -> usize {
        RECORD_BATCH_HEADER_SIZE + self.records.len()
    }

    pub fn append(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.append_with_headers(timestamp, key, value, &[]);
    }

    /// Appends a record with headers; a header key is never null, its
    /// value may be.
    pub fn append_with_headers(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let timestamp_delta = timestamp - self.base_timestamp;
        let offset_delta = i64::from(self.count);
        let headers_len: usize = headers
            .iter()
            .map(|(k, v)| nullable_len(Some(k)) + nullable_len(*v))
            .sum();
        let body = 1
            + varlong_len(timestamp_delta)
            + varlong_len(offset_delta)
            + nullable_len(key)
            + nullable_len(value)
            + varlong_len(headers.len() as i64)
            + headers_len;
        self.records.reserve(body + 5);
        encode_varlong(body as i64, &mut self.records);
        self.records.push(0);
        encode_varlong(timestamp_delta, &mut self.records);
        encode_varlong(offset_delta, &mut self.records);
        encode_nullable(key, &mut self.records);
        encode_nullable(value, &mut self.records);
        encode_varlong(headers.len() as i64, &mut self.records);
        for (header_key, header_value) in headers {
            encode_nullable(Some(header_key), &mut self.records);
            encode_nullable(*header_value, &mut self.records);
        }
        self.count += 1;
    }

    /// Appends the finished batch, compressed with `codec`, to `out` and
    /// empties the writer.
    pub fn finish(&mut self, codec: Compression, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&0i64.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // batch length, below
        out.extend_from_slice(&(-1i32).to_be_bytes());
        out.push(MAGIC_V2 as u8);
        out.extend_from_slice(&[0; 4]); // CRC, below
        out.extend_from_slice(&i16::from(codec.id()).to_be_bytes());
        out.extend_from_slice(&(self.count - 1).max(0).to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&NO_PRODUCER_ID.to_be_bytes());
        out.extend_from_slice(&NO_PRODUCER_EPOCH.to_be_bytes());
        out.extend_from_slice(&NO_SEQUENCE.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        compression::compress(codec, &self.records, out);
        let batch = &mut out[start..];
        let length = (batch.len() - LOG_OVERHEAD) as i32;
        batch[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&length.to_be_bytes());
        let crc = compute_crc(batch);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        self.records.clear();
        self.count = 0;
    }
}

struct BuilderRecord {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Builds uncompressed v2 batches byte by byte: for tests in this and other
/// crates, and for the records the group coordinator writes to
/// `__consumer_offsets`. Records get consecutive offset deltas from 0.
#[derive(Default)]
pub struct RecordBatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    log_append_time: bool,
    compression: Option<Compression>,
    records: Vec<BuilderRecord>,
}

impl RecordBatchBuilder {
    /// A non-idempotent batch with base offset 0 and leader epoch -1.
    pub fn new() -> RecordBatchBuilder {
        RecordBatchBuilder {
            partition_leader_epoch: -1,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            ..Default::default()
        }
    }

    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Marks the batch as written by an idempotent producer.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }

    pub fn log_append_time(mut self, log_append_time: bool) -> Self {
        self.log_append_time = log_append_time;
        self
    }

    /// Compresses the records section with `codec`.
    pub fn compression(mut self, codec: Compression) -> Self {
        self.compression = Some(codec);
        self
    }

    pub fn record(self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Self {
        self.record_with_headers(timestamp, key, value, &[])
    }

    pub fn record_with_headers(
        mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> Self {
        self.records.push(BuilderRecord {
            timestamp,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect(),
        });
        self
    }

    /// Encodes the batch. An empty builder encodes a batch with no records
    /// and last offset delta 0.
    pub fn build(&self) -> Vec<u8> {
        let base_timestamp = self.records.first().map_or(-1, |r| r.timestamp);
        let max_timestamp = self.records.iter().map(|r| r.timestamp).max().unwrap_or(-1);
        let mut records = Vec::new();
        for (delta, record) in self.records.iter().enumerate() {
            let mut body = vec![0u8];
            encode_varlong(record.timestamp - base_timestamp, &mut body);
            encode_varlong(delta as i64, &mut body);
            encode_nullable(record.key.as_deref(), &mut body);
            encode_nullable(record.value.as_deref(), &mut body);
            encode_varlong(record.headers.len() as i64, &mut body);
            for (key, value) in &record.headers {
                encode_nullable(Some(key), &mut body);
                encode_nullable(value.as_deref(), &mut body);
            }
            encode_varlong(body.len() as i64, &mut records);
            records.extend_from_slice(&body);
        }
        let codec = self.compression.unwrap_or(Compression::None);
        let records = if codec == Compression::None {
            records
        } else {
            let mut packed = Vec::new();
            compression::compress(codec, &records, &mut packed);
            packed
        };
        let mut attributes: i16 = i16::from(codec.id());
        if self.log_append_time {
            attributes |= TIMESTAMP_TYPE_MASK;
        }
        if self.transactional {
            attributes |= TRANSACTIONAL_FLAG_MASK;
        }
        if self.control {
            attributes |= CONTROL_FLAG_MASK;
        }
        let last_offset_delta = self.records.len().saturating_sub(1) as i32;
        let total = RECORD_BATCH_HEADER_SIZE + records.len();
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&((total - LOG_OVERHEAD) as i32).to_be_bytes());
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(MAGIC_V2 as u8);
        out.extend_from_slice(&[0; 4]); // CRC, filled in below
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&last_offset_delta.to_be_bytes());
        out.extend_from_slice(&base_timestamp.to_be_bytes());
        out.extend_from_slice(&max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&(self.records.len() as i32).to_be_bytes());
        out.extend_from_slice(&records);
        debug_assert_eq!(out.len(), total);
        let crc = compute_crc(&out);
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

/// Shorthand for tests: an uncompressed batch of `count` records with
/// timestamps `timestamp, timestamp+1, ...` and values `v0, v1, ...`.
pub fn build_batch_for_tests(base_offset: i64, count: usize, timestamp: i64) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new().base_offset(base_offset);
    for i in 0..count {
        let value = format!("v{i}");
        builder = builder.record(timestamp + i as i64, None, Some(value.as_bytes()));
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        RecordBatchBuilder::new()
            .base_offset(100)
            .partition_leader_epoch(3)
            .producer(7, 2, 40)
            .record(1_000, Some(b"k1"), Some(b"hello"))
            .record_with_headers(
                1_005,
                None,
                Some(b"world"),
                &[(b"h", Some(b"x")), (b"n", None)],
            )
            .record(999, Some(b"k3"), None)
            .build()
    }

    #[test]
    fn header_fields_round_trip() {
        let batch = sample();
        let h = validate_batch(&batch).unwrap();
        assert_eq!(h.base_offset, 100);
        assert_eq!(h.total_size(), batch.len());
        assert_eq!(h.partition_leader_epoch, 3);
        assert_eq!(h.magic, 2);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.last_offset(), 102);
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_005);
        assert_eq!(h.producer_id, 7);
        assert_eq!(h.producer_epoch, 2);
        assert_eq!(h.base_sequence, 40);
        assert_eq!(h.last_sequence(), 42);
        assert_eq!(h.records_count, 3);
        assert_eq!(h.compression(), Compression::None);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        assert!(!h.is_transactional());
        assert!(!h.is_control());
        assert!(h.has_producer_id());
    }

    #[test]
    fn attribute_flags() {
        let batch = RecordBatchBuilder::new()
            .transactional(true)
            .control(true)
            .log_append_time(true)
            .record(1, None, None)
            .build();
        let h = validate_batch(&batch).unwrap();
        assert!(h.is_transactional());
        assert!(h.is_control());
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
    }

    #[test]
    fn records_decode_back() {
        let batch = sample();
        let h = validate_batch(&batch).unwrap();
        let records: Vec<_> = RecordIter::new(&batch, &h)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].key, Some(&b"k1"[..]));
        assert_eq!(records[0].value, Some(&b"hello"[..]));
        assert_eq!(records[1].timestamp_delta, 5);
        assert_eq!(records[1].offset_delta, 1);
        assert_eq!(records[1].key, None);
        assert_eq!(
            records[1].headers,
            vec![(&b"h"[..], Some(&b"x"[..])), (&b"n"[..], None)]
        );
        assert_eq!(records[2].timestamp_delta, -1);
        assert_eq!(records[2].value, None);
    }

    #[test]
    fn crc_detects_any_flipped_byte_in_crc_range() {
        let batch = sample();
        for i in ATTRIBUTES_OFFSET..batch.len() {
            let mut corrupt = batch.clone();
            corrupt[i] ^= 0x01;
            assert!(
                validate_batch(&corrupt).is_err(),
                "flip at byte {i} was not detected"
            );
        }
        let mut corrupt = batch.clone();
        corrupt[CRC_OFFSET] ^= 0xff;
        assert!(matches!(
            validate_batch(&corrupt),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn patching_offset_and_epoch_keeps_crc_valid() {
        let mut batch = sample();
        set_base_offset(&mut batch, 5_000).unwrap();
        set_partition_leader_epoch(&mut batch, 9).unwrap();
        let h = validate_batch(&batch).unwrap();
        assert_eq!(h.base_offset, 5_000);
        assert_eq!(h.partition_leader_epoch, 9);
        assert!(set_base_offset(&mut batch[..20], 1).is_err());
    }

    #[test]
    fn rejects_bad_magic_length_and_counts() {
        let mut batch = sample();
        batch[MAGIC_OFFSET] = 1;
        assert_eq!(validate_batch(&batch), Err(BatchError::UnsupportedMagic(1)));

        let mut batch = sample();
        batch[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&48i32.to_be_bytes());
        assert_eq!(validate_batch(&batch), Err(BatchError::InvalidLength(48)));

        let mut batch = sample();
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4]
            .copy_from_slice(&(-2i32).to_be_bytes());
        assert_eq!(
            parse_header(&batch),
            Err(BatchError::InvalidRecordsCount(-2))
        );

        let mut batch = sample();
        batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4]
            .copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            parse_header(&batch),
            Err(BatchError::InvalidLastOffsetDelta(-1))
        );

        let mut batch = sample();
        batch[ATTRIBUTES_OFFSET + 1] |= 0x07;
        assert_eq!(parse_header(&batch), Err(BatchError::UnknownCompression(7)));
    }

    #[test]
    fn truncated_input_is_an_error() {
        let batch = sample();
        for len in [0, 5, 16, 60, batch.len() - 1] {
            assert!(
                matches!(
                    validate_batch(&batch[..len]),
                    Err(BatchError::Truncated { .. })
                ),
                "length {len}"
            );
        }
        // The header alone parses; the full check needs the whole batch.
        assert!(parse_header(&batch[..RECORD_BATCH_HEADER_SIZE]).is_ok());
    }

    #[test]
    fn iterator_walks_batches_and_stops_at_partial_tail() {
        let a = build_batch_for_tests(0, 3, 10);
        let b = build_batch_for_tests(3, 1, 20);
        let mut buf = [a.clone(), b.clone()].concat();
        let all: Vec<_> = BatchIter::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].0, 0);
        assert_eq!(all[1].0, a.len());
        assert_eq!(all[1].1.base_offset, 3);

        buf.extend_from_slice(&a[..30]);
        let mut iter = BatchIter::new(&buf);
        assert!(iter.next().unwrap().is_ok());
        assert!(iter.next().unwrap().is_ok());
        assert!(matches!(
            iter.next(),
            Some(Err(BatchError::Truncated { .. }))
        ));
        assert!(iter.next().is_none());
        assert_eq!(iter.position(), a.len() + b.len());
    }

    #[test]
    fn iterator_stops_at_corrupt_batch() {
        let a = build_batch_for_tests(0, 2, 10);
        let mut b = build_batch_for_tests(2, 2, 20);
        let c = build_batch_for_tests(4, 2, 30);
        let last = b.len() - 1;
        b[last] ^= 0x40;
        let buf = [a.clone(), b, c].concat();
        let mut iter = BatchIter::new(&buf);
        assert!(iter.next().unwrap().is_ok());
        assert!(matches!(
            iter.next(),
            Some(Err(BatchError::CrcMismatch { .. }))
        ));
        assert!(iter.next().is_none());
        assert_eq!(iter.position(), a.len());
    }

    #[test]
    fn recompression_keeps_every_header_field() {
        let codecs = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        for from in codecs {
            let batch = RecordBatchBuilder::new()
                .base_offset(100)
                .partition_leader_epoch(3)
                .producer(7, 2, 40)
                .transactional(true)
                .compression(from)
                .record(1_000, Some(b"k1"), Some(b"hello"))
                .record(1_005, None, Some(b"world"))
                .build();
            let original = validate_batch(&batch).unwrap();
            assert_eq!(original.compression(), from);
            for to in codecs {
                let mut out = vec![9u8; 3];
                recompress_batch(&batch, &original, to, 1 << 20, &mut out).unwrap();
                let h = validate_batch(&out[3..]).unwrap();
                assert_eq!(h.compression(), to, "{from:?} -> {to:?}");
                assert_eq!(h.total_size(), out.len() - 3);
                let expected = RecordBatchHeader {
                    batch_length: h.batch_length,
                    crc: h.crc,
                    attributes: (original.attributes & !7) | i16::from(to.id()),
                    ..original
                };
                assert_eq!(h, expected);
                let records = decompressed_records(&out[3..], &h, 1 << 20).unwrap();
                let values: Vec<_> = RecordIter::over_records(&records, 2)
                    .map(|r| r.unwrap().value.unwrap().to_vec())
                    .collect();
                assert_eq!(values, vec![b"hello".to_vec(), b"world".to_vec()]);
            }
        }
    }

    #[test]
    fn recompression_checks_counts_and_caps_size() {
        let mut batch = RecordBatchBuilder::new()
            .compression(Compression::Lz4)
            .record(1, None, Some(&[0u8; 5000]))
            .record(2, None, Some(&[0u8; 5000]))
            .build();
        let h = validate_batch(&batch).unwrap();
        assert!(matches!(
            recompress_batch(&batch, &h, Compression::None, 1000, &mut Vec::new()),
            Err(BatchError::Compression(CompressionError::TooLarge { .. }))
        ));
        // Claim three records where there are two.
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&3i32.to_be_bytes());
        let h = parse_header(&batch).unwrap();
        assert!(matches!(
            recompress_batch(&batch, &h, Compression::None, 1 << 20, &mut Vec::new()),
            Err(BatchError::MalformedRecord(_))
        ));
        // Claim one: bytes are left over.
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&1i32.to_be_bytes());
        let h = parse_header(&batch).unwrap();
        assert!(matches!(
            recompress_batch(&batch, &h, Compression::None, 1 << 20, &mut Vec::new()),
            Err(BatchError::MalformedRecord(_))
        ));
    }

    #[test]
    fn log_append_time_stamp_keeps_crc_valid() {
        let batch = sample();
        let mut header: [u8; RECORD_BATCH_HEADER_SIZE] =
            batch[..RECORD_BATCH_HEADER_SIZE].try_into().unwrap();
        set_log_append_time(&mut header, &batch[RECORD_BATCH_HEADER_SIZE..], 123_456);
        let stamped = [&header[..], &batch[RECORD_BATCH_HEADER_SIZE..]].concat();
        let h = validate_batch(&stamped).unwrap();
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(h.max_timestamp, 123_456);
        assert_eq!(h.base_timestamp, 1_000);
    }

    #[test]
    fn batch_writer_matches_the_builder() {
        for codec in [Compression::None, Compression::Lz4] {
            let mut writer = BatchWriter::new();
            writer.append(1_000, Some(b"k"), Some(b"hello"));
            writer.append(1_010, None, Some(&[7u8; 300]));
            writer.append(990, None, None);
            writer.append_with_headers(
                995,
                Some(b""),
                Some(b"v"),
                &[(b"h1", Some(b"x")), (b"", None), (&[b'h'; 200], Some(b""))],
            );
            let mut out = Vec::new();
            writer.finish(codec, &mut out);
            assert!(writer.is_empty());
            let expected = RecordBatchBuilder::new()
                .compression(codec)
                .record(1_000, Some(b"k"), Some(b"hello"))
                .record(1_010, None, Some(&[7u8; 300]))
                .record(990, None, None)
                .record_with_headers(
                    995,
                    Some(b""),
                    Some(b"v"),
                    &[(b"h1", Some(b"x")), (b"", None), (&[b'h'; 200], Some(b""))],
                )
                .build();
            assert_eq!(out, expected, "{codec:?}");
        }
        for v in [0i64, 1, -1, 63, 64, -65, 1 << 20, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            encode_varlong(v, &mut out);
            assert_eq!(varlong_len(v), out.len(), "{v}");
        }
    }

    #[test]
    fn record_skim_agrees_with_the_record_iterator() {
        let batch = sample();
        let h = validate_batch(&batch).unwrap();
        let section = &batch[RECORD_BATCH_HEADER_SIZE..];
        let full: Vec<_> = RecordIter::new(&batch, &h)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let mut skim = RecordSkim::new(section, h.records_count);
        let summaries: Vec<_> = skim.by_ref().map(|r| r.unwrap()).collect();
        skim.finish().unwrap();
        assert_eq!(summaries.len(), full.len());
        for (s, r) in summaries.iter().zip(&full) {
            assert_eq!(s.offset_delta, r.offset_delta);
            assert_eq!(s.timestamp_delta, r.timestamp_delta);
            assert_eq!(s.has_key, r.key.is_some());
            assert_eq!(s.attributes, r.attributes);
        }
        // Every truncation, and every single-byte change, is an error or a
        // clean walk; never a panic. Fewer records than claimed is an error.
        for len in 0..section.len() {
            let mut skim = RecordSkim::new(&section[..len], h.records_count);
            let walked = skim.by_ref().all(|r| r.is_ok());
            assert!(!walked || skim.finish().is_err(), "length {len}");
        }
        for i in 0..section.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = section.to_vec();
                bad[i] ^= flip;
                let mut skim = RecordSkim::new(&bad, h.records_count);
                let _walked = skim.by_ref().all(|r| r.is_ok());
            }
        }
        let mut skim = RecordSkim::new(section, h.records_count - 1);
        assert!(skim.by_ref().all(|r| r.is_ok()));
        assert!(skim.finish().is_err());
    }

    #[test]
    fn varlong_round_trip_and_sequence_wrap() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = Vec::new();
            encode_varlong(v, &mut out);
            assert_eq!(decode_varlong(&out).unwrap(), (v, out.len()));
        }
        let mut out = Vec::new();
        encode_varlong(-1, &mut out);
        assert_eq!(out, vec![0x01]);
        assert!(decode_varlong(&[0x80, 0x80]).is_err());
        assert!(decode_varlong(&[0x80]).is_err());
        assert!(decode_varlong(&[]).is_err());
        assert!(decode_varlong(&[0xff; 11]).is_err());
        // Each length's edges (one, two and three bytes), with bytes after
        // the varint that must not be read.
        for v in [-64i64, 63, -65, 64, -8192, 8191, -8193, 8192, 1 << 20] {
            let mut out = Vec::new();
            encode_varlong(v, &mut out);
            let used = out.len();
            out.extend_from_slice(&[0xff, 0x01]);
            assert_eq!(decode_varlong(&out).unwrap(), (v, used), "{v}");
        }
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 2), 7);
    }
}
