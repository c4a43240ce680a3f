//! Members joining and leaving a running cluster.
//!
//! **Join** (J the new node, C the coordinator, X every other member):
//! 1. J, built with [`Node::joining`] and connected to every member by its shell, sends `Join`
//!    with a fingerprint of its configuration; it queues every other frame until step 3.
//! 2. C waits until no home move is in flight, then takes the next epoch, adds J to its table
//!    as a *server* (no workers: barriers do not wait for it), sends `MemberChange(J joined)`
//!    to every X and `Welcome` (its whole table) to J. No home move starts until every X has
//!    acknowledged (`MemberAck`), so that every move after the join knows J as a member, and
//!    every move before it was over when J copied the table.
//! 3. J installs the table and handles the frames it queued, in order. C then moves buckets to
//!    J (through the ordinary home-move queue) until J has its share.
//!
//! **Drain** (D the node that leaves; any member may ask with [`Node::issue_drain`]):
//! 1. C moves every bucket of D to the other members, one by one, with the fewest first. Under
//!    static allocation the moves carry the keys, so D then holds none.
//! 2. Under dynamic allocation D may still hold keys (its own, or relocated to it): C sends
//!    `Evacuate`, D sends each key's home a `Reclaim`, and each home relocates the keys to
//!    itself with the ordinary relocation protocol. Once D holds none, it says `Evacuated`.
//! 3. C (with no move in flight) takes the next epoch, removes D and sends `MemberChange(D
//!    left)` to every member, D included. Each X drops D (and location-cache entries naming
//!    it) and acknowledges to C and to D. D forwards what still reaches it and is *drained*
//!    once every X has acknowledged: by FIFO links nothing more can come.
//!
//! Why nothing is lost or applied twice: keys only move by home moves and relocations, whose
//! protocols keep every update; a member change starts only between home moves and completes
//! (every member acknowledged) before the next one, so every move has one member set; a node
//! that left still has its earlier frames accepted, and it exits only after every member's
//! last frame to it arrived.
//!
//! Limits (refused with a reason): joins and drains after a peer was lost, with replicated
//! keys (their hubs are spread over the members), draining the coordinator or the last node
//! that could take over, and under dynamic allocation with a sparse key space, draining a node
//! of the initial cluster (it would take the creation of its buckets' keys with it). A node
//! that hosts workers may drain once they have finished.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::directory::mix64;
use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::msg::{Member, Msg, encode};
use crate::node::{Node, NodeConfig, OpKind, Time};
use crate::policy::PolicyKind;
use crate::stats::add;
use crate::store::Holding;
use crate::warning::Warning;
use crate::wire::{Frame, Kind, RejectCode};

/// Most frames a joining node queues before its welcome.
const MAX_EARLY_FRAMES: usize = 1 << 16;
/// Most keys in one `Reclaim` frame.
const RECLAIM_CHUNK: usize = 8192;

/// What changed in the membership, for the shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MembershipEvent {
    /// This joining node was admitted: it is a member and serves from now on.
    Admitted,
    /// This joining node was refused.
    Refused(JoinRefusal),
    /// `node` joined (the shell must be able to send to it).
    Joined(NodeId),
    /// `node` left after draining; its connection ending is no loss.
    Left(NodeId),
    /// This node was drained: it holds nothing and every member has sent it its last frame. It
    /// may say goodbye and exit.
    Drained,
}

/// Why the coordinator refused a join.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinRefusal {
    /// The joiner's configuration (key space, partitioning, allocation, initial node count)
    /// differs from the coordinator's.
    #[error(
        "its configuration (key space, partitioning, allocation or node count) differs from the coordinator's"
    )]
    ConfigMismatch,
    /// A member was lost: the cluster's keys may be incomplete.
    #[error("the cluster lost a member")]
    AfterLoss,
    /// The cluster replicates keys (replica hubs do not move yet).
    #[error("the cluster replicates keys, whose hubs do not move yet")]
    Replication,
    /// The rank is, or was, a member.
    #[error("its rank is, or was, a member's")]
    RankTaken,
    /// The welcome could not be read.
    #[error("its welcome was malformed: {0}")]
    BadWelcome(&'static str),
}

impl JoinRefusal {
    fn code(self) -> u64 {
        match self {
            Self::ConfigMismatch => 1,
            Self::AfterLoss => 2,
            Self::Replication => 3,
            Self::RankTaken => 4,
            Self::BadWelcome(_) => 5,
        }
    }

    fn from_code(code: u64) -> Self {
        match code {
            1 => Self::ConfigMismatch,
            2 => Self::AfterLoss,
            3 => Self::Replication,
            4 => Self::RankTaken,
            _ => Self::BadWelcome("unknown refusal code"),
        }
    }
}

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

    fn culprit(self, node: NodeId) -> u64 {
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
enum Change {
    Admit(NodeId),
    Remove(NodeId),
}

#[derive(Debug)]
struct ChangeInFlight {
    change: Change,
    epoch: u32,
    awaiting: BTreeSet<NodeId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DrainRequester {
    Local(u64),
    Remote(NodeId, ReqId),
    /// Answered already (a node that asked for its own drain, before its leave's notice).
    Answered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DrainPhase {
    /// Its buckets are moving away.
    Moving,
    /// Its keys are going to their homes.
    Evacuating,
    /// Its removal is queued or in flight.
    Removing,
}

#[derive(Clone, Copy, Debug)]
struct DrainJob {
    node: NodeId,
    requester: DrainRequester,
    phase: DrainPhase,
}

/// Membership state: at a joining node, at the coordinator, and at a leaving node.
#[derive(Debug, Default)]
pub(crate) struct Membership {
    /// A joining node before its welcome: the frames that came early, in arrival order.
    early: Option<Vec<(NodeId, Frame)>>,
    events: VecDeque<MembershipEvent>,
    /// Nodes that left (their last frames are still accepted).
    left: BTreeSet<NodeId>,
    /// Coordinator: changes waiting for a moment without home moves.
    changes: VecDeque<Change>,
    in_flight: Option<ChangeInFlight>,
    /// Coordinator: drains in request order; the first is running.
    drains: VecDeque<DrainJob>,
    /// Coordinator: queued or running home moves of joins and drains.
    pub(crate) moves_left: usize,
    /// At a draining node: handing its keys to their homes.
    evacuating: bool,
    /// At a leaving node: members whose acknowledgement is missing.
    leaving: Option<BTreeSet<NodeId>>,
    /// At a node about to leave: acknowledgements that overtook the coordinator's notice.
    early_acks: BTreeSet<NodeId>,
}

impl Membership {
    /// Whether `node` is draining (at the coordinator): no bucket may move to it.
    pub(crate) fn is_draining(&self, node: NodeId) -> bool {
        self.drains.front().is_some_and(|job| job.node == node)
    }

    /// Whether `node` left the cluster.
    pub(crate) fn has_left(&self, node: NodeId) -> bool {
        self.left.contains(&node)
    }
}

/// A fingerprint of what every member must agree on: the key space, partitioning, allocation
/// and the initial node count (a check against a mistyped command line, not a proof).
fn fingerprint(cfg: &NodeConfig) -> u64 {
    let space = &cfg.space;
    let mut h = mix64(space.num_keys() ^ u64::from(space.is_sparse()) << 63);
    let last = space.num_keys().saturating_sub(1);
    for key in [0, 1, last / 2, last] {
        if space.contains(key) {
            h = mix64(h ^ (space.len(key) as u64) << 20 ^ space.record_len(key) as u64);
        }
    }
    let policy = match cfg.policy {
        PolicyKind::Static => 1,
        PolicyKind::Lapse { location_caches } => 2 + u64::from(location_caches),
    };
    h = mix64(h ^ policy << 8 ^ cfg.partitioning as u64);
    mix64(h ^ u64::from(cfg.num_nodes) << 16)
}

impl Node {
    /// A node that joins a running cluster as a server (no workers): `cfg.id` is its new rank
    /// (given by the shell), `cfg.num_nodes` the cluster's initial size, and the rest as every
    /// member's. It holds nothing until the coordinator admits it and moves buckets to it; call
    /// [`Node::start_join`] once the shell can send to every member.
    pub fn joining(cfg: NodeConfig) -> Self {
        let mut node = Self::build(cfg, false);
        node.membership.early = Some(Vec::new());
        node
    }

    /// Asks the coordinator to admit this joining node; [`MembershipEvent::Admitted`] or
    /// [`MembershipEvent::Refused`] follows.
    pub fn start_join(&mut self, now: Time) {
        self.tick(now);
        let coordinator = self.dir.coordinator();
        let frame = encode::control(Kind::Join, self.cfg.id, fingerprint(&self.cfg));
        self.send(coordinator, frame);
    }

    /// Whether this node is a member (false for a joining node until its welcome, and for a
    /// node that left).
    pub fn is_member(&self) -> bool {
        self.membership.early.is_none() && self.dir.is_member(self.cfg.id)
    }

    /// The next membership event for the shell. Drain after [`Node::poll_completion`].
    pub fn poll_membership(&mut self) -> Option<MembershipEvent> {
        self.membership.events.pop_front()
    }

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
        if node == self.cfg.id && running > u32::from(asker_runs) {
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

    /// Whether `from` may send a frame of `kind` here: a member anything; a node that left only
    /// what can still be in flight from it (answers, forwarded requests and relocations, its
    /// leave's last messages), never a request of its own.
    pub(crate) fn accepts_from(&self, from: NodeId, kind: Kind) -> bool {
        if self.dir.is_member(from) {
            return true;
        }
        self.membership.has_left(from)
            && matches!(
                kind,
                Kind::Pull
                    | Kind::Push
                    | Kind::PullReply
                    | Kind::PushReply
                    | Kind::Reject
                    | Kind::Localize
                    | Kind::HandOver
                    | Kind::Transfer
                    | Kind::Reclaim
                    | Kind::Evacuated
                    | Kind::EpochAck
                    | Kind::MemberAck
                    | Kind::Heartbeat
                    | Kind::Goodbye
            )
    }

    /// Frames a joining node cannot handle yet, and joins at the coordinator (whose senders are
    /// no members yet). Returns the frame if it is for the ordinary dispatch.
    pub(crate) fn intercept_membership(
        &mut self,
        now: Time,
        from: NodeId,
        frame: Frame,
    ) -> Option<Frame> {
        if self.membership.early.is_some() {
            if frame.header.kind == Kind::Welcome {
                self.handle_welcome(now, from, &frame);
            } else if let Some(early) = self.membership.early.as_mut() {
                if early.len() < MAX_EARLY_FRAMES {
                    early.push((from, frame));
                } else {
                    self.warn(Warning::Membership {
                        from,
                        node: self.cfg.id,
                        what: "too many frames before the welcome (dropped)",
                    });
                }
            }
            return None;
        }
        if frame.header.kind == Kind::Join && !self.dir.is_member(from) {
            self.tick(now);
            self.handle_join(now, from, frame.header.aux);
            return None;
        }
        Some(frame)
    }

    pub(crate) fn handle_member_msg(&mut self, now: Time, from: NodeId, msg: Member<'_>) {
        match msg {
            Member::Join { fingerprint } => self.handle_join(now, from, fingerprint),
            Member::Welcome { .. } => self.warn(Warning::Membership {
                from,
                node: self.cfg.id,
                what: "welcome at a member",
            }),
            Member::Change {
                node,
                joined,
                epoch,
            } => self.handle_member_change(now, from, node, joined, epoch),
            Member::Ack { node, epoch } => self.handle_member_ack(now, from, node, epoch),
            Member::Drain { origin, req, node } => {
                if self.cfg.id == self.dir.coordinator() {
                    self.queue_drain(now, DrainRequester::Remote(origin, req), node);
                } else {
                    self.warn(Warning::Membership {
                        from,
                        node,
                        what: "drain request at a node that is not the coordinator",
                    });
                }
            }
            Member::Evacuate => self.handle_evacuate(from),
            Member::Evacuated => self.handle_evacuated(now, from),
            Member::Reclaim { keys } => self.handle_reclaim(now, from, keys),
        }
    }

    // ----- joining ---------------------------------------------------------------------------

    fn handle_join(&mut self, now: Time, from: NodeId, their_fingerprint: u64) {
        if self.cfg.id != self.dir.coordinator() {
            return self.warn(Warning::Membership {
                from,
                node: from,
                what: "join request at a node that is not the coordinator",
            });
        }
        let refusal = if self.dir.is_member(from) || self.membership.has_left(from) {
            Some(JoinRefusal::RankTaken)
        } else if their_fingerprint != fingerprint(&self.cfg) {
            Some(JoinRefusal::ConfigMismatch)
        } else if !self.lost.is_empty() {
            Some(JoinRefusal::AfterLoss)
        } else if !self.replicas.keys().is_empty() {
            Some(JoinRefusal::Replication)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            let mut frame = encode::welcome(self.cfg.id, 0, &[]);
            frame.header.aux = refusal.code();
            return self.send(from, frame);
        }
        if !self.membership.changes.contains(&Change::Admit(from)) {
            self.membership.changes.push_back(Change::Admit(from));
        }
        self.start_next_move(now);
    }

    fn handle_welcome(&mut self, now: Time, from: NodeId, frame: &Frame) {
        let Ok(Msg::Member(Member::Welcome {
            table,
            refusal,
            epoch,
        })) = Msg::decode(frame)
        else {
            return self.refuse_join(JoinRefusal::BadWelcome("not a welcome frame"));
        };
        if from != self.dir.coordinator() {
            return self.warn(Warning::Membership {
                from,
                node: self.cfg.id,
                what: "welcome not from the coordinator",
            });
        }
        let Some(table) = table else {
            return self.refuse_join(JoinRefusal::from_code(refusal));
        };
        let mut dir = self.dir.clone();
        if let Err(what) = dir.restore_words(epoch, table) {
            return self.refuse_join(JoinRefusal::BadWelcome(what));
        }
        if !dir.is_member(self.cfg.id) {
            return self.refuse_join(JoinRefusal::BadWelcome("the table lacks this node"));
        }
        self.dir = dir;
        let early = self.membership.early.take().unwrap_or_default();
        self.watch_members(now);
        self.membership.events.push_back(MembershipEvent::Admitted);
        for (from, frame) in early {
            self.handle_frame(now, from, frame);
        }
    }

    fn refuse_join(&mut self, refusal: JoinRefusal) {
        self.membership.early = None;
        self.membership
            .events
            .push_back(MembershipEvent::Refused(refusal));
    }

    // ----- the coordinator's changes ---------------------------------------------------------

    /// At the coordinator, whenever no home move is in flight: advances drains and starts the
    /// next member change. Returns whether home moves must wait (a change is in flight).
    pub(crate) fn membership_turn(&mut self, now: Time) -> bool {
        if self.membership.in_flight.is_some() {
            return true;
        }
        self.advance_drain();
        if self.moves_in_flight() {
            return false;
        }
        let Some(change) = self.membership.changes.pop_front() else {
            return false;
        };
        self.start_change(now, change);
        self.membership.in_flight.is_some()
    }

    fn start_change(&mut self, now: Time, change: Change) {
        let me = self.cfg.id;
        let epoch = self.moves.take_epoch(self.dir.epoch());
        let (node, joined) = match change {
            Change::Admit(node) => (node, true),
            Change::Remove(node) => (node, false),
        };
        if joined {
            self.dir.add_server(node, epoch);
        } else {
            self.dir.remove_member(node, epoch);
            self.forget_member(node);
            // A node that asked for its own drain learns it succeeded before the notice of its
            // leave (same link): after that notice it may exit at any time.
            if let Some(job) = self.membership.drains.front_mut()
                && job.node == node
                && let DrainRequester::Remote(origin, req) = job.requester
                && origin == node
            {
                job.requester = DrainRequester::Answered;
                self.send(node, encode::op_done(me, req));
            }
        }
        let recipients: Vec<NodeId> = self
            .live_peers()
            .into_iter()
            .chain((!joined && !self.lost.contains(&node)).then_some(node))
            .collect();
        for &peer in &recipients {
            if peer != node || !joined {
                self.send(peer, encode::member_change(me, node, joined, epoch));
            }
        }
        if joined {
            let table = self.dir.to_words();
            self.send(node, encode::welcome(me, epoch, &table));
            self.watch_members(now);
            self.membership
                .events
                .push_back(MembershipEvent::Joined(node));
        } else {
            self.membership
                .events
                .push_back(MembershipEvent::Left(node));
            self.recheck_barrier();
        }
        let awaiting = recipients.into_iter().filter(|&p| p != node).collect();
        self.membership.in_flight = Some(ChangeInFlight {
            change,
            epoch,
            awaiting,
        });
        self.complete_change_if_acked(now);
    }

    fn complete_change_if_acked(&mut self, now: Time) {
        let lost = &self.lost;
        let Some(flight) = self.membership.in_flight.as_mut() else {
            return;
        };
        flight.awaiting.retain(|p| !lost.contains(p));
        if !flight.awaiting.is_empty() {
            return;
        }
        let change = flight.change;
        self.membership.in_flight = None;
        match change {
            Change::Admit(node) => self.plan_join_moves(now, node),
            Change::Remove(node) => {
                if let Some(job) = self.membership.drains.pop_front() {
                    debug_assert_eq!(job.node, node);
                    self.answer_drain(job.requester, Ok(()));
                }
                if let Some(next) = self.membership.drains.front().map(|job| job.node) {
                    self.plan_drain_moves(next);
                }
            }
        }
        self.start_next_move(now);
    }

    /// Queues the moves that give the new server `node` its share of buckets: from the members
    /// holding the most, their last buckets first.
    fn plan_join_moves(&mut self, now: Time, node: NodeId) {
        let mut held = self.buckets_held();
        let Some(mine) = held.get(&node).map(Vec::len) else {
            return;
        };
        let total: usize = held.values().map(Vec::len).sum();
        let share = total / held.len();
        let mut taken = mine;
        while taken < share {
            let Some((&donor, _)) = held
                .iter()
                .filter(|&(&n, _)| n != node)
                .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)))
            else {
                break;
            };
            let Some(bucket) = held.get_mut(&donor).and_then(Vec::pop) else {
                break;
            };
            self.queue_membership_move(bucket, node);
            taken += 1;
        }
        self.start_next_move(now);
    }

    /// Buckets per live member that is not draining, in increasing order, as they will be once
    /// the queued moves are done.
    fn buckets_held(&self) -> BTreeMap<NodeId, Vec<u32>> {
        let mut held: BTreeMap<NodeId, Vec<u32>> = self
            .dir
            .members()
            .iter()
            .copied()
            .filter(|&n| !self.lost.contains(&n) && !self.membership.is_draining(n))
            .map(|n| (n, Vec::new()))
            .collect();
        for (bucket, home) in self.projected_homes().into_iter().enumerate() {
            if let Some(list) = held.get_mut(&home) {
                list.push(bucket as u32);
            }
        }
        held
    }

    // ----- draining --------------------------------------------------------------------------

    fn queue_drain(&mut self, now: Time, requester: DrainRequester, node: NodeId) {
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
    fn plan_drain_moves(&mut self, node: NodeId) {
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
    fn advance_drain(&mut self) {
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

    fn handle_evacuated(&mut self, now: Time, from: NodeId) {
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

    fn answer_drain(
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
    fn handle_evacuate(&mut self, from: NodeId) {
        if from != self.dir.coordinator() {
            return self.warn(Warning::Membership {
                from,
                node: self.cfg.id,
                what: "evacuate not from the coordinator",
            });
        }
        self.membership.evacuating = true;
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

    /// At a key's home (by the sender's table): relocate the keys of a leaving node here.
    fn handle_reclaim(&mut self, now: Time, from: NodeId, keys: &[Key]) {
        let me = self.cfg.id;
        let mut here = Vec::new();
        let mut onward: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        for &key in keys {
            if !self.cfg.space.contains(key) {
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "reclaim of a key out of range",
                });
                continue;
            }
            let bucket = self.dir.bucket(key);
            if self.records.contains_key(&bucket) {
                here.push(key);
            } else {
                let home = self.dir.bucket_home(bucket);
                if home == me {
                    self.warn(Warning::Relocation {
                        from: Some(from),
                        key,
                        what: "home without the bucket's records",
                    });
                } else {
                    onward.entry(home).or_default().push(key);
                }
            }
        }
        add(&self.counters.localize_keys, here.len() as u64);
        self.localize_keys(now, None, &here);
        for (home, keys) in onward {
            add(&self.counters.forwards, 1);
            self.send(home, encode::keys(Kind::Reclaim, from, &keys));
        }
    }

    // ----- every member ----------------------------------------------------------------------

    fn handle_member_change(
        &mut self,
        now: Time,
        from: NodeId,
        node: NodeId,
        joined: bool,
        epoch: u32,
    ) {
        let me = self.cfg.id;
        if from != self.dir.coordinator() || node == from {
            return self.warn(Warning::Membership {
                from,
                node,
                what: "member change not from the coordinator, or about it",
            });
        }
        if joined {
            if !self.dir.add_server(node, epoch) {
                return self.warn(Warning::Membership {
                    from,
                    node,
                    what: "joined twice",
                });
            }
            self.watch_members(now);
            self.membership
                .events
                .push_back(MembershipEvent::Joined(node));
        } else if node == me {
            // It times nobody any more (they stopped timing it): a late acknowledgement is
            // no silence to act on.
            for peer in self.dir.members().to_vec() {
                self.timers.forget(peer);
            }
            self.dir.remove_member(me, epoch);
            let early = std::mem::take(&mut self.membership.early_acks);
            let awaiting: BTreeSet<NodeId> = self
                .live_peers()
                .into_iter()
                .filter(|&p| p != from && !early.contains(&p))
                .collect();
            self.membership.leaving = Some(awaiting);
            self.drained_if_acked();
            return;
        } else {
            self.dir.remove_member(node, epoch);
            self.forget_member(node);
            self.membership
                .events
                .push_back(MembershipEvent::Left(node));
            if !self.lost.contains(&node) {
                self.send(node, encode::member_ack(me, node, epoch));
            }
        }
        self.send(from, encode::member_ack(me, node, epoch));
    }

    fn handle_member_ack(&mut self, now: Time, from: NodeId, node: NodeId, epoch: u32) {
        if let Some(flight) = self.membership.in_flight.as_mut()
            && flight.epoch == epoch
            && matches!(flight.change, Change::Admit(n) | Change::Remove(n) if n == node)
        {
            flight.awaiting.remove(&from);
            return self.complete_change_if_acked(now);
        }
        if node == self.cfg.id && self.dir.is_member(from) {
            // The notice of this node's own leave may still be on its way from the
            // coordinator: a member's acknowledgement can overtake it.
            match self.membership.leaving.as_mut() {
                Some(awaiting) => {
                    awaiting.remove(&from);
                    self.drained_if_acked();
                }
                None => {
                    self.membership.early_acks.insert(from);
                }
            }
            return;
        }
        self.warn(Warning::Membership {
            from,
            node,
            what: "acknowledgement of no change in flight",
        });
    }

    fn drained_if_acked(&mut self) {
        let lost = &self.lost;
        if let Some(awaiting) = self.membership.leaving.as_mut() {
            awaiting.retain(|p| !lost.contains(p));
            if awaiting.is_empty() {
                self.membership.leaving = None;
                self.membership.events.push_back(MembershipEvent::Drained);
            }
        }
    }

    /// Forgets a member that left: no timers, no cache entries naming it, and no bucket here
    /// names it as the default owner of its keys any more. (It held none when it left: every
    /// key it held was reclaimed, with a record naming its home, before its removal began.)
    fn forget_member(&mut self, node: NodeId) {
        let me = self.cfg.id;
        self.membership.left.insert(node);
        self.timers.forget(node);
        self.cache.retain(|_, owner| *owner != node);
        for records in self.records.values_mut() {
            if records.default_owner == node {
                records.default_owner = me;
            }
        }
    }

    /// `peer` was lost: changes and a leave complete without its acknowledgement, and every
    /// drain fails (keys may be gone with it).
    pub(crate) fn membership_lose_peer(&mut self, now: Time, peer: NodeId) {
        self.drained_if_acked();
        let me = self.cfg.id;
        for change in std::mem::take(&mut self.membership.changes) {
            match change {
                Change::Admit(node) => {
                    let mut frame = encode::welcome(me, 0, &[]);
                    frame.header.aux = JoinRefusal::AfterLoss.code();
                    self.send(node, frame);
                }
                Change::Remove(_) => self.membership.changes.push_back(change),
            }
        }
        for job in std::mem::take(&mut self.membership.drains) {
            self.membership
                .changes
                .retain(|c| *c != Change::Remove(job.node));
            match job.requester {
                DrainRequester::Local(op) => {
                    self.answer(op, 0);
                    self.fail(op, OpError::PeerGone { peer });
                    self.settle(op);
                }
                // The requester learns of the loss itself and fails its operation then.
                DrainRequester::Remote(..) | DrainRequester::Answered => {}
            }
        }
        self.complete_change_if_acked(now);
    }
}
