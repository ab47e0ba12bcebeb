//! Length + CRC32C framing of the records in the quorum's files, and the
//! one way those files are replaced (write a temp file, fsync, rename,
//! fsync the directory).
//!
//! A frame is `len: u32 BE | crc32c(payload): u32 BE | payload`. Reading
//! tells a torn tail (an incomplete last frame, a last frame whose CRC
//! does not match, or a zero-filled rest) from corruption (a bad frame
//! with data after it), so only the former is ever cut.

use std::io;
use std::path::Path;
use std::sync::Arc;

use tarn_storage::FileSystem;

pub const FRAME_HEADER_BYTES: usize = 8;
/// The largest payload a frame may carry; a length above it is not a
/// frame we wrote.
pub const FRAME_PAYLOAD_BYTES_MAX: usize = 256 << 20;
/// The suffix of a file being written before it is renamed into place.
pub const TEMP_SUFFIX: &str = ".part";

pub fn encode(payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= FRAME_PAYLOAD_BYTES_MAX, "frame too large");
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// What reading a buffer of frames found.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// `(position, payload)` of each intact frame, in order.
    pub frames: Vec<(u64, &'a [u8])>,
    /// Where the intact frames end; below `buf.len()` when a tail is torn.
    pub valid_len: u64,
}

/// Splits `buf` into frames. A torn tail ends the frames; a bad frame
/// with more data after it is an error.
pub fn decode(buf: &[u8]) -> Result<Decoded<'_>, String> {
    let mut frames = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let rest = &buf[pos..];
        if rest.iter().all(|&b| b == 0) {
            break; // A zero-filled tail: space allocated, data never written.
        }
        if rest.len() < FRAME_HEADER_BYTES {
            break;
        }
        let len = u32::from_be_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len > FRAME_PAYLOAD_BYTES_MAX {
            return Err(format!("frame at {pos} claims {len} bytes"));
        }
        let end = FRAME_HEADER_BYTES + len;
        if rest.len() < end {
            break; // The last frame was cut short.
        }
        let payload = &rest[FRAME_HEADER_BYTES..end];
        if crc32c::crc32c(payload) != crc {
            if rest.len() == end {
                break; // The last frame's bytes did not all reach the disk.
            }
            return Err(format!("frame at {pos} fails its CRC and is not the last"));
        }
        frames.push((pos as u64, payload));
        pos += end;
    }
    Ok(Decoded {
        frames,
        valid_len: pos as u64,
    })
}

/// Reads the whole of `path`, or `None` when it does not exist.
pub fn read_file(fs: &dyn FileSystem, path: &Path) -> io::Result<Option<Vec<u8>>> {
    let Some(len) = fs.len(path)? else {
        return Ok(None);
    };
    let handle = fs.open(path, false)?;
    let mut buf = vec![0; len as usize];
    handle.read_exact_at(&mut buf, 0)?;
    Ok(Some(buf))
}

/// Durably replaces `dir/name` with `contents`: written to a temp file,
/// fsynced, renamed over the old one, and the directory fsynced.
pub fn replace_file(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    name: &str,
    contents: &[u8],
) -> io::Result<()> {
    let temp = dir.join(format!("{name}{TEMP_SUFFIX}"));
    if fs.len(&temp)?.is_some() {
        fs.remove_file(&temp)?;
    }
    let handle = fs.open(&temp, true)?;
    handle.write_all_at(contents, 0)?;
    handle.sync()?;
    fs.rename(&temp, &dir.join(name))?;
    fs.sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode(p, &mut out);
        }
        out
    }

    #[test]
    fn decodes_what_it_encodes() {
        let buf = frames(&[b"a", b"", b"ccc"]);
        let d = decode(&buf).unwrap();
        let payloads: Vec<&[u8]> = d.frames.iter().map(|f| f.1).collect();
        assert_eq!(payloads, vec![&b"a"[..], b"", b"ccc"]);
        assert_eq!(d.valid_len, buf.len() as u64);
    }

    #[test]
    fn a_torn_tail_ends_the_frames_anywhere_it_is_cut() {
        let buf = frames(&[b"first", b"second"]);
        let first_end = (FRAME_HEADER_BYTES + 5) as u64;
        for cut in first_end as usize..buf.len() {
            let d = decode(&buf[..cut]).unwrap();
            assert_eq!(d.frames.len(), 1, "cut at {cut}");
            assert_eq!(d.valid_len, first_end);
        }
        let mut zeroed = buf.clone();
        zeroed.extend_from_slice(&[0; 100]);
        assert_eq!(decode(&zeroed).unwrap().frames.len(), 2);
        let mut bad_last = buf.clone();
        *bad_last.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&bad_last).unwrap().valid_len, first_end);
    }

    #[test]
    fn a_bad_frame_before_good_data_is_an_error() {
        let mut buf = frames(&[b"first", b"second"]);
        buf[FRAME_HEADER_BYTES] ^= 1;
        assert!(decode(&buf).is_err());
        let mut huge = frames(&[b"x"]);
        huge[0] = 0xff;
        assert!(decode(&huge).is_err());
    }
}
