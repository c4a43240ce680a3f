//! Gradient accumulators of replicas (static NuPS replicas and replicas made by intents,
//! AdaPM shares) under a stateful optimizer.
//!
//! A replica has no optimizer state, so it cannot take a stateful optimizer's step: a
//! `push_gradients` of a key held here as a replica adds the gradient into the replica's
//! accumulator here, and the replica's value does not change. Each sync round takes the
//! accumulator and ships it to the key's hub (`replica/grads.rs`) or owner (`share/sync.rs`),
//! which steps its record once with the sum.
//!
//! Layout: the accumulators live in areas parallel to the replica areas (one per replica area,
//! so one per named table), addressed by the replica's own slot: a key's accumulator is found
//! from its state word exactly like its replica, with no lookup table, and it exists exactly as
//! long as the replica (created zeroed with it, taken whole when it is removed:
//! [`Store::remove_replica_with_gradient`]). An accumulator record is the gradient sum (the
//! key's visible length) followed by one *touched* word (non-zero: a gradient arrived since the
//! last take), so sync rounds skip untouched replicas without the latch.
//!
//! Invariants: an accumulator is read and written only under its key's latch while the key is
//! held as a replica (only the touched word is read unlatched, as a hint), so every gradient
//! lands in exactly one taken sum: a round's take or the replica's removal. Stores whose space
//! has no stateful optimizer have no accumulator areas (a replica there takes SGD steps into its
//! value: `grad.rs`).

use super::area::{Area, Scale};
use super::*;
use crate::keyspace::ValueLengths;

/// The accumulator areas of a store, parallel to its replica areas.
pub(super) struct GradAreas {
    /// One per replica area: `areas[0]` for a store of one pair of areas, else by table index.
    areas: Box<[Area]>,
    /// Whether `areas` is by table.
    by_table: bool,
}

impl GradAreas {
    /// Accumulator areas for `space`'s replicas, if its optimizer (any table's) is stateful.
    pub(super) fn new(space: &KeySpace) -> Option<Self> {
        let stateful = |opt: Option<&Optimizer>| opt.is_some_and(|o| !o.is_linear());
        match space.lengths() {
            ValueLengths::PerTable(tables) => {
                let any = tables.all().iter().any(|t| stateful(t.optimizer()));
                any.then(|| Self {
                    areas: tables
                        .all()
                        .iter()
                        .map(|t| Area::uniform(t.dim() + 1))
                        .collect(),
                    by_table: true,
                })
            }
            ValueLengths::Uniform(len) => stateful(space.optimizer()).then(|| Self {
                areas: Box::new([Area::uniform(*len as usize + 1)]),
                by_table: false,
            }),
            ValueLengths::PerKey(_) => stateful(space.optimizer()).then(|| Self {
                areas: Box::new([Area::by_key(space, Scale { value: 1, key: 1 })]),
                by_table: false,
            }),
        }
    }

    fn area(&self, key: Key) -> &Area {
        if self.by_table {
            &self.areas[crate::tables::Tables::index_of(key)]
        } else {
            &self.areas[0]
        }
    }

    /// The accumulator of `key`'s replica at `slot`: its sum, then its touched word.
    ///
    /// # Safety
    /// `slot` is the slot of `key`'s replica, observed under its latch (or by the protocol).
    #[inline(always)]
    unsafe fn record(&self, key: Key, slot: u32) -> (&[AtomicU32], &AtomicU32) {
        // SAFETY: the replica's slot was `ensure`d here when the replica was inserted.
        let record = unsafe { self.area(key).record(key, slot) };
        let (sum, touched) = record.split_at(record.len() - 1);
        (sum, &touched[0])
    }

    /// Protocol only, under the latch of a replica being inserted at `slot`: its accumulator,
    /// zeroed (a slot reused from a removed replica was taken whole, but the zeroing is cheap).
    pub(super) fn create(&self, key: Key, slot: u32) {
        self.area(key).ensure(slot);
        // SAFETY: just ensured; the caller holds the latch.
        let (sum, touched) = unsafe { self.record(key, slot) };
        // SAFETY: latched.
        unsafe { plain(sum) }.fill(0.0);
        touched.store(0, Ordering::Relaxed);
    }

    /// Under the latch of `key`'s replica at `slot`: appends its sum to `out` (if touched) and
    /// zeroes it. Returns whether anything was appended.
    pub(super) fn take(&self, key: Key, slot: u32, out: &mut Vec<f32>) -> bool {
        // SAFETY: the caller holds the replica's latch.
        let (sum, touched) = unsafe { self.record(key, slot) };
        if touched.swap(0, Ordering::Relaxed) == 0 {
            return false;
        }
        // SAFETY: the caller holds the latch.
        let sum = unsafe { plain(sum) };
        out.extend_from_slice(sum);
        sum.fill(0.0);
        true
    }
}

/// An accumulator's sum as plain floats, so that adding into it and taking it are plain
/// (vectorised) loads and stores: per-element atomic swaps made taking the sums the sync
/// rounds' largest cost (16 % of a fully replicated KGE run's CPU).
///
/// # Safety
/// The caller holds the latch of the sum's replica and keeps the slice no longer. Sound
/// because a sum is touched only under that latch (the module's invariant), whose `Acquire`
/// and `Release` order every access; only the touched word is read without it.
#[inline(always)]
#[allow(clippy::mut_from_ref)]
unsafe fn plain(sum: &[AtomicU32]) -> &mut [f32] {
    // SAFETY: `AtomicU32` has the size and alignment of `f32` and lives in an `UnsafeCell`;
    // the latch makes this the only access for the slice's life.
    unsafe { std::slice::from_raw_parts_mut(sum.as_ptr() as *mut f32, sum.len()) }
}

impl Store {
    /// Adds gradient `g` into `key`'s accumulator if `key` is held here as a replica and the
    /// key space's optimizer is stateful; false (nothing changed) otherwise. The replica's
    /// value is unchanged.
    #[inline]
    pub fn accumulate_replica_gradient(&self, key: Key, g: &[f32]) -> bool {
        let Some(grads) = &self.grads else {
            return false;
        };
        let Some(state) = self.index.get(key) else {
            return false;
        };
        latched_as(state, REPLICA, |s| {
            // SAFETY: latched and held as a replica at this slot.
            let (sum, touched) = unsafe { grads.record(key, (s & SLOT_MASK) as u32) };
            // SAFETY: latched.
            for (sum, &g) in unsafe { plain(sum) }.iter_mut().zip(g) {
                *sum += g;
            }
            touched.store(1, Ordering::Relaxed);
            s | REFERENCED
        })
    }

    /// [`Store::accumulate_replica_gradient`] of an aggregate (`UpdateMode::GradientSums`: the
    /// key's gradient sum, then the sum of their squares): its sum joins the round's, and the
    /// squares are dropped, since a replicated key steps once per round with the sum alone
    /// (`docs/embeddings.md`, "Aggregates of gradients", says why).
    pub fn accumulate_replica_gradient_sums(&self, key: Key, aggregate: &[f32]) -> bool {
        self.accumulate_replica_gradient(key, &aggregate[..aggregate.len() / 2])
    }

    /// Protocol only: appends `key`'s accumulated gradient to `out` and zeroes it. Returns
    /// false, appending nothing, if no gradient arrived since the last take (checked first
    /// without the latch: a push still under way is taken next time) or `key` is no replica
    /// here.
    pub fn take_replica_gradient(&self, key: Key, out: &mut Vec<f32>) -> bool {
        let (Some(grads), Some(state)) = (&self.grads, self.index.get(key)) else {
            return false;
        };
        let s = state.load(Ordering::Acquire);
        if s & REPLICA == 0 {
            return false;
        }
        // SAFETY: the slot was observed with REPLICA set; a stale one still addresses valid
        // memory (areas never free it) and this is only a hint, re-read under the latch.
        let (_, touched) = unsafe { grads.record(key, (s & SLOT_MASK) as u32) };
        if touched.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let mut taken = false;
        latched(state, REPLICA, |s| {
            taken = grads.take(key, (s & SLOT_MASK) as u32, out);
        });
        taken
    }

    /// Protocol only: [`Store::remove_replica`], also appending the replica's accumulated
    /// gradient to `grad` (atomically with the removal: no push lands in between). Returns
    /// whether the replica was here; `grad` gets nothing if no gradient was pending.
    pub fn remove_replica_with_gradient(
        &self,
        key: Key,
        out: &mut Vec<f32>,
        grad: &mut Vec<f32>,
    ) -> bool {
        self.remove_held_with(key, REPLICA, out, Some(grad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::Optimizer;

    #[test]
    fn gradients_of_replicas_accumulate_apart_from_the_value_and_are_taken_once() {
        let space = KeySpace::uniform(6, 2)
            .unwrap()
            .with_optimizer(Optimizer::adagrad(0.1))
            .unwrap();
        let store = Store::new(space);
        assert!(store.insert_replica(3, &[1.0, 2.0]));
        assert!(store.insert(1, &[0.0; 4]));
        // The store's own step refuses a replica under a stateful optimizer (a miss), and the
        // accumulator takes the gradient instead; the value does not change.
        let mut misses = Vec::new();
        store.push_gradients_local(&[3, 1], &[0.5, -0.25, 1.0, 1.0], 2, |i| misses.push(i));
        assert_eq!(misses, [0]);
        assert!(store.accumulate_replica_gradient(3, &[0.5, -0.25]));
        assert!(store.accumulate_replica_gradient(3, &[0.25, 0.25]));
        let mut out = [0.0; 2];
        assert!(store.pull_local(3, &mut out));
        assert_eq!(out, [1.0, 2.0], "a replica's value never holds a gradient");
        // An owned key, keys without a replica here.
        assert!(!store.accumulate_replica_gradient(1, &[1.0, 1.0]));
        assert!(!store.accumulate_replica_gradient(5, &[1.0, 1.0]));
        assert!(!store.accumulate_replica_gradient(4, &[1.0, 1.0]));
        let mut sum = Vec::new();
        assert!(store.take_replica_gradient(3, &mut sum));
        assert_eq!(sum, [0.75, 0.0]);
        sum.clear();
        assert!(!store.take_replica_gradient(3, &mut sum), "taken once");
        assert!(sum.is_empty());
        assert!(store.accumulate_replica_gradient(3, &[1.0, 2.0]));
        assert!(store.take_replica_gradient(3, &mut sum));
        assert_eq!(sum, [1.0, 2.0], "the sum restarts from zero");
        sum.clear();
        assert!(store.accumulate_replica_gradient_sums(3, &[1.0, 2.0, 3.0, 4.0]));
        assert!(store.accumulate_replica_gradient(3, &[1.0, 1.0]));
        assert!(store.take_replica_gradient(3, &mut sum));
        assert_eq!(
            sum,
            [2.0, 3.0],
            "an aggregate's sums join, its squares do not"
        );
        // The pending delta of additive pushes is separate.
        assert!(store.push_local(3, &[1.0, 1.0], UpdateMode::Add));
        let mut delta = Vec::new();
        assert!(store.take_delta(3, &mut delta));
        assert_eq!(delta, [1.0, 1.0]);
        // Removal takes the pending sum with the replica; a new replica starts from zero.
        assert!(store.accumulate_replica_gradient(3, &[2.0, 3.0]));
        let (mut record, mut grad) = (Vec::new(), Vec::new());
        assert!(store.remove_replica_with_gradient(3, &mut record, &mut grad));
        assert_eq!(grad, [2.0, 3.0]);
        assert!(
            !store.accumulate_replica_gradient(3, &[1.0, 1.0]),
            "no replica"
        );
        assert!(store.insert_replica(3, &[0.0, 0.0]));
        sum.clear();
        assert!(!store.take_replica_gradient(3, &mut sum));
        assert!(store.accumulate_replica_gradient(3, &[1.0, 1.0]));
        assert!(store.take_replica_gradient(3, &mut sum));
        assert_eq!(sum, [1.0, 1.0]);
        // Under SGD there are no accumulators (replicas step their value).
        let sgd = Store::new(
            KeySpace::uniform(6, 2)
                .unwrap()
                .with_optimizer(Optimizer::sgd(0.1))
                .unwrap(),
        );
        assert!(sgd.insert_replica(3, &[1.0, 2.0]));
        assert!(!sgd.accumulate_replica_gradient(3, &[1.0, 1.0]));
    }

    /// Per-key lengths: accumulators addressed by key, of each key's length.
    #[test]
    fn per_key_accumulators_have_each_keys_length() {
        let space = KeySpace::per_key(vec![1, 3, 2])
            .unwrap()
            .with_optimizer(Optimizer::adam(0.1))
            .unwrap();
        let store = Store::new(space);
        assert!(store.insert_replica(1, &[0.0; 3]));
        assert!(store.insert_replica(2, &[0.0; 2]));
        assert!(store.accumulate_replica_gradient(1, &[1.0, 2.0, 3.0]));
        assert!(store.accumulate_replica_gradient(2, &[4.0, 5.0]));
        let mut out = Vec::new();
        assert!(store.take_replica_gradient(1, &mut out));
        assert!(store.take_replica_gradient(2, &mut out));
        assert_eq!(out, [1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    /// Two threads accumulate into replicas while a third takes the sums, as workers and a
    /// sync round do: every gradient lands in exactly one taken sum (small integers, so the
    /// float sums are exact), and no take sees half a push.
    #[test]
    fn concurrent_accumulates_and_takes_lose_and_tear_nothing() {
        const LEN: usize = 24;
        const PUSHES: usize = if cfg!(miri) { 200 } else { 20_000 };
        let space = KeySpace::uniform(8, LEN as u32)
            .unwrap()
            .with_optimizer(Optimizer::adagrad(0.1))
            .unwrap();
        let store = Store::new(space);
        for key in 0..4 {
            assert!(store.insert_replica(key, &[0.0; LEN]));
        }
        let done = std::sync::atomic::AtomicUsize::new(0);
        let mut taken = [0.0f64; 4];
        std::thread::scope(|s| {
            for worker in 0..2u64 {
                let (store, done) = (&store, &done);
                s.spawn(move || {
                    for i in 0..PUSHES {
                        let key = (i as u64 + worker) % 4;
                        assert!(store.accumulate_replica_gradient(key, &[1.0; LEN]));
                    }
                    done.fetch_add(1, Ordering::Release);
                });
            }
            let mut out = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire) == 2;
                for key in 0..4 {
                    out.clear();
                    if store.take_replica_gradient(key, &mut out) {
                        assert_eq!(out.len(), LEN);
                        assert!(out.iter().all(|&g| g == out[0]), "torn sum {out:?}");
                        taken[key as usize] += f64::from(out[0]);
                    }
                }
                if finished {
                    break;
                }
            }
        });
        assert_eq!(taken.iter().sum::<f64>(), (2 * PUSHES) as f64);
        assert_eq!(taken, [(PUSHES / 2) as f64; 4]);
    }
}
