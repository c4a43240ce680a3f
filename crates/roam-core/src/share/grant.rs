//! A member's side of a grant: installing the replica a key's owner granted for a want, with
//! what queued while the key was wanted (see the protocol in `share/mod.rs`).
//!
//! Invariants: the queued accesses apply in arrival order before the replica is visible (as a
//! relocation's queue applies before its record is inserted), the queued pushes forming the
//! replica's first pending delta (gradients and aggregates too: under SGD as the step's
//! addition, under a stateful optimizer into the replica's gradient sum once it exists, stepped
//! at the owner with the round's, as the fast path does; sets go on to the owner); peers'
//! requests that queued here go on to the owner; a grant this node was not waiting for is
//! handed straight back (`Leave`), so that the owner never counts a sharer that holds nothing.

use crate::id::{Key, NodeId, ReqId};
use crate::node::{Batch, Batches, Node, Time};
use crate::optim::Optimizer;
use crate::relocate::Queued;
use crate::stats::add;
use crate::store::{Residency, UpdateMode};
use crate::warning::Warning;
use crate::wire::{Frame, Kind};

use super::Held;

impl Node {
    /// Member: a grant of replicas for the want `generation`.
    pub(crate) fn handle_grant(
        &mut self,
        now: Time,
        from: NodeId,
        generation: u64,
        keys: &[Key],
        values: &[f32],
    ) {
        if !self.check_share_lengths(from, keys, values) {
            return;
        }
        let mut at = 0;
        let mut touched = Vec::new();
        // Local sets of shared keys, by operation: they apply at the owner (a set's meaning is
        // the owner's); so do gradients that no replica could take (no optimizer).
        let mut at_owner: Vec<((u64, UpdateMode), Batch)> = Vec::new();
        // Gradients under a stateful optimizer, added into the replica's sum once it exists.
        let mut summed: Vec<(u64, u32, Vec<f32>, UpdateMode)> = Vec::new();
        let mut remote: Vec<((NodeId, ReqId, Kind, UpdateMode), Batch)> = Vec::new();
        let mut local_pulls: Vec<(u64, Batch)> = Vec::new();
        let mut unexpected: Vec<(Key, u64)> = Vec::new();
        let mut unwanted = Vec::new();
        let mut value = Vec::new();
        for &key in keys {
            let len = self.cfg.space.len(key);
            let granted = &values[at..at + len];
            at += len;
            if self
                .shares
                .held
                .get(&key)
                .is_some_and(|h| h.owner == from && h.generation == generation)
            {
                continue; // the same key twice in one grant
            }
            // Waiting for it, and not holding it (checked before the queue is touched: the
            // replica's insert below cannot fail then).
            let waiting = self
                .transit
                .get(&key)
                .is_some_and(|t| t.then_to.is_none() && t.offer.is_none())
                && !self.store.has_replica(key)
                && self.store.residency(key) != Residency::Local;
            let Some(transit) = waiting.then(|| self.transit.remove(&key)).flatten() else {
                // Not waiting for it: give it straight back, so that the owner drops the sharer.
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "unexpected grant",
                });
                unexpected.push((key, generation));
                continue;
            };
            add(&self.counters.shares_in, 1);
            self.traced(key, from, now, crate::trace::Change::Replicated);
            add(
                &self.counters.share_wait_ns,
                now.0.saturating_sub(transit.since.0),
            );
            // What queued while the key was wanted applies in order to the replica before it
            // is visible (as a relocation's queue applies before the record is inserted): the
            // queued pushes form its pending delta.
            value.clear();
            value.extend_from_slice(granted);
            summed.clear();
            let optimizer = self.cfg.space.optimizer_for(key).copied();
            for queued in transit.queue {
                match queued {
                    Queued::LocalPull { op, pos } => {
                        self.spare
                            .entry_by(&mut local_pulls, op)
                            .push(key, pos, &value);
                        touched.push(op);
                    }
                    Queued::LocalPush {
                        op,
                        pos,
                        update,
                        mode: UpdateMode::Add,
                    } => {
                        value.iter_mut().zip(&update).for_each(|(v, u)| *v += u);
                        self.answer(op, pos);
                        touched.push(op);
                    }
                    // As the fast path pushes gradients (and aggregates) to a replica: SGD's step
                    // is additive (into the first delta, in order), a stateful optimizer's waits
                    // for the round's sum at the owner (the replica's value is not changed by
                    // it).
                    Queued::LocalPush {
                        op,
                        pos,
                        update,
                        mode,
                    } if mode.is_gradient() && optimizer.is_some() => {
                        match optimizer.filter(Optimizer::is_linear) {
                            Some(sgd) => {
                                // SGD steps with an aggregate's sums (its squares unused).
                                let sums = &update[..update.len() / mode.width()];
                                sgd.step(&mut value, &mut [], sums);
                                self.answer(op, pos);
                                touched.push(op);
                            }
                            None => summed.push((op, pos, update, mode)),
                        }
                    }
                    Queued::LocalPush {
                        op,
                        pos,
                        update,
                        mode,
                    } => {
                        self.spare
                            .entry_by(&mut at_owner, (op, mode))
                            .push(key, pos, &update);
                    }
                    Queued::Localize { op, pos } => {
                        self.answer(op, pos);
                        touched.push(op);
                    }
                    // Peers' requests are for the owner: they go on to it.
                    Queued::RemotePull { origin, req, pos } => {
                        let at = (origin, req, Kind::Pull, UpdateMode::Add);
                        self.spare.entry_by(&mut remote, at).push(key, pos, &[]);
                    }
                    Queued::RemotePush {
                        origin,
                        req,
                        pos,
                        update,
                        mode,
                    } => {
                        self.spare
                            .entry_by(&mut remote, (origin, req, Kind::Push, mode))
                            .push(key, pos, &update);
                    }
                }
            }
            self.store.set_in_transit(key, false);
            if !self.store.insert_replica_with(key, &value, granted) {
                // Held here already (never expected): keep what is here, hand the grant back.
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "grant of a key held here",
                });
                unexpected.push((key, generation));
                for (op, pos, update, mode) in summed.drain(..) {
                    self.spare
                        .entry_by(&mut at_owner, (op, mode))
                        .push(key, pos, &update);
                }
                continue;
            }
            for (op, pos, update, mode) in summed.drain(..) {
                let accumulated = if mode == UpdateMode::GradientSums {
                    self.store.accumulate_replica_gradient_sums(key, &update)
                } else {
                    self.store.accumulate_replica_gradient(key, &update)
                };
                if accumulated {
                    self.answer(op, pos);
                    touched.push(op);
                } else {
                    // Never expected (a stateful optimizer's replica has a gradient sum).
                    self.spare
                        .entry_by(&mut at_owner, (op, mode))
                        .push(key, pos, &update);
                }
            }
            self.shares.note_activity();
            self.shares.held.insert(
                key,
                Held {
                    owner: from,
                    generation,
                    since: now,
                },
            );
            if !self.shares.left.is_empty() {
                self.shares.left.remove(&key);
            }
            if self.policy.location_caches() {
                self.cache.insert(key, from);
            }
            // No intent here wants it any more (it ended while the grant came), or this node
            // is being drained: the replica goes at once.
            if !self.interest.wanted(key) || self.is_leaving() {
                unwanted.push(key);
            }
        }
        for (op, batch) in local_pulls {
            let reply = batch.reply_frame(Kind::PullReply, self.cfg.id, ReqId(op));
            self.spare.keep(batch);
            self.accept_pull_answer(op, reply);
        }
        for ((op, mode), batch) in at_owner {
            let mut batches = Batches::new();
            batches.insert(from, batch);
            self.send_batches(op, Kind::Push, mode, batches);
            touched.push(op);
        }
        for ((origin, req, kind, mode), batch) in remote {
            add(&self.counters.forwards, 1);
            let frame = batch.request_frame(kind, origin, req, 1, mode);
            self.spare.keep(batch);
            self.send(from, frame);
        }
        touched.sort_unstable();
        touched.dedup();
        for op in touched {
            self.settle(op);
        }
        if !unexpected.is_empty() {
            let keys: Vec<Key> = unexpected.iter().map(|&(k, _)| k).collect();
            let generations: Vec<u32> = unexpected.iter().map(|&(_, g)| g as u32).collect();
            // No replica was installed, so nothing was pushed to it: no deltas.
            let frame = Frame::with_positions(
                Kind::Leave,
                self.cfg.id,
                ReqId(0),
                0,
                &keys,
                &generations,
                0,
            );
            self.send(from, frame);
        }
        if !unwanted.is_empty() {
            self.leave_shares(now, &unwanted, true);
        }
        self.check_evacuated();
    }

    /// Whether every one of `keys` is in range; else warns.
    pub(crate) fn check_share_keys(&mut self, from: NodeId, keys: &[Key]) -> bool {
        match keys.iter().find(|&&key| !self.cfg.space.contains(key)) {
            Some(&key) => {
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "share frame with a key out of range",
                });
                false
            }
            None => true,
        }
    }

    /// Whether `values` match the lengths of `keys` (all in range); else warns.
    pub(crate) fn check_share_lengths(
        &mut self,
        from: NodeId,
        keys: &[Key],
        values: &[f32],
    ) -> bool {
        if !self.check_share_keys(from, keys) {
            return false;
        }
        let total: usize = keys.iter().map(|&key| self.cfg.space.len(key)).sum();
        if total != values.len() {
            self.warn(Warning::Relocation {
                from: Some(from),
                key: keys.first().copied().unwrap_or(0),
                what: "share frame whose values do not match its keys' lengths",
            });
            return false;
        }
        true
    }
}
