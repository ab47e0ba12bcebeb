//! The network server: accepts connections and runs each one's requests
//! in order, as Kafka does (one request in flight per connection).
//!
//! Framing is bounded: a size prefix below the smallest header or above
//! `socket.request.max.bytes` closes that connection only, and a frame's
//! buffer grows with the bytes that actually arrive, so a client that
//! announces a large frame and stalls holds little memory.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::broker::Broker;
use crate::handlers;
use crate::refusals::Reason;

/// The smallest possible request: api key, version, correlation id and a
/// null client id.
const MIN_FRAME_BYTES: usize = 10;
/// How much a frame buffer grows per read while a frame arrives.
const FRAME_GROWTH_BYTES: usize = 1 << 20;

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

async fn serve_connection(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
) -> std::io::Result<()> {
    let _connection = broker.metrics.connection_opened();
    stream.set_nodelay(true)?;
    let max_frame_bytes = broker.config.get_i64("socket.request.max.bytes") as usize;
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let mut writer = BufWriter::with_capacity(64 * 1024, write_half);
    loop {
        let size = match reader.read_i32().await {
            Ok(size) => size,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        if size < MIN_FRAME_BYTES as i32 || size as usize > max_frame_bytes {
            let detail = format_args!("size {size} is outside [{MIN_FRAME_BYTES}, {max_frame_bytes}] (socket.request.max.bytes); closing the connection");
            broker
                .refusals
                .refused(peer, None, Reason::RequestSize, &detail);
            return Ok(());
        }
        let size = size as usize;
        let mut frame = BytesMut::with_capacity(size.min(FRAME_GROWTH_BYTES));
        while frame.len() < size {
            frame.reserve((size - frame.len()).min(FRAME_GROWTH_BYTES));
            let want = size - frame.len();
            let n = (&mut reader).take(want as u64).read_buf(&mut frame).await?;
            if n == 0 {
                return Ok(());
            }
        }
        let frame = frame.freeze();
        match handlers::dispatch(&broker, peer, frame.clone()).await {
            Ok(Some(response)) => {
                writer.write_all(&response).await?;
                writer.flush().await?;
            }
            Ok(None) => {}
            Err(e) => {
                broker.refusals.bad_request(peer, &frame, &e);
                return Ok(());
            }
        }
    }
}
