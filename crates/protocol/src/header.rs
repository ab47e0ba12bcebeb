//! Request and response headers, and the frame around them.
//!
//! A request header's version follows from its API version: v2 (with a
//! tagged-field section) for flexible versions, v1 otherwise. The client
//! id is always a classic nullable string. A response header carries the
//! correlation id and, for flexible versions, an empty tag section —
//! except ApiVersions, whose response header is always v0 so that a
//! client that does not know our versions can still read it.

use bytes::Bytes;

use crate::codec::{put_tagged_fields, DecodeError, Reader, Version};
use crate::codec::{Decode, Nullable};

pub const API_VERSIONS_KEY: i16 = 18;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

/// The fixed part of every request header: enough to route the request
/// and to answer it, even when the body is unreadable.
pub fn peek_header(frame: &[u8]) -> Result<(i16, i16, i32), DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::Truncated {
            needed: 8,
            remaining: frame.len(),
        });
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    Ok((api_key, api_version, correlation_id))
}

impl RequestHeader {
    /// Reads the header from the start of `r`; `flexible` says whether
    /// the request body's version is flexible (header v2).
    pub fn decode(r: &mut Reader, flexible: bool) -> Result<Self, DecodeError> {
        let api_key = r.i16()?;
        let api_version = r.i16()?;
        let correlation_id = r.i32()?;
        let classic = Version {
            version: 1,
            flexible: false,
        };
        let client_id = String::decode_nullable(r, classic)?;
        if flexible {
            r.tagged_fields(|_, _| Ok(()))?;
        }
        Ok(RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
        })
    }

    /// Encodes a request header (used by the CLI client and tests).
    pub fn encode(&self, out: &mut Vec<u8>, flexible: bool) {
        use crate::codec::Encode;
        self.api_key.encode(out, Version::new(0, 0));
        self.api_version.encode(out, Version::new(0, 0));
        self.correlation_id.encode(out, Version::new(0, 0));
        self.client_id.encode(
            out,
            Version {
                version: 1,
                flexible: false,
            },
        );
        if flexible {
            put_tagged_fields(out, &[]);
        }
    }
}

/// Starts a response frame: a 4-byte length placeholder (filled in by
/// `finish_frame`) and the response header.
pub fn begin_response(correlation_id: i32, api_key: i16, flexible: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&correlation_id.to_be_bytes());
    if flexible && api_key != API_VERSIONS_KEY {
        put_tagged_fields(&mut out, &[]);
    }
    out
}

/// Writes the frame length into the placeholder of `begin_response`.
pub fn finish_frame(mut frame: Vec<u8>) -> Bytes {
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Bytes::from(frame)
}

/// Reads a response header (used by the CLI client and tests).
pub fn decode_response_header(
    r: &mut Reader,
    api_key: i16,
    flexible: bool,
) -> Result<i32, DecodeError> {
    let correlation_id = i32::decode(r, Version::new(0, 0))?;
    if flexible && api_key != API_VERSIONS_KEY {
        r.tagged_fields(|_, _| Ok(()))?;
    }
    Ok(correlation_id)
}
