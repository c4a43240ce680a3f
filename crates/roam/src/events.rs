//! Log events for what the protocol core did with a received frame: keys that arrived or left
//! by relocation, and requests forwarded towards a key's owner, each with the node, the peer
//! the frame came from and the key or frame count (target `roam::protocol`, level debug).
//!
//! The core does no I/O; the shell reads the core's counters before and after the frame,
//! under the node lock (so the differences are that frame's alone), and only when the
//! target's debug level is enabled: otherwise the cost is one check of the callsite's cached
//! interest per received frame. Local accesses never get here.
//!
//! Also here, always: the service statistics of peers' pulls and pushes ([`Handled`]: keys
//! served, read before and after each such frame under the lock, and the core's time on it),
//! which the readers add to the node's counters (`roam_core::load_service`).

use std::time::{Duration, Instant};

use roam_core::stats::NodeCounters;
use roam_core::wire::{Frame, Kind};
use roam_core::{Node, NodeId, Time};
use std::sync::atomic::Ordering;

use crate::runtime::Shared;

/// The target of these events (`RUST_LOG=roam::protocol=debug`; `roam=debug` includes it).
const TARGET: &str = "roam::protocol";

/// The counters the events are about: relocations in, relocations out, forwards.
fn snapshot(c: &NodeCounters) -> [u64; 3] {
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    [
        get(&c.relocations_in),
        get(&c.relocations_out),
        get(&c.forwards),
    ]
}

/// Feeds `frames` from `from` to the core in order, under one hold of the node lock when no
/// events are logged, so that their outputs leave in one write per link (the reader found them
/// all buffered: a burst needs one wake-up of the peer, not one per frame). Leaves `frames`
/// empty.
pub(crate) fn handle_frames(shared: &Shared, from: NodeId, frames: &mut Vec<Frame>) -> Handled {
    if frames.len() == 1 || tracing::enabled!(target: TARGET, tracing::Level::DEBUG) {
        let mut all: Option<Handled> = None;
        for frame in frames.drain(..) {
            let (one, _) = handle_frame(shared, from, frame, false);
            let all = all.get_or_insert(Handled {
                served: 0,
                serving: Duration::ZERO,
                ..one
            });
            all.served += one.served;
            all.serving += one.serving;
        }
        return all.unwrap_or(Handled::new(Instant::now()));
    }
    shared.with_node(|node, now| {
        let mut handled = Handled::new(Instant::now());
        for frame in frames.drain(..) {
            handled.feed(node, now, from, frame);
        }
        handled
    })
}

/// What feeding frames to the core did, for the node's service statistics
/// (`roam_core::load_service`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handled {
    /// When the node lock was first held for them.
    pub(crate) locked_at: Instant,
    /// Keys they served here (the core counts them under the node lock, so the difference
    /// across one frame's handling is exactly that frame's).
    pub(crate) served: u64,
    /// Time the core took for the frames that served keys (not for answers to this node's own
    /// requests, forwards, replica sync or relocations).
    pub(crate) serving: Duration,
}

impl Handled {
    fn new(locked_at: Instant) -> Self {
        Self {
            locked_at,
            served: 0,
            serving: Duration::ZERO,
        }
    }

    /// Feeds one frame to the core (the node lock held), timing it if it is a peer's pull or
    /// push that served keys here (not a relocation that answered queued requests: its time
    /// is mostly the relocation's).
    fn feed(&mut self, node: &mut Node, now: Time, from: NodeId, frame: Frame) {
        if !matches!(frame.header.kind, Kind::Pull | Kind::Push) {
            node.handle_frame(now, from, frame);
            return;
        }
        let (before, start) = (served_keys(node), Instant::now());
        node.handle_frame(now, from, frame);
        let served = served_keys(node) - before;
        if served > 0 {
            self.served += served;
            self.serving += start.elapsed();
        }
    }
}

fn served_keys(node: &Node) -> u64 {
    node.counters().served_keys.load(Ordering::Relaxed)
}

/// Feeds `frame` from `from` to the core, logging what it moved or forwarded. Returns what it
/// did for the service statistics and, with `timed`, how long the core took (under the node
/// lock, without waiting for it).
pub(crate) fn handle_frame(
    shared: &Shared,
    from: NodeId,
    frame: Frame,
    timed: bool,
) -> (Handled, Option<Duration>) {
    let core = |node: &mut Node, now, frame| {
        let mut handled = Handled::new(Instant::now());
        handled.feed(node, now, from, frame);
        (handled, timed.then(|| handled.locked_at.elapsed()))
    };
    if !tracing::enabled!(target: TARGET, tracing::Level::DEBUG) {
        return shared.with_node(|node, now| core(node, now, frame));
    }
    let kind = frame.header.kind;
    let (before, took, after) = shared.with_node(|node, now| {
        let before = snapshot(node.counters());
        let took = core(node, now, frame);
        (before, took, snapshot(node.counters()))
    });
    let [keys_in, keys_out, forwards] = [0, 1, 2].map(|i| after[i] - before[i]);
    let (node, peer) = (shared.rank.0, from.0);
    if keys_in > 0 {
        tracing::debug!(target: TARGET, node, peer, keys = keys_in, "relocation: keys arrived");
    }
    if keys_out > 0 {
        tracing::debug!(
            target: TARGET,
            node,
            peer,
            keys = keys_out,
            "relocation: keys moved away on the peer's request"
        );
    }
    if forwards > 0 {
        tracing::debug!(
            target: TARGET,
            node,
            peer,
            frames = forwards,
            kind = ?kind,
            "forwarded the peer's request towards the keys' owner"
        );
    }
    took
}
