//! What a lost peer takes with it: the keys it held or was sending, and nothing else.
//!
//! When a peer L is lost (`dispatch.rs`: its connection broke, or the core's timers found it
//! silent), every node that learns it tells every other member at once (`PeerLost`; also
//! members it lost itself, since one cut off from a single peer still sends requests). Links
//! are FIFO, so any request or forward a node sends after that reaches a node that knows of the
//! loss too: an operation issued after the loss is known is never routed to L. So later
//! operations fail exactly when they need L:
//! - a key whose home is L, or whose home records L as its owner, is lost: a request for it is
//!   rejected with [`RejectCode::PeerLost`] naming L by the first node that would send it to L
//!   (the requester itself, the home, or a forwarder), and fails with `PeerGone { peer: L }`;
//! - a relocation whose key is lost ends with [`Kind::KeysLost`](crate::wire::Kind::KeysLost): the home (owner L) or a
//!   holder that has the key as lost tells the new owner, which stops waiting, records the key
//!   as lost, and fails accesses to it naming L;
//! - keys that are local, or homed and owned on survivors, keep working.
//!
//! Operations in flight when the node learns of the loss (once keys can move, any of them may
//! have been forwarded through L) fail only if they needed L:
//! - a pull is idempotent, so its unanswered keys are re-issued ([`Node::reissue_pulls`]),
//!   routed with what the node knows now: those that need L fail naming it as above, the others
//!   are answered; an answer that still comes for the first routing is recognised as a
//!   duplicate (the position is answered already) and dropped, and so are late answers once the
//!   pull completed (`AfterLoss::retired`);
//! - a push is not idempotent: it waits for the survivors' flush (`loss_flush.rs`), after
//!   which its positions still unanswered and held queued by no survivor fail naming L — they
//!   went to L (or through it) and were not applied; the others complete. A survivor refuses a
//!   request forwarded by L once it knows of the loss, naming L (`serve.rs`), so that a push L
//!   passed on is either refused or taken before the survivor's loss notice, which the flush
//!   accounts for. A push of several keys fails as a whole if one of its keys needed L; its
//!   other keys may have been applied (as for any failed push).
//!
//! What the node still cannot tell apart is failed conservatively, once, when it learns of the
//! loss: every other remote operation in flight (localize, home moves, drains), and every
//! relocation into this node in flight (it does not know where the value was coming from).
//! Their keys are recorded as lost, so a value that lands later is discarded rather than
//! revived beside a record that names another node. (Still to do, issue #11: a relocation in
//! flight whose value came from and through survivors only could complete.) A node that
//! joined while a survivor's flush ran ignores that survivor's later rounds (`loss_flush.rs`)
//! and ends its own flush at the timeout. A node that is not a member (joining) or
//! that left cleanly takes part in no flush and fails its pulls and pushes in flight too.
//!
//! Invariants: nothing waits on a lost peer (a flush waits only on survivors, and drops one
//! that is lost during it); a key recorded as lost stays in transit in the store (so the fast
//! path never serves it) and is answered with L's name on every path; a clean departure
//! (goodbye) loses no key.

use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId};
use crate::msg::encode;
use crate::node::{Batch, Node, Time};
use crate::relocate::Queued;
use crate::wire::{Frame, Kind, RejectCode};

impl Node {
    /// The lost peer a request for `dest` would need, if `dest` is lost.
    pub(crate) fn dest_lost(&self, dest: NodeId) -> Option<NodeId> {
        self.lost.contains(&dest).then_some(dest)
    }

    /// The peer `key` was lost with, if this node records it as lost.
    pub(crate) fn key_lost(&self, key: Key) -> Option<NodeId> {
        if self.lost_keys.is_empty() {
            return None;
        }
        self.lost_keys.get(&key).copied()
    }

    /// `peer` was lost: every relocation into this node in flight ends, its keys lost with it.
    /// (The value may have been coming from a survivor; this node cannot tell, and a later
    /// landing is discarded, so that the key is lost in one way everywhere.)
    pub(crate) fn lose_transits(&mut self, peer: NodeId) {
        if self.transit.is_empty() {
            return;
        }
        let mut keys: Vec<Key> = self.transit.keys().copied().collect();
        // Frames must come out in an order that depends only on the inputs.
        keys.sort_unstable();
        self.end_transits(peer, &keys);
    }

    /// `from` says `keys` were lost with `peer`: stop waiting for them.
    pub(crate) fn handle_keys_lost(&mut self, peer: NodeId, keys: &[Key]) {
        let keys: Vec<Key> = keys
            .iter()
            .copied()
            .filter(|&k| self.cfg.space.contains(k))
            .collect();
        self.end_transits(peer, &keys);
    }

    /// Ends the transits of `keys` here (if any): accesses queued on them fail naming `peer`,
    /// a later owner already noted is told, and each key is recorded as lost.
    fn end_transits(&mut self, peer: NodeId, keys: &[Key]) {
        let me = self.cfg.id;
        let mut rejects: Vec<((NodeId, ReqId), Batch)> = Vec::new();
        let mut onward: Vec<(NodeId, Vec<Key>)> = Vec::new();
        let mut touched = Vec::new();
        for &key in keys {
            let Some(transit) = self.transit.remove(&key) else {
                // Not waited for here (answered already, or never asked): nothing to end, but
                // a key in transit without a record is lost with `peer` too.
                if self.store.residency(key) == crate::store::Residency::InTransit {
                    self.lost_keys.entry(key).or_insert(peer);
                }
                continue;
            };
            self.lost_keys.insert(key, peer);
            for queued in transit.queue {
                match queued {
                    Queued::LocalPull { op, pos }
                    | Queued::LocalPush { op, pos, .. }
                    | Queued::Localize { op, pos } => {
                        self.answer(op, pos);
                        self.fail(op, OpError::PeerGone { peer });
                        touched.push(op);
                    }
                    Queued::RemotePull { origin, req, pos }
                    | Queued::RemotePush {
                        origin, req, pos, ..
                    } => {
                        self.spare
                            .entry_by(&mut rejects, (origin, req))
                            .push(key, pos, &[]);
                    }
                }
            }
            if let Some(next) = transit.then_to.filter(|&n| n != me) {
                match onward.iter_mut().find(|(n, _)| *n == next) {
                    Some((_, keys)) => keys.push(key),
                    None => onward.push((next, vec![key])),
                }
            }
        }
        for ((origin, req), batch) in rejects {
            let frame = encode::reject(
                me,
                req,
                RejectCode::PeerLost,
                u64::from(peer.0),
                &batch.keys,
                &batch.positions,
            );
            self.send(origin, frame);
        }
        for (next, keys) in onward {
            self.send(next, encode::keys_lost(me, peer, &keys));
        }
        touched.sort_unstable();
        touched.dedup();
        for op in touched {
            self.settle(op);
        }
    }

    /// Tells `new_owner`, which waits for `keys` in a relocation, that they were lost with
    /// `peer` (or records it here, if this node is the new owner).
    pub(crate) fn send_keys_lost(&mut self, new_owner: NodeId, peer: NodeId, keys: &[Key]) {
        if keys.is_empty() {
            return;
        }
        if new_owner == self.cfg.id {
            self.end_transits(peer, keys);
        } else {
            let frame = encode::keys_lost(self.cfg.id, peer, keys);
            self.send(new_owner, frame);
        }
    }
}

impl Node {
    /// Re-issues the pulls `ops` that were in flight when a peer was lost: a pull is
    /// idempotent, so its unanswered keys are routed again with what this node knows now (a
    /// key that needs the lost peer fails naming it, `dest_lost` or the home's `PeerLost`), and
    /// answers that still come for the first routing are dropped as duplicates.
    pub(crate) fn reissue_pulls(&mut self, now: Time, ops: Vec<u64>) {
        for op in ops {
            let Some(p) = self.pending.get_mut(&op) else {
                continue;
            };
            p.reissued = true;
            if p.error.is_some() {
                // Failing already (a key needed the lost peer): nothing more to wait for.
                p.remaining = 0;
                self.settle(op);
                continue;
            }
            let items: Vec<(u32, Key)> = p
                .answered
                .iter()
                .zip(&p.keys)
                .enumerate()
                .filter(|(_, (done, _))| !**done)
                .map(|(pos, (_, &key))| (pos as u32, key))
                .collect();
            self.route_pull(now, op, items.into_iter());
            self.settle(op);
        }
    }

    /// Takes the answers to positions still open from a pull answer that may also repeat
    /// answered ones (a re-issued pull gets both routings' answers; the repeats are dropped).
    /// False if the answer is malformed: a position out of range, a key other than the one
    /// asked there, or values that do not match the keys.
    pub(crate) fn accept_fresh_pull_part(&mut self, op: u64, from: NodeId, reply: &Frame) -> bool {
        let Some(p) = self.pending.get(&op) else {
            return false;
        };
        let (keys, positions, values) = (reply.keys(), reply.positions(), reply.values());
        if positions.len() != keys.len() {
            return false;
        }
        let mut fresh = Batch::default();
        let mut offset = 0;
        for (&key, &pos) in keys.iter().zip(positions) {
            if !self.cfg.space.contains(key) || p.keys.get(pos as usize) != Some(&key) {
                return false;
            }
            let len = self.cfg.space.len(key);
            let Some(value) = values.get(offset..offset + len) else {
                return false;
            };
            offset += len;
            if p.answered[pos as usize] {
                continue;
            }
            if fresh.positions.contains(&pos) {
                // Twice in one answer: not a repeat of another routing's answer.
                return false;
            }
            fresh.push(key, pos, value);
        }
        if offset != values.len() {
            return false;
        }
        if !fresh.keys.is_empty() {
            let part = fresh.reply_frame(Kind::PullReply, from, ReqId(op));
            self.accept_pull_answer(op, part);
        }
        true
    }
}
