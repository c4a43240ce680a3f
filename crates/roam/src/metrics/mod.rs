//! Prometheus metrics of one node: `/metrics` over HTTP, in the Prometheus/OpenMetrics text
//! format written by the `prometheus-client` crate (see `docs/metrics.md`).
//!
//! Nothing here runs on the worker hot path. The series are read at scrape time by a collector
//! (`collector.rs`) from what the node already counts: the core's counters and latency
//! histograms, the workers' own local-access counters (relaxed loads of atomics that only their
//! worker writes), each link's traffic counters ([`PeerTraffic`], bumped where frames are
//! written and read) and queue lengths. The only new recording is on paths that already send
//! or receive messages (per-peer traffic, the latency of operations that needed messages) and
//! around checkpoints.
//!
//! The server is one `tiny_http` listener thread: scrapes are rare and small, and the node
//! runs on std threads with no async runtime to share.
//!
//! Invariants:
//! - The listener is bound (or the start fails with an error naming the address) before the
//!   node reports itself started; port 0 is refused, since a scraper must know the port.
//! - A scrape takes the node lock only for short reads (latency histograms, staleness
//!   quantiles), never across I/O: the body is encoded into a string first, then written.

mod collector;
mod server;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use roam_core::wire::Kind;

pub use server::{
    MetricsError, ROAM_METRICS_ADDR, ROAM_METRICS_HOLD, launch_addr, parse_addr, with_rank_offset,
};
pub(crate) use server::{MetricsServer, bind, settings, spawn};

/// Frame kinds counted apart ([`Kind`] values are below this; a larger one would count with
/// the last).
const KIND_SLOTS: usize = 64;

/// Frames and bytes exchanged with one peer (a link's counters; relaxed atomics, exact once
/// the node is quiet).
#[derive(Debug)]
pub(crate) struct PeerTraffic {
    pub(crate) frames_sent: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) frames_received: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    /// Frames and bytes sent, by the frame's kind: which part of the protocol the traffic is
    /// (intent sharing's grants, leaves and rounds, relocations, pulls).
    sent_by_kind: [[AtomicU64; 2]; KIND_SLOTS],
}

impl Default for PeerTraffic {
    fn default() -> Self {
        Self {
            frames_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            frames_received: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            sent_by_kind: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
        }
    }
}

impl PeerTraffic {
    /// Counts one frame of `kind` and `bytes` written to the peer.
    pub(crate) fn sent(&self, kind: Kind, bytes: usize) {
        self.frames_sent.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        let [frames, kind_bytes] = &self.sent_by_kind[(kind as usize).min(KIND_SLOTS - 1)];
        frames.fetch_add(1, Ordering::Relaxed);
        kind_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Adds the frames and bytes sent to the peer, by kind name, into `into`.
    pub(crate) fn add_sent_by_kind(&self, into: &mut BTreeMap<String, [u64; 2]>) {
        for (code, [frames, bytes]) in self.sent_by_kind.iter().enumerate() {
            let frames = frames.load(Ordering::Relaxed);
            if frames == 0 {
                continue;
            }
            let name = u8::try_from(code)
                .ok()
                .and_then(Kind::from_u8)
                .map_or_else(|| format!("kind {code}"), |kind| format!("{kind:?}"));
            let entry = into.entry(name).or_default();
            entry[0] += frames;
            entry[1] += bytes.load(Ordering::Relaxed);
        }
    }

    /// Counts one frame of `bytes` read from the peer (only its reader thread calls this).
    pub(crate) fn received(&self, bytes: usize) {
        roam_core::stats::bump(&self.frames_received, 1);
        roam_core::stats::bump(&self.bytes_received, bytes as u64);
    }
}

/// Durations of the checkpoints this node wrote, as a Prometheus histogram.
#[derive(Debug)]
pub(crate) struct CheckpointTimes(prometheus_client::metrics::histogram::Histogram);

impl Default for CheckpointTimes {
    fn default() -> Self {
        // 10 ms to ~160 s: a checkpoint writes every key this node holds.
        let buckets = prometheus_client::metrics::histogram::exponential_buckets(0.01, 2.0, 15);
        Self(prometheus_client::metrics::histogram::Histogram::new(
            buckets,
        ))
    }
}

impl CheckpointTimes {
    /// Notes one checkpoint that took `secs` (called by the worker that wrote the shard).
    pub(crate) fn observe(&self, secs: f64) {
        self.0.observe(secs);
    }
}
