//! Members joining and leaving a running cluster.
//!
//! **Join** (J the new node, C the coordinator, X every other member):
//! 1. J, built with [`Node::joining`] and connected to every member by its shell, sends `Join`
//!    with a fingerprint of its configuration; it queues every other frame until step 3. Under
//!    failure detection C heartbeats J from the `Join` on, and J gives up (`Unanswered`) if C
//!    sends it nothing for the silence timeout (`liveness.rs`).
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
//! that hosts workers may drain once they have finished: its own request is refused while
//! another of its workers runs; another node's request is trusted, and the drained node's
//! localizes fail from its evacuation on.
//!
//! This file owns joins, member changes and what every member does; the drain's steps at the
//! coordinator and at the draining node are in `drain.rs`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::directory::mix64;
use crate::drain::{DrainJob, DrainRequester};
use crate::error::OpError;
use crate::id::NodeId;
use crate::msg::{Member, Msg, encode};
use crate::node::{Node, NodeConfig, Time};
use crate::policy::PolicyKind;
use crate::warning::Warning;
use crate::wire::{Frame, Kind};

/// Most frames a joining node queues before its welcome.
const MAX_EARLY_FRAMES: usize = 1 << 16;

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
    /// At the coordinator: `node`'s join, held here, was dropped because its connection ended
    /// before it was admitted.
    JoinDropped(NodeId),
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
    /// Decided by the joiner itself: the coordinator sent nothing (no welcome, no heartbeat)
    /// for the silence timeout, so it is taken for lost.
    #[error("the coordinator, node {}, sent nothing for {} ms", coordinator.0, silent_ns / 1_000_000)]
    Unanswered {
        /// The coordinator asked.
        coordinator: NodeId,
        /// How long it was silent (the liveness silence timeout).
        silent_ns: u64,
    },
    /// Decided by the joiner itself: its connection to the coordinator ended before the
    /// welcome.
    #[error("the connection to the coordinator, node {}, ended", coordinator.0)]
    CoordinatorGone {
        /// The coordinator asked.
        coordinator: NodeId,
    },
}

impl JoinRefusal {
    fn code(self) -> u64 {
        match self {
            Self::ConfigMismatch => 1,
            Self::AfterLoss => 2,
            Self::Replication => 3,
            Self::RankTaken => 4,
            // Never sent: a joiner decides these itself.
            Self::BadWelcome(_) | Self::Unanswered { .. } | Self::CoordinatorGone { .. } => 5,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Admit(NodeId),
    Remove(NodeId),
}

#[derive(Debug)]
struct ChangeInFlight {
    change: Change,
    epoch: u32,
    awaiting: BTreeSet<NodeId>,
}

/// Membership state: at a joining node, at the coordinator, and at a leaving node.
#[derive(Debug, Default)]
pub(crate) struct Membership {
    /// A joining node before its welcome: the frames that came early, in arrival order.
    pub(crate) early: Option<Vec<(NodeId, Frame)>>,
    pub(crate) events: VecDeque<MembershipEvent>,
    /// Nodes that left (their last frames are still accepted).
    pub(crate) left: BTreeSet<NodeId>,
    /// Coordinator: changes waiting for a moment without home moves.
    pub(crate) changes: VecDeque<Change>,
    in_flight: Option<ChangeInFlight>,
    /// Coordinator: drains in request order; the first is running.
    pub(crate) drains: VecDeque<DrainJob>,
    /// Coordinator: queued or running home moves of joins and drains.
    pub(crate) moves_left: usize,
    /// At a draining node: handing its keys to their homes.
    pub(crate) evacuating: bool,
    /// At a leaving node: members whose acknowledgement is missing.
    pub(crate) leaving: Option<BTreeSet<NodeId>>,
    /// At a node about to leave: acknowledgements that overtook the coordinator's notice.
    pub(crate) early_acks: BTreeSet<NodeId>,
    /// A joining node under failure detection: when its join counts as unanswered unless the
    /// coordinator is heard from before (it heartbeats the joins it holds).
    pub(crate) join_deadline: Option<Time>,
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

/// Folds `text` into `h` byte by byte.
fn mix_text(mut h: u64, text: &str) -> u64 {
    for byte in text.bytes() {
        h = mix64(h ^ u64::from(byte));
    }
    mix64(h ^ text.len() as u64)
}

/// A fingerprint of what every member must agree on: the key space (with its initializer,
/// optimizer and admission/eviction policy, space-wide and per table), partitioning,
/// allocation and the initial node count (a check against a mistyped command line, not a
/// proof). The row rules enter as their `Debug` text, which names every parameter: a joiner
/// that would create other rows, or step or evict them otherwise, does not match.
fn fingerprint(cfg: &NodeConfig) -> u64 {
    let space = &cfg.space;
    let mut h = mix64(space.num_keys() ^ u64::from(space.is_sparse()) << 63);
    let last = space.num_keys().saturating_sub(1);
    for key in [0, 1, last / 2, last] {
        if space.contains(key) {
            h = mix64(h ^ (space.len(key) as u64) << 20 ^ space.record_len(key) as u64);
        }
    }
    let rules = format!(
        "{:?} {:?} {:?}",
        space.initializer(),
        space.optimizer(),
        space.dynamic()
    );
    h = mix_text(h, &rules);
    // Named tables: every table's name, lengths and row rules (the probes above see table 0
    // only).
    for table in space.named_tables().map_or(&[][..], |t| t.all()) {
        h = mix_text(h, table.name());
        h = mix64(h ^ (table.dim() as u64) << 20 ^ table.record_len() as u64);
        let rules = format!(
            "{:?} {:?} {:?}",
            table.initializer(),
            table.optimizer(),
            table.dynamic()
        );
        h = mix_text(h, &rules);
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
        self.heard_while_joining(now);
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
                    | Kind::Leave
                    | Kind::ShareDeltas
                    | Kind::ShareValues
                    | Kind::Grant
                    | Kind::Revoke
                    | Kind::Promote
                    | Kind::Shared
                    | Kind::Released
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
            if from == self.dir.coordinator() {
                self.heard_while_joining(now);
            }
            if frame.header.kind == Kind::Welcome {
                self.handle_welcome(now, from, &frame);
            } else if frame.header.kind == Kind::Heartbeat {
                // Only says the coordinator is alive: nothing to replay after the welcome.
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
        // Heartbeats tell the joiner its join is held, however long the admissions before it
        // take (a joiner that hears nothing for the silence timeout gives up): the first now.
        if self.cfg.liveness.is_some() {
            self.timers.heartbeat_joiner(from, now);
            let me = self.cfg.id;
            self.send(from, encode::control(Kind::Heartbeat, me, 0));
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
        self.dynamic.may_evict_again();
        let early = self.membership.early.take().unwrap_or_default();
        self.membership.join_deadline = None;
        self.watch_members(now);
        self.membership.events.push_back(MembershipEvent::Admitted);
        for (from, frame) in early {
            self.handle_frame(now, from, frame);
        }
    }

    pub(crate) fn refuse_join(&mut self, refusal: JoinRefusal) {
        self.membership.early = None;
        self.membership.join_deadline = None;
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
    pub(crate) fn buckets_held(&self) -> BTreeMap<NodeId, Vec<u32>> {
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
        // Not its shares: a node that leaves cleanly sent a `Leave` for every replica before
        // it reported itself evacuated, and those may still be on their way here.
        self.shares.left.retain(|_, owner| *owner != node);
        for records in self.records.values_mut() {
            if records.default_owner == node {
                records.default_owner = me;
            }
        }
    }

    /// Coordinator: `node`, whose join waits here (not admitted yet), is gone (its
    /// connection ended): its join is dropped and no longer heartbeaten. A join already being
    /// admitted made it a member, whose loss is a member's.
    pub(crate) fn drop_held_join(&mut self, node: NodeId) {
        let held = self.membership.changes.len();
        (self.membership.changes).retain(|&c| c != Change::Admit(node));
        if self.membership.changes.len() != held {
            self.timers.forget(node);
            self.membership
                .events
                .push_back(MembershipEvent::JoinDropped(node));
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
                    self.timers.forget(node);
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

#[cfg(test)]
mod tests;
