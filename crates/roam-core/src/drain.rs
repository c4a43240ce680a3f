//! Draining a member: its buckets move to the others, its keys go back to their homes, and it
//! leaves the cluster (the protocol and its reasons are in `membership.rs`'s docs).
//!
//! The coordinator runs one drain at a time, in request order: first the moves of every bucket
//! of the node (planned against the moves still queued, each to the member that will hold the
//! fewest), then under dynamic allocation its evacuation (`Evacuate`, `Reclaim` to each key's
//! home, `Evacuated` once it holds nothing), then its removal as a member change.
//!
//! Invariants: no bucket moves to a draining node; a draining node's own localizes fail, and a
//! key that lands there during its evacuation goes on to its home, so it reports `Evacuated`
//! only when it holds nothing; a drain's requester gets exactly one answer (a node that asked
//! for its own drain gets it before the notice of its leave).

use std::collections::BTreeMap;

use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::membership::Change;
use crate::msg::encode;
use crate::node::{Node, OpKind, Time};
use crate::relocate::AtHome;
use crate::stats::add;
use crate::store::Holding;
use crate::warning::Warning;
use crate::wire::{Frame, Kind, RejectCode};

/// Most keys in one `Reclaim` frame.
const RECLAIM_CHUNK: usize = 8192;

/// Why the coordinator refused to drain a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DrainRefusal {
    /// The node is no member.
    #[error("it is no member")]
    NotMember,
    /// The coordinator cannot leave (it serialises every change).
    #[error("it is the coordinator")]
    Coordinator,
    /// It is already draining.
    #[error("it is already draining")]
    AlreadyDraining,
    /// No other live member could take its buckets.
    #[error("no other member could take its buckets")]
    LastMember,
    /// The cluster replicates keys.
    #[error("the cluster replicates keys, whose hubs do not move yet")]
    Replication,
    /// Dynamic allocation over a sparse key space: it creates keys of its first buckets.
    #[error("under dynamic allocation with a sparse key space it creates its first buckets' keys")]
    CreatesKeys,
    /// A member was lost.
    #[error("the cluster lost a member")]
    AfterLoss,
    /// Its own workers still run (a node asked to drain itself).
    #[error("its workers are still running (they must finish first)")]
    WorkersRunning,
}

impl DrainRefusal {
    const ALL: [Self; 8] = [
        Self::NotMember,
        Self::Coordinator,
        Self::AlreadyDraining,
        Self::LastMember,
        Self::Replication,
        Self::CreatesKeys,
        Self::AfterLoss,
        Self::WorkersRunning,
    ];

    pub(crate) fn culprit(self, node: NodeId) -> u64 {
        let code = Self::ALL.iter().position(|&r| r == self).expect("listed") as u64 + 1;
        u64::from(node.0) | code << 32
    }

    /// The reason a `CannotDrain` reject carries in its culprit word, in words.
    pub(crate) fn describe(culprit: u64) -> String {
        let node = NodeId(culprit as u32);
        match Self::ALL.get(((culprit >> 32) as usize).wrapping_sub(1)) {
            Some(reason) => format!("{node} cannot be drained: {reason}"),
            None => format!("{node} cannot be drained"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrainRequester {
    Local(u64),
    Remote(NodeId, ReqId),
    /// Answered already (a node that asked for its own drain, before its leave's notice).
    Answered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrainPhase {
    /// Its buckets are moving away.
    Moving,
    /// Its keys are going to their homes.
    Evacuating,
    /// Its removal is queued or in flight.
    Removing,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct DrainJob {
    pub(crate) node: NodeId,
    pub(crate) requester: DrainRequester,
    pub(crate) phase: DrainPhase,
}

impl Node {
    /// Asks the coordinator to drain `node`: move its buckets and keys to the other members,
    /// then remove it. Completes once it is removed, or fails with the coordinator's reason.
    pub fn issue_drain(&mut self, now: Time, worker: WorkerId, node: NodeId) -> ReqId {
        self.tick(now);
        let op = self.new_op(worker, OpKind::Drain, 1, Vec::new());
        let coordinator = self.dir.coordinator();
        // Only a node itself knows whether its workers still run (they might relocate keys to
        // it after it handed its keys back): it refuses its own drain then, unless the asker
        // is the last one running (its later localizes fail, see `is_leaving`). Another
        // node's request is trusted (see the module docs).
        let asker_runs = worker.0 < self.cfg.workers_per_node && !self.is_retired(worker);
        let running = self
            .cfg
            .workers_per_node
            .saturating_sub(self.retired_count());
        // (The coordinator refuses its own drain in any case, with that reason.)
        if node == self.cfg.id && node != coordinator && running > u32::from(asker_runs) {
            self.answer_drain(
                DrainRequester::Local(op),
                Err((DrainRefusal::WorkersRunning, node)),
            );
        } else if let Some(peer) = self.unreachable(coordinator) {
            self.answer(op, 0);
            self.fail(op, OpError::PeerGone { peer });
            self.settle(op);
        } else if coordinator == self.cfg.id {
            self.queue_drain(now, DrainRequester::Local(op), node);
        } else {
            if let Some(p) = self.pending.get_mut(&op) {
                p.first_hops.push(coordinator);
            }
            let frame = Frame::control(Kind::Drain, self.cfg.id, ReqId(op), u64::from(node.0));
            self.send(coordinator, frame);
        }
        ReqId(op)
    }

    pub(crate) fn queue_drain(&mut self, now: Time, requester: DrainRequester, node: NodeId) {
        let me = self.cfg.id;
        let others = self
            .dir
            .members()
            .iter()
            .filter(|&&n| n != node && !self.lost.contains(&n) && !self.membership.is_draining(n))
            .count();
        let refusal = if !self.dir.is_member(node) {
            Some(DrainRefusal::NotMember)
        } else if node == me {
            Some(DrainRefusal::Coordinator)
        } else if self.membership.drains.iter().any(|job| job.node == node) {
            Some(DrainRefusal::AlreadyDraining)
        } else if !self.lost.is_empty() {
            Some(DrainRefusal::AfterLoss)
        } else if !self.replicas.keys().is_empty() {
            Some(DrainRefusal::Replication)
        } else if self.policy.keys_move()
            && self.cfg.space.is_sparse()
            && node.0 < self.dir.initial_nodes()
        {
            Some(DrainRefusal::CreatesKeys)
        } else if others == 0 {
            Some(DrainRefusal::LastMember)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            return self.answer_drain(requester, Err((refusal, node)));
        }
        self.membership.drains.push_back(DrainJob {
            node,
            requester,
            phase: DrainPhase::Moving,
        });
        if self.membership.drains.len() == 1 {
            self.plan_drain_moves(node);
        }
        self.start_next_move(now);
    }

    /// Queues moves of every bucket of `node` to the other members, each to the one holding
    /// the fewest (ties: the lowest id).
    pub(crate) fn plan_drain_moves(&mut self, node: NodeId) {
        let mine: Vec<u32> = self
            .projected_homes()
            .into_iter()
            .enumerate()
            .filter(|&(_, home)| home == node)
            .map(|(bucket, _)| bucket as u32)
            .collect();
        let mut held: BTreeMap<NodeId, usize> = self
            .buckets_held()
            .into_iter()
            .map(|(n, b)| (n, b.len()))
            .collect();
        held.remove(&node);
        for bucket in mine {
            let Some((&to, _)) = held.iter().min_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0))) else {
                return;
            };
            *held.get_mut(&to).expect("found") += 1;
            self.queue_membership_move(bucket, to);
        }
    }

    /// Moves the running drain on once its moves (or its evacuation) are over.
    pub(crate) fn advance_drain(&mut self) {
        let Some(job) = self.membership.drains.front().copied() else {
            return;
        };
        if job.phase != DrainPhase::Moving || self.membership.moves_left > 0 {
            return;
        }
        if self.dir.buckets_of(job.node).next().is_some() {
            // A move failed (its receiver was lost): try the others again.
            return self.plan_drain_moves(job.node);
        }
        let phase = if self.policy.keys_move() {
            let me = self.cfg.id;
            self.send(job.node, encode::control(Kind::Evacuate, me, 0));
            DrainPhase::Evacuating
        } else {
            self.membership.changes.push_back(Change::Remove(job.node));
            DrainPhase::Removing
        };
        if let Some(front) = self.membership.drains.front_mut() {
            front.phase = phase;
        }
    }

    pub(crate) fn handle_evacuated(&mut self, now: Time, from: NodeId) {
        match self.membership.drains.front_mut() {
            Some(job) if job.node == from && job.phase == DrainPhase::Evacuating => {
                job.phase = DrainPhase::Removing;
                self.membership.changes.push_back(Change::Remove(from));
                self.start_next_move(now);
            }
            _ => self.warn(Warning::Membership {
                from,
                node: from,
                what: "evacuated without being asked",
            }),
        }
    }

    pub(crate) fn answer_drain(
        &mut self,
        requester: DrainRequester,
        result: Result<(), (DrainRefusal, NodeId)>,
    ) {
        let me = self.cfg.id;
        match (requester, result) {
            (DrainRequester::Local(op), result) => {
                self.answer(op, 0);
                if let Err((refusal, node)) = result {
                    let reason = DrainRefusal::describe(refusal.culprit(node));
                    self.fail(op, OpError::Rejected { peer: me, reason });
                }
                self.settle(op);
            }
            (DrainRequester::Remote(origin, req), Ok(())) => {
                self.send(origin, encode::op_done(me, req));
            }
            (DrainRequester::Remote(origin, req), Err((refusal, node))) => {
                let culprit = refusal.culprit(node);
                let frame = encode::reject(me, req, RejectCode::CannotDrain, culprit, &[], &[]);
                self.send(origin, frame);
            }
            (DrainRequester::Answered, _) => {}
        }
    }

    /// At the draining node: asks each key's home to take the keys held here.
    pub(crate) fn handle_evacuate(&mut self, from: NodeId) {
        if from != self.dir.coordinator() {
            return self.warn(Warning::Membership {
                from,
                node: self.cfg.id,
                what: "evacuate not from the coordinator",
            });
        }
        self.membership.evacuating = true;
        let now = self.clock;
        self.leave_all_shares(now);
        // Offers kept for this node's own intents are decided now (it only moves keys).
        self.decide_all_deferred(now);
        let mut by_home: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut cursor = Some(0);
        while let Some(at) = cursor {
            cursor = self.store.scan(at, 4096, |key, holding, _| {
                if holding == Holding::Owned {
                    by_home.entry(self.dir.home(key)).or_default().push(key);
                }
            });
        }
        let me = self.cfg.id;
        for (home, mut keys) in by_home {
            keys.sort_unstable();
            for chunk in keys.chunks(RECLAIM_CHUNK) {
                self.send(home, encode::keys(Kind::Reclaim, me, chunk));
            }
        }
        self.check_evacuated();
    }

    /// Whether this node hands its keys back or left: keys must not move here any more.
    pub(crate) fn is_leaving(&self) -> bool {
        self.membership.evacuating
            || self.membership.leaving.is_some()
            || (self.membership.early.is_none() && !self.dir.is_member(self.cfg.id))
    }

    /// At a draining node: keys that landed here after the evacuation started (relocations
    /// asked for before it) go on to their homes too.
    pub(crate) fn reclaim_landed(&mut self, keys: &[Key]) {
        if !self.membership.evacuating {
            return;
        }
        let mut by_home: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        for &key in keys {
            if self.store.residency(key) == crate::store::Residency::Local {
                by_home.entry(self.dir.home(key)).or_default().push(key);
            }
        }
        let me = self.cfg.id;
        for (home, keys) in by_home {
            self.send(home, encode::keys(Kind::Reclaim, me, &keys));
        }
        self.check_evacuated();
    }

    /// At a draining node: reports once nothing is held here any more.
    pub(crate) fn check_evacuated(&mut self) {
        if self.membership.evacuating && self.store.count_local() == 0 && self.transit.is_empty() {
            self.membership.evacuating = false;
            let coordinator = self.dir.coordinator();
            self.send(
                coordinator,
                encode::control(Kind::Evacuated, self.cfg.id, 0),
            );
        }
    }

    /// At a key's home (by the sender's table): relocate the keys of a leaving node here, or
    /// rows that a node above its row budget sends back (`dynamic.rs`). The sender's ownership
    /// is not checked: a draining node's landing may reach the home before the owner's
    /// `Released` that records it, so a `Reclaim` that crossed a relocation moves the key from
    /// its new owner (nothing is lost; one move more).
    pub(crate) fn handle_reclaim(&mut self, now: Time, from: NodeId, keys: &[Key]) {
        let mut here = Vec::new();
        let mut onward: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        for &key in keys {
            match self.at_home(from, key, "reclaim of a key out of range") {
                // A bucket moving here takes the key once it lands, like any relocation.
                AtHome::Here | AtHome::Held(_) => here.push(key),
                AtHome::Onward(home) => onward.entry(home).or_default().push(key),
                AtHome::Dropped => {}
            }
        }
        add(&self.counters.localize_keys, here.len() as u64);
        self.localize_keys(now, None, &here);
        for (home, keys) in onward {
            add(&self.counters.forwards, 1);
            self.send(home, encode::keys(Kind::Reclaim, from, &keys));
        }
    }
}
