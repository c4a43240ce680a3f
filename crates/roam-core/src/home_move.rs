//! Moving a bucket's home to another node while operations are in flight.
//!
//! Protocol (C coordinator, H old home, N new home, X every other member):
//! 1. C takes one move at a time (`MoveHome`), assigns it the next epoch `e` and sends
//!    `HomeHandOff(b → N, e)` to H.
//! 2. H drops the bucket's placement records from its own state, switches its table (b → N at
//!    `e`), sends them to N (`HomeTransfer`) and sends `EpochChange(b → N, e)` to every X. From
//!    then on H forwards whatever it gets for the bucket to N, by its table, like any node that
//!    is not the home.
//! 3. N installs the records and switches its table; X switch on `EpochChange`. Each of them
//!    then sends `EpochAck` to H, which passes it on to N: since H→N is FIFO and X sent
//!    everything it routed by the old table before its ack, N has received all of X's old-table
//!    frames (through H) once X's ack arrives.
//! 4. Until every member but H has confirmed, N *holds* every frame for the bucket's keys — the
//!    ones H forwards (old table) and the ones that come straight to N (new table) in two
//!    queues — so that no requester's later frame overtakes an earlier one, and no hand-over N
//!    sends overtakes one H sent before. When the last ack arrives N serves the old-table queue,
//!    then the new one, and reports `HomeReady` to C, which answers the requester and starts
//!    the next move.
//!
//! Why nothing is lost or applied twice: a frame is only ever at one node at a time, every node
//! routes it by its own table, and a table only moves forward, so a frame routed by an older
//! epoch reaches H and goes on to N; held frames are served exactly once, when released.
//!
//! Under static allocation a key lives at its home, so a move carries the bucket's keys along:
//! in step 2, H also removes every key of the bucket it holds from its store and sends them to
//! N (`BucketKeys`, right after `HomeTransfer`), and every node's table makes N the bucket's
//! creator. N installs them before it serves anything of the bucket: its release waits for its
//! own ack, which H passes on after `BucketKeys` on the same FIFO link.
//!
//! A lost member counts as confirmed; a lost old home releases the held frames at once (what it
//! held is lost with it); a move whose old or new home is lost fails.

use std::collections::VecDeque;

use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::msg::encode;
use crate::node::{Node, OpKind, Time};
use crate::placement::{BucketRecords, BucketState, KeyRecord, Placement};
use crate::stats::add;
use crate::store::{Holding, Residency};
use crate::warning::Warning;
use crate::wire::{Frame, Kind, RejectCode};

/// Who asked for a move, to be answered when it completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Requester {
    /// An operation of this node (the coordinator's own worker).
    Local(u64),
    /// An operation of another node.
    Remote(NodeId, ReqId),
    /// The load balancer (`balance.rs`), at the coordinator.
    Balancer,
    /// A join or a drain (`membership.rs`), at the coordinator.
    Membership,
}

impl MoveRequest {
    /// Whether a worker asked for it (and waits for it).
    fn requested(&self) -> bool {
        matches!(self.requester, Requester::Local(_) | Requester::Remote(..))
    }
}

#[derive(Clone, Copy, Debug)]
struct MoveRequest {
    requester: Requester,
    bucket: u32,
    to: NodeId,
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    request: MoveRequest,
    from: NodeId,
    epoch: u32,
}

/// Coordinator state of home moves: one in flight, the rest queued in arrival order.
#[derive(Debug, Default)]
pub(crate) struct HomeMoves {
    queue: VecDeque<MoveRequest>,
    current: Option<InFlight>,
    /// The epoch the next move gets (above every epoch this coordinator handed out).
    next_epoch: u32,
}

impl HomeMoves {
    /// The epoch of the next change (a move or a member change), above every epoch handed out
    /// and above `current`, the coordinator's table's.
    pub(crate) fn take_epoch(&mut self, current: u32) -> u32 {
        let epoch = self.next_epoch.max(current + 1);
        self.next_epoch = epoch + 1;
        epoch
    }
}

impl Node {
    /// Moves `bucket`'s home to `to` (see the module docs); completes when the new home serves
    /// the bucket. Any node may issue it; the coordinator runs moves one at a time.
    pub fn issue_move_home(
        &mut self,
        now: Time,
        worker: WorkerId,
        bucket: u32,
        to: NodeId,
    ) -> ReqId {
        self.tick(now);
        let op = self.new_op(worker, OpKind::MoveHome, 1, Vec::new());
        let coordinator = self.dir.coordinator();
        if let Some(peer) = self.unreachable(coordinator) {
            self.answer(op, 0);
            self.fail(op, OpError::PeerGone { peer });
            self.settle(op);
            return ReqId(op);
        }
        let request = MoveRequest {
            requester: Requester::Local(op),
            bucket,
            to,
        };
        if coordinator == self.cfg.id {
            self.moves.queue.push_back(request);
            self.start_next_move(now);
        } else {
            if let Some(p) = self.pending.get_mut(&op) {
                p.first_hops.push(coordinator);
            }
            self.send(
                coordinator,
                encode::move_home(self.cfg.id, ReqId(op), bucket, to),
            );
        }
        ReqId(op)
    }

    /// At the coordinator: queues a move of a join or a drain.
    pub(crate) fn queue_membership_move(&mut self, bucket: u32, to: NodeId) {
        self.membership.moves_left += 1;
        self.moves.queue.push_back(MoveRequest {
            requester: Requester::Membership,
            bucket,
            to,
        });
    }

    /// At the coordinator: whether a move is in flight.
    pub(crate) fn moves_in_flight(&self) -> bool {
        self.moves.current.is_some()
    }

    /// At the coordinator: whether a move a worker asked for is queued (it runs even during a
    /// checkpoint cut, which waits for it).
    pub(crate) fn requested_moves_queued(&self) -> bool {
        self.moves.queue.iter().any(MoveRequest::requested)
    }

    /// Puts the first queued move a worker asked for at the head of the queue; false if none.
    fn requested_move_first(&mut self) -> bool {
        let Some(at) = self.moves.queue.iter().position(MoveRequest::requested) else {
            return false;
        };
        if let Some(request) = self.moves.queue.remove(at) {
            self.moves.queue.push_front(request);
        }
        true
    }

    /// At the coordinator: every bucket's home once the move in flight and the queued ones
    /// are done (what joins and drains plan against).
    pub(crate) fn projected_homes(&self) -> Vec<NodeId> {
        let mut homes: Vec<NodeId> = (0..self.dir.num_buckets())
            .map(|b| self.dir.bucket_home(b))
            .collect();
        let current = self.moves.current.map(|c| c.request);
        for request in current.iter().chain(&self.moves.queue) {
            if let Some(home) = homes.get_mut(request.bucket as usize) {
                *home = request.to;
            }
        }
        homes
    }

    /// At the coordinator: queues a move the load balancer decided.
    pub(crate) fn queue_balancer_move(&mut self, now: Time, bucket: u32, to: NodeId) {
        self.moves.queue.push_back(MoveRequest {
            requester: Requester::Balancer,
            bucket,
            to,
        });
        self.start_next_move(now);
    }

    pub(crate) fn handle_move_home(
        &mut self,
        now: Time,
        origin: NodeId,
        req: ReqId,
        bucket: u32,
        to: NodeId,
    ) {
        if self.cfg.id != self.dir.coordinator() {
            return self.warn(Warning::HomeMove {
                from: origin,
                bucket,
                what: "move request at a node that is not the coordinator",
            });
        }
        self.moves.queue.push_back(MoveRequest {
            requester: Requester::Remote(origin, req),
            bucket,
            to,
        });
        self.start_next_move(now);
    }

    /// At the coordinator: starts the next queued move if none is in flight and no member
    /// change is due (member changes go between moves; see `membership.rs`).
    pub(crate) fn start_next_move(&mut self, now: Time) {
        // A move that finishes without running may be a join's or a drain's last: the member
        // change it enables gets its turn before the next move.
        while !self.membership_turn(now) && self.moves.current.is_none() {
            // During a checkpoint cut only moves a worker asked for run (it waits for them:
            // holding them back would deadlock the cut); the balancer's wait for the thaw.
            if self.is_frozen() && !self.requested_move_first() {
                return;
            }
            let Some(request) = self.moves.queue.pop_front() else {
                return;
            };
            let valid = request.bucket < self.dir.num_buckets()
                && self.dir.is_member(request.to)
                && !self.lost.contains(&request.to)
                && !self.membership.is_draining(request.to);
            if !valid {
                self.finish_move(
                    request.requester,
                    Err(RejectCode::InvalidMove),
                    request.bucket,
                );
                continue;
            }
            let from = self.dir.bucket_home(request.bucket);
            if from == request.to {
                self.finish_move(request.requester, Ok(()), request.bucket);
                continue;
            }
            if let Some(peer) = self.unreachable(from) {
                self.fail_move(request.requester, peer);
                continue;
            }
            let epoch = self.moves.take_epoch(self.dir.epoch());
            self.moves.current = Some(InFlight {
                request,
                from,
                epoch,
            });
            if from == self.cfg.id {
                let me = self.cfg.id;
                self.handle_home_hand_off(now, me, request.bucket, request.to, epoch);
            } else {
                let frame = encode::home_hand_off(self.cfg.id, request.bucket, request.to, epoch);
                self.send(from, frame);
            }
        }
    }

    /// Answers a move's requester: done, or refused with `code` (the culprit is the bucket).
    fn finish_move(&mut self, requester: Requester, result: Result<(), RejectCode>, bucket: u32) {
        match (requester, result) {
            (Requester::Local(op), Ok(())) => {
                self.answer(op, 0);
                self.settle(op);
            }
            (Requester::Local(op), Err(_)) => {
                self.answer(op, 0);
                self.fail(
                    op,
                    OpError::Rejected {
                        peer: self.cfg.id,
                        reason: format!(
                            "bucket {bucket} cannot move there (no such bucket or member)"
                        ),
                    },
                );
                self.settle(op);
            }
            (Requester::Remote(origin, req), Ok(())) => {
                self.send(origin, encode::op_done(self.cfg.id, req));
            }
            (Requester::Remote(origin, req), Err(code)) => {
                let frame = encode::reject(self.cfg.id, req, code, u64::from(bucket), &[], &[]);
                self.send(origin, frame);
            }
            (Requester::Balancer, _) => {
                self.balance.in_flight = self.balance.in_flight.saturating_sub(1);
            }
            (Requester::Membership, _) => {
                self.membership.moves_left = self.membership.moves_left.saturating_sub(1);
            }
        }
    }

    /// Fails a move's requester because `peer` is lost.
    fn fail_move(&mut self, requester: Requester, peer: NodeId) {
        match requester {
            Requester::Local(op) => {
                self.answer(op, 0);
                self.fail(op, OpError::PeerGone { peer });
                self.settle(op);
            }
            // The requester learns of the loss itself (every loss is broadcast) and fails its
            // operation then; a reply could not say more.
            Requester::Remote(..) => {}
            Requester::Balancer => {
                self.balance.in_flight = self.balance.in_flight.saturating_sub(1);
            }
            Requester::Membership => {
                self.membership.moves_left = self.membership.moves_left.saturating_sub(1);
            }
        }
    }

    /// At the old home: hand `bucket` to `to`.
    pub(crate) fn handle_home_hand_off(
        &mut self,
        _now: Time,
        from: NodeId,
        bucket: u32,
        to: NodeId,
        epoch: u32,
    ) {
        if from != self.dir.coordinator() || !self.dir.is_member(to) || to == self.cfg.id {
            return self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "hand-off not from the coordinator, or to no other member",
            });
        }
        if self.records.contains_key(&bucket) && self.stash_hand_off(bucket, from, to, epoch) {
            // Share decisions on the bucket's keys are open: it moves once they close.
            return;
        }
        let Some(mut records) = self.records.remove(&bucket) else {
            return self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "hand-off at a node that is not the bucket's home",
            });
        };
        let me = self.cfg.id;
        // Static allocation keeps every key at its home, so the bucket's keys go along (and
        // only this node holds them: moves under it always carry).
        let carry = !self.policy.keys_move();
        debug_assert!(!carry || records.default_owner == me);
        let before = self.dir.epoch();
        self.dir.apply(bucket, to, epoch, carry);
        self.dynamic.may_evict_again();
        self.note_first_move(before);
        if carry {
            records.default_owner = to;
        }
        let mut moved: Vec<(Key, NodeId)> = records
            .owners
            .iter()
            .map(|(&key, record)| (key, record.placement.owner()))
            .collect();
        // Frames must depend only on the inputs, not on the map's iteration order.
        moved.sort_unstable();
        let keys: Vec<Key> = moved.iter().map(|&(key, _)| key).collect();
        let owners: Vec<u32> = moved.iter().map(|&(_, owner)| owner.0).collect();
        let frame = encode::home_transfer(me, bucket, epoch, records.default_owner, &keys, &owners);
        self.send(to, frame);
        if carry {
            // Spilled rows go along, as held rows (`spill.rs`).
            self.unspill_bucket(bucket);
            let (keys, values) = self.take_bucket_keys(bucket);
            add(&self.counters.relocations_out, keys.len() as u64);
            add(&self.counters.relocation_bytes, (values.len() * 4) as u64);
            self.send(to, encode::bucket_keys(me, bucket, epoch, &keys, &values));
        }
        let others: Vec<NodeId> = self
            .dir
            .members()
            .iter()
            .copied()
            .filter(|&m| m != me && m != to && !self.lost.contains(&m))
            .collect();
        for other in others {
            self.send(other, encode::epoch_change(me, bucket, to, epoch));
        }
    }

    /// At the new home: the bucket's records arrived.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn handle_home_transfer(
        &mut self,
        _now: Time,
        from: NodeId,
        bucket: u32,
        epoch: u32,
        default_owner: NodeId,
        keys: &[Key],
        owners: &[u32],
    ) {
        let bad_owner = owners.iter().any(|&o| !self.dir.is_member(NodeId(o)));
        if bucket >= self.dir.num_buckets()
            || !self.dir.is_member(default_owner)
            || bad_owner
            || self.records.contains_key(&bucket)
        {
            return self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "records of no bucket, naming no member, or of a bucket already here",
            });
        }
        // Not yet the creator, if the keys come along: that waits for them (`BucketKeys`), so
        // that no key of the bucket is created here before the old home's copy lands.
        let before = self.dir.epoch();
        self.dir.apply(bucket, self.cfg.id, epoch, false);
        self.dynamic.may_evict_again();
        self.note_first_move(before);
        let mut records = BucketRecords::new(default_owner);
        for (&key, &owner) in keys.iter().zip(owners) {
            records.owners.insert(
                key,
                KeyRecord {
                    placement: Placement::Owned(NodeId(owner)),
                },
            );
        }
        records.state = BucketState::MovingIn {
            old_home: from,
            epoch,
            confirmed: Vec::new(),
            via_old: VecDeque::new(),
            direct: VecDeque::new(),
        };
        self.records.insert(bucket, records);
        self.moving_in += 1;
        add(&self.counters.homes_moved_in, 1);
        let me = self.cfg.id;
        self.send(from, encode::epoch_ack(me, bucket, epoch));
    }

    /// At every other member: the bucket has a new home.
    pub(crate) fn handle_epoch_change(
        &mut self,
        _now: Time,
        from: NodeId,
        bucket: u32,
        home: NodeId,
        epoch: u32,
    ) {
        if bucket >= self.dir.num_buckets() || !self.dir.is_member(home) {
            return self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "epoch change naming no bucket or no member",
            });
        }
        let before = self.dir.epoch();
        self.dir
            .apply(bucket, home, epoch, !self.policy.keys_move());
        self.note_first_move(before);
        let me = self.cfg.id;
        self.send(from, encode::epoch_ack(me, bucket, epoch));
    }

    /// At the old home of a move that carries keys: removes the keys of `bucket` held here
    /// (not replicas) from the store, in increasing key order, with their records.
    fn take_bucket_keys(&mut self, bucket: u32) -> (Vec<Key>, Vec<f32>) {
        let space = &self.cfg.space;
        let mut candidates: Vec<Key> = match self.dir.bucket_range(bucket) {
            Some(range) if !space.is_sparse() => range.collect(),
            // Hashed buckets are no range: their keys are found by the bucket function, over
            // the key space (dense: one hash per key, no record read) or over the keys this
            // node holds (sparse). Either is a walk of the whole space per move, under the
            // node lock: cheap for the key counts measured (tens of thousands), not for
            // millions (a per-bucket key list would be; see docs/elasticity.md).
            _ if !space.is_sparse() => (0..space.num_keys())
                .filter(|&k| self.dir.bucket(k) == bucket)
                .collect(),
            _ => {
                let mut found = Vec::new();
                let mut cursor = Some(0);
                while let Some(at) = cursor {
                    cursor = self.store.scan(at, 4096, |key, holding, _| {
                        if holding == Holding::Owned && self.dir.bucket(key) == bucket {
                            found.push(key);
                        }
                    });
                }
                found.sort_unstable();
                found
            }
        };
        let mut values = Vec::new();
        candidates.retain(|&key| {
            self.store.residency(key) == Residency::Local && self.store.remove(key, &mut values)
        });
        (candidates, values)
    }

    /// At the new home of a move that carries keys: the old home's keys of the bucket. The
    /// bucket is still moving in (nothing of it is served yet), so they are installed as they
    /// are, and this node creates the bucket's keys from now on.
    pub(crate) fn handle_bucket_keys(
        &mut self,
        now: Time,
        from: NodeId,
        bucket: u32,
        epoch: u32,
        keys: &[Key],
        values: &[f32],
    ) {
        let moving_in = matches!(
            self.records.get(&bucket).map(|r| &r.state),
            Some(BucketState::MovingIn { old_home, epoch: e, .. }) if *old_home == from && *e == epoch
        );
        if !moving_in {
            return self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "keys of a bucket that is not moving in from the sender",
            });
        }
        let space = &self.cfg.space;
        let fits = keys
            .iter()
            .all(|&k| space.contains(k) && self.dir.bucket(k) == bucket);
        let lengths: usize = if fits {
            keys.iter().map(|&k| space.record_len(k)).sum()
        } else {
            0
        };
        if !fits || lengths != values.len() {
            return self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "bucket keys out of range, of another bucket, or with wrong lengths",
            });
        }
        let mut offset = 0;
        let mut doubled = false;
        for &key in keys {
            let len = space.record_len(key);
            doubled |= !self.store.insert(key, &values[offset..offset + len]);
            offset += len;
        }
        if doubled {
            self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "a carried key is already held here (kept the copy held here)",
            });
        }
        add(&self.counters.relocations_in, keys.len() as u64);
        for &key in keys {
            self.traced(key, from, now, crate::trace::Change::HomeMoved);
        }
        self.dir.set_creator(bucket, self.cfg.id);
        self.dynamic.may_evict_again();
    }

    /// At the old home, an ack to pass on; at the new home, a confirmation.
    pub(crate) fn handle_epoch_ack(
        &mut self,
        now: Time,
        from: NodeId,
        node: NodeId,
        bucket: u32,
        epoch: u32,
    ) {
        match self.records.get_mut(&bucket) {
            Some(BucketRecords {
                state:
                    BucketState::MovingIn {
                        old_home,
                        epoch: moving_epoch,
                        confirmed,
                        ..
                    },
                ..
            }) if *old_home == from && *moving_epoch == epoch => {
                if !confirmed.contains(&node) {
                    confirmed.push(node);
                }
                self.release_if_confirmed(now, bucket);
            }
            None if bucket < self.dir.num_buckets() => {
                let home = self.dir.bucket_home(bucket);
                self.send(home, encode::epoch_ack(node, bucket, epoch));
            }
            _ => self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "epoch ack that matches no move",
            }),
        }
    }

    /// At the new home: once every member but the old home has confirmed (or is lost), serves
    /// the held frames, old table first, and reports to the coordinator.
    fn release_if_confirmed(&mut self, now: Time, bucket: u32) {
        let Some(records) = self.records.get_mut(&bucket) else {
            return;
        };
        let BucketState::MovingIn {
            old_home,
            epoch,
            confirmed,
            ..
        } = &records.state
        else {
            return;
        };
        let (old_home, epoch) = (*old_home, *epoch);
        let lost = &self.lost;
        let old_home_lost = lost.contains(&old_home);
        let all = self
            .dir
            .members()
            .iter()
            .all(|m| *m == old_home || lost.contains(m) || confirmed.contains(m));
        if !all && !old_home_lost {
            return;
        }
        let BucketState::MovingIn {
            via_old, direct, ..
        } = std::mem::take(&mut records.state)
        else {
            unreachable!("matched above");
        };
        self.moving_in -= 1;
        for (from, frame) in via_old.into_iter().chain(direct) {
            self.handle_frame(now, from, frame);
        }
        let coordinator = self.dir.coordinator();
        if coordinator == self.cfg.id {
            let me = self.cfg.id;
            self.handle_home_ready(now, me, bucket, epoch);
        } else {
            self.send(coordinator, encode::home_ready(self.cfg.id, bucket, epoch));
        }
    }

    /// Holds `frame` (only keys of `bucket`) until the bucket's move to this node completes.
    pub(crate) fn hold(&mut self, now: Time, bucket: u32, from: NodeId, frame: Frame) {
        match self.records.get_mut(&bucket).map(|r| &mut r.state) {
            Some(BucketState::MovingIn {
                old_home,
                via_old,
                direct,
                ..
            }) => {
                add(&self.counters.held_frames, 1);
                if from == *old_home {
                    via_old.push_back((from, frame));
                } else {
                    direct.push_back((from, frame));
                }
            }
            _ => self.handle_frame(now, from, frame),
        }
    }

    /// At the coordinator: a move completed.
    pub(crate) fn handle_home_ready(&mut self, now: Time, from: NodeId, bucket: u32, epoch: u32) {
        match self.moves.current {
            Some(current)
                if current.request.bucket == bucket
                    && current.epoch == epoch
                    && current.request.to == from =>
            {
                self.moves.current = None;
                self.finish_move(current.request.requester, Ok(()), bucket);
                self.start_next_move(now);
            }
            _ => self.warn(Warning::HomeMove {
                from,
                bucket,
                what: "ready for a move that is not in flight",
            }),
        }
    }

    /// At a requester: its move completed.
    pub(crate) fn handle_op_done(&mut self, from: NodeId, req: ReqId) {
        match self.pending.get(&req.0) {
            Some(p) if matches!(p.kind, OpKind::MoveHome | OpKind::Drain) => {
                self.answer(req.0, 0);
                self.settle(req.0);
            }
            _ => self.warn(Warning::UnknownRequest {
                from,
                kind: Kind::OpDone,
                req,
            }),
        }
    }

    /// `peer` is lost: moves it takes part in complete or fail without it.
    pub(crate) fn home_moves_lose_peer(&mut self, now: Time, peer: NodeId) {
        if let Some(current) = self.moves.current
            && (current.from == peer || current.request.to == peer)
        {
            self.moves.current = None;
            self.fail_move(current.request.requester, peer);
            self.start_next_move(now);
        }
        let mut waiting: Vec<u32> = self
            .records
            .iter()
            .filter(|(_, r)| !r.is_live())
            .map(|(&b, _)| b)
            .collect();
        waiting.sort_unstable();
        for bucket in waiting {
            self.release_if_confirmed(now, bucket);
        }
    }
}
