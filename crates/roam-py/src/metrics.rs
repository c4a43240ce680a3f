//! The Prometheus `/metrics` endpoint from Python: the `metrics_addr` and
//! `metrics_hold_scrapes` arguments of `roam.Node`, and `Node.metrics_addr`, the address the
//! node serves on (`docs/metrics.md`, `docs/python.md`).
//!
//! The endpoint is the Rust node's own ([`roam::Config::metrics_addr`]): Python adds no thread
//! and no server, and a scrape never takes the GIL.
//!
//! Invariants:
//! - An argument left at `None` leaves the setting to the environment, exactly as in Rust:
//!   `ROAM_METRICS_ADDR` (which `roam launch` sets per node, its port plus the rank) and
//!   `ROAM_METRICS_HOLD`.
//! - An address that cannot be served (malformed, port 0, in use) fails the start with
//!   `roam.StartError` naming it, before the rendezvous, so no peer waits for this node.

use roam::{Config, NodeHandle};

/// Puts the `roam.Node` metrics arguments into `cfg` (`None`: the environment decides).
pub(crate) fn configure(cfg: &mut Config, addr: Option<String>, hold_scrapes: Option<u64>) {
    cfg.metrics_addr = addr;
    cfg.metrics_hold_scrapes = hold_scrapes;
}

/// `Node.metrics_addr`: where a running node serves `/metrics` (`HOST:PORT`, the bound
/// address), or `None` without an endpoint or once the node has left.
pub(crate) fn bound_addr(handle: Option<&NodeHandle>) -> Option<String> {
    handle
        .and_then(NodeHandle::metrics_addr)
        .map(|a| a.to_string())
}
