//! The node's inputs from its peers: every received frame is decoded, checked and dispatched
//! here ([`Node::handle_frame`]) to the module that owns its kind, and a peer's loss or
//! departure ([`Node::handle_peer_lost`], [`Node::handle_peer_departed`]) fails what waited on
//! it.
//!
//! Invariants (with `node.rs`'s): a frame is decoded and validated in full before anything is
//! touched, and an undecodable one is answered with a reject naming its culprit when it had a
//! requester; after a peer is lost no operation waits on it, including operations that may be
//! forwarded through it once the first home move is known (`note_first_move`). What a loss
//! takes with it, why later operations fail exactly when they need the lost node, and how
//! pulls and pushes in flight are told apart, is `peer_loss.rs`'s (and `loss_flush.rs`'s).

use crate::error::OpError;
use crate::id::NodeId;
use crate::membership::JoinRefusal;
use crate::msg::{Msg, MsgError, encode};
use crate::node::{Node, OpKind, Time};
use crate::warning::Warning;
use crate::wire::{Frame, Kind, RejectCode};

impl Node {
    /// A frame arrived from `from` (possibly this node itself, without fast local access).
    pub fn handle_frame(&mut self, now: Time, from: NodeId, frame: Frame) {
        self.dynamic.unpin();
        let Some(frame) = self.intercept_membership(now, from, frame) else {
            return;
        };
        if !self.accepts_from(from, frame.header.kind) {
            // A joiner times and reports on the members from its welcome on, so its first
            // heartbeats and load reports may arrive before the member change that admits it
            // here: no warning for those.
            if !matches!(frame.header.kind, Kind::Heartbeat | Kind::LoadReport) {
                self.warn(Warning::UnknownSender { from });
            }
            return;
        }
        self.tick(now);
        self.timers.heard(from, now);
        let msg = match Msg::decode(&frame) {
            Ok(msg) => msg,
            Err(error) => return self.handle_undecodable(from, &frame, error),
        };
        match msg {
            Msg::Pull(request) => self.serve_request(now, from, request, None, &frame),
            Msg::Push { request, mode } => {
                self.serve_request(now, from, request, Some(mode), &frame)
            }
            Msg::PullReply { req, .. } => self.handle_pull_reply(now, from, req, frame),
            Msg::PushReply { req, positions } => self.handle_push_reply(from, req, positions),
            Msg::Reject {
                req,
                code,
                culprit,
                positions,
            } => self.handle_reject(from, req, code, culprit, positions),
            Msg::Barrier { generation } => self.handle_barrier_arrival(from, generation),
            Msg::BarrierRelease { generation } => self.handle_barrier_release(from, generation),
            Msg::Localize { new_owner, keys } => self.handle_localize(now, from, new_owner, keys),
            Msg::HandOver { new_owner, keys } => {
                self.handle_hand_over(now, from, new_owner, keys);
                self.check_evacuated();
            }
            Msg::Transfer { keys, values } => self.handle_transfer(now, from, keys, values),
            Msg::KeysLost { peer, keys } => self.handle_keys_lost(peer, keys),
            // A node that left has no say about the members' liveness.
            Msg::PeerLost { .. } if !self.dir.is_member(from) => {}
            Msg::PeerLost { peer } => {
                if self.dir.is_member(peer) {
                    self.handle_peer_lost(now, peer);
                    // The notice is also round 0 of the flush after the loss (`loss_flush.rs`).
                    self.handle_loss_round(from, peer, 0, &[], &[]);
                } else {
                    self.warn(Warning::UnknownSender { from: peer });
                }
            }
            Msg::LossFlush {
                peer,
                round,
                ops,
                positions,
            } => self.handle_loss_round(from, peer, round, ops, positions),
            Msg::MoveHome {
                origin,
                req,
                bucket,
                to,
            } => self.handle_move_home(now, origin, req, bucket, to),
            Msg::HomeHandOff { bucket, to, epoch } => {
                self.handle_home_hand_off(now, from, bucket, to, epoch)
            }
            Msg::HomeTransfer {
                bucket,
                epoch,
                default_owner,
                keys,
                owners,
            } => self.handle_home_transfer(now, from, bucket, epoch, default_owner, keys, owners),
            Msg::HomeReady { bucket, epoch } => self.handle_home_ready(now, from, bucket, epoch),
            Msg::EpochChange {
                bucket,
                home,
                epoch,
            } => self.handle_epoch_change(now, from, bucket, home, epoch),
            Msg::EpochAck {
                node,
                bucket,
                epoch,
            } => self.handle_epoch_ack(now, from, node, bucket, epoch),
            Msg::OpDone { req } => self.handle_op_done(from, req),
            Msg::Want {
                wanter,
                generation,
                need,
                keys,
            } => self.handle_want(now, from, wanter, generation, need, keys),
            Msg::Offer {
                wanter,
                generation,
                need,
                keys,
            } => self.handle_offer(now, from, wanter, generation, need, keys),
            Msg::Decided {
                wanter,
                released,
                keys,
            } => self.handle_decided(now, from, wanter, released, keys),
            Msg::Grant {
                generation,
                keys,
                values,
            } => self.handle_grant(now, from, generation, keys, values),
            Msg::ShareDeltas {
                round,
                keys,
                values,
            } => self.handle_share_deltas(from, round, keys, values),
            Msg::ShareValues { ack, keys, values } => {
                self.handle_share_values(from, ack, keys, values)
            }
            Msg::Leave {
                generations,
                keys,
                values,
            } => self.handle_leave(now, from, generations, keys, values),
            Msg::Revoke { generations, keys } => self.handle_revoke(now, from, generations, keys),
            Msg::Promote { generations, keys } => self.handle_promote(now, from, generations, keys),
            Msg::ReplicaDeltas {
                round,
                since_ns,
                keys,
                values,
            } => self.handle_replica_deltas(from, round, Time(since_ns), keys, values),
            Msg::ReplicaValues {
                ack,
                since_ns,
                keys,
                values,
            } => self.handle_replica_values(now, from, ack, Time(since_ns), keys, values),
            Msg::ReplicaFlush { generation } => self.handle_replica_flush(from, generation),
            Msg::ReplicaFlushed { generation } => self.handle_replica_flushed(from, generation),
            Msg::CutQuiet { generation } => self.handle_cut_quiet(from, generation),
            Msg::CutRelease { generation } => self.handle_cut_release(from, generation),
            Msg::LoadReport {
                ops,
                peers,
                values,
                service,
            } => {
                self.handle_load_report(from, ops, peers, values);
                self.handle_service_report(from, service);
            }
            Msg::BucketKeys {
                bucket,
                epoch,
                keys,
                values,
            } => self.handle_bucket_keys(now, from, bucket, epoch, keys, values),
            Msg::Member(msg) => self.handle_member_msg(now, from, msg),
            Msg::Heartbeat | Msg::Goodbye => {}
        }
        // A landing key or a finished move may be what a checkpoint cut waits for.
        self.recheck_cut();
    }

    /// A frame that does not decode as its kind: a request is refused as a whole to the node
    /// it names (refusing is a server's normal answer to bad input); anything else is reported
    /// and dropped — an unreadable answer neither completes nor breaks the operation it names,
    /// whose real answers still count.
    fn handle_undecodable(&mut self, from: NodeId, frame: &Frame, error: MsgError) {
        let h = &frame.header;
        match h.kind {
            Kind::Pull | Kind::Push if self.dir.is_member(h.origin) => {
                let culprit = frame.keys().first().copied().unwrap_or(0);
                let reject =
                    encode::reject(self.cfg.id, h.req, RejectCode::Malformed, culprit, &[], &[]);
                self.send(h.origin, reject);
            }
            Kind::PullReply | Kind::PushReply | Kind::Reject
                if !self.pending.contains_key(&h.req.0) =>
            {
                self.warn(Warning::UnknownRequest {
                    from,
                    kind: h.kind,
                    req: h.req,
                })
            }
            _ => self.warn(Warning::Malformed { from, error }),
        }
    }

    /// `peer` disconnected or stopped answering: fail everything that needs it.
    ///
    /// Under static allocation that is every operation with a frame sent to `peer`. Under dynamic
    /// allocation any request in flight may have been forwarded to `peer`: pulls in flight are
    /// re-issued (`peer_loss.rs`), pushes in flight wait for the flush that tells which went
    /// through `peer` (`loss_flush.rs`), and every other remote operation and every relocation
    /// into this node in flight fails; later accesses fail only if they need `peer`.
    pub fn handle_peer_lost(&mut self, now: Time, peer: NodeId) {
        self.lose_peer(now, peer, false);
    }

    /// `peer` left cleanly (it said goodbye after the final node-wide barrier): later accesses
    /// that need it fail, but the barrier it passed is not failed and no loss is broadcast.
    pub fn handle_peer_departed(&mut self, now: Time, peer: NodeId) {
        self.lose_peer(now, peer, true);
    }

    fn lose_peer(&mut self, now: Time, peer: NodeId, departed: bool) {
        if !self.dir.is_member(peer) {
            // A joiner whose join is held here is gone: admitting it later would hand buckets
            // (under static allocation, keys) to a node that is not there.
            return self.drop_held_join(peer);
        }
        if self.lost.contains(&peer) || peer == self.cfg.id {
            return;
        }
        if self.membership.early.is_some() && peer == self.dir.coordinator() {
            // A joiner that lost the coordinator before its welcome: no welcome can come.
            self.refuse_join(JoinRefusal::CoordinatorGone { coordinator: peer });
        }
        self.tick(now);
        self.lost.insert(peer);
        self.lost_order.push((peer, departed));
        self.timers.forget(peer);
        self.loss_flush_forget(peer);
        // A member that did not leave cleanly flushes (`loss_flush.rs`): its pulls and pushes
        // in flight are spared here and resolved below.
        let flushes = !departed && self.is_member();
        let (pulls, pushes) =
            self.fail_pending_after_loss(peer, self.keys_may_be_anywhere(), flushes);
        self.home_moves_lose_peer(now, peer);
        self.membership_lose_peer(now, peer);
        if !departed {
            // Its replicas' deltas are gone with it; keys waiting for its leave go on.
            self.forget_sharer(peer);
        }
        if departed || !self.is_member() {
            // A node that left (or is not admitted yet) tells nobody: it is no member of theirs
            // (and takes part in no flush); `flushes` was false, so its operations in flight
            // failed above.
            debug_assert!(pulls.is_empty() && pushes.is_empty());
            if !departed {
                self.lose_transits(peer);
            }
            return self.advance_loss_flushes();
        }
        self.fail_barriers(peer);
        self.fail_cut();
        // Tell every other node, so that no one waits for a barrier or a key that depends on
        // the lost node without knowing it (the loss may be of one link only). Peers this node
        // already lost are told too: one that is only cut off from someone else still sends
        // requests here, and may be waiting for a relocation that the loss cut
        // (`peer_loss.rs`); to a peer that is really gone the notice is simply dropped.
        let others: Vec<NodeId> = self
            .dir
            .members()
            .iter()
            .copied()
            .filter(|&other| other != self.cfg.id && other != peer)
            .collect();
        for other in others {
            let notice = encode::control(Kind::PeerLost, self.cfg.id, u64::from(peer.0));
            self.send(other, notice);
        }
        // After the notices, so that whoever gets this node's rejects and `KeysLost` knows of
        // the loss already: relocations into this node may have been waiting for the lost peer.
        self.lose_transits(peer);
        // After the notices too, so that the re-issued requests reach nodes that know of it;
        // after the transits, whose queued accesses are answered by now.
        self.reissue_pulls(now, pulls);
        self.start_loss_flush(peer, pushes);
        self.advance_loss_flushes();
    }

    /// Fails the pending operations that depend on lost `peer`: those whose frames went to it
    /// first, or with `anywhere` (keys may be anywhere) every remote one — except, with
    /// `spare`, the pulls and pushes among the latter, returned (pulls, pushes) to be
    /// re-issued and flushed instead.
    fn fail_pending_after_loss(
        &mut self,
        peer: NodeId,
        anywhere: bool,
        spare: bool,
    ) -> (Vec<u64>, Vec<u64>) {
        let mut doomed: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                matches!(p.kind, OpKind::SyncReplicas | OpKind::Checkpoint)
                    || (p.kind != OpKind::Barrier && (anywhere || p.first_hops.contains(&peer)))
            })
            .map(|(&op, _)| op)
            .collect();
        // Completions must come out in an order that depends only on the inputs.
        doomed.sort_unstable();
        let (mut pulls, mut pushes) = (Vec::new(), Vec::new());
        if spare && anywhere {
            doomed.retain(|op| match self.pending[op].kind {
                OpKind::Pull => {
                    pulls.push(*op);
                    false
                }
                OpKind::Push => {
                    pushes.push(*op);
                    false
                }
                _ => true,
            });
        }
        for op in doomed {
            let p = self.pending.get_mut(&op).expect("collected above");
            p.remaining = 0;
            p.error.get_or_insert(OpError::PeerGone { peer });
            self.settle(op);
        }
        (pulls, pushes)
    }

    /// This node learnt of its first home move (its table's epoch left 0) after a peer was
    /// lost: operations issued when no request was ever forwarded may now be on their way
    /// through the lost peer, so they fail (conservatively, pulls and pushes too: the loss's
    /// flush is over, `loss_flush.rs`).
    pub(crate) fn note_first_move(&mut self, epoch_before: u32) {
        if epoch_before == 0
            && self.dir.epoch() > 0
            && !self.policy.keys_move()
            && let Some(peer) = self.first_lost()
        {
            self.fail_pending_after_loss(peer, true, false);
        }
    }
}
