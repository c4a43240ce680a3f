//! The node's connections to other nodes: dialing and authenticating (`connect_peer`),
//! accepting (`spawn_acceptor`), reading frames into the core (`spawn_reader`, and
//! `spawn_loopback` for the frames a node sends itself), declaring peers lost, and adding a
//! peer while the node runs (`add_peer`, for nodes that join; see `elastic`).
//!
//! A reader hands the core every frame that arrived together (all of it already in the
//! reader's buffer, up to [`MAX_READ_BATCH`]) under one hold of the node lock, so their answers
//! leave in one write per link: a burst costs the peer one wake-up, not one per frame. Frames
//! are still handled one by one and in arrival order, so batching changes no protocol step.
//!
//! Invariants:
//! - Every connection is authenticated with the cluster token before a frame crosses it; a
//!   node joining at run time sends its data address right after its handshake
//!   ([`Purpose::JoinData`]), a fixed-size entry read with a deadline, so the acceptor can dial
//!   back; nothing read from a peer sizes an allocation unchecked.
//! - A peer is added under the node lock, then the peer table's write lock (the order
//!   `Shared::with_node` takes them in), and never once the node is shutting down, so every
//!   link is closed (and its sender thread ends) at shutdown. Frames the core addressed to the
//!   peer before its link existed were parked under the node lock; they go first, in order.

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use roam_core::NodeId;
use roam_core::wire::{Frame, Kind};

use crate::auth::{self, HANDSHAKE_TIMEOUT, Purpose};
use crate::error::StartError;
use crate::rendezvous::{ENTRY_LEN, decode_entry};
use crate::runtime::{Peer, Shared};
use crate::slowing::{ServiceSlowdown, SlowTasks, spawn_named};
use crate::transport::{Link, Sink, buffered_frame, read_frame};

impl Shared {
    /// Declares `peer` gone: every operation waiting on it fails.
    pub(crate) fn peer_lost(&self, peer: NodeId, reason: &str) {
        let Some(state) = self.peer(peer).filter(|_| peer != self.rank) else {
            return;
        };
        if state.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        if !state.departed.load(Ordering::Acquire) && !self.elastic.is_drained() {
            tracing::warn!(
                node = self.rank.0,
                peer = peer.0,
                reason,
                "{peer} lost: {reason}"
            );
        }
        self.end_reader(peer);
        self.with_node(|node, now| node.handle_peer_lost(now, peer));
        self.elastic.notify();
    }

    /// Ends the connections of peers the core declared lost on its own (silence, or another
    /// node's notice), so that their readers stop.
    pub(crate) fn close_links_lost_by_core(&self) {
        let lost: Vec<NodeId> = self.with_node(|node, _| {
            self.links()
                .iter()
                .map(|l| l.peer)
                .filter(|&p| p != self.rank && node.is_lost(p))
                .collect()
        });
        for peer in lost {
            let Some(state) = self.peer(peer) else {
                continue;
            };
            if !state.lost.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    node = self.rank.0,
                    peer = peer.0,
                    reason = "silent or reported lost",
                    "{peer} lost: silent or reported lost"
                );
            }
            self.end_reader(peer);
            self.elastic.notify();
        }
    }

    /// Ends `peer`'s reader, which may be blocked on a connection that is still open.
    pub(crate) fn end_reader(&self, peer: NodeId) {
        if let Some(stream) = self.incoming.lock().remove(&peer) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// An authenticated incoming data connection.
pub(crate) struct Incoming {
    /// The rank the connector proved.
    pub(crate) rank: u32,
    pub(crate) stream: TcpStream,
    /// For a node joining at run time, the data address to dial back to.
    pub(crate) joiner: Option<SocketAddr>,
}

/// Dials `peer` at `addr` and authenticates as `rank` for `purpose`, retrying until
/// `deadline`.
pub(crate) fn connect_peer_for(
    rank: NodeId,
    peer: u32,
    addr: SocketAddr,
    token: &[u8],
    purpose: Purpose,
    deadline: Instant,
) -> Result<TcpStream, StartError> {
    let mut delay = Duration::from_millis(5);
    loop {
        let attempt = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| e.to_string())
            .and_then(|mut s| {
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                auth::connect_handshake(&mut s, token, rank.0, purpose)
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

/// [`connect_peer_for`] a data connection.
pub(crate) fn connect_peer(
    rank: NodeId,
    peer: u32,
    addr: SocketAddr,
    token: &[u8],
    deadline: Instant,
) -> Result<TcpStream, StartError> {
    connect_peer_for(rank, peer, addr, token, Purpose::Data, deadline)
}

/// Accepts data connections for the node's whole life: authenticated ones are handed to the
/// node, anything else is closed and logged while the node keeps running.
pub(crate) fn spawn_acceptor(
    rank: NodeId,
    listener: TcpListener,
    token: Vec<u8>,
    tx: mpsc::Sender<Incoming>,
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
                    let hello = match auth::accept_handshake(&mut stream, &token) {
                        Ok(hello) => hello,
                        Err(err) => {
                            tracing::warn!(
                                node = rank.0,
                                "rejected connection from {peer_addr:?}: {err}"
                            );
                            return;
                        }
                    };
                    let joiner = match hello.purpose {
                        Purpose::Data => None,
                        Purpose::JoinData => match read_joiner_addr(&mut stream) {
                            Ok(addr) => Some(addr),
                            Err(reason) => {
                                tracing::warn!(
                                    node = rank.0,
                                    "joining node {} at {peer_addr:?}: {reason}; closed",
                                    hello.rank
                                );
                                return;
                            }
                        },
                        other => {
                            tracing::warn!(
                                node = rank.0,
                                "connection from {peer_addr:?} with purpose {other:?} closed"
                            );
                            return;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let conn = Incoming {
                        rank: hello.rank,
                        stream,
                        joiner,
                    };
                    if tx.lock().send(conn).is_err() {
                        tracing::warn!(
                            node = rank.0,
                            "late data connection from node {} closed",
                            hello.rank
                        );
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

/// The data address a joining node sends after its handshake (one fixed-size entry).
fn read_joiner_addr(stream: &mut TcpStream) -> Result<SocketAddr, String> {
    let mut entry = [0u8; ENTRY_LEN];
    auth::read_exact_until(stream, &mut entry, Instant::now() + HANDSHAKE_TIMEOUT)
        .map_err(|e| format!("no data address: {e}"))?;
    let addr = decode_entry(&entry).map_err(|e| format!("bad data address: {e}"))?;
    if addr.port() == 0 || addr.ip().is_unspecified() {
        return Err(format!("data address {addr} cannot be connected to"));
    }
    Ok(addr)
}

/// Reads `peer`'s frames into the core until the connection ends. A silent peer is the core's
/// to detect (its timers), so reads block without a timeout.
pub(crate) fn spawn_reader(
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
        // The peer's link exists before its reader starts (`add_peer`, start-up).
        let link = shared.peer(peer).map(|p| p.link.clone());
        let count = |frame: &Frame| {
            roam_core::stats::add(&shared.counters.messages_received, 1);
            roam_core::stats::add(&shared.counters.bytes_received, frame.wire_len() as u64);
            if let Some(link) = &link {
                link.traffic.received(frame.wire_len());
            }
        };
        let mut batch: Vec<Frame> = Vec::new();
        loop {
            let frame = match read_frame(&mut reader, &shared.limits) {
                Ok(frame) => frame,
                Err(err) => {
                    shared.peer_lost(peer, &err.to_string());
                    return;
                }
            };
            count(&frame);
            if frame.header.kind == Kind::Goodbye {
                say_goodbye(&shared, peer);
                return;
            }
            let slowed = shared
                .service
                .as_ref()
                .filter(|_| ServiceSlowdown::slows(frame.header.kind));
            if let Some(service) = slowed {
                let read_at = Instant::now();
                let (handled, took) = crate::events::handle_frame(&shared, peer, frame, true);
                let sleep = service.owe(&mut debt, took.unwrap_or_default());
                if !sleep.is_zero() {
                    std::thread::sleep(sleep);
                }
                // The delay is this slowed server's service time too.
                note_service(&shared, read_at, handled, sleep);
                continue;
            }
            // The frames that arrived with this one are handled together (one lock, one write
            // per link for all their answers); a slowed request or a goodbye ends the batch, and
            // is read next on its own.
            batch.push(frame);
            while batch.len() < MAX_READ_BATCH
                && buffered_frame(reader.buffer(), &shared.limits)
                    .is_some_and(|kind| !ends_batch(&shared, kind))
            {
                match read_frame(&mut reader, &shared.limits) {
                    Ok(frame) => {
                        count(&frame);
                        batch.push(frame);
                    }
                    // Not reached: the whole frame was buffered and its header decoded.
                    Err(_) => break,
                }
            }
            let read_at = Instant::now();
            let handled = crate::events::handle_frames(&shared, peer, &mut batch);
            note_service(&shared, read_at, handled, Duration::ZERO);
        }
    })
}

/// Adds the serving of frames read at `read_at` and handled as `handled` says (with a slowed
/// node's service delay `delay` after them) to the node's service counters, which its load
/// reports carry (`roam_core::load_service`): the keys they served, busy for the core's time
/// on them plus the delay, queued from `read_at` until the node lock was held. The lock wait
/// is reported on its own and not in the busy time: on a shared machine it mostly measures
/// which other thread held the lock or the core (measured: with it, healthy nodes' capacities
/// spread up to 3.5x under load, without it 1.3-1.7x). Only when they served keys here.
fn note_service(
    shared: &Shared,
    read_at: Instant,
    handled: crate::events::Handled,
    delay: Duration,
) {
    if handled.served == 0 {
        return;
    }
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let queued = handled.locked_at.saturating_duration_since(read_at);
    let counters = &shared.counters;
    roam_core::stats::add(&counters.service_keys, handled.served);
    roam_core::stats::add(&counters.service_busy_ns, ns(handled.serving + delay));
    roam_core::stats::add(&counters.service_queue_ns, ns(queued));
}

/// Most frames a reader hands the core under one hold of the node lock: bounds how long a
/// burst keeps workers from the lock.
const MAX_READ_BATCH: usize = 64;

/// Whether a frame of wire kind `kind` must be handled on its own, after the batch before it:
/// a goodbye ends the reader, and a request the service slowdown delays owes its own sleep.
fn ends_batch(shared: &Shared, kind: Kind) -> bool {
    kind == Kind::Goodbye || (shared.service.is_some() && ServiceSlowdown::slows(kind))
}

/// The peer said goodbye: it sends nothing more, and leaving is not a failure.
fn say_goodbye(shared: &Arc<Shared>, peer: NodeId) {
    tracing::debug!(node = shared.rank.0, peer = peer.0, "peer said goodbye");
    if let Some(state) = shared.peer(peer) {
        state.departed.store(true, Ordering::Release);
        state.lost.store(true, Ordering::Release);
    }
    shared.with_node(|node, now| node.handle_peer_departed(now, peer));
    shared.elastic.notify();
}

/// Adds node `peer` while this node runs: a link on `outgoing` (with its sender thread), then
/// a reader on `incoming`. Fails if it already has a link or the node is shutting down.
pub(crate) fn add_peer(
    shared: &Arc<Shared>,
    peer: NodeId,
    outgoing: TcpStream,
    incoming: TcpStream,
) -> Result<(), String> {
    let latency = Duration::from_micros(shared.latency_us);
    let link = Link::new(peer, Sink::Tcp(outgoing), latency, shared.counters.clone())
        .map(Arc::new)
        .map_err(|e| format!("link setup: {e}"))?;
    {
        let _node = shared.node.lock();
        let mut peers = shared.peers.write();
        if shared.shutting_down.load(Ordering::Acquire) {
            return Err("this node is shutting down".into());
        }
        if peers.contains_key(&peer) {
            return Err("it already has a link".into());
        }
        peers.insert(peer, Arc::new(Peer::new(link.clone())));
        let parked = shared.parked.lock().remove(&peer).unwrap_or_default();
        for frame in parked {
            link.enqueue(frame);
        }
    }
    if let Err(err) = link.flush() {
        shared.peer_lost(peer, &format!("write failed: {err}"));
    }
    let sh = shared.clone();
    let sending = link.clone();
    let sender = spawn_named(
        format!("roam-send-{}", peer.0),
        shared.slow_tasks.as_ref(),
        move || {
            if let Err(err) = sending.run_sender() {
                sh.peer_lost(sending.peer, &format!("write failed: {err}"));
            }
        },
    )
    .map_err(|e| format!("sender thread: {e}"))?;
    shared.elastic.push_sender(sender);
    let reader = spawn_reader(shared, peer, incoming).map_err(|e| format!("reader: {e}"))?;
    shared.elastic.push_reader(reader);
    Ok(())
}

pub(crate) fn spawn_loopback(
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
                    crate::events::handle_frame(&shared, shared.rank, frame, false);
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !*stop.0.lock() => {}
                Err(_) => return,
            }
        }
    })
}
