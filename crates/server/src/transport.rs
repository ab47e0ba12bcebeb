//! Transport: what the Kafka listener needs from the network, as traits.
//!
//! The server (`server.rs`) accepts [`Connection`]s from a [`Listener`],
//! splits each into a read half and a write half, reads request frames
//! from one and writes responses to the other, sending fetched segment
//! bytes with [`SendFile::send_file`]. TCP implements them with tokio's
//! sockets and sendfile(2); [`MemoryListener`] implements them with
//! in-process pipes, so a test or a deterministic simulation can drive the
//! real server with no sockets at all, and a cluster of brokers can later
//! be wired together the same way.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use tokio::io::Interest;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use tarn_protocol::records::FileRegion;

/// Where connections come from.
pub trait Listener: Send + 'static {
    type Conn: Connection;
    /// The next connection and its peer's address.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Conn, SocketAddr)>> + Send;
}

/// One client connection.
pub trait Connection: Send + 'static {
    type Read: AsyncRead + Readable + Unpin + Send + 'static;
    type Write: AsyncWrite + SendFile + Unpin + Send + 'static;
    /// Turns off send delays where the transport has them (Nagle).
    fn set_nodelay(&self) -> io::Result<()>;
    fn into_split(self) -> (Self::Read, Self::Write);
}

/// Waiting for bytes to read without handing the transport a buffer, so
/// that an idle connection holds none.
pub trait Readable {
    /// Resolves when a read would make progress (bytes, end of stream or
    /// an error); it may resolve early, and the read then waits as usual.
    fn readable(&mut self) -> impl Future<Output = io::Result<()>> + Send;
}

/// Writing a range of a segment file to the peer.
pub trait SendFile {
    /// Sends `region`'s bytes after whatever was written before.
    fn send_file(&mut self, region: &FileRegion) -> impl Future<Output = io::Result<()>> + Send;
}

/// The socket buffer sizes of a Kafka listener's connections, from
/// Kafka's `socket.send.buffer.bytes` (102400 by default, as in Kafka) and
/// `socket.receive.buffer.bytes` (the system's by default); `None` (the key
/// at -1, or any value below 1) keeps the operating system's size and its
/// autotuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketBuffers {
    pub send: Option<usize>,
    pub receive: Option<usize>,
}

impl SocketBuffers {
    pub fn from_config(config: &tarn_config::BrokerConfig) -> SocketBuffers {
        let size = |key: &str| usize::try_from(config.get_i64(key)).ok().filter(|&n| n > 0);
        SocketBuffers {
            send: size("socket.send.buffer.bytes"),
            receive: size("socket.receive.buffer.bytes"),
        }
    }
}

/// Binds a Kafka listener on `addr` (`host:port`; the first of its
/// addresses that binds) with `buffers` set on the listening socket, so
/// that every connection it accepts starts with them (Linux copies them,
/// and that they were chosen, to the accepted socket; a receive buffer set
/// before `listen` also sizes the window offered in the handshake).
///
/// What the send buffer's size trades (bench/RESULTS-vs-kafka.md, "Socket
/// buffers"): with the operating system's autotuned one (up to
/// `net.ipv4.tcp_wmem`'s 4 MiB) a fetch's sendfile(2) of a megabyte goes out
/// in one call, and on loopback the broker spent 0.5 s of CPU per million
/// 1 KiB records read, against 0.13-0.18 s with Kafka's 102400, which sends
/// it in a few rounds as the consumer reads. Consumers read as fast either
/// way; one across a long, fast link may want more than 102400 in flight.
pub async fn bind_listener(addr: &str, buffers: SocketBuffers) -> io::Result<TcpListener> {
    let mut failed = None;
    for resolved in tokio::net::lookup_host(addr).await? {
        match bind_one(resolved, buffers) {
            Ok(listener) => return Ok(listener),
            Err(e) => failed = Some(e),
        }
    }
    Err(failed.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr} resolves to no address"),
        )
    }))
}

/// The backlog of pending connections, as tokio's own `TcpListener::bind`.
const LISTEN_BACKLOG: u32 = 1024;

fn bind_one(addr: SocketAddr, buffers: SocketBuffers) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    let size = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    if let Some(n) = buffers.send {
        socket.set_send_buffer_size(size(n))?;
    }
    if let Some(n) = buffers.receive {
        socket.set_recv_buffer_size(size(n))?;
    }
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

impl Listener for TcpListener {
    type Conn = TcpStream;
    async fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr)> {
        TcpListener::accept(self).await
    }
}

impl Connection for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;
    fn set_nodelay(&self) -> io::Result<()> {
        TcpStream::set_nodelay(self, true)
    }
    fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        TcpStream::into_split(self)
    }
}

impl Readable for OwnedReadHalf {
    async fn readable(&mut self) -> io::Result<()> {
        OwnedReadHalf::readable(self).await
    }
}

impl SendFile for OwnedWriteHalf {
    /// sendfile(2) from the segment straight to the socket, waiting for
    /// writability when the send buffer is full.
    async fn send_file(&mut self, region: &FileRegion) -> io::Result<()> {
        let socket: &TcpStream = self.as_ref();
        let mut offset = libc::off_t::try_from(region.position)
            .map_err(|_| io::Error::other("file position beyond off_t"))?;
        let mut remaining = region.len as usize;
        while remaining > 0 {
            socket.writable().await?;
            let sent = socket.try_io(Interest::WRITABLE, || {
                // SAFETY: both descriptors are open for the duration of the
                // call and `offset` is a valid pointer.
                let n = unsafe {
                    libc::sendfile(
                        socket.as_raw_fd(),
                        region.file.as_raw_fd(),
                        &mut offset,
                        remaining,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match sent {
                Ok(0) => return Err(file_ended()),
                Ok(n) => remaining -= n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The frame length already promised these bytes: the only way out is to
/// close the connection.
fn file_ended() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "segment file ended inside the fetched range",
    )
}

/// Bytes a memory pipe buffers in each direction.
const MEMORY_PIPE_BYTES: usize = 256 * 1024;
/// A file region is copied through a buffer of at most this size.
const COPY_CHUNK_BYTES: usize = 64 * 1024;

/// Accepts in-process connections made with [`MemoryConnector::connect`].
pub struct MemoryListener {
    incoming: mpsc::Receiver<(DuplexStream, SocketAddr)>,
}

/// The client side's way to reach a [`MemoryListener`].
#[derive(Clone)]
pub struct MemoryConnector {
    outgoing: mpsc::Sender<(DuplexStream, SocketAddr)>,
}

/// A listener and the connector that reaches it; up to `backlog`
/// connections wait to be accepted.
pub fn memory_listener(backlog: usize) -> (MemoryListener, MemoryConnector) {
    let (outgoing, incoming) = mpsc::channel(backlog.max(1));
    (MemoryListener { incoming }, MemoryConnector { outgoing })
}

impl MemoryConnector {
    /// A new connection that the listener will see as coming from `peer`;
    /// the returned stream is the client's end.
    pub async fn connect(&self, peer: SocketAddr) -> io::Result<DuplexStream> {
        let (client, server) = tokio::io::duplex(MEMORY_PIPE_BYTES);
        self.outgoing
            .send((server, peer))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::ConnectionRefused, "listener is gone"))?;
        Ok(client)
    }
}

impl Listener for MemoryListener {
    type Conn = DuplexStream;
    async fn accept(&mut self) -> io::Result<(DuplexStream, SocketAddr)> {
        self.incoming.recv().await.ok_or_else(|| {
            io::Error::new(io::ErrorKind::ConnectionAborted, "every connector is gone")
        })
    }
}

impl Connection for DuplexStream {
    type Read = ReadHalf<DuplexStream>;
    type Write = WriteHalf<DuplexStream>;
    fn set_nodelay(&self) -> io::Result<()> {
        Ok(())
    }
    fn into_split(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// Memory pipes have no readiness to wait for: they are always "ready",
/// and a read waits with its buffer. They serve tests and simulations,
/// where idle buffers do not matter.
impl Readable for ReadHalf<DuplexStream> {
    async fn readable(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Readable for DuplexStream {
    async fn readable(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SendFile for WriteHalf<DuplexStream> {
    /// Copies the region through a bounded buffer.
    async fn send_file(&mut self, region: &FileRegion) -> io::Result<()> {
        let mut position = region.position;
        let end = region.position + u64::from(region.len);
        let mut chunk = vec![0u8; COPY_CHUNK_BYTES.min(region.len as usize)];
        while position < end {
            let len = chunk.len().min((end - position) as usize);
            region
                .file
                .read_exact_at(&mut chunk[..len], position)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::UnexpectedEof => file_ended(),
                    _ => e,
                })?;
            self.write_all(&chunk[..len]).await?;
            position += len as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use tarn_protocol::codec::{Uuid, Version};
    use tarn_protocol::messages::fetch::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
    use tarn_protocol::record_batch::{build_batch_for_tests, set_partition_leader_epoch};

    use super::*;
    use crate::testing::{read_response, send_request};

    const FETCH_V4: Version = Version {
        version: 4,
        flexible: false,
    };

    #[test]
    fn socket_buffers_are_kafkas_keys_and_minus_one_is_the_systems() {
        let defaults = SocketBuffers::from_config(&tarn_config::BrokerConfig::default());
        assert_eq!(
            defaults,
            SocketBuffers {
                send: Some(102_400),
                receive: None
            }
        );
        let config = tarn_config::BrokerConfig::with_overrides([
            ("socket.send.buffer.bytes", "-1"),
            ("socket.receive.buffer.bytes", "65536"),
        ])
        .expect("valid");
        assert_eq!(
            SocketBuffers::from_config(&config),
            SocketBuffers {
                send: None,
                receive: Some(65_536)
            }
        );
    }

    /// The sizes an accepted connection of a listener bound with `buffers`
    /// has: (send, receive).
    async fn accepted_buffer_sizes(buffers: SocketBuffers) -> (u32, u32) {
        let listener = bind_listener("127.0.0.1:0", buffers).await.expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let _client = client.expect("connect");
        let (accepted, _) = accepted.expect("accept");
        let socket = tokio::net::TcpSocket::from_std_stream(accepted.into_std().expect("std"));
        (
            socket.send_buffer_size().expect("SO_SNDBUF"),
            socket.recv_buffer_size().expect("SO_RCVBUF"),
        )
    }

    #[tokio::test]
    async fn accepted_connections_get_the_listeners_buffer_sizes() {
        // Linux doubles what is asked (room for its bookkeeping) and
        // reports the doubled size.
        let asked = SocketBuffers {
            send: Some(102_400),
            receive: Some(65_536),
        };
        assert_eq!(accepted_buffer_sizes(asked).await, (204_800, 131_072));
        // Both under 212992, the smallest usual net.core.[rw]mem_max, the
        // ceiling of what an unprivileged process may ask for.
        let asked = SocketBuffers {
            send: Some(200_000),
            receive: Some(150_000),
        };
        assert_eq!(accepted_buffer_sizes(asked).await, (400_000, 300_000));
    }

    async fn send_fetch(client: &mut DuplexStream, correlation_id: i32) {
        let request = FetchRequest {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            topics: vec![FetchTopic {
                topic: "orders".into(),
                topic_id: Uuid::ZERO,
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        send_request(client, 1, FETCH_V4, correlation_id, &request).await;
    }

    async fn read_fetch(client: &mut DuplexStream) -> (i32, FetchResponse) {
        read_response(client, FETCH_V4).await
    }

    /// The real server over in-process pipes: pipelined fetches answered in
    /// order with the segment bytes (the memory transport's `send_file`),
    /// and an oversized frame closes only its own connection.
    #[tokio::test]
    async fn the_server_runs_over_memory_pipes() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "orders", 1);
        let mut batch = build_batch_for_tests(0, 10, 1_000);
        crate::testing::append_now(&broker.replicas.get("orders", 0).unwrap(), &batch);
        // As stored: the broker stamps its leader epoch.
        set_partition_leader_epoch(&mut batch, 0).unwrap();

        let (listener, connector) = memory_listener(4);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(crate::server::run(broker.clone(), listener, stopped));
        let peer: SocketAddr = "10.0.0.1:40000".parse().unwrap();

        let mut hostile = connector.connect(peer).await.unwrap();
        let mut client = connector.connect(peer).await.unwrap();
        for id in 1..=3 {
            send_fetch(&mut client, id).await;
        }
        hostile.write_all(&i32::MAX.to_be_bytes()).await.unwrap();
        let mut rest = Vec::new();
        hostile.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "closed without an answer");

        for id in 1..=3 {
            let (correlation_id, response) = read_fetch(&mut client).await;
            assert_eq!(correlation_id, id, "answered in order");
            let partition = &response.responses[0].partitions[0];
            assert_eq!(partition.error_code, 0);
            assert_eq!(partition.high_watermark, 10);
            assert_eq!(partition.records.as_deref(), Some(&batch[..]));
        }
        stop.send(true).unwrap();
        server.await.unwrap();
        broker.shutdown().unwrap();
    }
}
