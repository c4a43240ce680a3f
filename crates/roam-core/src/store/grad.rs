//! The gradient path of the store: `push_gradients` applied to records under their latches.
//!
//! A gradient is stepped into the record where it lives, by the key space's optimizer
//! (`optim.rs`), under exactly the latch discipline of a push (`mod.rs`): one CAS on the key's
//! word that checks it is held here, the step, a release store that bumps the version. An owned
//! record is stepped whole (visible values and the optimizer's hidden state); a replica only
//! under SGD, whose step `−lr·g` is an addition that the replica's delta carries like a push.
//!
//! Invariants: a stateful optimizer never steps a replica (it has no state there): such keys
//! are misses, whose gradients accumulate for the key's hub (`replica_grad.rs`); optimistic
//! readers may copy the visible values while a step runs, so in such stores the record is
//! stepped in a stack copy and stored back with atomic stores, and their copy is discarded by
//! the version check.

use std::sync::atomic::{AtomicU32, AtomicU64};

use super::batch::Rows;
use super::*;

impl Store {
    /// Steps `key`'s record (index entry `state`) with gradient `g` (an aggregate under
    /// [`UpdateMode::GradientSums`]) if it is held here in a way the optimizer can step (see
    /// the module docs); false otherwise.
    #[inline]
    pub(super) fn step_local(
        &self,
        key: Key,
        state: &AtomicU64,
        g: &[f32],
        mode: UpdateMode,
    ) -> bool {
        self.step_held(key, state, g, mode, grad_accept)
    }

    /// [`Store::step_local`] of an owned record only.
    pub(super) fn step_owned(
        &self,
        key: Key,
        state: &AtomicU64,
        g: &[f32],
        mode: UpdateMode,
    ) -> bool {
        self.step_held(key, state, g, mode, |_| LOCAL)
    }

    /// Steps the record with the key's optimizer if its word has a flag of `accept(opt)`.
    #[inline(always)]
    fn step_held(
        &self,
        key: Key,
        state: &AtomicU64,
        g: &[f32],
        mode: UpdateMode,
        accept: impl FnOnce(&Optimizer) -> u64,
    ) -> bool {
        self.space.optimizer_for(key).is_some_and(|opt| {
            let accept = accept(opt);
            if mode == UpdateMode::GradientSums {
                self.step_sums_as(key, state, accept, opt, g)
            } else {
                self.step_as(key, state, accept, opt, g)
            }
        })
    }

    /// Steps the record with an aggregate (sums, then squares) if its word has a flag of
    /// `accept`, like [`step_record`] does a gradient (in a stack copy where readers may look).
    fn step_sums_as(
        &self,
        key: Key,
        state: &AtomicU64,
        accept: u64,
        opt: &Optimizer,
        aggregate: &[f32],
    ) -> bool {
        let (sums, squares) = aggregate.split_at(aggregate.len() / 2);
        let plain = self.plain();
        latched_as(state, accept, |s| {
            // SAFETY: latched and held.
            let record = unsafe { self.record(key, s) };
            // A replica (SGD only, see `grad_accept`) is stepped in its value only.
            let record = if s & REPLICA != 0 {
                &record[..sums.len()]
            } else {
                record
            };
            if plain {
                // SAFETY: the latch holder in a store without optimistic readers.
                let (w, state) = unsafe { as_plain(record) }.split_at_mut(sums.len());
                opt.step_sums(w, state, sums, squares);
            } else {
                let mut scratch = Scratch::new(record.len(), false);
                let copy = &mut scratch.get()[..record.len()];
                load_values::<0>(copy, record, false);
                let (w, state) = copy.split_at_mut(sums.len());
                opt.step_sums(w, state, sums, squares);
                store_values(record, copy, false);
            }
            dirtied(s)
        })
    }

    /// Steps the record if its word has a flag of `accept`.
    #[inline(always)]
    fn step_as(
        &self,
        key: Key,
        state: &AtomicU64,
        accept: u64,
        opt: &Optimizer,
        g: &[f32],
    ) -> bool {
        latched_as(state, accept, |s| {
            // SAFETY: latched and held.
            let record = unsafe { self.record(key, s) };
            let mut scratch = Scratch::new(record.len(), self.plain());
            step_record::<0>(opt, record, s, g, self.plain(), scratch.get());
            dirtied(s)
        })
    }

    /// Applies the key space's optimizer to a batch of gradients of the uniform length `len`
    /// (`keys.len() * len` values), under each key's latch exactly like
    /// [`Store::push_batch_local`]; `miss(i)` for each key `i` not updated here (not owned here,
    /// a replica under a stateful optimizer, or no optimizer at all).
    #[inline]
    pub fn push_gradients_local(
        &self,
        keys: &[Key],
        grads: &[f32],
        len: usize,
        miss: impl FnMut(usize),
    ) {
        self.assert_uniform(len);
        debug_assert_eq!(grads.len(), keys.len() * len);
        let Some(opt) = self.space.optimizer() else {
            (0..keys.len()).for_each(miss);
            return;
        };
        self.grad_rows_by_optimizer(self.uniform_rows(), keys, grads, len, opt, miss);
    }

    /// [`Store::grad_rows`] with one loop per optimizer and short length (where the store
    /// reads optimistically), so that neither is dispatched per key.
    #[inline(always)]
    pub(super) fn grad_rows_by_optimizer(
        &self,
        rows: Rows<'_>,
        keys: &[Key],
        grads: &[f32],
        len: usize,
        opt: &Optimizer,
        miss: impl FnMut(usize),
    ) {
        let l = self.compile_time_len(len);
        match opt {
            Optimizer::Sgd { .. } => by_len!(l, self.grad_rows(rows, keys, grads, len, opt, miss)),
            Optimizer::Adagrad { .. } => {
                by_len!(l, self.grad_rows(rows, keys, grads, len, opt, miss))
            }
            Optimizer::Adam { .. } => by_len!(l, self.grad_rows(rows, keys, grads, len, opt, miss)),
            Optimizer::Ftrl { .. } => by_len!(l, self.grad_rows(rows, keys, grads, len, opt, miss)),
        }
    }

    /// Steps the records of `keys` in `rows` (the uniform store's areas, or one named table's:
    /// records of `len` visible values, whole records as long as the value area's stride when
    /// owned) with `opt`, under each key's latch; `miss(i)` for each key `i` not updated here.
    #[inline(always)]
    fn grad_rows<const L: usize>(
        &self,
        rows: Rows<'_>,
        keys: &[Key],
        grads: &[f32],
        len: usize,
        opt: &Optimizer,
        mut miss: impl FnMut(usize),
    ) {
        let len = if L > 0 { L } else { len };
        let (values, replicas) = (rows.values, rows.replicas);
        let record_len = values.stride();
        let plain = self.plain();
        let accept = grad_accept(opt);
        // Once per batch, not per row.
        let mut scratch = Scratch::new(record_len, plain);
        let scratch = scratch.get();
        for (i, (&key, g)) in keys.iter().zip(grads.chunks_exact(len)).enumerate() {
            self.prefetch_ahead(rows, keys, i);
            let hit = self.index.get(key).is_some_and(|state| {
                latched_as(state, accept, |s| {
                    let slot = (s & SLOT_MASK) as u32;
                    // SAFETY: latched and held, in the area of its flag; uniform records are
                    // `record_len` long (owned) or start with the replica's `len` values.
                    let record = unsafe {
                        if s & REPLICA == 0 {
                            values.prefix(slot, record_len)
                        } else {
                            replicas.prefix(slot, len)
                        }
                    };
                    step_record::<L>(opt, record, s, g, plain, scratch);
                    dirtied(s)
                })
            });
            if !hit {
                miss(i);
            }
        }
    }
}

/// Which holdings a gradient updates here: owned records always; replicas only under a linear
/// optimizer (SGD), whose step `−lr·g` is summed into the replica's delta like a push. A
/// stateful optimizer's step needs the state, which only the owned record has.
#[inline(always)]
fn grad_accept(opt: &Optimizer) -> u64 {
    if opt.is_linear() { HELD } else { LOCAL }
}

/// Longest record that [`step_record`] updates in a stack copy (Adam's, of the longest
/// optimistic value).
const MAX_STEP_RECORD: usize = 3 * MAX_OPTIMISTIC_LEN + 1;

/// Where [`step_record`] steps records of stores with optimistic readers: on the stack for the
/// records of every optimizer's layout, on the heap for longer (hand-made) layouts; nothing
/// for plain stores, which step records in place.
struct Scratch {
    stack: [f32; MAX_STEP_RECORD],
    heap: Vec<f32>,
}

impl Scratch {
    #[inline(always)]
    fn new(record_len: usize, plain: bool) -> Self {
        let heap = if !plain && record_len > MAX_STEP_RECORD {
            vec![0.0; record_len]
        } else {
            Vec::new()
        };
        Self {
            stack: [0.0; MAX_STEP_RECORD],
            heap,
        }
    }

    #[inline(always)]
    fn get(&mut self) -> &mut [f32] {
        if self.heap.is_empty() {
            &mut self.stack
        } else {
            &mut self.heap
        }
    }
}

/// Applies gradient `g` with `opt` to a held record whose word is `s` (the caller holds the
/// latch): an owned record is visible values then the optimizer's state; a replica's step
/// (SGD only, see [`grad_accept`]) touches its value only, so that it lands in the delta.
/// With optimistic readers the record is stepped in `scratch` (at least the record's length)
/// and stored back with atomic stores (readers may copy it meanwhile); plain stores step it in
/// place.
#[inline(always)]
fn step_record<const L: usize>(
    opt: &Optimizer,
    record: &[AtomicU32],
    s: u64,
    g: &[f32],
    plain: bool,
    scratch: &mut [f32],
) {
    // The length known at compile time (> 0) unrolls the short loops, as for a push.
    let (len, g) = if L > 0 { (L, &g[..L]) } else { (g.len(), g) };
    let record = if s & REPLICA != 0 {
        &record[..len]
    } else {
        record
    };
    if plain {
        // SAFETY: the latch holder in a store without optimistic readers.
        let (w, state) = unsafe { as_plain(record) }.split_at_mut(len);
        opt.step(w, state, g);
        return;
    }
    // SAFETY (both reads): a valid, aligned `u32` that no other thread writes while we hold
    // the latch (optimistic readers only read).
    let read = |v: &AtomicU32| f32::from_bits(unsafe { v.as_ptr().read() });
    // SGD and Adagrad: the same arithmetic as `step`, in the same order, without the copy.
    match *opt {
        Optimizer::Sgd { lr } => {
            for (v, &g) in record[..len].iter().zip(g) {
                v.store((read(v) - lr * g).to_bits(), Ordering::Relaxed);
            }
            return;
        }
        Optimizer::Adagrad { lr, eps } => {
            let (w, acc) = record.split_at(len);
            for ((w, a), &g) in w.iter().zip(&acc[..len]).zip(g) {
                let sum = read(a) + g * g;
                a.store(sum.to_bits(), Ordering::Relaxed);
                w.store(
                    (read(w) - lr * g / (sum + eps).sqrt()).to_bits(),
                    Ordering::Relaxed,
                );
            }
            return;
        }
        Optimizer::Adam { .. } | Optimizer::Ftrl { .. } => {}
    }
    let copy = &mut scratch[..record.len()];
    for (c, v) in copy.iter_mut().zip(record) {
        *c = read(v);
    }
    let (w, state) = copy.split_at_mut(len);
    opt.step(w, state, g);
    store_values(record, copy, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gradients and aggregates on every path (per-key `push_local`, the batched optimistic and
    /// plain stores) give the record `Optimizer::step` and `step_sums` give, hidden state
    /// included; pulls return
    /// the visible part; removal (a relocation) carries the whole record.
    #[test]
    fn every_path_steps_the_whole_record_like_the_optimizer() {
        let optimizers = [
            Optimizer::sgd(0.1),
            Optimizer::adagrad(0.1),
            Optimizer::adam(0.1),
            Optimizer::ftrl(0.1),
        ];
        for (opt, space) in optimizers.into_iter().flat_map(|opt| {
            [
                KeySpace::uniform(4, 3).unwrap(),
                KeySpace::uniform(4, 20).unwrap(),
                KeySpace::per_key(vec![1, 3, 2, 2]).unwrap(),
            ]
            .map(|space| (opt, space))
        }) {
            let space = space.with_optimizer(opt).unwrap();
            let store = Store::new(space.clone());
            let len = space.len(1);
            let mut want = vec![0.0f32; space.record_len(1)];
            assert!(store.insert(1, &want));
            for step in 0..5 {
                let g: Vec<f32> = (0..len).map(|i| (i + step) as f32 - 1.5).collect();
                let (w, state) = want.split_at_mut(len);
                opt.step(w, state, &g);
                // And an aggregate of three copies of `g` (`UpdateMode::GradientSums`).
                let aggregate: Vec<f32> = g
                    .iter()
                    .map(|g| 3.0 * g)
                    .chain(g.iter().map(|g| 3.0 * g * g))
                    .collect();
                let (w, state) = want.split_at_mut(len);
                opt.step_sums(w, state, &aggregate[..len], &aggregate[len..]);
                match space.uniform_len() {
                    Some(len) => {
                        let mut misses = Vec::new();
                        store.push_gradients_local(&[1, 2], &[g.clone(), g].concat(), len, |i| {
                            misses.push(i)
                        });
                        assert_eq!(misses, [1], "key 2 is not here");
                        misses.clear();
                        let both = [aggregate.clone(), aggregate].concat();
                        store.push_batch_local(
                            &[2, 1],
                            &both,
                            len,
                            UpdateMode::GradientSums,
                            |i| misses.push(i),
                        );
                        assert_eq!(misses, [0], "key 2 is not here");
                    }
                    None => {
                        assert!(store.push_local(1, &g, UpdateMode::Gradient));
                        assert!(store.push_local(1, &aggregate, UpdateMode::GradientSums));
                    }
                }
            }
            let mut out = vec![0.0; len];
            assert!(store.pull_local(1, &mut out));
            assert_eq!(out, want[..len]);
            let mut moved = Vec::new();
            assert!(store.remove(1, &mut moved));
            assert_eq!(moved, want, "the whole record moves");
        }
    }

    #[test]
    fn replicas_take_sgd_steps_in_their_delta_and_refuse_stateful_ones() {
        for (opt, stepped) in [
            (Optimizer::sgd(0.5), true),
            (Optimizer::adagrad(0.5), false),
        ] {
            let space = KeySpace::uniform(2, 2)
                .unwrap()
                .with_optimizer(opt)
                .unwrap();
            let store = Store::new(space);
            assert!(store.insert_replica(0, &[1.0, 1.0]));
            assert_eq!(
                store.push_local(0, &[2.0, 4.0], UpdateMode::Gradient),
                stepped
            );
            // An aggregate: SGD steps the replica with its sums (squares unused).
            assert_eq!(
                store.push_local(0, &[2.0, 2.0, 9.0, 9.0], UpdateMode::GradientSums),
                stepped
            );
            let mut delta = Vec::new();
            assert_eq!(store.take_delta(0, &mut delta), stepped);
            if stepped {
                assert_eq!(delta, [-2.0, -3.0]);
            }
        }
        let store = Store::new(KeySpace::uniform(2, 2).unwrap());
        assert!(store.insert(0, &[1.0, 1.0]));
        assert!(
            !store.push_local(0, &[2.0, 4.0], UpdateMode::Gradient),
            "no optimizer, no step"
        );
    }
}
