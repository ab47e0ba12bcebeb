//! A minimal blocking Kafka client for the CLI: one connection, one
//! request at a time, at fixed API versions this broker serves.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;

use tarn_protocol::header::{decode_response_header, RequestHeader};
use tarn_protocol::{Decode, Encode, Reader, Version};

/// The largest response the CLI will read.
const RESPONSE_MAX_BYTES: usize = 256 << 20;

pub struct Client {
    stream: TcpStream,
    bootstrap: String,
    correlation_id: i32,
}

impl Client {
    pub fn connect(bootstrap: &str) -> Result<Self> {
        let stream = TcpStream::connect(bootstrap)
            .with_context(|| format!("connect to bootstrap server {bootstrap}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            bootstrap: bootstrap.to_owned(),
            correlation_id: 0,
        })
    }

    /// Sends `request` as `api_key` at `version` and reads the response.
    pub fn call<Req: Encode, Resp: Decode>(
        &mut self,
        api_key: i16,
        version: i16,
        flexible_min: i16,
        request: &Req,
    ) -> Result<Resp> {
        let v = Version::new(version, flexible_min);
        let mut r = self.send(api_key, v, request)?;
        Ok(Resp::decode(&mut r, v)?)
    }

    /// Sends `request` and returns the response body after its header, for
    /// callers that read it at a version other than the request's (the
    /// ApiVersions fallback) or not at all.
    pub fn send<Req: Encode>(&mut self, api_key: i16, v: Version, request: &Req) -> Result<Reader> {
        self.correlation_id += 1;
        let version = v.version;
        let header = RequestHeader {
            api_key,
            api_version: version,
            correlation_id: self.correlation_id,
            client_id: Some("tarn-cli".into()),
        };
        let mut frame = vec![0u8; 4];
        header.encode(&mut frame, v.flexible);
        request.encode(&mut frame, v);
        let len = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        self.stream
            .write_all(&frame)
            .with_context(|| format!("send request to {}", self.bootstrap))?;

        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .with_context(|| format!("read response from {}", self.bootstrap))?;
        let len = i32::from_be_bytes(len);
        if len < 4 || len as usize > RESPONSE_MAX_BYTES {
            bail!(
                "broker {} sent a response of invalid size {len}",
                self.bootstrap
            );
        }
        let mut body = vec![0u8; len as usize];
        self.stream
            .read_exact(&mut body)
            .with_context(|| format!("read response from {}", self.bootstrap))?;
        let mut r = Reader::new(Bytes::from(body));
        let correlation_id = decode_response_header(&mut r, api_key, v.flexible)?;
        if correlation_id != self.correlation_id {
            bail!(
                "response correlation id {correlation_id} does not match request {}",
                self.correlation_id
            );
        }
        Ok(r)
    }
}
