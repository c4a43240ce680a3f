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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam_core::{Front, Key, Node, NodeConfig, NodeId, PolicyKind, Residency, Time};

use crate::config::SimConfig;
use crate::history::History;
use crate::net::{Link, LinkStats};
use crate::trace::{Fnv128, Trace};
use crate::worker::{Worker, WorkerRef};

mod deliver;
mod faults;
mod issue;
mod run;
mod sample;

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
    /// It was drained and exited (it also counts as `crashed`: it runs nothing more).
    exited: bool,
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

/// The largest extra delay of a simulated straggler's frames (an hour of virtual time keeps
/// every `now + delay` far from overflowing).
const MAX_SLOW_NS: u64 = 3_600_000_000_000;

const TAG_FRAME: u8 = 1;
const TAG_CLOSE: u8 = 2;
const TAG_INVOKE: u8 = 3;
const TAG_RETURN: u8 = 4;
const TAG_FAULT: u8 = 5;
const TAG_TIMER: u8 = 6;
const TAG_JOIN: u8 = 7;

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
    /// Membership events of every node, in order.
    membership: Vec<(Time, NodeId, roam_core::MembershipEvent)>,
    trace: Trace,
    /// Per node, a hash of every input it received, in order (a node is a deterministic
    /// function of its inputs, so equal hashes mean equal node states).
    inputs: Vec<Fnv128>,
    /// Hash of the invocations and returns of the history, in order, with outcomes.
    history_order: Fnv128,
    tamper: Option<Tamper>,
    /// Checkpoint snapshots, one per cut, filled node by node as the cut completes there.
    checkpoints: Vec<Snapshot>,
    /// Per node, the cuts snapshot so far; per (node, worker), the cuts completed.
    cuts_taken: Vec<usize>,
    worker_cuts: BTreeMap<(usize, usize), usize>,
}

/// What the nodes held when a checkpoint cut completed at each: what the real shell writes.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every key's visible values, from the node that holds (or, replicated, hubs) it.
    pub values: BTreeMap<Key, Vec<f32>>,
    /// Keys that two nodes held (a cut must never show a key twice).
    pub duplicates: Vec<Key>,
    /// Nodes whose holdings are in.
    pub nodes: usize,
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
            cfg.nodes > cfg.joiners && cfg.workers_per_node > 0,
            "a cluster needs nodes (more than the joiners) and workers"
        );
        let members = cfg.nodes - cfg.joiners;
        if let Some(watch) = &cfg.load {
            watch
                .validate()
                .unwrap_or_else(|e| panic!("SimConfig::load: {e}"));
        }
        for &(node, extra) in &cfg.slow_nodes {
            assert!(
                node.0 < cfg.nodes && extra <= MAX_SLOW_NS,
                "SimConfig::slow_nodes: {node} needs to be one of the {} nodes and its extra \
                 delay {extra} ns at most {MAX_SLOW_NS} ns",
                cfg.nodes
            );
        }
        for &(node, factor) in &cfg.slow_service {
            assert!(
                node.0 < cfg.nodes && (1..=1000).contains(&factor),
                "SimConfig::slow_service: {node} needs to be one of the {} nodes and its factor \
                 {factor} between 1 and 1000",
                cfg.nodes
            );
        }
        let nodes = (0..cfg.nodes)
            .map(|id| {
                let joiner = id >= members;
                let workers_per_node = if joiner { 0 } else { cfg.workers_per_node };
                let node_cfg = NodeConfig {
                    id: NodeId(id),
                    num_nodes: members,
                    workers_per_node,
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
                    replication: cfg.replication.clone(),
                    samplers: cfg.samplers.clone(),
                    load: cfg.load,
                    balancer: cfg.balancer,
                    intent_timing: cfg.intent_timing,
                    intent_techniques: cfg.intent_techniques,
                    intent_linger: cfg.intent_linger,
                    share_sync: roam_core::ShareSync {
                        every_ns: cfg.share_sync_ns,
                        updates_per_key: cfg.share_updates_per_key,
                    },
                    barrier_warn_every: cfg.barrier_warn_every,
                };
                let node = if joiner {
                    Node::joining(node_cfg)
                } else {
                    Node::new(node_cfg)
                };
                let workers = (0..workers_per_node)
                    .map(|w| {
                        Worker::new(
                            WorkerRef::new(id, w),
                            Front::new(&node, roam_core::WorkerId(w), Arc::default()),
                        )
                    })
                    .collect();
                SimNode {
                    node,
                    crashed: false,
                    exited: false,
                    workers,
                }
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
            history: History::new(cfg.space.clone())
                .with_replicated(cfg.replication.iter().flat_map(|r| r.keys.iter().copied())),
            warnings: Vec::new(),
            membership: Vec::new(),
            trace: Trace::default(),
            inputs: vec![Fnv128::default(); n],
            history_order: Fnv128::default(),
            tamper: None,
            checkpoints: Vec::new(),
            cuts_taken: vec![0; n],
            worker_cuts: BTreeMap::new(),
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

    /// Node `id`, mutable: for switches that tests turn on before a run (such as
    /// [`Node::log_replica_steps`]), not for driving the protocol (events do that).
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id.index()].node
    }

    /// Whether node `id` was crashed.
    pub fn is_crashed(&self, id: NodeId) -> bool {
        self.nodes[id.index()].crashed && !self.nodes[id.index()].exited
    }

    /// Whether node `id` was drained and exited.
    pub fn has_exited(&self, id: NodeId) -> bool {
        self.nodes[id.index()].exited
    }

    /// Every node's membership events so far, in order.
    pub fn membership_events(&self) -> &[(Time, NodeId, roam_core::MembershipEvent)] {
        &self.membership
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

    /// The checkpoint snapshots so far, in cut order (see [`crate::Op::Checkpoint`]).
    pub fn checkpoints(&self) -> &[Snapshot] {
        &self.checkpoints
    }

    /// Worker `w` of node `n` completed a checkpoint cut: the first of its node to do so for
    /// this cut takes the node's snapshot, before the node handles anything else.
    pub(super) fn note_cut(&mut self, n: usize, w: usize) {
        let done = self.worker_cuts.entry((n, w)).or_insert(0);
        *done += 1;
        let cut = *done;
        if self.cuts_taken[n] >= cut {
            return;
        }
        self.cuts_taken[n] = cut;
        if self.checkpoints.len() < cut {
            self.checkpoints.resize_with(cut, Snapshot::default);
        }
        let node = &self.nodes[n].node;
        let space = &self.cfg.space;
        let snap = &mut self.checkpoints[cut - 1];
        snap.nodes += 1;
        let mut held: Vec<(Key, Vec<f32>)> = node.hub_primaries();
        let mut cursor = Some(0);
        while let Some(at) = cursor {
            cursor = node.store().scan(at, 4096, |key, holding, record| {
                if holding == roam_core::store::Holding::Owned {
                    held.push((key, record[..space.len(key)].to_vec()));
                }
            });
        }
        for (key, value) in held {
            if snap.values.insert(key, value).is_some() {
                snap.duplicates.push(key);
            }
        }
    }

    /// The current value of `key`, read from the store of a live node that holds it (bypassing
    /// the protocol; for assertions).
    pub fn peek(&self, key: Key) -> Option<Vec<f32>> {
        let mut out = vec![0.0; self.cfg.space.len(key)];
        // The owner's value (a replicated key's replicas may lag it); else any replica's.
        let live = || self.nodes.iter().filter(|n| !n.crashed);
        let owner = live().find(|n| n.node.store().residency(key) == Residency::Local);
        match owner {
            Some(n) => n.node.store().pull_local(key, &mut out),
            None => live().any(|n| n.node.store().pull_local(key, &mut out)),
        }
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
        for key in self.history.keys_checked() {
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
        for key in self.history.keys_checked() {
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
    use roam_core::wire::{self, Kind, Limits};

    use super::*;
    use crate::worker::Op;

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
