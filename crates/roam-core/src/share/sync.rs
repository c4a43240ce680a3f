//! Keeping shared keys' replicas in step with their owner, and ending replicas (see the
//! protocol in `share/mod.rs`).
//!
//! Invariants: a member's pushes to a replica are taken from its pending delta exactly once —
//! by a round (`ShareDeltas`, kept in flight until the owner acknowledges the round) or by the
//! leave (`Leave`) — and the owner adds each exactly once into its record; a member's replica
//! is always the owner's value as last received, plus its deltas in flight after the
//! acknowledged round, plus its pending delta. Rounds are numbered per member and links are
//! FIFO, so "applied up to round r" is exact.
//!
//! Under a stateful optimizer a member's `push_gradients` of a replica add into the replica's
//! accumulator (`store/replica_grad.rs`), taken exactly once — by a round or with the replica's
//! removal at its leave — and sent to the owner in a `ShareDeltas` frame whose round carries
//! `GRADIENT_ROUND`, ahead of the leave on the same link; the owner steps its record once per
//! such sum while the member is still a sharer (docs/embeddings.md, "Where the step runs").

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use crate::id::{Key, NodeId, ReqId};
use crate::node::{Node, Time};
use crate::stats::add;
use crate::store::UpdateMode;
use crate::warning::Warning;
use crate::wire::{Frame, Kind};

use super::{Sent, SharedKey};
use crate::replica::{GRADIENT_ROUND, contributor};

/// One owner's part of a leave: keys, their replicas' generations, their final deltas.
type Leaving = (Vec<Key>, Vec<u32>, Vec<f32>);

/// One owner's accumulated gradients: keys and their sums, concatenated.
type Gradients = (Vec<Key>, Vec<f32>);

impl Node {
    /// The next share-sync round, while anything is shared with or by this node (with a work
    /// clock: the next look at it, if sooner).
    pub(crate) fn share_timeout(&self) -> Option<Time> {
        if !self.shares.active() {
            return None;
        }
        let next = self.shares.next_round_at;
        if self.shares.updates_per_key > 0 {
            return Some(next.min(self.shares.next_poll_at));
        }
        // A period of `u64::MAX` (the exhaustive explorer's): one round at the start, then
        // replicas change only by grants and leaves.
        (next != Time(u64::MAX)).then_some(next)
    }

    /// Runs a share-sync round if one is due (by time or by the work clock).
    pub(crate) fn share_handle_timeout(&mut self, now: Time) {
        if !self.shares.active() {
            return;
        }
        // Read once a tick: it sums the workers' counters under their registry's lock.
        let local = if self.shares.updates_per_key > 0 {
            self.store.local_updates()
        } else {
            0
        };
        if now < self.shares.next_round_at && !self.share_worked_enough(local) {
            if self.shares.updates_per_key > 0 {
                self.shares.next_poll_at = Time(now.0.saturating_add(self.shares.poll_every()));
            }
            return;
        }
        let shares = &mut self.shares;
        shares.next_round_at = Time(now.0.saturating_add(shares.sync_every));
        shares.next_poll_at = Time(now.0.saturating_add(shares.poll_every()));
        shares.work.start_round(local);
        add(&self.counters.share_rounds, 1);
        self.send_share_deltas();
        self.broadcast_shared();
        self.retry_promotions();
    }

    /// Owner: offers the shared keys that no intent here wants and whose sole sharer is busy
    /// with them to that sharer ([`Node::offer_promotions`]), once a round. The offer when
    /// this node's use ends is the first chance; this catches the keys for which it came too
    /// early (the sharer not busy long enough yet) or never came (the use here ended before
    /// the key was shared, as when only a linger held it), which would otherwise stay owned by
    /// a node that does not use them, synced every round.
    fn retry_promotions(&mut self) {
        // While frozen for a checkpoint's cut the sharer would ignore the offer.
        if self.shares.techniques != super::IntentTechniques::All
            || self.is_leaving()
            || self.is_frozen()
        {
            return;
        }
        let keys: Vec<Key> = self
            .shares
            .owned
            .iter()
            .filter(|(_, shared)| {
                shared.sharers.len() == 1 && shared.member_rounds >= super::PROMOTE_AFTER_ROUNDS
            })
            .map(|(&key, _)| key)
            .filter(|&key| !self.interest.wanted(key))
            .collect();
        if !keys.is_empty() {
            self.offer_promotions(&keys);
        }
    }

    /// Whether the work clock (`work_clock.rs`; `local`: this node's count now) calls for a
    /// round: `updates_per_key` updates for each key shared here.
    fn share_worked_enough(&self, local: u64) -> bool {
        let s = &self.shares;
        if s.updates_per_key == 0 {
            return false;
        }
        let shared = (s.held.len() + s.owned.len()).max(1) as u64;
        let due = s.updates_per_key.saturating_mul(shared);
        s.work.due(local, due)
    }

    /// Member: sends the pending deltas of the replicas held here to their owners.
    pub(crate) fn send_share_deltas(&mut self) {
        let round = self.shares.round;
        let mut out: BTreeMap<NodeId, (Vec<Key>, Vec<f32>)> = BTreeMap::new();
        let mut grads: BTreeMap<NodeId, Gradients> = BTreeMap::new();
        let mut delta = std::mem::take(&mut self.shares.scratch);
        let mut unwanted = Vec::new();
        for (&key, held) in &self.shares.held {
            // A worker's release and a grant can cross (each sees the other's old state):
            // a replica no intent wants any more is dropped here at the latest (its
            // accumulated gradient goes with its leave).
            if !self.interest.wanted(key) {
                unwanted.push(key);
                continue;
            }
            delta.clear();
            if self.store.take_delta(key, &mut delta) && delta.iter().any(|&d| d != 0.0) {
                let (keys, values) = out.entry(held.owner).or_default();
                keys.push(key);
                values.extend_from_slice(&delta);
            }
            // Under a stateful optimizer: the gradients pushed here since the last round,
            // summed, for the owner to step once (`store/replica_grad.rs`).
            let (keys, values) = grads.entry(held.owner).or_default();
            if self.store.take_replica_gradient(key, values) {
                keys.push(key);
            }
        }
        self.shares.scratch = delta;
        if !unwanted.is_empty() {
            let now = self.clock;
            self.leave_shares(now, &unwanted, false);
        }
        self.send_share_gradients(round, grads);
        if out.is_empty() {
            return;
        }
        self.shares.round += 1;
        for (owner, (keys, values)) in out {
            if self.lost.contains(&owner) {
                continue;
            }
            let frame = Frame::with_contents(
                Kind::ShareDeltas,
                self.cfg.id,
                ReqId(round),
                0,
                &keys,
                None,
                &values,
            );
            add(&self.counters.share_bytes_sent, frame.wire_len() as u64);
            self.send(owner, frame);
            let mut starts = HashMap::default();
            starts.reserve(keys.len());
            let mut at = 0u32;
            for &key in &keys {
                starts.insert(key, at);
                at += self.cfg.space.len(key) as u32;
            }
            self.shares.in_flight.push_back(Sent {
                round,
                owner,
                values,
                starts,
            });
        }
    }

    /// Member: sends accumulated gradient sums to their owners, in a `ShareDeltas` frame whose
    /// round carries [`GRADIENT_ROUND`] (never acknowledged and never kept in flight: the
    /// replica's value does not hold them, and the owner's step reaches it as a change).
    /// Per-link FIFO orders it before anything sent to that owner later (a leave).
    fn send_share_gradients(&mut self, round: u64, grads: BTreeMap<NodeId, Gradients>) {
        for (owner, (keys, values)) in grads {
            if keys.is_empty() || self.lost.contains(&owner) {
                continue;
            }
            add(&self.counters.share_grad_keys_sent, keys.len() as u64);
            let frame = Frame::with_contents(
                Kind::ShareDeltas,
                self.cfg.id,
                ReqId(round | GRADIENT_ROUND),
                0,
                &keys,
                None,
                &values,
            );
            add(&self.counters.share_bytes_sent, frame.wire_len() as u64);
            self.send(owner, frame);
        }
    }

    /// Owner: a member's accumulated gradients of shared keys: each steps the record once,
    /// with the member's sum (the optimizer state lives only here). The new value reaches every
    /// sharer, the sender included, with the next broadcast (it differs from the shadow).
    fn handle_share_gradients(&mut self, from: NodeId, keys: &[Key], values: &[f32]) {
        let mut at = 0;
        for &key in keys {
            let len = self.cfg.space.len(key);
            let g = &values[at..at + len];
            at += len;
            // As for deltas: only a current sharer sends them, and the key stays here until
            // every sharer left (its gradients come before its leave on the same link).
            let Some(shared) = self.shared_by(
                from,
                key,
                "replica gradients from a node that is not a sharer of a key owned here",
            ) else {
                continue;
            };
            shared.member_rounds = shared.member_rounds.saturating_add(1);
            if !self.store.push_local(key, g, UpdateMode::Gradient) {
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "replica gradients for a key not owned here",
                });
                continue;
            }
            add(&self.counters.share_grad_steps, 1);
            if let Some(log) = self.replicas.step_log() {
                log.push((key, g.to_vec()));
            }
        }
    }

    /// Owner: sends every sharer the shared keys whose value changed since the last broadcast,
    /// except to a member whose own deltas were the only change (its replica has them
    /// already); a member whose deltas were applied gets at least the acknowledgement.
    fn broadcast_shared(&mut self) {
        let mut frames: BTreeMap<NodeId, (Vec<Key>, Vec<f32>)> = BTreeMap::new();
        let mut contributed = 0u64;
        let mut value = Vec::new();
        for (&key, shared) in self.shares.owned.iter_mut() {
            // Unchanged since the last look (no push here, no delta applied): nothing to read.
            if !self.store.take_dirty(key) {
                continue;
            }
            value.resize(self.cfg.space.len(key), 0.0);
            if !self.store.pull_local(key, &mut value) || same_bits(&value, &shared.last_sent) {
                continue;
            }
            // Changed by members only (bitwise: the same additions in the same order), or
            // also here (then every sharer needs it).
            let by = if same_bits(&value, &shared.shadow) {
                shared.changed_by | std::mem::take(&mut shared.resend)
            } else {
                u64::MAX
            };
            contributed |= shared.changed_by;
            shared.changed_by = 0;
            shared.last_sent.clone_from(&value);
            shared.shadow.clone_from(&value);
            for &member in shared.sharers.keys() {
                if by & !contributor(member) == 0 {
                    continue;
                }
                let (keys, values) = frames.entry(member).or_default();
                keys.push(key);
                values.extend_from_slice(&value);
            }
        }
        let acked: Vec<NodeId> = self
            .shares
            .applied
            .keys()
            .copied()
            .filter(|&m| contributed & contributor(m) != 0)
            .collect();
        for member in acked {
            frames.entry(member).or_default();
        }
        for (member, (keys, values)) in frames {
            let ack = self.shares.applied.get(&member).copied().unwrap_or(0);
            let frame = Frame::with_contents(
                Kind::ShareValues,
                self.cfg.id,
                ReqId(ack),
                0,
                &keys,
                None,
                &values,
            );
            add(&self.counters.share_bytes_sent, frame.wire_len() as u64);
            self.send(member, frame);
        }
    }

    /// Owner: a member's deltas of its round `round`.
    pub(crate) fn handle_share_deltas(
        &mut self,
        from: NodeId,
        round: u64,
        keys: &[Key],
        values: &[f32],
    ) {
        if !self.check_share_lengths(from, keys, values) {
            return;
        }
        let weight = self.shares.updates_per_key;
        (self.shares.work).count_remote(weight.saturating_mul(keys.len() as u64));
        if round & GRADIENT_ROUND != 0 {
            return self.handle_share_gradients(from, keys, values);
        }
        self.apply_member_deltas(from, keys, values, true);
        let applied = self.shares.applied.entry(from).or_insert(0);
        *applied = (*applied).max(round);
    }

    /// Owner: the share record of `key` if `from` is one of its sharers. Only a sharer sends
    /// deltas or gradients, and an owner keeps a shared key until every sharer left: anything
    /// else is a peer's mistake, warned about (`what`) rather than misapplied.
    fn shared_by(&mut self, from: NodeId, key: Key, what: &'static str) -> Option<&mut SharedKey> {
        let known = self
            .shares
            .owned
            .get(&key)
            .is_some_and(|shared| shared.sharers.contains_key(&from));
        if !known {
            self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what,
            });
            return None;
        }
        self.shares.owned.get_mut(&key)
    }

    /// Owner: adds a member's deltas into the owned records; with `round`, counts the round
    /// in each key's [`SharedKey::member_rounds`]. One lookup per key: this runs for every key
    /// of every member's round.
    fn apply_member_deltas(&mut self, from: NodeId, keys: &[Key], values: &[f32], round: bool) {
        let mut at = 0;
        let mut strangers = Vec::new();
        let mut missing = Vec::new();
        let by = contributor(from);
        for &key in keys {
            let len = self.cfg.space.len(key);
            let delta = &values[at..at + len];
            at += len;
            // Only a sharer sends deltas, and an owner keeps a shared key until every sharer
            // left: anything else is a peer's mistake, refused loudly rather than misapplied.
            let Some(shared) = self
                .shares
                .owned
                .get_mut(&key)
                .filter(|shared| shared.sharers.contains_key(&from))
            else {
                strangers.push(key);
                continue;
            };
            shared
                .shadow
                .iter_mut()
                .zip(delta)
                .for_each(|(s, d)| *s += d);
            shared.changed_by |= by;
            if round {
                shared.member_rounds = shared.member_rounds.saturating_add(1);
            }
            if !self.store.push_local(key, delta, UpdateMode::Add) {
                missing.push(key);
            }
        }
        for key in strangers {
            self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what: "replica delta from a node that is not a sharer of a key owned here",
            });
        }
        for key in missing {
            self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what: "replica delta for a key not owned here",
            });
        }
    }

    /// Member: values from the owner `from`, including this node's rounds up to `ack`.
    pub(crate) fn handle_share_values(
        &mut self,
        from: NodeId,
        ack: u64,
        keys: &[Key],
        values: &[f32],
    ) {
        if !self.check_share_lengths(from, keys, values) {
            return;
        }
        let shares = &mut self.shares;
        shares
            .in_flight
            .retain(|sent| sent.owner != from || sent.round > ack);
        let mut extra: Vec<&[f32]> = Vec::new();
        let mut at = 0;
        for &key in keys {
            let len = self.cfg.space.len(key);
            let value = &values[at..at + len];
            at += len;
            // A replica dropped since (or granted by another owner) ignores it.
            if shares.held.get(&key).is_none_or(|h| h.owner != from) {
                continue;
            }
            extra.clear();
            extra.extend(
                shares
                    .in_flight
                    .iter()
                    .filter(|sent| sent.owner == from)
                    .filter_map(|sent| sent.delta(key, len)),
            );
            self.store.rebase_replica_with(key, value, &extra);
        }
    }

    /// Keys no intent here wants any more: replicas held here go ([`Node::leave_shares`]); a
    /// shared key owned here whose sole sharer is busy with it (at least
    /// [`super::PROMOTE_AFTER_ROUNDS`] delta rounds since it became the only one) is offered to
    /// that sharer ([`Kind::Promote`]): one interested node gets the key.
    pub(crate) fn drop_unwanted(&mut self, now: Time, keys: &[Key]) {
        // Rows no intent here wants any more may go back to their creators.
        self.dynamic.may_evict_again();
        self.decide_deferred_unwanted(now, keys);
        self.offer_promotions(keys);
        self.leave_shares(now, keys, false);
    }

    /// Owner: offers each of `keys` that no intent here wants, that is not being given away,
    /// and whose sole sharer is busy with it ([`super::PROMOTE_AFTER_ROUNDS`]) to that sharer.
    fn offer_promotions(&mut self, keys: &[Key]) {
        let mut promote: BTreeMap<NodeId, (Vec<Key>, Vec<u32>)> = BTreeMap::new();
        if self.shares.techniques == super::IntentTechniques::All && !self.is_leaving() {
            for &key in keys {
                // A deferred offer goes first: it moves the key once the sharer left.
                if self.interest.wanted(key)
                    || self.shares.revoking.contains_key(&key)
                    || self.is_deferred(key)
                {
                    continue;
                }
                let Some(shared) = self.shares.owned.get_mut(&key) else {
                    continue;
                };
                let mut sharers = shared.sharers.iter();
                if let (Some((&member, &generation)), None) = (sharers.next(), sharers.next())
                    && shared.member_rounds >= super::PROMOTE_AFTER_ROUNDS
                {
                    // Offered again only after as many more busy rounds (the sharer may have
                    // stopped wanting the key, or the offer may be on its way).
                    shared.member_rounds = 0;
                    let (keys, generations) = promote.entry(member).or_default();
                    keys.push(key);
                    generations.push(generation as u32);
                }
            }
        }
        for (member, (keys, generations)) in promote {
            let frame = Frame::with_positions(
                Kind::Promote,
                self.cfg.id,
                ReqId(0),
                0,
                &keys,
                &generations,
                0,
            );
            self.send(member, frame);
        }
    }

    /// Member: those of `keys` whose replica here is owner `from`'s of the generation named.
    fn held_from(&self, from: NodeId, generations: &[u32], keys: &[Key]) -> Vec<Key> {
        keys.iter()
            .zip(generations)
            .filter(|&(key, &generation)| {
                self.shares
                    .held
                    .get(key)
                    .is_some_and(|h| h.owner == from && h.generation as u32 == generation)
            })
            .map(|(&key, _)| key)
            .collect()
    }

    /// Member: the owner `from` wants none of `keys` any more; replicas that an intent here
    /// still wants become this node's: dropped (final delta sent) and localized, so the key
    /// moves here as by a relocation, behind the delta.
    pub(crate) fn handle_promote(
        &mut self,
        now: Time,
        from: NodeId,
        generations: &[u32],
        keys: &[Key],
    ) {
        // Frozen for a checkpoint cut: the key stays shared (as if no intent wanted it here).
        if self.is_leaving() || self.is_frozen() {
            return;
        }
        // Held first: only keys in range are held, so the interest lookup is safe.
        let mut taken = self.held_from(from, generations, keys);
        taken.retain(|&key| self.interest.wanted(key));
        if taken.is_empty() {
            return;
        }
        add(&self.counters.share_promotions, taken.len() as u64);
        self.leave_shares(now, &taken, true);
        self.localize_keys(now, None, &taken);
    }

    /// Member: drops the replicas of `keys` held here by intent (with `revoked`, even if an
    /// intent here still wants them), sending each one's final delta to its owner.
    pub(crate) fn leave_shares(&mut self, now: Time, keys: &[Key], revoked: bool) {
        let mut out: BTreeMap<NodeId, Leaving> = BTreeMap::new();
        let mut grads: BTreeMap<NodeId, Gradients> = BTreeMap::new();
        let mut record = Vec::new();
        for &key in keys {
            let Some(&held) = self.shares.held.get(&key) else {
                continue;
            };
            if !revoked && self.interest.wanted(key) {
                continue;
            }
            record.clear();
            self.shares.held.remove(&key);
            // The pending gradient sum goes with the replica, flushed ahead of the leave.
            let (grad_keys, grad_values) = grads.entry(held.owner).or_default();
            let before = grad_values.len();
            let removed = self
                .store
                .remove_replica_with_gradient(key, &mut record, grad_values);
            if grad_values.len() > before {
                grad_keys.push(key);
            }
            if !removed {
                // Never expected: no replica to flush; the owner must still drop the sharer.
                self.warn(Warning::Relocation {
                    from: None,
                    key,
                    what: "replica held by intent missing from the store",
                });
                let zeros = self.cfg.space.len(key);
                record.resize(2 * zeros, 0.0);
            }
            // Later accesses from here go straight to the owner, behind the final delta on the
            // same link (through the home they could overtake it).
            self.shares.left.insert(key, held.owner);
            add(&self.counters.share_leaves, 1);
            let lifetime = now.0.saturating_sub(held.since.0).max(1);
            let _ = self.shares.lifetimes.record(lifetime);
            let (value, base) = record.split_at(record.len() / 2);
            let (keys, generations, deltas) = out.entry(held.owner).or_default();
            keys.push(key);
            generations.push(held.generation as u32);
            deltas.extend(value.iter().zip(base).map(|(v, b)| v - b));
        }
        // Before the leaves, on the same links: the owner steps them while this node is still
        // a sharer, exactly once.
        let round = self.shares.round;
        self.send_share_gradients(round, grads);
        for (owner, (keys, generations, deltas)) in out {
            if !self.shares.held.values().any(|h| h.owner == owner) {
                // Nothing of that owner's is held here any more: no acknowledgement will come.
                self.shares.in_flight.retain(|sent| sent.owner != owner);
            }
            if self.lost.contains(&owner) {
                continue;
            }
            // Replicas only pushed gradients to (their sums went ahead) have zero deltas: the
            // leave then carries none (about a value's bytes per key under AdaGrad).
            let deltas: &[f32] = if deltas.iter().all(|&d| d == 0.0) {
                &[]
            } else {
                &deltas
            };
            let frame = Frame::with_contents(
                Kind::Leave,
                self.cfg.id,
                ReqId(0),
                0,
                &keys,
                Some(&generations),
                deltas,
            );
            add(&self.counters.share_bytes_sent, frame.wire_len() as u64);
            self.send(owner, frame);
        }
    }

    /// A member was lost: it is no sharer any more (keys waiting for its leave go on), and
    /// replicas of keys it owned are dropped without a flush (its record is gone with it).
    pub(crate) fn forget_sharer(&mut self, node: NodeId) {
        let now = self.clock;
        let mut released: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut emptied = Vec::new();
        for (&key, shared) in self.shares.owned.iter_mut() {
            shared.sharers.remove(&node);
            shared.ends.remove(&node);
            if shared.sharers.is_empty() {
                emptied.push(key);
            }
        }
        for key in emptied {
            self.shares.owned.remove(&key);
            self.dynamic.may_evict_again();
            self.unwatch(key);
            if let Some(to) = self.shares.revoking.remove(&key) {
                released.entry(to).or_default().push(key);
            }
        }
        for (to, keys) in released {
            self.release_now(now, to, &keys);
        }
        self.shares.applied.remove(&node);
        let orphaned: Vec<Key> = self
            .shares
            .held
            .iter()
            .filter(|(_, h)| h.owner == node)
            .map(|(&k, _)| k)
            .collect();
        let mut record = Vec::new();
        for key in orphaned {
            self.shares.held.remove(&key);
            record.clear();
            self.store.remove_replica(key, &mut record);
        }
        self.shares.in_flight.retain(|sent| sent.owner != node);
        self.shares.left.retain(|_, owner| *owner != node);
    }

    /// Member (a drain): drops every replica held here by intent.
    pub(crate) fn leave_all_shares(&mut self, now: Time) {
        let keys: Vec<Key> = self.shares.held.keys().copied().collect();
        self.leave_shares(now, &keys, true);
    }

    /// Owner: a member dropped its replicas of `keys` (generations `generations`), with their final
    /// deltas.
    pub(crate) fn handle_leave(
        &mut self,
        now: Time,
        from: NodeId,
        generations: &[u32],
        keys: &[Key],
        values: &[f32],
    ) {
        // No values: every final delta is zero (nothing to add).
        if !values.is_empty() {
            if !self.check_share_lengths(from, keys, values) {
                return;
            }
            self.apply_member_deltas(from, keys, values, false);
        } else if !self.check_share_keys(from, keys) {
            return;
        }
        let mut released: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        for (&key, &generation) in keys.iter().zip(generations) {
            let Some(shared) = self.shares.owned.get_mut(&key) else {
                continue;
            };
            if shared
                .sharers
                .get(&from)
                .is_some_and(|&g| g as u32 == generation)
            {
                shared.sharers.remove(&from);
                shared.ends.remove(&from);
            }
            if shared.sharers.is_empty() {
                self.shares.owned.remove(&key);
                self.dynamic.may_evict_again();
                self.unwatch(key);
                if let Some(to) = self.shares.revoking.remove(&key) {
                    released.entry(to).or_default().push(key);
                }
            } else {
                shared.member_rounds = 0;
            }
        }
        for (to, keys) in released {
            self.release_now(now, to, &keys);
        }
        // A deferred offer waits for the last of the key's users here, sharers included.
        self.decide_deferred_unwanted(now, keys);
        self.check_evacuated();
    }

    /// Member: the owner `from` must give keys away: drop the replicas it names.
    pub(crate) fn handle_revoke(
        &mut self,
        now: Time,
        from: NodeId,
        generations: &[u32],
        keys: &[Key],
    ) {
        let named = self.held_from(from, generations, keys);
        self.leave_shares(now, &named, true);
    }
}

/// Whether two values are the same bit for bit: a value unchanged since the last broadcast is
/// the same bits (float `==` would also be slower, compared element by element, and would
/// call a NaN changed every round and `-0.0` unchanged from `0.0`).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    bytemuck::cast_slice::<f32, u32>(a) == bytemuck::cast_slice::<f32, u32>(b)
}
