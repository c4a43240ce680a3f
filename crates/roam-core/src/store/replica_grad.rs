//! Gradient accumulators of statically replicated keys (NuPS) under a stateful optimizer.
//!
//! A replica has no optimizer state, so it cannot take a stateful optimizer's step: a
//! `push_gradients` of a replicated key adds the gradient into the key's accumulator here, and
//! the replica's value does not change. Each sync round takes the accumulator (`replica.rs`)
//! and ships it to the key's hub, which steps the primary once with the sum.
//!
//! Invariants: the accumulators exist only for the static replicated set, fixed when the node
//! is built ([`Store::enable_replica_gradients`], before any worker uses the store); an
//! accumulator is read and written only under its key's latch, while the key is held as a
//! replica, so every gradient lands in exactly one taken sum. Replicas made by intents (shares)
//! have no accumulator: their gradients go to the owner.

use std::sync::atomic::AtomicBool;

use rustc_hash::FxHashMap as HashMap;

use super::*;

/// The accumulators of the static replicated keys, concatenated.
pub(super) struct ReplicaGrads {
    /// Where each key's accumulator starts in `sums`.
    at: HashMap<Key, usize>,
    /// Gradient sums, as `f32` bits (written only under the key's latch).
    sums: Box<[AtomicU32]>,
    /// Per key (in `at` order of insertion), whether a gradient arrived since the last take.
    touched: Box<[AtomicBool]>,
    /// Index of each key in `touched`.
    slot: HashMap<Key, usize>,
}

impl Store {
    /// Protocol only, once, before any worker uses the store: gives each of `keys` (the static
    /// replicated set) a gradient accumulator of its visible length.
    pub fn enable_replica_gradients(&self, keys: &[Key]) {
        let mut at = HashMap::default();
        let mut slot = HashMap::default();
        let mut total = 0;
        for &key in keys {
            if at.contains_key(&key) {
                continue;
            }
            slot.insert(key, slot.len());
            at.insert(key, total);
            total += self.space.len(key);
        }
        let grads = ReplicaGrads {
            sums: (0..total).map(|_| AtomicU32::new(0)).collect(),
            touched: (0..slot.len()).map(|_| AtomicBool::new(false)).collect(),
            at,
            slot,
        };
        // A second call keeps the first set (the set is fixed for the node's life).
        let _ = self.replica_grads.set(grads);
    }

    /// Adds gradient `g` into `key`'s accumulator if `key` is a static replicated key held
    /// here as a replica; false (nothing changed) otherwise. The replica's value is unchanged.
    #[inline]
    pub fn accumulate_replica_gradient(&self, key: Key, g: &[f32]) -> bool {
        let Some(grads) = self.replica_grads.get() else {
            return false;
        };
        let (Some(&at), Some(state)) = (grads.at.get(&key), self.index.get(key)) else {
            return false;
        };
        let sums = &grads.sums[at..at + g.len()];
        latched_as(state, REPLICA, |s| {
            for (sum, &g) in sums.iter().zip(g) {
                let v = f32::from_bits(sum.load(Ordering::Relaxed)) + g;
                sum.store(v.to_bits(), Ordering::Relaxed);
            }
            grads.touched[grads.slot[&key]].store(true, Ordering::Relaxed);
            s | REFERENCED
        })
    }

    /// Protocol only: appends `key`'s accumulated gradient to `out` and zeroes it. Returns
    /// false, appending nothing, if no gradient arrived since the last take (checked without
    /// the latch: a push still under way is taken next time) or `key` has no accumulator.
    pub fn take_replica_gradient(&self, key: Key, out: &mut Vec<f32>) -> bool {
        let Some(grads) = self.replica_grads.get() else {
            return false;
        };
        let (Some(&at), Some(&slot), Some(state)) = (
            grads.at.get(&key),
            grads.slot.get(&key),
            self.index.get(key),
        ) else {
            return false;
        };
        if !grads.touched[slot].load(Ordering::Relaxed) {
            return false;
        }
        let sums = &grads.sums[at..at + self.space.len(key)];
        latched(state, REPLICA, |_| {
            out.extend(
                sums.iter()
                    .map(|s| f32::from_bits(s.swap(0, Ordering::Relaxed))),
            );
            grads.touched[slot].store(false, Ordering::Relaxed);
        })
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
        // Not enabled yet: nothing accumulates.
        assert!(!store.accumulate_replica_gradient(3, &[1.0, 1.0]));
        store.enable_replica_gradients(&[3, 3, 5]);
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
        // An owned key, a key with an accumulator but no replica here, a key without one.
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
        // The pending delta of additive pushes is separate.
        assert!(store.push_local(3, &[1.0, 1.0], UpdateMode::Add));
        let mut delta = Vec::new();
        assert!(store.take_delta(3, &mut delta));
        assert_eq!(delta, [1.0, 1.0]);
    }
}
