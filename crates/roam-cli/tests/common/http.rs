//! A minimal HTTP/1.0 client for the tests that scrape `/metrics` from node processes, and a
//! finder of consecutive free loopback ports (node r of a launched job serves on PORT + r).
//! Plain `TcpStream` on purpose: one GET with a deadline needs no HTTP crate.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// The header every scrape by a Prometheus server carries; only requests with it count for
/// `ROAM_METRICS_HOLD`.
pub const PROMETHEUS_HEADER: &str = "X-Prometheus-Scrape-Timeout-Seconds: 10";

/// The first of `n` consecutive loopback ports that were free a moment ago.
pub fn free_ports(n: u16) -> u16 {
    for _ in 0..100 {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port.checked_add(n - 1).is_some()
            && (1..n).all(|i| TcpListener::bind(("127.0.0.1", port + i)).is_ok())
        {
            return port;
        }
    }
    panic!("no {n} consecutive free ports on loopback");
}

/// `GET path` on `addr` over HTTP/1.0 with the extra `headers` (`Name: value` lines): the
/// status code and body, or why not.
pub fn get_with(addr: SocketAddr, path: &str, headers: &[&str]) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}\r\n")
        .map_err(|e| format!("write to {addr}: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}: no header end in {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{addr}: bad status line {head:?}"))?;
    Ok((status, body.to_string()))
}

/// `GET path` on `addr` with no extra header (see [`get_with`]).
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    get_with(addr, path, &[])
}

/// The value of the sample `name{labels}` in a Prometheus text body, if present.
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}
