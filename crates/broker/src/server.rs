//! The network server: accepts connections and serves each one with a
//! pipeline of two tasks.
//!
//! A reader task reads request frames ahead of processing (clients such as
//! librdkafka keep up to five, or more, requests in flight), bounded by
//! [`MAX_IN_FLIGHT_REQUESTS`] and [`MAX_IN_FLIGHT_BYTES`]: at the bound it
//! stops reading, so a client that floods gets TCP back-pressure. The
//! connection task handles the frames one at a time in arrival order and
//! writes each response before the next is handled, so responses (and the
//! effects of produces) keep the request order Kafka guarantees. A slow
//! long-poll on one connection never holds up another: connections are
//! separate tasks.
//!
//! Responses are written from parts: in-memory bytes through a write
//! buffer, and file ranges (fetched record batches) with sendfile(2)
//! straight from the segment file to the socket.
//!
//! Framing is bounded: a size prefix below the smallest header or above
//! `socket.request.max.bytes` closes that connection only, and a frame's
//! buffer grows with the bytes that actually arrive, so a client that
//! announces a large frame and stalls holds little memory.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use tarn_protocol::records::{FileRegion, Part, ResponseParts};

use crate::broker::Broker;
use crate::handlers;
use crate::refusals::Reason;

/// The smallest possible request: api key, version, correlation id and a
/// null client id.
const MIN_FRAME_BYTES: usize = 10;
/// How much a frame buffer grows per read while a large frame arrives.
const FRAME_GROWTH_BYTES: usize = 1 << 20;
/// How much the read buffer asks the socket for at a time: several
/// typical produce requests per read call.
const READ_CHUNK_BYTES: usize = 128 * 1024;
/// Requests read but not yet answered, per connection.
pub const MAX_IN_FLIGHT_REQUESTS: usize = 64;
/// Bytes of requests read but not yet answered, per connection. A single
/// frame larger than this still gets through, alone.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;
/// Response bytes gathered before a write call.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// Accepts connections until `shutdown` turns true.
pub async fn run(broker: Arc<Broker>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let group_timers = tokio::spawn(crate::group::run_background(
        broker.clone(),
        shutdown.clone(),
    ));
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
    if let Err(e) = group_timers.await {
        tracing::error!(error = %e, "group coordinator timer task failed");
    }
}

/// A request frame and its share of the connection's in-flight byte budget.
struct Frame {
    bytes: bytes::Bytes,
    _budget: OwnedSemaphorePermit,
}

async fn serve_connection(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
) -> std::io::Result<()> {
    let _connection = broker.metrics.connection_opened();
    stream.set_nodelay(true)?;
    let max_frame_bytes = broker.config.get_i64("socket.request.max.bytes") as usize;
    let (read_half, write_half) = stream.into_split();
    let (frames_tx, mut frames) = mpsc::channel(MAX_IN_FLIGHT_REQUESTS);
    let reader_broker = broker.clone();
    let reader = tokio::spawn(async move {
        if let Err(e) =
            read_frames(&reader_broker, read_half, frames_tx, max_frame_bytes, peer).await
        {
            tracing::debug!(%peer, error = %e, "read failed");
        }
    });
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write_half);
    let result = async {
        while let Some(frame) = frames.recv().await {
            let bytes = frame.bytes;
            match handlers::dispatch(&broker, peer, bytes.clone()).await {
                Ok(Some(response)) => {
                    write_response(&mut writer, response).await?;
                    writer.flush().await?;
                }
                Ok(None) => {}
                Err(e) => {
                    broker.refusals.bad_request(peer, &bytes, &e);
                    break;
                }
            }
        }
        Ok(())
    }
    .await;
    reader.abort();
    result
}

/// Reads frames into `frames` until the peer closes, a frame is out of
/// bounds, or the connection task is gone. Frames are cut from one read
/// buffer without copying; the buffer is refilled a chunk at a time.
async fn read_frames(
    broker: &Broker,
    mut socket: OwnedReadHalf,
    frames: mpsc::Sender<Frame>,
    max_frame_bytes: usize,
    peer: SocketAddr,
) -> std::io::Result<()> {
    let budget = Arc::new(Semaphore::new(MAX_IN_FLIGHT_BYTES));
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    loop {
        if !fill_to(&mut socket, &mut buf, 4).await? {
            return Ok(());
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
        if !fill_to(&mut socket, &mut buf, 4 + size).await? {
            return Ok(());
        }
        buf.advance(4);
        let frame = Frame {
            bytes: buf.split_to(size).freeze(),
            _budget: permit,
        };
        if frames.send(frame).await.is_err() {
            return Ok(());
        }
    }
}

/// Reads until `buf` holds at least `want` bytes; false at end of stream.
async fn fill_to(
    socket: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    want: usize,
) -> std::io::Result<bool> {
    while buf.len() < want {
        let missing = want - buf.len();
        buf.reserve(missing.clamp(READ_CHUNK_BYTES, FRAME_GROWTH_BYTES));
        if socket.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes a response: byte parts through the buffer, file parts with
/// sendfile after flushing what came before them.
async fn write_response(
    writer: &mut BufWriter<OwnedWriteHalf>,
    response: ResponseParts,
) -> std::io::Result<()> {
    for part in response.parts {
        match part {
            Part::Bytes(bytes) => writer.write_all(&bytes).await?,
            Part::File(region) => {
                writer.flush().await?;
                send_file(writer.get_ref().as_ref(), &region).await?;
            }
        }
    }
    Ok(())
}

/// Sends `region` with sendfile(2), waiting for socket writability when
/// the send buffer is full.
async fn send_file(socket: &TcpStream, region: &FileRegion) -> std::io::Result<()> {
    let mut offset = libc::off_t::try_from(region.position)
        .map_err(|_| std::io::Error::other("file position beyond off_t"))?;
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
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match sent {
            Ok(0) => {
                // The frame length already promised these bytes: the only
                // way out is to close the connection.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "segment file ended inside the fetched range",
                ));
            }
            Ok(n) => remaining -= n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
