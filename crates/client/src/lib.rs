//! The async Kafka client brokers and controllers use to talk to each
//! other: one connection, requests in Kafka's framing, one in flight at a
//! time. Forwarding to the controller uses it now; follower fetching will.
//!
//! A [`Connection`] sends typed requests ([`Connection::call`]) or a frame
//! it is handed whole ([`Connection::round_trip`], for forwarding a
//! client's request as it came). Every wait is bounded by the timeout the
//! connection was made with; any error leaves the connection unusable, so
//! callers drop it and connect again.
//!
//! [`fetch_session::FetchSessionHandler`] keeps a fetcher's side of a
//! fetch session (KIP-227), so a follower's fetches name only what changed.

pub mod fetch_session;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tarn_protocol::header::{decode_response_header, RequestHeader};
use tarn_protocol::{Decode, DecodeError, Encode, Reader, Version};

/// The largest response read (Kafka's `socket.request.max.bytes` default).
pub const RESPONSE_MAX_BYTES: usize = 100 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{peer}: {source}")]
    Io {
        peer: String,
        source: std::io::Error,
    },
    #[error("{peer}: no answer within {timeout:?}")]
    Timeout { peer: String, timeout: Duration },
    #[error("{peer}: malformed response: {source}")]
    Decode { peer: String, source: DecodeError },
    #[error("{peer}: {message}")]
    Protocol { peer: String, message: String },
}

pub struct Connection {
    stream: TcpStream,
    peer: String,
    client_id: String,
    correlation_id: i32,
    timeout: Duration,
}

impl Connection {
    /// Connects to `peer` (host:port); `timeout` bounds the connect and
    /// every later request.
    pub async fn connect(
        peer: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Connection, ClientError> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(peer)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => {
                return Err(ClientError::Io {
                    peer: peer.to_owned(),
                    source,
                })
            }
            Err(_) => {
                return Err(ClientError::Timeout {
                    peer: peer.to_owned(),
                    timeout,
                })
            }
        };
        stream.set_nodelay(true).map_err(|source| ClientError::Io {
            peer: peer.to_owned(),
            source,
        })?;
        Ok(Connection {
            stream,
            peer: peer.to_owned(),
            client_id: client_id.to_owned(),
            correlation_id: 0,
            timeout,
        })
    }

    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Sends `request` as `api_key` at version `v` and decodes the answer.
    pub async fn call<Req: Encode, Resp: Decode>(
        &mut self,
        api_key: i16,
        v: Version,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader {
            api_key,
            api_version: v.version,
            correlation_id: self.correlation_id,
            client_id: Some(self.client_id.clone()),
        };
        let mut frame = vec![0u8; 4];
        header.encode(&mut frame, v.flexible);
        request.encode(&mut frame, v);
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        let response = self.round_trip(&frame).await?;
        let mut r = Reader::new(response);
        let peer = || self.peer.clone();
        let correlation_id =
            decode_response_header(&mut r, api_key, v.flexible).map_err(|source| {
                ClientError::Decode {
                    peer: peer(),
                    source,
                }
            })?;
        if correlation_id != self.correlation_id {
            return Err(ClientError::Protocol {
                peer: peer(),
                message: format!(
                    "response to request {correlation_id}, expected {}",
                    self.correlation_id
                ),
            });
        }
        Resp::decode(&mut r, v).map_err(|source| ClientError::Decode {
            peer: peer(),
            source,
        })
    }

    /// Writes `frame` (size prefix included) and returns the response
    /// frame that follows, without its size prefix.
    pub async fn round_trip(&mut self, frame: &[u8]) -> Result<Bytes, ClientError> {
        self.round_trip_within(frame, self.timeout).await
    }

    /// [`Connection::round_trip`] with a timeout of its own, for a request
    /// the other side may hold longer than most.
    pub async fn round_trip_within(
        &mut self,
        frame: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        match tokio::time::timeout(timeout, self.exchange(frame)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout {
                peer: self.peer.clone(),
                timeout,
            }),
        }
    }

    async fn exchange(&mut self, frame: &[u8]) -> Result<Bytes, ClientError> {
        let io = |source| ClientError::Io {
            peer: self.peer.clone(),
            source,
        };
        self.stream.write_all(frame).await.map_err(io)?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).await.map_err(io)?;
        let size = i32::from_be_bytes(size);
        if size < 4 || size as usize > RESPONSE_MAX_BYTES {
            return Err(ClientError::Protocol {
                peer: self.peer.clone(),
                message: format!("response of invalid size {size}"),
            });
        }
        // Read into the buffer's spare capacity: a follower's fetch
        // response runs to megabytes, and zeroing it first costs about as
        // much as the copy from the socket.
        let size = size as usize;
        let mut response = BytesMut::with_capacity(size);
        while response.len() < size {
            let rest = (size - response.len()) as u64;
            let read = (&mut self.stream)
                .take(rest)
                .read_buf(&mut response)
                .await
                .map_err(io)?;
            if read == 0 {
                return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
        Ok(response.freeze())
    }
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::api_versions::{ApiVersionsRequest, ApiVersionsResponse};
    use tokio::net::TcpListener;

    use super::*;

    /// A peer that answers one ApiVersions request with an empty list.
    async fn answer_once(listener: TcpListener) {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await.unwrap();
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut frame).await.unwrap();
        let correlation_id = i32::from_be_bytes(frame[4..8].try_into().unwrap());
        let v = Version::new(0, 3);
        let mut out = tarn_protocol::header::begin_response(correlation_id, 18, false);
        ApiVersionsResponse::default().encode(&mut out, v);
        let response = tarn_protocol::header::finish_frame(out);
        stream.write_all(&response).await.unwrap();
    }

    #[tokio::test]
    async fn a_call_round_trips_and_a_silent_peer_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = tokio::spawn(answer_once(listener));
        let mut connection = Connection::connect(&addr, "test", Duration::from_secs(5))
            .await
            .unwrap();
        let response: ApiVersionsResponse = connection
            .call(18, Version::new(0, 3), &ApiVersionsRequest::default())
            .await
            .unwrap();
        assert_eq!(response.error_code, 0);
        peer.await.unwrap();

        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let mut connection = Connection::connect(&addr, "test", Duration::from_millis(50))
            .await
            .unwrap();
        let result: Result<ApiVersionsResponse, _> = connection
            .call(18, Version::new(0, 3), &ApiVersionsRequest::default())
            .await;
        assert!(matches!(result, Err(ClientError::Timeout { .. })));
        drop(silent);
    }
}
