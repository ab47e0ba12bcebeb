//! Records as the CLI's consumers see them: walking the record batches of a
//! fetch response (validated, decompressed, control batches skipped) and
//! handing each data record at or after the fetch offset to the caller, in
//! offset order, with the offset, timestamp and headers Kafka's consumer
//! would report. Shared by `perf consume` and `consume`.

use std::ops::ControlFlow;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};

use tarn_protocol::record_batch::{
    decompressed_records, BatchError, BatchIter, RecordIter, TimestampType,
};

/// The most bytes one fetched batch may decompress to.
const BATCH_DECOMPRESSED_MAX_BYTES: usize = 256 << 20;

/// One record of a fetched batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord<'a> {
    pub offset: i64,
    pub timestamp_type: TimestampType,
    /// The producer's timestamp, or the broker's for a LogAppendTime batch.
    pub timestamp: i64,
    /// The batch's partition leader epoch.
    pub leader_epoch: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

/// Calls `visit` for every data record at or after `from` in `records` (a
/// fetch response's record set) until it breaks, and returns the offset to
/// fetch next: the one after the record `visit` broke on, or else after the
/// last complete batch. A fetch may end with a partial batch; it is left
/// for the next fetch. A batch that fails its CRC or does not decode is an
/// error.
pub fn for_each_record(
    records: &[u8],
    from: i64,
    mut visit: impl FnMut(&FetchedRecord) -> Result<ControlFlow<()>>,
) -> Result<i64> {
    let mut next = from;
    for batch in BatchIter::new(records) {
        let (position, header) = match batch {
            Ok(b) => b,
            Err(BatchError::Truncated { .. }) => break,
            Err(e) => bail!("corrupt batch in fetch response: {e}"),
        };
        if header.last_offset() < from {
            continue;
        }
        if header.is_control() {
            next = next.max(header.last_offset() + 1);
            continue;
        }
        let batch = &records[position..position + header.total_size()];
        let section = decompressed_records(batch, &header, BATCH_DECOMPRESSED_MAX_BYTES)?;
        let timestamp_type = header.timestamp_type();
        for record in RecordIter::over_records(&section, header.records_count) {
            let record = record?;
            let offset = header.base_offset + i64::from(record.offset_delta);
            if offset < from {
                continue;
            }
            let timestamp = match timestamp_type {
                TimestampType::LogAppendTime => header.max_timestamp,
                TimestampType::CreateTime => header.base_timestamp + record.timestamp_delta,
            };
            let fetched = FetchedRecord {
                offset,
                timestamp_type,
                timestamp,
                leader_epoch: header.partition_leader_epoch,
                key: record.key,
                value: record.value,
                headers: record.headers,
            };
            if visit(&fetched)?.is_break() {
                return Ok(offset + 1);
            }
        }
        next = next.max(header.last_offset() + 1);
    }
    Ok(next)
}

/// Milliseconds since the Unix epoch, as record timestamps are.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::record_batch::{Compression, RecordBatchBuilder};

    fn offsets_from(records: &[u8], from: i64, stop_after: usize) -> (Vec<i64>, i64) {
        let mut seen = Vec::new();
        let next = for_each_record(records, from, |r| {
            seen.push(r.offset);
            Ok(if seen.len() == stop_after {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })
        .unwrap();
        (seen, next)
    }

    #[test]
    fn walks_records_from_the_fetch_offset_and_skips_control_batches() {
        let mut records = RecordBatchBuilder::new()
            .base_offset(10)
            .compression(Compression::Gzip)
            .record(1_000, Some(b"k"), Some(b"a"))
            .record(1_005, None, Some(b"b"))
            .build();
        records.extend(
            RecordBatchBuilder::new()
                .base_offset(12)
                .control(true)
                .record(1_006, Some(&[0, 0, 0, 1]), Some(&[0; 6]))
                .build(),
        );
        records.extend(
            RecordBatchBuilder::new()
                .base_offset(13)
                .log_append_time(true)
                .record_with_headers(1_007, None, None, &[(b"h", None)])
                .build(),
        );
        assert_eq!(offsets_from(&records, 0, 99), (vec![10, 11, 13], 14));
        assert_eq!(offsets_from(&records, 11, 99), (vec![11, 13], 14));
        assert_eq!(offsets_from(&records, 10, 1), (vec![10], 11));
        // A partial batch at the end is left for the next fetch.
        let cut = &records[..records.len() - 3];
        assert_eq!(offsets_from(cut, 0, 99), (vec![10, 11], 13));

        let mut seen = Vec::new();
        for_each_record(&records, 0, |r| {
            seen.push((r.timestamp_type, r.timestamp, r.headers.len()));
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (TimestampType::CreateTime, 1_000, 0),
                (TimestampType::CreateTime, 1_005, 0),
                (TimestampType::LogAppendTime, 1_007, 1),
            ]
        );
    }

    #[test]
    fn a_corrupt_batch_is_an_error() {
        let mut records = RecordBatchBuilder::new()
            .record(1, None, Some(b"v"))
            .build();
        let last = records.len() - 1;
        records[last] ^= 0xff;
        assert!(for_each_record(&records, 0, |_| Ok(ControlFlow::Continue(()))).is_err());
    }
}
