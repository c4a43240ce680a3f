//! Entry points for the fuzz targets (`fuzz/`, and their corpus replay test
//! `tests/fuzz_corpus.rs`) only: the socket-free parts of the handshake and the TCP frame
//! reader, which a peer's bytes reach but which are not roam's API. Hidden from the docs; no
//! stability promise. Each function delegates to the production code unchanged.

use std::io::Read;
use std::net::SocketAddr;

use roam_core::wire::{Frame, Limits};

pub use crate::auth::{HELLO_LEN, Hello, HelloError, MAC_LEN, NONCE_LEN};

/// Bytes of one address entry (rendezvous, join).
pub const ENTRY_LEN: usize = crate::rendezvous::ENTRY_LEN;

/// The connector's hello for challenge `nonce_s`.
pub fn hello_bytes(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    nonce_c: &[u8; NONCE_LEN],
    rank: u32,
    purpose_byte: u8,
) -> [u8; HELLO_LEN] {
    crate::auth::hello_bytes(token, nonce_s, nonce_c, rank, purpose_byte)
}

/// The acceptor's check of a hello (any length): what it said and its nonce.
pub fn verify_hello(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    hello: &[u8],
) -> Result<(Hello, [u8; NONCE_LEN]), HelloError> {
    crate::auth::verify_hello(token, nonce_s, hello)
}

/// The acceptor's proof for a verified hello.
pub fn proof_bytes(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    nonce_c: &[u8; NONCE_LEN],
    rank: u32,
) -> [u8; MAC_LEN] {
    crate::auth::proof_bytes(token, nonce_s, nonce_c, rank)
}

/// The connector's check of the acceptor's proof (any length).
pub fn proof_is_valid(
    token: &[u8],
    nonce_s: &[u8; NONCE_LEN],
    nonce_c: &[u8; NONCE_LEN],
    rank: u32,
    proof: &[u8],
) -> bool {
    crate::auth::proof_is_valid(token, nonce_s, nonce_c, rank, proof)
}

/// An address entry as sent.
pub fn encode_entry(addr: SocketAddr) -> [u8; ENTRY_LEN] {
    crate::rendezvous::encode_entry(addr)
}

/// An address entry as received (any length).
pub fn decode_entry(entry: &[u8]) -> Result<SocketAddr, String> {
    crate::rendezvous::decode_entry(entry)
}

/// One frame from a peer's byte stream, as the TCP shell reads it (the error as text).
pub fn read_frame(reader: &mut impl Read, limits: &Limits) -> Result<Frame, String> {
    crate::transport::read_frame(reader, limits).map_err(|e| e.to_string())
}
