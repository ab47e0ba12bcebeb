//! Arbitrary bytes as a compressed records section: the first byte picks
//! the codec, the rest is the payload. Decompressing into a reused buffer
//! (the log validator's path, with its own lz4 frame decoder) must agree
//! with the plain decompression through each codec's library: the same
//! bytes, or an error from both. For lz4 the reused path may read further
//! or refuse where lz4_flex's frame reader takes a frame for ended: at the
//! first block that decodes to nothing, or where the end mark is missing
//! (Kafka's own reader reads on, or refuses, there too); what both accept
//! must then start with what lz4_flex read. Neither may panic or exceed
//! the limit.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use tarn_protocol::compression::{decompress, decompress_reusing, CompressionError, Decompressed};
use tarn_protocol::record_batch::Compression;

/// Small enough that inputs reach it; large enough for several blocks.
const LIMIT: usize = 1 << 20;

thread_local! {
    /// Kept across inputs, as the validator keeps its buffer across
    /// batches: what one payload leaves behind must not leak into the next.
    static OUT: RefCell<Decompressed> = RefCell::new(Decompressed::default());
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, payload)) = data.split_first() else {
        return;
    };
    let codec = match pick % 5 {
        0 => Compression::Lz4,
        1 => Compression::Zstd,
        2 => Compression::Gzip,
        3 => Compression::Snappy,
        _ => Compression::None,
    };
    let plain = decompress(codec, payload, LIMIT);
    OUT.with(|out| {
        let mut out = out.borrow_mut();
        let reused = decompress_reusing(codec, payload, LIMIT, &mut out);
        let lz4 = codec == Compression::Lz4;
        match (&plain, &reused) {
            (Ok(expected), Ok(())) if lz4 => assert!(
                out.bytes().starts_with(expected),
                "lz4: the reused path read other bytes"
            ),
            (Ok(expected), Ok(())) => assert!(out.bytes() == &expected[..], "{codec:?}: outputs differ"),
            (Err(_), Err(_)) => {}
            (Ok(_), Err(CompressionError::Corrupt { .. })) if lz4 => {}
            _ => panic!(
                "{codec:?}: decompress {:?}, decompress_reusing {reused:?}",
                plain.as_ref().map(Vec::len)
            ),
        }
        if let Ok(expected) = &plain {
            assert!(expected.len() <= LIMIT);
        }
        out.release_above(4 << 20);
    });
});
