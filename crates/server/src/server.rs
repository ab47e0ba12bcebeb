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
//! announces a large frame and stalls holds little memory. A started frame
//! must arrive within `socket.request.read.timeout.ms` (Tarn's own key) of
//! its first byte, or the connection is closed; between frames a connection
//! is closed after `connections.max.idle.ms` without progress, and so is
//! one whose client reads no byte of a response for that long (it would
//! otherwise hold its requests' budget forever). Bytes read
//! but not yet answered are bounded per connection and across all
//! connections (`queued.max.request.bytes`), and charged as they arrive:
//! the bytes a prefix announces cost nothing until they are sent, so
//! stalled frames cannot starve other clients of the budget. At either
//! bound the server stops reading; at most one read's worth of bytes per
//! connection is in memory ahead of its charge, and the bytes after a
//! large frame are moved out of its buffer so that a small request cannot
//! pin a large one's memory. `max.connections` and
//! `max.connections.per.ip` are checked on accept (see
//! `connection_quotas`). An idle connection keeps no read buffer: it waits
//! for the socket to be readable before it allocates one.

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

use tarn_protocol::records::{FileRegion, Part, ResponseParts};

use tarn_config::BrokerConfig;

use crate::broker::Broker;
use crate::connection_quotas::ConnectionQuotas;
use crate::handlers::{self, RequestError};
use crate::refusals::Reason;
use crate::transport::{Connection, Listener, Readable, SendFile};

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
/// `queued.max.request.bytes` is -1 (Kafka's "no limit"): Tarn always keeps
/// one. A request may cost several times its bytes while it is decoded and
/// answered (five 100 MB DescribeGroups of 70-byte names peaked at 1.9 GB
/// with 512 MiB here, 1.4 GB with 128 MiB), so the bound is what keeps a
/// hostile client's requests within the machine; a single frame larger
/// than it, up to `socket.request.max.bytes`, still gets through.
pub const DEFAULT_QUEUED_MAX_REQUEST_BYTES: usize = 128 << 20;
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
/// A file range is sent in pieces of at most this size, each counting as
/// progress for the stalled-reader timer.
const SEND_FILE_PIECE_BYTES: u32 = 1 << 20;

/// The limits every connection shares, from the broker's static config.
struct Limits {
    quotas: Arc<ConnectionQuotas>,
    max_frame_bytes: usize,
    idle: Option<Duration>,
    /// How long a started frame may take to arrive.
    frame_timeout: Duration,
    /// Request bytes read but not answered, across all connections.
    queued_bytes: Arc<Semaphore>,
    queued_bytes_max: usize,
    /// One frame at a time may finish arriving without more budget once the
    /// budget is spent, so frames that arrive side by side and together
    /// outgrow it cannot all wait for each other: the memory bound is the
    /// budget plus one frame.
    overdraft: Arc<Semaphore>,
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
        let frame_timeout_ms = config.get_i64("socket.request.read.timeout.ms");
        Limits {
            quotas: ConnectionQuotas::new(
                count("max.connections"),
                count("max.connections.per.ip"),
            ),
            max_frame_bytes: config.get_i64("socket.request.max.bytes") as usize,
            idle: (idle_ms >= 0).then(|| Duration::from_millis(idle_ms as u64)),
            frame_timeout: Duration::from_millis(u64::try_from(frame_timeout_ms).unwrap_or(1)),
            queued_bytes: Arc::new(Semaphore::new(queued_bytes_max)),
            queued_bytes_max,
            overdraft: Arc::new(Semaphore::new(1)),
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
    let group_leadership = tokio::spawn(crate::group::run_leadership_sync(
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
    if let Err(e) = group_leadership.await {
        tracing::error!(error = %e, "group coordinator leadership task failed");
    }
}

/// A request frame and its share of the connection's and the broker's
/// in-flight byte budgets, given back when it has been answered.
struct Frame {
    bytes: bytes::Bytes,
    _charge: Charge,
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
    let (reader_broker, reader_limits) = (broker.clone(), limits.clone());
    let _reader = AbortOnDrop(tokio::spawn(async move {
        let read = read_frames(&reader_broker, &reader_limits, read_half, frames_tx, peer).await;
        if let Err(e) = read {
            tracing::debug!(%peer, error = %e, "read failed");
        }
    }));
    let progress = WriteProgress::default();
    let write_half = Progressing {
        inner: write_half,
        progress: progress.clone(),
    };
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
                        let write = async {
                            write_response(&mut writer, response).await?;
                            writer.flush().await
                        };
                        match until_stalled(&progress, limits.idle, write).await {
                            Some(written) => written?,
                            None => {
                                close_unread(&broker, &limits, peer);
                                return Ok(());
                            }
                        }
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

/// When a connection's writes last made progress: stamped by its
/// [`Progressing`] write half, read by [`until_stalled`].
#[derive(Clone)]
struct WriteProgress(Arc<parking_lot::Mutex<tokio::time::Instant>>);

impl Default for WriteProgress {
    fn default() -> Self {
        WriteProgress(Arc::new(parking_lot::Mutex::new(
            tokio::time::Instant::now(),
        )))
    }
}

impl WriteProgress {
    fn stamp(&self) {
        *self.0.lock() = tokio::time::Instant::now();
    }

    fn last(&self) -> tokio::time::Instant {
        *self.0.lock()
    }
}

/// A write half that stamps its [`WriteProgress`] whenever bytes leave.
struct Progressing<W> {
    inner: W,
    progress: WriteProgress,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Progressing<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.progress.stamp();
        }
        polled
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<W: SendFile + Send> SendFile for Progressing<W> {
    /// Sends the region in pieces, so that a large region the peer is
    /// reading counts as progress.
    async fn send_file(&mut self, region: &FileRegion) -> std::io::Result<()> {
        let mut sent: u32 = 0;
        while sent < region.len {
            let len = (region.len - sent).min(SEND_FILE_PIECE_BYTES);
            let piece = FileRegion {
                file: region.file.clone(),
                position: region.position + u64::from(sent),
                len,
                records: 0,
            };
            self.inner.send_file(&piece).await?;
            self.progress.stamp();
            sent += len;
        }
        Ok(())
    }
}

/// Runs `write` unless the peer stops reading: `None` when no byte of it
/// left for `idle` (`connections.max.idle.ms`), counted from its start.
async fn until_stalled<T>(
    progress: &WriteProgress,
    idle: Option<Duration>,
    write: impl Future<Output = T>,
) -> Option<T> {
    let Some(idle) = idle else {
        return Some(write.await);
    };
    progress.stamp();
    tokio::pin!(write);
    loop {
        let deadline = progress.last() + idle;
        tokio::select! {
            written = &mut write => return Some(written),
            () = tokio::time::sleep_until(deadline) => {
                if progress.last() + idle <= tokio::time::Instant::now() {
                    return None;
                }
            }
        }
    }
}

fn close_unread(broker: &Broker, limits: &Limits, peer: SocketAddr) {
    let idle_ms = limits.idle.map_or(0, |d| d.as_millis());
    let detail = format_args!(
        "the client read no response bytes for {idle_ms} ms (connections.max.idle.ms); closing the connection"
    );
    broker
        .refusals
        .refused(peer, None, Reason::IdleConnection, &detail);
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
/// bounds or late, or the connection task is gone. Frames are cut from one
/// read buffer without copying; the buffer is refilled a read at a time and
/// grows with the bytes that arrive, never with the size a prefix announces.
async fn read_frames(
    broker: &Broker,
    limits: &Limits,
    mut socket: impl AsyncRead + Readable + Unpin,
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
        // Between frames only the idle timer runs; the frame's own clock
        // starts with its first byte. A connection with nothing buffered
        // waits for bytes before it has a buffer to read them into.
        if buf.is_empty() {
            buf = BytesMut::new();
            match readable_within(&mut socket, limits.idle, idle).await? {
                Fill::Done => {}
                _ => {
                    close_idle(broker, limits, peer);
                    return Ok(());
                }
            }
        }
        match fill_within(&mut socket, &mut buf, 1, limits.idle, idle).await? {
            Fill::Done => {}
            Fill::Eof => return Ok(()),
            Fill::Idle | Fill::Late => {
                close_idle(broker, limits, peer);
                return Ok(());
            }
        }
        let mut clock = FrameClock::start(limits);
        match clock.fill(&mut socket, &mut buf, 4).await? {
            Fill::Done => {}
            Fill::Eof => return Ok(()),
            Fill::Idle => {
                close_idle(broker, limits, peer);
                return Ok(());
            }
            Fill::Late => {
                close_late(broker, limits, peer, 4, buf.len());
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
        let mut charge = Charge::default();
        loop {
            // Charge the budgets for the bytes that arrived, waiting for
            // room when they are spent: this is the back-pressure on a
            // client that sends faster than we answer. Announced bytes
            // that have not arrived cost nothing.
            let received = (buf.len() - 4).min(size);
            let waited_from = tokio::time::Instant::now();
            if !charge.grow_to(&budget, limits, received).await {
                return Ok(());
            }
            clock.pause(waited_from.elapsed());
            if received == size {
                break;
            }
            match clock.read_some(&mut socket, &mut buf, 4 + size).await? {
                Fill::Done => {}
                Fill::Eof => return Ok(()),
                Fill::Idle => {
                    close_idle(broker, limits, peer);
                    return Ok(());
                }
                Fill::Late => {
                    close_late(broker, limits, peer, 4 + size, buf.len());
                    return Ok(());
                }
            }
        }
        buf.advance(4);
        let frame = Frame {
            bytes: buf.split_to(size).freeze(),
            _charge: charge,
        };
        if size > READ_CHUNK_BYTES {
            // The bytes after a large frame would share its allocation, so
            // a small request read with them (a long-poll, say) would keep
            // the whole large frame in memory, uncharged, after the large
            // one is answered. Give them a buffer of their own.
            buf = BytesMut::from(&buf[..]);
        }
        if frames.send(frame).await.is_err() {
            return Ok(());
        }
    }
}

/// A frame's share of the read budgets: a permit per byte received so
/// far, from the connection's budget (up to [`MAX_IN_FLIGHT_BYTES`]) and
/// from the broker's (up to `queued.max.request.bytes`), so that a frame
/// larger than either still gets through, alone. A frame that finds the
/// broker's budget spent may instead take the overdraft (see
/// [`Limits::overdraft`]) and read the rest of its bytes uncharged; it
/// holds the overdraft until it has been answered.
#[derive(Default)]
struct Charge {
    connection: Option<OwnedSemaphorePermit>,
    queued: Option<OwnedSemaphorePermit>,
    overdraft: Option<OwnedSemaphorePermit>,
}

impl Charge {
    /// Holds permits for `received` bytes; false when a budget is closed.
    async fn grow_to(
        &mut self,
        connection: &Arc<Semaphore>,
        limits: &Limits,
        received: usize,
    ) -> bool {
        if !grow_permit(
            &mut self.connection,
            connection,
            received.min(MAX_IN_FLIGHT_BYTES),
        )
        .await
        {
            return false;
        }
        if self.overdraft.is_some() {
            return true;
        }
        let want = received.min(limits.queued_bytes_max);
        tokio::select! {
            // Budget first: the overdraft is for when none is left.
            biased;
            grown = grow_permit(&mut self.queued, &limits.queued_bytes, want) => grown,
            overdraft = limits.overdraft.clone().acquire_owned() => match overdraft {
                Ok(permit) => {
                    self.overdraft = Some(permit);
                    true
                }
                Err(_) => false,
            },
        }
    }
}

/// Tops `permit` up to `want` permits of `semaphore`; false when it is closed.
async fn grow_permit(
    permit: &mut Option<OwnedSemaphorePermit>,
    semaphore: &Arc<Semaphore>,
    want: usize,
) -> bool {
    let held = permit.as_ref().map_or(0, |p| p.num_permits());
    if want <= held {
        return true;
    }
    // `want` is at most the semaphore's size, which fits in u32.
    let more = u32::try_from(want - held).unwrap_or(u32::MAX);
    let Ok(more) = semaphore.clone().acquire_many_owned(more).await else {
        return false;
    };
    match permit {
        Some(held) => held.merge(more),
        None => *permit = Some(more),
    }
    true
}

enum Fill {
    Done,
    Eof,
    /// No byte arrived for `connections.max.idle.ms`.
    Idle,
    /// The frame did not arrive within `socket.request.read.timeout.ms`.
    Late,
}

/// The time a started frame has left to arrive. Only the peer's time
/// counts: while the server waits for room in its budgets the clock is
/// paused. No progress for `connections.max.idle.ms`, when that is
/// shorter, also ends the frame.
struct FrameClock {
    deadline: tokio::time::Instant,
    idle: Option<Duration>,
}

impl FrameClock {
    fn start(limits: &Limits) -> FrameClock {
        FrameClock {
            deadline: tokio::time::Instant::now() + limits.frame_timeout,
            idle: limits.idle,
        }
    }

    fn pause(&mut self, waited: Duration) {
        self.deadline += waited;
    }

    /// Reads until `buf` holds at least `want` bytes.
    async fn fill(
        &self,
        socket: &mut (impl AsyncRead + Unpin),
        buf: &mut BytesMut,
        want: usize,
    ) -> std::io::Result<Fill> {
        while buf.len() < want {
            match self.read_some(socket, buf, want).await? {
                Fill::Done => {}
                other => return Ok(other),
            }
        }
        Ok(Fill::Done)
    }

    /// One read towards `want` bytes in `buf`, within the frame's time.
    async fn read_some(
        &self,
        socket: &mut (impl AsyncRead + Unpin),
        buf: &mut BytesMut,
        want: usize,
    ) -> std::io::Result<Fill> {
        let now = tokio::time::Instant::now();
        let idle_at = self.idle.map(|idle| now + idle);
        let until = idle_at.map_or(self.deadline, |at| at.min(self.deadline));
        match tokio::time::timeout_at(until, read_some(socket, buf, want)).await {
            Ok(Ok(0)) => Ok(Fill::Eof),
            Ok(Ok(_)) => Ok(Fill::Done),
            Ok(Err(e)) => Err(e),
            Err(_) if until == self.deadline => Ok(Fill::Late),
            Err(_) => Ok(Fill::Idle),
        }
    }
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

fn close_late(broker: &Broker, limits: &Limits, peer: SocketAddr, want: usize, got: usize) {
    let timeout_ms = limits.frame_timeout.as_millis();
    let detail = format_args!(
        "{got} of {want} frame bytes arrived within {timeout_ms} ms (socket.request.read.timeout.ms); closing the connection"
    );
    broker
        .refusals
        .refused(peer, None, Reason::ReadTimeout, &detail);
}

/// Waits until `socket` has bytes (or its end) to read, giving up when
/// none arrive for `idle` while `is_idle()` says nothing is in flight.
async fn readable_within(
    socket: &mut impl Readable,
    idle: Option<Duration>,
    is_idle: impl Fn() -> bool,
) -> std::io::Result<Fill> {
    let Some(idle) = idle else {
        socket.readable().await?;
        return Ok(Fill::Done);
    };
    loop {
        match tokio::time::timeout(idle, socket.readable()).await {
            Ok(ready) => return ready.map(|()| Fill::Done),
            Err(_) if !is_idle() => {}
            Err(_) => return Ok(Fill::Idle),
        }
    }
}

/// Reads until `buf` holds at least `want` bytes, giving up when no byte
/// arrives for `idle` while `is_idle()` says nothing is in flight.
async fn fill_within(
    socket: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    want: usize,
    idle: Option<Duration>,
    is_idle: impl Fn() -> bool,
) -> std::io::Result<Fill> {
    while buf.len() < want {
        let Some(idle) = idle else {
            if read_some(socket, buf, want).await? == 0 {
                return Ok(Fill::Eof);
            }
            continue;
        };
        // Cancelling a read loses nothing: read_buf only appends what it read.
        match tokio::time::timeout(idle, read_some(socket, buf, want)).await {
            Ok(Ok(0)) => return Ok(Fill::Eof),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) if !is_idle() => {}
            Err(_) => return Ok(Fill::Idle),
        }
    }
    Ok(Fill::Done)
}

/// One read into `buf` towards `want` bytes; 0 at end of stream. The
/// buffer grows by at most what it already holds (and at least a read
/// chunk), so a peer that announces a large frame and then sends little
/// holds little memory.
async fn read_some(
    socket: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    want: usize,
) -> std::io::Result<usize> {
    let missing = want.saturating_sub(buf.len());
    let chunk = if buf.capacity() == 0 {
        IDLE_READ_BYTES
    } else {
        READ_CHUNK_BYTES
    };
    let growth = missing.clamp(chunk, FRAME_GROWTH_BYTES.min(buf.len().max(chunk)));
    buf.reserve(growth);
    socket.read_buf(buf).await
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncWriteExt, DuplexStream};

    use super::*;

    /// Generous bound on waits that only a bug makes long, so a broken
    /// budget fails the test instead of hanging it.
    const HANG_GUARD: Duration = Duration::from_secs(30);

    fn limits(queued_bytes_max: usize, frame_timeout: Duration) -> Arc<Limits> {
        Arc::new(Limits {
            quotas: ConnectionQuotas::new(usize::MAX, usize::MAX),
            max_frame_bytes: 200 << 20,
            idle: None,
            frame_timeout,
            queued_bytes: Arc::new(Semaphore::new(queued_bytes_max)),
            queued_bytes_max,
            overdraft: Arc::new(Semaphore::new(1)),
        })
    }

    /// A frame reader on a fresh pipe: the client's end, the frames it
    /// reads and its task (which ends when the reader gives up).
    fn reader(
        broker: &Arc<Broker>,
        limits: &Arc<Limits>,
    ) -> (
        DuplexStream,
        mpsc::Receiver<Frame>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT_REQUESTS);
        let (broker, limits) = (broker.clone(), limits.clone());
        let peer: SocketAddr = "10.0.0.2:40000".parse().expect("address");
        let task =
            tokio::spawn(async move { read_frames(&broker, &limits, server, tx, peer).await });
        (client, rx, task)
    }

    async fn next_frame(frames: &mut mpsc::Receiver<Frame>) -> Frame {
        tokio::time::timeout(HANG_GUARD, frames.recv())
            .await
            .expect("a frame is read")
            .expect("a frame")
    }

    async fn wait_for_available(limits: &Limits, permits: usize) {
        let waited = tokio::time::timeout(HANG_GUARD, async {
            while limits.queued_bytes.available_permits() != permits {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "budget never reached {permits} available (is {})",
            limits.queued_bytes.available_permits()
        );
    }

    /// A frame of `len` bytes: a size prefix and filler.
    fn frame_bytes(len: usize) -> Vec<u8> {
        let mut out = i32::try_from(len).expect("small").to_be_bytes().to_vec();
        out.resize(4 + len, 7);
        out
    }

    /// A stalled 100 MB frame holds only the bytes it sent, so another
    /// connection's frame still fits in a budget far smaller than the
    /// announced size, and each frame gives its share back when dropped.
    #[tokio::test]
    async fn the_budget_is_charged_for_bytes_received() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let budget = 64 * 1024;
        let limits = limits(budget, HANG_GUARD * 4);

        let (mut stalled, _stalled_frames, _stalled_task) = reader(&broker, &limits);
        let mut start = (100i32 << 20).to_be_bytes().to_vec();
        start.extend_from_slice(&[1u8; 1000]);
        stalled.write_all(&start).await.unwrap();
        wait_for_available(&limits, budget - 1000).await;

        let (mut client, mut frames, _task) = reader(&broker, &limits);
        client.write_all(&frame_bytes(40_000)).await.unwrap();
        let frame = tokio::time::timeout(HANG_GUARD, frames.recv())
            .await
            .expect("the frame is read while the stalled one waits")
            .expect("a frame");
        assert_eq!(frame.bytes.len(), 40_000);
        assert_eq!(
            limits.queued_bytes.available_permits(),
            budget - 1000 - 40_000
        );
        drop(frame);
        assert_eq!(limits.queued_bytes.available_permits(), budget - 1000);

        // More of the stalled frame arrives and is charged as it does.
        stalled.write_all(&[2u8; 3000]).await.unwrap();
        wait_for_available(&limits, budget - 4000).await;
        broker.shutdown().unwrap();
    }

    /// Frames that arrive side by side and together outgrow the budget
    /// are all read: one finishes on the overdraft, and once it has been
    /// answered the next gets the budget or the overdraft in turn.
    #[tokio::test]
    async fn frames_that_together_outgrow_the_budget_all_arrive() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let budget = 64 * 1024;
        let limits = limits(budget, HANG_GUARD * 4);
        let len = 48 * 1024;
        let mut clients = Vec::new();
        // Each sends most of its frame first: three partial frames want
        // more than the whole budget, so none could finish on it alone.
        let part = 30 * 1024;
        for i in 0..3 {
            let (mut client, frames, task) = reader(&broker, &limits);
            client
                .write_all(&frame_bytes(len)[..4 + part])
                .await
                .unwrap();
            clients.push((client, frames, task));
            // The first two are charged in full. The third finds the
            // budget short: it takes the overdraft (without one it would
            // wait, holding the permits that are free, so none are left).
            let charged = tokio::time::timeout(HANG_GUARD, async {
                loop {
                    let free = limits.queued_bytes.available_permits();
                    let done = match i {
                        0 | 1 => free == budget - (i + 1) * part,
                        _ => free == 0 || limits.overdraft.available_permits() == 0,
                    };
                    if done {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await;
            assert!(charged.is_ok(), "partial frame {i} was not charged");
        }
        for (client, _, _) in &mut clients {
            client
                .write_all(&frame_bytes(len)[4 + part..])
                .await
                .unwrap();
        }
        // Each connection's frame is answered (dropped) as soon as it is
        // read, whatever the order, as connection tasks do.
        let answered: Vec<_> = clients
            .into_iter()
            .map(|(client, mut frames, task)| {
                tokio::spawn(async move {
                    let frame = next_frame(&mut frames).await;
                    assert_eq!(frame.bytes.len(), len);
                    drop(frame);
                    (client, task)
                })
            })
            .collect();
        for answer in answered {
            answer.await.expect("the frame was read");
        }
        wait_for_available(&limits, budget).await;
        assert_eq!(limits.overdraft.available_permits(), 1);
        broker.shutdown().unwrap();
    }

    /// A small frame read together with a large one gets its own buffer,
    /// so holding it (a long-poll waiting) does not hold the large
    /// frame's memory.
    #[tokio::test]
    async fn a_small_frame_does_not_share_a_large_frames_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let limits = limits(4 << 20, HANG_GUARD * 4);
        let (mut client, mut frames, _task) = reader(&broker, &limits);
        let large = READ_CHUNK_BYTES * 3;
        let mut both = frame_bytes(large);
        both.extend_from_slice(&frame_bytes(20));
        client.write_all(&both).await.unwrap();
        let first = next_frame(&mut frames).await;
        let second = next_frame(&mut frames).await;
        assert_eq!((first.bytes.len(), second.bytes.len()), (large, 20));
        let first_end = first.bytes.as_ptr() as usize + first.bytes.len();
        let second_at = second.bytes.as_ptr() as usize;
        assert!(
            second_at < first.bytes.as_ptr() as usize || second_at > first_end + 4096,
            "the small frame sits right after the large one, in its buffer"
        );
        broker.shutdown().unwrap();
    }

    /// A read half that counts its reads and is readable only when told,
    /// counting the waits for it.
    struct Gated {
        inner: DuplexStream,
        gate: Arc<tokio::sync::Notify>,
        waits: Arc<AtomicUsize>,
        reads: Arc<AtomicUsize>,
    }

    impl Readable for Gated {
        async fn readable(&mut self) -> std::io::Result<()> {
            self.waits.fetch_add(1, Ordering::SeqCst);
            self.gate.notified().await;
            Ok(())
        }
    }

    impl AsyncRead for Gated {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    async fn wait_for_count(count: &AtomicUsize, want: usize) {
        let waited = tokio::time::timeout(HANG_GUARD, async {
            while count.load(Ordering::SeqCst) < want {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "count stuck at {count:?}, wanted {want}");
    }

    /// Between frames the reader waits for the socket to be readable
    /// before it hands the socket a buffer: an idle connection holds none.
    #[tokio::test]
    async fn an_idle_connection_waits_for_bytes_before_it_has_a_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let limits = limits(1 << 20, HANG_GUARD * 4);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let gated = Gated {
            inner: server,
            gate: Arc::new(tokio::sync::Notify::new()),
            waits: Arc::new(AtomicUsize::new(0)),
            reads: Arc::new(AtomicUsize::new(0)),
        };
        let (gate, waits, reads) = (gated.gate.clone(), gated.waits.clone(), gated.reads.clone());
        let (tx, mut frames) = mpsc::channel(MAX_IN_FLIGHT_REQUESTS);
        let peer: SocketAddr = "10.0.0.3:40000".parse().unwrap();
        let task = {
            let (broker, limits) = (broker.clone(), limits.clone());
            tokio::spawn(async move { read_frames(&broker, &limits, gated, tx, peer).await })
        };
        wait_for_count(&waits, 1).await;
        assert_eq!(reads.load(Ordering::SeqCst), 0, "read before readable");

        client.write_all(&frame_bytes(20)).await.unwrap();
        gate.notify_one();
        assert_eq!(next_frame(&mut frames).await.bytes.len(), 20);
        // Idle again: waiting for readiness, no read pending.
        wait_for_count(&waits, 2).await;
        let reads_when_idle = reads.load(Ordering::SeqCst);
        drop(client);
        gate.notify_one();
        task.await.unwrap().unwrap();
        assert!(reads.load(Ordering::SeqCst) > reads_when_idle);
        broker.shutdown().unwrap();
    }

    /// A client that sends requests and never reads the answers is closed
    /// after `connections.max.idle.ms` without a byte written, and its
    /// requests give their budget back.
    #[tokio::test]
    async fn a_client_that_reads_no_responses_is_closed() {
        use tarn_protocol::codec::Version;
        use tarn_protocol::messages::api_versions::ApiVersionsRequest;

        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let budget = 1 << 20;
        let limits = Arc::new(Limits {
            idle: Some(Duration::from_millis(200)),
            ..Arc::into_inner(limits(budget, HANG_GUARD * 4)).expect("one owner")
        });
        // A pipe far smaller than one response: the first write stalls.
        let (mut client, server) = tokio::io::duplex(16);
        let peer: SocketAddr = "10.0.0.4:40000".parse().unwrap();
        let serving = tokio::spawn(serve_connection(
            broker.clone(),
            limits.clone(),
            server,
            peer,
        ));
        let v0 = Version {
            version: 0,
            flexible: false,
        };
        for id in 0..4 {
            let request = ApiVersionsRequest::default();
            crate::testing::send_request(&mut client, 18, v0, id, &request).await;
        }
        let served = tokio::time::timeout(HANG_GUARD, serving).await;
        served.expect("the connection is closed").unwrap().unwrap();
        assert_eq!(broker.refusals.refused_total(Reason::IdleConnection), 1);
        wait_for_available(&limits, budget).await;
        drop(client);
        broker.shutdown().unwrap();
    }

    /// A frame that has not arrived within the read timeout closes its
    /// connection even while bytes keep trickling in, and its charge is
    /// given back.
    #[tokio::test]
    async fn a_frame_late_past_the_read_timeout_closes_the_connection() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let budget = 1 << 20;
        let limits = limits(budget, Duration::from_millis(300));

        let (mut silent, _silent_frames, silent_task) = reader(&broker, &limits);
        silent
            .write_all(&(100i32 << 20).to_be_bytes())
            .await
            .unwrap();
        let (mut trickle, _trickle_frames, trickle_task) = reader(&broker, &limits);
        trickle.write_all(&(1000i32).to_be_bytes()).await.unwrap();
        let trickling = tokio::spawn(async move {
            // Stops when the reader closes its end.
            while trickle.write_all(&[3u8]).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });

        for task in [silent_task, trickle_task] {
            let ended = tokio::time::timeout(HANG_GUARD, task).await;
            ended
                .expect("the late frame's reader ended")
                .unwrap()
                .unwrap();
        }
        tokio::time::timeout(HANG_GUARD, trickling)
            .await
            .expect("the trickling writer saw the connection close")
            .unwrap();
        assert_eq!(limits.queued_bytes.available_permits(), budget);
        assert_eq!(broker.refusals.refused_total(Reason::ReadTimeout), 2);
        drop(silent);
        broker.shutdown().unwrap();
    }
}
