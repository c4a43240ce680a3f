//! The running node: owns the protocol core, its links and the threads that drive them.
//!
//! Threads of one node process:
//! - worker threads (the user's), which access local keys in the store directly and enter the
//!   protocol only for remote keys;
//! - one reader per peer, feeding received frames to the core (those that arrived together
//!   under one lock hold, `peers.rs`);
//! - one loopback server, feeding frames a node sends itself (without fast local access);
//! - one timer thread (`timers.rs`), which runs the core's timers (`poll_timeout`,
//!   `handle_timeout`): the core sends heartbeats on idle links and declares silent peers lost;
//! - with latency emulation, one sender per link that holds frames until they are due;
//! - an acceptor that authenticates incoming connections (each handshake on a short-lived
//!   thread of its own, which the acceptor starts), and after start-up a membership thread that
//!   links nodes joining at run time (`elastic`); on rank 0, the join service (`elastic`).
//!
//! All but the worker threads are the node's protocol threads, every one started through
//! `slowing::spawn_named`, which with `roam launch --slow-scope protocol` puts them (and not
//! the workers) under the slowed node's CPU quota; with `--slow-scope service` the readers
//! sleep off a service delay after peers' pulls and pushes (`slowing.rs`).
//!
//! Invariants:
//! - The node lock is held only for one core input plus the draining of its outputs, never
//!   across I/O: frames are queued under it (fixing their per-link order) and written after.
//! - Every completion the core produces reaches its worker's slot, so a waiting worker always
//!   wakes: either with a result or with the error of a lost peer.
//! - The peer table only grows (`peers::add_peer`), under the node lock and then its write
//!   lock (the order every reader takes them in). A frame for a node with no link yet is parked
//!   under the node lock and handed to its link, in order, when the link is added.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use roam_core::stats::{NodeCounters, WorkerCounters};
use roam_core::wire::{Frame, Limits};
use roam_core::{
    Completion, Directory, KeySpace, Liveness, Node, NodeConfig, NodeId, OpError, Output,
    PolicyKind, PullPart, Replication, ReqId, Store, Time, WorkerId,
};

use crate::cluster_env;
use crate::config::Config;
use crate::elastic::{self, Elastic, Network};
use crate::error::{StartError, WorkerError};
use crate::peers::{Incoming, connect_peer, spawn_acceptor, spawn_loopback, spawn_reader};
use crate::rendezvous;
use crate::slot::WorkerSlot;
use crate::slowing::{ServiceSlowdown, SlowTasks, spawn_named};
use crate::stats::NodeStats;
use crate::timers::spawn_timers;
use crate::transport::{Link, Sink};
use crate::worker::Worker;

mod shutdown;

/// Most frames parked for one node that has no link yet; later ones are dropped (logged).
const MAX_PARKED: usize = 1 << 16;

/// State shared by the node's threads and its worker handles.
pub(crate) struct Shared {
    pub(crate) rank: NodeId,
    pub(crate) num_nodes: u32,
    pub(crate) workers_per_node: u32,
    pub(crate) space: KeySpace,
    pub(crate) store: Arc<Store>,
    pub(crate) fast_local_access: bool,
    pub(crate) counters: Arc<NodeCounters>,
    pub(crate) worker_counters: Vec<Arc<WorkerCounters>>,
    /// One per worker, plus one for the node itself (shutdown barrier).
    pub(crate) slots: Vec<WorkerSlot>,
    pub(crate) node: Mutex<Node>,
    /// Per linked node, keyed by node id (this node's own entry is the loopback link). Grows
    /// when nodes join; see the module invariants.
    pub(crate) peers: RwLock<BTreeMap<NodeId, Arc<Peer>>>,
    /// Frames for nodes with no link yet, in order; touched only under the node lock.
    pub(crate) parked: Mutex<BTreeMap<NodeId, Vec<Frame>>>,
    /// Elastic membership: join outcome, drained flag, links added at run time.
    pub(crate) elastic: Elastic,
    epoch: Instant,
    pub(crate) shutting_down: Arc<AtomicBool>,
    taken: Mutex<Vec<bool>>,
    /// A handle on each peer's incoming connection, to end its reader when the peer is lost.
    pub(crate) incoming: Mutex<HashMap<NodeId, TcpStream>>,
    pub(crate) limits: Limits,
    pub(crate) allocation: &'static str,
    pub(crate) latency_us: u64,
    /// Where protocol threads join the slowed node's cpu cgroup (`ROAM_SLOW_TASKS`), if set.
    pub(crate) slow_tasks: Option<Arc<SlowTasks>>,
    /// The service delay of `roam launch --slow-scope service` (`ROAM_SLOW_SERVICE`), if set.
    pub(crate) service: Option<Arc<ServiceSlowdown>>,
    /// Durations of the checkpoints this node took part in (for the metrics).
    pub(crate) checkpoints: crate::metrics::CheckpointTimes,
    /// Wakes the timer thread: set (and notified) when the core's next deadline may have
    /// moved earlier (a barrier began to wait) and when the node stops.
    pub(crate) timer_wake: (Mutex<bool>, Condvar),
}

/// The shell's state for one linked node: its link, and whether it left or was lost.
pub(crate) struct Peer {
    pub(crate) link: Arc<Link>,
    pub(crate) departed: AtomicBool,
    pub(crate) lost: AtomicBool,
}

impl Peer {
    pub(crate) fn new(link: Arc<Link>) -> Self {
        Self {
            link,
            departed: AtomicBool::new(false),
            lost: AtomicBool::new(false),
        }
    }
}

impl Shared {
    /// The state of linked node `id`, if it has a link.
    pub(crate) fn peer(&self, id: NodeId) -> Option<Arc<Peer>> {
        self.peers.read().get(&id).cloned()
    }

    /// Every link, this node's loopback included (a snapshot).
    pub(crate) fn links(&self) -> Vec<Arc<Link>> {
        self.peers.read().values().map(|p| p.link.clone()).collect()
    }

    /// Parks a frame for `dest`, which has no link yet (call with the node lock held).
    fn park(&self, dest: NodeId, frame: Frame) {
        let mut parked = self.parked.lock();
        let queue = parked.entry(dest).or_default();
        if queue.len() < MAX_PARKED {
            queue.push(frame);
        } else {
            tracing::warn!(
                node = self.rank.0,
                "frame for {dest}, which has no link: dropped"
            );
        }
    }

    pub(crate) fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Seconds from the node's start to `t` (a time from [`Shared::now`]).
    pub(crate) fn seconds_since_start(&self, t: Time) -> f64 {
        t.0 as f64 / 1e9
    }

    /// Runs one input on the core and carries out what it asks: frames are queued under the
    /// node lock, written and delivered after it is released.
    pub(crate) fn with_node<R>(&self, input: impl FnOnce(&mut Node, Time) -> R) -> R {
        let mut touched: Vec<Arc<Link>> = Vec::new();
        let mut completions: Vec<Completion> = Vec::new();
        let mut events = Vec::new();
        let result;
        {
            let mut node = self.node.lock();
            result = input(&mut node, self.now());
            let peers = self.peers.read();
            while let Some((dest, frame)) = node.poll_transmit() {
                let Some(peer) = peers.get(&dest) else {
                    // A node that joins: its link is being set up (see `peers::add_peer`).
                    self.park(dest, frame);
                    continue;
                };
                peer.link.enqueue(frame);
                if !touched.iter().any(|l| l.peer == dest) {
                    touched.push(peer.link.clone());
                }
            }
            drop(peers);
            while let Some(done) = node.poll_completion() {
                completions.push(done);
            }
            while let Some(event) = node.poll_membership() {
                events.push(event);
            }
            while let Some(warning) = node.poll_warning() {
                tracing::warn!(node = self.rank.0, "{warning}");
            }
            if node.take_timer_rearm() {
                self.wake_timers();
            }
        }
        for link in touched {
            if let Err(err) = link.flush() {
                self.peer_lost(link.peer, &format!("write failed: {err}"));
            }
        }
        self.deliver(completions);
        if !events.is_empty() {
            self.on_membership(events);
        }
        result
    }

    /// Makes the timer thread read the core's next deadline again.
    pub(crate) fn wake_timers(&self) {
        *self.timer_wake.0.lock() = true;
        self.timer_wake.1.notify_all();
    }

    fn deliver(&self, completions: Vec<Completion>) {
        for done in completions {
            let result = done.result.map(Output::into_parts);
            self.slots[done.worker.index()].deliver(done.req, result);
        }
    }

    /// Blocks until request `req` of worker `worker` completes, and takes its result.
    pub(crate) fn wait_result(
        &self,
        worker: WorkerId,
        req: ReqId,
    ) -> Result<Vec<PullPart>, OpError> {
        self.slots[worker.index()].take(req)
    }
}

/// A running roam node (one per process). Hand out one [`Worker`] per thread with
/// [`NodeHandle::worker`]; finish with [`NodeHandle::shutdown`].
pub struct NodeHandle {
    pub(crate) shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// One per peer link; they finish the links' last frames (goodbyes) at shutdown.
    senders: Vec<JoinHandle<()>>,
    readers: Vec<JoinHandle<()>>,
    acceptor_addr: Option<SocketAddr>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    finished: bool,
    /// [`Config::print_stats`].
    print_stats: bool,
    /// The access samples of the allocation trace ([`Config::trace_allocation`]).
    pub(crate) trace_samples: Option<Arc<Mutex<Vec<crate::alloc_trace::AccessSample>>>>,
    /// The `/metrics` endpoint ([`Config::metrics_addr`]), with the scrapes to wait for at
    /// shutdown and for how long at most.
    metrics: Option<(crate::metrics::MetricsServer, u64, Duration)>,
}

impl NodeHandle {
    /// Joins the cluster described by `cfg` and the environment, and starts the node.
    pub fn start(cfg: Config) -> Result<Self, StartError> {
        crate::huge_pages::install();
        let joining = cfg.join || cluster_env::join(cluster_env::process_lookup)?;
        let cluster = if joining {
            // The coordinator assigns rank and node count; a joined node hosts no workers.
            let coordinator =
                cluster_env::join_coordinator(&cfg.cluster, cluster_env::process_lookup)?;
            let emulate_latency_us = match cfg.emulate_latency_us {
                Some(l) => l,
                None => cluster_env::emulate_latency_us_from_process_env()?.unwrap_or(0),
            };
            crate::ClusterInfo {
                rank: 0,
                num_nodes: 0,
                workers_per_node: 0,
                coordinator,
                emulate_latency_us,
            }
        } else {
            cfg.resolve_cluster()?
        };
        let (workers_per_node, latency_us) = (cluster.workers_per_node, cluster.emulate_latency_us);
        let space = cfg.key_space()?;
        if let Some(&key) = cfg.replicated_keys.iter().find(|&&k| !space.contains(k)) {
            return Err(StartError::ReplicatedKeyOutOfRange {
                key,
                num_keys: space.num_keys(),
            });
        }
        if cfg.replica_sync_every.is_zero() {
            return Err(StartError::ZeroSyncPeriod);
        }
        if !(cfg.replica_min_delta_norm >= 0.0 && cfg.replica_min_delta_norm.is_finite()) {
            return Err(StartError::BadDeltaNorm(cfg.replica_min_delta_norm));
        }
        if let Some(watch) = &cfg.load_watch {
            watch.validate()?;
        }
        let mut cfg = cfg;
        if let Some(t) = cluster_env::peer_timeout(cluster_env::process_lookup)? {
            cfg.peer_timeout = t;
        }
        let asked = cluster_env::balancer(cluster_env::process_lookup)?;
        match asked {
            Some(false) => cfg.balancer = None,
            Some(true) if cfg.balancer.is_none() => {
                cfg.balancer = Some(roam_core::Balancer::default());
            }
            _ => {}
        }
        if let Some(balancer) = &cfg.balancer {
            balancer.validate()?;
            if cfg.load_watch.is_none() {
                // Asked for explicitly, a balancer without its inputs is an error; on by
                // default, it gives way to a program that turned load watching off.
                if asked == Some(true) {
                    return Err(roam_core::balance::BalancerError::NoLoadWatch.into());
                }
                tracing::info!("load watching is off, so is the load balancer");
                cfg.balancer = None;
            }
        }
        for (i, spec) in cfg.samplers.iter().enumerate() {
            spec.value_len(&space)
                .map_err(|reason| StartError::Sampler {
                    sampler: i as u32,
                    reason,
                })?;
        }
        let replication = (!cfg.replicated_keys.is_empty()).then(|| Replication {
            keys: cfg.replicated_keys.clone(),
            sync_every_ns: cfg.replica_sync_every.as_nanos().min(u128::from(u64::MAX)) as u64,
            min_delta_norm: cfg.replica_min_delta_norm,
            sync_after_updates: cfg.replica_sync_after_updates,
        });
        let (metrics_addr, metrics_hold) =
            crate::metrics::settings(cfg.metrics_addr.as_deref(), cfg.metrics_hold_scrapes)?;
        // Bound before the rendezvous: an address in use fails this node before peers wait.
        let metrics_listener = metrics_addr
            .as_deref()
            .map(crate::metrics::bind)
            .transpose()?;
        let latency = Duration::from_micros(latency_us);
        let deadline = Instant::now() + cfg.rendezvous_timeout;
        let stopping = Arc::new(AtomicBool::new(false));

        // Network: rendezvous (or the join service), then connect to every peer; accepting
        // from them follows once the node's threads run.
        let multi = joining || cluster.num_nodes > 1;
        let token: Vec<u8> = match &cfg.token {
            Some(t) => t.clone().into_bytes(),
            None if multi => cluster_env::cluster_token_from_process_env(cluster.num_nodes.max(2))?
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let mut net = if joining {
            elastic::join_network(&cluster.coordinator, &token, cfg.rendezvous_timeout)?
        } else {
            Network::single(cluster.rank, cluster.num_nodes)
        };
        let (rank, num_nodes) = (NodeId(net.rank), net.num_nodes);
        // Read once: every protocol thread of this node joins the same file, or none does.
        let slow_tasks = SlowTasks::from_env(rank);
        let service = ServiceSlowdown::from_env(rank).map_err(StartError::SlowService)?;
        let mut incoming_rx = None;
        let mut acceptor = None;
        let mut acceptor_addr = None;
        let mut coordinator_listener = None;
        if multi {
            let listener = if joining {
                net.listener
                    .take()
                    .expect("a joining node has a data listener")
            } else {
                let env = cluster_env::ClusterEnv {
                    rank: cluster.rank,
                    num_nodes: cluster.num_nodes,
                    coordinator: cluster.coordinator.clone(),
                };
                let rv = rendezvous::rendezvous(&env, &token, cfg.rendezvous_timeout)?;
                coordinator_listener = rv.coordinator;
                net.addrs = (0..)
                    .zip(rv.peers.iter())
                    .map(|(r, &a)| (NodeId(r), a))
                    .collect();
                net.expected = (0..num_nodes).filter(|&p| p != rank.0).collect();
                rv.listener
            };
            acceptor_addr = Some(listener.local_addr()?);
            let (tx, rx) = mpsc::channel();
            incoming_rx = Some(rx);
            acceptor = Some(spawn_acceptor(
                rank,
                listener,
                token.clone(),
                tx,
                stopping.clone(),
                slow_tasks.as_ref(),
            )?);
            for &peer in &net.expected {
                let addr = net.addrs[&NodeId(peer)];
                let stream = if joining {
                    elastic::connect_as_joiner(rank, peer, addr, &token, acceptor_addr, deadline)?
                } else {
                    connect_peer(rank, peer, addr, &token, deadline)?
                };
                tracing::debug!(node = rank.0, peer, %addr, "data link to the peer connected");
                net.outgoing.insert(peer, stream);
            }
        }

        let node_cfg = NodeConfig {
            id: rank,
            num_nodes,
            workers_per_node,
            space: space.clone(),
            partitioning: cfg.partitioning(),
            fast_local_access: cfg.fast_local_access,
            policy: if cfg.allocation.is_dynamic() {
                PolicyKind::Lapse {
                    location_caches: cfg.location_caches,
                }
            } else {
                PolicyKind::Static
            },
            // Policies and samplers draw from it; each node and worker derives its own stream.
            seed: cfg.sampling_seed ^ u64::from(rank.0),
            liveness: Some(Liveness::with_timeout(
                cfg.peer_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            )),
            replication,
            samplers: cfg.samplers.clone(),
            load: cfg.load_watch,
            balancer: cfg.balancer,
            intent_timing: cfg.intent_timing,
            intent_techniques: cfg.intent_techniques,
            intent_linger: cfg.intent_linger,
            share_sync: roam_core::ShareSync {
                every_ns: cfg
                    .share_sync_every
                    .as_nanos()
                    .clamp(1, u128::from(u64::MAX)) as u64,
                updates_per_key: cfg.share_sync_updates_per_key,
            },
            barrier_warn_every: cfg
                .barrier_warning
                .map(|d| d.as_nanos().clamp(1, u128::from(u64::MAX)) as u64),
        };
        let restore = cfg.restore_from.as_deref().filter(|_| !joining);
        let mut node = if joining {
            Node::joining(node_cfg)
        } else if restore.is_some() {
            // The restore creates the home records (no zeros written first).
            Node::unfilled(node_cfg)
        } else {
            Node::new(node_cfg)
        };
        crate::spill::install(&mut node, cfg.spill_dir.as_deref(), rank.0)?;
        if let Some(dir) = restore {
            // Before any frame is served: on error the node is dropped unstarted.
            crate::checkpoint::restore_into(&mut node, dir)?;
            crate::checkpoint::spill::restore_spilled(&mut node, dir)?;
        }
        let store = node.store().clone();
        let counters = node.counters().clone();

        let (loop_tx, loop_rx) = mpsc::channel::<Frame>();
        let mut peers = BTreeMap::new();
        for peer in net.expected.iter().copied().chain([rank.0]) {
            // Frames a node sends itself cross no network: no emulated latency.
            let (sink, latency) = match net.outgoing.remove(&peer) {
                Some(stream) => (Sink::Tcp(stream), latency),
                None => (Sink::Loopback(loop_tx.clone()), Duration::ZERO),
            };
            let link = Link::new(NodeId(peer), sink, latency, counters.clone())?;
            peers.insert(NodeId(peer), Arc::new(Peer::new(Arc::new(link))));
        }
        drop(loop_tx);

        let shared = Arc::new(Shared {
            rank,
            num_nodes,
            workers_per_node,
            space,
            store,
            fast_local_access: cfg.fast_local_access,
            counters,
            worker_counters: (0..workers_per_node).map(|_| Arc::default()).collect(),
            slots: (0..=workers_per_node)
                .map(|_| WorkerSlot::default())
                .collect(),
            node: Mutex::new(node),
            peers: RwLock::new(peers),
            parked: Mutex::new(BTreeMap::new()),
            elastic: Elastic::new(joining, token, net.addrs, cfg.rendezvous_timeout),
            epoch: Instant::now(),
            shutting_down: stopping,
            taken: Mutex::new(vec![false; workers_per_node as usize]),
            incoming: Mutex::new(HashMap::new()),
            limits: cfg.limits,
            allocation: cfg.allocation.name(),
            latency_us,
            slow_tasks,
            service,
            checkpoints: Default::default(),
            timer_wake: (Mutex::new(false), Condvar::new()),
        });

        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let mut threads = Vec::new();
        threads.extend(acceptor);
        threads.push(spawn_loopback(&shared, loop_rx, stop.clone())?);
        let mut senders = Vec::new();
        for link in shared.links().into_iter().filter(|l| l.peer != rank) {
            let sh = shared.clone();
            senders.push(spawn_named(
                format!("roam-send-{}", link.peer.0),
                shared.slow_tasks.as_ref(),
                move || {
                    if let Err(err) = link.run_sender() {
                        sh.peer_lost(link.peer, &format!("write failed: {err}"));
                    }
                },
            )?);
        }
        // From here on a failure drops the handle, which stops every thread started so far.
        let mut handle = Self {
            shared,
            threads,
            senders,
            readers: Vec::new(),
            acceptor_addr,
            stop,
            finished: false,
            print_stats: cfg.print_stats,
            trace_samples: None,
            metrics: None,
        };
        if let Some(bound) = metrics_listener {
            let server = crate::metrics::spawn(&handle.shared, bound)?;
            handle.metrics = Some((server, metrics_hold, cfg.rendezvous_timeout));
        }
        if cfg.trace_allocation {
            handle.shared.with_node(|node, _| node.trace_allocation());
            let samples = Arc::default();
            let sampler = crate::alloc_trace::spawn_sampler(
                &handle.shared,
                handle.stop.clone(),
                Arc::clone(&samples),
            )?;
            handle.threads.push(sampler);
            handle.trace_samples = Some(samples);
        }
        if let Some(rx) = incoming_rx {
            let early =
                handle.accept_peers(&rx, &net.expected, deadline, cfg.rendezvous_timeout)?;
            let members =
                elastic::spawn_membership_thread(&handle.shared, rx, early, &handle.stop)?;
            handle.threads.push(members);
            if let Some(listener) = coordinator_listener {
                let service = elastic::spawn_join_service(&handle.shared, listener)?;
                handle.threads.push(service);
            }
        } else {
            // A single node has no peers to wait for, but its timers (barrier wait warnings)
            // still run.
            let timers = spawn_timers(&handle.shared, handle.stop.clone())?;
            handle.threads.push(timers);
        }
        if let Some(stream) = net.join_stream.take() {
            elastic::await_admission(&handle.shared, stream, deadline, cfg.rendezvous_timeout)?;
        }
        Ok(handle)
    }

    /// Waits until every expected peer has connected to this node, then starts failure
    /// detection. Returns the connections of nodes joining meanwhile, for the membership thread.
    fn accept_peers(
        &mut self,
        rx: &mpsc::Receiver<Incoming>,
        expected: &BTreeSet<u32>,
        deadline: Instant,
        rendezvous_timeout: Duration,
    ) -> Result<Vec<Incoming>, StartError> {
        let rank = self.shared.rank;
        let mut missing = expected.clone();
        let mut early = Vec::new();
        while !missing.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(
                    conn @ Incoming {
                        joiner: Some(_), ..
                    },
                ) => early.push(conn),
                Ok(Incoming {
                    rank: peer, stream, ..
                }) if missing.remove(&peer) => {
                    tracing::debug!(
                        node = rank.0,
                        peer,
                        missing = missing.len(),
                        "data link from the peer accepted"
                    );
                    let reader = spawn_reader(&self.shared, NodeId(peer), stream)?;
                    self.readers.push(reader);
                }
                Ok(Incoming { rank: peer, .. }) => {
                    tracing::warn!(
                        node = rank.0,
                        "duplicate or unknown data connection from node {peer} closed"
                    );
                }
                Err(_) => {
                    return Err(StartError::PeersMissing {
                        missing: missing.into_iter().collect(),
                        secs: rendezvous_timeout.as_secs(),
                    });
                }
            }
        }
        tracing::info!(
            node = rank.0,
            peers = expected.len(),
            "every peer connected: the node runs"
        );
        self.shared.with_node(|node, now| node.start_liveness(now));
        let timers = spawn_timers(&self.shared, self.stop.clone())?;
        self.threads.push(timers);
        Ok(early)
    }

    /// This node's rank.
    pub fn rank(&self) -> u32 {
        self.shared.rank.0
    }

    /// Number of nodes in the cluster.
    pub fn num_nodes(&self) -> u32 {
        self.shared.num_nodes
    }

    /// Worker threads per node.
    pub fn workers_per_node(&self) -> u32 {
        self.shared.workers_per_node
    }

    /// The address this node accepts peer connections on (`None` for a single node).
    pub fn data_addr(&self) -> Option<SocketAddr> {
        self.acceptor_addr
    }

    /// The address this node serves Prometheus metrics on (`None` without
    /// [`Config::metrics_addr`]).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(m, _, _)| m.addr())
    }

    /// The key space.
    pub fn key_space(&self) -> &KeySpace {
        &self.shared.space
    }

    /// A snapshot of this node's directory: which node is home of each key now, the members
    /// and the coordinator. Homes move at run time, so ask again rather than keep it.
    pub fn directory(&self) -> Directory {
        self.shared.with_node(|node, _| node.directory().clone())
    }

    /// The handle of worker `index` (`0..workers_per_node`), to be used by one thread.
    pub fn worker(&self, index: u32) -> Result<Worker, WorkerError> {
        let workers = self.shared.workers_per_node;
        let mut taken = self.shared.taken.lock();
        match taken.get_mut(index as usize) {
            None => Err(WorkerError::NoSuchWorker { index, workers }),
            Some(true) => Err(WorkerError::AlreadyTaken { index }),
            Some(t) => {
                *t = true;
                Ok(Worker::new(self.shared.clone(), WorkerId(index)))
            }
        }
    }

    /// All worker handles at once.
    pub fn workers(&self) -> Result<Vec<Worker>, WorkerError> {
        (0..self.shared.workers_per_node)
            .map(|i| self.worker(i))
            .collect()
    }

    /// A snapshot of this node's counters.
    pub fn stats(&self) -> NodeStats {
        NodeStats::collect(&self.shared)
    }

    /// Asks the coordinator to drain node `rank` (this one or another): its buckets and keys
    /// move to the other members, then it leaves. Returns once it has left, or with the
    /// coordinator's reason (`OpError::Rejected`: the coordinator, a non-member, the last
    /// member...) or `PeerGone`. The drained node's [`NodeHandle::wait_until_done`] returns,
    /// and its [`NodeHandle::shutdown`] skips the final barrier.
    pub fn drain(&self, rank: u32) -> Result<(), OpError> {
        self.shared.drain(NodeId(rank))
    }

    /// Whether this node joined a running cluster (`Config::join`): a server with no workers.
    pub fn is_joined(&self) -> bool {
        self.shared.elastic.joined
    }

    /// Whether this node is (still) a member: false once it was drained.
    pub fn is_member(&self) -> bool {
        self.shared.is_member()
    }

    /// Blocks until this node was drained or every other initial member (joined servers do not
    /// count) has departed cleanly (the cluster finished); meant for server-only (joined) nodes and for nodes whose workers are
    /// done and that wait to be drained. Fails with `PeerGone` if a member was lost instead.
    /// A node whose workers still run must not call it (the others' final barrier waits for
    /// them).
    pub fn wait_until_done(&self) -> Result<(), OpError> {
        self.shared.wait_until_done()
    }
}
