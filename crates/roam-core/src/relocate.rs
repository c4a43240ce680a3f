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
//! Why this keeps every update: the home serialises ownership changes, links are FIFO, so
//! everything H forwarded to O before the hand-over reaches O before it, and everything after it
//! goes to R, where it queues until the value lands. Requests reaching a former owner are sent
//! back through the home, which knows the current owner.

use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::node::{Batch, Node, OpKind, Time};
use crate::stats::add;
use crate::store::{Residency, UpdateMode, apply};
use crate::wire::{Frame, Kind};

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
}

impl Node {
    /// Moves ownership of `keys` to this node. Keys already here or on their way are cheap
    /// no-ops; the operation completes when every key has landed.
    pub fn issue_localize(&mut self, now: Time, worker: WorkerId, keys: &[Key]) -> ReqId {
        let op = self.new_op(worker, OpKind::Localize, keys.len(), Vec::new());
        add(&self.counters.localize_keys, keys.len() as u64);
        let me = self.cfg.id;
        let mut to_home: Vec<Vec<Key>> = vec![Vec::new(); self.cfg.num_nodes as usize];
        let mut hand_over: Vec<Vec<Key>> = vec![Vec::new(); self.cfg.num_nodes as usize];
        for (pos, &key) in keys.iter().enumerate() {
            let pos = pos as u32;
            if !self.cfg.dynamic {
                self.answer(op, pos);
                continue;
            }
            match self.store.residency(key) {
                Residency::Local => {
                    self.answer(op, pos);
                }
                // Once a peer is lost the key may never land (it may have been on that peer or in
                // a transfer cut with it): fail rather than wait, like queued pulls and pushes.
                Residency::InTransit if self.lost.iter().any(|&l| l) => {
                    let peer = self.lost.iter().position(|&l| l).expect("checked");
                    self.answer(op, pos);
                    self.fail(
                        op,
                        crate::OpError::PeerGone {
                            peer: NodeId(peer as u32),
                        },
                    );
                }
                Residency::InTransit => match self.transit.get_mut(&key) {
                    Some(t) => t.queue.push(Queued::Localize { op, pos }),
                    None => {
                        self.answer(op, pos);
                        self.anomaly(format!("key {key} in transit without a record"));
                    }
                },
                Residency::Remote => {
                    if let Some(peer) = self.lost.iter().position(|&l| l) {
                        self.answer(op, pos);
                        self.fail(
                            op,
                            crate::OpError::PeerGone {
                                peer: NodeId(peer as u32),
                            },
                        );
                        continue;
                    }
                    self.store.set_in_transit(key, true);
                    self.transit.insert(
                        key,
                        Transit {
                            queue: vec![Queued::Localize { op, pos }],
                            then_to: None,
                            since: now,
                        },
                    );
                    let home = self.home.home(key);
                    if home == me {
                        let old = self.owners.remove(&key).unwrap_or(me);
                        if old == me {
                            self.anomaly(format!(
                                "home key {key} is neither here nor recorded elsewhere"
                            ));
                        } else {
                            hand_over[old.index()].push(key);
                        }
                    } else {
                        to_home[home.index()].push(key);
                    }
                }
            }
        }
        for (dest, keys) in to_home.into_iter().enumerate() {
            if !keys.is_empty() {
                let frame = Frame::new(Kind::Localize, me, ReqId(0), 0, &keys, 0);
                self.outbox.push_back((NodeId(dest as u32), frame));
            }
        }
        for (dest, keys) in hand_over.into_iter().enumerate() {
            if !keys.is_empty() {
                let frame = Frame::new(Kind::HandOver, me, ReqId(0), 0, &keys, 0);
                self.outbox.push_back((NodeId(dest as u32), frame));
            }
        }
        self.settle(op);
        ReqId(op)
    }

    /// At the home node: `frame.origin` wants the keys.
    pub(crate) fn handle_localize(&mut self, now: Time, from: NodeId, frame: Frame) {
        let me = self.cfg.id;
        let new_owner = frame.header.origin;
        if new_owner != from || new_owner.0 >= self.cfg.num_nodes {
            return self.anomaly(format!(
                "localize from {from} on behalf of node {}",
                new_owner.0
            ));
        }
        let mut hand_over: Vec<Vec<Key>> = vec![Vec::new(); self.cfg.num_nodes as usize];
        let mut moving = Vec::new();
        for &key in frame.keys() {
            if key >= self.cfg.space.num_keys() || self.home.home(key) != me {
                self.anomaly(format!(
                    "localize of key {key} sent to {me}, which is not its home"
                ));
                continue;
            }
            let old = if new_owner == me {
                self.owners.remove(&key)
            } else {
                self.owners.insert(key, new_owner)
            };
            let old = old.unwrap_or(me);
            if old == new_owner {
                self.anomaly(format!(
                    "{new_owner} asked for key {key}, which it already owns"
                ));
            } else if old == me {
                moving.push(key);
            } else {
                hand_over[old.index()].push(key);
            }
        }
        self.release(now, new_owner, &moving);
        for (dest, keys) in hand_over.into_iter().enumerate() {
            if !keys.is_empty() {
                let frame = Frame::new(Kind::HandOver, new_owner, ReqId(0), 0, &keys, 0);
                self.outbox.push_back((NodeId(dest as u32), frame));
            }
        }
    }

    /// At the current owner: pass the keys to `frame.origin`.
    pub(crate) fn handle_hand_over(&mut self, now: Time, from: NodeId, frame: Frame) {
        let new_owner = frame.header.origin;
        if new_owner.0 >= self.cfg.num_nodes || new_owner == self.cfg.id {
            return self.anomaly(format!("hand-over from {from} to node {}", new_owner.0));
        }
        let keys: Vec<Key> = frame
            .keys()
            .iter()
            .copied()
            .filter(|&k| k < self.cfg.space.num_keys())
            .collect();
        self.release(now, new_owner, &keys);
    }

    /// Gives up `keys` to `new_owner`: local ones are sent now, ones still in transit here are
    /// passed on when they land.
    fn release(&mut self, _now: Time, new_owner: NodeId, keys: &[Key]) {
        let mut transfer = Batch::default();
        let mut value = Vec::new();
        for &key in keys {
            match self.store.residency(key) {
                Residency::Local => {
                    value.clear();
                    self.store.remove(key, &mut value);
                    transfer.push(key, 0, &value);
                }
                Residency::InTransit => match self.transit.get_mut(&key) {
                    Some(t) if t.then_to.is_none() => t.then_to = Some(new_owner),
                    _ => self.anomaly(format!("key {key} handed on twice while in transit")),
                },
                Residency::Remote => {
                    self.anomaly(format!("asked to hand over key {key}, which is not here"))
                }
            }
        }
        self.send_transfer(new_owner, transfer);
    }

    fn send_transfer(&mut self, to: NodeId, transfer: Batch) {
        if transfer.keys.is_empty() {
            return;
        }
        add(&self.counters.relocations_out, transfer.keys.len() as u64);
        add(
            &self.counters.relocation_bytes,
            (transfer.values.len() * 4) as u64,
        );
        if self.cfg.location_caches {
            for &key in &transfer.keys {
                self.cache.insert(key, to);
            }
        }
        let frame = Frame::new(
            Kind::Transfer,
            self.cfg.id,
            ReqId(0),
            0,
            &transfer.keys,
            transfer.values.len(),
        );
        let mut frame = frame;
        frame.values_mut().copy_from_slice(&transfer.values);
        self.outbox.push_back((to, frame));
    }

    /// Values landed: apply what queued for them, then keep or pass them on.
    pub(crate) fn handle_transfer(&mut self, now: Time, from: NodeId, frame: Frame) {
        let lengths: usize = frame
            .keys()
            .iter()
            .map(|&k| {
                if k < self.cfg.space.num_keys() {
                    self.cfg.space.len(k)
                } else {
                    0
                }
            })
            .sum();
        if lengths != frame.values().len()
            || frame.keys().iter().any(|&k| k >= self.cfg.space.num_keys())
        {
            return self.anomaly(format!("malformed transfer from {from}"));
        }
        let mut offset = 0;
        let mut onward: Vec<(NodeId, Batch)> = Vec::new();
        let mut local_pulls: Vec<(u64, Batch)> = Vec::new();
        let mut replies: Vec<((NodeId, ReqId, Kind), Batch)> = Vec::new();
        let mut touched_ops = Vec::new();
        for &key in frame.keys() {
            let len = self.cfg.space.len(key);
            let mut value = frame.values()[offset..offset + len].to_vec();
            offset += len;
            let Some(transit) = self.transit.remove(&key) else {
                // Not expected here: keep the value rather than lose it.
                self.anomaly(format!("unexpected transfer of key {key} from {from}"));
                self.store.insert(key, &value);
                continue;
            };
            add(&self.counters.relocations_in, 1);
            add(
                &self.counters.relocation_wait_ns,
                now.0.saturating_sub(transit.since.0),
            );
            for queued in transit.queue {
                match queued {
                    Queued::LocalPull { op, pos } => {
                        entry(&mut local_pulls, op).push(key, pos, &value);
                        touched_ops.push(op);
                    }
                    Queued::LocalPush {
                        op,
                        pos,
                        update,
                        mode,
                    } => {
                        apply(&mut value, &update, mode);
                        self.answer(op, pos);
                        touched_ops.push(op);
                    }
                    Queued::Localize { op, pos } => {
                        self.answer(op, pos);
                        touched_ops.push(op);
                    }
                    Queued::RemotePull { origin, req, pos } => {
                        entry(&mut replies, (origin, req, Kind::PullReply)).push(key, pos, &value);
                    }
                    Queued::RemotePush {
                        origin,
                        req,
                        pos,
                        update,
                        mode,
                    } => {
                        apply(&mut value, &update, mode);
                        entry(&mut replies, (origin, req, Kind::PushReply)).push(key, pos, &[]);
                    }
                }
            }
            match transit.then_to {
                Some(next) => {
                    self.store.set_in_transit(key, false);
                    entry(&mut onward, next).push(key, 0, &value);
                }
                None => {
                    self.store.insert(key, &value);
                }
            }
        }
        for ((origin, req, kind), batch) in replies {
            add(&self.counters.served_keys, batch.keys.len() as u64);
            let reply = batch.into_frame(kind, self.cfg.id, req, 0);
            self.send_reply(now, origin, reply);
        }
        for (next, batch) in onward {
            self.send_transfer(next, batch);
        }
        for (op, batch) in local_pulls {
            let reply = batch.into_frame(Kind::PullReply, self.cfg.id, ReqId(op), 0);
            self.accept_pull_answer(op, reply);
        }
        touched_ops.sort_unstable();
        touched_ops.dedup();
        for op in touched_ops {
            self.settle(op);
        }
    }
}

/// The batch for `k`, created on first use (few distinct `k` per frame: a linear scan is
/// cheaper than a map).
fn entry<K: PartialEq>(batches: &mut Vec<(K, Batch)>, k: K) -> &mut Batch {
    let idx = match batches.iter().position(|(key, _)| *key == k) {
        Some(idx) => idx,
        None => {
            batches.push((k, Batch::default()));
            batches.len() - 1
        }
    };
    &mut batches[idx].1
}
