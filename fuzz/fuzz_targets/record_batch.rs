//! Arbitrary bytes as a record set: batch iteration, header parsing, CRC
//! validation and record decoding must refuse, never panic or over-read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_protocol::record_batch::{parse_header, validate_batch, BatchIter, RecordIter};

fuzz_target!(|data: &[u8]| {
    let _header = parse_header(data);
    let _validated = validate_batch(data);
    for item in BatchIter::new(data) {
        let Ok((position, header)) = item else { break };
        let batch = &data[position..position + header.total_size()];
        if let Ok(records) = RecordIter::new(batch, &header) {
            for record in records {
                if record.is_err() {
                    break;
                }
            }
        }
    }
});
