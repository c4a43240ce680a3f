//! Fuzz target: peer bytes through the handshake's parsers (see `src/checks.rs`).
#![no_main]

#[path = "../src/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::handshake(data));
