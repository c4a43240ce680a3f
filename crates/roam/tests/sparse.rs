//! Sparse `u64` keys end to end over TCP: keys drawn from the whole `u64` range, pulled, pushed
//! and localized on three nodes, with exact sums, and each key created exactly once in the
//! cluster (by its bucket's first home, on first use).

mod common;

use std::collections::BTreeSet;

use common::cluster;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam::{Allocation, Config};

/// Keys spread over the whole range, with its edges.
fn keys(seed: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut keys: BTreeSet<u64> = (0..300).map(|_| rng.random::<u64>()).collect();
    keys.extend([0, 1, u64::MAX - 1, 1 << 63, (1 << 32) + 7]);
    keys.into_iter().collect()
}

fn run(allocation: Allocation, seed: u64) {
    println!("seed {seed} allocation {allocation:?} (replay: this test with that seed)");
    let keys = keys(seed);
    const LEN: usize = 3;
    let nodes = cluster(3, || {
        let mut cfg = Config::sparse(LEN as u32);
        cfg.allocation = allocation;
        cfg
    });
    assert!(nodes[0].key_space().is_sparse());
    std::thread::scope(|scope| {
        for node in &nodes {
            let keys = &keys;
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                let rank = node.rank() as usize;
                // Each node pushes (rank + 1) to every key twice, once before and once after
                // localizing its third of the keys.
                let update: Vec<f32> = vec![(rank + 1) as f32; keys.len() * LEN];
                w.push(keys, &update).unwrap().wait().unwrap();
                w.barrier().unwrap();
                let mine: Vec<u64> = keys.iter().copied().skip(rank).step_by(3).collect();
                w.localize(&mine).unwrap().wait().unwrap();
                w.push(keys, &update).unwrap().wait().unwrap();
                w.barrier().unwrap();
                let mut out = vec![0.0; keys.len() * LEN];
                w.pull(keys, &mut out).unwrap().wait().unwrap();
                for (i, chunk) in out.chunks(LEN).enumerate() {
                    assert_eq!(chunk, [12.0; LEN], "key {} on node {rank}", keys[i]);
                }
                w.barrier().unwrap();
            });
        }
    });
    let stats: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    let created: u64 = stats.iter().map(|s| s.keys_created).sum();
    let held: u64 = stats.iter().map(|s| s.keys_held).sum();
    assert_eq!(
        created,
        keys.len() as u64,
        "each key is created exactly once"
    );
    assert_eq!(held, keys.len() as u64, "each key has exactly one owner");
    if allocation == Allocation::Dynamic {
        assert!(stats.iter().any(|s| s.relocations_in > 0));
    }
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

#[test]
fn sparse_keys_over_the_whole_u64_range_with_static_hash_homes() {
    run(Allocation::StaticHash, 11);
}

#[test]
fn sparse_keys_relocate_and_sum_exactly_under_dynamic_allocation() {
    run(Allocation::Dynamic, 12);
}

#[test]
fn a_dense_key_space_keeps_the_dense_layout() {
    let space = Config::new(100, 2).key_space().unwrap();
    assert!(!space.is_sparse());
    assert_eq!(space.num_keys(), 100);
    let sparse = Config::sparse(2).key_space().unwrap();
    assert!(sparse.is_sparse() && sparse.contains(u64::MAX - 1));
    let mut per_key = Config::per_key(vec![1, 2]);
    per_key.sparse_keys = true;
    assert!(per_key.key_space().is_err(), "sparse keys need one length");
}
