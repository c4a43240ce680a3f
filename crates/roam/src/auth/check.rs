//! The socket-free half of the handshake: building the connector's hello and the acceptor's
//! proof, and checking the peer's bytes. Pure functions, so the `handshake` fuzz target drives
//! them without a socket.
//!
//! Invariants: MACs are compared in constant time (`verify_slice`); the connect and accept MACs
//! use distinct domain separators; a hello of the wrong length or with an unknown purpose is a
//! [`HelloError`], never a panic.

use hmac::Mac;

use super::{
    ACCEPT_DOMAIN, CONNECT_DOMAIN, HELLO_LEN, Hello, HmacSha256, MAC_LEN, NONCE_LEN, Purpose,
};

/// Why a connector's hello was refused (the socket-free part of the acceptor's checks; the
/// handshake turns it into an [`AuthError`] naming the peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// The hello is not [`HELLO_LEN`] bytes (the socket path always reads exactly that many).
    #[error("hello of {len} bytes, expected {HELLO_LEN}")]
    Length {
        /// Bytes received.
        len: usize,
        /// The rank in its first four bytes, if it has them (0 otherwise).
        claimed_rank: u32,
    },
    /// The MAC does not match: the connector does not hold our token.
    #[error("bad MAC (claimed rank {claimed_rank})")]
    BadMac {
        /// The rank it claimed.
        claimed_rank: u32,
    },
    /// An authenticated hello with a purpose this version does not know.
    #[error("rank {rank} asked for unknown connection purpose {byte}")]
    UnknownPurpose {
        /// The rank.
        rank: u32,
        /// The purpose byte received.
        byte: u8,
    },
}

/// The connector's hello for challenge `nonce_s`: rank, purpose byte, its nonce and its MAC.
pub(crate) fn hello_bytes(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    nonce_c: &[u8; NONCE_LEN],
    rank: u32,
    purpose_byte: u8,
) -> [u8; HELLO_LEN] {
    let rank_bytes = rank.to_le_bytes();
    let mac = keyed(token)
        .chain_update(CONNECT_DOMAIN)
        .chain_update(nonce_s)
        .chain_update(nonce_c)
        .chain_update(rank_bytes)
        .chain_update([purpose_byte])
        .finalize()
        .into_bytes();
    let mut hello = [0u8; HELLO_LEN];
    hello[..4].copy_from_slice(&rank_bytes);
    hello[4] = purpose_byte;
    hello[5..5 + NONCE_LEN].copy_from_slice(nonce_c);
    hello[5 + NONCE_LEN..].copy_from_slice(&mac);
    hello
}

/// Checks a connector's `hello` (peer bytes, any length) against our challenge `nonce_s`;
/// returns what it said and its nonce. The MAC is compared in constant time and checked
/// before the purpose, so strangers learn nothing about which purposes exist.
pub(crate) fn verify_hello(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    hello: &[u8],
) -> Result<(Hello, [u8; NONCE_LEN]), HelloError> {
    let claimed_rank = |b: &[u8]| b.first_chunk::<4>().map_or(0, |r| u32::from_le_bytes(*r));
    let Ok(hello) = <&[u8; HELLO_LEN]>::try_from(hello) else {
        return Err(HelloError::Length {
            len: hello.len(),
            claimed_rank: claimed_rank(hello),
        });
    };
    let (rank_bytes, rest) = hello.split_at(4);
    let (purpose_byte, rest) = rest.split_at(1);
    let (nonce_c, mac) = rest.split_at(NONCE_LEN);
    let rank = claimed_rank(rank_bytes);
    keyed(token)
        .chain_update(CONNECT_DOMAIN)
        .chain_update(nonce_s)
        .chain_update(nonce_c)
        .chain_update(rank_bytes)
        .chain_update(purpose_byte)
        .verify_slice(mac)
        .map_err(|_| HelloError::BadMac { claimed_rank: rank })?;
    let byte = purpose_byte[0];
    let purpose = Purpose::from_byte(byte).ok_or(HelloError::UnknownPurpose { rank, byte })?;
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(nonce_c);
    Ok((Hello { rank, purpose }, nonce))
}

/// The acceptor's proof for a verified hello.
pub(crate) fn proof_bytes(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    nonce_c: &[u8; NONCE_LEN],
    rank: u32,
) -> [u8; MAC_LEN] {
    proof_mac(token, nonce_s, nonce_c, rank)
        .finalize()
        .into_bytes()
        .into()
}

/// The acceptor's MAC state before finalizing: what [`proof_bytes`] and [`proof_is_valid`]
/// both hash.
fn proof_mac(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    nonce_c: &[u8; NONCE_LEN],
    rank: u32,
) -> HmacSha256 {
    keyed(token)
        .chain_update(ACCEPT_DOMAIN)
        .chain_update(nonce_c)
        .chain_update(nonce_s)
        .chain_update(rank.to_le_bytes())
}

/// Whether `proof` (peer bytes, any length) is the acceptor's proof for our hello; compared
/// in constant time.
pub(crate) fn proof_is_valid(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    nonce_c: &[u8; NONCE_LEN],
    rank: u32,
    proof: &[u8],
) -> bool {
    proof_mac(token, nonce_s, nonce_c, rank)
        .verify_slice(proof)
        .is_ok()
}

fn keyed(token: &[u8]) -> HmacSha256 {
    // HMAC hashes or pads keys of any length, so `new_from_slice` cannot fail for it.
    <HmacSha256 as Mac>::new_from_slice(token).expect("HMAC accepts keys of any length")
}
