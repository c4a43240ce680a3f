//! What the fuzz targets run on each input, shared with the stable corpus replay test
//! (`crates/roam/tests/fuzz_corpus.rs` includes this file), so CI replays exactly the checks
//! the fuzzer ran.
//!
//! Invariant: each check feeds the bytes to the code that parses a peer's bytes in production
//! and asserts only what must hold for *any* input (no panic, consumed lengths within the
//! input, round trips of what decoded); a panic, an allocation beyond the fuzzer's
//! `-malloc_limit_mb` or a hang is a finding.

#![allow(dead_code)]

use roam::fuzzing::{
    self as auth, ENTRY_LEN, HELLO_LEN, MAC_LEN, NONCE_LEN, decode_entry, encode_entry,
};
use roam_core::Partitioning;
use roam_core::directory::Directory;
use roam_core::fuzzing::{apply_directory_table, directory_table};
use roam_core::msg::{Member, Msg};
use roam_core::wire::{self, HEADER_LEN, Limits};

/// Small limits for the in-memory decoder, so that mutated counts often fit the input and the
/// fuzzer reaches the typed decode; the stream reader gets the production defaults.
const SMALL: Limits = Limits {
    max_keys: 1 << 12,
    max_values: 1 << 14,
};

/// `data` as a stream of frames: the in-memory decoder (simulators) frame by frame, each
/// frame's typed decode (and a `Welcome` table applied as a joining node would), then the TCP
/// shell's stream reader over the same bytes with the default limits.
pub(crate) fn frame(data: &[u8]) {
    let mut rest = data;
    while let Ok((frame, used)) = wire::decode(rest, &SMALL) {
        assert!(
            used >= HEADER_LEN && used <= rest.len(),
            "consumed {used} of {}",
            rest.len()
        );
        // Byte for byte, but for the header's reserved bytes, which the decoder ignores.
        let mut sent = rest[..used].to_vec();
        sent[36..HEADER_LEN].fill(0);
        assert_eq!(
            frame.to_bytes(),
            sent,
            "a decoded frame re-encodes to its bytes"
        );
        typed(&frame);
        rest = &rest[used..];
    }
    let mut stream = data;
    while let Ok(frame) = roam::fuzzing::read_frame(&mut stream, &Limits::default()) {
        typed(&frame);
    }
}

fn typed(frame: &wire::Frame) {
    let Ok(msg) = Msg::decode(frame) else { return };
    if let Msg::Member(Member::Welcome {
        table: Some(table),
        epoch,
        ..
    }) = msg
    {
        // A joining node's table, against a range-partitioned directory of 64 buckets (a
        // hash-partitioned one has thousands, a table too large for the fuzzer's inputs and
        // too slow to compare on every input).
        let mut dir = Directory::new(64, 2, Partitioning::Range);
        let before = directory_table(&dir);
        match apply_directory_table(&mut dir, epoch, table) {
            Ok(()) => assert_eq!(directory_table(&dir), table, "an applied table reads back"),
            Err(_) => assert_eq!(
                directory_table(&dir),
                before,
                "a refused table changes nothing"
            ),
        }
    }
}

/// Fixed token: the fuzzer cannot forge a MAC, so half of the inputs are made valid hellos
/// (first byte odd) to reach the checks behind the MAC.
const TOKEN: &[u8] = b"fuzz-token";

/// `data` as what a handshake peer sends: the challenge nonce, then a hello (acceptor side) or
/// a proof (connector side), and the address entries that follow a rendezvous or a join.
pub(crate) fn handshake(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut nonce_s = [0u8; NONCE_LEN];
    let n = rest.len().min(NONCE_LEN);
    nonce_s[..n].copy_from_slice(&rest[..n]);
    let rest = &rest[n..];
    if mode & 1 == 1 && rest.len() >= 5 + NONCE_LEN {
        // A hello with a valid MAC over the fuzzer's rank, purpose and nonce.
        let rank = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
        let purpose = rest[4];
        let nonce_c: [u8; NONCE_LEN] = rest[5..5 + NONCE_LEN].try_into().expect("nonce");
        let hello = auth::hello_bytes(TOKEN, &nonce_s, &nonce_c, rank, purpose);
        match auth::verify_hello(TOKEN, &nonce_s, &hello) {
            Ok((said, nonce)) => {
                assert_eq!(
                    (said.rank, said.purpose.as_byte(), nonce),
                    (rank, purpose, nonce_c)
                );
                let proof = auth::proof_bytes(TOKEN, &nonce_s, &nonce, rank);
                assert!(auth::proof_is_valid(
                    TOKEN, &nonce_s, &nonce_c, rank, &proof
                ));
            }
            Err(e) => assert_eq!(
                e,
                auth::HelloError::UnknownPurpose {
                    rank,
                    byte: purpose
                },
                "a validly signed hello is refused only for its purpose"
            ),
        }
        // Any other token refuses it.
        assert!(auth::verify_hello(b"other", &nonce_s, &hello).is_err());
    } else {
        let forged = auth::verify_hello(TOKEN, &nonce_s, rest);
        if rest.len() == HELLO_LEN {
            // Accepted only if the fuzzer found a MAC, i.e. never in practice.
            if let Ok((said, nonce_c)) = forged {
                let real =
                    auth::hello_bytes(TOKEN, &nonce_s, &nonce_c, said.rank, said.purpose.as_byte());
                assert_eq!(&real[..], rest);
            }
        } else {
            assert!(forged.is_err(), "a hello of {} bytes", rest.len());
        }
        let nonce_c = nonce_s.map(|b| b ^ 0x5a);
        let proof = &rest[..rest.len().min(MAC_LEN)];
        if auth::proof_is_valid(TOKEN, &nonce_s, &nonce_c, 0, proof) {
            assert_eq!(proof, auth::proof_bytes(TOKEN, &nonce_s, &nonce_c, 0));
        }
    }
    for entry in rest.chunks(ENTRY_LEN) {
        if let Ok(addr) = decode_entry(entry) {
            assert_eq!(
                decode_entry(&encode_entry(addr)),
                Ok(addr),
                "an entry round-trips"
            );
        }
    }
}
