//! Eviction in the store: the clock over the index entries, and the removal of a row that
//! leaves its key "not created" (GONE) rather than "held elsewhere".
//!
//! The clock is the index's entry order (stable, append-only): the node (`dynamic.rs`) keeps a
//! hand and visits entries one by one. A visit looks at the key's word without the latch and
//! decides by its clock bits (see `mod.rs`): under the LRU sweep a REFERENCED row is spared
//! and its bit cleared, an unreferenced one evicted; under the TTL sweep a REFERENCED row has
//! both bits cleared, an unreferenced one is marked AGED, and an AGED unreferenced one evicted
//! (so a row is evicted by the second sweep that finds it untouched). The eviction itself
//! latches the key and re-checks REFERENCED, so a row touched by a worker between the look and
//! the latch is spared.
//!
//! Invariants: only the protocol calls these (one thread, under the node lock), like every
//! method that frees slots; only owned rows (LOCAL) are ever evicted, never replicas or keys in
//! transit; the node decides which owned rows may go (`evictable`), the store only how.

use super::*;

/// Which sweep visits an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// Make room under the row budget: evict the first unreferenced row.
    Lru,
    /// Time-to-live: evict rows found unreferenced by two consecutive sweeps.
    Ttl,
}

/// What a visit of one entry did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// Not an owned row that may be evicted.
    Skipped,
    /// An owned row that was recently used (its clock bits advanced).
    Spared,
    /// The row of this key was evicted; its record was appended to the caller's buffer.
    Evicted(Key),
}

/// What a visit of the return clock found at one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnVisit {
    /// Not an owned row that may be sent back.
    Skipped,
    /// A returnable row used since the last look (its REFERENCED bit is now clear).
    Spared,
    /// This returnable row was not used since the last look: send it back.
    Picked(Key),
}

impl Store {
    /// Whether `key` has a row as far as this node knows: a state word that is not GONE. At a
    /// sparse key's creator, false means "never created, or evicted": creatable.
    pub fn is_created(&self, key: Key) -> bool {
        self.index
            .get(key)
            .is_some_and(|state| state.load(Ordering::Acquire) & GONE == 0)
    }

    /// Index entries: the clock's range (`0..entries()`).
    pub fn entries(&self) -> u64 {
        self.index.len()
    }

    /// Protocol only: one step of the clock at entry `i` (< [`Store::entries`]). `evictable`
    /// is asked only about owned rows; an evicted row's whole record is appended to `spill`.
    pub fn clock_visit(
        &self,
        i: u64,
        sweep: Sweep,
        evictable: impl FnOnce(Key) -> bool,
        spill: &mut Vec<f32>,
    ) -> Visit {
        let (key, state) = self.index.at(i);
        let s = state.load(Ordering::Acquire);
        if s & LOCAL == 0 || !evictable(key) {
            return Visit::Skipped;
        }
        if s & REFERENCED != 0 {
            let clear = match sweep {
                Sweep::Lru => REFERENCED,
                Sweep::Ttl => REFERENCED | AGED,
            };
            // Without the latch: a concurrent latch holder's release store may put the bits
            // back, which only means the row was used meanwhile.
            state.fetch_and(!clear, Ordering::Relaxed);
            return Visit::Spared;
        }
        if sweep == Sweep::Ttl && s & AGED == 0 {
            state.fetch_or(AGED, Ordering::Relaxed);
            return Visit::Spared;
        }
        if self.evict_unreferenced(key, state, spill) {
            Visit::Evicted(key)
        } else {
            Visit::Spared
        }
    }

    /// Protocol only: one step of the clock that picks owned rows to send back to their
    /// creators (`dynamic.rs`): the key at entry `i` (< [`Store::entries`]) if it is owned here,
    /// `returnable` says yes and it was not used since the last look; a used one has its
    /// REFERENCED bit cleared (it goes at the next look unless used again).
    pub fn return_visit(&self, i: u64, returnable: impl FnOnce(Key) -> bool) -> ReturnVisit {
        let (key, state) = self.index.at(i);
        let s = state.load(Ordering::Acquire);
        if s & LOCAL == 0 || !returnable(key) {
            return ReturnVisit::Skipped;
        }
        if s & REFERENCED != 0 {
            state.fetch_and(!REFERENCED, Ordering::Relaxed);
            return ReturnVisit::Spared;
        }
        ReturnVisit::Picked(key)
    }

    /// Removes the owned row under `state` unless it was referenced since the look that chose
    /// it; the key becomes GONE.
    fn evict_unreferenced(&self, key: Key, state: &AtomicU64, spill: &mut Vec<f32>) -> bool {
        let s = Self::latch(state);
        if s & LOCAL == 0 || s & REFERENCED != 0 {
            state.store(s, Ordering::Release);
            return false;
        }
        // SAFETY: latched and owned.
        let record = unsafe { self.record(key, s) };
        spill.extend(
            record
                .iter()
                .map(|v| f32::from_bits(v.load(Ordering::Relaxed))),
        );
        self.area(key, s).free((s & SLOT_MASK) as u32);
        let kept = s & KEPT & !(REFERENCED | AGED);
        state.store(bumped(kept) | GONE, Ordering::Release);
        self.count_owned(key, -1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store of a dynamic space with a budget (so that pulls mark rows REFERENCED).
    fn sparse_store(rows: &[Key]) -> Store {
        let policy = crate::dynamic::DynamicPolicy {
            max_rows: Some(100),
            ..Default::default()
        };
        let store = Store::new(KeySpace::sparse(2).unwrap().with_dynamic(policy).unwrap());
        for &key in rows {
            assert!(store.insert(key, &[key as f32, 1.0]));
        }
        store
    }

    fn sweep_all(store: &Store, sweep: Sweep) -> Vec<Key> {
        let mut spill = Vec::new();
        (0..store.entries())
            .filter_map(
                |i| match store.clock_visit(i, sweep, |_| true, &mut spill) {
                    Visit::Evicted(key) => Some(key),
                    _ => None,
                },
            )
            .collect()
    }

    #[test]
    fn lru_spares_referenced_rows_once() {
        let store = sparse_store(&[10, 11, 12]);
        assert_eq!(
            sweep_all(&store, Sweep::Lru),
            Vec::<Key>::new(),
            "new rows are referenced"
        );
        let mut out = [0.0; 2];
        assert!(store.pull_local(11, &mut out), "a pull references 11");
        assert!(store.push_local(12, &[1.0, 1.0], UpdateMode::Add));
        assert_eq!(sweep_all(&store, Sweep::Lru), vec![10]);
        assert!(!store.is_created(10) && store.is_known(10));
        assert!(store.is_created(11));
        assert_eq!(store.count_local(), 2);
        // Evicted, then created again: a fresh row, no longer GONE.
        assert!(store.insert(10, &[5.0, 5.0]));
        assert!(store.is_created(10));
        assert!(store.pull_local(10, &mut out));
        assert_eq!(out, [5.0, 5.0]);
    }

    /// Every way a policy evicts (a row or byte budget, a TTL in time or in steps) makes pulls
    /// mark rows REFERENCED; a byte budget alone once did not, so its clock evicted pulled rows
    /// as if unused.
    #[test]
    fn every_eviction_policy_marks_pulled_rows_referenced() {
        use crate::dynamic::DynamicPolicy;
        let policies = [
            DynamicPolicy {
                max_rows: Some(100),
                ..Default::default()
            },
            DynamicPolicy {
                max_bytes: Some(1 << 20),
                ..Default::default()
            },
            DynamicPolicy {
                ttl_ns: Some(1_000),
                ..Default::default()
            },
            DynamicPolicy {
                ttl_steps: Some(10),
                ..Default::default()
            },
        ];
        for policy in policies {
            let space = KeySpace::sparse(2).unwrap().with_dynamic(policy).unwrap();
            let store = Store::new(space);
            for key in [10, 11, 12] {
                assert!(store.insert(key, &[key as f32, 1.0]));
            }
            assert!(sweep_all(&store, Sweep::Lru).is_empty(), "{policy:?}");
            let mut out = [0.0; 2];
            assert!(store.pull_local(11, &mut out));
            let mut batch = [0.0; 2];
            store
                .pull_batch_local(&[12], &mut batch, 2, |_| {})
                .unwrap();
            assert_eq!(sweep_all(&store, Sweep::Lru), vec![10], "{policy:?}");
        }
    }

    #[test]
    fn ttl_evicts_on_the_second_untouched_sweep() {
        let store = sparse_store(&[1, 2]);
        let mut out = [0.0; 2];
        assert!(
            sweep_all(&store, Sweep::Ttl).is_empty(),
            "clears REFERENCED"
        );
        assert!(sweep_all(&store, Sweep::Ttl).is_empty(), "marks AGED");
        assert!(store.pull_local(2, &mut out), "2 is used again");
        assert_eq!(sweep_all(&store, Sweep::Ttl), vec![1]);
        assert!(sweep_all(&store, Sweep::Ttl).is_empty());
        assert_eq!(sweep_all(&store, Sweep::Ttl), vec![2]);
        assert_eq!(store.count_local(), 0);
    }

    #[test]
    fn only_owned_evictable_rows_go_and_spill_whole_records() {
        let store = sparse_store(&[1, 2]);
        store.insert_replica(3, &[0.0, 0.0]);
        let mut spill = Vec::new();
        for _ in 0..2 {
            for i in 0..store.entries() {
                store.clock_visit(i, Sweep::Lru, |key| key != 2, &mut spill);
            }
        }
        assert_eq!(spill, [1.0, 1.0], "row 1's record; 2 refused, 3 a replica");
        assert!(store.has_replica(3) && store.is_created(2));
    }

    #[test]
    fn the_return_clock_picks_unused_returnable_owned_rows_and_changes_nothing_else() {
        let store = sparse_store(&[1, 2, 3]);
        store.insert_replica(4, &[0.0, 0.0]);
        let look = |store: &Store| -> Vec<Key> {
            (0..store.entries())
                .filter_map(|i| match store.return_visit(i, |key| key != 3) {
                    ReturnVisit::Picked(key) => Some(key),
                    _ => None,
                })
                .collect()
        };
        assert!(look(&store).is_empty(), "new rows are referenced");
        let mut out = [0.0; 2];
        assert!(store.pull_local(2, &mut out), "2 is used again");
        assert_eq!(look(&store), vec![1], "3 refused, 4 a replica");
        assert_eq!(look(&store), vec![1, 2]);
        assert_eq!(store.count_local(), 3, "a look removes nothing");
        assert!(store.pull_local(1, &mut out) && out == [1.0, 1.0]);
    }
}
