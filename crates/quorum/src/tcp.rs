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
//! taken for this node's own. Version 2, sent to a member whose directory
//! id the membership records (a dynamic quorum's, KIP-853), then has
//! `to_directory: nullable string`: a node with another directory id (one
//! formatted again after its directory was lost) is not that voter, and
//! refuses, so it cannot vote or acknowledge with a log it no longer has.
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
/// The api version quorum RPCs are sent with: 1 names the node it is
/// for; 0 (without) is still answered. [`DIRECTORY_API_VERSION`] when the
/// node's directory id is known.
pub const QUORUM_API_VERSION: i16 = 1;
/// The api version that also names the directory id of the node an RPC is
/// for.
pub const DIRECTORY_API_VERSION: i16 = 2;
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

/// Whom a request is for: the node, its cluster and (version 2) its
/// directory id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Address<'a> {
    to: i32,
    cluster_id: Option<&'a str>,
    directory_id: Option<&'a str>,
}

fn put_nullable(body: &mut BytesMut, text: Option<&str>) {
    match text {
        Some(text) => {
            body.put_i16(text.len() as i16);
            body.put_slice(text.as_bytes());
        }
        None => body.put_i16(-1),
    }
}

/// A request body of `version` (1 or 2): its address, then the RPC's
/// JSON.
fn encode_addressed(version: i16, address: &Address<'_>, rpc: &[u8]) -> Bytes {
    let texts = address.cluster_id.map_or(0, str::len) + address.directory_id.map_or(0, str::len);
    let mut body = BytesMut::with_capacity(8 + texts + rpc.len());
    body.put_i32(address.to);
    put_nullable(&mut body, address.cluster_id);
    if version >= DIRECTORY_API_VERSION {
        put_nullable(&mut body, address.directory_id);
    }
    body.put_slice(rpc);
    body.freeze()
}

/// Reads a nullable string at the front of `body`; returns it and the
/// rest.
fn take_nullable<'a>(
    body: &'a [u8],
    what: &str,
) -> Result<(Option<&'a str>, &'a [u8]), QuorumError> {
    let short = || QuorumError::Rpc("request shorter than its address".into());
    let len = body.get(..2).ok_or_else(short)?;
    let len = i16::from_be_bytes(len.try_into().expect("2 bytes"));
    if len < 0 {
        return Ok((None, &body[2..]));
    }
    let end = 2 + len as usize;
    let text = std::str::from_utf8(body.get(2..end).ok_or_else(short)?)
        .map_err(|_| QuorumError::Rpc(format!("{what} is not UTF-8")))?;
    Ok((Some(text), &body[end..]))
}

/// Splits a version 1 or 2 request body into its address and RPC.
fn decode_addressed(version: i16, body: &[u8]) -> Result<(Address<'_>, &[u8]), QuorumError> {
    let to = body
        .get(..4)
        .ok_or_else(|| QuorumError::Rpc("request shorter than its address".into()))?;
    let to = i32::from_be_bytes(to.try_into().expect("4 bytes"));
    let (cluster_id, rest) = take_nullable(&body[4..], "cluster id")?;
    let (directory_id, rest) = match version >= DIRECTORY_API_VERSION {
        true => take_nullable(rest, "directory id")?,
        false => (None, rest),
    };
    let address = Address {
        to,
        cluster_id,
        directory_id,
    };
    Ok((address, rest))
}

/// Why this node refuses an RPC sent to `address`, if it does: meant for
/// another node, a node of another cluster, or this node id with another
/// directory.
fn misaddressed(
    quorum: &Quorum,
    cluster: &ClusterId,
    address: &Address<'_>,
) -> Option<QuorumError> {
    let this = quorum.node_id();
    let to = u64::try_from(address.to).unwrap_or(u64::MAX);
    if to != this {
        return Some(QuorumError::Misdirected { to, this });
    }
    let ours = cluster.get();
    if let Some((theirs, ours)) = address
        .cluster_id
        .zip(ours.as_deref())
        .filter(|(t, o)| t != o)
    {
        return Some(QuorumError::InconsistentClusterId {
            theirs: theirs.to_owned(),
            ours: ours.to_owned(),
        });
    }
    if let Some((theirs, ours)) = address
        .directory_id
        .zip(quorum.directory_id())
        .filter(|(t, o)| t != o)
    {
        return Some(QuorumError::OtherDirectory {
            to,
            theirs: theirs.to_owned(),
            ours: ours.to_owned(),
        });
    }
    None
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
        v @ (QUORUM_API_VERSION | DIRECTORY_API_VERSION) => match decode_addressed(v, body) {
            Ok((address, rpc)) => match misaddressed(quorum, cluster, &address) {
                Some(refusal) => Err(refusal),
                None => quorum.handle_rpc(kind, rpc).await,
            },
            Err(e) => Err(e),
        },
        v => Err(QuorumError::Rpc(format!(
            "unsupported quorum api version {v} (this node speaks 0 to 2)"
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
    /// Each peer's directory id, where the membership records one.
    directories: std::sync::RwLock<BTreeMap<NodeId, String>>,
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
            directories: std::sync::RwLock::new(BTreeMap::new()),
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

/// Whether a call failed because the peer had closed the connection (or
/// was gone) rather than because of what it answered.
fn closed_by_peer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
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
        let directory_id = match self.directories.read() {
            Ok(directories) => directories.get(&target).cloned(),
            Err(_) => None,
        };
        let connection = self.connection(target, kind);
        let cluster_id = self.cluster.get();
        let refusals = self.refusals.clone();
        let correlation_id = self.correlation_id.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader {
            api_key: kind.api_key(),
            // Version 1 where no directory is known, which builds before
            // version 2 answer too.
            api_version: match directory_id {
                Some(_) => DIRECTORY_API_VERSION,
                None => QUORUM_API_VERSION,
            },
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
            let address = Address {
                to,
                cluster_id: cluster_id.as_deref(),
                directory_id: directory_id.as_deref(),
            };
            let addressed = encode_addressed(header.api_version, &address, &body);
            let request = encode_request(&header, &addressed);
            let mut slot = connection.lock().await;
            // Out of the slot while in use: a call given up on (a timeout
            // drops this future) drops the stream with it, so the reply it
            // did not read cannot be taken for the next call's.
            let mut stream = slot.take();
            let reused = stream.is_some();
            let mut answered = exchange(&mut stream, &addr, &request, correlation_id).await;
            if reused && answered.as_ref().is_err_and(closed_by_peer) {
                // A connection kept from before the peer restarted: the
                // first call on it fails. Once more on a new one, or a
                // vote after a restart would cost the candidate a round.
                stream = None;
                answered = exchange(&mut stream, &addr, &request, correlation_id).await;
            }
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

    fn learn(&self, target: NodeId, address: &str, directory_id: Option<&str>) {
        let Ok(mut addresses) = self.addresses.write() else {
            return;
        };
        if let Ok(mut directories) = self.directories.write() {
            match directory_id {
                Some(id) => directories.insert(target, id.to_owned()),
                None => directories.remove(&target),
            };
        }
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
    fn addresses_round_trip_at_both_versions() {
        let address = Address {
            to: 3,
            cluster_id: Some("c"),
            directory_id: Some("d"),
        };
        let body = encode_addressed(DIRECTORY_API_VERSION, &address, b"{}");
        assert_eq!(
            decode_addressed(DIRECTORY_API_VERSION, &body).unwrap(),
            (address.clone(), &b"{}"[..])
        );
        // Version 1 has no directory: what it carries reads as before.
        let body = encode_addressed(QUORUM_API_VERSION, &address, b"{}");
        assert_eq!(&body[..], &[0, 0, 0, 3, 0, 1, b'c', b'{', b'}'][..]);
        let without = Address {
            directory_id: None,
            ..address
        };
        assert_eq!(
            decode_addressed(QUORUM_API_VERSION, &body).unwrap(),
            (without, &b"{}"[..])
        );
        assert!(decode_addressed(DIRECTORY_API_VERSION, &[0, 0, 0, 3, 0, 1, b'c']).is_err());
    }

    #[test]
    fn a_truncated_header_is_an_error_not_a_panic() {
        assert!(decode_request(&[0; 9]).is_err());
        assert!(decode_request(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 5, b'a']).is_err());
    }
}
