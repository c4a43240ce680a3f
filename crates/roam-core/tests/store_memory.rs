//! The store's resident memory follows the keys it holds, not the size of the key space: state
//! words of keys that were never local here must not become resident. Alone in its test binary
//! so that no other test's allocations move the process's resident size meanwhile.

use roam_core::{KeySpace, Store};

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("reading /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages in statm");
    pages * 4096
}

#[test]
fn state_words_of_never_local_keys_stay_unbacked() {
    const NUM_KEYS: u64 = 50_000_000; // 200 MB of state words if they were all resident
    let before = resident_bytes();
    let store = Store::new(KeySpace::uniform(NUM_KEYS, 4).expect("valid key space"));
    // A contiguous share (as a range home holds) and a few keys spread over the whole space
    // (as relocations bring), all touched, plus a residency probe of every 1,000th key.
    for key in (0..100_000).chain((1_000_000..NUM_KEYS).step_by(1_000_000)) {
        assert!(store.insert(key, &[1.0; 4]));
    }
    let remote = (0..NUM_KEYS)
        .step_by(1_000)
        .filter(|&k| store.residency(k) == roam_core::Residency::Remote)
        .count();
    assert_eq!(remote, 50_000 - 100 - 49);
    let grown = resident_bytes().saturating_sub(before);
    // Held: 100,049 keys × 16 B of values (1.6 MB, in one 4 MiB chunk) and their state words
    // (0.4 MB plus 50 pages); the dense table would add 200 MB.
    assert!(
        grown < 16 << 20,
        "resident size grew by {grown} bytes for 100,049 local keys of {NUM_KEYS}"
    );
    drop(store);
}
