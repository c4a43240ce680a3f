//! Placement policies: the decisions about where keys are held, behind one interface.
//!
//! The mechanism — directory, placement records, relocation, home moves, routing — lives in
//! the node; a [`Policy`] only decides: whether a requested relocation happens, whether keys
//! can be anywhere but their first home, whether requesters may route by where they last saw a
//! key. Static allocation and Lapse are the policies today; NuPS (per-key replication), AdaPM
//! (intent-driven relocation and replication) and a load balancer (home moves) plug in here.
//!
//! Invariant: a policy is a deterministic function of its seed and the calls it received, so a
//! simulated run replays exactly from its seed.

use std::fmt;

use crate::id::{Key, NodeId};

/// Where keys should be held: the questions the mechanism asks.
pub trait Policy: fmt::Debug + Send {
    /// The policy's name in reports.
    fn name(&self) -> &'static str;

    /// Whether a key can be held elsewhere than its first home. If so, after a peer is lost
    /// any key may have been on it.
    fn keys_move(&self) -> bool;

    /// A worker of node `requester` asked for `key` to be local (`localize`): whether to move
    /// it there.
    fn relocate_on_localize(&mut self, key: Key, requester: NodeId) -> bool;

    /// Whether requesters send straight to where a key was last seen (a hint: a stale entry
    /// costs a hop through the home).
    fn location_caches(&self) -> bool;
}

/// The policies a node can be configured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// A classic parameter server: keys stay at their home; `localize` is a no-op.
    Static,
    /// Lapse: `localize` moves keys to the requester, optionally with location caches.
    Lapse {
        /// Whether requesters keep location caches.
        location_caches: bool,
    },
}

impl PolicyKind {
    /// The policy, seeded with `seed` (for policies that draw random numbers).
    pub fn build(self, seed: u64) -> Box<dyn Policy> {
        let _ = seed; // Static and Lapse draw none.
        match self {
            Self::Static => Box::new(Static),
            Self::Lapse { location_caches } => Box::new(Lapse { location_caches }),
        }
    }

    /// Whether keys can move under this policy.
    pub fn keys_move(self) -> bool {
        matches!(self, Self::Lapse { .. })
    }
}

/// Keys stay at their home.
#[derive(Debug)]
struct Static;

impl Policy for Static {
    fn name(&self) -> &'static str {
        "static"
    }

    fn keys_move(&self) -> bool {
        false
    }

    fn relocate_on_localize(&mut self, _key: Key, _requester: NodeId) -> bool {
        false
    }

    fn location_caches(&self) -> bool {
        false
    }
}

/// Keys move to whoever localizes them.
#[derive(Debug)]
struct Lapse {
    location_caches: bool,
}

impl Policy for Lapse {
    fn name(&self) -> &'static str {
        "lapse"
    }

    fn keys_move(&self) -> bool {
        true
    }

    fn relocate_on_localize(&mut self, _key: Key, _requester: NodeId) -> bool {
        true
    }

    fn location_caches(&self) -> bool {
        self.location_caches
    }
}
