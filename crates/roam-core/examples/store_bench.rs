//! Single-thread micro-benchmark of the store's local hot path (no network, no node lock):
//! `cargo run --release -p roam-core --example store_bench -- [keys] [value_len] [batch]`.
//! Prints ns per key for batched local pulls and pushes of uniformly random keys.

// A benchmark harness, not part of the sans-IO core: it may read the clock.
#![allow(clippy::disallowed_methods)]

use std::time::Instant;

use rand::{Rng, SeedableRng};
use roam_core::{KeySpace, Store, UpdateMode};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("numeric argument"));
    let keys = args.next().unwrap_or(100_000);
    let len = args.next().unwrap_or(10) as usize;
    let batch = args.next().unwrap_or(100) as usize;
    let store = Store::new(KeySpace::uniform(keys, len as u32).expect("valid key space"));
    let zeros = vec![0f32; len];
    for k in 0..keys {
        store.insert(k, &zeros);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let drawn: Vec<u64> = (0..1 << 20).map(|_| rng.random_range(0..keys)).collect();
    let mut out = vec![0f32; batch * len];
    let update = vec![1f32; batch * len];
    for (name, pull) in [
        ("pull", true),
        ("push", false),
        ("pull", true),
        ("push", false),
    ] {
        let rounds = 200_000;
        let start = Instant::now();
        let mut misses = 0;
        for r in 0..rounds {
            let at = (r * batch) % (drawn.len() - batch);
            let batch_keys = &drawn[at..at + batch];
            if pull {
                store
                    .pull_batch_local(batch_keys, &mut out, len, |_| misses += 1)
                    .expect("keys in range");
            } else {
                store.push_batch_local(batch_keys, &update, len, UpdateMode::Add, |_| misses += 1);
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (rounds * batch) as f64;
        assert_eq!(misses, 0);
        println!("{name}: {ns:.2} ns/key ({:.1} M keys/s)", 1e3 / ns);
    }
    std::hint::black_box(&out);
}
