//! The network server: accepts connections and serves each one with a
//! pipeline of two tasks.
//!
//! A reader task reads request frames ahead of processing (clients such as
//! librdkafka keep up to five, or more, requests in flight), bounded by
//! [`MAX_IN_FLIGHT_REQUESTS`] and [`MAX_IN_FLIGHT_BYTES`]: at the bound it
//! stops reading, so a client that floods gets TCP back-pressure. The
//! connection task starts up to [`MAX_IN_FLIGHT_PER_CONNECTION`] requests
//! in arrival order (each handler runs up to its first wait: a produce
//! appends, then waits for its fsync) and writes the responses strictly in
//! request order, as Kafka guarantees. So a producer whose batch waits for
//! `flush.messages` keeps sending, and the batches queued behind one fsync
//! share the next (group commit within one connection). A slow long-poll
//! on one connection never holds up another: connections are separate
//! tasks.
//!
//! Responses are written from parts: in-memory bytes through a write
//! buffer, and file ranges (fetched record batches) with the transport's
//! `send_file`: sendfile(2) straight from the segment file to a TCP
//! socket. Connections come from any [`Listener`] (see `transport`): TCP
//! in the binary, in-process pipes in tests and simulations.
//!
//! Framing is bounded: a size prefix below the smallest header or above
//! `socket.request.max.bytes` closes that connection only, and a frame's
//! buffer grows with the bytes that actually arrive, so a client that
//! announces a large frame and stalls holds little memory; it is closed
//! after `connections.max.idle.ms` without progress. Bytes read but not yet
//! answered are bounded per connection and across all connections
//! (`queued.max.request.bytes`); at either bound the server stops reading.
//! `max.connections` and `max.connections.per.ip` are checked on accept
//! (see `connection_quotas`). An idle connection keeps no read buffer.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use tarn_protocol::records::{Part, ResponseParts};

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection_quotas::ConnectionQuotas;
use crate::handlers::{self, RequestError};
use crate::refusals::Reason;
use crate::transport::{Connection, Listener, SendFile};

/// The smallest possible request: api key, version, correlation id and a
/// null client id.
const MIN_FRAME_BYTES: usize = 10;
/// How much a frame buffer grows per read while a large frame arrives.
const FRAME_GROWTH_BYTES: usize = 1 << 20;
/// How much the read buffer asks the socket for at a time: several
/// typical produce requests per read call.
const READ_CHUNK_BYTES: usize = 128 * 1024;
/// The first read of a connection whose buffer was released while idle.
const IDLE_READ_BYTES: usize = 16 * 1024;
/// The bound on queued request bytes across all connections when
/// `queued.max.request.bytes` is -1 (Kafka's "no limit"): Tarn always keeps one.
pub const DEFAULT_QUEUED_MAX_REQUEST_BYTES: usize = 512 << 20;
/// Requests read but not yet answered, per connection.
pub const MAX_IN_FLIGHT_REQUESTS: usize = 64;
/// Requests of one connection started (and so perhaps waiting, e.g. for
/// an fsync) but not yet answered.
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 16;
/// Bytes of requests read but not yet answered, per connection. A single
/// frame larger than this still gets through, alone.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;
/// Response bytes gathered before a write call.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// The limits every connection shares, from the broker's static config.
struct Limits {
    quotas: Arc<ConnectionQuotas>,
    max_frame_bytes: usize,
    idle: Option<Duration>,
    /// Request bytes read but not answered, across all connections.
    queued_bytes: Arc<Semaphore>,
    queued_bytes_max: usize,
}

impl Limits {
    fn from_config(config: &BrokerConfig) -> Limits {
        let count = |key: &str| usize::try_from(config.get_i64(key)).unwrap_or(usize::MAX);
        let queued_bytes_max = match config.get_i64("queued.max.request.bytes") {
            n if n > 0 => usize::try_from(n)
                .unwrap_or(usize::MAX)
                .min(Semaphore::MAX_PERMITS),
            _ => DEFAULT_QUEUED_MAX_REQUEST_BYTES,
        };
        let idle_ms = config.get_i64("connections.max.idle.ms");
        Limits {
            quotas: ConnectionQuotas::new(
                count("max.connections"),
                count("max.connections.per.ip"),
            ),
            max_frame_bytes: config.get_i64("socket.request.max.bytes") as usize,
            idle: (idle_ms >= 0).then(|| Duration::from_millis(idle_ms as u64)),
            queued_bytes: Arc::new(Semaphore::new(queued_bytes_max)),
            queued_bytes_max,
        }
    }
}

/// Accepts connections until `shutdown` turns true.
pub async fn run<L: Listener>(
    broker: Arc<Broker>,
    mut listener: L,
    mut shutdown: watch::Receiver<bool>,
) {
    let group_timers = tokio::spawn(crate::group::run_background(
        broker.clone(),
        shutdown.clone(),
    ));
    let limits = Arc::new(Limits::from_config(&broker.config));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = match limits.quotas.try_acquire(peer.ip()) {
                        Ok(slot) => slot,
                        Err(exceeded) => {
                            let detail = format_args!("{exceeded}; closing the new connection");
                            broker.refusals.refused(peer, None, Reason::ConnectionLimit, &detail);
                            continue;
                        }
                    };
                    let (broker, limits) = (broker.clone(), limits.clone());
                    tokio::spawn(async move {
                        if let Err(e) = serve_connection(broker, limits, stream, peer).await {
                            tracing::debug!(%peer, error = %e, "connection closed with an error");
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: keep serving the
                    // connections we have, and try again shortly.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
    if let Err(e) = group_timers.await {
        tracing::error!(error = %e, "group coordinator timer task failed");
    }
}

/// A request frame and its share of the connection's and the broker's
/// in-flight byte budgets, given back when it has been answered.
struct Frame {
    bytes: bytes::Bytes,
    _budget: OwnedSemaphorePermit,
    _queued: OwnedSemaphorePermit,
}

type Reply = Result<Option<ResponseParts>, RequestError>;

/// A started request: either answered already or still waiting. It keeps
/// its frame, whose permits hold the request's share of the read budgets
/// until it is answered.
struct InFlight<'a> {
    frame: Frame,
    state: Started<'a>,
}

enum Started<'a> {
    Done(Reply),
    Waiting(Pin<Box<dyn Future<Output = Reply> + Send + 'a>>),
}

async fn serve_connection<C: Connection>(
    broker: Arc<Broker>,
    limits: Arc<Limits>,
    stream: C,
    peer: SocketAddr,
) -> std::io::Result<()> {
    let _connection = broker.metrics.connection_opened();
    stream.set_nodelay()?;
    let (read_half, write_half) = stream.into_split();
    let (frames_tx, mut frames) = mpsc::channel(MAX_IN_FLIGHT_REQUESTS);
    let reader_broker = broker.clone();
    let _reader = AbortOnDrop(tokio::spawn(async move {
        if let Err(e) = read_frames(&reader_broker, &limits, read_half, frames_tx, peer).await {
            tracing::debug!(%peer, error = %e, "read failed");
        }
    }));
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write_half);
    let mut queue: VecDeque<InFlight<'_>> = VecDeque::new();
    let mut reading = true;
    loop {
        if queue.is_empty() && !reading {
            return Ok(());
        }
        tokio::select! {
            biased;
            (reply, frame) = next_reply(&mut queue), if !queue.is_empty() => {
                match reply {
                    Ok(Some(response)) => {
                        write_response(&mut writer, response).await?;
                        writer.flush().await?;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        broker.refusals.bad_request(peer, &frame.bytes, &e);
                        return Ok(());
                    }
                }
            }
            frame = frames.recv(), if reading && queue.len() < MAX_IN_FLIGHT_PER_CONNECTION => {
                match frame {
                    Some(frame) => queue.push_back(start(&broker, peer, frame).await),
                    None => reading = false,
                }
            }
        }
    }
}

/// Stops the frame reader when the connection ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts a request: polls its handler once, right now, so that requests
/// begin in arrival order.
async fn start<'a>(broker: &'a Arc<Broker>, peer: SocketAddr, frame: Frame) -> InFlight<'a> {
    let mut future: Pin<Box<dyn Future<Output = Reply> + Send + 'a>> =
        Box::pin(handlers::dispatch(broker, peer, frame.bytes.clone()));
    let first = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
    let state = match first {
        Poll::Ready(reply) => Started::Done(reply),
        Poll::Pending => Started::Waiting(future),
    };
    InFlight { frame, state }
}

/// The reply of the oldest request, once it is ready, with its frame.
async fn next_reply(queue: &mut VecDeque<InFlight<'_>>) -> (Reply, Frame) {
    let reply = std::future::poll_fn(|cx| match queue.front_mut().map(|f| &mut f.state) {
        Some(Started::Waiting(future)) => future.as_mut().poll(cx).map(Some),
        Some(Started::Done(_)) => Poll::Ready(None),
        None => Poll::Pending,
    })
    .await;
    let oldest = queue.pop_front().expect("the oldest request is there");
    match (oldest.state, reply) {
        (Started::Done(done), _) => (done, oldest.frame),
        (Started::Waiting(_), Some(reply)) => (reply, oldest.frame),
        (Started::Waiting(_), None) => unreachable!("a waiting request answered None"),
    }
}

/// Reads frames into `frames` until the peer closes, a frame is out of
/// bounds, or the connection task is gone. Frames are cut from one read
/// buffer without copying; the buffer is refilled a chunk at a time.
async fn read_frames(
    broker: &Broker,
    limits: &Limits,
    mut socket: impl AsyncRead + Unpin,
    frames: mpsc::Sender<Frame>,
    peer: SocketAddr,
) -> std::io::Result<()> {
    let max_frame_bytes = limits.max_frame_bytes;
    let budget = Arc::new(Semaphore::new(MAX_IN_FLIGHT_BYTES));
    let mut buf = BytesMut::new();
    // Idle while nothing is in flight: an answer still being worked on
    // (a long-poll fetch, say) keeps the connection busy.
    let idle = || budget.available_permits() == MAX_IN_FLIGHT_BYTES;
    loop {
        if buf.is_empty() && buf.capacity() > IDLE_READ_BYTES {
            buf = BytesMut::new();
        }
        match fill_within(&mut socket, &mut buf, 4, limits.idle, idle).await? {
            Fill::Done => {}
            Fill::Eof => return Ok(()),
            Fill::Idle => {
                close_idle(broker, limits, peer);
                return Ok(());
            }
        }
        let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if size < MIN_FRAME_BYTES as i32 || size as usize > max_frame_bytes {
            let detail = format_args!("size {size} is outside [{MIN_FRAME_BYTES}, {max_frame_bytes}] (socket.request.max.bytes); closing the connection");
            broker
                .refusals
                .refused(peer, None, Reason::RequestSize, &detail);
            return Ok(());
        }
        let size = size as usize;
        // Wait for room in the budget before reading the body: this is the
        // back-pressure on a client that sends faster than we answer.
        let permits = size.min(MAX_IN_FLIGHT_BYTES) as u32;
        let Ok(permit) = budget.clone().acquire_many_owned(permits).await else {
            return Ok(());
        };
        let queued = size.min(limits.queued_bytes_max) as u32;
        let Ok(queued) = limits.queued_bytes.clone().acquire_many_owned(queued).await else {
            return Ok(());
        };
        match fill_within(&mut socket, &mut buf, 4 + size, limits.idle, || true).await? {
            Fill::Done => {}
            Fill::Eof => return Ok(()),
            Fill::Idle => {
                close_idle(broker, limits, peer);
                return Ok(());
            }
        }
        buf.advance(4);
        let frame = Frame {
            bytes: buf.split_to(size).freeze(),
            _budget: permit,
            _queued: queued,
        };
        if frames.send(frame).await.is_err() {
            return Ok(());
        }
    }
}

enum Fill {
    Done,
    Eof,
    Idle,
}

fn close_idle(broker: &Broker, limits: &Limits, peer: SocketAddr) {
    let idle_ms = limits.idle.map_or(0, |d| d.as_millis());
    let detail = format_args!(
        "no progress for {idle_ms} ms (connections.max.idle.ms); closing the connection"
    );
    broker
        .refusals
        .refused(peer, None, Reason::IdleConnection, &detail);
}

/// Like [`fill_to`], but gives up when no byte arrives for `idle` while
/// `is_idle()` says nothing is in flight.
async fn fill_within(
    socket: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    want: usize,
    idle: Option<Duration>,
    is_idle: impl Fn() -> bool,
) -> std::io::Result<Fill> {
    let done = |more: bool| if more { Fill::Done } else { Fill::Eof };
    let Some(idle) = idle else {
        return fill_to(socket, buf, want).await.map(done);
    };
    loop {
        let before = buf.len();
        // Cancelling a read loses nothing: read_buf only appends what it read.
        match tokio::time::timeout(idle, fill_to(socket, buf, want)).await {
            Ok(more) => return more.map(done),
            Err(_) if buf.len() > before || !is_idle() => continue,
            Err(_) => return Ok(Fill::Idle),
        }
    }
}

/// Reads until `buf` holds at least `want` bytes; false at end of stream.
async fn fill_to(
    socket: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    want: usize,
) -> std::io::Result<bool> {
    while buf.len() < want {
        let missing = want - buf.len();
        let chunk = if buf.capacity() == 0 {
            IDLE_READ_BYTES
        } else {
            READ_CHUNK_BYTES
        };
        buf.reserve(missing.clamp(chunk, FRAME_GROWTH_BYTES));
        if socket.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes a response: byte parts through the buffer, file parts with
/// the transport's `send_file` (sendfile(2) on TCP) after flushing what
/// came before them.
async fn write_response<W: AsyncWrite + SendFile + Unpin>(
    writer: &mut BufWriter<W>,
    response: ResponseParts,
) -> std::io::Result<()> {
    for part in response.parts {
        match part {
            Part::Bytes(bytes) => writer.write_all(&bytes).await?,
            Part::File(region) => {
                writer.flush().await?;
                writer.get_mut().send_file(&region).await?;
            }
        }
    }
    Ok(())
}
