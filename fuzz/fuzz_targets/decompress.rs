//! Arbitrary bytes as a compressed records section: the first byte picks
//! the codec, the rest is the payload. Decompressing into a reused buffer
//! (the log validator's path) must agree with the plain decompression:
//! the same bytes, or an error from both. Both decode lz4 with Tarn's own
//! frame decoder, so for lz4 they are also held against lz4_flex's frame
//! reader: what lz4_flex refuses must be refused, and what both accept
//! must start with what lz4_flex read (it stops at the end of the first
//! frame, or at the first block that decodes to nothing, and takes a frame
//! without its end mark for ended: there Tarn reads on, or refuses, as
//! Kafka's reader does). Nothing may panic or exceed the limit.
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
        match (&plain, &reused) {
            (Ok(expected), Ok(())) => {
                assert!(out.bytes() == &expected[..], "{codec:?}: outputs differ");
                assert!(expected.len() <= LIMIT);
            }
            (Err(_), Err(_)) => {}
            _ => panic!(
                "{codec:?}: decompress {:?}, decompress_reusing {reused:?}",
                plain.as_ref().map(Vec::len)
            ),
        }
        if codec == Compression::Lz4 {
            match (lz4_flex_read(payload), &reused) {
                (Ok(read), Ok(())) => assert!(
                    out.bytes().starts_with(&read),
                    "lz4: other bytes than lz4_flex read"
                ),
                (Err(_), Err(_)) | (Ok(_), Err(CompressionError::Corrupt { .. })) => {}
                (read, _) => panic!(
                    "lz4: lz4_flex {:?}, decompress_reusing {reused:?}",
                    read.as_ref().map(Vec::len)
                ),
            }
        }
        out.release_above(4 << 20);
    });
});

/// lz4_flex's frame reader over `payload`, up to `LIMIT` bytes (more is
/// an error, as for Tarn's decoder).
fn lz4_flex_read(payload: &[u8]) -> Result<Vec<u8>, std::io::Error> {
    use std::io::Read;
    let mut read = Vec::new();
    lz4_flex::frame::FrameDecoder::new(payload)
        .take(LIMIT as u64 + 1)
        .read_to_end(&mut read)?;
    if read.len() > LIMIT {
        return Err(std::io::Error::other("beyond the limit"));
    }
    Ok(read)
}
