//! Serving, forwarding and answering requests that arrive by message.
//!
//! A request frame names the original requester (`origin`) and its operation (`req`); every
//! node it reaches answers the keys it holds straight to the origin, queues the keys on their
//! way to it, and forwards the rest one hop closer to their owner (owner if it is their home,
//! else their home), keeping origin, operation and positions. `aux` counts the hops so that a
//! routing bug shows up as an error instead of a frame circling forever.

use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId};
use crate::node::{Batch, Node, OpKind, Time};
use crate::relocate::Queued;
use crate::stats::add;
use crate::store::{Residency, UpdateMode};
use crate::wire::{FLAG_SET, Frame, Kind, RejectCode};

/// Forwarding hops after which a request is refused as a routing loop.
const MAX_HOPS: u64 = 256;

impl Node {
    /// Validates a peer's request before anything is touched; returns the culprit on failure.
    fn validate_request(&self, frame: &Frame) -> Result<(), (RejectCode, Key)> {
        let keys = frame.keys();
        if frame.positions().len() != keys.len() {
            return Err((RejectCode::Malformed, keys.first().copied().unwrap_or(0)));
        }
        let mut total = 0usize;
        for &key in keys {
            if key >= self.cfg.space.num_keys() {
                return Err((RejectCode::KeyOutOfRange, key));
            }
            total += self.cfg.space.len(key);
        }
        let expected = if frame.header.kind == Kind::Push {
            total
        } else {
            0
        };
        if frame.values().len() != expected {
            return Err((
                RejectCode::LengthMismatch,
                keys.first().copied().unwrap_or(0),
            ));
        }
        Ok(())
    }

    /// Refuses the given keys of a request; the origin's operation fails with the reason.
    fn reject(&mut self, origin: NodeId, req: ReqId, batch: Batch, code: RejectCode, culprit: Key) {
        let aux = code as u64 | (culprit << 8);
        let frame = Frame::with_positions(
            Kind::Reject,
            self.cfg.id,
            req,
            aux,
            &batch.keys,
            &batch.positions,
            0,
        );
        self.outbox.push_back((origin, frame));
    }

    pub(crate) fn serve_request(&mut self, now: Time, _from: NodeId, request: Frame) {
        let (origin, req, hops) = (
            request.header.origin,
            request.header.req,
            request.header.aux,
        );
        if origin.0 >= self.cfg.num_nodes {
            return self.anomaly(format!("request names unknown origin node {}", origin.0));
        }
        if let Err((code, culprit)) = self.validate_request(&request) {
            let all = Batch {
                keys: request.keys().to_vec(),
                positions: request.positions().to_vec(),
                values: Vec::new(),
            };
            let all = if all.positions.len() == all.keys.len() {
                all
            } else {
                Batch::default()
            };
            return self.reject(origin, req, all, code, culprit);
        }
        let is_pull = request.header.kind == Kind::Pull;
        let mode = if request.header.flags & FLAG_SET != 0 {
            UpdateMode::Set
        } else {
            UpdateMode::Add
        };
        let mut answered = Batch::default();
        let mut forward: Vec<Batch> = (0..self.cfg.num_nodes).map(|_| Batch::default()).collect();
        let mut unroutable = Batch::default();
        let mut offset = 0;
        for (&key, &pos) in request.keys().iter().zip(request.positions()) {
            let len = self.cfg.space.len(key);
            let update = if is_pull {
                &[][..]
            } else {
                &request.values()[offset..offset + len]
            };
            offset += update.len();
            match self.store.residency(key) {
                Residency::Local => {
                    if is_pull {
                        let start = answered.values.len();
                        answered.values.resize(start + len, 0.0);
                        self.store.pull_local(key, &mut answered.values[start..]);
                        answered.keys.push(key);
                        answered.positions.push(pos);
                    } else {
                        self.store.push_local(key, update, mode);
                        answered.push(key, pos, &[]);
                    }
                }
                Residency::InTransit => {
                    let queued = if is_pull {
                        Queued::RemotePull { origin, req, pos }
                    } else {
                        Queued::RemotePush {
                            origin,
                            req,
                            pos,
                            update: update.to_vec(),
                            mode,
                        }
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
                    } else {
                        forward[next.index()].push(key, pos, update);
                    }
                }
            }
        }
        add(&self.counters.served_keys, answered.keys.len() as u64);
        if !answered.keys.is_empty() {
            let kind = if is_pull {
                Kind::PullReply
            } else {
                Kind::PushReply
            };
            let reply = answered.into_frame(kind, self.cfg.id, req, 0);
            self.send_reply(now, origin, reply);
        }
        for (dest, batch) in forward.into_iter().enumerate() {
            if batch.keys.is_empty() {
                continue;
            }
            add(&self.counters.forwards, 1);
            let mut frame = batch.into_frame(request.header.kind, origin, req, hops + 1);
            frame.header.flags |= request.header.flags & FLAG_SET;
            self.outbox.push_back((NodeId(dest as u32), frame));
        }
        if !unroutable.keys.is_empty() {
            let culprit = unroutable.keys[0];
            let code = if hops >= MAX_HOPS {
                RejectCode::RoutingLoop
            } else {
                RejectCode::NotOwner
            };
            self.anomaly(format!(
                "cannot route key {culprit} of a request from {origin} ({code:?})"
            ));
            self.reject(origin, req, unroutable, code, culprit);
        }
    }

    /// Sends an answer to `origin`, or takes it directly if this node is the origin.
    pub(crate) fn send_reply(&mut self, now: Time, origin: NodeId, reply: Frame) {
        if origin == self.cfg.id && self.cfg.fast_local_access {
            let id = self.cfg.id;
            self.handle_reply_at(now, id, reply);
        } else {
            self.outbox.push_back((origin, reply));
        }
    }

    pub(crate) fn handle_reply(&mut self, from: NodeId, frame: Frame) {
        self.handle_reply_at(Time::default(), from, frame);
    }

    fn handle_reply_at(&mut self, _now: Time, from: NodeId, frame: Frame) {
        let op = frame.header.req.0;
        let Some(pending) = self.pending.get(&op) else {
            return self.anomaly(format!(
                "{:?} from {from} for unknown request {op}",
                frame.header.kind
            ));
        };
        let kind = pending.kind;
        if self.cfg.location_caches && from != self.cfg.id {
            for &key in frame.keys() {
                if frame.header.kind != Kind::Reject {
                    self.cache.insert(key, from);
                }
            }
        }
        match (frame.header.kind, kind) {
            (Kind::PullReply, OpKind::Pull) => {
                let claimed = frame.positions().to_vec();
                if !self.accept_pull_answer(op, frame) {
                    self.fail(
                        op,
                        OpError::Rejected {
                            peer: from,
                            reason: "malformed or duplicate pull answer".into(),
                        },
                    );
                    self.anomaly(format!(
                        "malformed or duplicate pull answer from {from} for request {op}"
                    ));
                    // The positions it claims get no proper answer any more: the pull fails
                    // now instead of waiting for them forever.
                    for pos in claimed {
                        self.answer(op, pos);
                    }
                    return self.settle(op);
                }
            }
            (Kind::PushReply, OpKind::Push) => {
                if frame.positions().is_empty() {
                    // Every answer names the positions it answers; this one answers nothing.
                    return self.anomaly(format!(
                        "push answer from {from} for request {op} names no key"
                    ));
                }
                for &pos in frame.positions() {
                    if !self.answer(op, pos) {
                        self.anomaly(format!(
                            "duplicate push answer from {from} for request {op}"
                        ));
                    }
                }
            }
            (Kind::Reject, _) => {
                let code = frame.header.aux & 0xff;
                let culprit = frame.header.aux >> 8;
                let reason = match RejectCode::from_u64(code) {
                    Some(RejectCode::KeyOutOfRange) => format!("key {culprit} is out of range"),
                    Some(RejectCode::NotOwner) => {
                        format!("key {culprit} could not be routed to its owner")
                    }
                    Some(RejectCode::LengthMismatch) => {
                        "value lengths do not match the keys".to_string()
                    }
                    Some(RejectCode::Malformed) => {
                        "the request's positions were malformed".to_string()
                    }
                    Some(RejectCode::RoutingLoop) => {
                        format!("key {culprit} was forwarded too often")
                    }
                    None => format!("unknown rejection code {code}"),
                };
                if frame.positions().is_empty() {
                    // A request refused as a whole: nothing of it will be answered.
                    if let Some(p) = self.pending.get_mut(&op) {
                        p.remaining = 0;
                    }
                }
                for &pos in frame.positions() {
                    self.answer(op, pos);
                }
                self.fail(op, OpError::Rejected { peer: from, reason });
            }
            (other, expected) => {
                return self.anomaly(format!(
                    "{other:?} from {from} does not answer a {expected:?}"
                ));
            }
        }
        self.settle(op);
    }
}
