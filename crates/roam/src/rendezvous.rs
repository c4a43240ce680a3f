//! Start-up rendezvous: every node learns the data address of every other node.
//!
//! This module owns the one-shot exchange that turns "N processes that know the coordinator
//! address and the cluster token" into "N processes that each hold a bound data listener and the
//! same table of data addresses, indexed by rank". Rank 0 is the coordinator: it listens on the
//! coordinator address, accepts authenticated ([`Purpose::Rendezvous`]) registrations from ranks
//! `1..N`, each carrying that node's data address, then sends the full table to every node and
//! hands its coordinator listener back (`Rendezvous::coordinator`), on which the join service
//! (`elastic`) keeps accepting nodes that join, and drain requests, while the cluster runs. Other ranks connect (retrying, since rank 0 may start later), bind their data listener
//! on the local IP they use to reach the coordinator (the interface that routes to the cluster),
//! register and wait for the table. A single node opens no socket but its own loopback listener.
//! Rank 0's side lives in `rendezvous_coordinator.rs`; the other ranks' side, the wire format
//! and the connection to the coordinator (shared with joining nodes) stay here.
//!
//! Invariants: the whole operation is bounded by the caller's timeout and ends in an error naming
//! what is missing (ranks that never registered, the unreachable coordinator) rather than hanging;
//! the coordinator keeps waiting through unauthenticated, malformed, duplicate and out-of-range
//! registrations (each is logged and dropped) and handles each connection on its own short-lived
//! thread, so a silent client cannot stall the others; every message has a fixed size or a count
//! checked against `num_nodes` before anything is allocated.
//!
//! Wire format, after the handshake: a registration is one address entry; the table is a
//! little-endian `u32` count followed by that many entries. An entry is 19 bytes: family (4 or 6),
//! 16 address bytes (IPv4 uses the first 4, the rest zero) and the port, big-endian. IPv6 scope
//! ids are not carried: they are meaningful only on the host that chose them.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use crate::auth::{self, AuthError, HANDSHAKE_TIMEOUT, Purpose};
use crate::cluster_env::ClusterEnv;

/// Largest cluster this rendezvous accepts, which bounds the table the coordinator may send.
pub const MAX_NODES: u32 = 1 << 16;

/// Length of an address entry (family, 16 address bytes, port).
pub(crate) const ENTRY_LEN: usize = 19;
const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;
/// Bound on one connection attempt, so a black-holed address still leaves time for retries.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

#[path = "rendezvous_coordinator.rs"]
mod coordinator;
use coordinator::coordinate;

/// The outcome of a successful rendezvous.
#[derive(Debug)]
pub struct Rendezvous {
    /// This node's data listener, bound and listening (blocking mode).
    pub listener: TcpListener,
    /// Data address of every rank; index = rank, and `peers[rank]` is `listener`'s address.
    pub peers: Vec<SocketAddr>,
    /// Rank 0 of a multi-node cluster: the coordinator listener, still bound (non-blocking),
    /// for the join service (`elastic`) to keep accepting on after start-up.
    pub coordinator: Option<TcpListener>,
}

/// Ranks printed compactly, e.g. `1-3, 7`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankList(pub Vec<u32>);

impl fmt::Display for RankList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let ranks = &self.0;
        while i < ranks.len() {
            let start = ranks[i];
            let mut end = start;
            while i + 1 < ranks.len() && ranks[i + 1] == end + 1 {
                i += 1;
                end = ranks[i];
            }
            if start != ranks[0] {
                f.write_str(", ")?;
            }
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// Why the rendezvous failed on this node.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// The cluster description itself is unusable.
    #[error(
        "invalid cluster: rank {rank} of {num_nodes} nodes (need 1 <= nodes <= {max} and \
         rank < nodes)",
        max = MAX_NODES
    )]
    InvalidCluster {
        /// This node's rank.
        rank: u32,
        /// The node count.
        num_nodes: u32,
    },
    /// A multi-node run with an empty token.
    #[error("the cluster token is empty; a {num_nodes}-node run must set ROAM_CLUSTER_TOKEN")]
    EmptyToken {
        /// The node count.
        num_nodes: u32,
    },
    /// The coordinator address does not resolve.
    #[error("cannot resolve coordinator address {coordinator}: {error}")]
    Resolve {
        /// The coordinator `host:port`.
        coordinator: String,
        /// The resolver's error.
        error: io::Error,
    },
    /// The coordinator address is a wildcard, which other nodes cannot connect to.
    #[error(
        "coordinator address {coordinator} is a wildcard address; set it to an address of rank \
         0 that the other nodes can reach"
    )]
    UnspecifiedCoordinator {
        /// The coordinator `host:port`.
        coordinator: String,
    },
    /// Rank 0 could not listen on the coordinator address.
    #[error("rank 0 cannot listen on coordinator address {coordinator}: {error}")]
    BindCoordinator {
        /// The coordinator `host:port`.
        coordinator: String,
        /// The bind error (of the last address tried).
        error: io::Error,
    },
    /// This node could not bind its data listener.
    #[error("cannot bind the data listener on {ip}: {error}")]
    BindData {
        /// The local IP.
        ip: IpAddr,
        /// The bind error.
        error: io::Error,
    },
    /// A local socket operation failed.
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        error: io::Error,
    },
    /// The coordinator timed out waiting for registrations.
    #[error(
        "rendezvous timed out after {timeout:?}: rank(s) {missing} never registered with the \
         coordinator at {coordinator}"
    )]
    MissingRanks {
        /// The coordinator `host:port`.
        coordinator: String,
        /// Ranks that never registered, ascending.
        missing: RankList,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The coordinator could not send the table to a registered node.
    #[error("sending the address table to rank {rank} at {peer} failed: {error}")]
    SendTable {
        /// The rank.
        rank: u32,
        /// Its connection's address.
        peer: SocketAddr,
        /// The error.
        error: io::Error,
    },
    /// A non-coordinator never completed a connection and handshake with the coordinator.
    #[error(
        "coordinator unreachable at {coordinator} within {timeout:?} (last error: {last_error})"
    )]
    CoordinatorUnreachable {
        /// The coordinator `host:port`.
        coordinator: String,
        /// The timeout that expired.
        timeout: Duration,
        /// The last connection or handshake error, as text.
        last_error: String,
    },
    /// The coordinator and this node do not share the cluster token.
    #[error("authentication with the coordinator at {coordinator} failed: {error}")]
    Auth {
        /// The coordinator `host:port`.
        coordinator: String,
        /// The handshake error (shown in the message, so not also the `source()`).
        error: AuthError,
    },
    /// Sending our registration failed.
    #[error("sending this node's registration to the coordinator at {coordinator} failed: {error}")]
    Register {
        /// The coordinator `host:port`.
        coordinator: String,
        /// The error.
        error: io::Error,
    },
    /// The table never arrived.
    #[error(
        "no address table from the coordinator at {coordinator}: {reason} (the coordinator gives \
         up when a rank never registers, and drops a registration whose rank is already taken)"
    )]
    NoTable {
        /// The coordinator `host:port`.
        coordinator: String,
        /// What happened instead.
        reason: String,
    },
    /// The table arrived but is malformed or inconsistent with this node.
    #[error("bad address table from the coordinator at {coordinator}: {reason}")]
    BadTable {
        /// The coordinator `host:port`.
        coordinator: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Exchanges data addresses with every node; see the module documentation.
///
/// `token` is the cluster token (ignored for a single node). The whole operation, including
/// waiting for rank 0 to start, is bounded by `timeout`.
pub fn rendezvous(
    env: &ClusterEnv,
    token: &[u8],
    timeout: Duration,
) -> Result<Rendezvous, RendezvousError> {
    if env.num_nodes == 0 || env.num_nodes > MAX_NODES || env.rank >= env.num_nodes {
        return Err(RendezvousError::InvalidCluster {
            rank: env.rank,
            num_nodes: env.num_nodes,
        });
    }
    if env.num_nodes == 1 {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let listener = bind_data(ip)?;
        let addr = local_addr(&listener)?;
        return Ok(Rendezvous {
            listener,
            peers: vec![addr],
            coordinator: None,
        });
    }
    if token.is_empty() {
        return Err(RendezvousError::EmptyToken {
            num_nodes: env.num_nodes,
        });
    }
    let deadline = Instant::now() + timeout;
    let span = tracing::info_span!(
        "rendezvous",
        node = env.rank,
        nodes = env.num_nodes,
        coordinator = %env.coordinator
    );
    let _entered = span.enter();
    if env.rank == 0 {
        coordinate(env, token, timeout, deadline)
    } else {
        join(env, token, timeout, deadline)
    }
}

pub(crate) fn bind_data(ip: IpAddr) -> Result<TcpListener, RendezvousError> {
    TcpListener::bind((ip, 0)).map_err(|error| RendezvousError::BindData { ip, error })
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, RendezvousError> {
    listener.local_addr().map_err(|error| RendezvousError::Io {
        what: "reading the data listener's address",
        error,
    })
}

fn resolve_coordinator(coordinator: &str) -> Result<Vec<SocketAddr>, RendezvousError> {
    let addrs: Vec<SocketAddr> = coordinator
        .to_socket_addrs()
        .map_err(|error| RendezvousError::Resolve {
            coordinator: coordinator.to_owned(),
            error,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(RendezvousError::Resolve {
            coordinator: coordinator.to_owned(),
            error: io::Error::new(io::ErrorKind::NotFound, "no addresses"),
        });
    }
    Ok(addrs)
}

/// Ranks 1..N: register with the coordinator and receive the table.
fn join(
    env: &ClusterEnv,
    token: &[u8],
    timeout: Duration,
    deadline: Instant,
) -> Result<Rendezvous, RendezvousError> {
    let coordinator = env.coordinator.as_str();
    let mut stream = connect_coordinator(env, token, Purpose::Rendezvous, timeout, deadline)?;
    let local_ip = stream
        .local_addr()
        .map_err(|error| RendezvousError::Io {
            what: "reading the local address of the coordinator connection",
            error,
        })?
        .ip();
    let listener = bind_data(local_ip)?;
    let data_addr = local_addr(&listener)?;
    auth::write_all_until(&mut stream, &encode_entry(data_addr), deadline).map_err(|error| {
        RendezvousError::Register {
            coordinator: coordinator.to_owned(),
            error,
        }
    })?;
    tracing::debug!(
        node = env.rank,
        coordinator,
        addr = %data_addr,
        "rendezvous: registered with the coordinator"
    );

    let no_table = |error: io::Error| RendezvousError::NoTable {
        coordinator: coordinator.to_owned(),
        reason: if error.kind() == io::ErrorKind::TimedOut {
            format!("still waiting for other ranks when this node's {timeout:?} timeout expired")
        } else if auth::is_closed(&error) {
            "the coordinator closed the connection".to_owned()
        } else {
            error.to_string()
        },
    };
    let bad_table = |reason: String| RendezvousError::BadTable {
        coordinator: coordinator.to_owned(),
        reason,
    };
    let mut header = [0u8; 4];
    auth::read_exact_until(&mut stream, &mut header, deadline).map_err(no_table)?;
    let count = u32::from_le_bytes(header);
    if count != env.num_nodes {
        return Err(bad_table(format!(
            "it lists {count} nodes but this node was started with {} nodes",
            env.num_nodes
        )));
    }
    // `count` equals our own validated num_nodes, so this allocation is bounded by MAX_NODES.
    let mut body = vec![0u8; count as usize * ENTRY_LEN];
    auth::read_exact_until(&mut stream, &mut body, deadline).map_err(no_table)?;
    let peers = body
        .chunks_exact(ENTRY_LEN)
        .enumerate()
        .map(|(rank, entry)| {
            decode_entry(entry)
                .map_err(|reason| bad_table(format!("entry for rank {rank}: {reason}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if peers[env.rank as usize] != data_addr {
        return Err(bad_table(format!(
            "it lists {} for rank {} but this node registered {data_addr}",
            peers[env.rank as usize], env.rank
        )));
    }
    tracing::info!(
        node = env.rank,
        nodes = count,
        "rendezvous: received the node table"
    );
    Ok(Rendezvous {
        listener,
        peers,
        coordinator: None,
    })
}

/// Connects and authenticates to the coordinator, retrying with backoff until `deadline`.
pub(crate) fn connect_coordinator(
    env: &ClusterEnv,
    token: &[u8],
    purpose: Purpose,
    timeout: Duration,
    deadline: Instant,
) -> Result<TcpStream, RendezvousError> {
    let coordinator = env.coordinator.as_str();
    let mut backoff = FIRST_BACKOFF;
    let mut last_error = "no connection attempt completed".to_owned();
    loop {
        // Resolved on every attempt: the coordinator's name may appear in DNS only once it is up.
        match resolve_coordinator(coordinator) {
            Err(e) => last_error = e.to_string(),
            Ok(addrs) => {
                for addr in addrs {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let mut stream = match TcpStream::connect_timeout(
                        &addr,
                        left.min(CONNECT_ATTEMPT_TIMEOUT),
                    ) {
                        Ok(s) => s,
                        Err(e) => {
                            last_error = format!("connecting to {addr}: {e}");
                            continue;
                        }
                    };
                    if stream.local_addr().ok() == Some(addr) {
                        // TCP self-connect: the kernel picked the unbound coordinator port as our
                        // own end. Holding it would keep rank 0 from binding it.
                        last_error = format!("{addr} is not listening yet");
                        continue;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match auth::connect_handshake_with_timeout(
                        &mut stream,
                        token,
                        env.rank,
                        purpose,
                        left.min(HANDSHAKE_TIMEOUT),
                    ) {
                        Ok(()) => return Ok(stream),
                        // A token mismatch will not fix itself: fail now with the real reason.
                        Err(
                            error @ (AuthError::Rejected { .. }
                            | AuthError::BadAcceptorProof { .. }
                            | AuthError::EmptyToken { .. }),
                        ) => {
                            return Err(RendezvousError::Auth {
                                coordinator: coordinator.to_owned(),
                                error,
                            });
                        }
                        Err(e) => last_error = e.to_string(),
                    }
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RendezvousError::CoordinatorUnreachable {
                coordinator: coordinator.to_owned(),
                timeout,
                last_error,
            });
        }
        thread::sleep(backoff.min(left));
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// An address as the fixed-size entry peers exchange during rendezvous and joins.
pub(crate) fn encode_entry(addr: SocketAddr) -> [u8; ENTRY_LEN] {
    let mut entry = [0u8; ENTRY_LEN];
    match addr.ip() {
        IpAddr::V4(ip) => {
            entry[0] = FAMILY_V4;
            entry[1..5].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            entry[0] = FAMILY_V6;
            entry[1..17].copy_from_slice(&ip.octets());
        }
    }
    entry[17..19].copy_from_slice(&addr.port().to_be_bytes());
    entry
}

/// Parses an address entry (peer bytes, any length); errors say what is wrong.
pub(crate) fn decode_entry(entry: &[u8]) -> Result<SocketAddr, String> {
    let entry: &[u8; ENTRY_LEN] = entry
        .try_into()
        .map_err(|_| format!("entry is {} bytes, expected {ENTRY_LEN}", entry.len()))?;
    let port = u16::from_be_bytes([entry[17], entry[18]]);
    let ip = match entry[0] {
        FAMILY_V4 => IpAddr::V4(Ipv4Addr::new(entry[1], entry[2], entry[3], entry[4])),
        FAMILY_V6 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&entry[1..17]);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        other => return Err(format!("unknown address family {other}")),
    };
    Ok(SocketAddr::new(ip, port))
}

fn encode_table(peers: &[SocketAddr]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + peers.len() * ENTRY_LEN);
    // peers.len() <= MAX_NODES, checked on entry to `rendezvous`.
    out.extend_from_slice(&(peers.len() as u32).to_le_bytes());
    for &p in peers {
        out.extend_from_slice(&encode_entry(p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    const TOKEN: &[u8] = b"test-token-test-token-test-token";

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn env(rank: u32, num_nodes: u32, port: u16) -> ClusterEnv {
        ClusterEnv {
            rank,
            num_nodes,
            coordinator: format!("127.0.0.1:{port}"),
        }
    }

    fn spawn_node(
        e: ClusterEnv,
        token: &'static [u8],
        timeout: Duration,
    ) -> thread::JoinHandle<Result<Rendezvous, RendezvousError>> {
        thread::spawn(move || rendezvous(&e, token, timeout))
    }

    /// Waits until something listens on `port`.
    fn wait_listening(port: u16) {
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "coordinator never listened"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn single_node_needs_no_network() {
        let r = rendezvous(&ClusterEnv::single_node(), b"", Duration::from_secs(1)).unwrap();
        assert_eq!(r.peers.len(), 1);
        assert_eq!(r.peers[0], r.listener.local_addr().unwrap());
        assert!(r.peers[0].ip().is_loopback());
    }

    #[test]
    fn three_nodes_get_identical_tables() {
        let port = free_port();
        let timeout = Duration::from_secs(20);
        // Non-coordinators first, so they must retry until rank 0 appears.
        let n1 = spawn_node(env(1, 3, port), TOKEN, timeout);
        let n2 = spawn_node(env(2, 3, port), TOKEN, timeout);
        thread::sleep(Duration::from_millis(200));
        let n0 = spawn_node(env(0, 3, port), TOKEN, timeout);
        let results: Vec<Rendezvous> = [n0, n1, n2]
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        for (rank, r) in results.iter().enumerate() {
            assert_eq!(r.peers.len(), 3);
            assert_eq!(r.peers, results[0].peers, "rank {rank}'s table differs");
            assert_eq!(r.peers[rank], r.listener.local_addr().unwrap());
        }
        // The listeners really listen.
        for addr in &results[0].peers {
            TcpStream::connect(addr).unwrap();
        }
    }

    #[test]
    fn wrong_token_fails_that_node_and_coordinator_names_the_missing_rank() {
        let port = free_port();
        let n0 = spawn_node(env(0, 3, port), TOKEN, Duration::from_secs(2));
        let n1 = spawn_node(env(1, 3, port), TOKEN, Duration::from_secs(20));
        let n2 = spawn_node(
            env(2, 3, port),
            b"some other token",
            Duration::from_secs(20),
        );

        let e2 = n2.join().unwrap().unwrap_err();
        assert!(
            matches!(
                e2,
                RendezvousError::Auth {
                    error: AuthError::Rejected { .. },
                    ..
                }
            ),
            "{e2}"
        );
        let e0 = n0.join().unwrap().unwrap_err();
        match &e0 {
            RendezvousError::MissingRanks { missing, .. } => assert_eq!(missing.0, vec![2]),
            other => panic!("expected MissingRanks, got {other}"),
        }
        assert!(
            e0.to_string().contains("rank(s) 2 never registered"),
            "{e0}"
        );
        // Rank 1 registered, but the coordinator gave up: it fails promptly, not at its timeout.
        let e1 = n1.join().unwrap().unwrap_err();
        assert!(matches!(e1, RendezvousError::NoTable { .. }), "{e1}");
    }

    #[test]
    fn coordinator_survives_garbage_strays_and_bad_registrations() {
        let port = free_port();
        let start = Instant::now();
        let n0 = spawn_node(env(0, 2, port), TOKEN, Duration::from_secs(20));
        wait_listening(port);

        // Garbage, then close.
        let mut g = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = g.write_all(&[0xAB; 300]);
        drop(g);
        // A silent client that holds its connection open.
        let _silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        // Authenticated but out of range, and authenticated rank 0 (the coordinator itself).
        for bad_rank in [7, 0] {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            auth::connect_handshake(&mut s, TOKEN, bad_rank, Purpose::Rendezvous).unwrap();
            s.write_all(&encode_entry("127.0.0.1:9".parse().unwrap()))
                .unwrap();
            let mut buf = [0u8; 1];
            assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "dropped without a table");
        }
        // Wrong purpose.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        auth::connect_handshake(&mut s, TOKEN, 1, Purpose::Data).unwrap();
        drop(s);

        let n1 = spawn_node(env(1, 2, port), TOKEN, Duration::from_secs(20));
        let r0 = n0.join().unwrap().unwrap();
        let r1 = n1.join().unwrap().unwrap();
        assert_eq!(r0.peers, r1.peers);
        // The silent client did not make anyone wait for its handshake timeout.
        assert!(start.elapsed() < HANDSHAKE_TIMEOUT, "{:?}", start.elapsed());
    }

    #[test]
    fn duplicate_rank_is_rejected() {
        let port = free_port();
        let n0 = spawn_node(env(0, 3, port), TOKEN, Duration::from_secs(20));
        wait_listening(port);
        // Two registrations for rank 1, by hand so that both surely arrive before rank 2.
        let register = |data_port: u16| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            auth::connect_handshake(&mut s, TOKEN, 1, Purpose::Rendezvous).unwrap();
            let addr = SocketAddr::from(([127, 0, 0, 1], data_port));
            s.write_all(&encode_entry(addr)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            s
        };
        let mut a = register(1001);
        let mut b = register(1002);
        // Exactly one is dropped (end of file); the other keeps waiting for the table.
        let mut byte = [0u8; 1];
        let a_dropped = matches!(a.read(&mut byte), Ok(0));
        let b_dropped = matches!(b.read(&mut byte), Ok(0));
        assert!(
            a_dropped != b_dropped,
            "a dropped: {a_dropped}, b dropped: {b_dropped}"
        );
        let (mut winner, winner_port) = if a_dropped { (b, 1002) } else { (a, 1001) };

        let n2 = spawn_node(env(2, 3, port), TOKEN, Duration::from_secs(20));
        let r0 = n0.join().unwrap().unwrap();
        assert_eq!(r0.peers[1].port(), winner_port);
        assert_eq!(r0.peers, n2.join().unwrap().unwrap().peers);
        winner.set_read_timeout(None).unwrap();
        let mut table = Vec::new();
        winner.read_to_end(&mut table).unwrap();
        assert_eq!(table, encode_table(&r0.peers));
    }

    #[test]
    fn timeout_when_the_coordinator_never_appears() {
        let port = free_port();
        let start = Instant::now();
        let err = rendezvous(&env(1, 2, port), TOKEN, Duration::from_millis(500)).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(
            matches!(err, RendezvousError::CoordinatorUnreachable { .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    }

    #[test]
    fn invalid_cluster_and_empty_token_are_refused() {
        assert!(matches!(
            rendezvous(&env(2, 2, 1), TOKEN, Duration::from_secs(1)),
            Err(RendezvousError::InvalidCluster {
                rank: 2,
                num_nodes: 2
            })
        ));
        assert!(matches!(
            rendezvous(&env(0, 0, 1), TOKEN, Duration::from_secs(1)),
            Err(RendezvousError::InvalidCluster { .. })
        ));
        assert!(matches!(
            rendezvous(&env(0, 2, 1), b"", Duration::from_secs(1)),
            Err(RendezvousError::EmptyToken { num_nodes: 2 })
        ));
    }

    #[test]
    fn wildcard_coordinator_is_refused() {
        let e = ClusterEnv {
            rank: 0,
            num_nodes: 2,
            coordinator: "0.0.0.0:1".into(),
        };
        assert!(matches!(
            rendezvous(&e, TOKEN, Duration::from_secs(1)),
            Err(RendezvousError::UnspecifiedCoordinator { .. })
        ));
    }

    #[test]
    fn entries_round_trip_and_bad_family_is_an_error() {
        for a in ["10.1.2.3:4567", "[fd00::1:2]:80", "127.0.0.1:65535"] {
            let addr: SocketAddr = a.parse().unwrap();
            assert_eq!(decode_entry(&encode_entry(addr)), Ok(addr));
        }
        let mut e = encode_entry("1.2.3.4:5".parse().unwrap());
        e[0] = 9;
        assert!(decode_entry(&e).is_err());
        assert!(decode_entry(&e[..3]).is_err());
        let t = encode_table(&["1.2.3.4:5".parse().unwrap(); 3]);
        assert_eq!(t.len(), 4 + 3 * ENTRY_LEN);
        assert_eq!(&t[..4], &3u32.to_le_bytes());
    }

    #[test]
    fn rank_lists_are_compact() {
        assert_eq!(RankList(vec![2]).to_string(), "2");
        assert_eq!(
            RankList(vec![1, 2, 3, 7, 9, 10]).to_string(),
            "1-3, 7, 9-10"
        );
        assert_eq!(RankList(vec![]).to_string(), "");
    }
}
