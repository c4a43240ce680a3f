//! Rank 0's side of the start-up rendezvous (`rendezvous.rs` has the protocol, the wire format
//! and the other ranks' side): bind the coordinator address, accept and authenticate
//! registrations, each on its own short-lived thread, and hand the table to every node.
//!
//! Invariants: the coordinator keeps waiting through unauthenticated, malformed, duplicate and
//! out-of-range registrations (each is logged and dropped, never fatal); at most
//! [`MAX_IN_FLIGHT`] registrations are authenticated at once (more wait in the kernel's
//! backlog), so a silent client cannot stall the others; everything ends by the caller's
//! deadline with an error naming the ranks that never registered.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use super::{
    ENTRY_LEN, FIRST_BACKOFF, RankList, Rendezvous, RendezvousError, bind_data, decode_entry,
    encode_table, local_addr, resolve_coordinator,
};
use crate::auth::{self, AuthError, HANDSHAKE_TIMEOUT, Purpose};
use crate::cluster_env::ClusterEnv;

/// Registrations being authenticated at once; more wait in the kernel's accept backlog.
const MAX_IN_FLIGHT: usize = 64;
/// How often the coordinator checks for new connections and its deadline.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Rank 0: collect registrations, then hand out the table.
pub(super) fn coordinate(
    env: &ClusterEnv,
    token: &[u8],
    timeout: Duration,
    deadline: Instant,
) -> Result<Rendezvous, RendezvousError> {
    let coordinator = env.coordinator.as_str();
    let addrs = resolve_coordinator(coordinator)?;
    if addrs.iter().any(|a| a.ip().is_unspecified()) {
        return Err(RendezvousError::UnspecifiedCoordinator {
            coordinator: coordinator.to_owned(),
        });
    }
    let rendezvous_listener = bind_coordinator(coordinator, &addrs, deadline)?;
    let io_err = |what| move |error| RendezvousError::Io { what, error };
    let coordinator_ip = rendezvous_listener
        .local_addr()
        .map_err(io_err("reading the coordinator listener's address"))?
        .ip();
    let listener = bind_data(coordinator_ip)?;
    tracing::debug!(
        node = 0,
        nodes = env.num_nodes,
        coordinator,
        "rendezvous: coordinator listening for registrations"
    );
    // Polled, so the deadline is checked even when nobody connects.
    rendezvous_listener
        .set_nonblocking(true)
        .map_err(io_err("making the coordinator listener non-blocking"))?;

    let n = env.num_nodes as usize;
    let mut peers: Vec<Option<SocketAddr>> = vec![None; n];
    let mut streams: Vec<Option<(TcpStream, SocketAddr)>> = (0..n).map(|_| None).collect();
    peers[0] = Some(local_addr(&listener)?);
    let mut registered = 1;
    let token: Arc<[u8]> = Arc::from(token);
    let (tx, rx) = mpsc::channel::<RegistrationResult>();
    let mut in_flight = 0usize;

    while registered < n {
        if Instant::now() >= deadline {
            let missing = (0..n)
                .filter(|&r| peers[r].is_none())
                .map(|r| r as u32)
                .collect();
            return Err(RendezvousError::MissingRanks {
                coordinator: coordinator.to_owned(),
                missing: RankList(missing),
                timeout,
            });
        }
        while in_flight < MAX_IN_FLIGHT {
            match rendezvous_listener.accept() {
                Ok((stream, from)) => {
                    if spawn_registration(stream, from, &token, deadline, &tx) {
                        in_flight += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // E.g. out of file descriptors: transient, so retry on the next tick.
                    tracing::warn!(coordinator, "rendezvous: accept failed: {e}");
                    break;
                }
            }
        }
        let (from, result) = match rx.recv_timeout(POLL_INTERVAL) {
            Ok(msg) => msg,
            // Disconnected cannot happen while we hold `tx`; treat it like a quiet tick.
            Err(_) => continue,
        };
        in_flight -= 1;
        let reg = match result {
            Ok(reg) => reg,
            Err(e) => {
                tracing::warn!(%from, "rendezvous: rejected a connection: {e}");
                continue;
            }
        };
        let rank = reg.rank as usize;
        if rank == 0 || rank >= n {
            tracing::warn!(
                %from,
                rank = reg.rank,
                num_nodes = n,
                "rendezvous: rejected a registration with an out-of-range rank \
                 (ranks 1..{n} register with rank 0)"
            );
        } else if let Some(existing) = peers[rank] {
            tracing::warn!(
                %from,
                rank = reg.rank,
                %existing,
                "rendezvous: rejected a duplicate registration for an already registered rank"
            );
        } else {
            tracing::debug!(
                node = 0,
                peer = reg.rank,
                addr = %reg.data_addr,
                registered = registered + 1,
                nodes = n,
                "rendezvous: node registered"
            );
            peers[rank] = Some(reg.data_addr);
            streams[rank] = Some((reg.stream, from));
            registered += 1;
        }
    }

    let peers: Vec<SocketAddr> = peers.into_iter().flatten().collect();
    let table = encode_table(&peers);
    for (rank, slot) in streams.iter_mut().enumerate() {
        if let Some((stream, from)) = slot {
            auth::write_all_until(stream, &table, deadline).map_err(|error| {
                RendezvousError::SendTable {
                    rank: rank as u32,
                    peer: *from,
                    error,
                }
            })?;
        }
    }
    tracing::info!(
        node = 0,
        nodes = n,
        "rendezvous: node table sent to every node"
    );
    Ok(Rendezvous {
        listener,
        peers,
        coordinator: Some(rendezvous_listener),
    })
}

type RegistrationResult = (SocketAddr, Result<Registration, RegistrationError>);

/// Authenticates and reads one registration on its own thread, so a slow or silent client cannot
/// delay the others; the result goes to `tx`. Returns whether a result will arrive.
fn spawn_registration(
    stream: TcpStream,
    from: SocketAddr,
    token: &Arc<[u8]>,
    deadline: Instant,
    tx: &mpsc::Sender<RegistrationResult>,
) -> bool {
    let (token, tx) = (Arc::clone(token), tx.clone());
    let spawned = thread::Builder::new()
        .name("roam-rendezvous-auth".into())
        .spawn(move || {
            // The receiver is gone if the rendezvous already ended; nothing left to do then.
            let _ = tx.send((from, receive_registration(stream, &token, deadline)));
        });
    match spawned {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(%from, "rendezvous: no thread for the connection, dropping it: {e}");
            false
        }
    }
}

/// Binds the coordinator address, retrying while it is in use until `deadline`.
///
/// The retry matters with ephemeral coordinator ports (as `roam launch` picks): a rank polling
/// for the coordinator before it is up can be handed that very port for its own end and connect
/// to itself (TCP simultaneous open), holding the port for a moment. `join` drops such
/// connections at once, so the port frees up quickly.
fn bind_coordinator(
    coordinator: &str,
    addrs: &[SocketAddr],
    deadline: Instant,
) -> Result<TcpListener, RendezvousError> {
    loop {
        let mut last_error = io::Error::from(io::ErrorKind::AddrNotAvailable);
        for addr in addrs {
            match TcpListener::bind(addr) {
                Ok(l) => return Ok(l),
                Err(e) => last_error = e,
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if last_error.kind() != io::ErrorKind::AddrInUse || left.is_zero() {
            return Err(RendezvousError::BindCoordinator {
                coordinator: coordinator.to_owned(),
                error: last_error,
            });
        }
        thread::sleep(FIRST_BACKOFF.min(left));
    }
}

/// An authenticated node's registration, still holding its connection for the table.
struct Registration {
    rank: u32,
    data_addr: SocketAddr,
    stream: TcpStream,
}

/// Why the coordinator dropped a connection (logged, never fatal).
#[derive(Debug, thiserror::Error)]
enum RegistrationError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("rank {rank} authenticated for a data connection, not a rendezvous")]
    WrongPurpose { rank: u32 },
    #[error("rank {rank} did not send its data address: {error}")]
    Read { rank: u32, error: io::Error },
    #[error("rank {rank} sent an unusable data address: {reason}")]
    BadAddress { rank: u32, reason: String },
    #[error("socket setup failed: {0}")]
    Socket(io::Error),
}

fn receive_registration(
    mut stream: TcpStream,
    token: &[u8],
    deadline: Instant,
) -> Result<Registration, RegistrationError> {
    // Some platforms let accepted sockets inherit the listener's non-blocking mode.
    stream
        .set_nonblocking(false)
        .map_err(RegistrationError::Socket)?;
    // Bounded per connection too, so a stray client cannot hold a slot until the deadline.
    let local_deadline = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
    let budget = local_deadline.saturating_duration_since(Instant::now());
    if budget.is_zero() {
        return Err(RegistrationError::Auth(AuthError::TimedOut {
            peer: auth::peer_name(&stream),
            step: auth::Step::ReadHello,
            timeout: Duration::ZERO,
        }));
    }
    let hello = auth::accept_handshake_with_timeout(&mut stream, token, budget)?;
    if hello.purpose != Purpose::Rendezvous {
        return Err(RegistrationError::WrongPurpose { rank: hello.rank });
    }
    let mut entry = [0u8; ENTRY_LEN];
    auth::read_exact_until(&mut stream, &mut entry, local_deadline).map_err(|error| {
        RegistrationError::Read {
            rank: hello.rank,
            error,
        }
    })?;
    let data_addr = decode_entry(&entry).map_err(|reason| RegistrationError::BadAddress {
        rank: hello.rank,
        reason,
    })?;
    if data_addr.port() == 0 || data_addr.ip().is_unspecified() {
        return Err(RegistrationError::BadAddress {
            rank: hello.rank,
            reason: format!("{data_addr} cannot be connected to"),
        });
    }
    stream
        .set_read_timeout(None)
        .map_err(RegistrationError::Socket)?;
    Ok(Registration {
        rank: hello.rank,
        data_addr,
        stream,
    })
}
