//! `ProducerStateManager`: what the log remembers about idempotent
//! producers, so retries are deduplicated and gaps are refused.
//!
//! For each producer id it keeps the current producer epoch and the metadata
//! of the last [`NUM_BATCHES_TO_RETAIN`] batches appended (sequence range,
//! offsets, timestamp), following Kafka's `ProducerStateManager`. Invariant:
//! the retained batches of a producer all carry its current epoch and their
//! sequences follow one another. The state is derived from the log: it can
//! always be rebuilt by replaying batch headers, and a snapshot written at a
//! log end offset (`<20-digit offset>.snapshot`, CRC-32C protected) saves
//! replaying everything before that offset.
//!
//! Producer ids expire as in Kafka: one whose last batch's timestamp is
//! `producer.id.expiration.ms` or more in the past (and that has no ongoing
//! transaction; Tarn has none) is forgotten by
//! [`ProducerStateManager::remove_expired_producers`], which the broker
//! runs every `producer.id.expiration.check.interval.ms`. So a client that
//! invents producer ids cannot grow the state, or the snapshots, without
//! bound. A producer with no retained batch (only control batches seen)
//! has no timestamp and expires at the first check.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use tarn_protocol::record_batch::{increment_sequence, RecordBatchHeader};

use crate::error::StorageError;
use crate::file::LogEnv;

/// How many recent batches per producer are kept for duplicate detection
/// (Kafka's `max.in.flight.requests.per.connection` limit for idempotence).
pub const NUM_BATCHES_TO_RETAIN: usize = 5;

pub const SNAPSHOT_SUFFIX: &str = "snapshot";
const SNAPSHOT_MAGIC: &[u8; 4] = b"TPS1";
const SNAPSHOT_HEADER_SIZE: usize = 4 + 4 + 4; // magic, crc, producer count
const SNAPSHOT_BATCH_SIZE: usize = 4 + 4 + 8 + 8 + 8;

/// One appended batch of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

/// What is known about one producer id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub producer_epoch: i16,
    /// Oldest first.
    pub batches: VecDeque<BatchMetadata>,
}

impl ProducerStateEntry {
    fn last_seq(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_seq)
    }

    fn find_duplicate(&self, header: &RecordBatchHeader) -> Option<BatchMetadata> {
        if header.producer_epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_seq == header.base_sequence && b.last_seq == header.last_sequence())
            .copied()
    }
}

/// The verdict on a batch before it is appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// A retry of a batch already in the log at these offsets: append nothing.
    Duplicate(BatchMetadata),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProducerStateError {
    OutOfOrderSequence(String),
    InvalidProducerEpoch(String),
}

#[derive(Debug, Default)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerStateEntry>,
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    next_seq == increment_sequence(last_seq, 1) || (last_seq == -1 && next_seq == 0)
}

impl ProducerStateManager {
    pub fn new() -> ProducerStateManager {
        ProducerStateManager::default()
    }

    pub fn entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    /// Every producer with retained state, in no particular order.
    pub fn producers(&self) -> impl Iterator<Item = (i64, &ProducerStateEntry)> + '_ {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// Each producer's newest batch.
    pub fn last_batches(&self) -> impl Iterator<Item = (i64, BatchMetadata)> + '_ {
        self.producers
            .iter()
            .filter_map(|(id, e)| e.batches.back().map(|b| (*id, *b)))
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Kafka's `removeExpiredProducers`: forgets every producer whose last
    /// batch timestamp is at least `expiration_ms` before `now_ms`.
    /// Returns how many were removed.
    pub fn remove_expired_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, entry| {
            let last_timestamp = entry.batches.back().map_or(i64::MIN, |b| b.timestamp);
            now_ms.saturating_sub(last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Decides whether `header` (offsets not yet assigned) may be appended,
    /// as Kafka's `ProducerAppendInfo` does: duplicates of a retained batch
    /// are reported, an older epoch is fenced, a new epoch must start at
    /// sequence 0, and the same epoch must continue at last sequence + 1. A
    /// producer this log knows nothing of may start at any sequence, as in
    /// Kafka since KIP-360 (its state may have expired, or gone with
    /// DeleteRecords or retention, while it kept producing). Control
    /// batches (transaction markers) carry no sequence and only have their
    /// epoch checked.
    pub fn check(&self, header: &RecordBatchHeader) -> Result<SequenceCheck, ProducerStateError> {
        if !header.has_producer_id() {
            return Ok(SequenceCheck::Append);
        }
        let pid = header.producer_id;
        let Some(entry) = self.producers.get(&pid) else {
            return Ok(SequenceCheck::Append);
        };
        if !header.is_control() {
            if let Some(duplicate) = entry.find_duplicate(header) {
                return Ok(SequenceCheck::Duplicate(duplicate));
            }
        }
        if header.producer_epoch < entry.producer_epoch {
            return Err(ProducerStateError::InvalidProducerEpoch(format!(
                "producer {pid} sent epoch {} but the current epoch is {}",
                header.producer_epoch, entry.producer_epoch
            )));
        }
        if header.is_control() {
            return Ok(SequenceCheck::Append);
        }
        if header.producer_epoch > entry.producer_epoch {
            if header.base_sequence != 0 {
                return Err(ProducerStateError::OutOfOrderSequence(format!(
                    "producer {pid} bumped its epoch to {} but started at sequence {} instead of 0",
                    header.producer_epoch, header.base_sequence
                )));
            }
            return Ok(SequenceCheck::Append);
        }
        let last_seq = entry.last_seq().unwrap_or(-1);
        if !in_sequence(last_seq, header.base_sequence) {
            return Err(ProducerStateError::OutOfOrderSequence(format!(
                "producer {pid} epoch {} sent sequence {} after {last_seq}",
                header.producer_epoch, header.base_sequence
            )));
        }
        Ok(SequenceCheck::Append)
    }

    /// Records a batch now in the log (offsets assigned). Used both after an
    /// append and when replaying the log, so it does not check anything:
    /// a batch from an older epoch than known is ignored.
    pub fn update(&mut self, header: &RecordBatchHeader) {
        if !header.has_producer_id() {
            return;
        }
        let entry =
            self.producers
                .entry(header.producer_id)
                .or_insert_with(|| ProducerStateEntry {
                    producer_epoch: header.producer_epoch,
                    batches: VecDeque::new(),
                });
        if header.producer_epoch < entry.producer_epoch {
            return;
        }
        if header.producer_epoch > entry.producer_epoch {
            entry.producer_epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if header.is_control() {
            return;
        }
        entry.batches.push_back(BatchMetadata {
            first_seq: header.base_sequence,
            last_seq: header.last_sequence(),
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            timestamp: header.max_timestamp,
        });
        while entry.batches.len() > NUM_BATCHES_TO_RETAIN {
            entry.batches.pop_front();
        }
    }

    /// Writes the whole state to `<dir>/<20-digit offset>.snapshot`
    /// atomically. Producers are written in id order so equal states give
    /// equal files.
    pub fn write_snapshot(
        &self,
        env: &LogEnv,
        dir: &Path,
        offset: i64,
    ) -> Result<PathBuf, StorageError> {
        let mut body = Vec::new();
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let entry = &self.producers[&id];
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&entry.producer_epoch.to_be_bytes());
            body.push(entry.batches.len() as u8);
            for b in &entry.batches {
                body.extend_from_slice(&b.first_seq.to_be_bytes());
                body.extend_from_slice(&b.last_seq.to_be_bytes());
                body.extend_from_slice(&b.base_offset.to_be_bytes());
                body.extend_from_slice(&b.last_offset.to_be_bytes());
                body.extend_from_slice(&b.timestamp.to_be_bytes());
            }
        }
        let count = (self.producers.len() as u32).to_be_bytes();
        let crc = crc32c::crc32c_append(crc32c::crc32c(&count), &body);
        let mut contents = Vec::with_capacity(SNAPSHOT_HEADER_SIZE + body.len());
        contents.extend_from_slice(SNAPSHOT_MAGIC);
        contents.extend_from_slice(&crc.to_be_bytes());
        contents.extend_from_slice(&count);
        contents.extend_from_slice(&body);
        let path = snapshot_path(dir, offset);
        env.write_atomically(&path, &contents)?;
        Ok(path)
    }

    /// Reads a snapshot written by [`ProducerStateManager::write_snapshot`].
    pub fn load_snapshot(env: &LogEnv, path: &Path) -> Result<ProducerStateManager, StorageError> {
        let corrupt = |detail: &str| StorageError::corrupt(path.display().to_string(), detail);
        let bytes = env.read_optional(path)?.ok_or_else(|| corrupt("missing"))?;
        if bytes.len() < SNAPSHOT_HEADER_SIZE || &bytes[..4] != SNAPSHOT_MAGIC {
            return Err(corrupt("bad header"));
        }
        let stored_crc = u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes"));
        if crc32c::crc32c(&bytes[8..]) != stored_crc {
            return Err(corrupt("CRC mismatch"));
        }
        let mut reader = Reader { bytes: &bytes[8..] };
        let count = reader.u32().ok_or_else(|| corrupt("truncated"))?;
        let mut producers = HashMap::new();
        for _ in 0..count {
            let (id, entry) = read_entry(&mut reader).ok_or_else(|| corrupt("truncated entry"))?;
            producers.insert(id, entry);
        }
        if !reader.bytes.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        Ok(ProducerStateManager { producers })
    }
}

fn read_entry(reader: &mut Reader<'_>) -> Option<(i64, ProducerStateEntry)> {
    let id = reader.i64()?;
    let producer_epoch = i16::from_be_bytes(reader.take(2)?.try_into().ok()?);
    let count = reader.take(1)?[0] as usize;
    if count > NUM_BATCHES_TO_RETAIN || reader.bytes.len() < count * SNAPSHOT_BATCH_SIZE {
        return None;
    }
    let mut batches = VecDeque::with_capacity(count);
    for _ in 0..count {
        batches.push_back(BatchMetadata {
            first_seq: reader.u32()? as i32,
            last_seq: reader.u32()? as i32,
            base_offset: reader.i64()?,
            last_offset: reader.i64()?,
            timestamp: reader.i64()?,
        });
    }
    Some((
        id,
        ProducerStateEntry {
            producer_epoch,
            batches,
        },
    ))
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}.{SNAPSHOT_SUFFIX}"))
}

/// The offset a snapshot file name stands for, if `name` is one.
pub fn parse_snapshot_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".snapshot")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::record_batch::{validate_batch, RecordBatchBuilder};

    fn batch(
        pid: i64,
        epoch: i16,
        seq: i32,
        records: usize,
        base_offset: i64,
    ) -> RecordBatchHeader {
        let mut builder = RecordBatchBuilder::new()
            .base_offset(base_offset)
            .producer(pid, epoch, seq);
        for i in 0..records {
            builder = builder.record(i as i64, None, Some(b"x"));
        }
        validate_batch(&builder.build()).unwrap()
    }

    #[test]
    fn sequence_rules() {
        let mut state = ProducerStateManager::new();
        // An unknown producer may start anywhere.
        assert_eq!(
            state.check(&batch(1, 0, 5, 1, 0)),
            Ok(SequenceCheck::Append)
        );
        let first = batch(1, 0, 0, 3, 0);
        assert_eq!(state.check(&first), Ok(SequenceCheck::Append));
        state.update(&first);
        assert_eq!(
            state.check(&batch(1, 0, 3, 2, 0)),
            Ok(SequenceCheck::Append)
        );
        assert!(matches!(
            state.check(&batch(1, 0, 4, 1, 0)),
            Err(ProducerStateError::OutOfOrderSequence(_))
        ));
        assert!(matches!(
            state.check(&batch(1, 0, 2, 1, 0)),
            Err(ProducerStateError::OutOfOrderSequence(_))
        ));
        assert_eq!(
            state.check(&batch(1, 0, 0, 3, 99)),
            Ok(SequenceCheck::Duplicate(BatchMetadata {
                first_seq: 0,
                last_seq: 2,
                base_offset: 0,
                last_offset: 2,
                timestamp: 2
            }))
        );
        assert!(matches!(
            state.check(&batch(1, 1, 3, 1, 0)),
            Err(ProducerStateError::OutOfOrderSequence(_))
        ));
        assert_eq!(
            state.check(&batch(1, 1, 0, 1, 0)),
            Ok(SequenceCheck::Append)
        );
        state.update(&batch(1, 1, 0, 1, 3));
        assert!(matches!(
            state.check(&batch(1, 0, 3, 1, 0)),
            Err(ProducerStateError::InvalidProducerEpoch(_))
        ));
        // A retry from the fenced epoch is not a duplicate either.
        assert!(matches!(
            state.check(&batch(1, 0, 0, 3, 0)),
            Err(ProducerStateError::InvalidProducerEpoch(_))
        ));
        // Non-idempotent batches are never checked.
        let plain =
            validate_batch(&RecordBatchBuilder::new().record(0, None, None).build()).unwrap();
        assert_eq!(state.check(&plain), Ok(SequenceCheck::Append));
    }

    #[test]
    fn keeps_five_batches_and_wraps_sequences() {
        let mut state = ProducerStateManager::new();
        for i in 0..7 {
            state.update(&batch(9, 0, i, 1, i64::from(i)));
        }
        let entry = state.entry(9).unwrap();
        assert_eq!(entry.batches.len(), NUM_BATCHES_TO_RETAIN);
        assert_eq!(entry.batches.front().unwrap().first_seq, 2);
        assert!(matches!(
            state.check(&batch(9, 0, 1, 1, 0)),
            Err(ProducerStateError::OutOfOrderSequence(_))
        ));
        assert!(matches!(
            state.check(&batch(9, 0, 2, 1, 0)),
            Ok(SequenceCheck::Duplicate(_))
        ));

        let mut state = ProducerStateManager::new();
        state.update(&batch(3, 0, i32::MAX - 1, 2, 0));
        assert_eq!(state.entry(3).unwrap().batches[0].last_seq, i32::MAX);
        assert_eq!(
            state.check(&batch(3, 0, 0, 1, 2)),
            Ok(SequenceCheck::Append)
        );
    }

    #[test]
    fn snapshot_round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = ProducerStateManager::new();
        for i in 0..3 {
            state.update(&batch(1, 2, i * 2, 2, i64::from(i) * 2));
        }
        state.update(&batch(77, 0, 0, 1, 6));
        let path = state
            .write_snapshot(&LogEnv::shared_default(), dir.path(), 7)
            .unwrap();
        assert_eq!(path.file_name().unwrap(), "00000000000000000007.snapshot");
        assert_eq!(
            parse_snapshot_name("00000000000000000007.snapshot"),
            Some(7)
        );
        assert_eq!(parse_snapshot_name("7.snapshot"), None);
        let loaded = ProducerStateManager::load_snapshot(&LogEnv::shared_default(), &path).unwrap();
        assert_eq!(loaded.producers, state.producers);

        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            ProducerStateManager::load_snapshot(&LogEnv::shared_default(), &path),
            Err(StorageError::Corrupt { .. })
        ));
    }
}
