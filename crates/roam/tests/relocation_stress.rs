//! Relocation under heavy contention over TCP: four nodes each keep localizing large random key
//! sets (half the key space every 16 steps, as KGE's large localize batches with `preloc`
//! negatives do) while pulling and pushing random keys with pushes in flight; afterwards every
//! key holds exactly the sum of its pushes. (Written to rule out lost updates behind KGE's
//! quality loss with `--localize-batch 256`: none were lost.)

mod common;

use std::collections::VecDeque;
use std::sync::Mutex;

use common::cluster;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use roam::{Allocation, Config};

const KEYS: u64 = 2000;
const STEPS: usize = 1500;

#[test]
fn contended_relocations_lose_no_push() {
    let seed: u64 = std::env::var("ROAM_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    eprintln!("seed {seed} (replay: ROAM_STRESS_SEED={seed})");
    let nodes = cluster(4, || {
        let mut cfg = Config::new(KEYS, 2);
        cfg.allocation = Allocation::Dynamic;
        cfg
    });
    let totals = Mutex::new(vec![0f64; KEYS as usize]);
    std::thread::scope(|scope| {
        for node in &nodes {
            let totals = &totals;
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                let mut rng = SmallRng::seed_from_u64(seed ^ u64::from(node.rank()));
                let mut mine = vec![0f64; KEYS as usize];
                let mut pending = VecDeque::new();
                let mut out = vec![0f32; 28];
                for step in 0..STEPS {
                    if step % 16 == 0 {
                        let wanted: Vec<u64> =
                            (0..1200).map(|_| rng.random_range(0..KEYS)).collect();
                        w.localize(&wanted).unwrap().detach();
                    }
                    let keys: Vec<u64> = (0..14).map(|_| rng.random_range(0..KEYS)).collect();
                    w.pull(&keys, &mut out).unwrap().wait().unwrap();
                    let vals = vec![1.0f32; 28];
                    for &k in &keys {
                        mine[k as usize] += 1.0;
                    }
                    pending.push_back(w.push(&keys, &vals).unwrap());
                    if pending.len() > 8 {
                        pending.pop_front().unwrap().wait().unwrap();
                    }
                }
                for t in pending {
                    t.wait().unwrap();
                }
                let mut all = totals.lock().unwrap();
                for (a, b) in all.iter_mut().zip(&mine) {
                    *a += b;
                }
                drop(all);
                w.wait_all().unwrap();
                w.barrier().unwrap();
                if node.rank() == 0 {
                    let keys: Vec<u64> = (0..KEYS).collect();
                    let mut vals = vec![0f32; 2 * KEYS as usize];
                    w.pull(&keys, &mut vals).unwrap().wait().unwrap();
                    let all = totals.lock().unwrap();
                    for k in 0..KEYS as usize {
                        assert_eq!(
                            (vals[2 * k], vals[2 * k + 1]),
                            (all[k] as f32, all[k] as f32),
                            "seed {seed}: key {k}"
                        );
                    }
                }
                w.barrier().unwrap();
            });
        }
    });
    // Concurrently: a node's shutdown waits for its peers'.
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}
