//! The access front end: what every shell does with a worker's pull, push, set or localize
//! before the protocol sees it.
//!
//! A [`Front`] belongs to one worker. It validates the whole batch, serves the keys that are
//! local straight from the [`Store`] under their latches (no node lock, no message), and
//! collects the rest into a [`Handoff`], which the shell issues into the [`Node`] under the node
//! lock. The TCP shell (`roam`), the Python binding (through it) and the simulator all go
//! through this one path, so what the simulator checks is what users run.
//!
//! Invariants:
//! - Bad input changes nothing: pushes and sets are validated in full before the first key is
//!   applied. A pull checks its keys while it copies (reading changes nothing, so failing half
//!   way only leaves the caller's buffer unspecified, and it saves a pass over the batch).
//! - Keys are handed to the node in batch order with their offsets in the caller's buffer; a key
//!   named twice is two accesses (read twice, or updated twice), never merged.
//! - No allocation per operation: the misses go into scratch vectors the front keeps.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use rand::rngs::SmallRng;

use crate::error::{AccessError, IntentError};
use crate::id::{Key, ReqId, WorkerId};
use crate::intent::{Actions, Intents, Need};
use crate::keyspace::KeySpace;
use crate::node::{Node, Time};
use crate::sampling::NodeSamplers;
use crate::stats::{WorkerCounters, bump};
use crate::store::{Residency, Store, UpdateMode};

/// One worker's access front end. See the module docs.
pub struct Front {
    pub(crate) store: Arc<Store>,
    pub(crate) fast_local_access: bool,
    pub(crate) keys_move: bool,
    /// The shortest intent use an owner may defer an offer for (one share-sync period,
    /// `share/defer.rs`); shorter ones are asked for as needed now.
    pub(crate) min_deferrable_use_ns: u64,
    pub(crate) counters: Arc<WorkerCounters>,
    pub(crate) misses: Misses,
    /// The node's samplers, and this worker's random numbers for them (`sampling`).
    pub(crate) samplers: Arc<NodeSamplers>,
    pub(crate) rng: SmallRng,
    /// This worker's clock and signalled intents (`intent.rs`).
    pub(crate) intents: Intents,
    /// What the intents left for the protocol (keys to bring here, replicas to drop).
    pub(crate) actions: Actions,
}

/// The keys an operation could not serve locally, with their offsets in its buffer.
#[derive(Default)]
pub(crate) struct Misses {
    pub(crate) keys: Vec<Key>,
    pub(crate) offsets: Vec<usize>,
    /// Scratch of the `local` sampling schemes: the positions of a call's first draws.
    pub(crate) positions: Vec<u64>,
}

impl Misses {
    #[inline(always)]
    pub(crate) fn push(&mut self, key: Key, offset: usize) {
        self.keys.push(key);
        self.offsets.push(offset);
    }

    /// The general path (per-key lengths, or no fast local access): `serve(key, range)` tries
    /// one key at its values' range in the buffer; the keys it does not serve are misses.
    fn per_key(
        &mut self,
        space: &KeySpace,
        keys: &[Key],
        mut serve: impl FnMut(Key, Range<usize>) -> bool,
    ) {
        let mut offset = 0;
        for &key in keys {
            let len = space.len(key);
            if !serve(key, offset..offset + len) {
                self.push(key, offset);
            }
            offset += len;
        }
    }
}

/// What the fast path left for the protocol: issue it into the node with [`Handoff::issue`].
#[derive(Debug)]
#[must_use = "the keys of a hand-off are only accessed once it is issued into the node"]
pub enum Handoff<'a> {
    /// Keys to read, and where each one's values go in the caller's buffer.
    Pull {
        /// The keys, in batch order.
        keys: &'a [Key],
        /// Offset of each key's values in the output buffer.
        offsets: &'a [usize],
    },
    /// Keys to update with the values at their offsets in `vals`.
    Push {
        /// The keys, in batch order.
        keys: &'a [Key],
        /// Offset of each key's update in `vals`.
        offsets: &'a [usize],
        /// The whole batch's values.
        vals: &'a [f32],
        /// Add, overwrite, or apply as gradients.
        mode: UpdateMode,
    },
    /// Keys to move to this node (all of the batch: the node skips those already here).
    Localize {
        /// The keys.
        keys: &'a [Key],
    },
    /// What acting on intents asks of the node (see [`Node::issue_intent_actions`]).
    Intent {
        /// Keys wanted here soon: moved here, or shared with this node if others want them too.
        due: &'a [Key],
        /// Keys replicated here (or watched by the protocol) that no intent here wants any
        /// more.
        unwanted: &'a [Key],
        /// When the intents of `due` start and end.
        need: Need,
        /// Keys whose deferred offer waits for this node's intents, which just grew.
        extended: &'a [Key],
    },
}

impl Handoff<'_> {
    /// Hands the keys to the node's protocol; the request completes through the node's
    /// completions like any other.
    pub fn issue(self, node: &mut Node, now: Time, worker: WorkerId) -> ReqId {
        match self {
            Self::Pull { keys, offsets } => node.issue_pull(now, worker, keys, offsets),
            Self::Push {
                keys,
                offsets,
                vals,
                mode,
            } => node.issue_push(now, worker, keys, vals, offsets, mode),
            Self::Localize { keys } => node.issue_localize(now, worker, keys),
            Self::Intent {
                due,
                unwanted,
                need,
                extended,
            } => node.issue_intent_actions(now, worker, due, unwanted, extended, need),
        }
    }

    /// The keys handed off.
    pub fn keys(&self) -> &[Key] {
        match self {
            Self::Pull { keys, .. } | Self::Push { keys, .. } | Self::Localize { keys } => keys,
            Self::Intent { due, .. } => due,
        }
    }
}

impl fmt::Debug for Front {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Front")
            .field("fast_local_access", &self.fast_local_access)
            .field("keys_move", &self.keys_move)
            .finish_non_exhaustive()
    }
}

impl Front {
    /// The front end of `node`'s worker `worker`, counting its local accesses in `counters`.
    /// It keeps a handle on the node's store, so it needs no access to the node until a
    /// hand-off is issued.
    pub fn new(node: &Node, worker: WorkerId, counters: Arc<WorkerCounters>) -> Self {
        let cfg = node.config();
        let samplers = node.samplers().clone();
        node.store().register_worker(counters.clone());
        Self {
            store: node.store().clone(),
            fast_local_access: cfg.fast_local_access,
            keys_move: cfg.policy.keys_move(),
            min_deferrable_use_ns: cfg.share_sync.typical_gap_ns(),
            counters,
            misses: Misses::default(),
            rng: samplers.worker_rng(worker.0),
            samplers,
            intents: {
                let mut intents = Intents::new(
                    cfg.intent_timing,
                    node.interest().clone(),
                    node.counters().clone(),
                );
                intents.set_short_use_ns(cfg.share_sync.typical_gap_ns());
                intents.set_linger(cfg.intent_linger);
                intents
            },
            actions: Actions::default(),
        }
    }

    /// The key space.
    pub fn space(&self) -> &KeySpace {
        self.store.space()
    }

    /// The node's samplers.
    pub fn samplers(&self) -> &NodeSamplers {
        &self.samplers
    }

    /// This worker's local-access counters.
    pub fn counters(&self) -> &Arc<WorkerCounters> {
        &self.counters
    }

    /// Reads `keys` into `out` (their values concatenated in key order): local keys are copied
    /// now; `None` if that was all, else the rest for the node.
    #[inline]
    pub fn pull(
        &mut self,
        keys: &[Key],
        out: &mut [f32],
    ) -> Result<Option<Handoff<'_>>, AccessError> {
        let (store, space, fast) = (&*self.store, self.store.space(), self.fast_local_access);
        let misses = &mut self.misses;
        misses.keys.clear();
        misses.offsets.clear();
        match space.uniform_len() {
            // The common case, kept free of per-key length lookups.
            Some(len) if fast => {
                if keys.len() * len != out.len() {
                    return Err(AccessError::LengthMismatch {
                        keys: keys.len(),
                        expected: keys.len() * len,
                        actual: out.len(),
                    });
                }
                let checked =
                    store.pull_batch_local(keys, out, len, |i| misses.push(keys[i], i * len));
                checked.map_err(|key| AccessError::KeyOutOfRange {
                    key,
                    num_keys: space.num_keys(),
                })?;
            }
            _ => {
                space.check_batch(keys, out.len())?;
                match space.named_tables().and_then(|t| t.common_table(keys)) {
                    // A named table's pull (all its keys in one table): that table's rows
                    // are uniform, so one loop over its areas (`Store::pull_table_batch_local`).
                    Some((table, dim)) if fast => {
                        let checked = store.pull_table_batch_local(table, keys, out, dim, |i| {
                            misses.push(keys[i], i * dim)
                        });
                        debug_assert!(checked.is_ok(), "checked by check_batch");
                    }
                    _ => misses.per_key(space, keys, |key, at| {
                        fast && store.pull_local(key, &mut out[at])
                    }),
                }
            }
        }
        let c = &self.counters;
        if self.all_local(keys.len(), &c.local_pull_keys, &c.local_pull_ops) {
            return Ok(None);
        }
        Ok(Some(Handoff::Pull {
            keys: &self.misses.keys,
            offsets: &self.misses.offsets,
        }))
    }

    /// Applies `vals` to `keys` (added, overwriting with [`UpdateMode::Set`], or as gradients
    /// with [`UpdateMode::Gradient`], see [`Front::push_gradients`]; aggregates of gradients,
    /// twice the keys' lengths, with [`UpdateMode::GradientSums`]): local keys
    /// now, after the whole batch was validated; `None` if that was all, else the rest.
    // Inlined so that each caller gets a loop specialised to its mode.
    #[inline(always)]
    pub fn push<'a>(
        &'a mut self,
        keys: &[Key],
        vals: &'a [f32],
        mode: UpdateMode,
    ) -> Result<Option<Handoff<'a>>, AccessError> {
        if mode == UpdateMode::GradientSums {
            // Each key's update is twice its length: aggregates have a front end of their own
            // (a branch folded away where `mode` is a constant, as in the worker).
            return self.push_gradient_sums(keys, vals);
        }
        let (store, space, fast) = (&*self.store, self.store.space(), self.fast_local_access);
        space.check_batch(keys, vals.len())?;
        let misses = &mut self.misses;
        misses.keys.clear();
        misses.offsets.clear();
        // A gradient of a replicated key under a stateful optimizer misses the store's step
        // (a replica has no state) and accumulates for the key's hub (`replica/grads.rs`).
        let grad = mode == UpdateMode::Gradient;
        // A uniform space's batch, or a batch of one named table's keys (whose rows are
        // uniform): one loop over the areas (`Store::push_table_batch_local`).
        let batched = match space.uniform_len() {
            Some(len) => Some((None, len)),
            None => space
                .named_tables()
                .and_then(|t| t.common_table(keys))
                .map(|(table, dim)| (Some(table), dim)),
        };
        match batched {
            Some((table, len)) if fast => {
                let miss = |i| {
                    let at = i * len;
                    if !(grad && store.accumulate_replica_gradient(keys[i], &vals[at..at + len])) {
                        misses.push(keys[i], at);
                    }
                };
                match table {
                    None => store.push_batch_local(keys, vals, len, mode, miss),
                    Some(table) => store.push_table_batch_local(table, keys, vals, len, mode, miss),
                }
            }
            _ => misses.per_key(space, keys, |key, at| {
                fast && (store.push_local(key, &vals[at.clone()], mode)
                    || grad && store.accumulate_replica_gradient(key, &vals[at]))
            }),
        }
        Ok(self.push_handoff(keys.len(), vals, mode))
    }

    /// Counts a push of `batch` keys and hands off its misses, if any, with their values
    /// `vals` and mode `mode`.
    #[inline(always)]
    fn push_handoff<'a>(
        &'a self,
        batch: usize,
        vals: &'a [f32],
        mode: UpdateMode,
    ) -> Option<Handoff<'a>> {
        let c = &self.counters;
        if self.all_local(batch, &c.local_push_keys, &c.local_push_ops) {
            return None;
        }
        Some(Handoff::Push {
            keys: &self.misses.keys,
            offsets: &self.misses.offsets,
            vals,
            mode,
        })
    }

    /// Applies gradients `grads` to `keys` with the key space's optimizer (`optim.rs`), where
    /// each record lives: local keys now, on the same latched fast path as [`Front::push`]; the
    /// rest is handed off, and their owners apply the optimizer. A key named twice gets two
    /// steps. Fails, changing nothing, without an optimizer or on bad input.
    #[inline]
    pub fn push_gradients<'a>(
        &'a mut self,
        keys: &[Key],
        grads: &'a [f32],
    ) -> Result<Option<Handoff<'a>>, AccessError> {
        let space = self.space();
        let refused = match space.named_tables() {
            // A table without an optimizer refuses its gradients (out-of-range keys are
            // refused by the push's own check).
            Some(_) => keys
                .iter()
                .any(|&k| space.contains(k) && space.optimizer_for(k).is_none()),
            None => space.optimizer().is_none(),
        };
        if refused {
            return Err(AccessError::NoOptimizer);
        }
        self.push(keys, grads, UpdateMode::Gradient)
    }

    /// Applies aggregates of gradients to `keys` with the key space's optimizer
    /// ([`Optimizer::step_sums`](crate::Optimizer::step_sums)): key `i`'s part of `vals` is
    /// twice its length, the sum of its gradients then the sum of their squares. Where each
    /// record lives, like [`Front::push_gradients`]; one step per key and call. For a worker
    /// that gathers gradients of rows held elsewhere and sends them now and then (a pool of
    /// negatives): the optimizer's state grows as if each gradient had been pushed. Fails,
    /// changing nothing, without an optimizer or on bad input: a length other than twice the
    /// keys' lengths, or a sum of squares that is negative or not finite.
    pub fn push_gradient_sums<'a>(
        &'a mut self,
        keys: &[Key],
        vals: &'a [f32],
    ) -> Result<Option<Handoff<'a>>, AccessError> {
        let space = self.store.space();
        if space.named_tables().is_none() && space.optimizer().is_none() {
            return Err(AccessError::NoOptimizer);
        }
        match space.check_batch(keys, vals.len() / 2) {
            Ok(half) if 2 * half == vals.len() => {}
            Ok(half) => {
                return Err(AccessError::LengthMismatch {
                    keys: keys.len(),
                    expected: 2 * half,
                    actual: vals.len(),
                });
            }
            Err(AccessError::LengthMismatch { keys, expected, .. }) => {
                return Err(AccessError::LengthMismatch {
                    keys,
                    expected: 2 * expected,
                    actual: vals.len(),
                });
            }
            Err(e) => return Err(e),
        }
        if keys.iter().any(|&k| space.optimizer_for(k).is_none()) {
            return Err(AccessError::NoOptimizer);
        }
        let mut offset = 0;
        for &key in keys {
            let len = space.len(key);
            let squares = &vals[offset + len..offset + 2 * len];
            if !squares.iter().all(|q| q.is_finite() && *q >= 0.0) {
                return Err(AccessError::BadSquares { key });
            }
            offset += 2 * len;
        }
        let (store, fast) = (&*self.store, self.fast_local_access);
        let misses = &mut self.misses;
        misses.keys.clear();
        misses.offsets.clear();
        let mut offset = 0;
        for &key in keys {
            let len = space.len(key);
            let aggregate = &vals[offset..offset + 2 * len];
            let served = fast
                && (store.push_local(key, aggregate, UpdateMode::GradientSums)
                    || store.accumulate_replica_gradient_sums(key, aggregate));
            if !served {
                misses.push(key, offset);
            }
            offset += 2 * len;
        }
        Ok(self.push_handoff(keys.len(), vals, UpdateMode::GradientSums))
    }

    /// Counts the keys of a batch of `batch` keys that the fast path served, and the operation
    /// if that was all of them (then true).
    #[inline(always)]
    fn all_local(&self, batch: usize, keys: &AtomicU64, ops: &AtomicU64) -> bool {
        let missed = self.misses.keys.len();
        bump(keys, (batch - missed) as u64);
        if missed == 0 {
            bump(ops, 1);
        }
        missed == 0
    }

    /// Asks for `keys` to move to this node: `None` when there is nothing to do (keys never
    /// move under the node's policy, or all are local already), else the keys that are not
    /// (in order, repeats kept) for the node. Replicas count as local: replicated keys never
    /// move. A key local now that moves away before the node sees the rest is not brought back:
    /// like a key local when `localize` is called, it has been here.
    pub fn localize(&mut self, keys: &[Key]) -> Result<Option<Handoff<'_>>, AccessError> {
        let space = self.store.space();
        if let Some(&key) = keys.iter().find(|&&k| !space.contains(k)) {
            return Err(AccessError::KeyOutOfRange {
                key,
                num_keys: space.num_keys(),
            });
        }
        if !self.keys_move {
            return Ok(None);
        }
        let store = &self.store;
        let wanted = &mut self.misses.keys;
        wanted.clear();
        wanted.extend(
            keys.iter()
                .copied()
                .filter(|&k| store.residency(k) != Residency::Local && !store.has_replica(k)),
        );
        if wanted.is_empty() {
            return Ok(None);
        }
        Ok(Some(Handoff::Localize { keys: wanted }))
    }

    /// Signals that this worker will access `keys` while its clock is in `start..end`: the
    /// keys are brought here shortly before `start` (see `intent.rs`). `Some` holds the keys
    /// to move now — this intent's, if its start is near, and earlier intents' pushed out by
    /// back-pressure. Under a policy where keys never move, intents are only counted.
    pub fn intent(
        &mut self,
        keys: &[Key],
        start: u64,
        end: u64,
    ) -> Result<Option<Handoff<'_>>, IntentError> {
        if end <= start {
            return Err(IntentError::EmptyRange { start, end });
        }
        let space = self.store.space();
        if let Some(&key) = keys.iter().find(|&&k| !space.contains(k)) {
            return Err(AccessError::KeyOutOfRange {
                key,
                num_keys: space.num_keys(),
            }
            .into());
        }
        self.actions.clear();
        if self.keys_move {
            self.intents
                .signal(&self.store, keys, start, end, &mut self.actions);
        } else {
            self.intents.count(keys);
        }
        Ok(self.due_handoff())
    }

    /// Ticks this worker's clock at time `now`; `Some` holds the keys of intents due now and
    /// the replicas whose intents ended.
    pub fn advance_clock(&mut self, now: Time) -> Option<Handoff<'_>> {
        self.actions.clear();
        self.intents.advance(now, &self.store, &mut self.actions);
        self.due_handoff()
    }

    /// Ends this worker's intents (its clock becomes infinite: it will access nothing more);
    /// `Some` holds the replicas no intent here wants any more. Call it when the worker is done.
    pub fn finish_intents(&mut self) -> Option<Handoff<'_>> {
        self.actions.clear();
        self.intents.finish(&self.store, &mut self.actions);
        self.due_handoff()
    }

    /// This worker's clock: the number of [`Front::advance_clock`] calls.
    pub fn current_clock(&self) -> u64 {
        self.intents.clock()
    }

    /// How many clocks ahead of their start intents are acted on now.
    pub fn intent_window(&self) -> u64 {
        self.intents.window()
    }

    pub(crate) fn due_handoff(&self) -> Option<Handoff<'_>> {
        let (c, tally, actions) = (&self.counters, self.intents.tally(), &self.actions);
        bump(&c.intent_actions, actions.due.len() as u64);
        // Only this worker writes its counters: plain stores of its running totals.
        for (counter, total) in [
            (&c.intents, tally.intents),
            (&c.intent_keys, tally.keys),
            (&c.intents_acted, tally.acted),
            (&c.late_intents, tally.late),
            (&c.intents_unchecked, tally.unchecked),
        ] {
            counter.store(total, std::sync::atomic::Ordering::Relaxed);
        }
        (!actions.is_empty()).then_some(Handoff::Intent {
            due: &actions.due,
            unwanted: &actions.unwanted,
            need: if actions.due.is_empty() {
                Need::NOW
            } else if actions.shortest_use_ns < self.min_deferrable_use_ns {
                // Too short to wait for: a replica for it costs only its grant and leave.
                Need {
                    lead_ns: 0,
                    ..actions.need
                }
            } else {
                actions.need
            },
            extended: &actions.extended,
        })
    }

    /// Copies `key`'s values into `out` if the key is local right now (never a hand-off).
    pub fn pull_if_local(&self, key: Key, out: &mut [f32]) -> Result<bool, AccessError> {
        self.space()
            .check_batch(std::slice::from_ref(&key), out.len())?;
        let hit = self.fast_local_access && self.store.pull_local(key, out);
        if hit {
            bump(&self.counters.local_pull_keys, 1);
            bump(&self.counters.local_pull_ops, 1);
        }
        Ok(hit)
    }
}

#[cfg(test)]
mod tests;
