//! Record data in an outgoing response, either in memory or as a range of
//! a segment file that the connection sends with sendfile(2).
//!
//! A response that carries file ranges is encoded in two steps: the
//! message is encoded as usual, with each file range contributing only its
//! length prefix and remembering where in the output its bytes belong; then
//! [`ResponseParts`] cuts the encoded bytes at those places and puts the
//! file ranges in between. The frame length counts the file bytes, so the
//! client sees exactly the frame it would get if the bytes were inline.
//! Nothing here reads the file: the connection does.

use std::cell::Cell;
use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{put_len, Decode, Encode, Nullable, Reader, Result, Version};

/// A byte range of an open file: `len` bytes from `position`, whose
/// batches span `records` offsets (for metrics: the records they hold,
/// unless compaction removed some).
#[derive(Debug, Clone)]
pub struct FileRegion {
    pub file: Arc<File>,
    pub position: u64,
    pub len: u32,
    pub records: u64,
}

/// The `records` field of a response partition.
#[derive(Debug, Clone)]
pub enum Records {
    Bytes(Bytes),
    /// Bytes sent straight from a file; `encoded_at` is set during encoding
    /// to the output position where they belong.
    File {
        region: FileRegion,
        encoded_at: Cell<Option<usize>>,
    },
}

impl Records {
    pub fn file(region: FileRegion) -> Records {
        Records::File {
            region,
            encoded_at: Cell::new(None),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Records::Bytes(b) => b.len(),
            Records::File { region, .. } => region.len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Records {
    fn default() -> Self {
        Records::Bytes(Bytes::new())
    }
}

/// Equal when they would put the same bytes on the wire; file regions
/// compare by file identity and range.
impl PartialEq for Records {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Records::Bytes(a), Records::Bytes(b)) => a == b,
            (Records::File { region: a, .. }, Records::File { region: b, .. }) => {
                Arc::ptr_eq(&a.file, &b.file) && a.position == b.position && a.len == b.len
            }
            _ => false,
        }
    }
}

impl Nullable for Records {
    fn decode_nullable(r: &mut Reader, v: Version) -> Result<Option<Self>> {
        Ok(Bytes::decode_nullable(r, v)?.map(Records::Bytes))
    }
    fn encode_null(out: &mut Vec<u8>, v: Version) {
        Bytes::encode_null(out, v);
    }
}

impl Decode for Records {
    fn decode(r: &mut Reader, v: Version) -> Result<Self> {
        Bytes::decode(r, v).map(Records::Bytes)
    }
}

impl Encode for Records {
    fn encode(&self, out: &mut Vec<u8>, v: Version) {
        match self {
            Records::Bytes(b) => b.encode(out, v),
            Records::File { region, encoded_at } => {
                put_len(out, v, Some(region.len as usize), true);
                encoded_at.set(Some(out.len()));
            }
        }
    }
}

/// One piece of an outgoing frame.
#[derive(Debug, Clone)]
pub enum Part {
    Bytes(Bytes),
    File(FileRegion),
}

/// A whole response frame as a sequence of in-memory and file parts.
#[derive(Debug, Clone, Default)]
pub struct ResponseParts {
    pub parts: Vec<Part>,
}

impl ResponseParts {
    /// A frame that is all in memory.
    pub fn bytes(frame: Bytes) -> ResponseParts {
        ResponseParts {
            parts: vec![Part::Bytes(frame)],
        }
    }

    /// Builds the frame from `encoded` (starting with the 4-byte length
    /// placeholder of `header::begin_response`, then the header and the
    /// body) and the file records in the order they were encoded, each of
    /// which must have been encoded into `encoded`. Fills in the frame
    /// length, counting the file bytes.
    pub fn assemble<'a>(
        mut encoded: Vec<u8>,
        files: impl IntoIterator<Item = &'a Records>,
    ) -> ResponseParts {
        let mut cuts: Vec<(usize, FileRegion)> = Vec::new();
        for records in files {
            if let Records::File { region, encoded_at } = records {
                let at = encoded_at
                    .get()
                    .expect("file records are encoded before they are assembled");
                cuts.push((at, region.clone()));
            }
        }
        cuts.sort_by_key(|(at, _)| *at);
        let file_bytes: usize = cuts.iter().map(|(_, r)| r.len as usize).sum();
        let len = i32::try_from(encoded.len() - 4 + file_bytes)
            .expect("response frames stay below 2 GiB (fetch max_bytes is an i32)");
        encoded[..4].copy_from_slice(&len.to_be_bytes());
        let mut encoded = Bytes::from(encoded);
        let mut parts = Vec::with_capacity(cuts.len() * 2 + 1);
        let mut consumed = 0;
        for (at, region) in cuts {
            parts.push(Part::Bytes(encoded.split_to(at - consumed)));
            consumed = at;
            if region.len > 0 {
                parts.push(Part::File(region));
            }
        }
        if !encoded.is_empty() {
            parts.push(Part::Bytes(encoded));
        }
        ResponseParts { parts }
    }

    /// Total frame size on the wire, length prefix included.
    pub fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len(),
                Part::File(r) => r.len as usize,
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    #[test]
    fn file_records_become_parts_with_the_right_frame_length() {
        let file = tempfile_with(b"0123456789");
        let region = |position, len| FileRegion {
            file: file.clone(),
            position,
            len,
            records: 0,
        };
        let a = Records::file(region(2, 3));
        let b = Records::Bytes(Bytes::from_static(b"xy"));
        let c = Records::file(region(0, 10));
        let v = Version::new(4, 12);
        let mut out = vec![0u8; 4];
        out.extend_from_slice(b"HDR");
        for r in [&a, &b, &c] {
            r.encode(&mut out, v);
        }
        out.extend_from_slice(b"END");
        let parts = ResponseParts::assemble(out, [&a, &b, &c]);
        // Expand the parts into the frame a client would read.
        let mut wire = Vec::new();
        for part in &parts.parts {
            match part {
                Part::Bytes(b) => wire.extend_from_slice(b),
                Part::File(r) => {
                    let mut buf = vec![0; r.len as usize];
                    let mut f = &*r.file;
                    f.seek(SeekFrom::Start(r.position)).unwrap();
                    f.read_exact(&mut buf).unwrap();
                    wire.extend_from_slice(&buf);
                }
            }
        }
        let mut expected = Vec::new();
        expected.extend_from_slice(b"HDR");
        for bytes in [&b"234"[..], b"xy", b"0123456789"] {
            expected.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
            expected.extend_from_slice(bytes);
        }
        expected.extend_from_slice(b"END");
        assert_eq!(&wire[4..], &expected[..]);
        assert_eq!(
            i32::from_be_bytes(wire[..4].try_into().unwrap()) as usize,
            expected.len()
        );
        assert_eq!(parts.len(), wire.len());
    }

    fn tempfile_with(data: &[u8]) -> Arc<File> {
        let path = std::env::temp_dir().join(format!(
            "tarn-records-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all(data).unwrap();
        std::fs::remove_file(&path).unwrap();
        Arc::new(f)
    }
}
