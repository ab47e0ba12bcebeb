//! The broker's HTTP listener: `/metrics` (Prometheus), `/health`, the
//! read-only web console at `/` and the JSON it reads under `/api/`.
//!
//! A deliberately small HTTP/1.1 server: GET and HEAD only, one request per
//! connection (`Connection: close`), no request bodies. Everything is
//! bounded: at most [`HTTP_MAX_CONNECTIONS`] connections at once (more are
//! closed on accept), a request head of at most [`HTTP_MAX_HEAD_BYTES`] and
//! [`HTTP_MAX_HEADERS`] lines that must arrive within
//! [`HTTP_HEAD_TIMEOUT`], and a response that must be written within
//! [`HTTP_WRITE_TIMEOUT`]. Handlers run on the blocking pool because they
//! lock partition logs and may read segment files.

pub mod api;

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use tarn_coordinator::group_lag::SharedGroupLagSource;

use crate::broker::Broker;

/// HTTP connections served at once.
pub const HTTP_MAX_CONNECTIONS: usize = 64;
/// Longest request line plus headers.
pub const HTTP_MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header lines in a request.
pub const HTTP_MAX_HEADERS: usize = 100;
/// How long a client may take to send its request head.
pub const HTTP_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long writing a response may take.
pub const HTTP_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Query parameters accepted per request.
pub const HTTP_MAX_QUERY_PARAMS: usize = 16;

const INDEX_HTML: &str = include_str!("console/index.html");
const CONSOLE_JS: &str = include_str!("console/console.js");
const CONSOLE_CSS: &str = include_str!("console/console.css");

/// What every request handler can see.
pub struct HttpState {
    pub broker: Arc<Broker>,
    pub groups: SharedGroupLagSource,
}

/// A parsed request head: the method and the decoded path and query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: HashMap<String, String>,
}

impl Request {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Cow<'static, [u8]>,
    /// Static assets may be cached briefly; API answers never.
    pub cacheable: bool,
}

impl Response {
    pub fn new(
        status: u16,
        content_type: &'static str,
        body: impl Into<Cow<'static, [u8]>>,
    ) -> Self {
        Response {
            status,
            content_type,
            body: body.into(),
            cacheable: false,
        }
    }

    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Response::new(
            status,
            "text/plain; charset=utf-8",
            body.into().into_bytes(),
        )
    }

    pub fn json(value: &impl serde::Serialize) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => Response::new(200, "application/json", body),
            Err(e) => Response::text(500, format!("encode JSON: {e}\n")),
        }
    }

    fn asset(content_type: &'static str, body: &'static str) -> Self {
        Response {
            cacheable: true,
            ..Response::new(200, content_type, body.as_bytes())
        }
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Serves HTTP until `shutdown` turns true. The sampler behind the
/// console's charts runs separately (see `metrics::run_sampler`).
pub async fn run(
    state: Arc<HttpState>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(HTTP_MAX_CONNECTIONS));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let state = state.clone();
                        tokio::spawn(serve_connection(state, stream, peer, permit));
                    }
                    Err(_) => {
                        tracing::debug!(%peer, limit = HTTP_MAX_CONNECTIONS, "HTTP connection limit reached; closing");
                        drop(stream);
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
}

async fn serve_connection(
    state: Arc<HttpState>,
    mut stream: TcpStream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    let head = match tokio::time::timeout(HTTP_HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => head,
        // The client went away before sending a whole head.
        Ok(Ok(None)) => return,
        Ok(Err(status)) => {
            write_response(
                &mut stream,
                &Response::text(status, format!("{}\n", reason_phrase(status))),
                false,
                peer,
            )
            .await;
            return;
        }
        Err(_) => {
            write_response(
                &mut stream,
                &Response::text(408, "request head timed out\n"),
                false,
                peer,
            )
            .await;
            return;
        }
    };
    let (response, head_only) = match parse_request(&head) {
        Ok(request) => {
            let head_only = request.method == "HEAD";
            let state = state.clone();
            let response = tokio::task::spawn_blocking(move || route(&state, &request))
                .await
                .unwrap_or_else(|e| Response::text(500, format!("handler failed: {e}\n")));
            (response, head_only)
        }
        Err(status) => (
            Response::text(status, format!("{}\n", reason_phrase(status))),
            false,
        ),
    };
    write_response(&mut stream, &response, head_only, peer).await;
}

/// Reads up to the blank line that ends the head. `Ok(None)` when the
/// peer closed first; `Err(431)` when the head is too large.
async fn read_head(stream: &mut TcpStream) -> Result<Option<Vec<u8>>, u16> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => n,
        };
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_head_end(&head) {
            head.truncate(end);
            return Ok(Some(head));
        }
        if head.len() > HTTP_MAX_HEAD_BYTES {
            return Err(431);
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .or_else(|| buf.windows(2).position(|w| w == b"\n\n"))
}

/// Parses the request line and counts the headers; the error is the HTTP
/// status to answer with.
pub fn parse_request(head: &[u8]) -> Result<Request, u16> {
    if head.len() > HTTP_MAX_HEAD_BYTES {
        return Err(431);
    }
    let text = std::str::from_utf8(head).map_err(|_| 400u16)?;
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let request_line = lines.next().ok_or(400u16)?;
    if lines.filter(|l| !l.is_empty()).count() > HTTP_MAX_HEADERS {
        return Err(431);
    }
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(400);
    };
    if !version.starts_with("HTTP/1.") {
        return Err(505);
    }
    if method != "GET" && method != "HEAD" {
        return Err(405);
    }
    if !target.starts_with('/') {
        return Err(400);
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = percent_decode(path).ok_or(400u16)?;
    let mut params = HashMap::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        if params.len() >= HTTP_MAX_QUERY_PARAMS {
            return Err(400);
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(&key.replace('+', " ")).ok_or(400u16)?;
        let value = percent_decode(&value.replace('+', " ")).ok_or(400u16)?;
        params.insert(key, value);
    }
    Ok(Request {
        method: method.to_owned(),
        path,
        query: params,
    })
}

/// Decodes `%XX` escapes; `None` for a bad escape or invalid UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Picks the handler for a request.
pub fn route(state: &HttpState, request: &Request) -> Response {
    match request.path.as_str() {
        "/health" => Response::text(200, "ok\n"),
        "/metrics" => Response::new(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::render(&state.broker, state.groups.as_ref()).into_bytes(),
        ),
        "/" | "/index.html" => Response::asset("text/html; charset=utf-8", INDEX_HTML),
        "/console.js" => Response::asset("text/javascript; charset=utf-8", CONSOLE_JS),
        "/console.css" => Response::asset("text/css; charset=utf-8", CONSOLE_CSS),
        path => match path.strip_prefix("/api/") {
            Some(endpoint) => api::handle(state, endpoint, request),
            None => Response::text(404, format!("no page at {path}\n")),
        },
    }
}

async fn write_response(
    stream: &mut TcpStream,
    response: &Response,
    head_only: bool,
    peer: SocketAddr,
) {
    let cache = if response.cacheable {
        "public, max-age=60"
    } else {
        "no-store"
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: {cache}\r\n\
         Connection: close\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n\
         Content-Security-Policy: default-src 'self'; img-src 'self' data:; frame-ancestors 'none'\r\n\r\n",
        response.status,
        reason_phrase(response.status),
        response.content_type,
        response.body.len(),
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        if !head_only {
            stream.write_all(&response.body).await?;
        }
        stream.flush().await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(HTTP_WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTP response not delivered"),
        Err(_) => tracing::debug!(%peer, "HTTP response write timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_and_query_are_parsed() {
        let r = parse_request(
            b"GET /api/records?topic=a%2Eb&partition=0&limit=5 HTTP/1.1\r\nHost: x\r\n",
        )
        .unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/api/records");
        assert_eq!(r.param("topic"), Some("a.b"));
        assert_eq!(r.param("partition"), Some("0"));
        assert_eq!(r.param("limit"), Some("5"));
        assert_eq!(r.param("missing"), None);
    }

    #[test]
    fn bad_requests_get_the_right_status() {
        assert_eq!(parse_request(b"POST / HTTP/1.1"), Err(405));
        assert_eq!(parse_request(b"GET / HTTP/2"), Err(505));
        assert_eq!(parse_request(b"GET http://x/ HTTP/1.1"), Err(400));
        assert_eq!(parse_request(b"GET /"), Err(400));
        assert_eq!(parse_request(b"GET /%zz HTTP/1.1"), Err(400));
        assert_eq!(parse_request(b"GET /%ff HTTP/1.1"), Err(400));
        assert_eq!(parse_request(b"\xff\xfe"), Err(400));
        let many_headers = format!(
            "GET / HTTP/1.1\r\n{}",
            "a: b\r\n".repeat(HTTP_MAX_HEADERS + 1)
        );
        assert_eq!(parse_request(many_headers.as_bytes()), Err(431));
        let many_params = format!(
            "GET /?{} HTTP/1.1",
            "a=b&".repeat(HTTP_MAX_QUERY_PARAMS + 1)
        );
        // Repeated keys collapse, so use distinct ones.
        assert!(parse_request(many_params.as_bytes()).is_ok());
        let distinct: Vec<String> = (0..=HTTP_MAX_QUERY_PARAMS)
            .map(|i| format!("k{i}=v"))
            .collect();
        let distinct = format!("GET /?{} HTTP/1.1", distinct.join("&"));
        assert_eq!(parse_request(distinct.as_bytes()), Err(400));
    }

    #[test]
    fn head_end_is_found_with_crlf_or_lf() {
        assert_eq!(
            find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"),
            Some(20)
        );
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("%"), None);
        assert_eq!(percent_decode("%4"), None);
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
    }
}

/// The HTTP routes against a real broker on a temporary directory, with a
/// stand-in group source: what the console and `/metrics` show about lag
/// follows the committed offsets.
#[cfg(test)]
mod broker_tests {
    use parking_lot::Mutex;

    use tarn_coordinator::group_lag::{
        CommittedOffset, GroupLagSource, GroupMember, GroupOverview,
    };
    use tarn_protocol::record_batch::build_batch_for_tests;

    use super::*;

    #[derive(Default)]
    struct FakeGroups {
        committed: Mutex<i64>,
    }

    impl GroupLagSource for FakeGroups {
        fn groups(&self) -> Vec<GroupOverview> {
            vec![GroupOverview {
                group_id: "billing".into(),
                state: "Stable".into(),
                protocol_type: "consumer".into(),
                members: vec![GroupMember {
                    member_id: "m-1".into(),
                    client_id: "svc".into(),
                    client_host: "/127.0.0.1".into(),
                    assignment: vec![("orders".into(), 0)],
                }],
            }]
        }

        fn committed_offsets(&self) -> Vec<CommittedOffset> {
            vec![
                CommittedOffset {
                    group: "billing".into(),
                    topic: "orders".into(),
                    partition: 0,
                    committed_offset: *self.committed.lock(),
                },
                // Offsets of partitions this broker does not host are skipped.
                CommittedOffset {
                    group: "billing".into(),
                    topic: "gone".into(),
                    partition: 0,
                    committed_offset: 5,
                },
            ]
        }
    }

    fn get(state: &HttpState, target: &str) -> Response {
        let head = format!("GET {target} HTTP/1.1\r\n");
        route(state, &parse_request(head.as_bytes()).unwrap())
    }

    fn body(response: &Response) -> String {
        assert_eq!(
            response.status,
            200,
            "{:?}",
            String::from_utf8_lossy(&response.body)
        );
        String::from_utf8(response.body.to_vec()).unwrap()
    }

    #[test]
    fn lag_follows_commits_in_metrics_console_and_series() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "orders", 1);
        let partition = broker.replicas.get("orders", 0).unwrap();
        crate::testing::append_now(&partition, &build_batch_for_tests(0, 10, 1_000));
        let groups = Arc::new(FakeGroups::default());
        *groups.committed.lock() = 4;
        let state = HttpState {
            broker: broker.clone(),
            groups: groups.clone(),
        };

        let metrics = body(&get(&state, "/metrics"));
        let series = r#"{group="billing",topic="orders",partition="0"}"#;
        assert!(
            metrics.contains(&format!("tarn_group_lag{series} 6\n")),
            "{metrics}"
        );
        assert!(metrics.contains(&format!("tarn_group_committed_offset{series} 4\n")));
        assert!(!metrics.contains("topic=\"gone\""));
        crate::metrics::tests::check_exposition_format(&metrics);
        let page: serde_json::Value =
            serde_json::from_str(&body(&get(&state, "/api/groups"))).unwrap();
        let group = &page["groups"][0];
        assert_eq!(group["group_id"], "billing");
        assert_eq!(group["state"], "Stable");
        assert_eq!(group["members"][0]["client_id"], "svc");
        assert_eq!(group["partitions"][0]["lag"], 6);
        assert_eq!(group["total_lag"], 6);
        crate::metrics::sample(&broker, groups.as_ref());

        // The consumer commits further: lag drops everywhere.
        *groups.committed.lock() = 9;
        let metrics = body(&get(&state, "/metrics"));
        assert!(
            metrics.contains(&format!("tarn_group_lag{series} 1\n")),
            "{metrics}"
        );
        let page: serde_json::Value =
            serde_json::from_str(&body(&get(&state, "/api/groups"))).unwrap();
        assert_eq!(page["groups"][0]["partitions"][0]["lag"], 1);
        crate::metrics::sample(&broker, groups.as_ref());
        let series: serde_json::Value =
            serde_json::from_str(&body(&get(&state, "/api/series"))).unwrap();
        let last = series["points"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["total_lag"], 1);
        assert_eq!(last["group_lag"][0], serde_json::json!(["billing", 1]));
        let overview: serde_json::Value =
            serde_json::from_str(&body(&get(&state, "/api/overview"))).unwrap();
        assert_eq!(overview["groups"], 1);
        assert_eq!(overview["total_lag"], 1);
        assert_eq!(overview["records"], 10);

        // The topic pages see the same log.
        let topics: serde_json::Value =
            serde_json::from_str(&body(&get(&state, "/api/topics"))).unwrap();
        assert_eq!(topics[0]["name"], "orders");
        assert_eq!(topics[0]["records"], 10);
        let records: serde_json::Value = serde_json::from_str(&body(&get(
            &state,
            "/api/records?topic=orders&partition=0&limit=3",
        )))
        .unwrap();
        let rows = records["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["offset"], 7);
        assert_eq!(rows[2]["value"]["text"], "v9");
        assert_eq!(
            get(&state, "/api/records?topic=orders&partition=3").status,
            404
        );
        broker.shutdown().unwrap();
    }
}
