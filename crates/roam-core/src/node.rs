//! The node state machine: routes accesses, serves and forwards peers' requests, relocates keys,
//! runs barriers.
//!
//! `Node` is sans-IO. Inputs are the `issue_*` calls of local workers (for keys the fast path
//! could not serve) and the `handle_*` calls of the shell (frames received, peers lost). Outputs
//! are drained with `poll_transmit` (frames to send, in order, per destination) and then
//! `poll_completion` (finished operations for the shell to hand to waiting workers).
//!
//! Every key has a *home node* (from the [`HomeTable`]) and one *owner*, the only node holding
//! its value. Under static allocation the owner is always the home. Under dynamic allocation
//! keys move with [`Node::issue_localize`]; the home node records the current owner of each of
//! its keys and serialises ownership changes (see `relocate.rs`). Requests travel
//! requester → (home →) owner, keeping the original requester, which the owner answers
//! directly; each answer carries the positions of the keys it answers, so a batched request can
//! be answered in parts by several nodes.
//!
//! Invariants:
//! - Every issued operation produces exactly one [`Completion`], success or error, and never
//!   waits on a peer that is known to be lost.
//! - A key's value exists in at most one store; it is removed before it is sent and inserted
//!   only when it lands, and every operation that reaches a node while the key is on its way
//!   there is queued and applied in arrival order before the key is used or moved on.
//! - A request from a peer is validated in full (range, lengths, positions) before any
//!   parameter is touched; an invalid one is rejected with a [`Kind::Reject`].
//! - Frames for one destination leave in the order they were produced; the protocol relies on
//!   per-link FIFO delivery.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::directory::{HomeTable, Partitioning};
use crate::error::OpError;
use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::keyspace::KeySpace;
use crate::relocate::{Queued, Transit};
use crate::stats::{NodeCounters, add};
use crate::store::{Residency, Store, UpdateMode};
use crate::wire::{FLAG_SET, Frame, Kind};

pub(crate) use crate::barrier::Barriers;

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
    /// How keys are assigned to home nodes (the initial owners).
    pub partitioning: Partitioning,
    /// When false, even local keys are accessed through messages to this node (the ablation of a
    /// classic, ps-lite-like server).
    pub fast_local_access: bool,
    /// Whether keys may move ([`Node::issue_localize`]); false is a classic static server.
    pub dynamic: bool,
    /// Whether requesters remember where keys were last seen and send there directly, falling
    /// back through the home node when the entry is stale.
    pub location_caches: bool,
}

impl NodeConfig {
    /// A static-allocation configuration with fast local access and no location caches.
    pub fn new(
        id: NodeId,
        num_nodes: u32,
        workers_per_node: u32,
        space: KeySpace,
        partitioning: Partitioning,
    ) -> Self {
        Self {
            id,
            num_nodes,
            workers_per_node,
            space,
            partitioning,
            fast_local_access: true,
            dynamic: false,
            location_caches: false,
        }
    }
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
pub(crate) enum OpKind {
    Pull,
    Push,
    Localize,
    Barrier,
}

/// An operation of a local worker waiting for answers.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) worker: WorkerId,
    pub(crate) kind: OpKind,
    /// Output-buffer offset of each position (pulls only).
    pub(crate) out_offsets: Vec<usize>,
    /// The key asked at each position (pulls only), to check that answers name the right keys.
    pub(crate) keys: Vec<Key>,
    /// Which positions have been answered (guards against duplicate or bogus answers).
    pub(crate) answered: Vec<bool>,
    pub(crate) remaining: usize,
    pub(crate) parts: Vec<PullPart>,
    pub(crate) error: Option<OpError>,
    /// Nodes the operation's frames were sent to first (to fail it if one is lost).
    pub(crate) first_hops: Vec<NodeId>,
}

/// Keys (and their positions and values) gathered for one destination.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) keys: Vec<Key>,
    pub(crate) positions: Vec<u32>,
    pub(crate) values: Vec<f32>,
}

impl Batch {
    pub(crate) fn push(&mut self, key: Key, position: u32, values: &[f32]) {
        self.keys.push(key);
        self.positions.push(position);
        self.values.extend_from_slice(values);
    }

    /// A frame of `kind` carrying this batch's keys, positions and values.
    pub(crate) fn into_frame(self, kind: Kind, origin: NodeId, req: ReqId, aux: u64) -> Frame {
        let mut frame = Frame::with_positions(
            kind,
            origin,
            req,
            aux,
            &self.keys,
            &self.positions,
            self.values.len(),
        );
        frame.values_mut().copy_from_slice(&self.values);
        frame
    }
}

/// Where an access to a key goes from this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The value is here.
    Local,
    /// The key is on its way here: queue.
    Transit,
    /// Send to this node.
    Remote(NodeId),
}

/// The protocol state machine of one node. See the module docs for the contract.
pub struct Node {
    pub(crate) cfg: NodeConfig,
    pub(crate) home: HomeTable,
    pub(crate) store: Arc<Store>,
    pub(crate) counters: Arc<NodeCounters>,
    next_op: u64,
    pub(crate) pending: HashMap<u64, Pending>,
    pub(crate) outbox: VecDeque<(NodeId, Frame)>,
    pub(crate) completions: VecDeque<Completion>,
    pub(crate) lost: Vec<bool>,
    pub(crate) barriers: Barriers,
    warnings: VecDeque<String>,
    /// Home keys of this node whose owner is another node (absent: this node owns it).
    pub(crate) owners: HashMap<Key, NodeId>,
    /// Keys on their way to this node, with the operations waiting for them.
    pub(crate) transit: HashMap<Key, Transit>,
    /// Location cache: where keys were last seen (only with `location_caches`).
    pub(crate) cache: HashMap<Key, NodeId>,
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
            owners: HashMap::new(),
            transit: HashMap::new(),
            cache: HashMap::new(),
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

    /// The home table.
    pub fn home_table(&self) -> &HomeTable {
        &self.home
    }

    /// The current owner of `key` as recorded here, if this node is its home.
    pub fn recorded_owner(&self, key: Key) -> Option<NodeId> {
        (self.home.home(key) == self.cfg.id)
            .then(|| self.owners.get(&key).copied().unwrap_or(self.cfg.id))
    }

    /// Where a worker's access to `key` goes.
    pub(crate) fn route(&mut self, key: Key) -> Route {
        match self.store.residency(key) {
            Residency::Local => Route::Local,
            Residency::InTransit => Route::Transit,
            Residency::Remote => {
                // At the key's home the owner record is exact; the cache helps elsewhere only.
                if self.cfg.location_caches && self.home.home(key) != self.cfg.id {
                    if let Some(&owner) = self.cache.get(&key) {
                        add(&self.counters.cache_hits, 1);
                        return Route::Remote(owner);
                    }
                    add(&self.counters.cache_misses, 1);
                }
                Route::Remote(self.server_route(key))
            }
        }
    }

    /// Where a request for a key that is not here is sent on: the owner if this node is the
    /// key's home, else the home. (Forwarding never uses the location cache, so that a stale
    /// entry costs at most one extra hop.)
    pub(crate) fn server_route(&self, key: Key) -> NodeId {
        let home = self.home.home(key);
        if home == self.cfg.id {
            self.owners.get(&key).copied().unwrap_or(home)
        } else {
            home
        }
    }

    pub(crate) fn new_op(
        &mut self,
        worker: WorkerId,
        kind: OpKind,
        keys: usize,
        out_offsets: Vec<usize>,
    ) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        self.pending.insert(
            op,
            Pending {
                worker,
                kind,
                out_offsets,
                keys: Vec::new(),
                answered: vec![false; keys],
                remaining: keys,
                parts: Vec::new(),
                error: None,
                first_hops: Vec::new(),
            },
        );
        op
    }

    /// Whether accesses that need another node must fail at once: a peer is lost and keys may
    /// have been on it (dynamic allocation), or the destination itself is lost.
    fn unreachable(&self, dest: NodeId) -> Option<NodeId> {
        if self.lost[dest.index()] {
            return Some(dest);
        }
        if self.cfg.dynamic {
            self.lost.iter().position(|&l| l).map(|i| NodeId(i as u32))
        } else {
            None
        }
    }

    /// Issues a pull of `keys` (validated by the caller, not served by its fast path) whose
    /// values go to `out_offsets` in the caller's buffer. The result arrives as a [`Completion`].
    pub fn issue_pull(
        &mut self,
        now: Time,
        worker: WorkerId,
        keys: &[Key],
        out_offsets: &[usize],
    ) -> ReqId {
        add(&self.counters.remote_pull_ops, 1);
        let op = self.new_op(worker, OpKind::Pull, keys.len(), out_offsets.to_vec());
        self.pending.get_mut(&op).expect("just created").keys = keys.to_vec();
        let mut batches: Vec<Batch> = (0..self.cfg.num_nodes).map(|_| Batch::default()).collect();
        let mut here = Batch::default();
        let mut value = Vec::new();
        for (pos, &key) in keys.iter().enumerate() {
            let pos = pos as u32;
            match self.route(key) {
                Route::Local if self.cfg.fast_local_access => {
                    value.resize(self.cfg.space.len(key), 0.0);
                    self.store.pull_local(key, &mut value);
                    here.push(key, pos, &value);
                }
                Route::Local => batches[self.cfg.id.index()].push(key, pos, &[]),
                Route::Transit => self.queue_local(now, key, Queued::LocalPull { op, pos }),
                Route::Remote(dest) => batches[dest.index()].push(key, pos, &[]),
            }
        }
        if !here.keys.is_empty() {
            let reply = here.into_frame(Kind::PullReply, self.cfg.id, ReqId(op), 0);
            self.accept_pull_answer(op, reply);
        }
        self.send_batches(op, Kind::Pull, 0, batches);
        self.settle(op);
        ReqId(op)
    }

    /// Issues a push (`mode` add or set) of `values` for `keys` (validated by the caller); key
    /// `i`'s update is at `values[offsets[i]..]`.
    pub fn issue_push(
        &mut self,
        now: Time,
        worker: WorkerId,
        keys: &[Key],
        values: &[f32],
        offsets: &[usize],
        mode: UpdateMode,
    ) -> ReqId {
        add(&self.counters.remote_push_ops, 1);
        let op = self.new_op(worker, OpKind::Push, keys.len(), Vec::new());
        let mut batches: Vec<Batch> = (0..self.cfg.num_nodes).map(|_| Batch::default()).collect();
        for (pos, (&key, &offset)) in keys.iter().zip(offsets).enumerate() {
            let pos = pos as u32;
            let update = &values[offset..offset + self.cfg.space.len(key)];
            match self.route(key) {
                Route::Local if self.cfg.fast_local_access => {
                    self.store.push_local(key, update, mode);
                    self.answer(op, pos);
                }
                Route::Local => batches[self.cfg.id.index()].push(key, pos, update),
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
                Route::Remote(dest) => batches[dest.index()].push(key, pos, update),
            }
        }
        let flags = if mode == UpdateMode::Set { FLAG_SET } else { 0 };
        self.send_batches(op, Kind::Push, flags, batches);
        self.settle(op);
        ReqId(op)
    }

    /// Sends one request frame per non-empty batch, or fails its keys if the destination is
    /// unreachable.
    fn send_batches(&mut self, op: u64, kind: Kind, flags: u8, batches: Vec<Batch>) {
        for (dest, batch) in batches.into_iter().enumerate() {
            if batch.keys.is_empty() {
                continue;
            }
            let dest = NodeId(dest as u32);
            let n = batch.keys.len() as u64;
            match kind {
                Kind::Pull => add(&self.counters.remote_pull_keys, n),
                _ => add(&self.counters.remote_push_keys, n),
            }
            if let Some(peer) = self.unreachable(dest) {
                for &pos in &batch.positions {
                    self.answer(op, pos);
                }
                self.fail(op, OpError::PeerGone { peer });
                continue;
            }
            let mut frame = batch.into_frame(kind, self.cfg.id, ReqId(op), 0);
            frame.header.flags |= flags;
            if let Some(p) = self.pending.get_mut(&op) {
                p.first_hops.push(dest);
            }
            self.outbox.push_back((dest, frame));
        }
    }

    /// Queues a local worker's access to a key in transit here (or fails it if the key may
    /// never arrive).
    fn queue_local(&mut self, _now: Time, key: Key, queued: Queued) {
        if let Some(peer) = self.unreachable(self.cfg.id) {
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
            let result = match p.error {
                Some(err) => Err(err),
                None => Ok(p.parts),
            };
            self.completions.push_back(Completion {
                worker: p.worker,
                req: ReqId(op),
                result,
            });
        }
    }

    /// A frame arrived from `from` (possibly this node itself, without fast local access).
    pub fn handle_frame(&mut self, now: Time, from: NodeId, frame: Frame) {
        if from.0 >= self.cfg.num_nodes {
            self.warn(format!("frame from unknown node {}", from.0));
            return;
        }
        match frame.header.kind {
            Kind::Pull | Kind::Push => self.serve_request(now, from, frame),
            Kind::PullReply | Kind::PushReply | Kind::Reject => self.handle_reply(from, frame),
            Kind::Barrier => self.handle_barrier_arrival(from, frame.header.aux),
            Kind::BarrierRelease => self.handle_barrier_release(from, frame.header.aux),
            Kind::Localize => self.handle_localize(now, from, frame),
            Kind::HandOver => self.handle_hand_over(now, from, frame),
            Kind::Transfer => self.handle_transfer(now, from, frame),
            Kind::PeerLost => match u32::try_from(frame.header.aux) {
                Ok(peer) if peer < self.cfg.num_nodes => self.handle_peer_lost(now, NodeId(peer)),
                _ => self.anomaly(format!("peer-lost notice from {from} names no node")),
            },
            Kind::Heartbeat | Kind::Goodbye => {}
        }
    }

    /// `peer` disconnected or stopped answering: fail everything that may wait on it.
    ///
    /// Under static allocation that is every operation with a frame sent to `peer`. Under dynamic
    /// allocation any key may have been on `peer` or be routed through it, so every operation
    /// waiting for an answer fails, as does every later access that needs another node.
    pub fn handle_peer_lost(&mut self, now: Time, peer: NodeId) {
        self.lose_peer(now, peer, false);
    }

    /// `peer` left cleanly (it said goodbye after the final node-wide barrier): later accesses
    /// that need it fail, but the barrier it passed is not failed and no loss is broadcast.
    pub fn handle_peer_departed(&mut self, now: Time, peer: NodeId) {
        self.lose_peer(now, peer, true);
    }

    fn lose_peer(&mut self, _now: Time, peer: NodeId, departed: bool) {
        if peer.0 >= self.cfg.num_nodes || self.lost[peer.index()] || peer == self.cfg.id {
            return;
        }
        self.lost[peer.index()] = true;
        let dynamic = self.cfg.dynamic;
        let mut doomed: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.kind != OpKind::Barrier && (dynamic || p.first_hops.contains(&peer)))
            .map(|(&op, _)| op)
            .collect();
        // Completions must come out in an order that depends only on the inputs.
        doomed.sort_unstable();
        for op in doomed {
            let p = self.pending.get_mut(&op).expect("collected above");
            p.remaining = 0;
            p.error.get_or_insert(OpError::PeerGone { peer });
            self.settle(op);
        }
        if departed {
            return;
        }
        self.fail_barriers(peer);
        // Tell every other node, so that no one waits for a barrier or a key that depends on
        // the lost node without knowing it (the loss may be of one link only).
        for other in 0..self.cfg.num_nodes {
            let other = NodeId(other);
            if other != self.cfg.id && !self.lost[other.index()] {
                let notice =
                    Frame::control(Kind::PeerLost, self.cfg.id, ReqId(0), u64::from(peer.0));
                self.outbox.push_back((other, notice));
            }
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

    /// Number of keys on their way to this node.
    pub fn keys_in_transit(&self) -> usize {
        self.transit.len()
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

    pub(crate) fn warn(&mut self, message: String) {
        self.warnings.push_back(message);
    }

    pub(crate) fn anomaly(&mut self, message: String) {
        add(&self.counters.anomalies, 1);
        self.warn(message);
    }
}
