//! The event loop: nodes, links and workers advanced one seeded event at a time.
//!
//! An *event* is the delivery of the head entry of a link or the next op of a ready worker.
//! [`Sim::step`] advances virtual time to the earliest ready event if none is ready now, then
//! runs one of the ready events chosen by the RNG. Frame delays are random, so the interleaving
//! of links and workers is driven by the seed; FIFO order per link is kept by [`crate::net`].
//!
//! Invariants:
//! - The run is a function of the config and the calls made: one `ChaCha8Rng`, no wall clock,
//!   no iteration over hash maps (completions drained together are ordered by worker and request
//!   before they are handed out, so even the order the core emits them in does not matter).
//! - After every input to a node the shell protocol is followed exactly: drain transmits, then
//!   completions, then warnings.
//! - A crashed node receives nothing and runs no worker; what it had sent before crashing is
//!   still delivered, followed by the end of its connections.

use std::fmt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam_core::stats::add;
use roam_core::wire::{self, Frame};
use roam_core::{
    Completion, Key, Node, NodeConfig, NodeId, OpError, PolicyKind, ReqId, Residency, Time,
    UpdateMode,
};

use crate::config::SimConfig;
use crate::history::{Fault, History, OpKind, OpRecord, Outcome, Stamp};
use crate::net::{Link, LinkStats, Payload};
use crate::trace::{Fnv128, Trace};
use crate::worker::{Blocked, Op, Outstanding, Worker, WorkerRef};

/// A diagnostic emitted by a node's `poll_warning` (or by the simulated transport).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// When.
    pub at: Time,
    /// The node that emitted it.
    pub node: NodeId,
    /// The message.
    pub message: String,
    /// The core's typed warning (`None` for the simulated transport's own).
    pub core: Option<roam_core::Warning>,
}

/// Why a run did not finish normally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// [`Sim::run_until_idle`] reached its step bound with events still pending.
    StepLimit {
        /// The run's seed.
        seed: u64,
        /// Steps taken by the call.
        steps: u64,
        /// Virtual time reached.
        now: Time,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StepLimit { seed, steps, now } => write!(
                f,
                "simulation did not quiesce within {steps} steps (virtual time {} ns); \
                 replay with ROAM_SIM_SEED={seed}",
                now.0
            ),
        }
    }
}

impl std::error::Error for SimError {}

/// Hook that may rewrite the wire bytes of a frame in flight from `from` to `to`.
type Tamper = Box<dyn FnMut(NodeId, NodeId, &mut Vec<u8>)>;

struct SimNode {
    node: Node,
    crashed: bool,
    workers: Vec<Worker>,
}

/// How a worker goes on after issuing an op.
#[derive(Clone, Copy, Debug)]
struct Pace {
    /// Block until the op completes (a synchronous op).
    wait: bool,
    /// Pause before the next op once the worker may go on.
    think: u64,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Link(usize),
    Worker(usize, usize),
    /// A node's timers are due (`Node::poll_timeout`).
    Timer(usize),
}

/// An event that can run next, for callers that pick the interleaving themselves
/// ([`Sim::choices`], [`Sim::step_choice`]; the exhaustive explorer of [`crate::explore`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// Deliver the head entry of link `from -> to`.
    Deliver {
        /// Sending node.
        from: NodeId,
        /// Receiving node.
        to: NodeId,
    },
    /// Run the next op of this worker.
    Run(WorkerRef),
    /// Run this node's due timers.
    Timer(NodeId),
}

const TAG_FRAME: u8 = 1;
const TAG_CLOSE: u8 = 2;
const TAG_INVOKE: u8 = 3;
const TAG_RETURN: u8 = 4;
const TAG_FAULT: u8 = 5;
const TAG_TIMER: u8 = 6;

/// A simulated cluster. See the module docs.
pub struct Sim {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    now: Time,
    seq: u64,
    steps: u64,
    nodes: Vec<SimNode>,
    /// Link `(from, to)` is at `from * nodes + to`.
    links: Vec<Link>,
    history: History,
    warnings: Vec<Warning>,
    trace: Trace,
    /// Per node, a hash of every input it received, in order (a node is a deterministic
    /// function of its inputs, so equal hashes mean equal node states).
    inputs: Vec<Fnv128>,
    /// Hash of the invocations and returns of the history, in order, with outcomes.
    history_order: Fnv128,
    tamper: Option<Tamper>,
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.cfg.seed)
            .field("now", &self.now)
            .field("steps", &self.steps)
            .field("ops", &self.history.ops().len())
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// A cluster at time zero with every node's home keys zero-initialised and no scripts.
    pub fn new(cfg: SimConfig) -> Self {
        assert!(
            cfg.nodes > 0 && cfg.workers_per_node > 0,
            "a cluster needs nodes and workers"
        );
        let nodes = (0..cfg.nodes)
            .map(|id| SimNode {
                node: Node::new(NodeConfig {
                    id: NodeId(id),
                    num_nodes: cfg.nodes,
                    workers_per_node: cfg.workers_per_node,
                    space: cfg.space.clone(),
                    partitioning: cfg.partitioning,
                    fast_local_access: cfg.fast_local_access,
                    policy: if cfg.dynamic {
                        PolicyKind::Lapse {
                            location_caches: cfg.location_caches,
                        }
                    } else {
                        PolicyKind::Static
                    },
                    seed: cfg.seed ^ u64::from(id),
                    liveness: cfg.liveness,
                }),
                crashed: false,
                workers: (0..cfg.workers_per_node)
                    .map(|w| Worker::new(WorkerRef::new(id, w)))
                    .collect(),
            })
            .collect();
        let mut nodes: Vec<SimNode> = nodes;
        for node in &mut nodes {
            // Every link is up from the start.
            node.node.start_liveness(Time(0));
        }
        let n = cfg.nodes as usize;
        Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            now: Time(0),
            seq: 0,
            steps: 0,
            nodes,
            links: (0..n * n).map(|_| Link::new()).collect(),
            history: History::new(cfg.space.clone()),
            warnings: Vec::new(),
            trace: Trace::default(),
            inputs: vec![Fnv128::default(); n],
            history_order: Fnv128::default(),
            tamper: None,
            cfg,
        }
    }

    // ----- inspection ------------------------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The seed of the run.
    pub fn seed(&self) -> u64 {
        self.cfg.seed
    }

    /// Current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Events run so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The protocol state machine of node `id` (counters, lost peers, store).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()].node
    }

    /// Whether node `id` was crashed.
    pub fn is_crashed(&self, id: NodeId) -> bool {
        self.nodes[id.index()].crashed
    }

    /// Every worker of the cluster, node by node.
    pub fn workers(&self) -> Vec<WorkerRef> {
        self.nodes
            .iter()
            .flat_map(|n| n.workers.iter().map(|w| w.id))
            .collect()
    }

    /// Workers of live nodes that still have script left or ops outstanding.
    pub fn unfinished_workers(&self) -> Vec<WorkerRef> {
        self.nodes
            .iter()
            .filter(|n| !n.crashed)
            .flat_map(|n| n.workers.iter().filter(|w| !w.is_done()).map(|w| w.id))
            .collect()
    }

    /// The history of every op issued so far.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Warnings from the nodes (and transport-level problems), in order.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Traffic of link `(from, to)`.
    pub fn link_stats(&self, from: NodeId, to: NodeId) -> LinkStats {
        self.links[self.link_index(from, to)].stats
    }

    /// Traffic summed over all links.
    pub fn net_stats(&self) -> LinkStats {
        self.links.iter().fold(LinkStats::default(), |mut acc, l| {
            acc.frames_sent += l.stats.frames_sent;
            acc.frames_delivered += l.stats.frames_delivered;
            acc.bytes_delivered += l.stats.bytes_delivered;
            acc.frames_dropped += l.stats.frames_dropped;
            acc
        })
    }

    /// Entries (frames and connection ends) queued on all links, including held ones.
    pub fn in_flight(&self) -> usize {
        self.links.iter().map(Link::len).sum()
    }

    /// Hash of everything observable so far (deliveries, losses, op invocations and returns),
    /// in order and with virtual times. Equal for two runs of the same seed and calls.
    pub fn trace_hash(&self) -> u64 {
        self.trace.timed.value()
    }

    /// Like [`Sim::trace_hash`] without the times: equal iff the interleaving was the same.
    pub fn order_hash(&self) -> u64 {
        self.trace.order.value()
    }

    /// The current value of `key`, read from the store of a live node that holds it (bypassing
    /// the protocol; for assertions).
    pub fn peek(&self, key: Key) -> Option<Vec<f32>> {
        let mut out = vec![0.0; self.cfg.space.len(key)];
        self.nodes
            .iter()
            .filter(|n| !n.crashed)
            .any(|n| n.node.store().pull_local(key, &mut out))
            .then_some(out)
    }

    /// The live nodes holding `key` right now (at most one: see [`Sim::check_single_copy`]).
    pub fn holders(&self, key: Key) -> Vec<NodeId> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.crashed && n.node.store().residency(key) == Residency::Local)
            .map(|(i, _)| NodeId(i as u32))
            .collect()
    }

    /// Checks that no key is held by more than one live node (a key's value exists in at most
    /// one store). Run after every step unless [`SimConfig::check_invariants`] is off.
    pub fn check_single_copy(&self) -> Result<(), String> {
        for key in 0..self.cfg.space.num_keys() {
            let holders = self.holders(key);
            if holders.len() > 1 {
                return Err(format!("key {key} is held by {holders:?} at once"));
            }
        }
        Ok(())
    }

    /// Checks the placement of a quiet, fault-free cluster: every key is held by exactly one
    /// node, no key is in transit, no op is pending, and every home node records the actual
    /// holder as the owner of its keys.
    pub fn check_quiescent_placement(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.node.keys_in_transit() != 0 || n.node.pending_ops() != 0 {
                return Err(format!(
                    "node {i} is not quiet: {} keys in transit, {} ops pending",
                    n.node.keys_in_transit(),
                    n.node.pending_ops()
                ));
            }
        }
        for key in 0..self.cfg.space.num_keys() {
            let holders = self.holders(key);
            let [holder] = holders[..] else {
                return Err(format!("key {key} is held by {holders:?}, not by one node"));
            };
            let home = self.cfg_home(key);
            let recorded = self.nodes[home.index()].node.recorded_owner(key);
            if recorded != Some(holder) {
                return Err(format!(
                    "key {key} is held by {holder} but its home {home} records {recorded:?}"
                ));
            }
        }
        Ok(())
    }

    fn cfg_home(&self, key: Key) -> NodeId {
        self.nodes[0].node.directory().home(key)
    }

    /// A key for the whole state of the run that matters for its future and for checks of its
    /// history: what every node received, in order, the faults, and the invocations and returns
    /// of the history, in order, with their outcomes. Two runs with equal keys continue alike
    /// and have histories that no checker can tell apart (only the relative order of history
    /// events and their values matter to checkers). Sound as a state key only when the run draws
    /// no random numbers any more (zero-width delay and think ranges, no loss), as in the
    /// exhaustive explorer.
    pub fn state_key(&self) -> u128 {
        let mut h = Fnv128::default();
        for input in &self.inputs {
            h.bytes(&input.value().to_le_bytes());
        }
        h.bytes(&self.history_order.value().to_le_bytes());
        h.value()
    }

    // ----- scripting -------------------------------------------------------------------------

    /// Appends `ops` to `worker`'s script; an idle worker starts on them at once.
    pub fn add_script(&mut self, worker: WorkerRef, ops: impl IntoIterator<Item = Op>) {
        let now = self.now;
        let w = &mut self.nodes[worker.node.index()].workers[worker.worker.index()];
        if w.script.is_empty() && w.blocked.is_none() {
            w.ready_at = w.ready_at.max(now);
        }
        w.script.extend(ops);
    }

    /// Installs a hook that may rewrite the bytes of every frame right before it is decoded by
    /// its receiver (to test the handling of corrupt or hostile peers).
    pub fn set_tamper(&mut self, tamper: impl FnMut(NodeId, NodeId, &mut Vec<u8>) + 'static) {
        self.tamper = Some(Box::new(tamper));
    }

    /// Removes the tamper hook.
    pub fn clear_tamper(&mut self) {
        self.tamper = None;
    }

    /// Queues `frame` on link `(from, to)` as if `from`'s node had sent it (it is not counted in
    /// `from`'s node counters). Dropped if the link is closed.
    pub fn inject(&mut self, from: NodeId, to: NodeId, frame: Frame) {
        let delay = self.delay();
        let idx = self.link_index(from, to);
        let link = &mut self.links[idx];
        if link.open && !self.nodes[to.index()].crashed {
            link.push(self.now, delay, Payload::Frame(frame));
        } else {
            link.stats.frames_dropped += 1;
        }
    }

    // ----- faults ----------------------------------------------------------------------------

    /// Holds both links between `a` and `b`: nothing on them is delivered (nor dropped) until
    /// [`Sim::heal`]. Frames sent meanwhile queue behind the held ones.
    pub fn partition(&mut self, a: NodeId, b: NodeId) {
        for idx in [self.link_index(a, b), self.link_index(b, a)] {
            self.links[idx].held = true;
        }
        self.fault(Fault::Partition(a, b));
    }

    /// Releases the links between `a` and `b`; held frames are delivered from now on, in order.
    pub fn heal(&mut self, a: NodeId, b: NodeId) {
        let now = self.now;
        for idx in [self.link_index(a, b), self.link_index(b, a)] {
            self.links[idx].release(now);
        }
        self.fault(Fault::Heal(a, b));
    }

    /// Breaks the connection between `a` and `b` (they stay up): everything in flight between
    /// them is lost, and each is told, after a link delay, that the other is gone.
    pub fn drop_link(&mut self, a: NodeId, b: NodeId) {
        assert_ne!(a, b, "a node's connection to itself cannot break");
        self.break_connection(a, b);
    }

    /// Stops node `id`: it processes nothing more and its workers stop where they are. Frames it
    /// already sent are still delivered, then every other node is told it is gone; frames in
    /// flight to it are lost.
    pub fn crash(&mut self, id: NodeId) {
        if self.nodes[id.index()].crashed {
            return;
        }
        self.nodes[id.index()].crashed = true;
        self.fault(Fault::Crash(id));
        for m in 0..self.cfg.nodes {
            let inbound = self.link_index(NodeId(m), id);
            self.links[inbound].purge();
            self.links[inbound].open = false;
            if m == id.0 {
                continue;
            }
            let outbound = self.link_index(id, NodeId(m));
            if self.links[outbound].open {
                self.links[outbound].open = false;
                if !self.nodes[m as usize].crashed {
                    let delay = self.delay();
                    self.links[outbound].push(self.now, delay, Payload::Close);
                }
            }
        }
    }

    /// Freezes node `id`: it stops running (no op, no timer, nothing it receives is handled)
    /// but, unlike [`Sim::crash`], no connection breaks, so its peers can only notice it by
    /// its silence (with [`SimConfig::liveness`](crate::SimConfig)).
    pub fn freeze(&mut self, id: NodeId) {
        if self.nodes[id.index()].crashed {
            return;
        }
        self.nodes[id.index()].crashed = true;
        self.fault(Fault::Crash(id));
        for m in 0..self.cfg.nodes {
            let inbound = self.link_index(NodeId(m), id);
            self.links[inbound].purge();
        }
    }

    // ----- running ---------------------------------------------------------------------------

    /// Runs one event: advances virtual time to the earliest ready event if none is ready now,
    /// then runs one ready event chosen by the RNG. Returns false, doing nothing, if no event is
    /// pending (held links do not count).
    pub fn step(&mut self) -> bool {
        let mut ready = self.ready_events();
        let Some(earliest) = ready.iter().map(|(t, _)| *t).min() else {
            return false;
        };
        self.now = self.now.max(earliest);
        let now = self.now;
        ready.retain(|(t, _)| *t <= now);
        let pick = if ready.len() == 1 {
            0
        } else {
            self.rng.random_range(0..ready.len())
        };
        self.run_event(ready[pick].1);
        true
    }

    /// Every event that could run next, whatever its ready time: the head of every link that is
    /// not held, and the next op of every worker of a live node that may go on.
    pub fn choices(&self) -> Vec<Choice> {
        let n = self.cfg.nodes as usize;
        self.ready_events()
            .into_iter()
            .map(|(_, e)| match e {
                Event::Link(idx) => Choice::Deliver {
                    from: NodeId((idx / n) as u32),
                    to: NodeId((idx % n) as u32),
                },
                Event::Worker(node, w) => Choice::Run(self.nodes[node].workers[w].id),
                Event::Timer(node) => Choice::Timer(NodeId(node as u32)),
            })
            .collect()
    }

    /// Runs `choice` (one of [`Sim::choices`]), advancing virtual time to its ready time if that
    /// is later. Draws no random number itself.
    ///
    /// # Panics
    /// If `choice` cannot run now.
    pub fn step_choice(&mut self, choice: Choice) {
        let n = self.cfg.nodes as usize;
        let (ready, event) = match choice {
            Choice::Deliver { from, to } => {
                let idx = self.link_index(from, to);
                (self.links[idx].head_ready(), Event::Link(idx))
            }
            Choice::Run(w) => {
                let node = &self.nodes[w.node.index()];
                let ready = if node.crashed {
                    None
                } else {
                    node.workers[w.worker.index()].next_event()
                };
                (ready, Event::Worker(w.node.index(), w.worker.index()))
            }
            Choice::Timer(id) => {
                let node = &self.nodes[id.index()];
                let ready = (!node.crashed).then(|| node.node.poll_timeout()).flatten();
                (ready, Event::Timer(id.index()))
            }
        };
        let Some(ready) = ready else {
            self.internal_error(format!("{choice:?} cannot run now ({n} nodes)"));
        };
        self.now = self.now.max(ready);
        self.run_event(event);
    }

    fn ready_events(&self) -> Vec<(Time, Event)> {
        let mut ready: Vec<(Time, Event)> = Vec::new();
        for (idx, link) in self.links.iter().enumerate() {
            if let Some(t) = link.head_ready() {
                ready.push((t, Event::Link(idx)));
            }
        }
        for (n, node) in self.nodes.iter().enumerate().filter(|(_, n)| !n.crashed) {
            for (w, worker) in node.workers.iter().enumerate() {
                if let Some(t) = worker.next_event() {
                    ready.push((t, Event::Worker(n, w)));
                }
            }
        }
        // Timers run while some worker has work left: they exist to unblock waiting workers,
        // and a run whose workers are done is idle whatever heartbeats would still go out.
        if !self.unfinished_workers().is_empty() {
            for (n, node) in self.nodes.iter().enumerate().filter(|(_, n)| !n.crashed) {
                if let Some(t) = node.node.poll_timeout() {
                    ready.push((t, Event::Timer(n)));
                }
            }
        }
        ready
    }

    fn run_event(&mut self, event: Event) {
        self.steps += 1;
        match event {
            Event::Link(idx) => self.deliver(idx),
            Event::Worker(n, w) => self.run_worker(n, w),
            Event::Timer(n) => self.run_timers(n),
        }
        if self.cfg.check_invariants
            && let Err(message) = self.check_single_copy()
        {
            self.internal_error(message);
        }
    }

    /// Runs node `n`'s due timers.
    fn run_timers(&mut self, n: usize) {
        let id = NodeId(n as u32);
        self.trace.event(self.now.0, TAG_TIMER, &[n as u64], &[]);
        self.inputs[n].bytes(&[TAG_TIMER]);
        self.inputs[n].u64(self.now.0);
        let before = self.lost_by(id);
        self.nodes[n].node.handle_timeout(self.now);
        self.note_losses(id, &before, None);
        self.drain(id);
    }

    /// Runs events until none is pending; fails if that takes more than
    /// [`SimConfig::max_steps`]. Returns the steps taken. Ops waiting on held links or crashed
    /// nodes may remain pending: see [`Sim::unfinished_workers`].
    pub fn run_until_idle(&mut self) -> Result<u64, SimError> {
        let start = self.steps;
        while self.step() {
            if self.steps - start >= self.cfg.max_steps {
                return Err(SimError::StepLimit {
                    seed: self.cfg.seed,
                    steps: self.steps - start,
                    now: self.now,
                });
            }
        }
        Ok(self.steps - start)
    }

    /// Runs at most `n` events; returns how many ran (fewer if the simulation became idle).
    pub fn run_steps(&mut self, n: u64) -> u64 {
        (0..n).take_while(|_| self.step()).count() as u64
    }

    // ----- network ---------------------------------------------------------------------------

    fn link_index(&self, from: NodeId, to: NodeId) -> usize {
        let n = self.cfg.nodes as usize;
        assert!(
            from.index() < n && to.index() < n,
            "no link {from} -> {to} in a {n}-node cluster"
        );
        from.index() * n + to.index()
    }

    fn delay(&mut self) -> u64 {
        draw(&mut self.rng, self.cfg.min_delay, self.cfg.max_delay)
    }

    fn stamp(&mut self) -> Stamp {
        self.seq += 1;
        Stamp {
            time: self.now,
            seq: self.seq,
        }
    }

    fn fault(&mut self, fault: Fault) {
        let at = self.stamp();
        let words: Vec<u64> = match &fault {
            Fault::Crash(a) => vec![0, u64::from(a.0)],
            Fault::LinkBroken(a, b) => vec![1, u64::from(a.0), u64::from(b.0)],
            Fault::Partition(a, b) => vec![2, u64::from(a.0), u64::from(b.0)],
            Fault::Heal(a, b) => vec![3, u64::from(a.0), u64::from(b.0)],
            Fault::ProtocolViolation { at, from, .. } => {
                vec![4, u64::from(at.0), u64::from(from.0)]
            }
            Fault::PeerLost { at, peer, via } => vec![
                5,
                u64::from(at.0),
                u64::from(peer.0),
                via.map_or(u64::MAX, |v| u64::from(v.0)),
            ],
        };
        self.trace.event(self.now.0, TAG_FAULT, &words, &[]);
        for input in &mut self.inputs {
            input.bytes(&[TAG_FAULT]);
            words.iter().for_each(|&w| input.u64(w));
        }
        self.history.fault(at, fault);
    }

    /// Breaks the connection between `a` and `b`: purges both directions and queues a `Close`
    /// towards each live end whose direction was still open.
    fn break_connection(&mut self, a: NodeId, b: NodeId) {
        let mut broke = false;
        for (x, y) in [(a, b), (b, a)] {
            let idx = self.link_index(x, y);
            if !self.links[idx].open {
                continue;
            }
            broke = true;
            self.links[idx].purge();
            self.links[idx].open = false;
            if !self.nodes[y.index()].crashed {
                let delay = self.delay();
                self.links[idx].push(self.now, delay, Payload::Close);
            }
        }
        if broke {
            self.fault(Fault::LinkBroken(a, b));
        }
    }

    /// Puts a frame produced by `from`'s node on its link.
    fn send(&mut self, from: NodeId, to: NodeId, frame: Frame) {
        let counters = self.nodes[from.index()].node.counters().clone();
        add(&counters.messages_sent, 1);
        add(&counters.bytes_sent, frame.wire_len() as u64);
        if to.0 >= self.cfg.nodes {
            let message = format!(
                "transport: frame {:?} to unknown {to} dropped",
                frame.header.kind
            );
            self.warnings.push(Warning {
                at: self.now,
                node: from,
                message,
                core: None,
            });
            return;
        }
        let idx = self.link_index(from, to);
        if !self.links[idx].open || self.nodes[to.index()].crashed {
            self.links[idx].stats.frames_dropped += 1;
            return;
        }
        if from != to
            && self.cfg.drop_probability > 0.0
            && self.rng.random_bool(self.cfg.drop_probability)
        {
            // TCP does not lose single frames: a loss is a broken connection.
            self.links[idx].stats.frames_sent += 1;
            self.break_connection(from, to);
            self.links[idx].stats.frames_dropped += 1;
            return;
        }
        let delay = self.delay();
        self.links[idx].push(self.now, delay, Payload::Frame(frame));
    }

    fn deliver(&mut self, idx: usize) {
        let n = self.cfg.nodes as usize;
        let (from, to) = (NodeId((idx / n) as u32), NodeId((idx % n) as u32));
        let entry = self.links[idx]
            .pop()
            .expect("the event was chosen from a non-empty link");
        if self.nodes[to.index()].crashed {
            return;
        }
        let frame = match entry.payload {
            Payload::Close => {
                self.trace.event(
                    self.now.0,
                    TAG_CLOSE,
                    &[u64::from(from.0), u64::from(to.0)],
                    &[],
                );
                self.inputs[to.index()].bytes(&[TAG_CLOSE]);
                self.inputs[to.index()].u64(u64::from(from.0));
                let before = self.lost_by(to);
                self.nodes[to.index()].node.handle_peer_lost(self.now, from);
                self.note_losses(to, &before, None);
                self.drain(to);
                return;
            }
            Payload::Frame(frame) => frame,
        };
        let mut bytes = frame.to_bytes();
        if let Some(tamper) = &mut self.tamper {
            tamper(from, to, &mut bytes);
        }
        let stats = &mut self.links[idx].stats;
        stats.frames_delivered += 1;
        stats.bytes_delivered += bytes.len() as u64;
        let counters = self.nodes[to.index()].node.counters().clone();
        add(&counters.messages_received, 1);
        add(&counters.bytes_received, bytes.len() as u64);
        self.trace.event(
            self.now.0,
            TAG_FRAME,
            &[u64::from(from.0), u64::from(to.0)],
            &bytes,
        );
        let reason = match wire::decode(&bytes, &self.cfg.limits) {
            Ok((frame, used)) if used == bytes.len() => {
                let input = &mut self.inputs[to.index()];
                input.bytes(&[TAG_FRAME]);
                input.u64(u64::from(from.0));
                input.bytes(&bytes);
                let before = self.lost_by(to);
                self.nodes[to.index()]
                    .node
                    .handle_frame(self.now, from, frame);
                self.note_losses(to, &before, Some(from));
                self.drain(to);
                return;
            }
            Ok((_, used)) => format!("{} trailing bytes after a frame", bytes.len() - used),
            Err(err) => err.to_string(),
        };
        // The receiving shell would close the connection on bytes it cannot parse.
        let message = format!("transport: undecodable bytes from {from}: {reason}");
        self.warnings.push(Warning {
            at: self.now,
            node: to,
            message,
            core: None,
        });
        self.fault(Fault::ProtocolViolation {
            at: to,
            from,
            reason,
        });
        if from != to {
            self.break_connection(from, to);
        }
    }

    fn lost_by(&self, id: NodeId) -> Vec<bool> {
        (0..self.cfg.nodes)
            .map(|p| self.nodes[id.index()].node.is_lost(NodeId(p)))
            .collect()
    }

    /// Records, before the node's outputs are drained, every peer that `id` started treating as
    /// lost during its last input.
    fn note_losses(&mut self, id: NodeId, before: &[bool], via: Option<NodeId>) {
        for (p, &was) in before.iter().enumerate() {
            let peer = NodeId(p as u32);
            if !was && self.nodes[id.index()].node.is_lost(peer) {
                self.fault(Fault::PeerLost { at: id, peer, via });
            }
        }
    }

    /// The shell protocol after every input to a node: transmits, then completions, then
    /// warnings.
    fn drain(&mut self, id: NodeId) {
        while let Some((to, frame)) = self.nodes[id.index()].node.poll_transmit() {
            self.send(id, to, frame);
        }
        let mut completions = Vec::new();
        while let Some(c) = self.nodes[id.index()].node.poll_completion() {
            completions.push(c);
        }
        // The order of completions drained together is not part of the core's contract.
        completions.sort_by_key(|c| (c.worker, c.req));
        for c in completions {
            self.complete(id, c);
        }
        while let Some(warning) = self.nodes[id.index()].node.poll_warning() {
            self.warnings.push(Warning {
                at: self.now,
                node: id,
                message: warning.to_string(),
                core: Some(warning),
            });
        }
    }

    // ----- workers ---------------------------------------------------------------------------

    fn complete(&mut self, id: NodeId, c: Completion) {
        let worker = c.worker.index();
        let Some(out) = self.nodes[id.index()]
            .workers
            .get_mut(worker)
            .and_then(|w| w.outstanding.remove(&c.req))
        else {
            self.internal_error(format!(
                "{id} completed unknown request {:?} of worker {}",
                c.req, c.worker.0
            ));
        };
        let outcome = match (c.result, self.history.ops()[out.record].kind) {
            (Ok(output), OpKind::Pull) => {
                let mut buf = out.out;
                for part in &output.into_parts() {
                    part.scatter(&self.cfg.space, &mut buf);
                }
                Outcome::Pulled(buf)
            }
            (Ok(_), _) => Outcome::Done,
            (Err(err), _) => Outcome::Failed(err),
        };
        self.finish_op(id.index(), worker, out.record, outcome);
    }

    /// Records the return of op `record` of a worker and unblocks the worker if it waited on it.
    fn finish_op(&mut self, n: usize, w: usize, record: usize, outcome: Outcome) {
        let at = self.stamp();
        let ok = u64::from(!matches!(outcome, Outcome::Failed(_)));
        self.trace.event(
            self.now.0,
            TAG_RETURN,
            &[n as u64, w as u64, record as u64, ok],
            &[],
        );
        let h = &mut self.history_order;
        h.bytes(&[TAG_RETURN]);
        h.u64(record as u64);
        h.bytes(format!("{outcome:?}").as_bytes());
        self.history.complete(record, at, outcome);
        let think = draw(&mut self.rng, self.cfg.min_think, self.cfg.max_think);
        let worker = &mut self.nodes[n].workers[w];
        let unblock = match worker.blocked {
            Some(Blocked::On(r)) => r == record,
            Some(Blocked::All) => worker.outstanding.is_empty(),
            None => false,
        };
        if unblock {
            worker.blocked = None;
            worker.ready_at = Time(self.now.0 + think);
        }
    }

    fn run_worker(&mut self, n: usize, w: usize) {
        let think = draw(&mut self.rng, self.cfg.min_think, self.cfg.max_think);
        let now = self.now;
        let worker = &mut self.nodes[n].workers[w];
        let op = worker
            .script
            .pop_front()
            .expect("ready workers have script left");
        let input = &mut self.inputs[n];
        input.bytes(&[TAG_INVOKE]);
        input.u64(w as u64);
        input.bytes(format!("{op:?}").as_bytes());
        match op {
            Op::Sleep(d) => worker.ready_at = Time(now.0 + d),
            Op::WaitAll => {
                if worker.outstanding.is_empty() {
                    worker.ready_at = Time(now.0 + think);
                } else {
                    worker.blocked = Some(Blocked::All);
                }
            }
            Op::Barrier => {
                let record = self.invoke(n, w, OpKind::Barrier, Vec::new(), Vec::new(), true);
                let wid = self.nodes[n].workers[w].id.worker;
                let req = self.nodes[n].node.issue_barrier(now, wid);
                let worker = &mut self.nodes[n].workers[w];
                worker.outstanding.insert(
                    req,
                    Outstanding {
                        record,
                        out: Vec::new(),
                    },
                );
                worker.blocked = Some(Blocked::On(record));
                self.drain(NodeId(n as u32));
            }
            Op::Pull { keys, wait } => self.issue_pull(n, w, keys, Pace { wait, think }),
            Op::Push { keys, vals, wait } => {
                self.issue_push(n, w, keys, vals, UpdateMode::Add, Pace { wait, think })
            }
            Op::Set { keys, vals, wait } => {
                self.issue_push(n, w, keys, vals, UpdateMode::Set, Pace { wait, think })
            }
            Op::Localize { keys, wait } => self.issue_localize(n, w, keys, Pace { wait, think }),
            Op::MoveHome { key, to, wait } => {
                self.issue_move_home(n, w, key, NodeId(to), Pace { wait, think })
            }
        }
    }

    fn invoke(
        &mut self,
        n: usize,
        w: usize,
        kind: OpKind,
        keys: Vec<Key>,
        input: Vec<f32>,
        sync: bool,
    ) -> usize {
        let invoke = self.stamp();
        let worker = &mut self.nodes[n].workers[w];
        let program_index = worker.issued;
        worker.issued += 1;
        let record = OpRecord {
            id: 0,
            worker: worker.id,
            program_index,
            kind,
            keys,
            input,
            sync,
            invoke,
            ret: None,
            outcome: Outcome::Pending,
        };
        let id = self.history.invoke(record);
        // Which worker's which op this record is: ids follow invocation order, so they alone
        // would not tell two histories apart.
        for word in [
            TAG_INVOKE as u64,
            n as u64,
            w as u64,
            program_index as u64,
            id as u64,
        ] {
            self.history_order.u64(word);
        }
        self.trace.event(
            self.now.0,
            TAG_INVOKE,
            &[n as u64, w as u64, id as u64, kind as u64],
            &[],
        );
        id
    }

    /// Ends an op that needed no message (all keys local, or invalid input): it returns now and
    /// the worker goes on after `think`.
    fn finish_locally(&mut self, n: usize, w: usize, record: usize, outcome: Outcome, think: u64) {
        self.finish_op(n, w, record, outcome);
        self.nodes[n].workers[w].ready_at = Time(self.now.0 + think);
    }

    /// Hands the op to the node: registers it, blocks the worker on it if synchronous, and
    /// drains the node (which may complete it at once).
    fn hand_off(
        &mut self,
        n: usize,
        w: usize,
        req: ReqId,
        record: usize,
        out: Vec<f32>,
        pace: Pace,
    ) {
        let now = self.now;
        let worker = &mut self.nodes[n].workers[w];
        worker.outstanding.insert(req, Outstanding { record, out });
        if pace.wait {
            worker.blocked = Some(Blocked::On(record));
        } else {
            worker.ready_at = Time(now.0 + pace.think);
        }
        self.drain(NodeId(n as u32));
    }

    fn issue_pull(&mut self, n: usize, w: usize, keys: Vec<Key>, pace: Pace) {
        let space = self.cfg.space.clone();
        let buf_len: usize = keys
            .iter()
            .filter(|&&k| k < space.num_keys())
            .map(|&k| space.len(k))
            .sum();
        let record = self.invoke(n, w, OpKind::Pull, keys.clone(), Vec::new(), pace.wait);
        if let Err(err) = space.check_batch(&keys, buf_len) {
            return self.finish_locally(
                n,
                w,
                record,
                Outcome::Failed(OpError::from(err)),
                pace.think,
            );
        }
        let mut out = vec![0.0; buf_len];
        let (mut remote, mut offsets) = (Vec::new(), Vec::new());
        let store = self.nodes[n].node.store().clone();
        let mut offset = 0;
        for &key in &keys {
            let len = space.len(key);
            if !(self.cfg.fast_local_access
                && store.pull_local(key, &mut out[offset..offset + len]))
            {
                remote.push(key);
                offsets.push(offset);
            }
            offset += len;
        }
        if remote.is_empty() {
            return self.finish_locally(n, w, record, Outcome::Pulled(out), pace.think);
        }
        let wid = self.nodes[n].workers[w].id.worker;
        let req = self.nodes[n]
            .node
            .issue_pull(self.now, wid, &remote, &offsets);
        self.hand_off(n, w, req, record, out, pace);
    }

    fn issue_push(
        &mut self,
        n: usize,
        w: usize,
        keys: Vec<Key>,
        vals: Vec<f32>,
        mode: UpdateMode,
        pace: Pace,
    ) {
        let space = self.cfg.space.clone();
        let kind = if mode == UpdateMode::Set {
            OpKind::Set
        } else {
            OpKind::Push
        };
        let record = self.invoke(n, w, kind, keys.clone(), vals.clone(), pace.wait);
        if let Err(err) = space.check_batch(&keys, vals.len()) {
            return self.finish_locally(
                n,
                w,
                record,
                Outcome::Failed(OpError::from(err)),
                pace.think,
            );
        }
        let (mut remote, mut offsets) = (Vec::new(), Vec::new());
        let store = self.nodes[n].node.store().clone();
        let mut offset = 0;
        for &key in &keys {
            let len = space.len(key);
            if !(self.cfg.fast_local_access
                && store.push_local(key, &vals[offset..offset + len], mode))
            {
                remote.push(key);
                offsets.push(offset);
            }
            offset += len;
        }
        if remote.is_empty() {
            return self.finish_locally(n, w, record, Outcome::Done, pace.think);
        }
        let wid = self.nodes[n].workers[w].id.worker;
        let req = self.nodes[n]
            .node
            .issue_push(self.now, wid, &remote, &vals, &offsets, mode);
        self.hand_off(n, w, req, record, Vec::new(), pace);
    }

    /// Like the real shell: a no-op unless allocation is dynamic and some key is not local,
    /// else every key is handed to the node.
    fn issue_localize(&mut self, n: usize, w: usize, keys: Vec<Key>, pace: Pace) {
        let space = self.cfg.space.clone();
        let record = self.invoke(n, w, OpKind::Localize, keys.clone(), Vec::new(), pace.wait);
        if let Some(&key) = keys.iter().find(|&&k| k >= space.num_keys()) {
            let err = roam_core::AccessError::KeyOutOfRange {
                key,
                num_keys: space.num_keys(),
            };
            return self.finish_locally(n, w, record, Outcome::Failed(err.into()), pace.think);
        }
        let store = self.nodes[n].node.store().clone();
        if !self.cfg.dynamic || keys.iter().all(|&k| store.residency(k) == Residency::Local) {
            return self.finish_locally(n, w, record, Outcome::Done, pace.think);
        }
        let wid = self.nodes[n].workers[w].id.worker;
        let req = self.nodes[n].node.issue_localize(self.now, wid, &keys);
        self.hand_off(n, w, req, record, Vec::new(), pace);
    }

    /// Moves the home of `key`'s bucket; the node validates the rest.
    fn issue_move_home(&mut self, n: usize, w: usize, key: Key, to: NodeId, pace: Pace) {
        let record = self.invoke(n, w, OpKind::MoveHome, vec![key], Vec::new(), pace.wait);
        let bucket = self.nodes[n].node.directory().bucket(key);
        let wid = self.nodes[n].workers[w].id.worker;
        let req = self.nodes[n]
            .node
            .issue_move_home(self.now, wid, bucket, to);
        self.hand_off(n, w, req, record, Vec::new(), pace);
    }

    fn internal_error(&self, message: String) -> ! {
        let seed = self.cfg.seed;
        panic!(
            "roam-sim at t={} ns: {message} (replay with ROAM_SIM_SEED={seed})",
            self.now.0
        )
    }
}

/// A uniform draw in `[min, max]`.
fn draw(rng: &mut ChaCha8Rng, min: u64, max: u64) -> u64 {
    if min == max {
        min
    } else {
        rng.random_range(min..=max)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use roam_core::KeySpace;
    use roam_core::wire::{Kind, Limits};

    use super::*;

    #[test]
    fn the_step_bound_reports_the_seed() {
        let cfg = SimConfig::new(2, 1, KeySpace::uniform(4, 1).unwrap())
            .with_seed(99)
            .with_max_steps(5);
        let mut sim = Sim::new(cfg);
        sim.add_script(WorkerRef::new(0, 0), (0..20).map(|_| Op::pull(vec![3])));
        let err = sim.run_until_idle().unwrap_err();
        assert_eq!(
            err,
            SimError::StepLimit {
                seed: 99,
                steps: 5,
                now: sim.now()
            }
        );
        assert!(err.to_string().contains("ROAM_SIM_SEED=99"));
        // The bound is per call: the run can go on.
        let mut sim = Sim::new(sim.config().clone().with_max_steps(1_000));
        sim.add_script(WorkerRef::new(0, 0), (0..20).map(|_| Op::pull(vec![3])));
        assert!(sim.run_until_idle().is_ok());
    }

    #[test]
    fn frames_of_a_link_arrive_in_send_order_while_links_interleave() {
        // Two workers on nodes 1 and 2 fire async pushes at node 0: per link the request ids
        // (increasing per node) must arrive in order; across links they must interleave.
        let cfg = SimConfig::new(3, 1, KeySpace::uniform(6, 1).unwrap())
            .with_seed(5)
            .with_delay(1, 100_000)
            .with_think(1_000, 30_000);
        let mut sim = Sim::new(cfg);
        let seen: Rc<RefCell<Vec<(u32, u64)>>> = Rc::default();
        let log = seen.clone();
        sim.set_tamper(move |from, _, bytes| {
            let (frame, _) = wire::decode(bytes, &Limits::default()).unwrap();
            if frame.header.kind == Kind::Push {
                log.borrow_mut().push((from.0, frame.header.req.0));
            }
        });
        for node in [1, 2] {
            sim.add_script(
                WorkerRef::new(node, 0),
                (0..40).map(|i| Op::push_async(vec![i % 2], vec![1.0])),
            );
        }
        sim.run_until_idle().unwrap();
        let seen = seen.borrow();
        assert_eq!(seen.len(), 80);
        for node in [1, 2] {
            let reqs: Vec<u64> = seen
                .iter()
                .filter(|(n, _)| *n == node)
                .map(|(_, r)| *r)
                .collect();
            assert!(
                reqs.windows(2).all(|w| w[0] < w[1]),
                "node {node}: {reqs:?}"
            );
        }
        let switches = seen.windows(2).filter(|w| w[0].0 != w[1].0).count();
        assert!(
            switches > 10,
            "links barely interleave: {switches} switches"
        );
        assert_eq!(sim.peek(0), Some(vec![40.0]));
    }
}
