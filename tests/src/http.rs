//! The broker's HTTP listener from tests: one request per connection, and
//! samples read out of `/metrics` (Prometheus text format).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::TarnBroker;

/// One HTTP/1.1 GET (or another method) over a fresh connection; returns
/// the status and body. The server closes the connection after answering.
pub fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    raw_http(
        addr,
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
}

/// Sends `request` as it is and reads the response until the server closes.
pub fn raw_http(addr: &str, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("set a read timeout");
    stream.write_all(request).expect("send the HTTP request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the HTTP response");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The whole `/metrics` page, asserting a 200.
pub fn scrape(broker: &TarnBroker) -> String {
    let (status, body) = http(broker.http_addr(), "GET", "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the sample `series` (name plus exact label set), e.g.
/// `tarn_topic_records_in_total{topic="t"}`.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        Some(value.parse().expect("numeric sample"))
    })
}

/// Like [`sample`], panicking with the page when the series is missing.
pub fn must(metrics: &str, series: &str) -> f64 {
    sample(metrics, series).unwrap_or_else(|| panic!("no sample {series} in\n{metrics}"))
}
