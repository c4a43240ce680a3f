//! Server-side optimizers over TCP (real nodes on loopback): three nodes under dynamic
//! allocation send Adam gradients for their own keys while localizing random other keys, so
//! records (with their moments and step counts) move while they are stepped; every key ends
//! equal to the gradients applied in order from zeros. A checkpoint then restores into one
//! node with the optimizer state: one more step there gives the reference's next value, which
//! it would not without the hidden state. Bad optimizer settings fail the start by name.

mod common;

use common::cluster;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam::{Allocation, Config, Optimizer, StartError};

const KEYS: u64 = 90;
const LEN: usize = 4;
const ROUNDS: usize = 12;
const NODES: u32 = 3;

fn config() -> Config {
    let mut cfg = Config::new(KEYS, LEN as u32);
    cfg.allocation = Allocation::Dynamic;
    cfg.optimizer = Some(Optimizer::adam(0.05));
    cfg
}

/// Gradient of `key` in round `round` (the same on every node, from the seed alone).
fn gradient(seed: u64, key: u64, round: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (key << 20) ^ round as u64);
    (0..LEN).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

/// Key `key`'s record after `rounds` gradients, applied in order from zeros.
fn reference(opt: &Optimizer, seed: u64, key: u64, rounds: usize) -> Vec<f32> {
    let mut record = vec![0.0f32; opt.layout().record_len(LEN)];
    for round in 0..rounds {
        let (w, state) = record.split_at_mut(LEN);
        opt.step(w, state, &gradient(seed, key, round));
    }
    record
}

#[test]
fn adam_over_tcp_with_relocations_and_checkpoint_restore() {
    let seed = 17;
    println!("seed {seed} (replay: this test with that seed)");
    let opt = config().optimizer.unwrap();
    let dir = std::env::temp_dir().join(format!("roam-optim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = cluster(NODES, config);
    std::thread::scope(|scope| {
        for node in &nodes {
            let dir = &dir;
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                let rank = u64::from(node.rank());
                let mut rng = ChaCha8Rng::seed_from_u64(seed + rank);
                let mine: Vec<u64> = (0..KEYS).filter(|k| k % 3 == rank).collect();
                for round in 0..ROUNDS {
                    // Pull some other keys here: their records move, moments and all.
                    let others: Vec<u64> = (0..8).map(|_| rng.random_range(0..KEYS)).collect();
                    w.localize(&others).unwrap().detach();
                    let grads: Vec<f32> = mine
                        .iter()
                        .flat_map(|&k| gradient(seed, k, round))
                        .collect();
                    w.push_gradients(&mine, &grads).unwrap().wait().unwrap();
                }
                w.barrier().unwrap();
                let all: Vec<u64> = (0..KEYS).collect();
                let mut out = vec![0.0; KEYS as usize * LEN];
                w.pull(&all, &mut out).unwrap().wait().unwrap();
                for (k, got) in out.chunks(LEN).enumerate() {
                    let want = reference(&opt, seed, k as u64, ROUNDS);
                    assert_eq!(got, &want[..LEN], "key {k} pulled on node {rank}");
                }
                w.barrier().unwrap();
                w.checkpoint(dir).unwrap();
            });
        }
    });
    let moved: u64 = nodes.iter().map(|n| n.stats().relocations_in).sum();
    assert!(moved > 0, "records moved while they were stepped");
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });

    // One node restored from the checkpoint: one more step equals the reference's next.
    let restored = cluster(1, || config().restore_from(&dir));
    let w = restored[0].worker(0).unwrap();
    let all: Vec<u64> = (0..KEYS).collect();
    let grads: Vec<f32> = all
        .iter()
        .flat_map(|&k| gradient(seed, k, ROUNDS))
        .collect();
    w.push_gradients(&all, &grads).unwrap().wait().unwrap();
    let mut out = vec![0.0; KEYS as usize * LEN];
    w.pull(&all, &mut out).unwrap().wait().unwrap();
    for (k, got) in out.chunks(LEN).enumerate() {
        let want = reference(&opt, seed, k as u64, ROUNDS + 1);
        assert_eq!(
            got,
            &want[..LEN],
            "key {k} after the restore and one more step"
        );
    }
    drop(w);
    for node in restored {
        node.shutdown().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_optimizer_settings_fail_the_start_by_name() {
    let mut cfg = Config::new(10, 2);
    cfg.optimizer = Some(Optimizer::Adam {
        lr: 0.1,
        beta1: 0.9,
        beta2: 1.5,
        eps: 1e-8,
    });
    cfg.cluster.num_nodes = Some(1);
    cfg.cluster.rank = Some(0);
    let err = roam::NodeHandle::start(cfg).map(|_| ()).unwrap_err();
    assert!(matches!(err, StartError::KeySpace(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("beta2 = 1.5"), "{text}");

    let mut cfg = Config::new(10, 2);
    cfg.optimizer = Some(Optimizer::adagrad(0.1));
    cfg.record_layout = roam::RecordLayout {
        hidden_per_value: 0,
        hidden_per_key: 3,
    };
    cfg.cluster.num_nodes = Some(1);
    cfg.cluster.rank = Some(0);
    let err = roam::NodeHandle::start(cfg).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("record_layout"), "{err}");
}
