//! The key's latch and the sequence lock on its state word: the only code that acquires and
//! releases a state word's LATCH bit, and the optimistic read that validates against VERSION
//! (the word's bits are described in the store's module docs, `mod.rs`).
//!
//! Invariants:
//! - Acquiring the latch is a compare-and-swap on the exact word observed (so "is held here"
//!   and "latched" are checked atomically), followed by a `Release` fence, so that no write to
//!   the record becomes visible before the latch does (what makes `read_consistent` exact).
//! - Every release bumps VERSION (`bumped`), so an optimistic copy that overlapped a write, a
//!   move of the key or a reuse of its slot is retried.
//! - A latch holder releases the word it observed with at most DIRTY and REFERENCED changed
//!   (`latched_as`); only the protocol's own paths (`Store::latch`) change where the record is.
//! - A waiter spins briefly, then yields its core (`backoff`): a latch is held for one copy.

use super::*;

impl Store {
    /// Latches `state` whatever its flags; returns the word observed before latching.
    pub(super) fn latch(state: &AtomicU64) -> u64 {
        let mut spins = 0u32;
        loop {
            let s = state.load(Ordering::Relaxed);
            if s & LATCH == 0
                && state
                    .compare_exchange_weak(s, s | LATCH, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Writes to the record must not become visible before the latch (see
                // `read_consistent`).
                fence(Ordering::Release);
                return s;
            }
            spins = backoff(spins);
        }
    }
}

/// `s` with its version bumped (and nothing else changed).
#[inline(always)]
pub(super) fn bumped(s: u64) -> u64 {
    (s & !VERSION_MASK) | (s.wrapping_add(VERSION_ONE) & VERSION_MASK)
}

/// Latches `state` if its word has a flag of `accept`, runs `f` with the word observed, and
/// releases with the version bumped. Returns false, running nothing, if no flag of `accept` is
/// set.
#[inline(always)]
pub(super) fn latched(state: &AtomicU64, accept: u64, f: impl FnOnce(u64)) -> bool {
    latched_as(state, accept, |s| {
        f(s);
        s
    })
}

/// `s` with DIRTY set: a push reached the record (a replica's delta, or an owned value); and
/// REFERENCED, for the eviction clock (free: the release store writes the word anyway).
#[inline(always)]
pub(super) fn dirtied(s: u64) -> u64 {
    s | DIRTY | REFERENCED
}

/// [`latched`] where `f` returns the word to release (before the version bump): the word
/// observed with flags of its own changed (DIRTY and REFERENCED only: the latch holder never changes what
/// the word says about where the record is).
#[inline(always)]
pub(super) fn latched_as(state: &AtomicU64, accept: u64, f: impl FnOnce(u64) -> u64) -> bool {
    let mut spins = 0u32;
    loop {
        let s = state.load(Ordering::Relaxed);
        if s & accept == 0 {
            return false;
        }
        if s & LATCH == 0
            && state
                .compare_exchange_weak(s, s | LATCH, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // Writes to the record must not become visible before the latch (see
            // `read_consistent`).
            fence(Ordering::Release);
            // We hold the latch and the record is here, so the slot is valid and no other
            // thread writes the record until we release.
            let release = f(s);
            debug_assert_eq!(
                release & !(DIRTY | REFERENCED),
                s & !(DIRTY | REFERENCED),
                "only DIRTY and REFERENCED may change"
            );
            state.store(bumped(release), Ordering::Release);
            return true;
        }
        spins = backoff(spins);
    }
}

/// Runs `read` with the word observed while it shows the record held here and unlatched, until
/// the word is unchanged after the read (a sequence lock: see the module docs). Returns false,
/// running nothing more, once the record is not held here. `TOUCH`: a worker's read, which
/// marks the row REFERENCED for the eviction clock.
///
/// Why it is exact: a writer latches (`Acquire` CAS, then a `Release` fence) before its first
/// value store. If `read` saw any of those stores, the fences synchronise, so the reload after
/// the `Acquire` fence sees the latch or a later word, which differs from the first one (every
/// release bumps the version) and the read is retried. If it saw none, it copied the values as
/// of the word, which were published by that word's `Release` store.
#[inline(always)]
pub(super) fn read_consistent<const TOUCH: bool>(state: &AtomicU64, read: impl FnMut(u64)) -> bool {
    read_consistent_as::<TOUCH>(state, HELD, read)
}

/// [`read_consistent`] of a record whose word has a flag of `accept` (a subset of HELD).
#[inline(always)]
pub(super) fn read_consistent_as<const TOUCH: bool>(
    state: &AtomicU64,
    accept: u64,
    mut read: impl FnMut(u64),
) -> bool {
    let mut spins = 0u32;
    loop {
        let s = state.load(Ordering::Acquire);
        if s & accept == 0 {
            return false;
        }
        if s & LATCH == 0 {
            read(s);
            fence(Ordering::Acquire);
            if state.load(Ordering::Relaxed) == s {
                if TOUCH && s & REFERENCED == 0 {
                    // Once per row per clock sweep (see the module docs); a word that changed
                    // meanwhile still gets the bit, which says nothing about the values.
                    state.fetch_or(REFERENCED, Ordering::Relaxed);
                }
                return true;
            }
        }
        spins = backoff(spins);
    }
}

#[inline]
fn backoff(spins: u32) -> u32 {
    if spins < 64 {
        std::hint::spin_loop();
    } else {
        // A latch is held for a copy of one value; if it is still taken, its holder was
        // descheduled, so give up the core.
        std::thread::yield_now();
    }
    spins.saturating_add(1)
}
