//! The node state machine: routes remote accesses, serves peers, runs barriers.
//!
//! `Node` is sans-IO. Inputs are the `issue_*` calls of local workers (for keys the fast path
//! could not serve) and `handle_*` calls of the shell (frames received, peers lost). Outputs are
//! drained with `poll_transmit` (frames to send, in order, per destination) and `poll_completion`
//! (finished operations for the shell to hand to waiting workers). After every input the shell
//! drains transmits first, then completions: a completion never depends on an unsent frame.
//!
//! Invariants:
//! - Every issued operation produces exactly one [`Completion`], success or error, and never
//!   waits on a peer that is known to be lost.
//! - A request from a peer is validated in full (range, lengths, ownership) before any parameter
//!   is touched; an invalid one is rejected with a [`Kind::Reject`] and changes nothing.
//! - Frames for one destination leave in the order they were produced (the transport keeps
//!   per-link FIFO order, which later protocol steps rely on).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::directory::{HomeTable, Partitioning};
use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::keyspace::KeySpace;
use crate::stats::{NodeCounters, add};
use crate::store::{Store, UpdateMode};
use crate::wire::{FLAG_SET, Frame, Kind, RejectCode};

/// A point in (real or virtual) time, in nanoseconds since an arbitrary origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

/// Static configuration of one node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's rank.
    pub id: NodeId,
    /// Number of nodes in the cluster.
    pub num_nodes: u32,
    /// Worker threads per node (all nodes have the same count).
    pub workers_per_node: u32,
    /// The key space.
    pub space: KeySpace,
    /// How keys are assigned to home nodes.
    pub partitioning: Partitioning,
    /// When false, even local keys are accessed through messages to this node (the ablation of a
    /// classic, ps-lite-like server).
    pub fast_local_access: bool,
}

/// One answered piece of a pull: where each key's values go in the caller's buffer, and the
/// frame holding them in the same key order.
#[derive(Debug)]
pub struct PullPart {
    /// Offset in the caller's output buffer of each key of `reply`, in order.
    pub out_offsets: Vec<usize>,
    /// The reply frame; its values are the keys' values concatenated in key order.
    pub reply: Frame,
}

impl PullPart {
    /// Copies the answered values into the caller's buffer.
    pub fn scatter(&self, space: &KeySpace, out: &mut [f32]) {
        let values = self.reply.values();
        let mut pos = 0;
        for (&key, &offset) in self.reply.keys().iter().zip(&self.out_offsets) {
            let len = space.len(key);
            out[offset..offset + len].copy_from_slice(&values[pos..pos + len]);
            pos += len;
        }
    }
}

/// A finished operation, to be handed to the worker that issued it.
#[derive(Debug)]
pub struct Completion {
    /// The issuing worker.
    pub worker: WorkerId,
    /// The operation.
    pub req: ReqId,
    /// For pulls, the answered parts; empty for other operations.
    pub result: Result<Vec<PullPart>, OpError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Pull,
    Push,
}

/// One destination's share of an operation.
#[derive(Debug)]
struct SubRequest {
    dest: NodeId,
    keys: Vec<Key>,
    out_offsets: Vec<usize>,
    answered: bool,
}

#[derive(Debug)]
struct Pending {
    worker: WorkerId,
    kind: OpKind,
    subs: Vec<SubRequest>,
    unanswered: usize,
    parts: Vec<PullPart>,
    error: Option<OpError>,
}

/// Barrier bookkeeping: local arrivals, and at the coordinator, node arrivals.
#[derive(Debug, Default)]
struct Barriers {
    generation: u64,
    local_waiters: Vec<(WorkerId, ReqId)>,
    /// Coordinator only: nodes that reached `generation`.
    nodes_arrived: u32,
}

/// Bits of a wire request id that number the sub-request within its operation.
const SUB_BITS: u32 = 16;

/// The protocol state machine of one node. See the module docs for the contract.
pub struct Node {
    cfg: NodeConfig,
    home: HomeTable,
    store: Arc<Store>,
    counters: Arc<NodeCounters>,
    next_op: u64,
    pending: HashMap<u64, Pending>,
    outbox: VecDeque<(NodeId, Frame)>,
    completions: VecDeque<Completion>,
    lost: Vec<bool>,
    barriers: Barriers,
    warnings: VecDeque<String>,
}

impl Node {
    /// A node with its home keys in its store, zero-initialised.
    pub fn new(cfg: NodeConfig) -> Self {
        let home = HomeTable::new(cfg.space.num_keys(), cfg.num_nodes, cfg.partitioning);
        let store = Arc::new(Store::new(cfg.space.clone()));
        let mut zeros = Vec::new();
        for key in home.keys_of(cfg.id) {
            zeros.resize(cfg.space.len(key), 0.0);
            store.insert(key, &zeros);
        }
        Self {
            lost: vec![false; cfg.num_nodes as usize],
            home,
            store,
            counters: Arc::default(),
            next_op: 1,
            pending: HashMap::new(),
            outbox: VecDeque::new(),
            completions: VecDeque::new(),
            barriers: Barriers::default(),
            warnings: VecDeque::new(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// The store that worker threads access directly.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The node's counters (shared with the shell, which adds transport figures).
    pub fn counters(&self) -> &Arc<NodeCounters> {
        &self.counters
    }

    /// Where requests for `key` should go now.
    fn route(&self, key: Key) -> NodeId {
        self.home.home(key)
    }

    fn new_op(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    /// Issues a pull of `keys` (validated by the caller, not served locally) whose values go to
    /// `out_offsets` in the caller's buffer. The result arrives as a [`Completion`].
    pub fn issue_pull(&mut self, _now: Time, worker: WorkerId, keys: &[Key], out_offsets: &[usize]) -> ReqId {
        add(&self.counters.remote_pull_ops, 1);
        add(&self.counters.remote_pull_keys, keys.len() as u64);
        let op = self.new_op();
        let subs = self.split(keys, out_offsets);
        for (i, sub) in subs.iter().enumerate() {
            if self.lost[sub.dest.index()] {
                continue;
            }
            let frame = Frame::new(Kind::Pull, self.cfg.id, wire_req(op, i), 0, &sub.keys, 0);
            self.outbox.push_back((sub.dest, frame));
        }
        self.start(op, worker, OpKind::Pull, subs)
    }

    /// Issues a push (`mode` add or set) of `values` for `keys` (validated by the caller); key
    /// `i`'s update is at `values[offsets[i]..]`.
    pub fn issue_push(
        &mut self,
        _now: Time,
        worker: WorkerId,
        keys: &[Key],
        values: &[f32],
        offsets: &[usize],
        mode: UpdateMode,
    ) -> ReqId {
        add(&self.counters.remote_push_ops, 1);
        add(&self.counters.remote_push_keys, keys.len() as u64);
        let op = self.new_op();
        let subs = self.split(keys, offsets);
        for (i, sub) in subs.iter().enumerate() {
            if self.lost[sub.dest.index()] {
                continue;
            }
            let n_vals = sub.keys.iter().map(|&k| self.cfg.space.len(k)).sum();
            let mut frame = Frame::new(Kind::Push, self.cfg.id, wire_req(op, i), 0, &sub.keys, n_vals);
            if mode == UpdateMode::Set {
                frame.header.flags |= FLAG_SET;
            }
            let mut pos = 0;
            let out = frame.values_mut();
            for (&key, &offset) in sub.keys.iter().zip(&sub.out_offsets) {
                let len = self.cfg.space.len(key);
                out[pos..pos + len].copy_from_slice(&values[offset..offset + len]);
                pos += len;
            }
            self.outbox.push_back((sub.dest, frame));
        }
        self.start(op, worker, OpKind::Push, subs)
    }

    /// Groups keys by destination, one sub-request per destination, in first-seen order.
    fn split(&self, keys: &[Key], offsets: &[usize]) -> Vec<SubRequest> {
        let mut subs: Vec<SubRequest> = Vec::new();
        let mut index_of = vec![usize::MAX; self.cfg.num_nodes as usize];
        for (&key, &offset) in keys.iter().zip(offsets) {
            let dest = self.route(key);
            let idx = &mut index_of[dest.index()];
            if *idx == usize::MAX {
                *idx = subs.len();
                subs.push(SubRequest { dest, keys: Vec::new(), out_offsets: Vec::new(), answered: false });
            }
            subs[*idx].keys.push(key);
            subs[*idx].out_offsets.push(offset);
        }
        subs
    }

    fn start(&mut self, op: u64, worker: WorkerId, kind: OpKind, subs: Vec<SubRequest>) -> ReqId {
        let mut pending =
            Pending { worker, kind, unanswered: subs.len(), subs, parts: Vec::new(), error: None };
        for sub in &mut pending.subs {
            if self.lost[sub.dest.index()] {
                sub.answered = true;
                pending.unanswered -= 1;
                pending.error.get_or_insert(OpError::PeerGone { peer: sub.dest });
            }
        }
        if pending.unanswered == 0 {
            self.finish(op, pending);
        } else {
            self.pending.insert(op, pending);
        }
        ReqId(op)
    }

    fn finish(&mut self, op: u64, pending: Pending) {
        let result = match pending.error {
            Some(err) => Err(err),
            None => Ok(pending.parts),
        };
        self.completions.push_back(Completion { worker: pending.worker, req: ReqId(op), result });
    }

    /// Registers worker `worker`'s arrival at the next barrier across all workers of all nodes.
    pub fn issue_barrier(&mut self, _now: Time, worker: WorkerId) -> ReqId {
        let op = self.new_op();
        if let Some(peer) = self.first_lost() {
            self.completions.push_back(Completion {
                worker,
                req: ReqId(op),
                result: Err(OpError::PeerGone { peer }),
            });
            return ReqId(op);
        }
        self.barriers.local_waiters.push((worker, ReqId(op)));
        if self.barriers.local_waiters.len() == self.cfg.workers_per_node as usize {
            let generation = self.barriers.generation;
            if self.cfg.id == NodeId(0) {
                self.coordinator_arrival(generation);
            } else {
                let frame = Frame::control(Kind::Barrier, self.cfg.id, ReqId(0), generation);
                self.outbox.push_back((NodeId(0), frame));
            }
        }
        ReqId(op)
    }

    fn first_lost(&self) -> Option<NodeId> {
        self.lost.iter().position(|&l| l).map(|i| NodeId(i as u32))
    }

    fn coordinator_arrival(&mut self, generation: u64) {
        if generation != self.barriers.generation {
            self.warn(format!("barrier arrival for generation {generation}, expected {}", self.barriers.generation));
            return;
        }
        self.barriers.nodes_arrived += 1;
        if self.barriers.nodes_arrived == self.cfg.num_nodes {
            self.barriers.nodes_arrived = 0;
            for peer in 1..self.cfg.num_nodes {
                let frame = Frame::control(Kind::BarrierRelease, self.cfg.id, ReqId(0), generation);
                self.outbox.push_back((NodeId(peer), frame));
            }
            self.release_barrier(generation);
        }
    }

    fn release_barrier(&mut self, generation: u64) {
        if generation != self.barriers.generation {
            self.warn(format!("barrier release for generation {generation}, expected {}", self.barriers.generation));
            return;
        }
        self.barriers.generation += 1;
        for (worker, req) in std::mem::take(&mut self.barriers.local_waiters) {
            self.completions.push_back(Completion { worker, req, result: Ok(Vec::new()) });
        }
    }

    /// A frame arrived from `from` (possibly this node itself, without fast local access).
    pub fn handle_frame(&mut self, _now: Time, from: NodeId, frame: Frame) {
        if from.0 >= self.cfg.num_nodes {
            self.warn(format!("frame from unknown node {}", from.0));
            return;
        }
        match frame.header.kind {
            Kind::Pull => self.serve_pull(from, frame),
            Kind::Push => self.serve_push(from, frame),
            Kind::PullReply | Kind::PushReply | Kind::Reject => self.handle_reply(from, frame),
            Kind::Barrier if self.cfg.id == NodeId(0) => self.coordinator_arrival(frame.header.aux),
            Kind::BarrierRelease if from == NodeId(0) => self.release_barrier(frame.header.aux),
            Kind::Heartbeat => {}
            kind => self.warn(format!("unexpected {kind:?} frame from {from}")),
        }
    }

    /// Validates the keys of a peer's request: in range and held here. Returns the total value
    /// length, or the rejection to send.
    fn validate_request(&self, frame: &Frame) -> Result<usize, (RejectCode, Key)> {
        let mut total = 0usize;
        for &key in frame.keys() {
            if key >= self.cfg.space.num_keys() {
                return Err((RejectCode::KeyOutOfRange, key));
            }
            if self.store.residency(key) != crate::store::Residency::Local {
                return Err((RejectCode::NotOwner, key));
            }
            total += self.cfg.space.len(key);
        }
        Ok(total)
    }

    fn reject(&mut self, to: NodeId, frame: &Frame, code: RejectCode, key: Key) {
        let reply = Frame::new(Kind::Reject, self.cfg.id, frame.header.req, code as u64, &[key], 0);
        self.outbox.push_back((to, reply));
    }

    fn serve_pull(&mut self, from: NodeId, request: Frame) {
        let total = match self.validate_request(&request) {
            Ok(total) => total,
            Err((code, key)) => return self.reject(from, &request, code, key),
        };
        let mut reply = Frame::new(Kind::PullReply, self.cfg.id, request.header.req, 0, request.keys(), total);
        let mut pos = 0;
        let values = reply.values_mut();
        for &key in request.keys() {
            let len = self.cfg.space.len(key);
            let served = self.store.pull_local(key, &mut values[pos..pos + len]);
            debug_assert!(served, "validated keys stay local while the node lock is held");
            pos += len;
        }
        add(&self.counters.served_keys, request.keys().len() as u64);
        self.outbox.push_back((from, reply));
    }

    fn serve_push(&mut self, from: NodeId, request: Frame) {
        let total = match self.validate_request(&request) {
            Ok(total) => total,
            Err((code, key)) => return self.reject(from, &request, code, key),
        };
        if total != request.values().len() {
            let key = request.keys().first().copied().unwrap_or(0);
            return self.reject(from, &request, RejectCode::LengthMismatch, key);
        }
        let mode = if request.header.flags & FLAG_SET != 0 { UpdateMode::Set } else { UpdateMode::Add };
        let mut pos = 0;
        for &key in request.keys() {
            let len = self.cfg.space.len(key);
            let applied = self.store.push_local(key, &request.values()[pos..pos + len], mode);
            debug_assert!(applied, "validated keys stay local while the node lock is held");
            pos += len;
        }
        let n = request.keys().len() as u64;
        add(&self.counters.served_keys, n);
        let reply = Frame::control(Kind::PushReply, self.cfg.id, request.header.req, n);
        self.outbox.push_back((from, reply));
    }

    fn handle_reply(&mut self, from: NodeId, frame: Frame) {
        let (op, sub_idx) = split_wire_req(frame.header.req);
        let Some(pending) = self.pending.get_mut(&op) else {
            return self.anomaly(format!("{:?} from {from} for unknown request {op}", frame.header.kind));
        };
        let Some(sub) = pending.subs.get_mut(sub_idx).filter(|s| !s.answered && s.dest == from) else {
            return self.anomaly(format!("{:?} from {from} for request {op} that it was not asked", frame.header.kind));
        };
        match (frame.header.kind, pending.kind) {
            (Kind::Reject, _) => {
                let key = frame.keys().first().copied();
                let reason = match (RejectCode::from_u64(frame.header.aux), key) {
                    (Some(RejectCode::KeyOutOfRange), Some(k)) => format!("key {k} is out of range"),
                    (Some(RejectCode::NotOwner), Some(k)) => format!("key {k} is not held there"),
                    (Some(RejectCode::LengthMismatch), _) => "value lengths do not match the keys".to_string(),
                    (code, _) => format!("unknown rejection code {code:?}"),
                };
                pending.error.get_or_insert(OpError::Rejected { peer: from, reason });
            }
            (Kind::PullReply, OpKind::Pull) => {
                let expected: usize = sub.keys.iter().map(|&k| self.cfg.space.len(k)).sum();
                if frame.keys() != sub.keys.as_slice() || frame.values().len() != expected {
                    pending.error.get_or_insert(OpError::Rejected {
                        peer: from,
                        reason: "malformed pull reply (keys or lengths differ from the request)".into(),
                    });
                } else {
                    let out_offsets = std::mem::take(&mut sub.out_offsets);
                    pending.parts.push(PullPart { out_offsets, reply: frame });
                }
            }
            (Kind::PushReply, OpKind::Push) => {}
            (kind, expected) => {
                let message = format!("{kind:?} from {from} does not answer a {expected:?}");
                return self.anomaly(message);
            }
        }
        sub.answered = true;
        pending.unanswered -= 1;
        if pending.unanswered == 0 {
            let pending = self.pending.remove(&op).expect("present above");
            self.finish(op, pending);
        }
    }

    /// `peer` disconnected or stopped answering: fail everything waiting on it.
    pub fn handle_peer_lost(&mut self, _now: Time, peer: NodeId) {
        if peer.0 >= self.cfg.num_nodes || self.lost[peer.index()] || peer == self.cfg.id {
            return;
        }
        self.lost[peer.index()] = true;
        let mut done = Vec::new();
        for (&op, pending) in &mut self.pending {
            for sub in pending.subs.iter_mut().filter(|s| s.dest == peer && !s.answered) {
                sub.answered = true;
                pending.unanswered -= 1;
                pending.error.get_or_insert(OpError::PeerGone { peer });
            }
            if pending.unanswered == 0 {
                done.push(op);
            }
        }
        for op in done {
            let pending = self.pending.remove(&op).expect("collected above");
            self.finish(op, pending);
        }
        for (worker, req) in std::mem::take(&mut self.barriers.local_waiters) {
            self.completions.push_back(Completion { worker, req, result: Err(OpError::PeerGone { peer }) });
        }
    }

    /// Whether `peer` has been reported lost.
    pub fn is_lost(&self, peer: NodeId) -> bool {
        self.lost.get(peer.index()).copied().unwrap_or(false)
    }

    /// Number of operations still waiting for answers.
    pub fn pending_ops(&self) -> usize {
        self.pending.len()
    }

    /// Next frame to send, with its destination. Drain until `None` after every input.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(NodeId, Frame)> {
        self.outbox.pop_front()
    }

    /// Next finished operation. Drain after [`Node::poll_transmit`].
    #[must_use]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Next diagnostic message for the shell to log.
    #[must_use]
    pub fn poll_warning(&mut self) -> Option<String> {
        self.warnings.pop_front()
    }

    fn warn(&mut self, message: String) {
        self.warnings.push_back(message);
    }

    fn anomaly(&mut self, message: String) {
        add(&self.counters.anomalies, 1);
        self.warn(message);
    }
}

fn wire_req(op: u64, sub: usize) -> ReqId {
    ReqId((op << SUB_BITS) | sub as u64)
}

fn split_wire_req(req: ReqId) -> (u64, usize) {
    (req.0 >> SUB_BITS, (req.0 & ((1 << SUB_BITS) - 1)) as usize)
}
