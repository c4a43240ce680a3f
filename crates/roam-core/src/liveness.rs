//! Failure detection in virtual or real time: heartbeats and silence timeouts, as timers of
//! the sans-IO core.
//!
//! The core never reads a clock: every input carries `now`, [`Node::poll_timeout`] says when the
//! core next needs to run, and the shell calls [`Node::handle_timeout`] at (or after) that time.
//! Each peer link is kept busy from this side — a `Heartbeat` goes out when nothing else was
//! sent to the peer for [`Liveness::heartbeat_every`] — and a peer from which nothing at all
//! arrived for [`Liveness::silent_after`] is declared lost, exactly as if its connection had
//! broken: the operations that needed it fail with [`crate::OpError::PeerGone`] naming it.
//!
//! A joining node times no member (it is none of theirs yet); it gives its join up once the
//! coordinator sent it nothing — no welcome, none of the heartbeats the coordinator sends the
//! joins it holds — for the silence timeout.
//!
//! Invariants: detection starts only once the shell says the links are up
//! ([`Node::start_liveness`]), so a slow start-up is not mistaken for silence; the timer state
//! covers the directory's members only, and a lost member is never timed again.

use std::collections::BTreeMap;

use crate::id::NodeId;
use crate::membership::JoinRefusal;
use crate::msg::encode;
use crate::node::{Node, Time};
use crate::wire::Kind;

/// How peers are watched (durations in nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// Send a heartbeat to a peer when nothing else was sent to it for this long.
    pub heartbeat_every: u64,
    /// Declare a peer lost when nothing arrived from it for this long.
    pub silent_after: u64,
}

impl Liveness {
    /// Heartbeats at a quarter of the silence timeout, so that three may be late or lost before
    /// a live peer is suspected.
    pub fn with_timeout(silent_after: u64) -> Self {
        Self {
            heartbeat_every: (silent_after / 4).max(1),
            silent_after,
        }
    }
}

/// Per-peer timer state.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// When something last arrived from each peer (present once detection started).
    heard: BTreeMap<NodeId, Time>,
    /// When something was last sent to each peer.
    sent: BTreeMap<NodeId, Time>,
    /// Detection started ([`Node::start_liveness`]).
    started: bool,
}

impl Timers {
    pub(crate) fn heard(&mut self, from: NodeId, now: Time) {
        if let Some(t) = self.heard.get_mut(&from) {
            *t = (*t).max(now);
        }
    }

    pub(crate) fn sent(&mut self, to: NodeId, now: Time) {
        if let Some(t) = self.sent.get_mut(&to) {
            *t = (*t).max(now);
        }
    }

    /// Heartbeats `joiner`, which is no member yet (its join is held at the coordinator), and
    /// does not time its silence: a joiner sends nothing until it is admitted.
    pub(crate) fn heartbeat_joiner(&mut self, joiner: NodeId, now: Time) {
        self.sent.entry(joiner).or_insert(now);
    }

    pub(crate) fn forget(&mut self, peer: NodeId) {
        self.heard.remove(&peer);
        self.sent.remove(&peer);
    }
}

impl Node {
    /// Starts failure detection (if configured): from `now` on, every other member must be heard
    /// from within the silence timeout. The shell calls it once its links to every peer are up.
    pub fn start_liveness(&mut self, now: Time) {
        if self.cfg.liveness.is_none() {
            return;
        }
        self.clock = self.clock.max(now);
        self.timers.started = true;
        self.watch_members(now);
    }

    /// Times every member not timed yet (after the start, and when members join), once
    /// detection has started.
    pub(crate) fn watch_members(&mut self, now: Time) {
        // A joining node times nobody before its welcome: it is no member of theirs yet, and
        // its heartbeats would be frames from a stranger.
        if self.cfg.liveness.is_none() || !self.timers.started || !self.is_member() {
            return;
        }
        let me = self.cfg.id;
        for &peer in self.dir.members() {
            if peer != me && !self.lost.contains(&peer) {
                self.timers.heard.entry(peer).or_insert(now);
                self.timers.sent.entry(peer).or_insert(now);
            }
        }
    }

    /// When the core next needs [`Node::handle_timeout`], if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Time> {
        [
            self.replica_timeout(),
            self.share_timeout(),
            self.defer_timeout(),
            self.liveness_timeout(),
            self.load_timeout(),
            self.barrier_wait_timeout(),
            self.dynamic_timeout(),
            self.loss_flush_timeout(),
            self.join_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn liveness_timeout(&self) -> Option<Time> {
        let liveness = self.cfg.liveness?;
        let heartbeat = self
            .timers
            .sent
            .values()
            .map(|t| t.0.saturating_add(liveness.heartbeat_every));
        let silence = self
            .timers
            .heard
            .values()
            .map(|t| t.0.saturating_add(liveness.silent_after));
        heartbeat.chain(silence).min().map(Time)
    }

    /// Runs the timers due at `now`: sends heartbeats, declares silent peers lost.
    pub fn handle_timeout(&mut self, now: Time) {
        self.tick(now);
        self.replica_handle_timeout(now);
        self.share_handle_timeout(now);
        self.defer_handle_timeout(now);
        self.load_handle_timeout(now);
        self.barrier_wait_handle_timeout(now);
        self.dynamic_handle_timeout(now);
        self.loss_flush_handle_timeout(now);
        self.join_handle_timeout(now);
        self.recheck_cut();
        let Some(liveness) = self.cfg.liveness else {
            return;
        };
        let silent: Vec<NodeId> = self
            .timers
            .heard
            .iter()
            .filter(|(_, t)| now.0 >= t.0.saturating_add(liveness.silent_after))
            .map(|(&peer, _)| peer)
            .collect();
        for peer in silent {
            self.handle_peer_lost(now, peer);
        }
        let idle: Vec<NodeId> = self
            .timers
            .sent
            .iter()
            .filter(|(_, t)| now.0 >= t.0.saturating_add(liveness.heartbeat_every))
            .map(|(&peer, _)| peer)
            .collect();
        for peer in idle {
            let me = self.cfg.id;
            self.send(peer, encode::control(Kind::Heartbeat, me, 0));
        }
    }

    /// A joining node heard from its coordinator (or starts its join): the silence timeout
    /// runs from now.
    pub(crate) fn heard_while_joining(&mut self, now: Time) {
        if let Some(liveness) = self.cfg.liveness {
            self.membership.join_deadline = Some(Time(now.0.saturating_add(liveness.silent_after)));
        }
    }

    /// When a join counts as unanswered, if this node is joining under failure detection.
    pub(crate) fn join_timeout(&self) -> Option<Time> {
        self.membership.early.as_ref()?;
        self.membership.join_deadline
    }

    /// Gives the join up if the coordinator stayed silent past the deadline.
    pub(crate) fn join_handle_timeout(&mut self, now: Time) {
        let (Some(deadline), Some(liveness)) = (self.join_timeout(), self.cfg.liveness) else {
            return;
        };
        if now >= deadline {
            self.refuse_join(JoinRefusal::Unanswered {
                coordinator: self.dir.coordinator(),
                silent_ns: liveness.silent_after,
            });
        }
    }
}
