//! The record-batch compression codecs Kafka clients use: gzip, snappy,
//! lz4 and zstd, in the exact framings Java clients write and read.
//!
//! - gzip: RFC 1952 members (concatenated members are read as one stream).
//! - snappy: written in the xerial framing of snappy-java's
//!   `SnappyOutputStream` (16-byte header, then 32 KiB blocks each prefixed
//!   by its compressed length); raw snappy, as librdkafka writes it, is
//!   accepted on read.
//! - lz4: LZ4 frames with 64 KiB independent blocks and no checksums other
//!   than the descriptor's, which is what Kafka's `Lz4BlockInputStream`
//!   requires. Read with Tarn's own frame decoder over lz4_flex's block
//!   decoder: every block size, linked blocks, block and content checksums,
//!   frames one after the other; frames with a dictionary or reserved bits
//!   go to lz4_flex's frame reader, skippable frames are refused.
//! - zstd: standard zstd frames.
//!
//! Invariant: decompression never produces more than the caller's limit
//! (the topic's `max.message.bytes`) and never allocates much beyond it, so
//! a small "bomb" cannot expand without bound. No I/O lives here.

use std::io::{Read, Write};

use crate::record_batch::Compression;

/// snappy-java's stream header magic (`SnappyCodec.MAGIC_HEADER`).
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic, then the format version and the minimum compatible version (both 1).
const XERIAL_HEADER_LEN: usize = 16;
/// snappy-java's `SnappyOutputStream` default block size.
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;
/// The zstd level Kafka uses by default (`compression.zstd.level`).
const ZSTD_LEVEL: i32 = 3;
/// Largest zstd window accepted, as a power of two, unless the limit itself
/// is larger: 16 MiB covers every level up to 19 for streams of unknown size.
const ZSTD_WINDOW_LOG_MIN_CAP: u32 = 24;
/// zstd's own maximum window log on 64-bit platforms without long mode.
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// Why a payload could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressionError {
    #[error("{codec:?} payload is corrupt: {detail}")]
    Corrupt { codec: Compression, detail: String },
    #[error("{codec:?} payload expands beyond the limit of {limit} bytes")]
    TooLarge { codec: Compression, limit: usize },
}

fn corrupt(codec: Compression, detail: impl ToString) -> CompressionError {
    CompressionError::Corrupt {
        codec,
        detail: detail.to_string(),
    }
}

/// Compresses `input` with `codec` at its default level, appending to
/// `out`. `Compression::None` copies the input.
pub fn compress(codec: Compression, input: &[u8], out: &mut Vec<u8>) {
    compress_at(codec, None, input, out)
}

/// Like [`compress`], at `level` where the codec has levels (Kafka's
/// `compression.gzip.level`, 1 to 9, and `compression.zstd.level`, -131072
/// to 22; `None` is the codec's default). Tarn's lz4 encoder has one level
/// (lz4's fast mode, Kafka's default), so an lz4 level is not used.
pub fn compress_at(codec: Compression, level: Option<i32>, input: &[u8], out: &mut Vec<u8>) {
    match codec {
        Compression::None => out.extend_from_slice(input),
        Compression::Gzip => {
            let gzip_level = level
                .and_then(|l| u32::try_from(l).ok())
                .filter(|l| (1..=9).contains(l))
                .map_or_else(flate2::Compression::default, flate2::Compression::new);
            let mut encoder = flate2::write::GzEncoder::new(out, gzip_level);
            encoder
                .write_all(input)
                .and_then(|()| encoder.try_finish())
                .expect("gzip into a Vec cannot fail");
        }
        Compression::Snappy => compress_xerial_snappy(input, out),
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            encoder
                .write_all(input)
                .expect("lz4 into a Vec cannot fail");
            encoder.finish().expect("lz4 into a Vec cannot fail");
        }
        Compression::Zstd => {
            let compressed = zstd::bulk::compress(input, level.unwrap_or(ZSTD_LEVEL))
                .expect("zstd compression of a slice");
            out.extend_from_slice(&compressed);
        }
    }
}

fn compress_xerial_snappy(input: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for block in input.chunks(XERIAL_BLOCK_BYTES) {
        let length_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        out.resize(start + snap::raw::max_compress_len(block.len()), 0);
        let written = encoder
            .compress(block, &mut out[start..])
            .expect("snappy output sized by max_compress_len");
        out.truncate(start + written);
        out[length_at..start].copy_from_slice(&(written as i32).to_be_bytes());
    }
}

/// Decompresses `input`, producing at most `limit` bytes; more is
/// `TooLarge`, undecodable input is `Corrupt`.
pub fn decompress(
    codec: Compression,
    input: &[u8],
    limit: usize,
) -> Result<Vec<u8>, CompressionError> {
    match codec {
        Compression::None => {
            if input.len() > limit {
                return Err(CompressionError::TooLarge { codec, limit });
            }
            Ok(input.to_vec())
        }
        Compression::Gzip => read_limited(codec, flate2::read::MultiGzDecoder::new(input), limit),
        Compression::Snappy => decompress_snappy(input, limit),
        Compression::Lz4 => {
            let mut out = Decompressed::default();
            match lz4_frame_into(input, limit, &mut out) {
                Some(done) => done.map(|()| {
                    out.buf.truncate(out.len);
                    out.buf
                }),
                None => read_limited(codec, lz4_flex::frame::FrameDecoder::new(input), limit),
            }
        }
        Compression::Zstd => zstd_with_thread_context(input, limit, Vec::new()),
    }
}

thread_local! {
    /// Each thread's zstd decompression context, reset for every payload:
    /// creating one per record batch cost a broker as much CPU as the
    /// decompression itself (a tenth of a zstd produce's).
    static ZSTD_DCTX: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> =
        std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
}

/// [`decompress_zstd`] with this thread's context.
fn zstd_with_thread_context(
    input: &[u8],
    limit: usize,
    out: Vec<u8>,
) -> Result<Vec<u8>, CompressionError> {
    ZSTD_DCTX.with(|dctx| {
        let mut dctx = dctx.borrow_mut();
        let out = decompress_zstd(&mut dctx, input, limit, out);
        // A context keeps the window of the largest frame it read: one
        // that grew large is let go rather than kept per thread.
        if dctx.sizeof() > ZSTD_DCTX_KEPT_BYTES {
            *dctx = zstd::zstd_safe::DCtx::create();
        }
        out
    })
}

/// A thread's zstd context larger than this (its window buffers, after a
/// large frame) is replaced by a fresh one once done.
const ZSTD_DCTX_KEPT_BYTES: usize = 4 << 20;

/// Decompresses every zstd frame in `input` with `dctx`, producing at most
/// `limit` bytes (more is `TooLarge`). The output grows as needed from the
/// size the frame header states, when the producer wrote it (librdkafka
/// does; Java's streaming encoder does not), capped at the limit. Writes
/// into `out` (emptied first), whose capacity is reused.
fn decompress_zstd(
    dctx: &mut zstd::zstd_safe::DCtx<'static>,
    input: &[u8],
    limit: usize,
    mut out: Vec<u8>,
) -> Result<Vec<u8>, CompressionError> {
    use zstd::zstd_safe::{get_error_name, DParameter, InBuffer, OutBuffer, ResetDirective};
    const CODEC: Compression = Compression::Zstd;
    let zstd_error = |code: usize| corrupt(CODEC, get_error_name(code));
    out.clear();
    if input.is_empty() {
        return Ok(out);
    }
    dctx.reset(ResetDirective::SessionOnly)
        .map_err(zstd_error)?;
    let window_log = usize::BITS - limit.max(1).leading_zeros();
    dctx.set_parameter(DParameter::WindowLogMax(
        window_log.clamp(ZSTD_WINDOW_LOG_MIN_CAP, ZSTD_WINDOW_LOG_MAX),
    ))
    .map_err(zstd_error)?;
    let stated = match zstd::zstd_safe::get_frame_content_size(input) {
        Ok(Some(size)) => usize::try_from(size).unwrap_or(usize::MAX),
        _ => input.len().saturating_mul(4),
    };
    out.reserve_exact(stated.clamp(64, limit.saturating_add(1)));
    let mut src = InBuffer::around(input);
    // Zero until a frame ends (and the input may hold another).
    let mut frame_open = true;
    while src.pos() < input.len() || frame_open {
        if out.len() == out.capacity() {
            if out.len() > limit {
                return Err(CompressionError::TooLarge {
                    codec: CODEC,
                    limit,
                });
            }
            let room = out.capacity().max(1024).min(limit + 1 - out.len());
            out.reserve_exact(room);
        }
        let before = (src.pos(), out.len());
        let written_to = out.len();
        let mut dst = OutBuffer::around_pos(&mut out, written_to);
        let hint = dctx
            .decompress_stream(&mut dst, &mut src)
            .map_err(zstd_error)?;
        frame_open = hint != 0;
        let stalled = (src.pos(), out.len()) == before;
        if frame_open && stalled && src.pos() == input.len() && out.len() < out.capacity() {
            return Err(corrupt(CODEC, "the input ends inside a frame"));
        }
    }
    if out.len() > limit {
        return Err(CompressionError::TooLarge {
            codec: CODEC,
            limit,
        });
    }
    Ok(out)
}

/// A decompression output kept for reuse by [`decompress_reusing`]: the
/// buffer stays as large as the largest payload it held (up to
/// [`Decompressed::release_above`]), so decoding into it again neither
/// allocates nor zeroes memory it already had.
#[derive(Debug, Default)]
pub struct Decompressed {
    buf: Vec<u8>,
    len: usize,
}

impl Decompressed {
    /// The bytes the last decompression produced.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Lets the buffer go when it grew beyond `keep` bytes, so that one
    /// large payload does not stay held.
    pub fn release_above(&mut self, keep: usize) {
        if self.buf.capacity() > keep {
            *self = Decompressed::default();
        }
    }

    /// Makes `self.buf[..at_least]` exist, zeroing only bytes never held.
    fn room(&mut self, at_least: usize) {
        if self.buf.len() < at_least {
            self.buf.resize(at_least, 0);
        }
    }
}

/// Like [`decompress`], into `out` (its previous contents are replaced):
/// lz4 frames are decoded block by block straight into it (see
/// `lz4_frame_into`), zstd into its memory; every other payload goes
/// through [`decompress`].
pub fn decompress_reusing(
    codec: Compression,
    input: &[u8],
    limit: usize,
    out: &mut Decompressed,
) -> Result<(), CompressionError> {
    out.len = 0;
    let whole = match codec {
        Compression::Lz4 => match lz4_frame_into(input, limit, out) {
            Some(done) => return done,
            None => decompress(codec, input, limit)?,
        },
        Compression::Zstd => zstd_with_thread_context(input, limit, std::mem::take(&mut out.buf))?,
        _ => decompress(codec, input, limit)?,
    };
    out.len = whole.len();
    out.buf = whole;
    Ok(())
}

/// The lz4 frame magic number.
const LZ4_FRAME_MAGIC: u32 = 0x184D_2204;
/// Skippable lz4 frames have magic numbers 0x184D2A50 to 0x184D2A5F.
const LZ4_SKIPPABLE_MAGIC: u32 = 0x184D_2A50;
/// The most of the output an lz4 block may refer back to.
const LZ4_WINDOW_BYTES: usize = 64 << 10;

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Decodes the lz4 frames of `input` (one after the other; skippable
/// frames are refused) into `out`, checking the header checksum, block sizes and block and content
/// checksums where the frame has them, the stated content size and the
/// limit; `None` when the first frame is of a kind left to lz4_flex's
/// decoder (a legacy frame, a version other than 1, a dictionary, reserved
/// bits), which is then run on the whole input. After a frame, anything
/// but a frame read here is refused: lz4_flex's reader would stop there
/// and drop it. Every block is decoded: a block
/// that decodes to nothing does not end the frame (lz4_flex's reader took
/// it for the end and ignored what followed), and a frame cut off before
/// its end mark is refused, as Kafka's reader refuses it.
fn lz4_frame_into(
    input: &[u8],
    limit: usize,
    out: &mut Decompressed,
) -> Option<Result<(), CompressionError>> {
    out.len = 0;
    let mut position = 0;
    while position < input.len() {
        let Some(magic) = input.get(position..position + 4).map(le_u32) else {
            return Some(Err(corrupt(
                Compression::Lz4,
                "the input ends inside a frame magic",
            )));
        };
        if magic & 0xFFFF_FFF0 == LZ4_SKIPPABLE_MAGIC {
            // Neither Kafka's reader nor lz4_flex's takes one.
            return Some(Err(corrupt(Compression::Lz4, "a skippable frame")));
        }
        if magic != LZ4_FRAME_MAGIC || input.len() < position + 7 {
            if position == 0 {
                return None;
            }
            // lz4_flex's reader would stop after the frames before and
            // drop what follows.
            return Some(Err(corrupt(
                Compression::Lz4,
                "bytes after a frame are not a frame Tarn reads",
            )));
        }
        if position > 0 && lz4_flex_only(&input[position..]) {
            return Some(Err(corrupt(
                Compression::Lz4,
                "a frame after the first needs a dictionary or has reserved bits",
            )));
        }
        match lz4_one_frame(&input[position..], limit, out)? {
            Ok(used) => position += used,
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(()))
}

/// Whether the frame at the start of `frame` (at least 7 bytes, its magic
/// checked) is of a kind only lz4_flex's reader takes.
fn lz4_flex_only(frame: &[u8]) -> bool {
    let (flg, bd) = (frame[4], frame[5]);
    flg >> 6 != 1 || flg & 0x03 != 0 || bd & 0x8F != 0 || (bd >> 4) & 0x07 < 4
}

/// Decodes the lz4 frame at the start of `frame` (at least 7 bytes, its
/// magic checked) after what `out` holds; the bytes the frame took.
fn lz4_one_frame(
    frame: &[u8],
    limit: usize,
    out: &mut Decompressed,
) -> Option<Result<usize, CompressionError>> {
    const CODEC: Compression = Compression::Lz4;
    let (flg, bd) = (frame[4], frame[5]);
    let independent = flg & 0x20 != 0;
    let block_checksums = flg & 0x10 != 0;
    let content_size = flg & 0x08 != 0;
    let content_checksum = flg & 0x04 != 0;
    if lz4_flex_only(frame) {
        return None;
    }
    let block_max = 1 << (8 + 2 * ((bd >> 4) & 0x07));
    let descriptor_end = 6 + if content_size { 8 } else { 0 };
    let Some(&header_checksum) = frame.get(descriptor_end) else {
        return Some(Err(corrupt(CODEC, "the frame header is cut short")));
    };
    let expected = (twox_hash::XxHash32::oneshot(0, &frame[4..descriptor_end]) >> 8) as u8;
    if header_checksum != expected {
        return Some(Err(corrupt(
            CODEC,
            "the frame header checksum does not match",
        )));
    }
    let first = out.len;
    let mut position = descriptor_end + 1;
    let checksum_bytes = if block_checksums { 4 } else { 0 };
    loop {
        let Some(word) = frame.get(position..position + 4).map(le_u32) else {
            return Some(Err(corrupt(CODEC, "the input ends inside the frame")));
        };
        position += 4;
        if word == 0 {
            break;
        }
        let stored = word & 0x8000_0000 != 0;
        let size = (word & 0x7FFF_FFFF) as usize;
        if size > block_max {
            return Some(Err(corrupt(
                CODEC,
                "a block is larger than the frame's block size",
            )));
        }
        let Some(block) = frame.get(position..position + size) else {
            return Some(Err(corrupt(CODEC, "the input ends inside a block")));
        };
        let Some(checksum) = frame.get(position + size..position + size + checksum_bytes) else {
            return Some(Err(corrupt(
                CODEC,
                "the input ends inside a block checksum",
            )));
        };
        if block_checksums && le_u32(checksum) != twox_hash::XxHash32::oneshot(0, block) {
            return Some(Err(corrupt(CODEC, "a block checksum does not match")));
        }
        position += size + checksum_bytes;
        let start = out.len;
        let produced = if stored {
            out.room(start + size);
            out.buf[start..start + size].copy_from_slice(block);
            size
        } else {
            out.room(start + block_max);
            let (before, after) = out.buf.split_at_mut(start);
            let target = &mut after[..block_max];
            let decoded = if independent {
                lz4_flex::block::decompress_into(block, target)
            } else {
                let window = &before[first.max(start.saturating_sub(LZ4_WINDOW_BYTES))..];
                lz4_flex::block::decompress_into_with_dict(block, target, window)
            };
            match decoded {
                Ok(n) => n,
                Err(e) => return Some(Err(corrupt(CODEC, e))),
            }
        };
        out.len = start + produced;
        if out.len > limit {
            return Some(Err(CompressionError::TooLarge {
                codec: CODEC,
                limit,
            }));
        }
    }
    if content_checksum {
        let Some(checksum) = frame.get(position..position + 4).map(le_u32) else {
            return Some(Err(corrupt(
                CODEC,
                "the input ends inside the content checksum",
            )));
        };
        position += 4;
        if checksum != twox_hash::XxHash32::oneshot(0, &out.buf[first..out.len]) {
            return Some(Err(corrupt(CODEC, "the content checksum does not match")));
        }
    }
    if content_size {
        let stated = u64::from_le_bytes(frame[6..14].try_into().expect("eight bytes"));
        if stated != (out.len - first) as u64 {
            return Some(Err(corrupt(
                CODEC,
                format!(
                    "the frame states {stated} bytes and holds {}",
                    out.len - first
                ),
            )));
        }
    }
    Some(Ok(position))
}

/// Reads a decoder to its end, failing once it yields more than `limit`.
fn read_limited(
    codec: Compression,
    reader: impl Read,
    limit: usize,
) -> Result<Vec<u8>, CompressionError> {
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > limit {
        return Err(CompressionError::TooLarge { codec, limit });
    }
    Ok(out)
}

fn decompress_snappy(input: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
    const CODEC: Compression = Compression::Snappy;
    let mut decoder = snap::raw::Decoder::new();
    let mut raw_block = |block: &[u8], out: &mut Vec<u8>| -> Result<(), CompressionError> {
        // The block header states its uncompressed length: check it before
        // allocating anything.
        let len = snap::raw::decompress_len(block).map_err(|e| corrupt(CODEC, e))?;
        if out.len() + len > limit {
            return Err(CompressionError::TooLarge {
                codec: CODEC,
                limit,
            });
        }
        let start = out.len();
        out.resize(start + len, 0);
        let written = decoder
            .decompress(block, &mut out[start..])
            .map_err(|e| corrupt(CODEC, e))?;
        out.truncate(start + written);
        Ok(())
    };
    let mut out = Vec::new();
    if !input.starts_with(&XERIAL_MAGIC) {
        raw_block(input, &mut out)?;
        return Ok(out);
    }
    if input.len() < XERIAL_HEADER_LEN {
        return Err(corrupt(CODEC, "truncated xerial header"));
    }
    let mut rest = &input[XERIAL_HEADER_LEN..];
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(corrupt(CODEC, "truncated xerial block length"));
        }
        let len = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        rest = &rest[4..];
        let len = usize::try_from(len)
            .ok()
            .filter(|len| *len <= rest.len())
            .ok_or_else(|| corrupt(CODEC, format!("xerial block length {len} is out of range")))?;
        raw_block(&rest[..len], &mut out)?;
        rest = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn sample(len: usize) -> Vec<u8> {
        // Compressible but not trivial: a repeating text with a counter.
        let mut out = Vec::with_capacity(len);
        let mut i = 0u32;
        while out.len() < len {
            out.extend_from_slice(format!("{{\"id\":{i},\"name\":\"tarn\"}}").as_bytes());
            i += 1;
        }
        out.truncate(len);
        out
    }

    #[test]
    fn gzip_and_zstd_levels_change_the_output_and_still_round_trip() {
        let input = sample(300_000);
        for (codec, low, high) in [(Compression::Gzip, 1, 9), (Compression::Zstd, 1, 19)] {
            let (mut fast, mut small) = (Vec::new(), Vec::new());
            compress_at(codec, Some(low), &input, &mut fast);
            compress_at(codec, Some(high), &input, &mut small);
            assert_ne!(
                small, fast,
                "{codec:?}: levels {low} and {high} wrote the same bytes"
            );
            for packed in [fast, small] {
                assert_eq!(decompress(codec, &packed, 1 << 20).unwrap(), input);
            }
        }
    }

    /// An lz4 frame of `input` with `info`'s options.
    fn lz4_frame(info: lz4_flex::frame::FrameInfo, input: &[u8]) -> Vec<u8> {
        let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        encoder.write_all(input).unwrap();
        encoder.finish().unwrap()
    }

    /// lz4_flex's own frame reader, the reference for Tarn's.
    fn lz4_flex_reference(input: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
        read_limited(
            Compression::Lz4,
            lz4_flex::frame::FrameDecoder::new(input),
            limit,
        )
    }

    /// `decompress_reusing` into `out`, as a plain result.
    fn reusing(
        codec: Compression,
        input: &[u8],
        limit: usize,
        out: &mut Decompressed,
    ) -> Result<Vec<u8>, CompressionError> {
        decompress_reusing(codec, input, limit, out).map(|()| out.bytes().to_vec())
    }

    #[test]
    fn decompressing_into_a_reused_buffer_gives_each_payload_alone() {
        let mut out = Decompressed::default();
        for codec in ALL {
            for len in [300_000, 0, 1, 100, 70_000] {
                let input = sample(len);
                let mut packed = Vec::new();
                compress(codec, &input, &mut packed);
                let back = reusing(codec, &packed, 1 << 20, &mut out).unwrap();
                assert_eq!(back, input, "{codec:?} {len}");
            }
        }
        out.release_above(1 << 10);
        assert!(out.buf.is_empty(), "a large buffer is let go");
    }

    #[test]
    fn every_kind_of_lz4_frame_decodes_as_lz4_flex_decodes_it() {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameInfo};
        let input = sample(700_000);
        let kinds = [
            FrameInfo::new(),
            FrameInfo::new().block_mode(BlockMode::Linked),
            FrameInfo::new().block_size(BlockSize::Max256KB),
            FrameInfo::new().block_size(BlockSize::Max4MB),
            FrameInfo::new().content_size(Some(input.len() as u64)),
            FrameInfo::new().block_checksums(true),
            FrameInfo::new().content_checksum(true),
        ];
        let mut out = Decompressed::default();
        for info in kinds {
            let frame = lz4_frame(info.clone(), &input);
            assert_eq!(lz4_flex_reference(&frame, 1 << 20).unwrap(), input);
            assert_eq!(
                reusing(Compression::Lz4, &frame, 1 << 20, &mut out).unwrap(),
                input,
                "{info:?}"
            );
            assert_eq!(
                decompress(Compression::Lz4, &frame, 1 << 20).unwrap(),
                input
            );
            // Two frames one after the other read as one payload
            // (lz4_flex's reader stops after the first frame and drops the
            // rest); a skippable frame between them is refused, as Kafka's
            // reader and lz4_flex's refuse one.
            let twice = [frame.clone(), frame.clone()].concat();
            let expected = [input.clone(), input.clone()].concat();
            assert_eq!(
                lz4_flex_reference(&twice, 2 << 20).unwrap().len(),
                input.len()
            );
            assert!(reusing(Compression::Lz4, &twice, 2 << 20, &mut out).unwrap() == expected);
            assert!(decompress(Compression::Lz4, &twice, 2 << 20).unwrap() == expected);
            let skippable = [
                &0x184D_2A5Au32.to_le_bytes()[..],
                &3u32.to_le_bytes(),
                b"abc",
            ]
            .concat();
            let skipping = [frame.clone(), skippable, frame.clone()].concat();
            assert!(reusing(Compression::Lz4, &skipping, 2 << 20, &mut out).is_err());
            assert!(decompress(Compression::Lz4, &skipping, 2 << 20).is_err());
            let too_small = reusing(Compression::Lz4, &frame, input.len() - 1, &mut out);
            assert!(
                matches!(too_small, Err(CompressionError::TooLarge { .. })),
                "{info:?}: {too_small:?}"
            );
        }
    }

    /// Where to cut `frame`: every byte of its header, of its last 64 and
    /// around each block's start, and every 97th byte in between.
    fn lz4_cut_points(frame: &[u8]) -> impl Iterator<Item = usize> {
        let mut at = if frame[4] & 0x08 != 0 { 15 } else { 7 };
        let mut starts = vec![at];
        while let Some(word) = frame.get(at..at + 4) {
            let size = u32::from_le_bytes(word.try_into().unwrap()) & 0x7FFF_FFFF;
            at += 4 + size as usize;
            starts.push(at);
        }
        let len = frame.len();
        (0..len).filter(move |&n| {
            n < 16 || n + 64 > len || n % 97 == 0 || starts.iter().any(|&s| n.abs_diff(s) <= 5)
        })
    }

    #[test]
    fn damaged_lz4_frames_fail_where_lz4_flex_fails_or_the_end_mark_is_missing() {
        use lz4_flex::frame::{BlockMode, FrameInfo};
        let input = sample(100_000);
        let mut out = Decompressed::default();
        for info in [
            FrameInfo::new(),
            FrameInfo::new().block_mode(BlockMode::Linked),
            FrameInfo::new().content_size(Some(input.len() as u64)),
        ] {
            let frame = lz4_frame(info, &input);
            // Cuts, and a flipped bit in each header byte and every 97th: the fast
            // path and lz4_flex's decoder agree on the outcome, except
            // that a frame cut where a block or its end mark begins is
            // refused, as Kafka's own reader refuses it ("stream ended
            // prematurely"), where lz4_flex takes it for ended.
            let cuts = lz4_cut_points(&frame).map(|n| (true, frame[..n].to_vec()));
            let flips = (0..frame.len())
                .filter(|at| *at < 16 || at % 97 == 3)
                .map(|at| {
                    let mut bad = frame.clone();
                    bad[at] ^= 0x10;
                    (false, bad)
                });
            for (cut, bad) in cuts.chain(flips) {
                let reference = lz4_flex_reference(&bad, 1 << 20);
                assert_eq!(
                    decompress(Compression::Lz4, &bad, 1 << 20).ok(),
                    reusing(Compression::Lz4, &bad, 1 << 20, &mut out).ok(),
                    "decompress and decompress_reusing agree"
                );
                let fast = reusing(Compression::Lz4, &bad, 1 << 20, &mut out);
                match (&reference, &fast) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b),
                    (Err(_), Err(_)) => {}
                    (Ok(_), Err(CompressionError::Corrupt { detail, .. }))
                        if cut && detail == "the input ends inside the frame" => {}
                    _ => panic!(
                        "{} bytes: lz4_flex {:?}, fast path {:?}",
                        bad.len(),
                        reference.map(|v| v.len()),
                        fast.map(|v| v.len())
                    ),
                }
            }
        }
    }

    #[test]
    fn bytes_after_an_lz4_frame_are_read_as_frames_or_refused() {
        use lz4_flex::frame::FrameInfo;
        let input = sample(10_000);
        let frame = lz4_frame(FrameInfo::new(), &input);
        let mut out = Decompressed::default();
        // Each of these lz4_flex's reader reads as the first frame alone.
        let mut with_dictionary = frame.clone();
        with_dictionary[4] |= 0x01;
        for after in [b"garbage".to_vec(), frame[..5].to_vec(), with_dictionary] {
            let payload = [frame.clone(), after].concat();
            assert_eq!(lz4_flex_reference(&payload, 1 << 20).unwrap(), input);
            assert!(decompress(Compression::Lz4, &payload, 1 << 20).is_err());
            assert!(reusing(Compression::Lz4, &payload, 1 << 20, &mut out).is_err());
        }
    }

    #[test]
    fn an_lz4_block_that_decodes_to_nothing_does_not_end_the_frame() {
        use lz4_flex::frame::FrameInfo;
        let input = sample(100_000);
        let frame = lz4_frame(FrameInfo::new(), &input);
        // After the header (7 bytes): a compressed block of one byte, a
        // token with no literals and no match, which decodes to nothing.
        let with_empty = [&frame[..7], &[1, 0, 0, 0, 0], &frame[7..]].concat();
        // lz4_flex's reader takes it for the end of the frame.
        assert_eq!(
            lz4_flex_reference(&with_empty, 1 << 20).unwrap(),
            Vec::<u8>::new()
        );
        assert_eq!(
            decompress(Compression::Lz4, &with_empty, 1 << 20).unwrap(),
            input
        );
        let mut out = Decompressed::default();
        assert_eq!(
            reusing(Compression::Lz4, &with_empty, 1 << 20, &mut out).unwrap(),
            input
        );
    }

    #[test]
    fn every_codec_round_trips() {
        for codec in ALL {
            for len in [0, 1, 100, 70_000, 300_000] {
                let input = sample(len);
                let mut packed = Vec::new();
                compress(codec, &input, &mut packed);
                let back = decompress(codec, &packed, 1 << 20).unwrap();
                assert_eq!(back, input, "{codec:?} {len}");
            }
        }
    }

    #[test]
    fn decompression_is_capped() {
        // 8 MiB of zeros compresses to a few KiB with every codec.
        let bomb_input = vec![0u8; 8 << 20];
        for codec in ALL {
            let mut packed = Vec::new();
            compress(codec, &bomb_input, &mut packed);
            if codec != Compression::None {
                assert!(packed.len() < 1 << 20, "{codec:?}: {}", packed.len());
            }
            let err = decompress(codec, &packed, 1 << 20).unwrap_err();
            assert_eq!(
                err,
                CompressionError::TooLarge {
                    codec,
                    limit: 1 << 20
                }
            );
        }
    }

    #[test]
    fn xerial_snappy_framing_matches_snappy_java() {
        let input = sample(XERIAL_BLOCK_BYTES + 10);
        let mut packed = Vec::new();
        compress(Compression::Snappy, &input, &mut packed);
        // Header: magic, version 1, compatible version 1.
        assert_eq!(
            &packed[..16],
            &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1]
        );
        // Two blocks: 32 KiB, then the 10-byte rest.
        let first = i32::from_be_bytes(packed[16..20].try_into().unwrap()) as usize;
        let block = &packed[20..20 + first];
        assert_eq!(
            snap::raw::decompress_len(block).unwrap(),
            XERIAL_BLOCK_BYTES
        );
        let second_at = 20 + first;
        let second = i32::from_be_bytes(packed[second_at..second_at + 4].try_into().unwrap());
        assert_eq!(packed.len(), second_at + 4 + second as usize);
    }

    #[test]
    fn known_snappy_bytes_decode_raw_and_xerial() {
        // "hello" as a raw snappy block: varint length 5, literal tag 4<<2, bytes.
        let raw = [0x05, 0x10, b'h', b'e', b'l', b'l', b'o'];
        assert_eq!(
            decompress(Compression::Snappy, &raw, 100).unwrap(),
            b"hello"
        );
        let mut xerial = vec![
            0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
        ];
        xerial.extend_from_slice(&7i32.to_be_bytes());
        xerial.extend_from_slice(&raw);
        xerial.extend_from_slice(&7i32.to_be_bytes());
        xerial.extend_from_slice(&raw);
        assert_eq!(
            decompress(Compression::Snappy, &xerial, 100).unwrap(),
            b"hellohello"
        );
        // A block length past the end is corrupt, not a panic.
        let mut bad = xerial.clone();
        bad[16..20].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(
            decompress(Compression::Snappy, &bad, 100),
            Err(CompressionError::Corrupt { .. })
        ));
    }

    #[test]
    fn lz4_frame_header_is_what_kafka_expects() {
        let mut packed = Vec::new();
        compress(Compression::Lz4, b"hello hello hello", &mut packed);
        // Magic, then FLG: version 01, independent blocks, no checksums or
        // content size; BD: 64 KiB maximum block size.
        assert_eq!(&packed[..4], &[0x04, 0x22, 0x4D, 0x18]);
        assert_eq!(packed[4], 0b0110_0000);
        assert_eq!(packed[5], 0x40);
        // End mark: a zero block length.
        assert_eq!(&packed[packed.len() - 4..], &[0, 0, 0, 0]);
    }

    #[test]
    fn known_lz4_frame_decodes() {
        // A frame as Kafka's Lz4BlockOutputStream writes "hello": FLG 0x60,
        // BD 0x40, header checksum 0x82, one uncompressed block (high bit set),
        // end mark.
        let frame = [
            0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82, 0x05, 0x00, 0x00, 0x80, b'h', b'e', b'l',
            b'l', b'o', 0, 0, 0, 0,
        ];
        assert_eq!(decompress(Compression::Lz4, &frame, 100).unwrap(), b"hello");
    }

    #[test]
    fn garbage_is_corrupt_for_every_codec() {
        // A snappy length of 10, then an impossible copy tag; not a gzip,
        // lz4 or zstd magic either.
        let garbage = [
            0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        for codec in ALL.into_iter().skip(1) {
            assert!(
                matches!(
                    decompress(codec, &garbage, 1000),
                    Err(CompressionError::Corrupt { .. })
                ),
                "{codec:?}"
            );
        }
    }

    /// What Java's streaming encoder writes (no content size in the frame
    /// header), several frames in one payload, and a frame cut short, all
    /// through the thread's one reused context: a failure leaves it
    /// usable for the next payload.
    #[test]
    fn zstd_reads_streamed_and_concatenated_frames_and_refuses_a_cut_one() {
        let input = sample(200_000);
        let mut streamed = Vec::new();
        let mut encoder = zstd::stream::Encoder::new(&mut streamed, 3).unwrap();
        encoder.write_all(&input).unwrap();
        encoder.finish().unwrap();
        assert!(
            matches!(zstd::zstd_safe::get_frame_content_size(&streamed), Ok(None)),
            "a streamed frame states no size"
        );
        assert_eq!(
            decompress(Compression::Zstd, &streamed, 1 << 20).unwrap(),
            input
        );

        let mut two = Vec::new();
        compress(Compression::Zstd, &input[..1000], &mut two);
        compress(Compression::Zstd, &input[1000..], &mut two);
        assert_eq!(decompress(Compression::Zstd, &two, 1 << 20).unwrap(), input);

        let cut = &streamed[..streamed.len() - 10];
        assert!(matches!(
            decompress(Compression::Zstd, cut, 1 << 20),
            Err(CompressionError::Corrupt { .. })
        ));
        assert_eq!(
            decompress(Compression::Zstd, &streamed, 200_000).unwrap(),
            input,
            "exactly at the limit"
        );
        assert_eq!(
            decompress(Compression::Zstd, &streamed, 199_999),
            Err(CompressionError::TooLarge {
                codec: Compression::Zstd,
                limit: 199_999
            })
        );
        assert_eq!(decompress(Compression::Zstd, &two, 1 << 20).unwrap(), input);
    }
}
