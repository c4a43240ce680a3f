//! A node's *interest* in each key: how many intents of its workers are active on the key
//! right now (acted on, end clock not yet reached). Workers change it without the node lock
//! (one atomic add per key per intent); the protocol reads it when it decides whether the
//! owner of a key several nodes want shares it or gives it away (`share/mod.rs`), and whether a
//! replica this node holds by intent is still wanted.
//!
//! Beside each count the table keeps *until*: the latest time (the node's clock) at which an
//! intent acted on the key is expected to end, from its worker's measured clock rate. The
//! owner of a key that another node wants compares it with when that node will need the key
//! (`share/defer.rs`): if its own use ends first, it moves the key then instead of sharing it.
//! It is a maximum that is never lowered while intents are active, so it can only say too
//! late (the key is shared as before), never too early.
//!
//! Dense key spaces count exactly, one `u32` per key (and one for *until*). Sparse key spaces (and dense ones too
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
use crate::node::Time;

/// Counters of the hashed table (sparse key spaces).
pub const HASHED_SLOTS: usize = 1 << 20;

/// Largest dense key space counted exactly (4 bytes per key).
const MAX_EXACT_KEYS: u64 = 1 << 28;

/// The counter bit the protocol sets while it must hear when the node's interest in the key
/// ends: the key is owned here and shared (the protocol may pass it on to its sole sharer:
/// `share/sync.rs`), or another node's request for it waits for that end (`share/defer.rs`).
/// The worker whose release ends the interest then hands the key to the protocol. Bits 24–29
/// count linger holds ([`LINGERS`]), bits 0–23 intents (at most 16 workers' worth of
/// [`crate::intent::MAX_TRACKED_KEYS`] on one key).
const WATCHED: u32 = 1 << 31;

/// The counter bit the protocol sets while an offer for the key waits for the node's intents
/// on it to end (`share/defer.rs`): the worker that adds an intent then hands the key to the
/// protocol, whose wait may now be in vain.
const DEFERRED: u32 = 1 << 30;

/// One *linger* hold (`intent/linger.rs`): a worker keeps the node's interest in a key after
/// its last intent on it ended. Holds are counted apart from intents, above them: a key only
/// lingering is wanted (its replica stays) but has no use with a known end.
const LINGER_ONE: u32 = 1 << 24;

/// The bits that count linger holds (at most 63; a worker that would need a 64th does not
/// linger).
const LINGERS: u32 = 0x3f << 24;

/// The bits that count active intents.
const INTENTS: u32 = LINGER_ONE - 1;

/// *Until* is kept in units of 2^20 ns (about a millisecond; 32 bits span 52 days, and later
/// times saturate, which only says "too late").
const UNTIL_SHIFT: u32 = 20;

/// Per-key interest counts of one node. See the module docs.
#[derive(Debug)]
pub struct Interest {
    counts: Box<[AtomicU32]>,
    until: Box<[AtomicU32]>,
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
            until: (0..len).map(|_| AtomicU32::new(0)).collect(),
            exact,
        }
    }

    #[inline]
    fn index(&self, key: Key) -> usize {
        if self.exact {
            key as usize
        } else {
            (mix64(key) % HASHED_SLOTS as u64) as usize
        }
    }

    #[inline]
    fn slot(&self, key: Key) -> &AtomicU32 {
        &self.counts[self.index(key)]
    }

    /// One more active intent on `key`, expected to end by `until` (`Time(u64::MAX)`: not
    /// known, or never). Returns whether the protocol waits for this node's intents on the key
    /// to end (see [`Interest::watch_additions`]).
    #[inline]
    pub fn add(&self, key: Key, until: Time) -> bool {
        let at = self.index(key);
        // Rounded up: an end a little later than true only errs towards sharing.
        let units = until.0.div_ceil(1 << UNTIL_SHIFT).min(u64::from(u32::MAX)) as u32;
        // Before the count: a reader that sees the count sees an until at least this late
        // (or an older, later one), never one from before.
        self.until[at].fetch_max(units, Ordering::AcqRel);
        let before = self.counts[at].fetch_add(1, Ordering::AcqRel);
        debug_assert!(before & INTENTS != INTENTS, "intents on key {key} overflow");
        before & DEFERRED != 0
    }

    /// When the intents active on `key` here are expected to end, if any is active: the
    /// latest end of the intents acted on since the key was last without interest, or later.
    #[inline]
    pub fn until(&self, key: Key) -> Option<Time> {
        let at = self.index(key);
        if self.counts[at].load(Ordering::Acquire) & INTENTS == 0 {
            return None;
        }
        let units = self.until[at].load(Ordering::Acquire);
        Some(if units == u32::MAX {
            Time(u64::MAX)
        } else {
            Time(u64::from(units) << UNTIL_SHIFT)
        })
    }

    /// One intent on `key` ended. Returns whether none is active any more, and whether the
    /// protocol watches the key (see [`Interest::watch`]).
    #[inline]
    pub fn sub(&self, key: Key) -> (bool, bool) {
        let at = self.index(key);
        let before = self.counts[at].fetch_sub(1, Ordering::AcqRel);
        debug_assert!(
            before & INTENTS > 0,
            "interest in key {key} released more than added"
        );
        if before & INTENTS == 1 {
            // The last one: the next intent starts a new maximum. (An add racing with this
            // may lose its until, which only reads as sooner than true while the racing
            // intent is active; the protocol then waits for an end that comes later, bounded
            // by the wanter's deadline, `share/defer.rs`.)
            self.until[at].store(0, Ordering::Release);
        }
        (before & INTENTS == 1, before & WATCHED != 0)
    }

    /// Whether an offer for `key` waits for this node's intents on it to end
    /// ([`Interest::watch_additions`]).
    #[inline]
    pub fn deferring(&self, key: Key) -> bool {
        self.slot(key).load(Ordering::Acquire) & DEFERRED != 0
    }

    /// Whether an intent on `key` is active on this node now.
    #[inline]
    pub fn wanted(&self, key: Key) -> bool {
        self.slot(key).load(Ordering::Acquire) & (INTENTS | LINGERS) != 0
    }

    /// Whether a worker here keeps its interest in `key` past its last intent on it
    /// (`intent/linger.rs`).
    #[inline]
    pub fn lingering(&self, key: Key) -> bool {
        self.slot(key).load(Ordering::Acquire) & LINGERS != 0
    }

    /// Takes one linger hold on `key`; false (nothing taken) if 63 are held already.
    #[inline]
    pub fn hold_linger(&self, key: Key) -> bool {
        self.slot(key)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c & LINGERS != LINGERS).then_some(c + LINGER_ONE)
            })
            .is_ok()
    }

    /// Ends one linger hold on `key`. Returns whether nothing wants the key here any more (no
    /// intent, no hold), and whether the protocol watches it.
    #[inline]
    pub fn end_linger(&self, key: Key) -> (bool, bool) {
        let before = self.slot(key).fetch_sub(LINGER_ONE, Ordering::AcqRel);
        debug_assert!(before & LINGERS != 0, "linger on key {key} ended twice");
        let after = before - LINGER_ONE;
        (after & (INTENTS | LINGERS) == 0, before & WATCHED != 0)
    }

    /// Protocol: asks to hear (or no longer) when the interest in `key` ends (a hint: hashed
    /// tables may mark a neighbour too, which only hands a key to the protocol for nothing).
    pub fn watch(&self, key: Key, watched: bool) {
        if watched {
            self.slot(key).fetch_or(WATCHED, Ordering::AcqRel);
        } else {
            self.slot(key).fetch_and(!WATCHED, Ordering::AcqRel);
        }
    }

    /// Protocol: asks to hear (or no longer) when an intent on `key` is added here (a hint, as
    /// for [`Interest::watch`]).
    pub fn watch_additions(&self, key: Key, watched: bool) {
        if watched {
            self.slot(key).fetch_or(DEFERRED, Ordering::AcqRel);
        } else {
            self.slot(key).fetch_and(!DEFERRED, Ordering::AcqRel);
        }
    }

    /// Whether counts are exact per key (else hashed, see the module docs).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// The number of keys, if counts are exact per key (a dense key space).
    pub fn dense_keys(&self) -> Option<usize> {
        self.exact.then_some(self.counts.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_counts_are_exact_and_return_to_zero() {
        let interest = Interest::new(&KeySpace::uniform(10, 1).unwrap());
        assert!(interest.is_exact());
        interest.add(3, Time(u64::MAX));
        interest.add(3, Time(u64::MAX));
        assert!(interest.wanted(3) && !interest.wanted(4));
        assert_eq!(interest.sub(3), (false, false));
        interest.watch(3, true);
        assert!(interest.wanted(3), "the flag is no intent");
        assert_eq!(interest.sub(3), (true, true));
        assert!(!interest.wanted(3));
        interest.watch(3, false);
        assert!(!interest.add(3, Time(u64::MAX)));
        interest.watch_additions(3, true);
        assert!(interest.add(3, Time(u64::MAX)), "additions watched");
        assert!(interest.wanted(3));
        assert_eq!(interest.sub(3), (false, false));
        interest.watch_additions(3, false);
        assert_eq!(interest.sub(3), (true, false));
    }

    #[test]
    fn until_is_the_latest_end_while_intents_are_active() {
        let interest = Interest::new(&KeySpace::uniform(4, 1).unwrap());
        assert_eq!(interest.until(1), None);
        let ms = 1u64 << UNTIL_SHIFT;
        interest.add(1, Time(5 * ms));
        interest.add(1, Time(3 * ms + 1));
        assert_eq!(interest.until(1), Some(Time(5 * ms)), "the latest end");
        interest.sub(1);
        assert_eq!(
            interest.until(1),
            Some(Time(5 * ms)),
            "never lowered while active"
        );
        interest.sub(1);
        assert_eq!(interest.until(1), None);
        interest.add(1, Time(2 * ms - 1));
        assert_eq!(
            interest.until(1),
            Some(Time(2 * ms)),
            "a new maximum, rounded up"
        );
        interest.add(1, Time(u64::MAX));
        assert_eq!(interest.until(1), Some(Time(u64::MAX)), "never: saturated");
    }

    #[test]
    fn sparse_counts_are_hashed() {
        let interest = Interest::new(&KeySpace::sparse(2).unwrap());
        assert!(!interest.is_exact());
        interest.add(u64::MAX - 7, Time(u64::MAX));
        assert!(interest.wanted(u64::MAX - 7));
        assert_eq!(interest.sub(u64::MAX - 7), (true, false));
        assert!(!interest.wanted(u64::MAX - 7));
    }

    #[test]
    fn linger_holds_count_apart_from_intents_and_stop_at_63() {
        let interest = Interest::new(&KeySpace::uniform(10, 1).unwrap());
        assert!(interest.hold_linger(3));
        assert!(interest.wanted(3) && interest.lingering(3));
        assert_eq!(interest.until(3), None, "a linger is no intent");
        interest.add(3, Time(5 << UNTIL_SHIFT));
        assert_eq!(interest.until(3), Some(Time(5 << UNTIL_SHIFT)));
        assert_eq!(interest.sub(3), (true, false), "the last intent");
        assert!(interest.wanted(3), "the linger still holds");
        assert_eq!(interest.end_linger(3), (true, false));
        assert!(!interest.wanted(3) && !interest.lingering(3));
        for _ in 0..63 {
            assert!(interest.hold_linger(4));
        }
        assert!(
            !interest.hold_linger(4),
            "a 64th hold would overflow into the flags"
        );
        interest.watch(4, true);
        for i in 0..63 {
            assert_eq!(interest.end_linger(4), (i == 62, true));
        }
        assert!(!interest.wanted(4));
    }
}
