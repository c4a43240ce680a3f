//! The running node: owns the protocol core, its links and the threads that drive them.
//!
//! Threads of one node process:
//! - worker threads (the user's), which access local keys in the store directly and enter the
//!   protocol only for remote keys;
//! - one reader per peer, feeding received frames to the core;
//! - one loopback server, feeding frames a node sends itself (without fast local access);
//! - one timer thread, which runs the core's timers (`poll_timeout`/`handle_timeout`): the core
//!   sends heartbeats on idle links and declares silent peers lost;
//! - with latency emulation, one sender per link that holds frames until they are due;
//! - an acceptor that authenticates incoming connections (each handshake on a short-lived
//!   thread of its own, which the acceptor starts).
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

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use roam_core::stats::{NodeCounters, WorkerCounters};
use roam_core::wire::{Frame, Kind, Limits};
use roam_core::{
    Completion, Directory, KeySpace, Liveness, Node, NodeConfig, NodeId, OpError, Output,
    PolicyKind, PullPart, Replication, ReqId, Store, Time, WorkerId,
};

use crate::auth::{self, Purpose};
use crate::cluster_env;
use crate::config::Config;
use crate::error::{StartError, WorkerError};
use crate::rendezvous;
use crate::slot::WorkerSlot;
use crate::slowing::{ServiceSlowdown, SlowTasks, spawn_named};
use crate::stats::NodeStats;
use crate::transport::{Link, Sink, read_frame};
use crate::worker::Worker;

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
    node: Mutex<Node>,
    /// Per member, keyed by node id (this node's own entry is the loopback link).
    peers: BTreeMap<NodeId, Peer>,
    epoch: Instant,
    pub(crate) shutting_down: Arc<AtomicBool>,
    taken: Mutex<Vec<bool>>,
    /// A handle on each peer's incoming connection, to end its reader when the peer is lost.
    incoming: Mutex<HashMap<NodeId, TcpStream>>,
    pub(crate) limits: Limits,
    pub(crate) allocation: &'static str,
    pub(crate) latency_us: u64,
    /// Where protocol threads join the slowed node's cpu cgroup (`ROAM_SLOW_TASKS`), if set.
    slow_tasks: Option<Arc<SlowTasks>>,
    /// The service delay of `roam launch --slow-scope service` (`ROAM_SLOW_SERVICE`), if set.
    service: Option<Arc<ServiceSlowdown>>,
}

/// The shell's state for one member: its link, and whether it left or was lost.
struct Peer {
    link: Arc<Link>,
    departed: AtomicBool,
    lost: AtomicBool,
}

impl Shared {
    /// The state of member `id`, if it is one.
    fn peer(&self, id: NodeId) -> Option<&Peer> {
        self.peers.get(&id)
    }

    /// Every link, this node's loopback included.
    fn links(&self) -> impl Iterator<Item = &Arc<Link>> {
        self.peers.values().map(|p| &p.link)
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
        let mut touched: Vec<NodeId> = Vec::new();
        let mut completions: Vec<Completion> = Vec::new();
        let result;
        {
            let mut node = self.node.lock();
            result = input(&mut node, self.now());
            while let Some((dest, frame)) = node.poll_transmit() {
                let Some(peer) = self.peer(dest) else {
                    tracing::warn!(
                        node = self.rank.0,
                        "frame for {dest}, not a member: dropped"
                    );
                    continue;
                };
                peer.link.enqueue(frame);
                if !touched.contains(&dest) {
                    touched.push(dest);
                }
            }
            while let Some(done) = node.poll_completion() {
                completions.push(done);
            }
            while let Some(warning) = node.poll_warning() {
                tracing::warn!(node = self.rank.0, "{warning}");
            }
        }
        for dest in touched {
            let link = &self.peers[&dest].link;
            if let Err(err) = link.flush() {
                self.peer_lost(link.peer, &format!("write failed: {err}"));
            }
        }
        self.deliver(completions);
        result
    }

    fn deliver(&self, completions: Vec<Completion>) {
        for done in completions {
            let result = done.result.map(Output::into_parts);
            self.slots[done.worker.index()].deliver(done.req, result);
        }
    }

    /// Declares `peer` gone: every operation waiting on it fails.
    pub(crate) fn peer_lost(&self, peer: NodeId, reason: &str) {
        let Some(state) = self.peer(peer).filter(|_| peer != self.rank) else {
            return;
        };
        if state.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        if !state.departed.load(Ordering::Acquire) {
            tracing::warn!(node = self.rank.0, "{peer} lost: {reason}");
        }
        self.end_reader(peer);
        self.with_node(|node, now| node.handle_peer_lost(now, peer));
    }

    /// Ends the connections of peers the core declared lost on its own (silence, or another
    /// node's notice), so that their readers stop.
    fn close_links_lost_by_core(&self) {
        let lost: Vec<NodeId> = self.with_node(|node, _| {
            self.links()
                .map(|l| l.peer)
                .filter(|&p| p != self.rank && node.is_lost(p))
                .collect()
        });
        for peer in lost {
            if !self.peers[&peer].lost.swap(true, Ordering::AcqRel) {
                tracing::warn!(node = self.rank.0, "{peer} lost: silent or reported lost");
            }
            self.end_reader(peer);
        }
    }

    /// Ends `peer`'s reader, which may be blocked on a connection that is still open.
    fn end_reader(&self, peer: NodeId) {
        if let Some(stream) = self.incoming.lock().remove(&peer) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
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
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// One per peer link; they finish the links' last frames (goodbyes) at shutdown.
    senders: Vec<JoinHandle<()>>,
    readers: Vec<JoinHandle<()>>,
    acceptor_addr: Option<SocketAddr>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    finished: bool,
}

impl NodeHandle {
    /// Joins the cluster described by `cfg` and the environment, and starts the node.
    pub fn start(cfg: Config) -> Result<Self, StartError> {
        let cluster = cfg.resolve_cluster()?;
        let env = cluster_env::ClusterEnv {
            rank: cluster.rank,
            num_nodes: cluster.num_nodes,
            coordinator: cluster.coordinator.clone(),
        };
        let (workers_per_node, latency_us) = (cluster.workers_per_node, cluster.emulate_latency_us);
        let space = cfg.key_space()?;
        let rank = NodeId(env.rank);
        let num_nodes = env.num_nodes;
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
        });
        let node = Node::new(NodeConfig {
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
        });
        let store = node.store().clone();
        let counters = node.counters().clone();
        let latency = Duration::from_micros(latency_us);
        let deadline = Instant::now() + cfg.rendezvous_timeout;
        let stopping = Arc::new(AtomicBool::new(false));
        // Read once: every protocol thread of this node joins the same file, or none does.
        let slow_tasks = SlowTasks::from_env(rank);
        let service = ServiceSlowdown::from_env(rank).map_err(StartError::SlowService)?;

        // Network: rendezvous, then accept from and connect to every peer.
        let mut outgoing: Vec<Option<TcpStream>> = (0..num_nodes).map(|_| None).collect();
        let mut incoming_rx = None;
        let mut acceptor = None;
        let mut acceptor_addr = None;
        if num_nodes > 1 {
            let token: Vec<u8> = match &cfg.token {
                Some(t) => t.clone().into_bytes(),
                None => cluster_env::cluster_token_from_process_env(num_nodes)?.unwrap_or_default(),
            };
            let rv = rendezvous::rendezvous(&env, &token, cfg.rendezvous_timeout)?;
            acceptor_addr = Some(rv.listener.local_addr()?);
            let (tx, rx) = mpsc::channel();
            incoming_rx = Some(rx);
            acceptor = Some(spawn_acceptor(
                rank,
                rv.listener,
                token.clone(),
                tx,
                stopping.clone(),
                slow_tasks.as_ref(),
            )?);
            for (peer, &addr) in rv.peers.iter().enumerate() {
                if peer as u32 != rank.0 {
                    outgoing[peer] = Some(connect_peer(rank, peer as u32, addr, &token, deadline)?);
                }
            }
        }

        let (loop_tx, loop_rx) = mpsc::channel::<Frame>();
        let links = (0..num_nodes)
            .map(|peer| {
                // Frames a node sends itself cross no network: no emulated latency.
                let (sink, latency) = match outgoing[peer as usize].take() {
                    Some(stream) => (Sink::Tcp(stream), latency),
                    None => (Sink::Loopback(loop_tx.clone()), Duration::ZERO),
                };
                Link::new(NodeId(peer), sink, latency, counters.clone()).map(Arc::new)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        drop(loop_tx);
        let peers = links
            .into_iter()
            .map(|link| {
                let peer = Peer {
                    link,
                    departed: AtomicBool::new(false),
                    lost: AtomicBool::new(false),
                };
                (peer.link.peer, peer)
            })
            .collect();

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
            peers,
            epoch: Instant::now(),
            shutting_down: stopping,
            taken: Mutex::new(vec![false; workers_per_node as usize]),
            incoming: Mutex::new(HashMap::new()),
            limits: cfg.limits,
            allocation: cfg.allocation.name(),
            latency_us,
            slow_tasks,
            service,
        });

        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let mut threads = Vec::new();
        threads.extend(acceptor);
        threads.push(spawn_loopback(&shared, loop_rx, stop.clone())?);
        let mut senders = Vec::new();
        for link in shared.links().filter(|l| l.peer != rank) {
            let link = link.clone();
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
        };
        if let Some(rx) = incoming_rx {
            handle.accept_peers(&rx, deadline, cfg.rendezvous_timeout)?;
        }
        Ok(handle)
    }

    /// Waits until every peer has connected to this node, then starts failure detection.
    fn accept_peers(
        &mut self,
        rx: &mpsc::Receiver<(u32, TcpStream)>,
        deadline: Instant,
        rendezvous_timeout: Duration,
    ) -> Result<(), StartError> {
        let (rank, num_nodes) = (self.shared.rank, self.shared.num_nodes);
        let mut connected = vec![false; num_nodes as usize];
        connected[rank.index()] = true;
        while connected.iter().any(|c| !c) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((peer, stream)) if peer < num_nodes && !connected[peer as usize] => {
                    connected[peer as usize] = true;
                    let reader = spawn_reader(&self.shared, NodeId(peer), stream)?;
                    self.readers.push(reader);
                }
                Ok((peer, _)) => {
                    tracing::warn!(
                        node = rank.0,
                        "duplicate or unknown data connection from node {peer} closed"
                    );
                }
                Err(_) => {
                    let missing = (0..num_nodes).filter(|&p| !connected[p as usize]).collect();
                    return Err(StartError::PeersMissing {
                        missing,
                        secs: rendezvous_timeout.as_secs(),
                    });
                }
            }
        }
        self.shared.with_node(|node, now| node.start_liveness(now));
        let timers = spawn_timers(&self.shared, self.stop.clone())?;
        self.threads.push(timers);
        Ok(())
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

    /// Leaves the cluster cleanly: waits until every node has called `shutdown` (so no peer
    /// still needs this node's keys), says goodbye, closes links and joins the node's threads.
    /// Prints the node's counters as one JSON line on stdout and returns them.
    pub fn shutdown(mut self) -> Result<NodeStats, OpError> {
        let control = WorkerId(self.shared.workers_per_node);
        let req = self
            .shared
            .with_node(|node, now| node.issue_node_barrier(now, control));
        let barrier = self.shared.wait_result(control, req).map(drop);
        let stats = NodeStats::collect(&self.shared);
        println!("{}", stats.to_json_line());
        self.close();
        barrier.map(|()| stats)
    }

    fn close(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let shared = &self.shared;
        shared.shutting_down.store(true, Ordering::Release);
        for link in shared.links().filter(|l| l.peer != shared.rank) {
            link.enqueue(Frame::control(Kind::Goodbye, shared.rank, ReqId(0), 0));
            let _ = link.flush();
            link.close();
        }
        shared.peers[&shared.rank].link.close();
        // Our goodbyes are out once the senders end; readers end on the peers' goodbyes (or
        // their loss, which the still running timers detect within the peer timeout).
        for sender in self.senders.drain(..) {
            let _ = sender.join();
        }
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        for link in shared.links() {
            link.shutdown_socket();
        }
        if let Some(addr) = self.acceptor_addr {
            // Wake the acceptor out of `accept`; it sees the shutdown flag and exits.
            let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        self.close();
    }
}

fn connect_peer(
    rank: NodeId,
    peer: u32,
    addr: SocketAddr,
    token: &[u8],
    deadline: Instant,
) -> Result<TcpStream, StartError> {
    let mut delay = Duration::from_millis(5);
    loop {
        let attempt = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| e.to_string())
            .and_then(|mut s| {
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                auth::connect_handshake(&mut s, token, rank.0, Purpose::Data)
                    .map_err(|e| e.to_string())?;
                Ok(s)
            });
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(reason) if Instant::now() + delay >= deadline => {
                return Err(StartError::Connect { peer, addr, reason });
            }
            Err(_) => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(200));
            }
        }
    }
}

/// Accepts data connections for the node's whole life: authenticated ones are handed to the
/// node, anything else is closed and logged while the node keeps running.
fn spawn_acceptor(
    rank: NodeId,
    listener: TcpListener,
    token: Vec<u8>,
    tx: mpsc::Sender<(u32, TcpStream)>,
    stopping: Arc<AtomicBool>,
    slow: Option<&Arc<SlowTasks>>,
) -> std::io::Result<JoinHandle<()>> {
    let token: Arc<[u8]> = token.into();
    // Handshake threads start from this one, so they share its cgroup: no join of their own.
    spawn_named(format!("roam-accept-{}", rank.0), slow, move || {
        let tx = Arc::new(Mutex::new(tx));
        for conn in listener.incoming() {
            if stopping.load(Ordering::Acquire) {
                return;
            }
            let Ok(mut stream) = conn else { continue };
            let (token, tx) = (token.clone(), tx.clone());
            // Handshakes run on their own short-lived thread so a silent client cannot stall
            // the acceptor; the handshake itself is bounded by a read timeout.
            let handshake = std::thread::Builder::new()
                .name("roam-handshake".into())
                .spawn(move || {
                    let peer_addr = stream.peer_addr().ok();
                    match auth::accept_handshake(&mut stream, &token) {
                        Ok(hello) if hello.purpose == Purpose::Data => {
                            let _ = stream.set_nodelay(true);
                            if tx.lock().send((hello.rank, stream)).is_err() {
                                tracing::warn!(
                                    node = rank.0,
                                    "late data connection from node {} closed",
                                    hello.rank
                                );
                            }
                        }
                        Ok(hello) => tracing::warn!(
                            node = rank.0,
                            "connection from {peer_addr:?} with purpose {:?} closed",
                            hello.purpose
                        ),
                        Err(err) => tracing::warn!(
                            node = rank.0,
                            "rejected connection from {peer_addr:?}: {err}"
                        ),
                    }
                });
            if handshake.is_err() {
                tracing::warn!(
                    node = rank.0,
                    "could not spawn a handshake thread; connection dropped"
                );
            }
        }
    })
}

/// Reads `peer`'s frames into the core until the connection ends. A silent peer is the core's
/// to detect (its timers), so reads block without a timeout.
fn spawn_reader(
    shared: &Arc<Shared>,
    peer: NodeId,
    stream: TcpStream,
) -> std::io::Result<JoinHandle<()>> {
    shared.incoming.lock().insert(peer, stream.try_clone()?);
    let shared = shared.clone();
    let slow = shared.slow_tasks.clone();
    spawn_named(format!("roam-read-{}", peer.0), slow.as_ref(), move || {
        let mut reader = BufReader::with_capacity(1 << 16, stream);
        let mut debt = Duration::ZERO;
        loop {
            match read_frame(&mut reader, &shared.limits) {
                Ok(frame) => {
                    roam_core::stats::add(&shared.counters.messages_received, 1);
                    roam_core::stats::add(&shared.counters.bytes_received, frame.wire_len() as u64);
                    if frame.header.kind == Kind::Goodbye {
                        if let Some(state) = shared.peer(peer) {
                            state.departed.store(true, Ordering::Release);
                            state.lost.store(true, Ordering::Release);
                        }
                        shared.with_node(|node, now| node.handle_peer_departed(now, peer));
                        return;
                    }
                    let slowed = shared
                        .service
                        .as_ref()
                        .filter(|_| ServiceSlowdown::slows(frame.header.kind));
                    let Some(service) = slowed else {
                        shared.with_node(|node, now| node.handle_frame(now, peer, frame));
                        continue;
                    };
                    let took = shared.with_node(|node, now| {
                        let start = Instant::now();
                        node.handle_frame(now, peer, frame);
                        start.elapsed()
                    });
                    let sleep = service.owe(&mut debt, took);
                    if !sleep.is_zero() {
                        std::thread::sleep(sleep);
                    }
                }
                Err(err) => {
                    shared.peer_lost(peer, &err.to_string());
                    return;
                }
            }
        }
    })
}

fn spawn_loopback(
    shared: &Arc<Shared>,
    rx: mpsc::Receiver<Frame>,
    stop: Arc<(Mutex<bool>, Condvar)>,
) -> std::io::Result<JoinHandle<()>> {
    let shared = shared.clone();
    let name = format!("roam-server-{}", shared.rank.0);
    let slow = shared.slow_tasks.clone();
    spawn_named(name, slow.as_ref(), move || {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(frame) => {
                    roam_core::stats::add(&shared.counters.messages_received, 1);
                    roam_core::stats::add(&shared.counters.bytes_received, frame.wire_len() as u64);
                    let rank = shared.rank;
                    shared.with_node(|node, now| node.handle_frame(now, rank, frame));
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !*stop.0.lock() => {}
                Err(_) => return,
            }
        }
    })
}

/// Runs the core's timers: sleeps until the deadline the core names (or until stopped), then
/// lets the core act (heartbeats, silence timeouts, replica sync rounds, load reports). Activity only moves deadlines later, so
/// sleeping until the one read before is never late.
fn spawn_timers(
    shared: &Arc<Shared>,
    stop: Arc<(Mutex<bool>, Condvar)>,
) -> std::io::Result<JoinHandle<()>> {
    let shared = shared.clone();
    let name = format!("roam-timers-{}", shared.rank.0);
    let slow = shared.slow_tasks.clone();
    spawn_named(name, slow.as_ref(), move || {
        loop {
            let deadline = shared.with_node(|node, _| node.poll_timeout());
            let wait = match deadline {
                Some(at) => Duration::from_nanos(at.0.saturating_sub(shared.now().0)),
                None => Duration::from_secs(1),
            };
            let mut stopped = stop.0.lock();
            if !*stopped && !wait.is_zero() {
                stop.1.wait_for(&mut stopped, wait);
            }
            if *stopped {
                return;
            }
            drop(stopped);
            let (found, decided) = shared.with_node(|node, now| {
                let before = node.straggler_events().len();
                let decided_before =
                    node.balance_decisions().len() as u64 + node.balance_decisions_dropped();
                node.handle_timeout(now);
                let decided_now =
                    node.balance_decisions().len() as u64 + node.balance_decisions_dropped();
                let new = (decided_now - decided_before) as usize;
                let decisions = node.balance_decisions();
                (
                    node.straggler_events()[before..].to_vec(),
                    decisions[decisions.len().saturating_sub(new)..].to_vec(),
                )
            });
            for d in decided {
                // Every balancer decision is logged with its evidence (also in the stats).
                let (before, after) = d.weight;
                let (buckets, bytes) = d.moves;
                let (ops_before, ops_after) = d.ops_per_round;
                tracing::info!(
                    node = shared.rank.0,
                    "balancer: {:?} {}: weight {before:.3} -> {after:.3}, {buckets} buckets \
                     ({bytes} bytes) to move; ops per round {ops_before:.0} before, \
                     {ops_after:.0} after; score {}",
                    d.kind,
                    d.node,
                    d.score_ns.map_or("none".into(), |(s, o)| format!(
                        "{:.2} ms against {:.2} ms",
                        s / 1e6,
                        o / 1e6
                    )),
                );
            }
            for e in found {
                // Operators see stragglers come and go as they are decided (also in the stats).
                let (what, ms, others) = (e.node, e.score_ns / 1e6, e.others_ns / 1e6);
                if e.slow {
                    tracing::warn!(
                        node = shared.rank.0,
                        "{what} is a straggler: answers in {ms:.2} ms against {others:.2} ms \
                         for the others (seen by {} nodes)",
                        e.observers
                    );
                } else {
                    // Also a warning: with the default filter an operator sees the end of a
                    // straggler as surely as its start.
                    tracing::warn!(
                        node = shared.rank.0,
                        "{what} recovered: answers in {ms:.2} ms against {others:.2} ms"
                    );
                }
            }
            shared.close_links_lost_by_core();
        }
    })
}
