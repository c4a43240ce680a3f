//! The node state machine: routes accesses, serves and forwards peers' requests, relocates keys,
//! runs barriers.
//!
//! `Node` is sans-IO. Inputs are the `issue_*` calls of local workers (for keys the fast path
//! could not serve) and the `handle_*` calls of the shell (frames received, peers lost). Outputs
//! are drained with `poll_transmit` (frames to send, in order, per destination) and then
//! `poll_completion` (finished operations for the shell to hand to waiting workers).
//!
//! Every key has a *home node* (from the epoch-numbered [`Directory`]) and one *owner*, the only
//! node holding its value. Under static allocation the owner is the key's first home. Under
//! dynamic allocation keys move with [`Node::issue_localize`]; the home node keeps the key's
//! placement record and serialises ownership changes (see `relocate.rs`); homes themselves
//! move bucket by bucket (see `home_move.rs`). Requests travel
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
//! - A request from a peer is decoded ([`Msg`]) and validated in full (range, lengths,
//!   positions) before any parameter is touched; an invalid one is rejected with a
//!   [`Msg::Reject`] naming the culprit key.
//! - Per-destination state is keyed by node id from the directory's member set; nothing is
//!   sized by a node count.
//! - Frames for one destination leave in the order they were produced; the protocol relies on
//!   per-link FIFO delivery.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use crate::balance::{Balance, Balancer};
use crate::directory::{Directory, Partitioning};
use crate::error::{AccessError, OpError};
use crate::home_move::HomeMoves;
use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::intent::IntentTiming;
use crate::interest::Interest;
use crate::keyspace::KeySpace;
use crate::latency::{LatencyOp, LatencyPath, OpLatency};
use crate::liveness::{Liveness, Timers};
use crate::load::{Load, LoadWatch};
use crate::membership::Membership;
use crate::msg::{Msg, MsgError, Request, encode};
use crate::placement::BucketRecords;
use crate::policy::{Policy, PolicyKind};
use crate::relocate::{Queued, Transit};
use crate::replica::{Replicas, Replication};
use crate::sampling::{NodeSamplers, SamplerSpec};
use crate::share::{DEFAULT_SHARE_SYNC_NS, IntentTechniques, Shares};
use crate::stats::{NodeCounters, add};
use crate::store::{Residency, Store, UpdateMode};
use crate::warning::Warning;
use crate::wire::{Frame, Kind, RejectCode};

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
    /// Where keys are held: static, or moved by `localize` (Lapse) — see `policy.rs`.
    pub policy: PolicyKind,
    /// Seed of the policy's random numbers (same seed, same decisions).
    pub seed: u64,
    /// Heartbeats and silence timeouts (see `liveness.rs`); `None` leaves failure detection to
    /// the shell's connections alone.
    pub liveness: Option<Liveness>,
    /// Keys replicated on every node and their sync period (see `replica.rs`); `None`: none.
    pub replication: Option<Replication>,
    /// Samplers, named by their index (see `sampling`); validated by the front ends with
    /// [`SamplerSpec::value_len`].
    pub samplers: Vec<SamplerSpec>,
    /// Response-time reports and straggler detection (see `load.rs`); `None`: off.
    pub load: Option<LoadWatch>,
    /// The load balancer (acts at the coordinator; needs `load`), or `None` for none.
    pub balancer: Option<Balancer>,
    /// When workers act on their intents (see `intent.rs`).
    pub intent_timing: IntentTiming,
    /// What acting on an intent may do: move keys, share them, or both (see `share/mod.rs`).
    pub intent_techniques: IntentTechniques,
    /// Time between share-sync rounds of keys shared by intent (ns).
    pub share_sync_ns: u64,
    /// A barrier that waits this long (ns) warns which workers it still waits for
    /// ([`crate::Warning::BarrierWait`]), and again after every further such interval; `None`:
    /// never.
    pub barrier_warn_every: Option<u64>,
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
            policy: PolicyKind::Static,
            seed: 0,
            liveness: None,
            replication: None,
            samplers: Vec::new(),
            load: None,
            balancer: None,
            intent_timing: IntentTiming::Timed,
            intent_techniques: IntentTechniques::All,
            share_sync_ns: DEFAULT_SHARE_SYNC_NS,
            barrier_warn_every: None,
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

/// What a successful operation produced.
#[derive(Debug)]
pub enum Output {
    /// The operation took effect (push, set, localize, barrier, home move).
    Done,
    /// A pull's answered parts, to be scattered into the caller's buffer.
    Pulled(Vec<PullPart>),
}

impl Output {
    /// The pulled parts (none for operations that read nothing).
    pub fn into_parts(self) -> Vec<PullPart> {
        match self {
            Self::Done => Vec::new(),
            Self::Pulled(parts) => parts,
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
    /// What it produced, or why it failed.
    pub result: Result<Output, OpError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    Pull,
    Push,
    Localize,
    Barrier,
    MoveHome,
    SyncReplicas,
    Drain,
    Checkpoint,
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
    /// When it was issued (answers from a first hop are response-time samples).
    pub(crate) issued: Time,
    /// Some answer came from a node it was not sent to (for the latency histograms).
    pub(crate) forwarded: bool,
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

    /// An answer frame (pull reply with values, push reply without) for `req` from `from`.
    pub(crate) fn into_reply(self, kind: Kind, from: NodeId, req: ReqId) -> Frame {
        encode::reply(kind, from, req, &self.keys, &self.positions, &self.values)
    }

    /// A request frame (pull, or push with this batch's values).
    pub(crate) fn into_request(
        self,
        kind: Kind,
        origin: NodeId,
        req: ReqId,
        hops: u32,
        mode: UpdateMode,
    ) -> Frame {
        let request = Request {
            origin,
            req,
            hops,
            keys: &self.keys,
            positions: &self.positions,
            values: &self.values,
        };
        encode::request(kind, &request, mode)
    }
}

/// One batch per destination node, in node order (so that outputs depend only on inputs).
pub(crate) type Batches = BTreeMap<NodeId, Batch>;

/// Where an access to a key goes from this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The value is here.
    Local,
    /// The key is on its way here: queue.
    Transit,
    /// Send to this node.
    Remote(NodeId),
    /// This node is the key's new home and the bucket's move is completing: hold the access
    /// until it is (see `home_move.rs`).
    Held(u32),
}

/// The protocol state machine of one node. See the module docs for the contract.
pub struct Node {
    pub(crate) cfg: NodeConfig,
    samplers: Arc<NodeSamplers>,
    pub(crate) dir: Directory,
    pub(crate) store: Arc<Store>,
    pub(crate) counters: Arc<NodeCounters>,
    next_op: u64,
    pub(crate) pending: HashMap<u64, Pending>,
    outbox: VecDeque<(NodeId, Frame)>,
    pub(crate) completions: VecDeque<Completion>,
    pub(crate) lost: BTreeSet<NodeId>,
    /// Lost peers in the order they were lost, and whether each left cleanly (goodbye).
    lost_order: Vec<(NodeId, bool)>,
    pub(crate) barriers: Barriers,
    /// The checkpoint cut (`checkpoint.rs`).
    pub(crate) cut: crate::checkpoint::Cut,
    warnings: VecDeque<Warning>,
    /// Placement records of the buckets this node is home of.
    pub(crate) records: HashMap<u32, BucketRecords>,
    /// Home moves this node coordinates or takes part in.
    pub(crate) moves: HomeMoves,
    /// Buckets whose move to this node is completing (frames for them wait).
    pub(crate) moving_in: usize,
    /// The latest time any input carried.
    pub(crate) clock: Time,
    /// Latency of settled pulls and pushes that needed messages (`latency.rs`).
    pub(crate) latency: OpLatency,
    /// Heartbeat and silence timers.
    pub(crate) timers: Timers,
    /// Decides where keys are held.
    pub(crate) policy: Box<dyn Policy>,
    /// Keys on their way to this node, with the operations waiting for them.
    pub(crate) transit: HashMap<Key, Transit>,
    /// Location cache: where keys were last seen (only with `location_caches`).
    pub(crate) cache: HashMap<Key, NodeId>,
    /// Replicated keys and their synchronisation.
    pub(crate) replicas: Replicas,
    /// Keys shared by intent (`share/mod.rs`).
    pub(crate) shares: Shares,
    /// How many intents of this node's workers want each key now (`interest.rs`).
    pub(crate) interest: Arc<Interest>,
    /// Peers' response times and stragglers.
    pub(crate) load: Load,
    /// The load balancer's state.
    pub(crate) balance: Balance,
    /// Joins and leaves (see `membership.rs`).
    pub(crate) membership: Membership,
    /// The allocation trace, when on ([`Node::trace_allocation`]).
    pub(crate) trace: Option<crate::trace::Trace>,
}

impl Node {
    /// A node with its home keys in its store, zero-initialised (in a sparse key space, keys
    /// are created on first use instead; see [`Node::residency`]).
    pub fn new(cfg: NodeConfig) -> Self {
        Self::build(cfg, true)
    }

    /// A node of the initial cluster whose home records are not created yet, for a restore
    /// ([`Node::restore_record`], then [`Node::finish_restore`], before it serves anything):
    /// zero-initialising a table only to overwrite it doubled the cost of a large restore
    /// (every key inserted and then overwritten; measured in docs/reliability.md, "Speed").
    pub fn unfilled(cfg: NodeConfig) -> Self {
        Self::build_with(cfg, true, false)
    }

    /// A node of the initial cluster (`member`: with its home keys and records) or one that
    /// joins later (empty, see [`Node::joining`]).
    pub(crate) fn build(cfg: NodeConfig, member: bool) -> Self {
        Self::build_with(cfg, member, true)
    }

    /// [`Node::build`], with `fill`: whether a member's home records are created (zeros).
    fn build_with(cfg: NodeConfig, member: bool, fill: bool) -> Self {
        let dir = Directory::new(cfg.space.num_keys(), cfg.num_nodes, cfg.partitioning);
        let store = Arc::new(Store::new(cfg.space.clone()));
        let replicas = Replicas::new(cfg.replication.as_ref(), cfg.id, &dir, &cfg.space);
        if member && fill && !cfg.space.is_sparse() {
            let mut zeros = Vec::new();
            for key in dir.keys_of(cfg.id) {
                if !replicas.contains(key) {
                    zeros.resize(cfg.space.record_len(key), 0.0);
                    store.insert(key, &zeros);
                }
            }
        }
        for &key in replicas.keys() {
            assert!(
                cfg.space.contains(key),
                "replicated key {key} is outside the key space (validated by the front ends)"
            );
            store.insert_replica(key, &vec![0.0; cfg.space.len(key)]);
        }
        let samplers = NodeSamplers::new(&cfg.samplers, &cfg.space, cfg.seed, cfg.id)
            .unwrap_or_else(|err| panic!("{err} (validated by the front ends)"));
        let records = dir
            .buckets_of(cfg.id)
            .filter(|_| member)
            .map(|b| (b, BucketRecords::new(cfg.id)))
            .collect();
        Self {
            lost: BTreeSet::new(),
            lost_order: Vec::new(),
            dir,
            records,
            moves: HomeMoves::default(),
            moving_in: 0,
            clock: Time::default(),
            latency: OpLatency::default(),
            timers: Timers::default(),
            policy: cfg.policy.build(cfg.seed),
            store,
            counters: Arc::default(),
            next_op: 1,
            pending: HashMap::default(),
            outbox: VecDeque::new(),
            completions: VecDeque::new(),
            barriers: Barriers::default(),
            cut: Default::default(),
            warnings: VecDeque::new(),
            transit: HashMap::default(),
            cache: HashMap::default(),
            replicas,
            shares: Shares::new(cfg.intent_techniques, cfg.share_sync_ns),
            interest: Arc::new(Interest::new(&cfg.space)),
            load: Load::new(cfg.load),
            balance: Balance::new(cfg.balancer.filter(|_| cfg.load.is_some())),
            membership: Membership::default(),
            trace: None,
            samplers: Arc::new(samplers),
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

    /// The samplers, which worker threads use through their front ends.
    pub fn samplers(&self) -> &Arc<NodeSamplers> {
        &self.samplers
    }

    /// How many intents of this node's workers want each key now.
    pub fn interest(&self) -> &Arc<Interest> {
        &self.interest
    }

    /// Starts recording every key that arrives here (see [`crate::trace`]).
    pub fn trace_allocation(&mut self) {
        self.trace.get_or_insert_with(Default::default);
    }

    /// The allocation events recorded since the last call and how many were dropped at the
    /// limit (none if the trace is off).
    pub fn take_trace(&mut self) -> (Vec<crate::trace::TraceEvent>, u64) {
        self.trace
            .as_mut()
            .map(crate::trace::Trace::take)
            .unwrap_or_default()
    }

    /// Records `key` arriving here from `from` (trace on only).
    pub(crate) fn traced(
        &mut self,
        key: Key,
        from: NodeId,
        now: Time,
        change: crate::trace::Change,
    ) {
        if let Some(trace) = &mut self.trace {
            trace.record(crate::trace::TraceEvent {
                key,
                from,
                to: self.cfg.id,
                at: now,
                change,
            });
        }
    }

    /// Latency histograms of this node's pulls and pushes that needed messages.
    pub fn op_latency(&self) -> &OpLatency {
        &self.latency
    }

    /// The node's counters (shared with the shell, which adds transport figures).
    pub fn counters(&self) -> &Arc<NodeCounters> {
        &self.counters
    }

    /// The placement policy in force.
    pub fn policy(&self) -> &dyn Policy {
        self.policy.as_ref()
    }

    /// This node's directory (its view of key → home, members and coordinator).
    pub fn directory(&self) -> &Directory {
        &self.dir
    }

    /// The current owner of `key` as recorded here, if this node is its home.
    pub fn recorded_owner(&self, key: Key) -> Option<NodeId> {
        self.records
            .get(&self.dir.bucket(key))
            .map(|records| records.owner(key))
    }

    /// Residency of `key`'s owned copy here, creating the key first if this node is its
    /// creator and it does not exist yet (sparse key spaces). The creator keeps the key's state
    /// word from then on, even once the key moves away, so "no state word at the creator" means
    /// exactly "never created" and a key is created once in the whole cluster.
    pub(crate) fn residency(&self, key: Key) -> Residency {
        let residency = self.store.residency(key);
        if residency == Residency::Remote
            && self.cfg.space.is_sparse()
            && !self.store.is_known(key)
            && self.dir.creator(self.dir.bucket(key)) == self.cfg.id
        {
            self.store
                .insert(key, &vec![0.0; self.cfg.space.record_len(key)]);
            add(&self.counters.keys_created, 1);
            return Residency::Local;
        }
        residency
    }

    /// Where a worker's access to `key` goes.
    pub(crate) fn route(&mut self, key: Key) -> Route {
        if self.replicas.contains(key) {
            // Read and added to in this node's replica (a `set` goes to the hub instead).
            return Route::Local;
        }
        if self.moving_in > 0 && self.store.residency(key) != Residency::Local {
            // This node's own accesses wait behind the frames it sent by the old table, which
            // come back through the old home (see `home_move.rs`); keys in transit here too,
            // since their landing waits as well. (Checked before a sparse key is created: a
            // bucket whose keys are still coming must not get a fresh one here.)
            let bucket = self.dir.bucket(key);
            if self.records.get(&bucket).is_some_and(|r| !r.is_live()) {
                return Route::Held(bucket);
            }
        }
        match self.residency(key) {
            Residency::Local => Route::Local,
            Residency::InTransit => Route::Transit,
            Residency::Remote => {
                // At the key's home the owner record is exact; hints help elsewhere only.
                if self.dir.home(key) != self.cfg.id
                    && !self.shares.left.is_empty()
                    && let Some(&owner) = self.shares.left.get(&key)
                    && self.dir.is_member(owner)
                {
                    return Route::Remote(owner);
                }
                if self.policy.location_caches() && self.dir.home(key) != self.cfg.id {
                    if let Some(&owner) = self.cache.get(&key) {
                        if self.dir.is_member(owner) {
                            add(&self.counters.cache_hits, 1);
                            return Route::Remote(owner);
                        }
                        self.cache.remove(&key);
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
        let bucket = self.dir.bucket(key);
        match self.records.get(&bucket) {
            Some(records) => records.owner(key),
            None => self.dir.bucket_home(bucket),
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
                issued: self.clock,
                forwarded: false,
            },
        );
        op
    }

    /// The members other than this node that are not lost.
    pub(crate) fn live_peers(&self) -> Vec<NodeId> {
        let me = self.cfg.id;
        self.dir
            .members()
            .iter()
            .copied()
            .filter(|&n| n != me && !self.lost.contains(&n))
            .collect()
    }

    /// The peer whose loss explains failures: the first one lost without a goodbye, else the
    /// first one that left (a survivor that left cleanly after a crash is not the culprit).
    pub(crate) fn first_lost(&self) -> Option<NodeId> {
        self.lost_order
            .iter()
            .find(|(_, departed)| !departed)
            .or(self.lost_order.first())
            .map(|&(peer, _)| peer)
    }

    /// Whether accesses that need another node must fail at once: a peer is lost and keys may
    /// have been on it or a request forwarded through it (dynamic allocation, or any home
    /// moved), or the destination itself is lost.
    pub(crate) fn unreachable(&self, dest: NodeId) -> Option<NodeId> {
        if self.lost.contains(&dest) {
            return Some(dest);
        }
        if self.keys_may_be_anywhere() {
            self.first_lost()
        } else {
            None
        }
    }

    /// Whether a key may be held, or a request forwarded, elsewhere than its first home: keys
    /// move under the policy, or a bucket's home moved. After a peer is lost, any remote access
    /// may then depend on it.
    pub(crate) fn keys_may_be_anywhere(&self) -> bool {
        self.policy.keys_move() || self.dir.epoch() > 0
    }

    /// Queues `frame` for `dest`, stamped with this node's epoch unless it names its own.
    pub(crate) fn send(&mut self, dest: NodeId, mut frame: Frame) {
        if frame.header.epoch == 0 {
            frame.header.epoch = self.dir.epoch();
        }
        self.timers.sent(dest, self.clock);
        self.outbox.push_back((dest, frame));
    }

    /// Notes the time of an input (inputs may come from several threads with clocks read just
    /// before taking the node lock, so time only moves forward here).
    pub(crate) fn tick(&mut self, now: Time) {
        self.clock = self.clock.max(now);
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
        self.tick(now);
        add(&self.counters.remote_pull_ops, 1);
        let op = self.new_op(worker, OpKind::Pull, keys.len(), out_offsets.to_vec());
        self.pending.get_mut(&op).expect("just created").keys = keys.to_vec();
        let mut batches = Batches::new();
        let mut held: BTreeMap<u32, Batch> = BTreeMap::new();
        let mut here = Batch::default();
        let mut value = Vec::new();
        let me = self.cfg.id;
        for (pos, &key) in keys.iter().enumerate() {
            let pos = pos as u32;
            match self.route(key) {
                Route::Local if self.cfg.fast_local_access => {
                    value.resize(self.cfg.space.len(key), 0.0);
                    self.store.pull_local(key, &mut value);
                    here.push(key, pos, &value);
                }
                Route::Local => batches.entry(me).or_default().push(key, pos, &[]),
                Route::Transit => self.queue_local(now, key, Queued::LocalPull { op, pos }),
                Route::Remote(dest) => batches.entry(dest).or_default().push(key, pos, &[]),
                Route::Held(bucket) => held.entry(bucket).or_default().push(key, pos, &[]),
            }
        }
        if !here.keys.is_empty() {
            let reply = here.into_reply(Kind::PullReply, me, ReqId(op));
            self.accept_pull_answer(op, reply);
        }
        self.send_batches(op, Kind::Pull, UpdateMode::Add, batches);
        for (bucket, batch) in held {
            let frame = batch.into_request(Kind::Pull, me, ReqId(op), 0, UpdateMode::Add);
            self.hold(now, bucket, me, frame);
        }
        self.settle(op);
        ReqId(op)
    }

    /// Issues a push (`mode` add, set or gradient) of `values` for `keys` (validated by the
    /// caller); key `i`'s update is at `values[offsets[i]..]`. Gradients that cannot be applied
    /// (no optimizer; a replicated key under a stateful one) fail the operation.
    pub fn issue_push(
        &mut self,
        now: Time,
        worker: WorkerId,
        keys: &[Key],
        values: &[f32],
        offsets: &[usize],
        mode: UpdateMode,
    ) -> ReqId {
        self.tick(now);
        add(&self.counters.remote_push_ops, 1);
        let op = self.new_op(worker, OpKind::Push, keys.len(), Vec::new());
        let mut batches = Batches::new();
        let mut held: BTreeMap<u32, Batch> = BTreeMap::new();
        let me = self.cfg.id;
        for (pos, (&key, &offset)) in keys.iter().zip(offsets).enumerate() {
            let pos = pos as u32;
            let update = &values[offset..offset + self.cfg.space.len(key)];
            if mode == UpdateMode::Gradient
                && let Some(err) = self.gradient_refused(key)
            {
                self.answer(op, pos);
                self.fail(op, OpError::Access(err));
                continue;
            }
            if mode == UpdateMode::Set && self.replicas.contains(key) {
                let hub = self.hub(key);
                if hub == me {
                    self.set_primary(me, &[key], update);
                    self.answer(op, pos);
                } else {
                    batches.entry(hub).or_default().push(key, pos, update);
                }
                continue;
            }
            match self.route(key) {
                Route::Local if self.cfg.fast_local_access => {
                    self.store.push_local(key, update, mode);
                    self.answer(op, pos);
                }
                Route::Local => batches.entry(me).or_default().push(key, pos, update),
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
                Route::Remote(dest) => batches.entry(dest).or_default().push(key, pos, update),
                Route::Held(bucket) => held.entry(bucket).or_default().push(key, pos, update),
            }
        }
        self.send_batches(op, Kind::Push, mode, batches);
        for (bucket, batch) in held {
            let frame = batch.into_request(Kind::Push, me, ReqId(op), 0, mode);
            self.hold(now, bucket, me, frame);
        }
        self.settle(op);
        ReqId(op)
    }

    /// Why a gradient for `key` cannot be applied: no optimizer, or a replicated key under an
    /// optimizer with per-key state (that state would have to live in every replica).
    fn gradient_refused(&self, key: Key) -> Option<AccessError> {
        match self.cfg.space.optimizer() {
            None => Some(AccessError::NoOptimizer),
            Some(opt) if !opt.is_linear() && self.replicas.contains(key) => {
                Some(AccessError::OptimizerOnReplica {
                    key,
                    optimizer: opt.name(),
                })
            }
            Some(_) => None,
        }
    }

    /// Sends one request frame per non-empty batch, or fails its keys if the destination is
    /// unreachable.
    pub(crate) fn send_batches(&mut self, op: u64, kind: Kind, mode: UpdateMode, batches: Batches) {
        for (dest, batch) in batches {
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
            let frame = batch.into_request(kind, self.cfg.id, ReqId(op), 0, mode);
            if let Some(p) = self.pending.get_mut(&op) {
                p.first_hops.push(dest);
            }
            self.send(dest, frame);
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
                self.warn(Warning::Relocation {
                    from: None,
                    key,
                    what: "in transit without a record",
                });
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
            if matches!(p.kind, OpKind::Pull | OpKind::Push) {
                self.note_completed_op();
                let op = if p.kind == OpKind::Pull {
                    LatencyOp::Pull
                } else {
                    LatencyOp::Push
                };
                let path = if p.forwarded {
                    LatencyPath::Forwarded
                } else {
                    LatencyPath::Owner
                };
                let ns = self.clock.0.saturating_sub(p.issued.0);
                self.latency.observe(op, path, ns);
            }
            let result = match (p.error, p.kind) {
                (Some(err), _) => Err(err),
                (None, OpKind::Pull) => Ok(Output::Pulled(p.parts)),
                (None, _) => Ok(Output::Done),
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
            // A node that left has no say about the members' liveness.
            Msg::PeerLost { .. } if !self.dir.is_member(from) => {}
            Msg::PeerLost { peer } => {
                if self.dir.is_member(peer) {
                    self.handle_peer_lost(now, peer);
                } else {
                    self.warn(Warning::UnknownSender { from: peer });
                }
            }
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
            Msg::LoadReport { ops, peers, values } => {
                self.handle_load_report(from, ops, peers, values)
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

    fn lose_peer(&mut self, now: Time, peer: NodeId, departed: bool) {
        if !self.dir.is_member(peer) || self.lost.contains(&peer) || peer == self.cfg.id {
            return;
        }
        self.tick(now);
        self.lost.insert(peer);
        self.lost_order.push((peer, departed));
        self.timers.forget(peer);
        self.fail_pending_after_loss(peer, self.keys_may_be_anywhere());
        self.home_moves_lose_peer(now, peer);
        self.membership_lose_peer(now, peer);
        if !departed {
            // Its replicas' deltas are gone with it; keys waiting for its leave go on.
            self.forget_sharer(peer);
        }
        if departed || !self.is_member() {
            // A node that left (or is not admitted yet) tells nobody: it is no member of theirs.
            return;
        }
        self.fail_barriers(peer);
        self.fail_cut();
        // Tell every other node, so that no one waits for a barrier or a key that depends on
        // the lost node without knowing it (the loss may be of one link only).
        let others: Vec<NodeId> = self
            .dir
            .members()
            .iter()
            .copied()
            .filter(|&other| other != self.cfg.id && !self.lost.contains(&other))
            .collect();
        for other in others {
            let notice = encode::control(Kind::PeerLost, self.cfg.id, u64::from(peer.0));
            self.send(other, notice);
        }
    }

    /// Fails the pending operations that depend on lost `peer`: those whose frames went to it
    /// first, or with `anywhere` (keys may be anywhere) every remote one.
    fn fail_pending_after_loss(&mut self, peer: NodeId, anywhere: bool) {
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
        for op in doomed {
            let p = self.pending.get_mut(&op).expect("collected above");
            p.remaining = 0;
            p.error.get_or_insert(OpError::PeerGone { peer });
            self.settle(op);
        }
    }

    /// This node learnt of its first home move (its table's epoch left 0) after a peer was
    /// lost: operations issued when no request was ever forwarded may now be on their way
    /// through the lost peer, so they fail as they would have, had the move been known then.
    pub(crate) fn note_first_move(&mut self, epoch_before: u32) {
        if epoch_before == 0
            && self.dir.epoch() > 0
            && !self.policy.keys_move()
            && let Some(peer) = self.first_lost()
        {
            self.fail_pending_after_loss(peer, true);
        }
    }

    /// Whether `peer` has been reported lost.
    pub fn is_lost(&self, peer: NodeId) -> bool {
        self.lost.contains(&peer)
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

    /// Next diagnostic for the shell to log.
    #[must_use]
    pub fn poll_warning(&mut self) -> Option<Warning> {
        self.warnings.pop_front()
    }

    /// Records a diagnostic (and counts it if it is an anomaly).
    pub(crate) fn warn(&mut self, warning: Warning) {
        if warning.is_anomaly() {
            add(&self.counters.anomalies, 1);
        }
        self.warnings.push_back(warning);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, nodes: u32) -> Node {
        let space = KeySpace::uniform(6, 1).unwrap();
        Node::new(NodeConfig::new(
            NodeId(id),
            nodes,
            1,
            space,
            Partitioning::Range,
        ))
    }

    /// The error of an operation after losses names the peer that was lost, not one that left
    /// cleanly afterwards (or before).
    #[test]
    fn failures_name_the_peer_lost_without_a_goodbye() {
        for departed_first in [false, true] {
            let mut n = node(0, 3);
            if departed_first {
                n.handle_peer_departed(Time(1), NodeId(1));
                n.handle_peer_lost(Time(2), NodeId(2));
            } else {
                n.handle_peer_lost(Time(1), NodeId(2));
                n.handle_peer_departed(Time(2), NodeId(1));
            }
            let req = n.issue_node_barrier(Time(3), WorkerId(0));
            let done = std::iter::from_fn(|| n.poll_completion())
                .find(|c| c.req == req)
                .expect("the barrier completes at once");
            assert!(
                matches!(done.result, Err(OpError::PeerGone { peer: NodeId(2) })),
                "departed first: {departed_first}: {:?}",
                done.result
            );
        }
    }

    #[test]
    fn a_clean_departure_alone_is_named_when_nothing_was_lost() {
        let mut n = node(0, 2);
        n.handle_peer_departed(Time(1), NodeId(1));
        let req = n.issue_pull(Time(2), WorkerId(0), &[5], &[0]);
        let done = std::iter::from_fn(|| n.poll_completion())
            .find(|c| c.req == req)
            .unwrap();
        assert!(matches!(
            done.result,
            Err(OpError::PeerGone { peer: NodeId(1) })
        ));
    }
}
