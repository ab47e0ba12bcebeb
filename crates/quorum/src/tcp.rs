//! The quorum's RPCs over TCP in Kafka's framing, so a CONTROLLER listener
//! can serve them next to Kafka requests.
//!
//! Request: `size: i32 | api_key: i16 | api_version: i16 |
//! correlation_id: i32 | client_id: nullable string (i16 length, -1 for
//! null) | body`, with the private api keys of [`RpcKind`] (see
//! [`crate::is_quorum_api_key`]). Response: `size: i32 |
//! correlation_id: i32 | error_code: i16 | body`, where a non-zero error
//! code carries a UTF-8 message as its body. Bodies are JSON; from api
//! version 1 a request's body starts with `to: i32`, the node it is meant
//! for, and `cluster_id: nullable string` (i16 length, -1 while the sender
//! does not know it yet), which the receiver checks as Kafka checks its
//! quorum RPCs' ClusterId and voter key: an RPC that reaches another node
//! or another cluster, through a voter address that names the wrong node or
//! a port another cluster's node took over, is refused instead of being
//! taken for this node's own.
//!
//! A client keeps one connection per peer and RPC kind (so a snapshot
//! does not hold up heartbeats), one request in flight on each, and
//! reconnects after any error.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::network::{RpcKind, Transport, TransportError};
use crate::{NodeId, Quorum, QuorumError};

/// The largest frame read (Kafka's `socket.request.max.bytes` default);
/// snapshots must fit in one.
pub const FRAME_BYTES_MAX: usize = 100 << 20;
/// Most quorum connections one listener serves at once.
pub const CONNECTIONS_MAX: usize = 64;
/// The api version every quorum RPC is sent with: 1 names the node it is
/// for; 0 (without) is still answered.
pub const QUORUM_API_VERSION: i16 = 1;
pub const ERROR_NONE: i16 = 0;
pub const ERROR_FAILED: i16 = -1;
/// Kafka's INCONSISTENT_CLUSTER_ID: the sender belongs to another cluster.
pub const ERROR_INCONSISTENT_CLUSTER_ID: i16 = 104;

/// The request header of a Kafka-framed request (v1: nullable client id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Encodes one request frame, size prefix included.
pub fn encode_request(header: &RequestHeader, body: &[u8]) -> Bytes {
    let client_id = header.client_id.as_deref();
    let client_len = client_id.map_or(0, str::len);
    let mut frame = BytesMut::with_capacity(4 + 10 + client_len + body.len());
    frame.put_i32(0);
    frame.put_i16(header.api_key);
    frame.put_i16(header.api_version);
    frame.put_i32(header.correlation_id);
    match client_id {
        Some(id) => {
            frame.put_i16(id.len() as i16);
            frame.put_slice(id.as_bytes());
        }
        None => frame.put_i16(-1),
    }
    frame.put_slice(body);
    let size = (frame.len() - 4) as i32;
    frame[0..4].copy_from_slice(&size.to_be_bytes());
    frame.freeze()
}

/// Splits a request frame (without its size prefix) into header and body.
pub fn decode_request(frame: &[u8]) -> io::Result<(RequestHeader, &[u8])> {
    if frame.len() < 10 {
        return Err(invalid("request shorter than its header"));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes(frame[4..8].try_into().expect("4 bytes"));
    let client_len = i16::from_be_bytes([frame[8], frame[9]]);
    let (client_id, rest) = match client_len {
        -1 => (None, &frame[10..]),
        n if n >= 0 && frame.len() >= 10 + n as usize => {
            let id = std::str::from_utf8(&frame[10..10 + n as usize])
                .map_err(|_| invalid("client id is not UTF-8"))?;
            (Some(id.to_string()), &frame[10 + n as usize..])
        }
        _ => return Err(invalid("bad client id length")),
    };
    let header = RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id,
    };
    Ok((header, rest))
}

/// Reads one size-prefixed frame; `None` at a clean end of stream.
pub async fn read_frame(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > FRAME_BYTES_MAX {
        return Err(invalid(format!(
            "frame of {size} bytes (limit {FRAME_BYTES_MAX})"
        )));
    }
    let mut frame = vec![0; size as usize];
    stream.read_exact(&mut frame).await?;
    Ok(Some(frame))
}

/// A response frame: size, correlation id, error code (0, or -1 with a
/// UTF-8 message as the body), body.
pub fn encode_response(correlation_id: i32, error_code: i16, body: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(10 + body.len());
    frame.put_i32((6 + body.len()) as i32);
    frame.put_i32(correlation_id);
    frame.put_i16(error_code);
    frame.put_slice(body);
    frame.freeze()
}

/// The id of the cluster a node belongs to, once it is known (formatted,
/// or agreed by the quorum and adopted): shared by the node's transport,
/// which sends it with every RPC, and its listener, which checks it.
#[derive(Debug, Clone, Default)]
pub struct ClusterId(Arc<Mutex<Option<String>>>);

impl ClusterId {
    pub fn new(known: Option<String>) -> ClusterId {
        ClusterId(Arc::new(Mutex::new(known)))
    }

    pub fn set(&self, cluster_id: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(cluster_id.to_owned());
    }

    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A version 1 request body: the node and cluster it is meant for, then
/// the RPC's JSON.
fn encode_addressed(to: i32, cluster_id: Option<&str>, rpc: &[u8]) -> Bytes {
    let mut body = BytesMut::with_capacity(6 + cluster_id.map_or(0, str::len) + rpc.len());
    body.put_i32(to);
    match cluster_id {
        Some(id) => {
            body.put_i16(id.len() as i16);
            body.put_slice(id.as_bytes());
        }
        None => body.put_i16(-1),
    }
    body.put_slice(rpc);
    body.freeze()
}

/// Splits a version 1 request body into its addressee, cluster id and
/// RPC.
fn decode_addressed(body: &[u8]) -> Result<(i32, Option<&str>, &[u8]), QuorumError> {
    let short = || QuorumError::Rpc("request shorter than its address".into());
    let to = body.get(..4).ok_or_else(short)?;
    let to = i32::from_be_bytes(to.try_into().expect("4 bytes"));
    let len = body.get(4..6).ok_or_else(short)?;
    let len = i16::from_be_bytes(len.try_into().expect("2 bytes"));
    if len < 0 {
        return Ok((to, None, &body[6..]));
    }
    let end = 6 + len as usize;
    let id = std::str::from_utf8(body.get(6..end).ok_or_else(short)?)
        .map_err(|_| QuorumError::Rpc("cluster id is not UTF-8".into()))?;
    Ok((to, Some(id), &body[end..]))
}

/// The answer frame to one quorum RPC (`header`, `body`) sent to this
/// node, a member of `cluster`: refused when it names another node,
/// another cluster, or a version this node does not speak.
pub async fn answer(
    quorum: &Quorum,
    cluster: &ClusterId,
    header: &RequestHeader,
    kind: RpcKind,
    body: &[u8],
) -> Bytes {
    let result = match header.api_version {
        0 => quorum.handle_rpc(kind, body).await,
        1 => match decode_addressed(body) {
            Ok((to, theirs, rpc)) => {
                let this = quorum.node_id();
                let ours = cluster.get();
                if u64::try_from(to).ok() != Some(this) {
                    Err(QuorumError::Misdirected {
                        to: u64::try_from(to).unwrap_or(u64::MAX),
                        this,
                    })
                } else if let Some((theirs, ours)) =
                    theirs.zip(ours.as_deref()).filter(|(t, o)| t != o)
                {
                    Err(QuorumError::InconsistentClusterId {
                        theirs: theirs.to_owned(),
                        ours: ours.to_owned(),
                    })
                } else {
                    quorum.handle_rpc(kind, rpc).await
                }
            }
            Err(e) => Err(e),
        },
        v => Err(QuorumError::Rpc(format!(
            "unsupported quorum api version {v} (this node speaks 0 and 1)"
        ))),
    };
    let code = match &result {
        Ok(_) => ERROR_NONE,
        Err(QuorumError::InconsistentClusterId { .. }) => ERROR_INCONSISTENT_CLUSTER_ID,
        Err(_) => ERROR_FAILED,
    };
    match result {
        Ok(reply) => encode_response(header.correlation_id, code, &reply),
        Err(e) => encode_response(header.correlation_id, code, e.to_string().as_bytes()),
    }
}

/// Serves quorum RPCs on `listener` until `quorum` stops; connections
/// beyond [`CONNECTIONS_MAX`] wait for a free slot.
pub async fn serve(listener: TcpListener, quorum: Quorum, cluster: ClusterId) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut status = quorum.status();
    loop {
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| io::Error::other("connection slots closed"))?;
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = status.wait_for(|s| !s.running) => return Ok(()),
        };
        let quorum = quorum.clone();
        let cluster = cluster.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, &quorum, &cluster).await {
                tracing::debug!(%peer, error = %e, "quorum connection closed");
            }
            drop(permit);
        });
    }
}

/// Serves one connection: one request at a time, answered in order.
pub async fn serve_connection(
    mut stream: TcpStream,
    quorum: &Quorum,
    cluster: &ClusterId,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut status = quorum.status();
    loop {
        let frame = tokio::select! {
            frame = read_frame(&mut stream) => frame?,
            _ = status.wait_for(|s| !s.running) => return Ok(()),
        };
        let Some(frame) = frame else {
            return Ok(());
        };
        let (header, body) = decode_request(&frame)?;
        let Some(kind) = RpcKind::from_api_key(header.api_key) else {
            return Err(invalid(format!(
                "api key {} is not a quorum RPC",
                header.api_key
            )));
        };
        let response = answer(quorum, cluster, &header, kind, body).await;
        stream.write_all(&response).await?;
    }
}

type Connection = Arc<tokio::sync::Mutex<Option<TcpStream>>>;

/// A [`Transport`] to the peers' controller listeners.
pub struct TcpTransport {
    from: NodeId,
    /// Each peer's controller listener: the configured voters, then what
    /// the membership in the log says (see [`Transport::learn`]).
    addresses: std::sync::RwLock<BTreeMap<NodeId, String>>,
    cluster: ClusterId,
    /// The peers whose last answer refused this node as one of another
    /// cluster, with what they said.
    refusals: Arc<watch::Sender<BTreeMap<NodeId, String>>>,
    connections: Mutex<HashMap<(NodeId, RpcKind), Connection>>,
    correlation_id: AtomicI32,
}

impl TcpTransport {
    /// `voters`: id -> host:port of each controller listener; `cluster`:
    /// the id sent with each RPC, once known.
    pub fn new(
        from: NodeId,
        voters: BTreeMap<NodeId, String>,
        cluster: ClusterId,
    ) -> Arc<TcpTransport> {
        Arc::new(TcpTransport {
            from,
            addresses: std::sync::RwLock::new(voters),
            cluster,
            refusals: Arc::new(watch::channel(BTreeMap::new()).0),
            connections: Mutex::new(HashMap::new()),
            correlation_id: AtomicI32::new(0),
        })
    }

    /// The peers that refuse this node as one of another cluster (their
    /// last answer said INCONSISTENT_CLUSTER_ID), with their messages.
    pub fn refusals(&self) -> watch::Receiver<BTreeMap<NodeId, String>> {
        self.refusals.subscribe()
    }

    fn connection(&self, target: NodeId, kind: RpcKind) -> Result<Connection, TransportError> {
        let mut connections = self
            .connections
            .lock()
            .map_err(|_| TransportError::Unreachable(target, "connection table poisoned".into()))?;
        Ok(connections.entry((target, kind)).or_default().clone())
    }
}

async fn exchange(
    slot: &mut Option<TcpStream>,
    addr: &str,
    request: &[u8],
    correlation_id: i32,
) -> io::Result<Result<Bytes, (i16, String)>> {
    if slot.is_none() {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        *slot = Some(stream);
    }
    let stream = slot.as_mut().expect("connected above");
    stream.write_all(request).await?;
    let frame = read_frame(stream)
        .await?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed"))?;
    if frame.len() < 6 {
        return Err(invalid("response shorter than its header"));
    }
    let got = i32::from_be_bytes(frame[0..4].try_into().expect("4 bytes"));
    if got != correlation_id {
        return Err(invalid(format!(
            "response for correlation id {got}, expected {correlation_id}"
        )));
    }
    let error_code = i16::from_be_bytes([frame[4], frame[5]]);
    let body = Bytes::copy_from_slice(&frame[6..]);
    if error_code == ERROR_NONE {
        Ok(Ok(body))
    } else {
        Ok(Err((
            error_code,
            String::from_utf8_lossy(&body).into_owned(),
        )))
    }
}

impl Transport for TcpTransport {
    fn call(
        &self,
        target: NodeId,
        kind: RpcKind,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, TransportError>> {
        let addr = match self.addresses.read() {
            Ok(addresses) => addresses.get(&target).cloned(),
            Err(_) => None,
        };
        let connection = self.connection(target, kind);
        let cluster_id = self.cluster.get();
        let refusals = self.refusals.clone();
        let correlation_id = self.correlation_id.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader {
            api_key: kind.api_key(),
            api_version: QUORUM_API_VERSION,
            correlation_id,
            client_id: Some(format!("quorum-{}", self.from)),
        };
        Box::pin(async move {
            let addr = addr.ok_or_else(|| {
                TransportError::Unreachable(target, "no known address (not a member)".into())
            })?;
            let connection = connection?;
            let to = i32::try_from(target).map_err(|_| {
                TransportError::Unreachable(target, "node id beyond a Kafka int32".into())
            })?;
            let addressed = encode_addressed(to, cluster_id.as_deref(), &body);
            let request = encode_request(&header, &addressed);
            let mut slot = connection.lock().await;
            // Out of the slot while in use: a call given up on (a timeout
            // drops this future) drops the stream with it, so the reply it
            // did not read cannot be taken for the next call's.
            let mut stream = slot.take();
            let answered = exchange(&mut stream, &addr, &request, correlation_id).await;
            if let Ok(answer) = &answered {
                let refused = match answer {
                    Err((ERROR_INCONSISTENT_CLUSTER_ID, message)) => Some(message),
                    _ => None,
                };
                refusals.send_if_modified(|by| match refused {
                    Some(message) => by.insert(target, message.clone()).is_none(),
                    None => by.remove(&target).is_some(),
                });
            }
            match answered {
                Ok(Ok(reply)) => {
                    *slot = stream;
                    Ok(reply)
                }
                Ok(Err((_, message))) => {
                    *slot = stream;
                    Err(TransportError::Remote(target, message))
                }
                // The stream may hold half a frame: start afresh.
                Err(e) => Err(TransportError::Unreachable(target, format!("{addr}: {e}"))),
            }
        })
    }

    fn learn(&self, target: NodeId, address: &str) {
        let Ok(mut addresses) = self.addresses.write() else {
            return;
        };
        if addresses.get(&target).map(String::as_str) != Some(address) {
            tracing::debug!(node = target, address, "quorum peer address");
            addresses.insert(target, address.to_owned());
            // A connection to the old address must not be reused.
            if let Ok(mut connections) = self.connections.lock() {
                connections.retain(|(node, _), _| *node != target);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_frame_has_kafka_s_header_layout() {
        let header = RequestHeader {
            api_key: RpcKind::Vote.api_key(),
            api_version: 0,
            correlation_id: 7,
            client_id: Some("q".into()),
        };
        let frame = encode_request(&header, b"{}");
        assert_eq!(
            &frame[..],
            &[0, 0, 0, 13, 0x27, 0x11, 0, 0, 0, 0, 0, 7, 0, 1, b'q', b'{', b'}'][..]
        );
        let (decoded, body) = decode_request(&frame[4..]).unwrap();
        assert_eq!(decoded, header);
        assert_eq!(body, b"{}");
        assert!(crate::is_quorum_api_key(decoded.api_key));
        assert!(!crate::is_quorum_api_key(0), "Produce is Kafka's");
    }

    #[test]
    fn a_truncated_header_is_an_error_not_a_panic() {
        assert!(decode_request(&[0; 9]).is_err());
        assert!(decode_request(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 5, b'a']).is_err());
    }
}
