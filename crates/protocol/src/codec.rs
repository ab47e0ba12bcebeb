//! Bounded primitives of the Kafka wire format and the `message!` macro
//! that declares request/response structs with per-field version ranges.
//!
//! Every length or count read from the wire is checked against the bytes
//! that remain in the frame before anything is allocated, and what a
//! decode allocates is charged to a budget fixed by the frame's size (see
//! [`Reader`]): an array's count only caps how far its vector may grow, it
//! never reserves memory by itself, so a 1-byte element that decodes to a
//! 24-byte `String` cannot turn a 100 MB frame into gigabytes. Flexible
//! versions (KIP-482) use compact lengths and tagged
//! fields; on encode, a tagged field equal to its default is left out, as
//! Kafka does (librdkafka 2.0.2 mis-skips tagged fields it does not know).

use bytes::{BufMut, Bytes};

/// Why a frame could not be decoded. Never a panic: the connection layer
/// turns these into a closed connection or an error response.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("frame ended early: needed {needed} bytes, {remaining} left")]
    Truncated { needed: usize, remaining: usize },
    #[error("invalid length {0}")]
    InvalidLength(i64),
    #[error("array count {count} exceeds the {remaining} bytes left in the frame")]
    ArrayTooLong { count: usize, remaining: usize },
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    #[error("varint is longer than allowed")]
    VarintOverflow,
    #[error("null value in a non-nullable field")]
    UnexpectedNull,
    #[error("decoding would allocate more than {limit} bytes for a {frame_bytes}-byte frame")]
    TooLarge { limit: usize, frame_bytes: usize },
}

pub type Result<T> = std::result::Result<T, DecodeError>;

/// The version a message is read or written at, and whether that version
/// is flexible (compact encodings plus tagged fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub version: i16,
    pub flexible: bool,
}

impl Version {
    pub fn new(version: i16, flexible_min: i16) -> Self {
        Version {
            version,
            flexible: version >= flexible_min,
        }
    }

    pub fn within(self, lo: i16, hi: i16) -> bool {
        self.version >= lo && self.version <= hi
    }
}

/// What decoding a frame of N bytes may allocate, at most: N times this...
/// (the most expansive real shapes, such as CreateTopics with short topic
/// names, decode to about 6x their wire bytes; 24-byte empty strings that
/// cost one byte each are refused)...
pub const DECODE_EXPANSION_MAX: usize = 16;
/// ...and at most N plus this, so a large frame can at most double its
/// footprint: five 100 MB requests in flight stay well under 1.5 GB.
pub const DECODE_HEADROOM_BYTES: usize = 32 << 20;
/// A vector's first allocation is at most this many bytes; it then grows
/// (doubling, up to its count) as its elements really decode.
pub const DECODE_PREALLOC_BYTES: usize = 64 * 1024;

/// The decode budget of a frame of `frame_bytes` bytes.
pub fn decode_budget_bytes(frame_bytes: usize) -> usize {
    frame_bytes
        .saturating_mul(DECODE_EXPANSION_MAX)
        .min(frame_bytes.saturating_add(DECODE_HEADROOM_BYTES))
}

/// A cursor over one received frame. Slices of byte fields share the
/// frame's allocation (`Bytes`), so record batches are never copied here.
///
/// The reader also keeps the frame's decode budget
/// ([`decode_budget_bytes`]): every vector's capacity and every string's
/// bytes are charged to it as they are allocated, and a frame whose
/// decoded form would exceed it fails with [`DecodeError::TooLarge`].
pub struct Reader {
    buf: Bytes,
    pos: usize,
    budget_bytes: usize,
    budget_limit: usize,
}

impl Reader {
    pub fn new(buf: Bytes) -> Self {
        let budget_limit = decode_budget_bytes(buf.len());
        Reader {
            buf,
            pos: 0,
            budget_bytes: budget_limit,
            budget_limit,
        }
    }

    /// Charges `bytes` of allocation to the frame's decode budget.
    pub fn charge(&mut self, bytes: usize) -> Result<()> {
        match self.budget_bytes.checked_sub(bytes) {
            Some(left) => {
                self.budget_bytes = left;
                Ok(())
            }
            None => Err(DecodeError::TooLarge {
                limit: self.budget_limit,
                frame_bytes: self.buf.len(),
            }),
        }
    }

    /// Bytes of decode budget left.
    pub fn budget_left(&self) -> usize {
        self.budget_bytes
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    fn need(&self, n: usize) -> Result<()> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: n,
                remaining: self.remaining(),
            });
        }
        Ok(())
    }

    pub fn take(&mut self, n: usize) -> Result<Bytes> {
        self.need(n)?;
        let out = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.need(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(out)
    }

    pub fn i8(&mut self) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array()?))
    }
    pub fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    pub fn uvarint(&mut self) -> Result<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let byte = self.array::<1>()?[0];
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintOverflow)
    }

    /// A length that may be null (-1 classic, 0 compact). Checked against
    /// the bytes left so callers can allocate from it.
    fn nullable_len(&mut self, v: Version, classic_wide: bool) -> Result<Option<usize>> {
        let len: i64 = if v.flexible {
            i64::from(self.uvarint()?) - 1
        } else if classic_wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        if len < -1 {
            return Err(DecodeError::InvalidLength(len));
        }
        if len == -1 {
            return Ok(None);
        }
        let len = len as usize;
        self.need(len)?;
        Ok(Some(len))
    }

    /// An array count, bounded by the bytes left: every element takes at
    /// least one byte on the wire.
    fn array_count(&mut self, v: Version) -> Result<Option<usize>> {
        let count: i64 = if v.flexible {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(self.i32()?)
        };
        if count < -1 {
            return Err(DecodeError::InvalidLength(count));
        }
        if count == -1 {
            return Ok(None);
        }
        let count = count as usize;
        if count > self.remaining() {
            return Err(DecodeError::ArrayTooLong {
                count,
                remaining: self.remaining(),
            });
        }
        Ok(Some(count))
    }

    /// Skips the tagged-field section of a structure, returning each
    /// (tag, payload) to the caller.
    pub fn tagged_fields(
        &mut self,
        mut on_field: impl FnMut(u32, &mut Reader) -> Result<()>,
    ) -> Result<()> {
        let count = self.uvarint()? as usize;
        if count > self.remaining() {
            return Err(DecodeError::ArrayTooLong {
                count,
                remaining: self.remaining(),
            });
        }
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            // The field's reader spends this frame's budget, not one of
            // its own.
            let mut field = Reader {
                buf: self.take(size)?,
                pos: 0,
                budget_bytes: self.budget_bytes,
                budget_limit: self.budget_limit,
            };
            let decoded = on_field(tag, &mut field);
            self.budget_bytes = field.budget_bytes;
            decoded?;
        }
        Ok(())
    }

    /// Decodes `count` elements into a vector whose capacity is charged to
    /// the budget as it grows: it starts at [`DECODE_PREALLOC_BYTES`] at
    /// most and doubles, never past `count`, only when elements have
    /// really decoded.
    fn elements<T: Decode>(&mut self, count: usize, v: Version) -> Result<Vec<T>> {
        let element_bytes = std::mem::size_of::<T>();
        let first = count.min(DECODE_PREALLOC_BYTES / element_bytes.max(1));
        self.charge(first.saturating_mul(element_bytes))?;
        let mut items = Vec::with_capacity(first);
        let mut charged = first;
        for _ in 0..count {
            let item = T::decode(self, v)?;
            if items.len() == charged {
                // Near the end of the budget grow only as far as it goes,
                // so an array that fits is never refused for the doubling.
                let affordable = charged + self.budget_bytes / element_bytes.max(1);
                let grown = charged
                    .saturating_mul(2)
                    .max(4)
                    .min(count)
                    .min(affordable)
                    .max(charged + 1);
                self.charge((grown - charged).saturating_mul(element_bytes))?;
                items.reserve_exact(grown - items.len());
                charged = grown;
            }
            items.push(item);
        }
        Ok(items)
    }
}

pub fn put_uvarint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(crate) fn put_len(out: &mut Vec<u8>, v: Version, len: Option<usize>, classic_wide: bool) {
    match (v.flexible, len) {
        (true, None) => put_uvarint(out, 0),
        (true, Some(n)) => put_uvarint(out, n as u32 + 1),
        (false, None) if classic_wide => out.put_i32(-1),
        (false, None) => out.put_i16(-1),
        (false, Some(n)) if classic_wide => out.put_i32(n as i32),
        (false, Some(n)) => out.put_i16(n as i16),
    }
}

/// A value that can be read from a frame at a given version.
pub trait Decode: Sized {
    fn decode(r: &mut Reader, v: Version) -> Result<Self>;
}

/// A value that can be written at a given version.
pub trait Encode {
    fn encode(&self, out: &mut Vec<u8>, v: Version);
}

/// Types whose wire form has a null (strings, bytes, arrays).
pub trait Nullable: Sized {
    fn decode_nullable(r: &mut Reader, v: Version) -> Result<Option<Self>>;
    fn encode_null(out: &mut Vec<u8>, v: Version);
}

macro_rules! fixed_int {
    ($($t:ty => $read:ident),*) => {$(
        impl Decode for $t {
            fn decode(r: &mut Reader, _v: Version) -> Result<Self> { r.$read() }
        }
        impl Encode for $t {
            fn encode(&self, out: &mut Vec<u8>, _v: Version) { out.extend_from_slice(&self.to_be_bytes()) }
        }
    )*};
}
fixed_int!(i8 => i8, i16 => i16, u16 => u16, i32 => i32, i64 => i64);

impl Decode for bool {
    fn decode(r: &mut Reader, _v: Version) -> Result<Self> {
        Ok(r.i8()? != 0)
    }
}
impl Encode for bool {
    fn encode(&self, out: &mut Vec<u8>, _v: Version) {
        out.push(u8::from(*self));
    }
}

/// A 16-byte UUID, used for topic ids. The all-zero value is Kafka's
/// `Uuid.ZERO_UUID`, meaning "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    pub const ZERO: Uuid = Uuid([0; 16]);

    pub fn is_zero(&self) -> bool {
        *self == Uuid::ZERO
    }

    /// Kafka prints topic ids as unpadded URL-safe base64.
    pub fn to_base64(&self) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::with_capacity(22);
        for chunk in self.0.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let chars = chunk.len() + 1;
            for i in 0..chars {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }

    /// Parses [`Uuid::to_base64`]'s form; `None` for anything else.
    pub fn from_base64(text: &str) -> Option<Uuid> {
        fn value(c: u8) -> Option<u32> {
            Some(match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'-' => 62,
                b'_' => 63,
                _ => return None,
            } as u32)
        }
        let text = text.as_bytes();
        if text.len() != 22 {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, chunk) in text.chunks(4).enumerate() {
            let mut n = 0u32;
            for (j, &c) in chunk.iter().enumerate() {
                n |= value(c)? << (18 - 6 * j);
            }
            let bytes = n.to_be_bytes();
            let take = chunk.len() - 1;
            out[i * 3..i * 3 + take].copy_from_slice(&bytes[1..1 + take]);
        }
        // The last character carries 6 bits of which only the top 2 belong
        // to the 16th byte; the canonical form has the rest zero.
        (Uuid(out).to_base64().as_bytes() == text).then_some(Uuid(out))
    }
}

impl std::fmt::Display for Uuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_base64())
    }
}

impl Decode for Uuid {
    fn decode(r: &mut Reader, _v: Version) -> Result<Self> {
        Ok(Uuid(r.array()?))
    }
}
impl Encode for Uuid {
    fn encode(&self, out: &mut Vec<u8>, _v: Version) {
        out.extend_from_slice(&self.0);
    }
}

impl Nullable for String {
    fn decode_nullable(r: &mut Reader, v: Version) -> Result<Option<Self>> {
        match r.nullable_len(v, false)? {
            None => Ok(None),
            Some(len) => {
                let raw = r.take(len)?;
                let s = std::str::from_utf8(&raw).map_err(|_| DecodeError::InvalidUtf8)?;
                r.charge(len)?;
                Ok(Some(s.to_owned()))
            }
        }
    }
    fn encode_null(out: &mut Vec<u8>, v: Version) {
        put_len(out, v, None, false);
    }
}
impl Decode for String {
    fn decode(r: &mut Reader, v: Version) -> Result<Self> {
        String::decode_nullable(r, v)?.ok_or(DecodeError::UnexpectedNull)
    }
}
impl Encode for String {
    fn encode(&self, out: &mut Vec<u8>, v: Version) {
        put_len(out, v, Some(self.len()), false);
        out.extend_from_slice(self.as_bytes());
    }
}

impl Nullable for Bytes {
    fn decode_nullable(r: &mut Reader, v: Version) -> Result<Option<Self>> {
        match r.nullable_len(v, true)? {
            None => Ok(None),
            Some(len) => Ok(Some(r.take(len)?)),
        }
    }
    fn encode_null(out: &mut Vec<u8>, v: Version) {
        put_len(out, v, None, true);
    }
}
impl Decode for Bytes {
    fn decode(r: &mut Reader, v: Version) -> Result<Self> {
        Bytes::decode_nullable(r, v)?.ok_or(DecodeError::UnexpectedNull)
    }
}
impl Encode for Bytes {
    fn encode(&self, out: &mut Vec<u8>, v: Version) {
        put_len(out, v, Some(self.len()), true);
        out.extend_from_slice(self);
    }
}

impl<T: Decode> Nullable for Vec<T> {
    fn decode_nullable(r: &mut Reader, v: Version) -> Result<Option<Self>> {
        let Some(count) = r.array_count(v)? else {
            return Ok(None);
        };
        r.elements(count, v).map(Some)
    }
    fn encode_null(out: &mut Vec<u8>, v: Version) {
        put_len(out, v, None, true);
    }
}
impl<T: Decode> Decode for Vec<T> {
    fn decode(r: &mut Reader, v: Version) -> Result<Self> {
        Vec::<T>::decode_nullable(r, v)?.ok_or(DecodeError::UnexpectedNull)
    }
}
impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>, v: Version) {
        put_len(out, v, Some(self.len()), true);
        for item in self {
            item.encode(out, v);
        }
    }
}

impl<T: Nullable> Decode for Option<T> {
    fn decode(r: &mut Reader, v: Version) -> Result<Self> {
        T::decode_nullable(r, v)
    }
}
impl<T: Nullable + Encode> Encode for Option<T> {
    fn encode(&self, out: &mut Vec<u8>, v: Version) {
        match self {
            Some(value) => value.encode(out, v),
            None => T::encode_null(out, v),
        }
    }
}

/// Writes a tagged field section from (tag, encoded payload) pairs.
pub fn put_tagged_fields(out: &mut Vec<u8>, fields: &[(u32, Vec<u8>)]) {
    put_uvarint(out, fields.len() as u32);
    for (tag, payload) in fields {
        put_uvarint(out, *tag);
        put_uvarint(out, payload.len() as u32);
        out.extend_from_slice(payload);
    }
}

/// Declares a protocol structure: its fields in wire order, each with the
/// inclusive version range it exists in and an optional default, then an
/// optional `tagged` section. Generates the struct, `Default`, `Decode`
/// and `Encode`. A field outside its versions keeps its default on decode
/// and is not written on encode.
#[macro_export]
macro_rules! message {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $field:ident : $ty:ty $(= $default:expr)? => [$lo:literal, $hi:literal] ),* $(,)?
        }
        $( tagged { $( $tag:literal => $tfield:ident : $tty:ty $(= $tdefault:expr)? => [$tlo:literal, $thi:literal] ),* $(,)? } )?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( pub $field: $ty, )*
            $($( pub $tfield: $tty, )*)?
        }

        impl Default for $name {
            #[allow(clippy::redundant_field_names)]
            fn default() -> Self {
                $name {
                    $( $field: $crate::message!(@default $ty $(, $default)?), )*
                    $($( $tfield: $crate::message!(@default $tty $(, $tdefault)?), )*)?
                }
            }
        }

        impl $crate::codec::Decode for $name {
            #[allow(unused_variables, unused_mut)]
            fn decode(r: &mut $crate::codec::Reader, v: $crate::codec::Version) -> $crate::codec::Result<Self> {
                let mut out = Self::default();
                $( if v.within($lo, $hi) {
                    out.$field = <$ty as $crate::codec::Decode>::decode(r, v)?;
                } )*
                if v.flexible {
                    r.tagged_fields(|tag, field| {
                        match tag {
                            $($( $tag if v.within($tlo, $thi) => {
                                out.$tfield = <$tty as $crate::codec::Decode>::decode(field, v)?;
                            } )*)?
                            _ => {}
                        }
                        Ok(())
                    })?;
                }
                Ok(out)
            }
        }

        impl $crate::codec::Encode for $name {
            #[allow(unused_variables, unused_mut)]
            fn encode(&self, out: &mut Vec<u8>, v: $crate::codec::Version) {
                $( if v.within($lo, $hi) {
                    $crate::codec::Encode::encode(&self.$field, out, v);
                } )*
                if v.flexible {
                    let mut tagged: Vec<(u32, Vec<u8>)> = Vec::new();
                    let defaults = Self::default();
                    $($( if v.within($tlo, $thi) && self.$tfield != defaults.$tfield {
                        let mut payload = Vec::new();
                        $crate::codec::Encode::encode(&self.$tfield, &mut payload, v);
                        tagged.push(($tag, payload));
                    } )*)?
                    $crate::codec::put_tagged_fields(out, &tagged);
                }
            }
        }
    };
    (@default $ty:ty) => { <$ty as Default>::default() };
    (@default $ty:ty, $default:expr) => { $default };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::message! {
        pub struct Inner {
            id: i32 => [0, 99],
            name: Option<String> => [1, 99],
        }
    }

    crate::message! {
        pub struct Outer {
            flag: bool = true => [2, 99],
            items: Vec<Inner> => [0, 99],
            level: i64 = -1 => [0, 99],
        }
        tagged {
            0 => note: Option<String> => [3, 99],
        }
    }

    fn round_trip(msg: &Outer, version: i16) -> Outer {
        let v = Version::new(version, 3);
        let mut buf = Vec::new();
        msg.encode(&mut buf, v);
        let mut r = Reader::new(Bytes::from(buf));
        let back = Outer::decode(&mut r, v).expect("decode");
        assert_eq!(r.remaining(), 0);
        back
    }

    #[test]
    fn round_trips_classic_and_flexible() {
        let msg = Outer {
            flag: false,
            items: vec![Inner {
                id: 7,
                name: Some("x".into()),
            }],
            level: 42,
            note: Some("hi".into()),
        };
        assert_eq!(round_trip(&msg, 3), msg);
        let v1 = round_trip(&msg, 1);
        assert!(v1.flag, "flag is absent before v2 and keeps its default");
        assert_eq!(v1.note, None);
        assert_eq!(v1.items, msg.items);
    }

    #[test]
    fn default_tagged_fields_are_left_out() {
        let msg = Outer::default();
        let mut buf = Vec::new();
        msg.encode(&mut buf, Version::new(3, 3));
        // flag(1) + items compact count(1) + level(8) + empty tag section(1)
        assert_eq!(buf.len(), 11);
        assert_eq!(*buf.last().unwrap(), 0);
    }

    #[test]
    fn huge_array_count_is_refused_before_allocating() {
        let mut buf = vec![1u8]; // flag
        buf.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
        let mut r = Reader::new(Bytes::from(buf));
        let err = Outer::decode(&mut r, Version::new(2, 3)).unwrap_err();
        assert!(matches!(err, DecodeError::ArrayTooLong { .. }), "{err:?}");
    }

    /// `count` empty compact strings as a compact array (flexible).
    fn empty_compact_strings(count: usize) -> Vec<u8> {
        let mut buf = Vec::with_capacity(count + 5);
        put_uvarint(&mut buf, count as u32 + 1);
        buf.resize(buf.len() + count, 1);
        buf
    }

    #[test]
    fn elements_that_decode_larger_than_their_bytes_exhaust_the_budget() {
        // 1 wire byte each, 24 bytes each as a String: 24x the frame,
        // over DECODE_EXPANSION_MAX.
        let frame = empty_compact_strings(1_000_000);
        let frame_bytes = frame.len();
        let mut r = Reader::new(Bytes::from(frame));
        let err = Vec::<String>::decode(&mut r, Version::new(2, 2)).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooLarge {
                limit: decode_budget_bytes(frame_bytes),
                frame_bytes
            }
        );
        assert!(decode_budget_bytes(frame_bytes) <= DECODE_EXPANSION_MAX * frame_bytes);
    }

    #[test]
    fn vectors_grow_with_decoded_elements_not_with_their_count() {
        // A count of 1M i32s, announced in 1 MB: only 250k fit, and the
        // vector never held room for more than twice what decoded.
        let count = 1_000_000usize;
        let mut buf = (count as i32).to_be_bytes().to_vec();
        buf.resize(4 + count, 0);
        let mut r = Reader::new(Bytes::from(buf));
        let err = Vec::<i32>::decode(&mut r, Version::new(0, 9)).unwrap_err();
        assert!(matches!(err, DecodeError::Truncated { .. }), "{err:?}");
        let charged = decode_budget_bytes(4 + count) - r.budget_left();
        assert!(
            charged <= 2 * count,
            "charged {charged} bytes for 1 MB of i32s"
        );

        // A real array decodes whole, with a capacity bounded by its length.
        let items: Vec<i32> = (0..100_000).collect();
        let mut buf = Vec::new();
        items.encode(&mut buf, Version::new(0, 9));
        let mut r = Reader::new(Bytes::from(buf));
        let back = Vec::<i32>::decode(&mut r, Version::new(0, 9)).unwrap();
        assert_eq!(back, items);
        assert!(back.capacity() <= 2 * items.len(), "{}", back.capacity());
    }

    #[test]
    fn an_array_that_fits_the_budget_is_not_refused_for_doubling() {
        // 3Mi i32s (12 MiB) with a budget cut down to just over 12 MiB:
        // they fit, though doubling capacity would reach 16 MiB.
        let items = vec![7i32; 3 << 20];
        let mut buf = Vec::new();
        items.encode(&mut buf, Version::new(0, 9));
        let mut r = Reader::new(Bytes::from(buf));
        r.charge(r.budget_left() - (12 << 20) - 1024).unwrap();
        let back = Vec::<i32>::decode(&mut r, Version::new(0, 9)).unwrap();
        assert_eq!(back.len(), items.len());
    }

    #[test]
    fn arrays_of_structs_are_charged_for_their_decoded_size() {
        // At v3 an empty Outer is 11 bytes on the wire and 64 in memory: a
        // frame of 11 MB of them would decode to 64 MB, more than the
        // frame plus DECODE_HEADROOM_BYTES, so it is refused.
        let v = Version::new(3, 3);
        let mut one = Vec::new();
        Outer::default().encode(&mut one, v);
        let count = 1_000_000usize;
        let mut frame = Vec::new();
        put_uvarint(&mut frame, count as u32 + 1);
        for _ in 0..count {
            frame.extend_from_slice(&one);
        }
        let mut r = Reader::new(Bytes::from(frame));
        let err = Vec::<Outer>::decode(&mut r, v).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { .. }), "{err:?}");

        // A few of them, with a nested array each, decode and are charged.
        let msg = Outer {
            items: vec![Inner {
                id: 1,
                name: Some("abc".into()),
            }],
            ..Outer::default()
        };
        let many = vec![msg; 100];
        let mut frame = Vec::new();
        many.encode(&mut frame, v);
        let mut r = Reader::new(Bytes::from(frame));
        let before = r.budget_left();
        assert_eq!(Vec::<Outer>::decode(&mut r, v).unwrap(), many);
        let per_outer = std::mem::size_of::<Outer>() + std::mem::size_of::<Inner>() + 3;
        assert!(before - r.budget_left() >= 100 * per_outer);
    }

    #[test]
    fn tagged_fields_spend_the_frame_budget() {
        let v = Version::new(3, 3);
        let items: Vec<i32> = (0..1000).collect();
        let mut payload = Vec::new();
        items.encode(&mut payload, v);
        let mut frame = Vec::new();
        put_tagged_fields(&mut frame, &[(0, payload)]);
        let frame = Bytes::from(frame);
        let decode_tag =
            |r: &mut Reader| r.tagged_fields(|_, field| Vec::<i32>::decode(field, v).map(drop));

        let mut r = Reader::new(frame.clone());
        let before = r.budget_left();
        decode_tag(&mut r).unwrap();
        assert!(before - r.budget_left() >= 4 * items.len());

        // The tag's reader has no budget of its own: what the frame has
        // left is all it may spend.
        let mut r = Reader::new(frame);
        r.charge(r.budget_left() - 100).unwrap();
        let err = decode_tag(&mut r).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { .. }), "{err:?}");
    }

    #[test]
    fn truncated_input_is_an_error() {
        let mut r = Reader::new(Bytes::from_static(&[0, 0, 0]));
        assert!(matches!(
            Outer::decode(&mut r, Version::new(0, 3)),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn unknown_tagged_fields_are_skipped() {
        let mut buf = vec![1u8, 1]; // flag, empty compact array
        buf.extend_from_slice(&5i64.to_be_bytes());
        put_tagged_fields(&mut buf, &[(9, vec![1, 2, 3])]);
        let mut r = Reader::new(Bytes::from(buf));
        let msg = Outer::decode(&mut r, Version::new(3, 3)).unwrap();
        assert_eq!(msg.level, 5);
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn uuid_base64_matches_kafka_form() {
        assert_eq!(Uuid::ZERO.to_base64(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(Uuid([0xff; 16]).to_base64().len(), 22);
        for id in [Uuid::ZERO, Uuid([0xff; 16]), Uuid(*b"0123456789abcdef")] {
            assert_eq!(Uuid::from_base64(&id.to_base64()), Some(id));
        }
        assert_eq!(
            Uuid::from_base64("AAAAAAAAAAAAAAAAAAAAAB"),
            None,
            "non-canonical tail"
        );
        assert_eq!(Uuid::from_base64("AAAAAAAAAAAAAAAAAAAA+A"), None);
        assert_eq!(Uuid::from_base64("AAAA"), None);
    }
}
