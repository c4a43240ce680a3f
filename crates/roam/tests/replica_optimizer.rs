//! A stateful optimizer (Adagrad) on replicated keys over TCP: three nodes × two workers push
//! gradients of replicated keys; each node accumulates them, and the key's hub steps its
//! primary once per sync with their sum (`roam_core::replica`, `replica/grads.rs`).
//!
//! With background rounds off (a one-hour period), every `sync_replicas` is exactly one
//! Adagrad step per key on the sum of the gradients pushed since the previous one. The
//! gradients are multiples of 1/4, so their sum is exact in any order, and every replica on
//! every node must equal, bit for bit, that step sequence applied here with
//! `Optimizer::step`. A checkpoint then carries the hub's accumulator: a cluster restored
//! from it takes one more sync's step from the restored state, again bit for bit. A second run
//! with 1 ms background rounds and thousands of pushes checks that every replica converges to
//! one value after a sync, and that the rounds ran.

mod common;

use std::time::Duration;

use common::cluster;
use roam::{Allocation, Config, Optimizer};

const KEYS: [u64; 2] = [1, 5];
const PLAIN: u64 = 3;
const ROUNDS: usize = 12;

fn adagrad() -> Optimizer {
    Optimizer::Adagrad { lr: 0.5, eps: 1e-6 }
}

fn config(sync_every: Duration) -> Config {
    let mut cfg = Config::new(8, 2).replicate(KEYS);
    cfg.workers_per_node = Some(2);
    cfg.allocation = Allocation::Dynamic;
    cfg.replica_sync_every = sync_every;
    cfg.optimizer = Some(adagrad());
    cfg
}

/// The gradient worker `w` of node `n` pushes to replicated key number `k` in round `r`.
fn grad(n: u32, w: u32, k: usize, r: usize) -> [f32; 2] {
    let a = (n * 2 + w + 1) as f32 * 0.25 * ((r % 4) + 1) as f32;
    [a * if k == 0 { 1.0 } else { -1.0 }, -0.5]
}

/// Each round's sum of the gradients of key number `k` over 3 nodes × 2 workers.
fn round_sum(k: usize, r: usize) -> [f32; 2] {
    let mut sum = [0.0; 2];
    for n in 0..3 {
        for w in 0..2 {
            let g = grad(n, w, k, r);
            sum[0] += g[0];
            sum[1] += g[1];
        }
    }
    sum
}

/// Runs `rounds` (numbered from `first`) of: every worker pushes its gradients, then syncs;
/// every worker checks its replicas against `want(round)` after each sync; then, with
/// `checkpoint`, every worker takes part in a checkpoint into it.
fn push_rounds(
    nodes: &[roam::NodeHandle],
    (first, rounds): (usize, usize),
    want: &[[[f32; 2]; 2]],
    checkpoint: Option<&std::path::Path>,
) {
    std::thread::scope(|scope| {
        for node in nodes {
            for w in 0..2u32 {
                scope.spawn(move || {
                    let worker = node.worker(w).unwrap();
                    let n = node.rank();
                    for r in first..first + rounds {
                        let mut grads = Vec::new();
                        for k in 0..KEYS.len() {
                            grads.extend(grad(n, w, k, r));
                        }
                        worker
                            .push_gradients(&KEYS, &grads)
                            .unwrap()
                            .wait()
                            .unwrap();
                        // A key that is not replicated: its owner steps it per push.
                        worker
                            .push_gradients(&[PLAIN], &[0.25, 0.25])
                            .unwrap()
                            .wait()
                            .unwrap();
                        worker.sync_replicas().unwrap();
                        let mut out = [0.0f32; 4];
                        worker.pull(&KEYS, &mut out).unwrap().wait().unwrap();
                        let want = &want[r - first];
                        assert_eq!(
                            out,
                            [want[0][0], want[0][1], want[1][0], want[1][1]],
                            "node {n} worker {w} after the sync of round {r}"
                        );
                        // Nobody pushes the next round before everyone has checked.
                        worker.barrier().unwrap();
                    }
                    if let Some(dir) = checkpoint {
                        worker.checkpoint(dir).unwrap();
                    }
                });
            }
        }
    });
}

/// Each key's record (visible, then accumulator) after applying `rounds` syncs' sums.
fn replay(records: &mut [[f32; 4]; 2], rounds: std::ops::Range<usize>) -> Vec<[[f32; 2]; 2]> {
    let mut after = Vec::new();
    for r in rounds {
        let mut values = [[0.0; 2]; 2];
        for (k, record) in records.iter_mut().enumerate() {
            let (w, acc) = record.split_at_mut(2);
            adagrad().step(w, acc, &round_sum(k, r));
            values[k] = [w[0], w[1]];
        }
        after.push(values);
    }
    after
}

fn shutdown(nodes: Vec<roam::NodeHandle>) {
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

#[test]
fn each_sync_is_one_adagrad_step_at_the_hub_and_a_checkpoint_carries_its_state() {
    let dir = std::env::temp_dir().join(format!("roam-replica-optim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let hour = Duration::from_secs(3600);
    let mut records = [[0.0f32; 4]; 2];
    let want = replay(&mut records, 0..ROUNDS);
    let nodes = cluster(3, || config(hour));
    // Then a checkpoint: the hubs' records, accumulator included.
    push_rounds(&nodes, (0, ROUNDS), &want, Some(&dir));
    for s in nodes.iter().map(|n| n.stats()) {
        assert_eq!(s.replicated_keys, 2);
    }
    let manifest = roam::checkpoint::manifest_of(&dir).unwrap();
    assert_eq!(
        manifest.optimizer.as_ref().map(|o| o.kind.as_str()),
        Some("adagrad")
    );
    shutdown(nodes);
    // Restored: one more sync is one step from the restored value and accumulator.
    let want = replay(&mut records, ROUNDS..ROUNDS + 2);
    let nodes = cluster(3, || config(hour).restore_from(&dir));
    push_rounds(&nodes, (ROUNDS, 2), &want, None);
    shutdown(nodes);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_background_rounds_every_replica_converges_after_a_sync() {
    const PUSHES: usize = 3_000;
    let nodes = cluster(3, || config(Duration::from_millis(1)));
    let values: Vec<Vec<f32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .flat_map(|node| {
                (0..2u32).map(move |w| {
                    scope.spawn(move || {
                        let worker = node.worker(w).unwrap();
                        for i in 0..PUSHES {
                            let g = [0.25 * ((i % 3) as f32 + 1.0), -0.5, -0.25, 0.5];
                            worker.push_gradients(&KEYS, &g).unwrap().wait().unwrap();
                        }
                        worker.sync_replicas().unwrap();
                        let mut out = vec![0.0f32; 4];
                        worker.pull(&KEYS, &mut out).unwrap().wait().unwrap();
                        worker.barrier().unwrap();
                        out
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for v in &values {
        assert_eq!(v, &values[0], "every replica holds the hub's value");
    }
    // Adagrad moves against the gradient's sign, at most lr per step and coordinate.
    let v = &values[0];
    assert!(
        v[0] < 0.0 && v[1] > 0.0 && v[2] > 0.0 && v[3] < 0.0,
        "{v:?}"
    );
    let stats: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    assert!(stats.iter().all(|s| s.replica_rounds > 0));
    assert!(stats.iter().any(|s| s.replica_keys_received > 0));
    shutdown(nodes);
}
