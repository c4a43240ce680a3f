//! A node's *interest* in each key: how many intents of its workers are active on the key
//! right now (acted on, end clock not yet reached). Workers change it without the node lock
//! (one atomic add per key per intent); the protocol reads it when it decides whether the
//! owner of a key several nodes want shares it or gives it away (`share/mod.rs`), and whether a
//! replica this node holds by intent is still wanted.
//!
//! Dense key spaces count exactly, one `u32` per key. Sparse key spaces (and dense ones too
//! large for a counter per key) count in a fixed table of [`HASHED_SLOTS`] counters indexed by
//! a hash of the key: keys that share a slot add up, so a key may look wanted when only its
//! neighbour in the table is. That only errs one way — a replica kept a little longer, a key
//! shared instead of moved — never a lost update: the protocol is correct for any interest.
//!
//! Invariant: every `add` is matched by exactly one `sub` (the worker's intent bookkeeping,
//! `intent.rs`, releases every acted intent once), so counts never go below zero and return
//! to zero once every worker is done.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::directory::mix64;
use crate::id::Key;
use crate::keyspace::KeySpace;

/// Counters of the hashed table (sparse key spaces).
pub const HASHED_SLOTS: usize = 1 << 20;

/// Largest dense key space counted exactly (4 bytes per key).
const MAX_EXACT_KEYS: u64 = 1 << 28;

/// The counter bit the protocol sets while this node owns the key and shares it, so that the
/// worker whose release ends the node's interest hands the key to the protocol (which may pass
/// the key on to its sole sharer: `share/sync.rs`). The other bits count intents.
const SHARED: u32 = 1 << 31;

/// Per-key interest counts of one node. See the module docs.
#[derive(Debug)]
pub struct Interest {
    counts: Box<[AtomicU32]>,
    exact: bool,
}

impl Interest {
    /// Counters for `space`, all zero.
    pub fn new(space: &KeySpace) -> Self {
        let exact = !space.is_sparse() && space.num_keys() <= MAX_EXACT_KEYS;
        let len = if exact {
            space.num_keys() as usize
        } else {
            HASHED_SLOTS
        };
        Self {
            counts: (0..len).map(|_| AtomicU32::new(0)).collect(),
            exact,
        }
    }

    #[inline]
    fn slot(&self, key: Key) -> &AtomicU32 {
        let at = if self.exact {
            key as usize
        } else {
            (mix64(key) % HASHED_SLOTS as u64) as usize
        };
        &self.counts[at]
    }

    /// One more active intent on `key`.
    #[inline]
    pub fn add(&self, key: Key) {
        self.slot(key).fetch_add(1, Ordering::AcqRel);
    }

    /// One intent on `key` ended. Returns whether none is active any more, and whether this
    /// node owns the key and shares it (see [`Interest::mark_shared`]).
    #[inline]
    pub fn sub(&self, key: Key) -> (bool, bool) {
        let before = self.slot(key).fetch_sub(1, Ordering::AcqRel);
        debug_assert!(
            before & !SHARED > 0,
            "interest in key {key} released more than added"
        );
        (before & !SHARED == 1, before & SHARED != 0)
    }

    /// Whether an intent on `key` is active on this node now.
    #[inline]
    pub fn wanted(&self, key: Key) -> bool {
        self.slot(key).load(Ordering::Acquire) & !SHARED > 0
    }

    /// Protocol: marks `key` as owned here and shared, or not any more (a hint: hashed tables
    /// may mark a neighbour too, which only hands a key to the protocol for nothing).
    pub fn mark_shared(&self, key: Key, shared: bool) {
        if shared {
            self.slot(key).fetch_or(SHARED, Ordering::AcqRel);
        } else {
            self.slot(key).fetch_and(!SHARED, Ordering::AcqRel);
        }
    }

    /// Whether counts are exact per key (else hashed, see the module docs).
    pub fn is_exact(&self) -> bool {
        self.exact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_counts_are_exact_and_return_to_zero() {
        let interest = Interest::new(&KeySpace::uniform(10, 1).unwrap());
        assert!(interest.is_exact());
        interest.add(3);
        interest.add(3);
        assert!(interest.wanted(3) && !interest.wanted(4));
        assert_eq!(interest.sub(3), (false, false));
        interest.mark_shared(3, true);
        assert!(interest.wanted(3), "the flag is no intent");
        assert_eq!(interest.sub(3), (true, true));
        assert!(!interest.wanted(3));
        interest.mark_shared(3, false);
        interest.add(3);
        assert_eq!(interest.sub(3), (true, false));
    }

    #[test]
    fn sparse_counts_are_hashed() {
        let interest = Interest::new(&KeySpace::sparse(2).unwrap());
        assert!(!interest.is_exact());
        interest.add(u64::MAX - 7);
        assert!(interest.wanted(u64::MAX - 7));
        assert_eq!(interest.sub(u64::MAX - 7), (true, false));
        assert!(!interest.wanted(u64::MAX - 7));
    }
}
