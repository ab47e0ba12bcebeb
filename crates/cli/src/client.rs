//! A minimal blocking Kafka client for the CLI: one connection, one
//! request at a time, at fixed API versions this broker serves. The
//! framing helpers ([`encode_request`], [`read_frame`]) are shared with the
//! perf producer, which pipelines requests on a split connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;

use tarn_protocol::header::{decode_response_header, RequestHeader};
use tarn_protocol::{Decode, Encode, Reader, Version};

/// The largest response the CLI will read.
pub const RESPONSE_MAX_BYTES: usize = 256 << 20;
/// How long the CLI waits for any one response.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Client {
    stream: TcpStream,
    bootstrap: String,
    client_id: String,
    correlation_id: i32,
}

/// One request frame: the size prefix, the request header and the body.
pub fn encode_request<Req: Encode>(
    api_key: i16,
    v: Version,
    correlation_id: i32,
    client_id: &str,
    request: &Req,
) -> Vec<u8> {
    let header = RequestHeader {
        api_key,
        api_version: v.version,
        correlation_id,
        client_id: Some(client_id.to_owned()),
    };
    let mut frame = vec![0u8; 4];
    header.encode(&mut frame, v.flexible);
    request.encode(&mut frame, v);
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    frame
}

/// Reads one size-prefixed response frame from `peer`, refusing sizes
/// above [`RESPONSE_MAX_BYTES`].
pub fn read_frame(stream: &mut impl Read, peer: &str) -> Result<Reader> {
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .with_context(|| format!("read response from {peer}"))?;
    let len = i32::from_be_bytes(len);
    if len < 4 || len as usize > RESPONSE_MAX_BYTES {
        bail!("broker {peer} sent a response of invalid size {len}");
    }
    let mut body = vec![0u8; len as usize];
    stream
        .read_exact(&mut body)
        .with_context(|| format!("read response from {peer}"))?;
    Ok(Reader::new(Bytes::from(body)))
}

impl Client {
    pub fn connect(bootstrap: &str) -> Result<Self> {
        let stream = TcpStream::connect(bootstrap)
            .with_context(|| format!("connect to bootstrap server {bootstrap}"))?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            bootstrap: bootstrap.to_owned(),
            client_id: "tarn-cli".into(),
            correlation_id: 0,
        })
    }

    /// Sends `client_id` in every request header from now on.
    pub fn with_client_id(mut self, client_id: &str) -> Self {
        client_id.clone_into(&mut self.client_id);
        self
    }

    /// Waits up to `timeout` for each response from now on (a JoinGroup
    /// answer waits for a whole rebalance).
    pub fn set_read_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.stream
            .set_read_timeout(Some(timeout))
            .with_context(|| format!("set the read timeout of {}", self.bootstrap))
    }

    /// Sends `request` as `api_key` at `version` and reads the response.
    pub fn call<Req: Encode, Resp: Decode>(
        &mut self,
        api_key: i16,
        version: i16,
        flexible_min: i16,
        request: &Req,
    ) -> Result<Resp> {
        self.send_only(api_key, Version::new(version, flexible_min), request)?;
        self.receive(api_key, version, flexible_min)
    }

    /// Sends `request` and returns the response body after its header, for
    /// callers that read it at a version other than the request's (the
    /// ApiVersions fallback) or not at all.
    pub fn send<Req: Encode>(&mut self, api_key: i16, v: Version, request: &Req) -> Result<Reader> {
        self.send_only(api_key, v, request)?;
        self.read_response(api_key, v)
    }

    /// Reads the response to the request [`Client::send_only`] sent last,
    /// for a request whose answer waits on something else (a JoinGroup
    /// answered once its rebalance completes).
    pub fn receive<Resp: Decode>(
        &mut self,
        api_key: i16,
        version: i16,
        flexible_min: i16,
    ) -> Result<Resp> {
        let v = Version::new(version, flexible_min);
        let mut r = self.read_response(api_key, v)?;
        Ok(Resp::decode(&mut r, v)?)
    }

    /// The address this client connected to.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    fn read_response(&mut self, api_key: i16, v: Version) -> Result<Reader> {
        let mut r = read_frame(&mut self.stream, &self.bootstrap)?;
        let correlation_id = decode_response_header(&mut r, api_key, v.flexible)?;
        if correlation_id != self.correlation_id {
            bail!(
                "response correlation id {correlation_id} does not match request {}",
                self.correlation_id
            );
        }
        Ok(r)
    }

    /// Sends `request` without reading a response: for the one request the
    /// broker does not answer, a produce with acks=0.
    pub fn send_only<Req: Encode>(
        &mut self,
        api_key: i16,
        v: Version,
        request: &Req,
    ) -> Result<()> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let frame = encode_request(api_key, v, self.correlation_id, &self.client_id, request);
        self.stream
            .write_all(&frame)
            .with_context(|| format!("send request to {}", self.bootstrap))
    }
}
