//! The operator's log of refused requests, rate-limited so that a flood of
//! bad requests cannot fill the disk.
//!
//! Every refusal worth an operator's attention (a frame of an impossible
//! size, a request that cannot be decoded, an unknown API or version, a
//! produce with corrupt or invalid records) is counted, and logged once
//! with the peer address and client id — unless the limiter says no. Two
//! limits apply: a token bucket per (peer IP, reason), so one noisy client
//! cannot drown out the others, and a global cap per second. What was held
//! back is counted and reported: the next message that is logged carries
//! `suppressed=N`, and [`RefusalLog::flush_summary`] (called every few
//! seconds) logs "suppressed N messages" when nothing else did. The
//! limiter's memory is bounded by [`REFUSAL_MAX_KEYS`].

use std::collections::HashMap;
use std::fmt::Display;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use tarn_protocol::error::{self, ErrorCode};

use crate::error_names::error_name;
use crate::handlers::RequestError;

/// Messages one (peer IP, reason) may log in a burst.
pub const REFUSAL_BURST: f64 = 5.0;
/// Sustained messages per second per (peer IP, reason) after the burst.
pub const REFUSAL_REFILL_PER_SEC: f64 = 0.2;
/// Refusal messages logged per second across all peers.
pub const REFUSAL_GLOBAL_PER_SEC: u32 = 20;
/// Token buckets kept at most; beyond this idle ones are dropped and, if
/// none is idle, only the global cap applies.
pub const REFUSAL_MAX_KEYS: usize = 4096;
/// Longest client id copied into a log line.
pub const CLIENT_ID_LOG_CHARS: usize = 128;

/// Why a request was refused, as a label for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The size prefix was below the smallest header or above
    /// `socket.request.max.bytes`.
    RequestSize,
    /// The header or body could not be decoded.
    MalformedRequest,
    UnknownApi,
    UnsupportedVersion,
    /// A produce was answered with an error that points at the client
    /// (corrupt records, bad acks, old message format, ...).
    ProduceRejected,
    /// A new connection over `max.connections` or `max.connections.per.ip`.
    ConnectionLimit,
    /// A connection silent for longer than `connections.max.idle.ms`.
    IdleConnection,
    /// A frame not complete within `socket.request.read.timeout.ms` of its
    /// first byte.
    ReadTimeout,
    /// An admin request the active controller could not be reached for.
    ControllerUnavailable,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::RequestSize,
        Reason::MalformedRequest,
        Reason::UnknownApi,
        Reason::UnsupportedVersion,
        Reason::ProduceRejected,
        Reason::ConnectionLimit,
        Reason::IdleConnection,
        Reason::ReadTimeout,
        Reason::ControllerUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::RequestSize => "request_size",
            Reason::MalformedRequest => "malformed_request",
            Reason::UnknownApi => "unknown_api",
            Reason::UnsupportedVersion => "unsupported_version",
            Reason::ProduceRejected => "produce_rejected",
            Reason::ConnectionLimit => "connection_limit",
            Reason::IdleConnection => "idle_connection",
            Reason::ReadTimeout => "read_timeout",
            Reason::ControllerUnavailable => "controller_unavailable",
        }
    }

    fn index(self) -> usize {
        Reason::ALL
            .iter()
            .position(|r| *r == self)
            .expect("every reason is in ALL")
    }
}

/// Produce errors that say the client sent something wrong, as opposed to
/// the normal traffic of retries and leadership changes.
pub fn produce_error_needs_attention(code: ErrorCode) -> bool {
    matches!(
        code,
        error::CORRUPT_MESSAGE
            | error::INVALID_RECORD
            | error::MESSAGE_TOO_LARGE
            | error::RECORD_LIST_TOO_LARGE
            | error::UNSUPPORTED_FOR_MESSAGE_FORMAT
            | error::UNSUPPORTED_VERSION
            | error::INVALID_REQUIRED_ACKS
            | error::INVALID_TOPIC_EXCEPTION
            | error::INVALID_TIMESTAMP
            | error::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    refilled_at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * REFUSAL_REFILL_PER_SEC).min(REFUSAL_BURST);
        self.refilled_at = now;
    }
}

/// The limiter's decision logic, apart from logging so it can be tested
/// with a synthetic clock.
#[derive(Debug)]
pub struct RateLimiter {
    buckets: HashMap<(IpAddr, Reason), Bucket>,
    window_started: Option<Instant>,
    logged_in_window: u32,
    /// Messages held back since the last report of them.
    suppressed: u64,
}

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter::new()
    }
}

impl RateLimiter {
    pub fn new() -> RateLimiter {
        RateLimiter {
            buckets: HashMap::new(),
            window_started: None,
            logged_in_window: 0,
            suppressed: 0,
        }
    }

    /// `Some(n)` when this message may be logged, `n` being how many were
    /// held back since the last report; `None` when it is suppressed.
    pub fn admit(&mut self, peer: IpAddr, reason: Reason, now: Instant) -> Option<u64> {
        let window_over = self
            .window_started
            .is_none_or(|start| now.saturating_duration_since(start) >= Duration::from_secs(1));
        if window_over {
            self.window_started = Some(now);
            self.logged_in_window = 0;
        }
        let global_ok = self.logged_in_window < REFUSAL_GLOBAL_PER_SEC;
        let key_ok = match self.bucket(peer, reason, now) {
            Some(bucket) => {
                bucket.refill(now);
                let ok = bucket.tokens >= 1.0;
                if ok && global_ok {
                    bucket.tokens -= 1.0;
                }
                ok
            }
            // No room for another bucket: the global cap alone decides.
            None => true,
        };
        if global_ok && key_ok {
            self.logged_in_window += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }

    fn bucket(&mut self, peer: IpAddr, reason: Reason, now: Instant) -> Option<&mut Bucket> {
        let key = (peer, reason);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= REFUSAL_MAX_KEYS {
            // Forget buckets that have refilled completely: they would
            // behave exactly like a new one.
            self.buckets.retain(|_, b| {
                b.refill(now);
                b.tokens < REFUSAL_BURST
            });
            if self.buckets.len() >= REFUSAL_MAX_KEYS {
                return None;
            }
        }
        Some(self.buckets.entry(key).or_insert(Bucket {
            tokens: REFUSAL_BURST,
            refilled_at: now,
        }))
    }

    /// How many messages were held back since the last report, resetting it.
    pub fn take_suppressed(&mut self) -> u64 {
        std::mem::take(&mut self.suppressed)
    }
}

/// Counts refusals and logs them through a [`RateLimiter`].
#[derive(Debug, Default)]
pub struct RefusalLog {
    limiter: Mutex<RateLimiter>,
    refused: [AtomicU64; Reason::ALL.len()],
    suppressed_total: AtomicU64,
}

impl RefusalLog {
    pub fn new() -> RefusalLog {
        RefusalLog::default()
    }

    /// Counts one refusal and logs it at warn level if the limiter allows.
    pub fn refused(
        &self,
        peer: SocketAddr,
        client_id: Option<&str>,
        reason: Reason,
        detail: &dyn Display,
    ) {
        self.refused[reason.index()].fetch_add(1, Ordering::Relaxed);
        let admitted = self.limiter.lock().admit(peer.ip(), reason, Instant::now());
        match admitted {
            Some(suppressed) => {
                let client_id = sanitize_client_id(client_id.unwrap_or(""));
                if suppressed > 0 {
                    tracing::warn!(%peer, client_id, reason = reason.as_str(), suppressed, "request refused: {detail} ({suppressed} similar messages were suppressed before this one)");
                } else {
                    tracing::warn!(%peer, client_id, reason = reason.as_str(), "request refused: {detail}");
                }
            }
            None => {
                self.suppressed_total.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A frame that `dispatch` refused: the connection is about to close.
    /// The client id is read from the frame's header when it is there.
    pub fn bad_request(&self, peer: SocketAddr, frame: &[u8], error: &RequestError) {
        let reason = match error {
            RequestError::Decode(_) => Reason::MalformedRequest,
            RequestError::UnknownApi(_) => Reason::UnknownApi,
            RequestError::UnsupportedVersion { .. } => Reason::UnsupportedVersion,
            RequestError::Forwarding { .. } => Reason::ControllerUnavailable,
        };
        let client_id = peek_client_id(frame);
        let detail = format_args!("{error}; closing the connection");
        self.refused(peer, client_id.as_deref(), reason, &detail);
    }

    /// A produce answered with `code` for one partition (`Some((topic,
    /// partition))`) or as a whole (`None`): logged, rate-limited, when the
    /// error points at the client, at debug level otherwise.
    pub fn produce_refused(
        &self,
        peer: SocketAddr,
        client_id: &str,
        partition: Option<(&str, i32)>,
        code: ErrorCode,
        message: &str,
    ) {
        let name = error_name(code);
        if produce_error_needs_attention(code) {
            // Refusals are rare next to requests: a String here is fine.
            let detail = match partition {
                Some((topic, index)) => {
                    format!("produce to {topic}-{index}: {name} ({code}): {message}")
                }
                None => format!("produce: {name} ({code}): {message}"),
            };
            self.refused(peer, Some(client_id), Reason::ProduceRejected, &detail);
        } else {
            tracing::debug!(%peer, ?partition, code, error = message, client_id, "produce refused");
        }
    }

    /// Logs how many messages were suppressed since the last report, if any.
    pub fn flush_summary(&self) {
        let suppressed = self.limiter.lock().take_suppressed();
        if suppressed > 0 {
            tracing::warn!(
                suppressed,
                "suppressed {suppressed} refused-request messages (rate limit)"
            );
        }
    }

    /// Refusals counted for `reason` so far (logged or not).
    pub fn refused_total(&self, reason: Reason) -> u64 {
        self.refused[reason.index()].load(Ordering::Relaxed)
    }

    /// Messages held back by the limiter so far.
    pub fn suppressed_total(&self) -> u64 {
        self.suppressed_total.load(Ordering::Relaxed)
    }
}

/// The client id from a request frame's header (api key, version,
/// correlation id, then a nullable int16-length string — the same in every
/// header version that has one), or `None` if the frame is too short.
pub fn peek_client_id(frame: &[u8]) -> Option<String> {
    let len_bytes: [u8; 2] = frame.get(8..10)?.try_into().ok()?;
    let len = i16::from_be_bytes(len_bytes);
    if len < 0 {
        return None;
    }
    let end = 10 + (len as usize).min(CLIENT_ID_LOG_CHARS * 4);
    let bytes = frame.get(10..end.min(frame.len()))?;
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// A client id fit for one log line: control characters replaced, length
/// bounded.
pub fn sanitize_client_id(client_id: &str) -> String {
    client_id
        .chars()
        .take(CLIENT_ID_LOG_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    #[test]
    fn a_burst_per_peer_then_suppressed_then_refilled() {
        let mut limiter = RateLimiter::new();
        let t0 = Instant::now();
        for _ in 0..REFUSAL_BURST as usize {
            assert_eq!(limiter.admit(ip(1), Reason::MalformedRequest, t0), Some(0));
        }
        assert_eq!(limiter.admit(ip(1), Reason::MalformedRequest, t0), None);
        assert_eq!(limiter.admit(ip(1), Reason::MalformedRequest, t0), None);
        // Another peer, or another reason, has its own bucket.
        assert_eq!(limiter.admit(ip(2), Reason::MalformedRequest, t0), Some(2));
        assert!(limiter.admit(ip(1), Reason::RequestSize, t0).is_some());
        // One token comes back after 1 / REFUSAL_REFILL_PER_SEC seconds.
        let later = t0 + Duration::from_secs_f64(1.0 / REFUSAL_REFILL_PER_SEC);
        assert_eq!(
            limiter.admit(ip(1), Reason::MalformedRequest, later),
            Some(0)
        );
        assert_eq!(limiter.admit(ip(1), Reason::MalformedRequest, later), None);
        assert_eq!(limiter.take_suppressed(), 1);
        assert_eq!(limiter.take_suppressed(), 0);
    }

    #[test]
    fn the_global_cap_bounds_messages_per_second_from_many_peers() {
        let mut limiter = RateLimiter::new();
        let t0 = Instant::now();
        let logged = (0..200u8)
            .filter(|i| limiter.admit(ip(*i), Reason::UnknownApi, t0).is_some())
            .count();
        assert_eq!(logged, REFUSAL_GLOBAL_PER_SEC as usize);
        assert_eq!(
            limiter.take_suppressed(),
            200 - u64::from(REFUSAL_GLOBAL_PER_SEC)
        );
        // A new second opens a new window.
        let next = t0 + Duration::from_secs(1);
        assert!(limiter.admit(ip(250), Reason::UnknownApi, next).is_some());
    }

    #[test]
    fn a_flood_logs_a_bounded_number_of_lines() {
        // 100,000 bad requests over 10 simulated seconds from 1,000 peers:
        // at most the global cap per second gets through.
        let mut limiter = RateLimiter::new();
        let t0 = Instant::now();
        let mut logged = 0u64;
        for i in 0..100_000u32 {
            let now = t0 + Duration::from_micros(u64::from(i) * 100);
            let peer = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i % 1000));
            if limiter.admit(peer, Reason::MalformedRequest, now).is_some() {
                logged += 1;
            }
        }
        assert!(logged <= 11 * u64::from(REFUSAL_GLOBAL_PER_SEC), "{logged}");
        assert!(logged >= u64::from(REFUSAL_GLOBAL_PER_SEC));
    }

    #[test]
    fn the_bucket_map_stays_bounded() {
        let mut limiter = RateLimiter::new();
        let t0 = Instant::now();
        for i in 0..(REFUSAL_MAX_KEYS as u32 + 500) {
            let peer = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            // Spread over time so the global cap does not hide the buckets.
            limiter.admit(
                peer,
                Reason::UnknownApi,
                t0 + Duration::from_secs(u64::from(i)),
            );
        }
        assert!(limiter.buckets.len() <= REFUSAL_MAX_KEYS);
    }

    #[test]
    fn client_id_is_read_from_the_header_and_sanitized() {
        let mut frame = vec![0, 18, 0, 3, 0, 0, 0, 7];
        frame.extend_from_slice(&5i16.to_be_bytes());
        frame.extend_from_slice(b"ab\ncd");
        assert_eq!(peek_client_id(&frame).as_deref(), Some("ab\ncd"));
        assert_eq!(sanitize_client_id("ab\ncd"), "ab?cd");
        let mut null = vec![0, 18, 0, 3, 0, 0, 0, 7];
        null.extend_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(peek_client_id(&null), None);
        assert_eq!(peek_client_id(&[0, 1, 2]), None);
        // A length past the end of the frame yields what is there.
        let mut short = vec![0, 18, 0, 3, 0, 0, 0, 7];
        short.extend_from_slice(&50i16.to_be_bytes());
        short.extend_from_slice(b"xy");
        assert_eq!(peek_client_id(&short).as_deref(), Some("xy"));
        assert_eq!(
            sanitize_client_id(&"x".repeat(1000)).len(),
            CLIENT_ID_LOG_CHARS
        );
    }

    #[test]
    fn refusals_are_counted_even_when_suppressed() {
        let log = RefusalLog::new();
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        for _ in 0..50 {
            log.refused(peer, Some("c"), Reason::RequestSize, &"too big");
        }
        assert_eq!(log.refused_total(Reason::RequestSize), 50);
        assert_eq!(log.suppressed_total(), 50 - REFUSAL_BURST as u64);
        assert_eq!(log.refused_total(Reason::UnknownApi), 0);
    }
}
