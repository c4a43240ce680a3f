//! Serving, forwarding and answering requests that arrive by message.
//!
//! A request frame names the original requester (`origin`) and its operation (`req`); every
//! node it reaches answers the keys it holds straight to the origin, queues the keys on their
//! way to it, and forwards the rest one hop closer to their owner (owner if it is their home,
//! else their home), keeping origin, operation and positions. Requests count their hops so
//! that a routing bug shows up as an error instead of a frame circling forever.

use std::collections::BTreeMap;

use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId};
use crate::msg::{Request, encode};
use crate::node::{Batch, Batches, Node, OpKind, Time};
use crate::relocate::Queued;
use crate::stats::add;
use crate::store::{Residency, UpdateMode};
use crate::warning::Warning;
use crate::wire::{Frame, Kind, RejectCode};

/// Forwarding hops after which a request is refused as a routing loop.
const MAX_HOPS: u32 = 256;

impl Node {
    /// Validates a peer's request before anything is touched; returns the culprit on failure.
    fn validate_request(
        &self,
        request: &Request<'_>,
        mode: Option<UpdateMode>,
    ) -> Result<(), (RejectCode, Key)> {
        let mut total = 0usize;
        for &key in request.keys {
            if !self.cfg.space.contains(key) {
                return Err((RejectCode::KeyOutOfRange, key));
            }
            total += self.cfg.space.len(key);
        }
        let expected = mode.map_or(0, |mode| total * mode.width());
        if request.values.len() != expected {
            return Err((
                RejectCode::LengthMismatch,
                request.keys.first().copied().unwrap_or(0),
            ));
        }
        Ok(())
    }

    /// Gradients need an optimizer; under a stateful one a replicated key is stepped only by
    /// its hub's sync (its gradients accumulate where they are pushed and never travel in a
    /// request), so a request with one is refused: fails with the first such key.
    pub(crate) fn check_gradients(
        &self,
        request: &Request<'_>,
        mode: Option<UpdateMode>,
    ) -> Result<(), Key> {
        if !mode.is_some_and(UpdateMode::is_gradient) {
            return Ok(());
        }
        let first = request.keys.first().copied().unwrap_or(0);
        // Named tables: every key's table needs an optimizer (a table without one refuses).
        if self.cfg.space.named_tables().is_some() {
            let space = &self.cfg.space;
            return match request
                .keys
                .iter()
                .find(|&&k| match space.optimizer_for(k) {
                    None => true,
                    Some(opt) => !opt.is_linear() && self.replicas.contains(k),
                }) {
                Some(&key) => Err(key),
                None => Ok(()),
            };
        }
        match self.cfg.space.optimizer() {
            None => Err(first),
            Some(opt) if !opt.is_linear() => {
                match request.keys.iter().find(|&&k| self.replicas.contains(k)) {
                    Some(&key) => Err(key),
                    None => Ok(()),
                }
            }
            Some(_) => Ok(()),
        }
    }

    /// Refuses the given keys of a request; the origin's operation fails with the reason.
    fn reject(&mut self, origin: NodeId, req: ReqId, batch: Batch, code: RejectCode, culprit: Key) {
        let frame = encode::reject(
            self.cfg.id,
            req,
            code,
            culprit,
            &batch.keys,
            &batch.positions,
        );
        self.send(origin, frame);
    }

    /// Logs an optimizer step applied here for a request, when the replica step log is on
    /// (tests replay a key's steps from it, `log_replica_steps`): a gradient as it is, an
    /// aggregate by its sums (the tests push aggregates of one gradient, `(g, g²)`, whose
    /// `Optimizer::step_sums` is `step` of `g`).
    fn log_step(&mut self, key: Key, update: &[f32], mode: UpdateMode) {
        let Some(log) = self.replicas.step_log() else {
            return;
        };
        match mode {
            UpdateMode::Gradient => log.push((key, update.to_vec())),
            UpdateMode::GradientSums => log.push((key, update[..update.len() / 2].to_vec())),
            UpdateMode::Add | UpdateMode::Set => {}
        }
    }

    /// Serves a pull (`mode` none) or push request: answers the keys held here, queues those on
    /// their way here, holds those of a bucket whose move to this node is completing, and
    /// forwards the rest one hop closer to their owner.
    pub(crate) fn serve_request(
        &mut self,
        now: Time,
        from: NodeId,
        request: Request<'_>,
        mode: Option<UpdateMode>,
        frame: &Frame,
    ) {
        let Request {
            origin, req, hops, ..
        } = request;
        if !self.dir.is_member(origin) {
            return self.warn(Warning::UnknownSender { from: origin });
        }
        if mode.is_some()
            && from != origin
            && self.lost.contains(&from)
            && !self.lost.contains(&origin)
        {
            // A push forwarded by a node this one knows is lost: it went through the lost
            // node, and its requester's flush counts on it being refused from now on
            // (`loss_flush.rs`). A pull is answered: its requester re-issued it and drops
            // whichever answer comes second (`peer_loss.rs`).
            let all = Batch {
                keys: request.keys.to_vec(),
                positions: request.positions.to_vec(),
                values: Vec::new(),
            };
            return self.reject(origin, req, all, RejectCode::PeerLost, u64::from(from.0));
        }
        let checked = self.validate_request(&request, mode).and_then(|()| {
            self.check_gradients(&request, mode)
                .map_err(|key| (RejectCode::GradientRefused, key))
        });
        if let Err((code, culprit)) = checked {
            let all = Batch {
                keys: request.keys.to_vec(),
                positions: request.positions.to_vec(),
                values: Vec::new(),
            };
            return self.reject(origin, req, all, code, culprit);
        }
        let is_pull = mode.is_none();
        let kind = frame.header.kind;
        let mut answered = self.spare.take();
        let mut forward = Batches::new();
        let mut held: BTreeMap<u32, Batch> = BTreeMap::new();
        let mut unroutable = Batch::default();
        // Keys that need a lost node, by that node (`peer_loss.rs`).
        let mut lost: BTreeMap<NodeId, Batch> = BTreeMap::new();
        let mut replica_sets = Batch::default();
        let mut offset = 0;
        let width = mode.map_or(1, UpdateMode::width);
        for (&key, &pos) in request.keys.iter().zip(request.positions) {
            let len = self.cfg.space.len(key);
            let update = if is_pull {
                &[][..]
            } else {
                &request.values[offset..offset + len * width]
            };
            offset += update.len();
            // While a bucket's move to this node completes, even its keys held here wait, so
            // that a requester's frames sent by the old table are served before its later ones.
            if self.moving_in > 0 {
                let bucket = self.dir.bucket(key);
                if self.records.get(&bucket).is_some_and(|r| !r.is_live()) {
                    held.entry(bucket).or_default().push(key, pos, update);
                    continue;
                }
            }
            // A replicated key is read and added to in this node's replica, like a local key;
            // a `set` of it applies only at its hub.
            let replicated = self.replicas.contains(key);
            if replicated && mode == Some(UpdateMode::Set) {
                let hub = self.hub(key);
                if hub == self.cfg.id {
                    replica_sets.push(key, pos, update);
                    answered.push(key, pos, &[]);
                } else if let Some(peer) = self.dest_lost(hub) {
                    lost.entry(peer).or_default().push(key, pos, &[]);
                } else {
                    self.spare.entry(&mut forward, hub).push(key, pos, update);
                }
                continue;
            }
            if !replicated {
                // The common case, a key owned here: served in one lookup of its state word
                // (anything else, a replica shared here included, takes the paths below).
                if let Some(mode) = mode {
                    if self.store.push_owned(key, update, mode) {
                        self.log_step(key, update, mode);
                        answered.push(key, pos, &[]);
                        continue;
                    }
                } else {
                    let start = answered.values.len();
                    answered.values.resize(start + len, 0.0);
                    if self.store.pull_owned(key, &mut answered.values[start..]) {
                        answered.keys.push(key);
                        answered.positions.push(pos);
                        continue;
                    }
                    answered.values.truncate(start);
                }
            }
            if !replicated && self.unadmitted(key) {
                // No row, and none may be made now (`dynamic.rs`).
                if is_pull {
                    let start = answered.values.len();
                    answered.values.resize(start + len, 0.0);
                    self.refused_value(key, &mut answered.values[start..]);
                    answered.keys.push(key);
                    answered.positions.push(pos);
                } else {
                    add(&self.counters.grads_dropped, 1);
                    answered.push(key, pos, &[]);
                }
                continue;
            }
            let residency = if replicated {
                Residency::Local
            } else {
                self.residency(key)
            };
            match residency {
                Residency::Local => {
                    if let Some(mode) = mode {
                        if self.store.push_local(key, update, mode) {
                            self.log_step(key, update, mode);
                        }
                        answered.push(key, pos, &[]);
                    } else {
                        let start = answered.values.len();
                        answered.values.resize(start + len, 0.0);
                        self.store.pull_local(key, &mut answered.values[start..]);
                        answered.keys.push(key);
                        answered.positions.push(pos);
                    }
                }
                Residency::InTransit if self.key_lost(key).is_some() => {
                    let peer = self.key_lost(key).expect("checked");
                    lost.entry(peer).or_default().push(key, pos, &[]);
                }
                Residency::InTransit => {
                    let queued = match mode {
                        None => Queued::RemotePull { origin, req, pos },
                        Some(mode) => Queued::RemotePush {
                            origin,
                            req,
                            pos,
                            update: update.to_vec(),
                            mode,
                        },
                    };
                    match self.transit.get_mut(&key) {
                        Some(transit) => transit.queue.push(queued),
                        None => unroutable.push(key, pos, &[]),
                    }
                }
                Residency::Remote => {
                    let next = self.server_route(key);
                    if next == self.cfg.id || hops >= MAX_HOPS {
                        unroutable.push(key, pos, &[]);
                    } else if let Some(peer) = self.dest_lost(next) {
                        lost.entry(peer).or_default().push(key, pos, &[]);
                    } else {
                        self.spare.entry(&mut forward, next).push(key, pos, update);
                    }
                }
            }
        }
        if !replica_sets.keys.is_empty() {
            // Before the answer: the setter's replica gets the values first.
            self.set_primary(origin, &replica_sets.keys, &replica_sets.values);
        }
        add(&self.counters.served_keys, answered.keys.len() as u64);
        if !answered.keys.is_empty() {
            let kind = if is_pull {
                Kind::PullReply
            } else {
                Kind::PushReply
            };
            let reply = answered.reply_frame(kind, self.cfg.id, req);
            self.send_reply(now, origin, reply);
        }
        self.spare.keep(answered);
        let mode = mode.unwrap_or(UpdateMode::Add);
        for (dest, batch) in forward {
            add(&self.counters.forwards, 1);
            let frame = batch.request_frame(kind, origin, req, hops + 1, mode);
            self.spare.keep(batch);
            self.send(dest, frame);
        }
        for (bucket, batch) in held {
            let frame = batch.request_frame(kind, origin, req, hops, mode);
            self.hold(now, bucket, from, frame);
        }
        for (peer, batch) in lost {
            self.reject(origin, req, batch, RejectCode::PeerLost, u64::from(peer.0));
        }
        if !unroutable.keys.is_empty() {
            let culprit = unroutable.keys[0];
            let code = if hops >= MAX_HOPS {
                RejectCode::RoutingLoop
            } else {
                RejectCode::NotOwner
            };
            self.warn(Warning::Unroutable {
                key: culprit,
                origin,
                code,
            });
            self.reject(origin, req, unroutable, code, culprit);
        }
    }

    /// Sends an answer to `origin`, or takes it directly if this node is the origin.
    pub(crate) fn send_reply(&mut self, now: Time, origin: NodeId, reply: Frame) {
        if origin == self.cfg.id && self.cfg.fast_local_access {
            let id = self.cfg.id;
            let req = reply.header.req;
            match reply.header.kind {
                Kind::PullReply => self.handle_pull_reply(now, id, req, reply),
                _ => {
                    let positions = reply.positions().to_vec();
                    self.handle_push_reply(id, req, &positions);
                }
            }
        } else {
            self.send(origin, reply);
        }
    }

    /// The pending operation `req` names, if it is of `kind`, and whether it was re-issued
    /// after a loss; warns otherwise.
    fn answered_op(
        &mut self,
        from: NodeId,
        kind: Kind,
        req: ReqId,
        expected: OpKind,
    ) -> Option<(u64, bool)> {
        let op = req.0;
        match self.pending.get_mut(&op) {
            // A late answer of an operation a loss ended (`loss_flush.rs`).
            None if self.after_loss.is_retired(op) => None,
            None => {
                self.warn(Warning::UnknownRequest { from, kind, req });
                None
            }
            Some(p) if p.kind != expected => {
                self.warn(Warning::BadAnswer {
                    from,
                    req,
                    what: "answers an operation of another kind",
                });
                None
            }
            Some(p) => {
                let (issued, asked_first) = (p.issued, p.first_hops.contains(&from));
                if !asked_first {
                    p.forwarded = true;
                }
                let reissued = p.reissued;
                self.observe_answer(from, issued, asked_first);
                Some((op, reissued))
            }
        }
    }

    /// Remembers where answered keys live (location caches only).
    fn learn_locations(&mut self, from: NodeId, keys: &[Key]) {
        // A node that left answers what reached it before it left: never cache it as a
        // location (it exits once every member confirmed its leave).
        if self.policy.location_caches() && from != self.cfg.id && self.dir.is_member(from) {
            for &key in keys {
                self.cache.insert(key, from);
            }
        }
    }

    pub(crate) fn handle_pull_reply(&mut self, _now: Time, from: NodeId, req: ReqId, frame: Frame) {
        let Some((op, reissued)) = self.answered_op(from, Kind::PullReply, req, OpKind::Pull)
        else {
            return;
        };
        self.learn_locations(from, frame.keys());
        let claimed = frame.positions().to_vec();
        let accepted = if reissued {
            // Both routings of a re-issued pull answer (`peer_loss.rs`): the first answer to
            // each position counts.
            self.accept_fresh_pull_part(op, from, &frame)
        } else {
            self.accept_pull_answer(op, frame)
        };
        if !accepted {
            self.fail(
                op,
                OpError::Rejected {
                    peer: from,
                    reason: "malformed or duplicate pull answer".into(),
                },
            );
            self.warn(Warning::BadAnswer {
                from,
                req,
                what: "malformed or duplicate pull answer",
            });
            // The positions it claims get no proper answer any more: the pull fails now
            // instead of waiting for them forever.
            for pos in claimed {
                self.answer(op, pos);
            }
        }
        self.settle(op);
    }

    pub(crate) fn handle_push_reply(&mut self, from: NodeId, req: ReqId, positions: &[u32]) {
        let Some((op, _)) = self.answered_op(from, Kind::PushReply, req, OpKind::Push) else {
            return;
        };
        for &pos in positions {
            if !self.answer(op, pos) {
                self.warn(Warning::BadAnswer {
                    from,
                    req,
                    what: "duplicate push answer",
                });
            }
        }
        self.settle(op);
    }

    pub(crate) fn handle_reject(
        &mut self,
        from: NodeId,
        req: ReqId,
        code: RejectCode,
        culprit: Key,
        positions: &[u32],
    ) {
        let op = req.0;
        let Some(p) = self.pending.get(&op) else {
            if self.after_loss.is_retired(op) {
                return;
            }
            return self.warn(Warning::UnknownRequest {
                from,
                kind: Kind::Reject,
                req,
            });
        };
        if p.reissued
            && !positions.is_empty()
            && positions
                .iter()
                .all(|&pos| p.answered.get(pos as usize) == Some(&true))
        {
            // Refuses the first routing of a re-issued pull whose keys were answered since.
            return;
        }
        if code == RejectCode::PeerLost
            && let Ok(peer) = u32::try_from(culprit)
        {
            // The keys needed a node that is lost (`peer_loss.rs`): the error names it.
            for &pos in positions {
                self.answer(op, pos);
            }
            self.fail(op, OpError::PeerGone { peer: NodeId(peer) });
            return self.settle(op);
        }
        let reason = match code {
            RejectCode::KeyOutOfRange => format!("key {culprit} is out of range"),
            RejectCode::NotOwner => format!("key {culprit} could not be routed to its owner"),
            RejectCode::LengthMismatch => {
                format!("value lengths do not match the keys (first key {culprit})")
            }
            RejectCode::Malformed => "the request's positions were malformed".to_string(),
            RejectCode::RoutingLoop => format!("key {culprit} was forwarded too often"),
            RejectCode::PeerLost => format!("a lost node, {culprit}, which is no node id"),
            RejectCode::InvalidMove => {
                format!("bucket {culprit} cannot move there (no such bucket or member)")
            }
            RejectCode::CannotDrain => crate::drain::DrainRefusal::describe(culprit),
            RejectCode::GradientRefused => format!(
                "gradients for key {culprit} cannot be applied there (no optimizer, or a \
                 replicated key under an optimizer with per-key state)"
            ),
        };
        if positions.is_empty() {
            // A request refused as a whole: nothing of it will be answered.
            if let Some(p) = self.pending.get_mut(&op) {
                p.remaining = 0;
            }
        }
        for &pos in positions {
            self.answer(op, pos);
        }
        self.fail(op, OpError::Rejected { peer: from, reason });
        self.settle(op);
    }
}
