//! Arbitrary bytes as the active segment (and, split off the front, its
//! offset index) of a partition after a crash: recovery must truncate what
//! is not valid, never panic, and leave a log that reads back every kept
//! batch and accepts new appends at the next offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_protocol::record_batch::{BatchIter, RecordBatchBuilder};
use tarn_storage::{Log, LogConfig};

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let index_len = data
        .first()
        .map_or(0, |b| (*b as usize % 4) * 8)
        .min(data.len());
    let (index, segment) = data.split_at(index_len);
    std::fs::write(dir.path().join("00000000000000000000.index"), index).expect("write index");
    std::fs::write(dir.path().join("00000000000000000000.log"), segment).expect("write log");
    let config = LogConfig {
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    let Ok(mut log) = Log::open(dir.path(), config, false) else {
        return;
    };
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    while offset < end {
        let data = log
            .read(offset, 1 << 20, true)
            .expect("read a recovered offset");
        let mut last = None;
        for item in BatchIter::new(&data) {
            let (_, header) = item.expect("recovery kept only valid batches");
            last = Some(header.last_offset());
        }
        let last = last.expect("a read below the log end returns a batch");
        assert!(last >= offset, "read went backwards");
        offset = last + 1;
    }
    let mut batch = RecordBatchBuilder::new()
        .record(1, Some(b"k"), Some(b"v"))
        .build();
    let info = log.append(&mut batch, 0).expect("append after recovery");
    assert_eq!(info.base_offset, end);
});
