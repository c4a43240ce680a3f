//! The operations local workers issue through the node (`issue_pull`, `issue_push`: the keys
//! their fast path could not serve) and how every operation is settled: answered key by key,
//! failed, and completed once all its keys are answered.
//!
//! Invariants (with `node.rs`'s): every issued operation gets exactly one [`Completion`]; each
//! position of an operation is answered once (a second answer changes nothing, and `answer`
//! returns false for it); an operation completes only after every key routed to a peer was
//! answered or the peer was lost; accesses to a key in transit here are queued on it and
//! applied in arrival order when it lands (`relocate.rs`).

use std::collections::BTreeMap;

use crate::error::{AccessError, OpError};
use crate::id::{Key, ReqId, WorkerId};
use crate::latency::{LatencyOp, LatencyPath};
use crate::node::{Batch, Batches, Completion, Node, OpKind, Output, PullPart, Route, Time};
use crate::relocate::Queued;
use crate::stats::add;
use crate::store::UpdateMode;
use crate::warning::Warning;
use crate::wire::{Frame, Kind};

impl Node {
    /// Issues a pull of `keys` (validated by the caller, not served by its fast path) whose
    /// values go to `out_offsets` in the caller's buffer. The result arrives as a [`Completion`].
    pub fn issue_pull(
        &mut self,
        now: Time,
        worker: WorkerId,
        keys: &[Key],
        out_offsets: &[usize],
    ) -> ReqId {
        self.tick(now);
        add(&self.counters.remote_pull_ops, 1);
        let op = self.new_op(worker, OpKind::Pull, keys.len(), out_offsets.to_vec());
        self.pending.get_mut(&op).expect("just created").keys = keys.to_vec();
        self.route_pull(
            now,
            op,
            keys.iter().enumerate().map(|(p, &k)| (p as u32, k)),
        );
        self.settle(op);
        ReqId(op)
    }

    /// Routes the pull `op`'s keys at the given positions (`(position, key)`): answers local
    /// ones, queues those in transit here, holds those of a bucket moving here, and sends the
    /// rest. Used when the pull is issued and when it is re-issued after a loss (`peer_loss.rs`).
    pub(crate) fn route_pull(
        &mut self,
        now: Time,
        op: u64,
        items: impl Iterator<Item = (u32, Key)>,
    ) {
        let mut batches = Batches::new();
        let mut held: BTreeMap<u32, Batch> = BTreeMap::new();
        let mut here = self.spare.take();
        let mut value = Vec::new();
        let me = self.cfg.id;
        for (pos, key) in items {
            match self.route(key) {
                Route::Local if self.cfg.fast_local_access => {
                    value.resize(self.cfg.space.len(key), 0.0);
                    self.store.pull_local(key, &mut value);
                    here.push(key, pos, &value);
                }
                Route::Local => self.spare.entry(&mut batches, me).push(key, pos, &[]),
                Route::Transit => self.queue_local(now, key, Queued::LocalPull { op, pos }),
                Route::Remote(dest) => self.spare.entry(&mut batches, dest).push(key, pos, &[]),
                Route::Held(bucket) => held.entry(bucket).or_default().push(key, pos, &[]),
                Route::Unadmitted => {
                    value.resize(self.cfg.space.len(key), 0.0);
                    self.refused_value(key, &mut value);
                    here.push(key, pos, &value);
                }
            }
        }
        if !here.keys.is_empty() {
            let reply = here.reply_frame(Kind::PullReply, me, ReqId(op));
            self.accept_pull_answer(op, reply);
        }
        self.spare.keep(here);
        self.send_batches(op, Kind::Pull, UpdateMode::Add, batches);
        for (bucket, batch) in held {
            let frame = batch.request_frame(Kind::Pull, me, ReqId(op), 0, UpdateMode::Add);
            self.hold(now, bucket, me, frame);
        }
    }

    /// Issues a push (`mode` add, set or gradient) of `values` for `keys` (validated by the
    /// caller); key `i`'s update is at `values[offsets[i]..]`. Gradients without an optimizer fail
    /// the operation; those of a replicated key under a stateful one accumulate for its hub.
    pub fn issue_push(
        &mut self,
        now: Time,
        worker: WorkerId,
        keys: &[Key],
        values: &[f32],
        offsets: &[usize],
        mode: UpdateMode,
    ) -> ReqId {
        self.tick(now);
        add(&self.counters.remote_push_ops, 1);
        let op = self.new_op(worker, OpKind::Push, keys.len(), Vec::new());
        let mut batches = Batches::new();
        let mut held: BTreeMap<u32, Batch> = BTreeMap::new();
        let me = self.cfg.id;
        for (pos, (&key, &offset)) in keys.iter().zip(offsets).enumerate() {
            let pos = pos as u32;
            let update = &values[offset..offset + self.cfg.space.len(key) * mode.width()];
            if mode.is_gradient() {
                if self.cfg.space.optimizer_for(key).is_none() {
                    self.answer(op, pos);
                    self.fail(op, OpError::Access(AccessError::NoOptimizer));
                    continue;
                }
                // A replicated key under a stateful optimizer: accumulated for its hub.
                let accumulated = if mode == UpdateMode::GradientSums {
                    self.store.accumulate_replica_gradient_sums(key, update)
                } else {
                    self.store.accumulate_replica_gradient(key, update)
                };
                if accumulated {
                    self.answer(op, pos);
                    continue;
                }
            }
            if mode == UpdateMode::Set && self.replicas.contains(key) {
                let hub = self.hub(key);
                if hub == me {
                    self.set_primary(me, &[key], update);
                    self.answer(op, pos);
                } else {
                    self.spare.entry(&mut batches, hub).push(key, pos, update);
                }
                continue;
            }
            match self.route(key) {
                Route::Local if self.cfg.fast_local_access => {
                    self.store.push_local(key, update, mode);
                    self.answer(op, pos);
                }
                Route::Local => self.spare.entry(&mut batches, me).push(key, pos, update),
                Route::Transit => {
                    self.queue_local(
                        now,
                        key,
                        Queued::LocalPush {
                            op,
                            pos,
                            update: update.to_vec(),
                            mode,
                        },
                    );
                }
                Route::Remote(dest) => self.spare.entry(&mut batches, dest).push(key, pos, update),
                Route::Held(bucket) => held.entry(bucket).or_default().push(key, pos, update),
                Route::Unadmitted => {
                    add(&self.counters.grads_dropped, 1);
                    self.answer(op, pos);
                }
            }
        }
        self.send_batches(op, Kind::Push, mode, batches);
        for (bucket, batch) in held {
            let frame = batch.request_frame(Kind::Push, me, ReqId(op), 0, mode);
            self.hold(now, bucket, me, frame);
        }
        self.settle(op);
        ReqId(op)
    }

    /// Sends one request frame per non-empty batch, or fails its keys if the destination is
    /// unreachable.
    pub(crate) fn send_batches(&mut self, op: u64, kind: Kind, mode: UpdateMode, batches: Batches) {
        for (dest, batch) in batches {
            let n = batch.keys.len() as u64;
            match kind {
                Kind::Pull => add(&self.counters.remote_pull_keys, n),
                _ => add(&self.counters.remote_push_keys, n),
            }
            if let Some(peer) = self.dest_lost(dest) {
                for &pos in &batch.positions {
                    self.answer(op, pos);
                }
                self.fail(op, OpError::PeerGone { peer });
                continue;
            }
            let frame = batch.request_frame(kind, self.cfg.id, ReqId(op), 0, mode);
            self.spare.keep(batch);
            if let Some(p) = self.pending.get_mut(&op) {
                p.first_hops.push(dest);
            }
            self.send(dest, frame);
        }
    }

    /// Queues a local worker's access to a key in transit here (or fails it if the key may
    /// never arrive).
    fn queue_local(&mut self, _now: Time, key: Key, queued: Queued) {
        if let Some(peer) = self.key_lost(key) {
            let (op, pos) = queued.local_op().expect("local accesses name their op");
            self.answer(op, pos);
            self.fail(op, OpError::PeerGone { peer });
            return;
        }
        match self.transit.get_mut(&key) {
            Some(transit) => transit.queue.push(queued),
            None => {
                // The store says in transit but no transit is recorded: a bug, not an input.
                let (op, pos) = queued.local_op().expect("local accesses name their op");
                self.answer(op, pos);
                self.fail(
                    op,
                    OpError::Rejected {
                        peer: self.cfg.id,
                        reason: format!("key {key} is in transit without a record"),
                    },
                );
                self.warn(Warning::Relocation {
                    from: None,
                    key,
                    what: "in transit without a record",
                });
            }
        }
    }

    /// Marks position `pos` of `op` answered (once).
    pub(crate) fn answer(&mut self, op: u64, pos: u32) -> bool {
        let Some(p) = self.pending.get_mut(&op) else {
            return false;
        };
        match p.answered.get_mut(pos as usize) {
            Some(done) if !*done => {
                *done = true;
                p.remaining -= 1;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn fail(&mut self, op: u64, err: OpError) {
        if let Some(p) = self.pending.get_mut(&op) {
            p.error.get_or_insert(err);
        }
    }

    /// Takes a pull answer (from a peer, or built here) into `op`, if its positions are new.
    pub(crate) fn accept_pull_answer(&mut self, op: u64, reply: Frame) -> bool {
        let Some(p) = self.pending.get(&op) else {
            return false;
        };
        let positions = reply.positions();
        // Each answered key must be the one asked at its position (else its values would land
        // in another key's place, or past the caller's buffer if its length differs).
        let fresh = positions.len() == reply.keys().len()
            && positions.iter().zip(reply.keys()).all(|(&pos, &key)| {
                p.answered.get(pos as usize) == Some(&false)
                    && p.keys.get(pos as usize) == Some(&key)
            });
        let lengths_ok = reply.values().len()
            == reply
                .keys()
                .iter()
                .map(|&k| self.cfg.space.len(k))
                .sum::<usize>();
        if !fresh || !lengths_ok || p.kind != OpKind::Pull {
            return false;
        }
        let out_offsets = positions
            .iter()
            .map(|&pos| p.out_offsets[pos as usize])
            .collect();
        for &pos in positions {
            self.answer(op, pos);
        }
        self.pending
            .get_mut(&op)
            .expect("checked")
            .parts
            .push(PullPart { out_offsets, reply });
        true
    }

    /// Completes `op` if nothing is outstanding.
    pub(crate) fn settle(&mut self, op: u64) {
        if self.pending.get(&op).is_some_and(|p| p.remaining == 0) {
            let p = self.pending.remove(&op).expect("checked");
            if p.reissued {
                // Answers of its first routing may still come (`peer_loss.rs`).
                self.after_loss.retire(op);
            }
            if matches!(p.kind, OpKind::Pull | OpKind::Push) {
                self.note_completed_op();
                let op = if p.kind == OpKind::Pull {
                    LatencyOp::Pull
                } else {
                    LatencyOp::Push
                };
                let path = if p.forwarded {
                    LatencyPath::Forwarded
                } else {
                    LatencyPath::Owner
                };
                let ns = self.clock.0.saturating_sub(p.issued.0);
                self.latency.observe(op, path, ns);
            }
            let result = match (p.error, p.kind) {
                (Some(err), _) => Err(err),
                (None, OpKind::Pull) => Ok(Output::Pulled(p.parts)),
                (None, _) => Ok(Output::Done),
            };
            self.completions.push_back(Completion {
                worker: p.worker,
                req: ReqId(op),
                result,
            });
        }
    }
}
