//! Placement records: at a key's home, who holds the key.
//!
//! A node keeps one [`BucketRecords`] per bucket it is home of. A key without a record is held
//! by the bucket's *default owner* (the bucket's first home, which created the key), so a record
//! exists only for keys that moved: the records of a bucket are at most as many as its keys that
//! ever relocated, and handing a bucket to a new home sends only those. A [`Placement`] says how
//! a key is held; [`KeyRecord`] is where what policies learn about a key (intents, access
//! counts) will be kept next to it.
//!
//! Invariants: a node holds the records of exactly the buckets its directory names it home of
//! (installed with the table change that makes it home, dropped with the one that moves the
//! bucket away); the home is the only node that changes a key's placement, so ownership changes
//! of one key are serialised by the home in force.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

use crate::id::{Key, NodeId};
use crate::wire::Frame;

/// How a key is held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One node holds the key's only copy.
    Owned(NodeId),
}

impl Placement {
    /// The node that holds the authoritative copy.
    pub fn owner(&self) -> NodeId {
        match *self {
            Self::Owned(node) => node,
        }
    }
}

/// A key's record at its home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    /// How the key is held.
    pub placement: Placement,
}

/// Whether a bucket's records can be used, or are still arriving at a new home.
#[derive(Debug, Default)]
pub(crate) enum BucketState {
    /// The records are complete and in force.
    #[default]
    Live,
    /// The bucket was handed to this node, but nodes may still have frames for it on their way
    /// through the old home: frames for the bucket wait here until every member has confirmed,
    /// through the old home, that it routes by the new table (see `home_move.rs`).
    MovingIn {
        /// The previous home, through which confirmations and old-table frames arrive.
        old_home: NodeId,
        /// The move's epoch.
        epoch: u32,
        /// Members whose confirmation has arrived.
        confirmed: Vec<NodeId>,
        /// Frames for the bucket forwarded by the old home (sent under the old table), in order.
        via_old: VecDeque<(NodeId, Frame)>,
        /// Frames for the bucket from other senders (sent under the new table), in order.
        direct: VecDeque<(NodeId, Frame)>,
    },
}

/// The records of one bucket at its home.
#[derive(Debug)]
pub(crate) struct BucketRecords {
    /// The holder of every key of the bucket that has no record.
    pub(crate) default_owner: NodeId,
    /// Keys held elsewhere than `default_owner`.
    pub(crate) owners: HashMap<Key, KeyRecord>,
    pub(crate) state: BucketState,
}

impl BucketRecords {
    /// Records of a bucket whose keys are all at `default_owner`.
    pub(crate) fn new(default_owner: NodeId) -> Self {
        Self {
            default_owner,
            owners: HashMap::default(),
            state: BucketState::Live,
        }
    }

    /// The owner of `key`.
    pub(crate) fn owner(&self, key: Key) -> NodeId {
        self.owners
            .get(&key)
            .map_or(self.default_owner, |r| r.placement.owner())
    }

    /// Makes `owner` the owner of `key`; returns the previous owner.
    pub(crate) fn set_owner(&mut self, key: Key, owner: NodeId) -> NodeId {
        let previous = self.owner(key);
        if owner == self.default_owner {
            self.owners.remove(&key);
        } else {
            self.owners.insert(
                key,
                KeyRecord {
                    placement: Placement::Owned(owner),
                },
            );
        }
        previous
    }

    /// Whether frames for this bucket must wait (a home move is completing).
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.state, BucketState::Live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_exist_only_for_keys_away_from_the_default_owner() {
        let mut records = BucketRecords::new(NodeId(0));
        assert_eq!(records.owner(5), NodeId(0));
        assert_eq!(records.set_owner(5, NodeId(2)), NodeId(0));
        assert_eq!(records.owner(5), NodeId(2));
        assert_eq!(records.owners.len(), 1);
        assert_eq!(records.set_owner(5, NodeId(0)), NodeId(2));
        assert!(records.owners.is_empty());
    }
}
