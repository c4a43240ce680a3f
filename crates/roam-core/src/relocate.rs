//! Relocation: moving a key's ownership, and its value, to the node that asked for it.
//!
//! Protocol (R requester, H home, O current owner):
//! 1. R marks the key in transit *before any message leaves* and sends `Localize` to H (or, if
//!    R is H, records itself as owner and sends `HandOver` to O directly).
//! 2. H records R as owner and sends `HandOver(new owner R)` to O, or, if H is O, removes the
//!    value and sends `Transfer` to R directly. If the key is still in transit to H, H notes R
//!    as the next hop and forwards the value when it lands.
//! 3. O removes the value and sends `Transfer` to R; if the key is still in transit to O
//!    (chained relocation), O notes R and forwards the value when it lands.
//! 4. R applies every operation queued while the key was in transit, in arrival order, then
//!    keeps the value, or forwards it to the next owner if one was noted.
//!
//! The home in force is the one of the sender's directory: a `Localize` that reaches a node that
//! is no longer the key's home is forwarded to the home of the receiver's table, and one that
//! reaches a new home while its bucket's move completes waits there (see `home_move.rs`).
//!
//! Why this keeps every update: the home serialises ownership changes, links are FIFO, so
//! everything H forwarded to O before the hand-over reaches O before it, and everything after it
//! goes to R, where it queues until the value lands. Requests reaching a former owner are sent
//! back through the home, which knows the current owner.

use std::collections::BTreeMap;

use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::msg::encode;
use crate::node::{Batch, Node, OpKind, Time};
use crate::stats::add;
use crate::store::{Residency, UpdateMode, apply};
use crate::warning::Warning;
use crate::wire::Kind;

/// An access waiting for a key in transit to this node.
#[derive(Debug)]
pub(crate) enum Queued {
    /// A local worker's pull: position `pos` of operation `op`.
    LocalPull { op: u64, pos: u32 },
    /// A local worker's push or set.
    LocalPush {
        op: u64,
        pos: u32,
        update: Vec<f32>,
        mode: UpdateMode,
    },
    /// A peer's pull, to be answered to `origin`.
    RemotePull {
        origin: NodeId,
        req: ReqId,
        pos: u32,
    },
    /// A peer's push or set, to be acknowledged to `origin`.
    RemotePush {
        origin: NodeId,
        req: ReqId,
        pos: u32,
        update: Vec<f32>,
        mode: UpdateMode,
    },
    /// A local worker's localize: done when the key lands.
    Localize { op: u64, pos: u32 },
}

impl Queued {
    /// The local operation and position this entry belongs to, if it is local.
    pub(crate) fn local_op(&self) -> Option<(u64, u32)> {
        match *self {
            Self::LocalPull { op, pos }
            | Self::LocalPush { op, pos, .. }
            | Self::Localize { op, pos } => Some((op, pos)),
            Self::RemotePull { .. } | Self::RemotePush { .. } => None,
        }
    }
}

/// A key on its way to this node.
#[derive(Debug)]
pub(crate) struct Transit {
    /// Accesses in arrival order.
    pub(crate) queue: Vec<Queued>,
    /// A later owner to pass the value on to once the queue is applied (chained relocation).
    pub(crate) then_to: Option<NodeId>,
    /// When the relocation started here (for latency figures).
    pub(crate) since: Time,
    /// An offer to decide once the value lands (`share/mod.rs`).
    pub(crate) offer: Option<crate::share::Offer>,
}

impl Node {
    /// Moves ownership of `keys` to this node. Keys already here or on their way are cheap
    /// no-ops; the operation completes when every key has landed.
    pub fn issue_localize(&mut self, now: Time, worker: WorkerId, keys: &[Key]) -> ReqId {
        self.tick(now);
        let op = self.new_op(worker, OpKind::Localize, keys.len(), Vec::new());
        if self.is_leaving() {
            // Its keys are going back to their homes: none may come here any more.
            if let Some(p) = self.pending.get_mut(&op) {
                p.remaining = 0;
            }
            let reason = "this node is being drained: its workers must have finished".into();
            self.fail(
                op,
                crate::OpError::Rejected {
                    peer: self.cfg.id,
                    reason,
                },
            );
            self.settle(op);
            return ReqId(op);
        }
        add(&self.counters.localize_keys, keys.len() as u64);
        self.localize_keys(now, Some(op), keys);
        self.settle(op);
        ReqId(op)
    }

    /// Starts moving `keys` here: for a worker's localize `op`, or with `None` for the node
    /// itself (a home taking back the keys of a leaving node; no policy is asked then).
    pub(crate) fn localize_keys(&mut self, now: Time, op: Option<u64>, keys: &[Key]) {
        let me = self.cfg.id;
        let answer = |node: &mut Self, pos: u32| {
            if let Some(op) = op {
                node.answer(op, pos);
            }
        };
        let mut to_home: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut hand_over: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut held: BTreeMap<u32, Vec<Key>> = BTreeMap::new();
        for (pos, &key) in keys.iter().enumerate() {
            let pos = pos as u32;
            // Replicated keys are local everywhere already, and a replica held here by intent
            // is here as long as that intent.
            let asked = op.is_none() || self.policy.relocate_on_localize(key, me);
            if self.replicas.contains(key)
                || (op.is_some() && self.store.has_replica(key))
                || !asked
            {
                answer(self, pos);
                continue;
            }
            match self.residency(key) {
                Residency::Local => answer(self, pos),
                // Lost with a peer on its way here (`peer_loss.rs`): it never lands.
                Residency::InTransit if self.key_lost(key).is_some() => {
                    let peer = self.key_lost(key).expect("checked");
                    answer(self, pos);
                    if let Some(op) = op {
                        self.fail(op, crate::OpError::PeerGone { peer });
                    }
                }
                Residency::InTransit => match (self.transit.get_mut(&key), op) {
                    (Some(t), Some(op)) => t.queue.push(Queued::Localize { op, pos }),
                    (Some(_), None) => {}
                    (None, _) => {
                        answer(self, pos);
                        self.warn(Warning::Relocation {
                            from: None,
                            key,
                            what: "in transit without a record",
                        });
                    }
                },
                Residency::Remote => {
                    // Its home, or the owner its home here records, is lost: so is the key.
                    if let Some(peer) = self.dest_lost(self.server_route(key)) {
                        answer(self, pos);
                        if let Some(op) = op {
                            self.fail(op, crate::OpError::PeerGone { peer });
                        }
                        continue;
                    }
                    self.store.set_in_transit(key, true);
                    self.transit.insert(
                        key,
                        Transit {
                            queue: op
                                .map(|op| vec![Queued::Localize { op, pos }])
                                .unwrap_or_default(),
                            then_to: None,
                            since: now,
                            offer: None,
                        },
                    );
                    let bucket = self.dir.bucket(key);
                    let deciding = self.is_deciding(key);
                    match self.records.get_mut(&bucket) {
                        Some(records) if !records.is_live() => {
                            held.entry(bucket).or_default().push(key);
                        }
                        Some(_) if deciding => self.wait_for_decision(key, me, me),
                        Some(records) => {
                            let old = records.set_owner(key, me);
                            if old == me {
                                self.warn(Warning::Relocation {
                                    from: None,
                                    key,
                                    what: "home key neither here nor recorded elsewhere",
                                });
                            } else {
                                hand_over.entry(old).or_default().push(key);
                            }
                        }
                        None => {
                            let home = self.dir.bucket_home(bucket);
                            to_home.entry(home).or_default().push(key);
                        }
                    }
                }
            }
        }
        for (dest, keys) in to_home {
            self.send(dest, encode::keys(Kind::Localize, me, &keys));
        }
        for (dest, keys) in hand_over {
            self.send(dest, encode::keys(Kind::HandOver, me, &keys));
        }
        for (bucket, keys) in held {
            self.hold(now, bucket, me, encode::keys(Kind::Localize, me, &keys));
        }
    }

    /// At the key's home (or a node that was): `new_owner` wants the keys.
    pub(crate) fn handle_localize(
        &mut self,
        now: Time,
        from: NodeId,
        new_owner: NodeId,
        keys: &[Key],
    ) {
        let me = self.cfg.id;
        if !self.dir.is_member(new_owner) {
            return self.warn(Warning::UnknownSender { from: new_owner });
        }
        let mut hand_over: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut stale: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut held: BTreeMap<u32, Vec<Key>> = BTreeMap::new();
        let mut moving = Vec::new();
        // Keys whose owner, or whose home in this node's table, is lost (`peer_loss.rs`).
        let mut lost: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        for &key in keys {
            match self.at_home(from, key, "localize of a key out of range") {
                AtHome::Here => {}
                AtHome::Held(bucket) => {
                    held.entry(bucket).or_default().push(key);
                    continue;
                }
                AtHome::Onward(home) if self.lost.contains(&home) => {
                    lost.entry(home).or_default().push(key);
                    continue;
                }
                AtHome::Onward(home) => {
                    stale.entry(home).or_default().push(key);
                    continue;
                }
                AtHome::Dropped => continue,
            }
            let bucket = self.dir.bucket(key);
            if self.is_deciding(key) {
                self.wait_for_decision(key, from, new_owner);
                continue;
            }
            let Some(records) = self.records.get_mut(&bucket) else {
                continue;
            };
            let old = records.set_owner(key, new_owner);
            if self.lost.contains(&old) {
                // The record now names the new owner, which keeps the key as lost.
                lost.entry(old).or_default().push(key);
            } else if old == new_owner {
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "asked for by the node that already owns it",
                });
            } else if old == me {
                moving.push(key);
            } else {
                hand_over.entry(old).or_default().push(key);
            }
        }
        self.release_to(now, new_owner, &moving);
        for (dest, keys) in hand_over {
            self.send(dest, encode::keys(Kind::HandOver, new_owner, &keys));
        }
        for (peer, keys) in lost {
            self.send_keys_lost(new_owner, peer, &keys);
        }
        for (dest, keys) in stale {
            add(&self.counters.forwards, 1);
            self.send(dest, encode::keys(Kind::Localize, new_owner, &keys));
        }
        for (bucket, keys) in held {
            self.hold(
                now,
                bucket,
                from,
                encode::keys(Kind::Localize, new_owner, &keys),
            );
        }
    }

    /// At the current owner: pass the keys to `new_owner`.
    pub(crate) fn handle_hand_over(
        &mut self,
        now: Time,
        from: NodeId,
        new_owner: NodeId,
        keys: &[Key],
    ) {
        if !self.dir.is_member(new_owner) || new_owner == self.cfg.id {
            let key = keys.first().copied().unwrap_or(0);
            return self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what: "hand-over to no member or to the owner itself",
            });
        }
        let keys: Vec<Key> = keys
            .iter()
            .copied()
            .filter(|&k| self.cfg.space.contains(k))
            .collect();
        self.release_to(now, new_owner, &keys);
    }

    /// Gives up `keys` to `new_owner`: local ones are sent now, ones still in transit here are
    /// passed on when they land. (Shared keys go through [`Node::release_to`] first.)
    pub(crate) fn release_now(&mut self, _now: Time, new_owner: NodeId, keys: &[Key]) {
        let mut transfer = self.spare.take();
        let mut lost: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        for &key in keys {
            if let Some(peer) = self.key_lost(key) {
                // Lost on its way here: the new owner gets the loss instead of the value.
                lost.entry(peer).or_default().push(key);
                continue;
            }
            match self.residency(key) {
                Residency::Local => {
                    // Straight into the batch: no copy through a scratch vector.
                    if self.store.remove(key, &mut transfer.values) {
                        transfer.keys.push(key);
                        transfer.positions.push(0);
                    }
                }
                Residency::InTransit => match self.transit.get_mut(&key) {
                    Some(t) if t.then_to.is_none() => t.then_to = Some(new_owner),
                    _ => self.warn(Warning::Relocation {
                        from: None,
                        key,
                        what: "handed on twice while in transit",
                    }),
                },
                Residency::Remote => self.warn(Warning::Relocation {
                    from: None,
                    key,
                    what: "asked to hand over a key that is not here",
                }),
            }
        }
        self.send_transfer(new_owner, transfer);
        for (peer, keys) in lost {
            self.send_keys_lost(new_owner, peer, &keys);
        }
    }

    /// Sends `transfer`'s keys and records to `to` (nothing if it is empty); keeps its buffers.
    fn send_transfer(&mut self, to: NodeId, transfer: Batch) {
        if transfer.keys.is_empty() {
            return self.spare.keep(transfer);
        }
        add(&self.counters.relocations_out, transfer.keys.len() as u64);
        add(
            &self.counters.relocation_bytes,
            (transfer.values.len() * 4) as u64,
        );
        if self.policy.location_caches() {
            for &key in &transfer.keys {
                self.cache.insert(key, to);
            }
        }
        let frame = encode::transfer(self.cfg.id, &transfer.keys, &transfer.values);
        self.spare.keep(transfer);
        self.send(to, frame);
    }

    /// Values landed: apply what queued for them, then keep or pass them on.
    pub(crate) fn handle_transfer(
        &mut self,
        now: Time,
        from: NodeId,
        keys: &[Key],
        values: &[f32],
    ) {
        let lengths: usize = keys
            .iter()
            .map(|&k| {
                if self.cfg.space.contains(k) {
                    self.cfg.space.record_len(k)
                } else {
                    0
                }
            })
            .sum();
        if let Some(&key) = keys.iter().find(|&&k| !self.cfg.space.contains(k)) {
            return self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what: "transfer of a key out of range",
            });
        }
        if lengths != values.len() {
            let key = keys.first().copied().unwrap_or(0);
            return self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what: "transfer whose values do not match its keys' lengths",
            });
        }
        if self.moving_in > 0 && self.hold_landings(now, from, keys, values) {
            return;
        }
        let mut offset = 0;
        let mut onward: Vec<(NodeId, Batch)> = Vec::new();
        let mut local_pulls: Vec<(u64, Batch)> = Vec::new();
        let mut replies: Vec<((NodeId, ReqId, Kind), Batch)> = Vec::new();
        let mut touched_ops = Vec::new();
        let mut offers = Vec::new();
        // One buffer for the records that queued accesses change: a transfer carries up to
        // thousands of keys, and a fresh vector per key was a measurable share of a
        // relocation's cost (malloc and free in every profile of KGE under `lapse`).
        let mut record = Vec::new();
        for &key in keys {
            // The whole record moves; queued accesses see its visible part.
            let (len, record_len) = (self.cfg.space.len(key), self.cfg.space.record_len(key));
            let landed = &values[offset..offset + record_len];
            offset += record_len;
            let Some(transit) = self.transit.remove(&key) else {
                if self.key_lost(key).is_some() {
                    // Lost with a peer while on its way (`peer_loss.rs`): a record elsewhere
                    // may name this node as the owner of a lost key, so it is not revived.
                    continue;
                }
                // Not expected here: keep the value rather than lose it.
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "unexpected transfer",
                });
                self.store.insert(key, landed);
                continue;
            };
            // Only accesses queued while the key travelled change the landed record.
            let changed = !transit.queue.is_empty();
            if changed {
                record.clear();
                record.extend_from_slice(landed);
            }
            add(&self.counters.relocations_in, 1);
            self.traced(key, from, now, crate::trace::Change::Moved);
            add(
                &self.counters.relocation_wait_ns,
                now.0.saturating_sub(transit.since.0),
            );
            let optimizer = self.cfg.space.optimizer_for(key).copied();
            for queued in transit.queue {
                match queued {
                    Queued::LocalPull { op, pos } => {
                        self.spare
                            .entry_by(&mut local_pulls, op)
                            .push(key, pos, &record[..len]);
                        touched_ops.push(op);
                    }
                    Queued::LocalPush {
                        op,
                        pos,
                        update,
                        mode,
                    } => {
                        apply(&mut record, &update, mode, optimizer.as_ref());
                        self.answer(op, pos);
                        touched_ops.push(op);
                    }
                    Queued::Localize { op, pos } => {
                        self.answer(op, pos);
                        touched_ops.push(op);
                    }
                    Queued::RemotePull { origin, req, pos } => {
                        self.spare
                            .entry_by(&mut replies, (origin, req, Kind::PullReply))
                            .push(key, pos, &record[..len]);
                    }
                    Queued::RemotePush {
                        origin,
                        req,
                        pos,
                        update,
                        mode,
                    } => {
                        apply(&mut record, &update, mode, optimizer.as_ref());
                        self.spare
                            .entry_by(&mut replies, (origin, req, Kind::PushReply))
                            .push(key, pos, &[]);
                    }
                }
            }
            let record: &[f32] = if changed { &record } else { landed };
            match transit.then_to {
                Some(next) => {
                    self.store.set_in_transit(key, false);
                    self.spare.entry_by(&mut onward, next).push(key, 0, record);
                }
                None => {
                    self.store.insert(key, record);
                    if !self.shares.left.is_empty() {
                        self.shares.left.remove(&key);
                    }
                    if let Some(offer) = transit.offer {
                        offers.push((offer, key));
                    }
                }
            }
        }
        for ((origin, req, kind), batch) in replies {
            add(&self.counters.served_keys, batch.keys.len() as u64);
            let reply = batch.reply_frame(kind, self.cfg.id, req);
            self.spare.keep(batch);
            self.send_reply(now, origin, reply);
        }
        for (next, batch) in onward {
            self.send_transfer(next, batch);
        }
        for (op, batch) in local_pulls {
            let reply = batch.reply_frame(Kind::PullReply, self.cfg.id, ReqId(op));
            self.spare.keep(batch);
            self.accept_pull_answer(op, reply);
        }
        touched_ops.sort_unstable();
        touched_ops.dedup();
        for op in touched_ops {
            self.settle(op);
        }
        // Offers that reached this node while the key was on its way are decided now.
        for (offer, key) in offers {
            self.decide_share(now, offer, &[key]);
        }
        self.reclaim_landed(keys);
        if self.cfg.space.any_dynamic() {
            // Keys that land can take the node past a row budget: back under it at once.
            self.landed_under_budget(keys);
        }
    }
}

impl Node {
    /// Holds the keys of a transfer whose bucket's move to this node is completing, so that
    /// they land (and the accesses queued for them apply) only after the frames that were
    /// routed by the old table (see `home_move.rs`). Returns whether it held any; if so, the
    /// keys it did not hold were handled through a transfer of their own.
    fn hold_landings(&mut self, now: Time, from: NodeId, keys: &[Key], values: &[f32]) -> bool {
        let mut held: BTreeMap<u32, Batch> = BTreeMap::new();
        let mut rest = Batch::default();
        let mut offset = 0;
        for &key in keys {
            let len = self.cfg.space.record_len(key);
            let value = &values[offset..offset + len];
            offset += len;
            let bucket = self.dir.bucket(key);
            if self.records.get(&bucket).is_some_and(|r| !r.is_live()) {
                held.entry(bucket).or_default().push(key, 0, value);
            } else {
                rest.push(key, 0, value);
            }
        }
        if held.is_empty() {
            return false;
        }
        for (bucket, batch) in held {
            let frame = encode::transfer(from, &batch.keys, &batch.values);
            self.hold(now, bucket, from, frame);
        }
        if !rest.keys.is_empty() {
            self.handle_transfer(now, from, &rest.keys, &rest.values);
        }
        true
    }
}

/// Where a key-carrying request that reached this node as the key's home goes (`Node::at_home`).
pub(crate) enum AtHome {
    /// This node holds the key's bucket records, live.
    Here,
    /// Its bucket is moving to this node: hold the request until the move completes.
    Held(u32),
    /// Routed by an older table: the home of this node's table takes it from here.
    Onward(NodeId),
    /// Out of range, or no home has it (warned).
    Dropped,
}

impl Node {
    /// Checks `key` of a request from `from` (`what` names the request in warnings) and says
    /// whether this node, as the key's home, handles it, holds it, or passes it on.
    pub(crate) fn at_home(&mut self, from: NodeId, key: Key, what: &'static str) -> AtHome {
        if !self.cfg.space.contains(key) {
            self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what,
            });
            return AtHome::Dropped;
        }
        let bucket = self.dir.bucket(key);
        match self.records.get(&bucket) {
            Some(records) if records.is_live() => AtHome::Here,
            Some(_) => AtHome::Held(bucket),
            None => {
                let home = self.dir.bucket_home(bucket);
                if home != self.cfg.id {
                    return AtHome::Onward(home);
                }
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "home without the bucket's records",
                });
                AtHome::Dropped
            }
        }
    }
}
