//! Mutual HMAC-SHA256 challenge–response run on every TCP connection before any frame is read.
//!
//! This module owns the handshake that proves both ends know the cluster token without sending
//! it. The acceptor speaks first with a fresh random nonce; the connector answers with a hello
//! carrying its rank, the connection's purpose, its own nonce and
//! `HMAC(token, "roam-connect-v1" || nonce_s || nonce_c || rank || purpose)`; the acceptor
//! verifies it in constant time and answers `HMAC(token, "roam-accept-v1" || nonce_c || nonce_s
//! || rank)`, which the connector verifies in turn. Integers are little-endian.
//!
//! The checks of the peer's bytes are pure functions ([`verify_hello`], [`proof_is_valid`])
//! that the socket code calls and the `handshake` fuzz target drives without a socket.
//!
//! Invariants: every message has a fixed size, so a peer can never make us allocate or wait for
//! a length it chose; every read and write is bounded by one overall deadline (not a per-call
//! timeout, which a peer trickling one byte at a time could extend indefinitely); the stream's
//! previous read and write timeouts are restored on every exit path, success or error; bad input
//! yields an [`AuthError`] naming the peer, never a panic. The two MACs use distinct domain
//! separators so one side's answer can never be replayed as the other side's.
//!
//! What this does not do: it authenticates the peer at connection time only. Later frames are
//! neither encrypted nor integrity-protected, so an active man-in-the-middle on the network path
//! can still relay or alter traffic; the token keeps out strangers and stray processes, not an
//! attacker who controls the network.
//!
//! Files: this one runs the handshake over a socket; `check.rs` holds the socket-free
//! message builders and checks; `deadline_io.rs` the reads and writes under one deadline.

mod check;
mod deadline_io;

pub use check::HelloError;
pub(crate) use check::{hello_bytes, proof_bytes, proof_is_valid, verify_hello};
use deadline_io::Guarded;
pub(crate) use deadline_io::{is_closed, peer_name, read_exact_until, write_all_until};

use std::io;
use std::net::TcpStream;
use std::time::Duration;

use hmac::Hmac;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Default bound on a whole handshake, so a silent or slow peer cannot block an acceptor.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Length of each side's random nonce.
pub const NONCE_LEN: usize = 32;
/// Length of a MAC (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// Length of a connector's hello: rank (4) + purpose (1) + nonce_c + mac.
pub const HELLO_LEN: usize = 4 + 1 + NONCE_LEN + MAC_LEN;
const CONNECT_DOMAIN: &[u8] = b"roam-connect-v1";
const ACCEPT_DOMAIN: &[u8] = b"roam-accept-v1";

/// What the connector intends to do with the connection; bound into its MAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Purpose {
    /// Registration with the coordinator during start-up.
    Rendezvous = 1,
    /// Protocol frames between nodes.
    Data = 2,
    /// A new node asking the coordinator's join service for a rank (elastic membership).
    Join = 3,
    /// A request to the coordinator's service to drain a node (`roam drain`).
    Drain = 4,
    /// Protocol frames from a node that joined at run time: its data address follows the
    /// handshake, and the acceptor dials back to it.
    JoinData = 5,
}

impl Purpose {
    /// The wire byte of this purpose.
    pub fn as_byte(self) -> u8 {
        self as u8
    }

    /// The purpose with wire byte `byte`, if any.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Rendezvous),
            2 => Some(Self::Data),
            3 => Some(Self::Join),
            4 => Some(Self::Drain),
            5 => Some(Self::JoinData),
            _ => None,
        }
    }
}

/// What an authenticated connector said about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The rank the connector claims; authenticated only in that it holds the cluster token.
    pub rank: u32,
    /// What the connection is for.
    pub purpose: Purpose,
}

/// Which step of the handshake an I/O problem happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Acceptor sending its nonce.
    SendChallenge,
    /// Connector reading the acceptor's nonce.
    ReadChallenge,
    /// Connector sending its hello.
    SendHello,
    /// Acceptor reading the hello.
    ReadHello,
    /// Acceptor sending its proof.
    SendProof,
    /// Connector reading the acceptor's proof.
    ReadProof,
    /// Setting or restoring socket timeouts.
    SocketOptions,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::SendChallenge => "sending the challenge",
            Self::ReadChallenge => "reading the challenge",
            Self::SendHello => "sending the hello",
            Self::ReadHello => "reading the hello",
            Self::SendProof => "sending the proof",
            Self::ReadProof => "reading the proof",
            Self::SocketOptions => "setting socket timeouts",
        })
    }
}

/// Why a handshake failed; the connection must then be dropped.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The local token is empty, which would make the MAC a public function.
    #[error("the cluster token is empty; refusing to authenticate with {peer}")]
    EmptyToken {
        /// The peer address.
        peer: String,
    },
    /// The peer did not finish its part in time.
    #[error("{peer} did not complete the handshake within {timeout:?} ({step})")]
    TimedOut {
        /// The peer address.
        peer: String,
        /// Where we were waiting.
        step: Step,
        /// The bound that expired.
        timeout: Duration,
    },
    /// The peer closed or reset the connection mid-handshake.
    #[error("{peer} closed the connection during the handshake ({step})")]
    Closed {
        /// The peer address.
        peer: String,
        /// Where it happened.
        step: Step,
    },
    /// Another I/O error.
    #[error("I/O error with {peer} during the handshake ({step}): {error}")]
    Io {
        /// The peer address.
        peer: String,
        /// Where it happened.
        step: Step,
        /// The underlying error.
        error: io::Error,
    },
    /// Acceptor side: the connector's MAC is wrong, i.e. it does not hold our token.
    #[error(
        "{peer} (claiming rank {claimed_rank}) failed authentication: its cluster token differs \
         from ours (check ROAM_CLUSTER_TOKEN on both nodes)"
    )]
    BadMac {
        /// The peer address.
        peer: String,
        /// The rank it claimed.
        claimed_rank: u32,
    },
    /// Connector side: the acceptor closed instead of proving itself, i.e. it rejected our MAC.
    #[error(
        "{peer} rejected our credentials (closed the connection after our hello): the cluster \
         tokens differ (check ROAM_CLUSTER_TOKEN on both nodes)"
    )]
    Rejected {
        /// The peer address.
        peer: String,
    },
    /// Connector side: the acceptor's proof is wrong, i.e. it does not hold our token.
    #[error(
        "{peer} could not prove it holds the cluster token (check ROAM_CLUSTER_TOKEN on both \
         nodes, and that {peer} is a roam node)"
    )]
    BadAcceptorProof {
        /// The peer address.
        peer: String,
    },
    /// Acceptor side: an authenticated hello with a purpose this version does not know.
    #[error("{peer} (rank {rank}) asked for unknown connection purpose {byte}")]
    UnknownPurpose {
        /// The peer address.
        peer: String,
        /// The rank it claimed.
        rank: u32,
        /// The purpose byte received.
        byte: u8,
    },
}

/// Connector side of the handshake, bounded by [`HANDSHAKE_TIMEOUT`].
pub fn connect_handshake(
    stream: &mut TcpStream,
    token: &[u8],
    rank: u32,
    purpose: Purpose,
) -> Result<(), AuthError> {
    connect_handshake_with_timeout(stream, token, rank, purpose, HANDSHAKE_TIMEOUT)
}

/// Acceptor side of the handshake, bounded by [`HANDSHAKE_TIMEOUT`]; returns what the
/// authenticated connector said about itself.
pub fn accept_handshake(stream: &mut TcpStream, token: &[u8]) -> Result<Hello, AuthError> {
    accept_handshake_with_timeout(stream, token, HANDSHAKE_TIMEOUT)
}

/// [`connect_handshake`] with the whole exchange bounded by `timeout`.
pub fn connect_handshake_with_timeout(
    stream: &mut TcpStream,
    token: &[u8],
    rank: u32,
    purpose: Purpose,
    timeout: Duration,
) -> Result<(), AuthError> {
    let mut io = Guarded::new(stream, timeout)?;
    if token.is_empty() {
        return Err(AuthError::EmptyToken {
            peer: io.peer.clone(),
        });
    }

    let mut nonce_s = [0u8; NONCE_LEN];
    io.read(&mut nonce_s, Step::ReadChallenge)?;
    let nonce_c: [u8; NONCE_LEN] = rand::random();
    let hello = hello_bytes(token, &nonce_s, &nonce_c, rank, purpose.as_byte());
    io.write(&hello, Step::SendHello)?;

    let mut proof = [0u8; MAC_LEN];
    match io.read(&mut proof, Step::ReadProof) {
        Ok(()) => {}
        // The acceptor closes without a word when our MAC is wrong.
        Err(AuthError::Closed { peer, .. }) => return Err(AuthError::Rejected { peer }),
        Err(e) => return Err(e),
    }
    if !proof_is_valid(token, &nonce_s, &nonce_c, rank, &proof) {
        return Err(AuthError::BadAcceptorProof {
            peer: io.peer.clone(),
        });
    }
    io.finish()
}

/// [`accept_handshake`] with the whole exchange bounded by `timeout`.
pub fn accept_handshake_with_timeout(
    stream: &mut TcpStream,
    token: &[u8],
    timeout: Duration,
) -> Result<Hello, AuthError> {
    let mut io = Guarded::new(stream, timeout)?;
    if token.is_empty() {
        return Err(AuthError::EmptyToken {
            peer: io.peer.clone(),
        });
    }

    let nonce_s: [u8; NONCE_LEN] = rand::random();
    io.write(&nonce_s, Step::SendChallenge)?;
    let mut hello = [0u8; HELLO_LEN];
    io.read(&mut hello, Step::ReadHello)?;

    let (hello, nonce_c) = verify_hello(token, &nonce_s, &hello).map_err(|e| match e {
        HelloError::BadMac { claimed_rank } | HelloError::Length { claimed_rank, .. } => {
            AuthError::BadMac {
                peer: io.peer.clone(),
                claimed_rank,
            }
        }
        HelloError::UnknownPurpose { rank, byte } => AuthError::UnknownPurpose {
            peer: io.peer.clone(),
            rank,
            byte,
        },
    })?;
    let proof = proof_bytes(token, &nonce_s, &nonce_c, hello.rank);
    io.write(&proof, Step::SendProof)?;
    io.finish()?;
    Ok(hello)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener};
    use std::thread;
    use std::time::Instant;

    const TOKEN: &[u8] = b"0123456789abcdef0123456789abcdef";
    const SHORT: Duration = Duration::from_millis(300);

    /// A connected (client, server) pair over loopback.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn success_both_ways_and_timeouts_restored() {
        for purpose in [Purpose::Rendezvous, Purpose::Data] {
            let (mut client, mut server) = pair();
            let acceptor = thread::spawn(move || {
                let hello = accept_handshake(&mut server, TOKEN);
                (hello, server.read_timeout().unwrap())
            });
            connect_handshake(&mut client, TOKEN, 7, purpose).unwrap();
            let (hello, server_timeout) = acceptor.join().unwrap();
            assert_eq!(hello.unwrap(), Hello { rank: 7, purpose });
            assert_eq!(server_timeout, None);
            assert_eq!(client.read_timeout().unwrap(), None);
            assert_eq!(client.write_timeout().unwrap(), None);
        }
    }

    #[test]
    fn wrong_token_fails_on_both_sides() {
        let (mut client, mut server) = pair();
        let acceptor = thread::spawn(move || accept_handshake(&mut server, TOKEN));
        let connector = connect_handshake(&mut client, b"not the token", 1, Purpose::Data);
        let accepted = acceptor.join().unwrap();
        assert!(
            matches!(
                accepted,
                Err(AuthError::BadMac {
                    claimed_rank: 1,
                    ..
                })
            ),
            "{accepted:?}"
        );
        assert!(
            matches!(connector, Err(AuthError::Rejected { .. })),
            "{connector:?}"
        );
        let msg = accepted.unwrap_err().to_string();
        assert!(msg.contains("127.0.0.1:"), "error names the peer: {msg}");
    }

    #[test]
    fn impostor_acceptor_is_detected() {
        let (mut client, mut server) = pair();
        let fake = thread::spawn(move || {
            server.write_all(&[9u8; NONCE_LEN]).unwrap();
            let mut hello = [0u8; HELLO_LEN];
            server.read_exact(&mut hello).unwrap();
            server.write_all(&[0u8; MAC_LEN]).unwrap();
        });
        let r = connect_handshake(&mut client, TOKEN, 0, Purpose::Rendezvous);
        fake.join().unwrap();
        assert!(
            matches!(r, Err(AuthError::BadAcceptorProof { .. })),
            "{r:?}"
        );
    }

    #[test]
    fn garbage_hello_is_rejected() {
        let (mut client, mut server) = pair();
        let acceptor = thread::spawn(move || accept_handshake(&mut server, TOKEN));
        let garbage: [u8; 200] = std::array::from_fn(|i| (i * 37 + 11) as u8);
        // The acceptor may close before reading everything, so the write result is irrelevant.
        let _ = client.write_all(&garbage);
        let r = acceptor.join().unwrap();
        assert!(matches!(r, Err(AuthError::BadMac { .. })), "{r:?}");
    }

    #[test]
    fn short_garbage_then_close_is_an_error() {
        let (mut client, mut server) = pair();
        let acceptor = thread::spawn(move || accept_handshake(&mut server, TOKEN));
        client.write_all(b"GET / HTTP/1.0\r\n").unwrap();
        client.shutdown(Shutdown::Both).unwrap();
        drop(client);
        let r = acceptor.join().unwrap();
        assert!(
            matches!(r, Err(AuthError::Closed { .. } | AuthError::Io { .. })),
            "{r:?}"
        );
    }

    #[test]
    fn immediately_closed_connection_is_an_error_on_both_sides() {
        let (client, mut server) = pair();
        drop(client);
        assert!(accept_handshake(&mut server, TOKEN).is_err());

        let (mut client, server) = pair();
        drop(server);
        let r = connect_handshake(&mut client, TOKEN, 0, Purpose::Data);
        assert!(
            matches!(r, Err(AuthError::Closed { .. } | AuthError::Io { .. })),
            "{r:?}"
        );
    }

    #[test]
    fn silent_peer_times_out_on_both_sides() {
        let (_client, mut server) = pair();
        let start = Instant::now();
        let r = accept_handshake_with_timeout(&mut server, TOKEN, SHORT);
        assert!(
            matches!(
                r,
                Err(AuthError::TimedOut {
                    step: Step::ReadHello,
                    ..
                })
            ),
            "{r:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(3));
        assert_eq!(
            server.read_timeout().unwrap(),
            None,
            "timeout restored on error"
        );

        let (mut client, _server) = pair();
        let r = connect_handshake_with_timeout(&mut client, TOKEN, 0, Purpose::Data, SHORT);
        assert!(
            matches!(
                r,
                Err(AuthError::TimedOut {
                    step: Step::ReadChallenge,
                    ..
                })
            ),
            "{r:?}"
        );
    }

    #[test]
    fn trickling_peer_is_bounded_by_the_overall_deadline() {
        let (mut client, mut server) = pair();
        let trickler = thread::spawn(move || {
            let mut nonce = [0u8; NONCE_LEN];
            let _ = client.read_exact(&mut nonce);
            for _ in 0..HELLO_LEN {
                if client.write_all(&[0]).is_err() {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let r = accept_handshake_with_timeout(&mut server, TOKEN, SHORT);
        assert!(matches!(r, Err(AuthError::TimedOut { .. })), "{r:?}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        drop(server);
        trickler.join().unwrap();
    }

    #[test]
    fn empty_token_is_refused() {
        let (mut client, mut server) = pair();
        assert!(matches!(
            accept_handshake(&mut server, b""),
            Err(AuthError::EmptyToken { .. })
        ));
        assert!(matches!(
            connect_handshake(&mut client, b"", 0, Purpose::Data),
            Err(AuthError::EmptyToken { .. })
        ));
    }

    /// The socket-free checks the `handshake` fuzz target drives: a signed hello says what
    /// was signed; a short, unsigned or wrongly purposed one is refused saying why.
    #[test]
    fn hellos_are_parsed_without_a_socket() {
        let (ns, nc) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let hello = hello_bytes(b"t", &ns, &nc, 7, Purpose::Data.as_byte());
        let (said, nonce) = verify_hello(b"t", &ns, &hello).unwrap();
        assert_eq!((said.rank, said.purpose, nonce), (7, Purpose::Data, nc));
        assert!(proof_is_valid(
            b"t",
            &ns,
            &nc,
            7,
            &proof_bytes(b"t", &ns, &nc, 7)
        ));
        assert!(!proof_is_valid(
            b"t",
            &ns,
            &nc,
            8,
            &proof_bytes(b"t", &ns, &nc, 7)
        ));
        assert_eq!(
            verify_hello(b"t", &ns, &hello[..10]),
            Err(HelloError::Length {
                len: 10,
                claimed_rank: 7
            })
        );
        assert_eq!(
            verify_hello(b"other", &ns, &hello),
            Err(HelloError::BadMac { claimed_rank: 7 })
        );
        let odd = hello_bytes(b"t", &ns, &nc, 7, 99);
        assert_eq!(
            verify_hello(b"t", &ns, &odd),
            Err(HelloError::UnknownPurpose { rank: 7, byte: 99 })
        );
    }

    #[test]
    fn purpose_bytes_round_trip() {
        for p in [
            Purpose::Rendezvous,
            Purpose::Data,
            Purpose::Join,
            Purpose::Drain,
            Purpose::JoinData,
        ] {
            assert_eq!(Purpose::from_byte(p.as_byte()), Some(p));
        }
        assert_eq!(Purpose::from_byte(0), None);
        assert_eq!(Purpose::from_byte(6), None);
    }
}
