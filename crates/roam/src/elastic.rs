//! Elastic membership in the TCP shell (the protocol is `roam_core::membership`): nodes that
//! join a running cluster as servers, nodes drained out of it, and the coordinator's service
//! for both.
//!
//! This module owns:
//! - the **join service**: rank 0 keeps accepting on its coordinator (rendezvous) address after
//!   start-up. A [`Purpose::Join`] connection sends its data address and gets a new rank (the
//!   initial node count, then one more per join, never reused), the initial node count and the
//!   data address of every member; a [`Purpose::Drain`] connection (`roam drain`) names a rank
//!   and gets the outcome of draining it.
//! - **joining** ([`join_network`], [`connect_as_joiner`], [`await_admission`]): the new node
//!   registers, dials every member with its data address after the handshake
//!   ([`Purpose::JoinData`]), waits until every member dialled back (so it can send to and
//!   receive from each), then asks the core to join and waits for its admission or refusal.
//! - the **membership thread** of every multi-node node: it dials back to joining nodes and
//!   adds them as peers (`peers::add_peer`), and turns SIGUSR1 into a drain of this node.
//! - membership **events** from the core (admitted, refused, joined, left, drained) and the
//!   waits on them ([`Shared::wait_until_done`]).
//!
//! Invariants: joins are served one at a time (the next starts once the previous joiner said
//! whether it was admitted, or gave up, or the join timeout passed), so every joiner's list of
//! members includes every earlier joiner and every member it must talk to has dialled back
//! before the core can address it; every count and length read from a peer is checked against
//! [`MAX_NODES`] / [`MAX_MESSAGE`] before anything is allocated, and bad input ends that
//! connection with a logged error, never a panic.
//!
//! Wire format after the handshake (integers little-endian, address entries as in
//! `rendezvous`): join: → entry; ← rank u32, initial node count u32, member count u32, then per
//! member rank u32 and entry; → outcome byte (1 admitted, 0 not). Drain: → rank u32; ← status
//! byte (0 done, 1 failed), message length u16, message (UTF-8).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use roam_core::{JoinRefusal, MembershipEvent, NodeId, OpError, WorkerId};

use crate::auth::{self, HANDSHAKE_TIMEOUT, Purpose};
use crate::cluster_env::ClusterEnv;
use crate::error::StartError;
use crate::peers::{Incoming, add_peer, connect_peer, connect_peer_for};
use crate::rendezvous::{self, ENTRY_LEN, MAX_NODES, decode_entry, encode_entry};
use crate::runtime::Shared;
use crate::slowing::spawn_named;

/// Longest message a drain reply carries.
pub const MAX_MESSAGE: usize = 1024;
/// Rank a client of the service claims in its handshake (it has none yet).
const NO_RANK: u32 = u32::MAX;
/// How long dialling back to a joining node may take.
const DIAL_BACK_TIMEOUT: Duration = Duration::from_secs(10);
/// First and longest wait before a join turned away unanswered is tried again.
const JOIN_RETRY_FIRST: Duration = Duration::from_millis(50);
const JOIN_RETRY_MAX: Duration = Duration::from_secs(1);
/// How often the service and the membership thread look at their stop flags.
const POLL: Duration = Duration::from_millis(20);

static DRAIN_SIGNAL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigusr1(_: libc::c_int) {
    DRAIN_SIGNAL.store(true, Ordering::Relaxed);
}

/// Makes SIGUSR1 ask the coordinator to drain the node running in this process (once per
/// signal); its membership thread issues the drain. Process-wide; call once, early.
pub fn drain_on_sigusr1() -> io::Result<()> {
    let handler = on_sigusr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    let previous = unsafe { libc::signal(libc::SIGUSR1, handler) };
    if previous == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The shell's membership state, part of `Shared`.
pub(crate) struct Elastic {
    /// This node joined a running cluster (a server with no workers).
    pub(crate) joined: bool,
    token: Arc<[u8]>,
    /// Data addresses of the nodes this node knows (the coordinator's table for joiners).
    addrs: Mutex<BTreeMap<NodeId, SocketAddr>>,
    /// How long a join may take (the rendezvous timeout).
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
    senders: Mutex<Vec<JoinHandle<()>>>,
    readers: Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    admission: Option<Result<(), JoinRefusal>>,
    drained: bool,
}

impl Elastic {
    pub(crate) fn new(
        joined: bool,
        token: Vec<u8>,
        addrs: BTreeMap<NodeId, SocketAddr>,
        timeout: Duration,
    ) -> Self {
        Self {
            joined,
            token: token.into(),
            addrs: Mutex::new(addrs),
            timeout,
            state: Mutex::default(),
            changed: Condvar::new(),
            senders: Mutex::default(),
            readers: Mutex::default(),
        }
    }

    /// Wakes the waits on membership (a peer departed or was lost, an event arrived).
    pub(crate) fn notify(&self) {
        let _state = self.state.lock();
        self.changed.notify_all();
    }

    /// Whether this node was drained (it is no member any more).
    pub(crate) fn is_drained(&self) -> bool {
        self.state.lock().drained
    }

    pub(crate) fn push_sender(&self, thread: JoinHandle<()>) {
        self.senders.lock().push(thread);
    }

    pub(crate) fn push_reader(&self, thread: JoinHandle<()>) {
        self.readers.lock().push(thread);
    }

    /// The sender and reader threads of peers added at run time, for shutdown to join.
    pub(crate) fn take_threads(&self) -> (Vec<JoinHandle<()>>, Vec<JoinHandle<()>>) {
        (
            std::mem::take(&mut *self.senders.lock()),
            std::mem::take(&mut *self.readers.lock()),
        )
    }
}

/// What start-up learnt about the network before the node's threads run.
pub(crate) struct Network {
    pub(crate) rank: u32,
    /// The cluster's initial node count.
    pub(crate) num_nodes: u32,
    /// A joining node's data listener.
    pub(crate) listener: Option<TcpListener>,
    pub(crate) addrs: BTreeMap<NodeId, SocketAddr>,
    /// Ranks that must connect to this node (and that it connects to).
    pub(crate) expected: BTreeSet<u32>,
    pub(crate) outgoing: BTreeMap<u32, TcpStream>,
    /// A joining node's connection to the join service, for its outcome.
    pub(crate) join_stream: Option<TcpStream>,
}

impl Network {
    /// A node of the initial cluster, before the rendezvous.
    pub(crate) fn single(rank: u32, num_nodes: u32) -> Self {
        Self {
            rank,
            num_nodes,
            listener: None,
            addrs: BTreeMap::new(),
            expected: BTreeSet::new(),
            outgoing: BTreeMap::new(),
            join_stream: None,
        }
    }
}

impl Shared {
    /// Carries out the core's membership events (called outside the node lock).
    pub(crate) fn on_membership(&self, events: Vec<MembershipEvent>) {
        let rank = self.rank.0;
        let mut state = self.elastic.state.lock();
        for event in events {
            match event {
                MembershipEvent::Admitted => {
                    tracing::info!(node = rank, "admitted to the cluster");
                    state.admission = Some(Ok(()));
                }
                MembershipEvent::Refused(reason) => {
                    tracing::warn!(node = rank, "join refused: {reason}");
                    state.admission = Some(Err(reason));
                }
                MembershipEvent::Joined(node) => {
                    tracing::info!(node = rank, "{node} joined");
                    if self.peer(node).is_none() {
                        tracing::warn!(node = rank, "{node} joined but has no link yet");
                    }
                }
                MembershipEvent::Left(node) => {
                    tracing::info!(node = rank, "{node} left (drained)");
                    if let Some(peer) = self.peer(node) {
                        // Its connection closing is no loss.
                        peer.departed.store(true, Ordering::Release);
                    }
                    self.elastic.addrs.lock().remove(&node);
                }
                MembershipEvent::JoinDropped(node) => {
                    tracing::warn!(
                        node = rank,
                        "the join of {node} was dropped: its connection ended before it was \
                         admitted"
                    );
                    self.elastic.addrs.lock().remove(&node);
                }
                MembershipEvent::Drained => {
                    tracing::info!(node = rank, "drained: leaving the cluster");
                    state.drained = true;
                }
            }
        }
        self.elastic.changed.notify_all();
    }

    /// Whether the core counts this node as a member.
    pub(crate) fn is_member(&self) -> bool {
        self.with_node(|core, _| core.is_member())
    }

    /// Asks the coordinator to drain `node`, through the node-level slot; see
    /// [`crate::NodeHandle::drain`].
    pub(crate) fn drain(&self, node: NodeId) -> Result<(), OpError> {
        let control = WorkerId(self.workers_per_node);
        let req = self.with_node(|core, now| core.issue_drain(now, control, node));
        self.wait_result(control, req).map(drop)
    }

    /// See [`crate::NodeHandle::wait_until_done`].
    pub(crate) fn wait_until_done(&self) -> Result<(), OpError> {
        loop {
            if self.elastic.is_drained() {
                return Ok(());
            }
            let members = self.with_node(|core, _| core.directory().members().to_vec());
            let mut running = false;
            // Only the initial members run the job: joined servers wait for it like this one,
            // so waiting for them too would never end with two of them left.
            let initial = |m: &NodeId| m.0 < self.num_nodes;
            for member in members
                .into_iter()
                .filter(|m| *m != self.rank && initial(m))
            {
                match self.peer(member) {
                    Some(p) if p.departed.load(Ordering::Acquire) => {}
                    Some(p) if p.lost.load(Ordering::Acquire) => {
                        return Err(OpError::PeerGone { peer: member });
                    }
                    _ => running = true,
                }
            }
            if !running {
                return Ok(());
            }
            let mut state = self.elastic.state.lock();
            if !state.drained {
                // Bounded: departures are also re-checked now and then.
                self.elastic
                    .changed
                    .wait_for(&mut state, Duration::from_millis(200));
            }
        }
    }
}

fn service_error(coordinator: &str, reason: impl ToString) -> StartError {
    StartError::JoinService {
        coordinator: coordinator.to_owned(),
        reason: reason.to_string(),
    }
}

/// Registers with the coordinator's join service: binds this node's data listener and learns
/// its rank, the initial node count and every member's data address. A coordinator that closes
/// the connection before answering (its cluster is still starting up, and its rendezvous turns
/// joins away) is asked again, with backoff, until `timeout`.
pub(crate) fn join_network(
    coordinator: &str,
    token: &[u8],
    timeout: Duration,
) -> Result<Network, StartError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = JOIN_RETRY_FIRST;
    loop {
        let closed = std::cell::Cell::new(false);
        match join_once(coordinator, token, timeout, deadline, &closed) {
            Err(_) if closed.get() && Instant::now() + backoff < deadline => {
                tracing::info!(
                    "the coordinator {coordinator} turned the join away before answering (is its \
                     cluster still starting?); asking again in {} ms",
                    backoff.as_millis()
                );
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(JOIN_RETRY_MAX);
            }
            result => return result,
        }
    }
}

/// One attempt of [`join_network`]; sets `closed` if the coordinator closed the connection
/// before its reply began.
fn join_once(
    coordinator: &str,
    token: &[u8],
    timeout: Duration,
    deadline: Instant,
    closed: &std::cell::Cell<bool>,
) -> Result<Network, StartError> {
    let env = ClusterEnv {
        rank: NO_RANK,
        num_nodes: 2,
        coordinator: coordinator.to_owned(),
    };
    let fail = |reason: String| service_error(coordinator, reason);
    let mut stream = rendezvous::connect_coordinator(&env, token, Purpose::Join, timeout, deadline)
        .map_err(|e| fail(e.to_string()))?;
    let local_ip = stream.local_addr()?.ip();
    let listener = rendezvous::bind_data(local_ip)?;
    let data_addr = listener.local_addr()?;
    auth::write_all_until(&mut stream, &encode_entry(data_addr), deadline)
        .map_err(|e| fail(format!("sending this node's data address: {e}")))?;
    let read_err = |e: io::Error| {
        if auth::is_closed(&e) {
            fail(
                "the coordinator closed the connection (is the cluster up and serving joins?)"
                    .into(),
            )
        } else {
            fail(format!("reading the reply: {e}"))
        }
    };
    let mut header = [0u8; 12];
    auth::read_exact_until(&mut stream, &mut header, deadline).map_err(|e| {
        closed.set(auth::is_closed(&e));
        read_err(e)
    })?;
    let word = |i: usize| u32::from_le_bytes(header[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
    let (rank, num_nodes, count) = (word(0), word(1), word(2));
    if num_nodes == 0 || num_nodes > MAX_NODES || rank < num_nodes || rank == NO_RANK {
        return Err(fail(format!(
            "it assigned rank {rank} in a cluster of initially {num_nodes} nodes"
        )));
    }
    if count == 0 || count > MAX_NODES {
        return Err(fail(format!("it lists {count} members")));
    }
    // `count` is at most MAX_NODES, which bounds this allocation.
    let mut body = vec![0u8; count as usize * (4 + ENTRY_LEN)];
    auth::read_exact_until(&mut stream, &mut body, deadline).map_err(read_err)?;
    let mut addrs = BTreeMap::new();
    for item in body.chunks_exact(4 + ENTRY_LEN) {
        let member = u32::from_le_bytes(item[..4].try_into().expect("4 bytes"));
        let addr = decode_entry(&item[4..]).map_err(|e| fail(format!("member {member}: {e}")))?;
        if member >= rank || addrs.insert(NodeId(member), addr).is_some() {
            return Err(fail(format!("it lists member {member} wrongly or twice")));
        }
    }
    if !addrs.contains_key(&NodeId(0)) {
        return Err(fail("its member list lacks the coordinator".into()));
    }
    tracing::info!(
        node = rank,
        "joining: {count} members, initially {num_nodes} nodes"
    );
    Ok(Network {
        rank,
        num_nodes,
        listener: Some(listener),
        expected: addrs.keys().map(|n| n.0).collect(),
        addrs,
        outgoing: BTreeMap::new(),
        join_stream: Some(stream),
    })
}

/// A joining node's data connection to member `peer`: authenticated for
/// [`Purpose::JoinData`], followed by this node's data address (the member dials back).
pub(crate) fn connect_as_joiner(
    rank: NodeId,
    peer: u32,
    addr: SocketAddr,
    token: &[u8],
    own: Option<SocketAddr>,
    deadline: Instant,
) -> Result<TcpStream, StartError> {
    let own = own.expect("a joining node listens");
    let mut stream = connect_peer_for(rank, peer, addr, token, Purpose::JoinData, deadline)?;
    auth::write_all_until(&mut stream, &encode_entry(own), deadline).map_err(|e| {
        StartError::Connect {
            peer,
            addr,
            reason: format!("sending this node's data address: {e}"),
        }
    })?;
    Ok(stream)
}

/// Asks the core to join, then waits (until `deadline`) for the admission or the refusal, and
/// tells the join service the outcome.
pub(crate) fn await_admission(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), StartError> {
    shared.with_node(|core, now| core.start_join(now));
    let outcome = {
        let mut state = shared.elastic.state.lock();
        while state.admission.is_none() && Instant::now() < deadline {
            shared.elastic.changed.wait_until(&mut state, deadline);
        }
        state.admission
    };
    let byte = [u8::from(outcome == Some(Ok(())))];
    let _ = auth::write_all_until(&mut stream, &byte, Instant::now() + HANDSHAKE_TIMEOUT);
    let rank = shared.rank.0;
    match outcome {
        Some(Ok(())) => Ok(()),
        Some(Err(reason)) => Err(StartError::JoinRefused { rank, reason }),
        None => Err(StartError::NotAdmitted {
            rank,
            secs: timeout.as_secs(),
        }),
    }
}

/// Starts the membership thread: links nodes joining at run time (dialling back to them) and
/// turns SIGUSR1 into a drain of this node.
pub(crate) fn spawn_membership_thread(
    shared: &Arc<Shared>,
    rx: mpsc::Receiver<Incoming>,
    early: Vec<Incoming>,
    stop: &Arc<(Mutex<bool>, parking_lot::Condvar)>,
) -> io::Result<JoinHandle<()>> {
    let (shared, stop) = (shared.clone(), stop.clone());
    let name = format!("roam-members-{}", shared.rank.0);
    let slow = shared.slow_tasks.clone();
    spawn_named(name, slow.as_ref(), move || {
        for conn in early {
            link_joiner(&shared, conn);
        }
        loop {
            match rx.recv_timeout(POLL * 5) {
                Ok(conn) => link_joiner(&shared, conn),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if *stop.0.lock() || shared.shutting_down.load(Ordering::Acquire) {
                return;
            }
            if DRAIN_SIGNAL.swap(false, Ordering::Relaxed) {
                drain_self(&shared);
            }
        }
    })
}

/// SIGUSR1: asks to drain this node, on a thread of its own (a drain takes a while).
fn drain_self(shared: &Arc<Shared>) {
    let sh = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("roam-drain-self".into())
        .spawn(move || {
            tracing::info!(node = sh.rank.0, "SIGUSR1: asking to drain this node");
            match sh.drain(sh.rank) {
                Ok(()) => tracing::info!(node = sh.rank.0, "drain done"),
                Err(err) => tracing::warn!(node = sh.rank.0, "drain failed: {err}"),
            }
        });
    if let Err(err) = spawned {
        tracing::warn!(
            node = shared.rank.0,
            "SIGUSR1 ignored: no thread for the drain: {err}"
        );
    }
}

/// A data connection after start-up: from a joining node, dial back and add it as a peer.
fn link_joiner(shared: &Arc<Shared>, conn: Incoming) {
    let rank = shared.rank.0;
    let Incoming {
        rank: peer,
        stream,
        joiner,
    } = conn;
    let Some(addr) = joiner else {
        tracing::warn!(node = rank, "late data connection from node {peer} closed");
        return;
    };
    if peer < shared.num_nodes || peer == NO_RANK || shared.peer(NodeId(peer)).is_some() {
        tracing::warn!(
            node = rank,
            "joining node {peer} is or was a member: closed"
        );
        return;
    }
    let deadline = Instant::now() + DIAL_BACK_TIMEOUT;
    let added = connect_peer(shared.rank, peer, addr, &shared.elastic.token, deadline)
        .map_err(|e| e.to_string())
        .and_then(|outgoing| add_peer(shared, NodeId(peer), outgoing, stream));
    match added {
        Ok(()) => tracing::info!(node = rank, "linked joining node {peer} at {addr}"),
        Err(err) => tracing::warn!(node = rank, "could not link joining node {peer}: {err}"),
    }
}

/// Starts rank 0's join service on its coordinator listener (non-blocking, polled).
pub(crate) fn spawn_join_service(
    shared: &Arc<Shared>,
    listener: TcpListener,
) -> io::Result<JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let shared = shared.clone();
    // One join at a time; the value is the next rank to give out.
    let next_rank = Arc::new(Mutex::new(shared.num_nodes));
    let slow = shared.slow_tasks.clone();
    spawn_named("roam-join-service".into(), slow.as_ref(), move || {
        loop {
            if shared.shutting_down.load(Ordering::Acquire) {
                return;
            }
            match listener.accept() {
                Ok((stream, from)) => {
                    let (sh, next) = (shared.clone(), next_rank.clone());
                    let spawned = std::thread::Builder::new()
                        .name("roam-join-request".into())
                        .spawn(move || {
                            if let Err(err) = serve(&sh, stream, &next) {
                                tracing::warn!(node = sh.rank.0, %from, "join service: {err}");
                            }
                        });
                    if let Err(err) = spawned {
                        tracing::warn!(node = shared.rank.0, "join service: no thread: {err}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(node = shared.rank.0, "join service: accept failed: {e}");
                    std::thread::sleep(POLL);
                }
            }
        }
    })
}

/// One connection to the service.
fn serve(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    next_rank: &Mutex<u32>,
) -> Result<(), String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    let hello =
        auth::accept_handshake(&mut stream, &shared.elastic.token).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    match hello.purpose {
        Purpose::Join => {
            let mut entry = [0u8; ENTRY_LEN];
            auth::read_exact_until(&mut stream, &mut entry, deadline)
                .map_err(|e| format!("no data address: {e}"))?;
            let addr = decode_entry(&entry)?;
            if addr.port() == 0 || addr.ip().is_unspecified() {
                return Err(format!("data address {addr} cannot be connected to"));
            }
            serve_join(shared, stream, addr, next_rank)
        }
        Purpose::Drain => {
            let mut word = [0u8; 4];
            auth::read_exact_until(&mut stream, &mut word, deadline)
                .map_err(|e| format!("no rank to drain: {e}"))?;
            let rank = u32::from_le_bytes(word);
            tracing::info!(
                node = shared.rank.0,
                "join service: draining {rank} on request"
            );
            let (status, message) = match shared.drain(NodeId(rank)) {
                Ok(()) => (0u8, format!("node {rank} was drained and left")),
                Err(err) => (1u8, err.to_string()),
            };
            let mut reply = vec![status];
            let message = truncate(&message, MAX_MESSAGE);
            reply.extend_from_slice(&(message.len() as u16).to_le_bytes());
            reply.extend_from_slice(message.as_bytes());
            auth::write_all_until(&mut stream, &reply, Instant::now() + HANDSHAKE_TIMEOUT)
                .map_err(|e| format!("sending the drain outcome: {e}"))
        }
        other => Err(format!("purpose {other:?} is not served here")),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn serve_join(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    addr: SocketAddr,
    next_rank: &Mutex<u32>,
) -> Result<(), String> {
    // Held until this joiner's outcome: joins are served one at a time.
    let mut next = next_rank.lock();
    if shared.shutting_down.load(Ordering::Acquire) {
        return Err("the coordinator is shutting down".into());
    }
    let rank = *next;
    if rank == NO_RANK {
        return Err("no ranks left".into());
    }
    *next += 1;
    let members = shared.with_node(|core, _| core.directory().members().to_vec());
    let mut reply = Vec::with_capacity(12 + members.len() * (4 + ENTRY_LEN));
    reply.extend_from_slice(&rank.to_le_bytes());
    reply.extend_from_slice(&shared.num_nodes.to_le_bytes());
    reply.extend_from_slice(&(members.len() as u32).to_le_bytes());
    {
        let addrs = shared.elastic.addrs.lock();
        for member in &members {
            let Some(&a) = addrs.get(member) else {
                return Err(format!("no data address known for member {member}"));
            };
            reply.extend_from_slice(&member.0.to_le_bytes());
            reply.extend_from_slice(&encode_entry(a));
        }
    }
    shared.elastic.addrs.lock().insert(NodeId(rank), addr);
    tracing::info!(
        node = shared.rank.0,
        "join service: {addr} gets rank {rank}"
    );
    auth::write_all_until(&mut stream, &reply, Instant::now() + HANDSHAKE_TIMEOUT)
        .map_err(|e| format!("sending rank {rank} its table: {e}"))?;
    let mut outcome = [0u8; 1];
    let waited = Instant::now() + shared.elastic.timeout + DIAL_BACK_TIMEOUT;
    match auth::read_exact_until(&mut stream, &mut outcome, waited) {
        Ok(()) if outcome[0] == 1 => {
            tracing::info!(node = shared.rank.0, "join service: rank {rank} admitted");
            Ok(())
        }
        Ok(()) => Err(format!("rank {rank} was not admitted")),
        Err(e) => Err(format!("rank {rank} gave no outcome: {e}")),
    }
}

/// Why [`request_drain`] failed.
#[derive(Debug, thiserror::Error)]
pub enum DrainRequestError {
    /// The coordinator's service could not be reached or answered garbage.
    #[error("the coordinator's service at {coordinator}: {reason}")]
    Service {
        /// The coordinator address.
        coordinator: String,
        /// What went wrong.
        reason: String,
    },
    /// The coordinator tried and the drain failed (or was refused).
    #[error("draining node {rank} failed: {reason}")]
    Failed {
        /// The node.
        rank: u32,
        /// The coordinator's reason.
        reason: String,
    },
}

/// Asks the coordinator's service at `coordinator` to drain node `rank`, waiting up to
/// `timeout` for the outcome (`roam drain`). Returns the coordinator's message.
pub fn request_drain(
    coordinator: &str,
    token: &[u8],
    rank: u32,
    timeout: Duration,
) -> Result<String, DrainRequestError> {
    let deadline = Instant::now() + timeout;
    let fail = |reason: String| DrainRequestError::Service {
        coordinator: coordinator.to_owned(),
        reason,
    };
    let env = ClusterEnv {
        rank: NO_RANK,
        num_nodes: 2,
        coordinator: coordinator.to_owned(),
    };
    let connect_for = timeout.min(Duration::from_secs(10));
    let mut stream = rendezvous::connect_coordinator(
        &env,
        token,
        Purpose::Drain,
        connect_for,
        Instant::now() + connect_for,
    )
    .map_err(|e| fail(e.to_string()))?;
    auth::write_all_until(&mut stream, &rank.to_le_bytes(), deadline)
        .map_err(|e| fail(format!("sending the request: {e}")))?;
    let mut header = [0u8; 3];
    auth::read_exact_until(&mut stream, &mut header, deadline)
        .map_err(|e| fail(format!("no answer: {e}")))?;
    let len = usize::from(u16::from_le_bytes([header[1], header[2]]));
    if len > MAX_MESSAGE {
        return Err(fail(format!(
            "answer of {len} bytes (at most {MAX_MESSAGE})"
        )));
    }
    let mut message = vec![0u8; len];
    auth::read_exact_until(&mut stream, &mut message, deadline)
        .map_err(|e| fail(format!("truncated answer: {e}")))?;
    let message = String::from_utf8_lossy(&message).into_owned();
    match header[0] {
        0 => Ok(message),
        1 => Err(DrainRequestError::Failed {
            rank,
            reason: message,
        }),
        other => Err(fail(format!("unknown status {other}"))),
    }
}
