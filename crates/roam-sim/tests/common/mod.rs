//! Workload generators and expectations shared by the simulator's integration tests.
//!
//! Expected values are computed here from the scripts alone, never from the simulator or the
//! core, so a test compares two independent derivations. Values are small integers so that
//! `f32` sums are exact whatever the order of application.

#![allow(dead_code)] // each test binary uses a different subset

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam_core::{HomeTable, Key, KeySpace, NodeId};
use roam_sim::{Op, Sim, WorkerRef};

/// The RNG a test uses to generate its workload: separate from the simulator's, so the
/// workload does not change when the simulator draws a different number of values.
pub(crate) fn test_rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ 0x7e57_5eed_0000_0000)
}

/// `num_keys` keys of 1 to 3 values each.
pub(crate) fn random_space(rng: &mut ChaCha8Rng, num_keys: usize) -> KeySpace {
    KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=3)).collect()).unwrap()
}

/// All keys of the space, in order.
pub(crate) fn all_keys(space: &KeySpace) -> Vec<Key> {
    (0..space.num_keys()).collect()
}

/// The home node of `key` under the simulation's initial placement.
pub(crate) fn home_of(sim: &Sim, key: Key) -> NodeId {
    let cfg = sim.config();
    HomeTable::new(cfg.space.num_keys(), cfg.nodes, cfg.partitioning).home(key)
}

/// Scripts for every worker and the values every key must end with once all have run.
pub(crate) struct Increments {
    /// One script per worker.
    pub(crate) scripts: Vec<(WorkerRef, Vec<Op>)>,
    /// Per key, the sum of every increment pushed to it.
    pub(crate) expected: Vec<Vec<f32>>,
    /// Per worker (same order as `scripts`), the number of keys it pushed (counting repeats).
    pub(crate) keys_pushed: Vec<u64>,
}

/// Random increments (sync and async pushes of 1 to `max_batch` keys, repeats allowed, values
/// 1 to 4) from every worker; scripts end with nothing appended, so the caller decides what
/// follows.
pub(crate) fn random_increments(
    rng: &mut ChaCha8Rng,
    space: &KeySpace,
    workers: &[WorkerRef],
    ops_per_worker: usize,
    max_batch: usize,
) -> Increments {
    let mut expected: Vec<Vec<f32>> = (0..space.num_keys())
        .map(|k| vec![0.0; space.len(k)])
        .collect();
    let mut scripts = Vec::new();
    let mut keys_pushed = Vec::new();
    for &w in workers {
        let mut script = Vec::new();
        let mut pushed = 0;
        for _ in 0..ops_per_worker {
            let n = rng.random_range(1..=max_batch);
            let keys: Vec<Key> = (0..n)
                .map(|_| rng.random_range(0..space.num_keys()))
                .collect();
            let mut vals = Vec::new();
            for &k in &keys {
                for slot in expected[k as usize].iter_mut() {
                    let v = f32::from(rng.random_range(1u8..=4));
                    *slot += v;
                    vals.push(v);
                }
            }
            pushed += keys.len() as u64;
            script.push(if rng.random_bool(0.5) {
                Op::push(keys, vals)
            } else {
                Op::push_async(keys, vals)
            });
            if rng.random_bool(0.1) {
                script.push(Op::WaitAll);
            }
        }
        scripts.push((w, script));
        keys_pushed.push(pushed);
    }
    Increments {
        scripts,
        expected,
        keys_pushed,
    }
}

/// The concatenation of the expected values of `keys`.
pub(crate) fn concat(expected: &[Vec<f32>], keys: &[Key]) -> Vec<f32> {
    keys.iter()
        .flat_map(|&k| expected[k as usize].iter().copied())
        .collect()
}
