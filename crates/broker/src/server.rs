//! The network server: accepts connections and runs each one's requests
//! in order.
//!
//! A connection pipelines up to [`MAX_IN_FLIGHT_PER_CONNECTION`] requests:
//! each request's handler starts (and runs up to its first wait, e.g. a
//! produce appends and then waits for its fsync) in arrival order, and
//! responses are written strictly in request order. So a producer whose
//! batch waits for `flush.messages` keeps sending, and the batches queued
//! behind one fsync share the next (group commit within one connection).
//! Frames are read by a separate task, so waiting on a handler never
//! cancels a half-read frame.
//!
//! Framing is bounded: a size prefix below the smallest header or above
//! `socket.request.max.bytes` closes that connection only, and a frame's
//! buffer grows with the bytes that actually arrive, so a client that
//! announces a large frame and stalls holds little memory.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::broker::Broker;
use crate::handlers::{self, RequestError};

/// Requests of one connection that may be in progress at once (read and
/// started but not yet answered).
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 16;

/// The smallest possible request: api key, version, correlation id and a
/// null client id.
const MIN_FRAME_BYTES: usize = 10;
/// How much a frame buffer grows per read while a frame arrives.
const FRAME_GROWTH_BYTES: usize = 1 << 20;

/// Accepts connections until `shutdown` turns true.
pub async fn run(broker: Arc<Broker>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let broker = broker.clone();
                    tokio::spawn(async move {
                        if let Err(e) = serve_connection(broker, stream, peer).await {
                            tracing::debug!(%peer, error = %e, "connection closed with an error");
                        }
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
}

type Reply = Result<Option<Bytes>, RequestError>;

/// A started request: either answered already or still waiting.
enum InFlight<'a> {
    Done(Reply),
    Waiting(Pin<Box<dyn Future<Output = Reply> + Send + 'a>>),
}

async fn serve_connection(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let max_frame_bytes = broker.config.get_i64("socket.request.max.bytes") as usize;
    let (read_half, write_half) = stream.into_split();
    // Capacity 1: at most MAX_IN_FLIGHT_PER_CONNECTION started requests
    // plus two read-ahead frames (one queued, one being read) per connection.
    let (frames_tx, mut frames) = mpsc::channel(1);
    let _reader = AbortOnDrop(tokio::spawn(read_frames(
        read_half,
        peer,
        max_frame_bytes,
        frames_tx,
    )));
    let mut writer = BufWriter::with_capacity(64 * 1024, write_half);
    let mut queue: VecDeque<InFlight<'_>> = VecDeque::new();
    let mut reading = true;
    let result = loop {
        if queue.is_empty() && !reading {
            break Ok(());
        }
        tokio::select! {
            biased;
            reply = next_reply(&mut queue), if !queue.is_empty() => {
                match reply {
                    Ok(Some(response)) => {
                        writer.write_all(&response).await?;
                        writer.flush().await?;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "closing connection: bad request");
                        break Ok(());
                    }
                }
            }
            frame = frames.recv(), if reading && queue.len() < MAX_IN_FLIGHT_PER_CONNECTION => {
                match frame {
                    Some(Ok(frame)) => queue.push_back(start(&broker, peer, frame).await),
                    Some(Err(e)) => break Err(e),
                    None => reading = false,
                }
            }
        }
    };
    result
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
async fn start<'a>(broker: &'a Arc<Broker>, peer: SocketAddr, frame: Bytes) -> InFlight<'a> {
    let mut future: Pin<Box<dyn Future<Output = Reply> + Send + 'a>> =
        Box::pin(handlers::dispatch(broker, peer, frame));
    let first = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(reply) => InFlight::Done(reply),
        Poll::Pending => InFlight::Waiting(future),
    }
}

/// The reply of the oldest request, once it is ready.
async fn next_reply(queue: &mut VecDeque<InFlight<'_>>) -> Reply {
    let reply = std::future::poll_fn(|cx| match queue.front_mut() {
        Some(InFlight::Waiting(future)) => future.as_mut().poll(cx),
        Some(InFlight::Done(_)) => Poll::Ready(Ok(None)),
        None => Poll::Pending,
    })
    .await;
    match queue.pop_front() {
        Some(InFlight::Done(done)) => done,
        _ => reply,
    }
}

/// Reads size-prefixed frames and hands them over; ends at EOF or at a
/// frame size outside the allowed range (which closes the connection).
async fn read_frames(
    read_half: OwnedReadHalf,
    peer: SocketAddr,
    max_frame_bytes: usize,
    frames: mpsc::Sender<std::io::Result<Bytes>>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    loop {
        let frame = match read_frame(&mut reader, peer, max_frame_bytes).await {
            Ok(Some(frame)) => Ok(frame),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        let failed = frame.is_err();
        if frames.send(frame).await.is_err() || failed {
            return;
        }
    }
}

async fn read_frame(
    reader: &mut BufReader<OwnedReadHalf>,
    peer: SocketAddr,
    max_frame_bytes: usize,
) -> std::io::Result<Option<Bytes>> {
    let size = match reader.read_i32().await {
        Ok(size) => size,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    if size < MIN_FRAME_BYTES as i32 || size as usize > max_frame_bytes {
        tracing::warn!(
            %peer,
            size,
            max = max_frame_bytes,
            "closing connection: request size outside the allowed range (socket.request.max.bytes)"
        );
        return Ok(None);
    }
    let size = size as usize;
    let mut frame = BytesMut::with_capacity(size.min(FRAME_GROWTH_BYTES));
    while frame.len() < size {
        frame.reserve((size - frame.len()).min(FRAME_GROWTH_BYTES));
        let want = size - frame.len();
        let n = reader.take(want as u64).read_buf(&mut frame).await?;
        if n == 0 {
            return Ok(None);
        }
    }
    Ok(Some(frame.freeze()))
}
