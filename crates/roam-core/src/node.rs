//! The node state machine: routes accesses, serves and forwards peers' requests, relocates keys,
//! runs barriers.
//!
//! `Node` is sans-IO. Inputs are the `issue_*` calls of local workers (for keys the fast path
//! could not serve) and the `handle_*` calls of the shell (frames received, peers lost: see
//! `dispatch.rs`). Outputs are drained with `poll_transmit` (frames to send, in order, per
//! destination) and then `poll_completion` (finished operations for the shell to hand to
//! waiting workers).
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
//! - A request from a peer is decoded ([`Msg`](crate::msg::Msg)) and validated in full (range, lengths,
//!   positions) before any parameter is touched; an invalid one is rejected with a
//!   [`Msg::Reject`](crate::msg::Msg::Reject) naming the culprit key.
//! - Per-destination state is keyed by node id from the directory's member set; nothing is
//!   sized by a node count.
//! - Frames for one destination leave in the order they were produced; the protocol relies on
//!   per-link FIFO delivery.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use crate::balance::{Balance, Balancer};
use crate::directory::{Directory, Partitioning};
use crate::error::OpError;
use crate::home_move::HomeMoves;
use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::intent::IntentTiming;
use crate::interest::Interest;
use crate::keyspace::KeySpace;
use crate::latency::OpLatency;
use crate::liveness::{Liveness, Timers};
use crate::load::{Load, LoadWatch};
use crate::membership::Membership;
use crate::placement::BucketRecords;
use crate::policy::{Policy, PolicyKind};
use crate::relocate::Transit;
use crate::replica::{Replicas, Replication};
use crate::sampling::{NodeSamplers, SamplerSpec};
use crate::share::{IntentTechniques, ShareSync, Shares};
use crate::stats::{NodeCounters, add};
use crate::store::{Residency, Store};
use crate::warning::Warning;
use crate::wire::Frame;

pub(crate) use crate::barrier::Barriers;
pub(crate) use crate::batch::{Batch, Batches, SpareBatches};

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
    /// Whether a node keeps its interest in a key past its last short intent on it, for as
    /// long as that pays (`intent/linger.rs`; off: the ablation, interest ends with the intent).
    pub intent_linger: bool,
    /// When the sync rounds of keys shared by intent run.
    pub share_sync: ShareSync,
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
            intent_linger: true,
            share_sync: ShareSync::default(),
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
    /// Re-issued after a loss (pulls, `peer_loss.rs`): answers to positions answered already
    /// are dropped, not failures.
    pub(crate) reissued: bool,
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
    /// This node is the key's new home and the bucket's move is completing: hold the access
    /// until it is (see `home_move.rs`).
    Held(u32),
    /// A dynamic space's id without a row that may not get one now (`dynamic.rs`): a pull
    /// reads the initializer's value, an update is dropped.
    Unadmitted,
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
    pub(crate) lost_order: Vec<(NodeId, bool)>,
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
    /// Emptied batches of sent frames, reused by the next ones (`batch.rs`).
    pub(crate) spare: SpareBatches,
    /// Keys lost with a peer while on their way here, and the peer (`peer_loss.rs`); each stays
    /// in transit in the store.
    pub(crate) lost_keys: BTreeMap<Key, NodeId>,
    /// Flushes after losses, and operations whose late answers are dropped (`loss_flush.rs`).
    pub(crate) after_loss: crate::loss_flush::AfterLoss,
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
    /// Admission and eviction of a dynamic key space (`dynamic.rs`).
    pub(crate) dynamic: crate::dynamic::DynamicState,
}

impl Node {
    /// A node with its home keys in its store, with the space's initial records (the
    /// initializer's values, zeros by default; in a sparse key space, keys are created on
    /// first use instead; see [`Node::residency`]).
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

    /// [`Node::build`], with `fill`: whether a member's home records are created (initial
    /// records).
    fn build_with(cfg: NodeConfig, member: bool, fill: bool) -> Self {
        let dir = Directory::new(cfg.space.num_keys(), cfg.num_nodes, cfg.partitioning);
        let store = Arc::new(Store::new(cfg.space.clone()));
        let replicas = Replicas::new(cfg.replication.as_ref(), cfg.id, &dir, &cfg.space);
        if member && fill && !cfg.space.is_sparse() {
            let init = *cfg.space.initializer();
            let mut record = Vec::new();
            for key in dir.keys_of(cfg.id) {
                if !replicas.contains(key) {
                    record.clear();
                    record.resize(cfg.space.record_len(key), 0.0);
                    init.fill(key, &mut record[..cfg.space.len(key)]);
                    store.insert(key, &record);
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
            spare: SpareBatches::default(),
            lost_keys: BTreeMap::new(),
            after_loss: Default::default(),
            cache: HashMap::default(),
            replicas,
            shares: Shares::new(cfg.intent_techniques, cfg.share_sync),
            interest: Arc::new(Interest::new(&cfg.space)),
            load: Load::new(cfg.load),
            balance: Balance::new(cfg.balancer.filter(|_| cfg.load.is_some())),
            membership: Membership::default(),
            trace: None,
            dynamic: crate::dynamic::DynamicState::new(cfg.space.dynamic_policies()),
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

    /// Residency of `key`'s owned copy here, creating the key first (with the space's
    /// initializer) if this node is its creator and it does not exist yet (sparse key spaces).
    /// The creator keeps the key's state word from then on, even once the key moves away, so
    /// "no state word at the creator" means exactly "never created" and a key is created once
    /// in the whole cluster; a row evicted at its creator (`dynamic.rs`) is marked GONE in that
    /// word, which means "not created" again.
    pub(crate) fn residency(&mut self, key: Key) -> Residency {
        let residency = self.store.residency(key);
        if residency == Residency::Remote
            && self.cfg.space.is_sparse()
            && !self.store.is_created(key)
            && self.dir.creator(self.dir.bucket(key)) == self.cfg.id
        {
            // Under a row budget, room first (a relocation or share creating the row has not
            // asked admission; if nothing can be evicted, the row is made anyway: see
            // `dynamic.rs`).
            let room = self.make_room_for_one(key);
            // From its spilled record if it has one (`spill.rs`), else the initializer's.
            let record = self.new_record(key);
            self.store.insert(key, &record);
            add(&self.counters.keys_created, 1);
            self.dynamic.may_evict_again();
            if !room {
                // Not the new row itself: its caller serves, shares or hands it over next.
                let pinned = self.dynamic.pinned.insert(key);
                self.made_without_room(key);
                if pinned {
                    self.dynamic.pinned.remove(&key);
                }
            }
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
        if self.unadmitted(key) {
            return Route::Unadmitted;
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
                    && !self.lost.contains(&owner)
                {
                    return Route::Remote(owner);
                }
                if self.policy.location_caches() && self.dir.home(key) != self.cfg.id {
                    if let Some(&owner) = self.cache.get(&key) {
                        if self.dir.is_member(owner) && !self.lost.contains(&owner) {
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
                reissued: false,
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
        // Each input starts here: rows the last one made may go again (`dynamic.rs`).
        self.dynamic.unpin();
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
