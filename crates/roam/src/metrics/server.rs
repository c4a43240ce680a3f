//! The `/metrics` endpoint: where it listens (`--metrics-addr`, `ROAM_METRICS_ADDR`, offset by
//! rank under `roam launch`), the listener thread, and the optional hold at shutdown
//! (`ROAM_METRICS_HOLD`) that keeps a finished node answering until Prometheus has scraped it.
//!
//! Invariants:
//! - A request for any other path gets 404; only GET and HEAD are answered.
//! - Scrapes by a Prometheus server are told apart by the `X-Prometheus-Scrape-Timeout-Seconds`
//!   header every Prometheus scrape carries; only those count for the hold, so a person's curl
//!   does not end it.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use prometheus_client::registry::Registry;

use super::collector::NodeCollector;
use crate::runtime::Shared;

/// Where a node serves `/metrics` (`HOST:PORT`); `roam launch` sets it per node, with the port
/// offset by the rank.
pub const ROAM_METRICS_ADDR: &str = "ROAM_METRICS_ADDR";
/// Scrapes by Prometheus a finished node waits for before it exits (see
/// [`crate::Config::metrics_hold_scrapes`]).
pub const ROAM_METRICS_HOLD: &str = "ROAM_METRICS_HOLD";

/// The OpenMetrics text format that `prometheus_client::encoding::text` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for clients that do not ask for OpenMetrics.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The header every scrape by a Prometheus server carries.
const PROMETHEUS_HEADER: &str = "X-Prometheus-Scrape-Timeout-Seconds";

/// Why the metrics endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address is not `HOST:PORT`, or its host does not resolve.
    #[error("metrics address {addr:?}: {reason}")]
    BadAddr {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing could be bound there (in use, not a local address, no permission).
    #[error("metrics address {addr}: cannot listen: {reason}")]
    Bind {
        /// The resolved address.
        addr: SocketAddr,
        /// The OS's reason.
        reason: String,
    },
    /// `ROAM_METRICS_HOLD` is not a number.
    #[error("{ROAM_METRICS_HOLD}={value:?}: expected a number of scrapes")]
    BadHold {
        /// The value given.
        value: String,
    },
}

/// Resolves `addr` (`HOST:PORT`, HOST an IP or a name) to the address to listen on. Port 0
/// is refused: Prometheus must be told the port in advance.
pub fn parse_addr(addr: &str) -> Result<SocketAddr, MetricsError> {
    let bad = |reason: String| MetricsError::BadAddr {
        addr: addr.to_string(),
        reason,
    };
    let resolved = addr
        .to_socket_addrs()
        .map_err(|e| bad(format!("expected HOST:PORT ({e})")))?
        .next()
        .ok_or_else(|| bad("the host resolves to no address".into()))?;
    if resolved.port() == 0 {
        return Err(bad(
            "port 0 is not allowed: a scraper has to know the port".into()
        ));
    }
    Ok(resolved)
}

/// `addr` with its port increased by `rank` (what `roam launch` gives node `rank`), keeping
/// the host as written.
pub fn with_rank_offset(addr: &str, rank: u32) -> Result<String, MetricsError> {
    let bad = |reason: String| MetricsError::BadAddr {
        addr: addr.to_string(),
        reason,
    };
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| bad("expected HOST:PORT".into()))?;
    let port: u16 = port
        .parse()
        .map_err(|_| bad(format!("port {port:?} is not a number from 1 to 65535")))?;
    if port == 0 {
        return Err(bad(
            "port 0 is not allowed: a scraper has to know the port".into()
        ));
    }
    let offset = u16::try_from(u32::from(port) + rank)
        .map_err(|_| bad(format!("port {port} + rank {rank} is above 65535")))?;
    Ok(format!("{host}:{offset}"))
}

/// For `roam launch`: the metrics address of node `slot` (its rank; joiners follow the
/// initial nodes), its port offset by `slot`, from `base` (`roam launch --metrics-addr`), else
/// from `ROAM_METRICS_ADDR` in the launcher's environment; `None` when neither is set.
pub fn launch_addr(base: Option<&str>, slot: u32) -> Result<Option<String>, MetricsError> {
    let base = match base {
        Some(b) => b.to_string(),
        None => match std::env::var(ROAM_METRICS_ADDR) {
            Ok(addr) if !addr.is_empty() => addr,
            _ => return Ok(None),
        },
    };
    with_rank_offset(&base, slot).map(Some)
}

/// Counts of Prometheus scrapes, and the wakeup of a node holding for them.
#[derive(Default)]
struct Scrapes {
    count: Mutex<u64>,
    more: Condvar,
}

/// A running `/metrics` listener; stops (and joins its thread) when dropped.
pub(crate) struct MetricsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    scrapes: Arc<Scrapes>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until Prometheus has scraped this node `n` times in all, or `limit` passed;
    /// returns the scrapes seen.
    pub(crate) fn hold(&self, n: u64, limit: Duration) -> u64 {
        let deadline = Instant::now() + limit;
        let mut count = self.scrapes.count.lock();
        while *count < n {
            if self
                .scrapes
                .more
                .wait_until(&mut count, deadline)
                .timed_out()
            {
                break;
            }
        }
        *count
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The endpoint settings of a node: [`crate::Config::metrics_addr`] and
/// [`crate::Config::metrics_hold_scrapes`], else their environment variables.
pub(crate) fn settings(
    addr: Option<&str>,
    hold: Option<u64>,
) -> Result<(Option<String>, u64), MetricsError> {
    let addr = match addr {
        Some(a) => Some(a.to_string()),
        None => std::env::var(ROAM_METRICS_ADDR)
            .ok()
            .filter(|a| !a.is_empty()),
    };
    let hold = match hold {
        Some(h) => h,
        None => match std::env::var(ROAM_METRICS_HOLD) {
            Ok(v) if !v.is_empty() => v
                .trim()
                .parse()
                .map_err(|_| MetricsError::BadHold { value: v.clone() })?,
            _ => 0,
        },
    };
    Ok((addr, hold))
}

/// A bound listener not serving yet: bound before the rendezvous, so that an address in use
/// fails the start before any peer waits for this node.
pub(crate) struct Bound {
    server: tiny_http::Server,
    addr: SocketAddr,
}

/// Binds `addr` for the node's metrics.
pub(crate) fn bind(addr: &str) -> Result<Bound, MetricsError> {
    let resolved = parse_addr(addr)?;
    let server = tiny_http::Server::http(resolved).map_err(|e| MetricsError::Bind {
        addr: resolved,
        reason: e.to_string(),
    })?;
    let addr = server.server_addr().to_ip().unwrap_or(resolved);
    Ok(Bound { server, addr })
}

/// Serves this node's metrics on `bound`, on a thread of its own.
pub(crate) fn spawn(shared: &Arc<Shared>, bound: Bound) -> Result<MetricsServer, MetricsError> {
    let Bound {
        server,
        addr: bound,
    } = bound;
    let server = Arc::new(server);
    let mut registry = Registry::with_prefix_and_labels(
        "roam",
        [(
            std::borrow::Cow::Borrowed("rank"),
            std::borrow::Cow::Owned(shared.rank.0.to_string()),
        )]
        .into_iter(),
    );
    registry.register_collector(Box::new(NodeCollector::new(shared)));
    let stopping = Arc::new(AtomicBool::new(false));
    let scrapes = Arc::new(Scrapes::default());
    let thread = {
        let (server, stopping, scrapes) = (server.clone(), stopping.clone(), scrapes.clone());
        let rank = shared.rank.0;
        std::thread::Builder::new()
            .name(format!("roam-metrics-{rank}"))
            .spawn(move || serve(&server, &registry, &stopping, &scrapes, rank))
            .map_err(|e| MetricsError::Bind {
                addr: bound,
                reason: format!("no thread for the listener: {e}"),
            })?
    };
    tracing::info!(node = shared.rank.0, addr = %bound, "metrics: serving /metrics");
    Ok(MetricsServer {
        server,
        addr: bound,
        stopping,
        scrapes,
        thread: Some(thread),
    })
}

fn serve(
    server: &tiny_http::Server,
    registry: &Registry,
    stopping: &AtomicBool,
    scrapes: &Scrapes,
    rank: u32,
) {
    for request in server.incoming_requests() {
        if stopping.load(Ordering::Acquire) {
            return;
        }
        let path = request.url().split('?').next().unwrap_or("").to_string();
        let method = request.method().clone();
        let response = if path != "/metrics" {
            text_response(
                404,
                "text/plain; charset=utf-8",
                "not found: try /metrics\n",
            )
        } else if !matches!(method, tiny_http::Method::Get | tiny_http::Method::Head) {
            text_response(405, "text/plain; charset=utf-8", "only GET /metrics\n")
        } else {
            let openmetrics = request.headers().iter().any(|h| {
                h.field.equiv("Accept") && h.value.as_str().contains("application/openmetrics-text")
            });
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) if openmetrics => text_response(200, OPENMETRICS, &body),
                Ok(()) => text_response(200, PROMETHEUS_TEXT, &to_prometheus_text(&body)),
                Err(_) => text_response(500, "text/plain; charset=utf-8", "encoding failed\n"),
            }
        };
        let by_prometheus = request
            .headers()
            .iter()
            .any(|h| h.field.equiv(PROMETHEUS_HEADER));
        if let Err(err) = request.respond(response) {
            tracing::debug!(node = rank, "metrics: answering a scrape failed: {err}");
        } else if by_prometheus && path == "/metrics" {
            *scrapes.count.lock() += 1;
            scrapes.more.notify_all();
        }
    }
}

/// The crate's OpenMetrics text as classic Prometheus text (format 0.0.4), for clients that
/// did not ask for OpenMetrics (curl, `promtool check metrics`): the samples stay as written;
/// a counter family's `# HELP`/`# TYPE` lines name it with its samples' `_total` suffix (in
/// OpenMetrics they name the family without it), and `# UNIT` and `# EOF` go (no such lines in
/// the classic format).
fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let header = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match header {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let suffix = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{prefix}{name}{suffix} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

fn text_response(
    status: u16,
    content_type: &str,
    body: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let header = tiny_http::Header::from_bytes("Content-Type", content_type)
        .expect("a static header is valid");
    tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_names_counter_families_with_their_suffix() {
        let om = "# HELP roam_ops Ops.\n# TYPE roam_ops counter\nroam_ops_total{rank=\"0\"} 3\n\
                  # HELP roam_nodes Nodes.\n# TYPE roam_nodes gauge\n# UNIT roam_nodes x\n\
                  roam_nodes 1.0\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP roam_ops_total Ops.\n# TYPE roam_ops_total counter\n\
             roam_ops_total{rank=\"0\"} 3\n# HELP roam_nodes Nodes.\n# TYPE roam_nodes gauge\n\
             roam_nodes 1.0\n"
        );
    }

    #[test]
    fn ports_are_offset_by_rank_and_bad_addresses_are_named() {
        assert_eq!(
            with_rank_offset("127.0.0.1:9400", 3).unwrap(),
            "127.0.0.1:9403"
        );
        assert_eq!(with_rank_offset("[::1]:9400", 1).unwrap(), "[::1]:9401");
        assert_eq!(with_rank_offset("node-a:80", 0).unwrap(), "node-a:80");
        // `roam launch --metrics-addr` gives the base, whatever the environment says.
        assert_eq!(
            launch_addr(Some("127.0.0.1:9400"), 2).unwrap().as_deref(),
            Some("127.0.0.1:9402")
        );
        assert!(launch_addr(Some("127.0.0.1:0"), 0).is_err());
        for (addr, rank, says) in [
            ("127.0.0.1:65535", 1, "above 65535"),
            ("127.0.0.1:0", 0, "port 0"),
            ("127.0.0.1", 0, "HOST:PORT"),
            ("127.0.0.1:http", 0, "not a number"),
        ] {
            let err = with_rank_offset(addr, rank).unwrap_err().to_string();
            assert!(err.contains(addr) && err.contains(says), "{addr}: {err}");
        }
        let err = parse_addr("127.0.0.1:0").unwrap_err().to_string();
        assert!(
            err.contains("127.0.0.1:0") && err.contains("port 0"),
            "{err}"
        );
        let err = parse_addr("no port").unwrap_err().to_string();
        assert!(err.contains("no port"), "{err}");
        assert_eq!(parse_addr("127.0.0.1:9400").unwrap().port(), 9400);
    }
}
