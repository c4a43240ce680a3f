//! Single-thread micro-benchmark of server-side optimizers on the local fast path:
//! `cargo run --release -p roam-core --example optim_bench -- [keys] [batch]`.
//!
//! For SGD, Adagrad and Adam at value lengths 4, 16 and 64, prints ns per row for
//! `Front::push_gradients` on a one-node cluster (every key local: validation, the latch, the
//! step in the record) and for a plain loop that applies the same `Optimizer::step` to the same
//! rows of an ordinary `Vec<f32>` (no store, no latch), and their ratio. Keys are uniformly
//! random; each figure is the best of 5 repetitions, the two loops alternated.

// A benchmark harness, not part of the sans-IO core: it may read the clock.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use roam_core::{Front, KeySpace, Node, NodeConfig, NodeId, Optimizer, Partitioning, WorkerId};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("numeric argument"));
    let keys = args.next().unwrap_or(100_000);
    let batch = args.next().unwrap_or(100) as usize;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let drawn: Vec<u64> = (0..1 << 20).map(|_| rng.random_range(0..keys)).collect();
    println!(
        "{keys} keys, batches of {batch} random keys, ns per row (best of {REPS}, alternated)"
    );
    println!("optimizer  len  push_gradients  plain loop  ratio");
    for opt in [
        Optimizer::sgd(0.01),
        Optimizer::adagrad(0.01),
        Optimizer::adam(0.01),
    ] {
        for len in [4usize, 16, 64] {
            // Alternated, so that a burst of load elsewhere on the machine hits both.
            let (mut fast, mut plain) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..REPS {
                fast = fast.min(via_front(opt, keys, len, batch, &drawn));
                plain = plain.min(plain_loop(opt, keys, len, batch, &drawn));
            }
            println!(
                "{:<9} {len:>4}  {fast:>14.1}  {plain:>10.1}  {:>5.2}",
                opt.name(),
                fast / plain
            );
        }
    }
}

/// Repetitions of each measurement; the best counts (the machine may be shared).
const REPS: usize = 5;

/// Rows stepped per measurement: enough for a stable figure, few enough for a quick run.
const ROWS: usize = 4_000_000;

fn gradients(batch: usize, len: usize) -> Vec<f32> {
    (0..batch * len)
        .map(|i| (i % 7) as f32 * 0.1 - 0.3)
        .collect()
}

fn via_front(opt: Optimizer, keys: u64, len: usize, batch: usize, drawn: &[u64]) -> f64 {
    let space = KeySpace::uniform(keys, len as u32)
        .expect("valid key space")
        .with_optimizer(opt)
        .expect("valid optimizer");
    let node = Node::new(NodeConfig::new(NodeId(0), 1, 1, space, Partitioning::Range));
    let mut front = Front::new(&node, WorkerId(0), Arc::default());
    let grads = gradients(batch, len);
    let rounds = ROWS / batch;
    let start = Instant::now();
    for r in 0..rounds {
        let at = (r * batch) % (drawn.len() - batch);
        let handoff = front
            .push_gradients(&drawn[at..at + batch], &grads)
            .expect("valid batch");
        assert!(handoff.is_none(), "every key is local");
    }
    start.elapsed().as_nanos() as f64 / (rounds * batch) as f64
}

fn plain_loop(opt: Optimizer, keys: u64, len: usize, batch: usize, drawn: &[u64]) -> f64 {
    let record = opt.layout().record_len(len);
    let mut rows = vec![0f32; keys as usize * record];
    let grads = gradients(batch, len);
    let rounds = ROWS / batch;
    let start = Instant::now();
    for r in 0..rounds {
        let at = (r * batch) % (drawn.len() - batch);
        for (&key, g) in drawn[at..at + batch].iter().zip(grads.chunks_exact(len)) {
            let row = &mut rows[key as usize * record..(key as usize + 1) * record];
            let (w, state) = row.split_at_mut(len);
            opt.step(w, state, g);
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / (rounds * batch) as f64;
    std::hint::black_box(&rows);
    ns
}
