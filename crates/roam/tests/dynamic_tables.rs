//! Dynamic key spaces end to end over TCP (issue #17): three nodes under dynamic allocation
//! stream new `u64` ids through pulls, gradients and localizes with a row budget per node.
//! Checked: every id a node used, pulled again after a barrier, reads its initial row minus
//! whole SGD steps (a row trained since its last creation, or the initial row of an id evicted
//! or never admitted; never anything else); once the cluster is quiet, no node holds more rows
//! than its budget plus the rows relocated to it, and rows created minus rows evicted equals
//! rows held. Bad settings fail the start naming them.

mod common;

use common::cluster;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam::{Admission, Allocation, Config, DynamicPolicy, Initializer, Optimizer};

const LEN: usize = 4;
const BUDGET: u64 = 40;

fn init() -> Initializer {
    Initializer::Uniform {
        low: -0.5,
        high: 0.5,
        seed: 5,
    }
}

#[test]
fn budget_holds_and_rows_are_consistent_while_ids_stream_and_move() {
    let seed = 21;
    println!("seed {seed} (replay: this test with that seed)");
    let nodes = cluster(3, || {
        let mut cfg = Config::dynamic(
            LEN as u32,
            DynamicPolicy {
                admission: Admission::Count {
                    min_count: 2,
                    sketch_width: 4096,
                },
                max_rows: Some(BUDGET),
                max_bytes: None,
                ttl_ns: None,
                ttl_steps: None,
                spill: false,
            },
        );
        cfg.allocation = Allocation::Dynamic;
        cfg.initializer = init();
        cfg.optimizer = Some(Optimizer::sgd(1.0));
        cfg
    });
    std::thread::scope(|scope| {
        for node in &nodes {
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                let rank = node.rank() as u64;
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ rank);
                let mut seen = Vec::new();
                for step in 0..60 {
                    // A hot set shared by every node, and a stream of new ids.
                    let mut ids: Vec<u64> = (0..8).map(|_| rng.random_range(0..20)).collect();
                    ids.extend((0..8).map(|_| rng.random::<u64>()));
                    ids.sort_unstable();
                    ids.dedup();
                    let mut out = vec![0.0; ids.len() * LEN];
                    w.pull(&ids, &mut out).unwrap().wait().unwrap();
                    w.push_gradients(&ids, &vec![0.25; ids.len() * LEN])
                        .unwrap()
                        .wait()
                        .unwrap();
                    if step % 5 == 0 {
                        w.localize(&ids[..2]).unwrap().wait().unwrap();
                    }
                    seen.extend(ids);
                }
                w.barrier().unwrap();
                // Every value read is an initial row minus whole SGD steps of 0.25 (a row
                // lives from its creation to its eviction; an unadmitted id reads its
                // initial row).
                seen.sort_unstable();
                seen.dedup();
                let mut out = vec![0.0; seen.len() * LEN];
                w.pull(&seen, &mut out).unwrap().wait().unwrap();
                let mut row = [0.0; LEN];
                for (i, &id) in seen.iter().enumerate() {
                    init().fill(id, &mut row);
                    for j in 0..LEN {
                        let steps = (row[j] - out[i * LEN + j]) / 0.25;
                        assert!(
                            steps > -1e-3 && (steps - steps.round()).abs() < 1e-3,
                            "id {id}: read {} from initial {}",
                            out[i * LEN + j],
                            row[j]
                        );
                    }
                }
                w.barrier().unwrap();
            });
        }
    });
    let stats: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    for (rank, s) in stats.iter().enumerate() {
        assert!(
            s.keys_held <= BUDGET + s.relocations_in,
            "node {rank}: {} rows, budget {BUDGET}, {} relocated in",
            s.keys_held,
            s.relocations_in
        );
    }
    let created: u64 = stats.iter().map(|s| s.keys_created).sum();
    let evicted: u64 = stats.iter().map(|s| s.rows_evicted).sum();
    let held: u64 = stats.iter().map(|s| s.keys_held).sum();
    assert_eq!(created - evicted, held, "created − evicted = held");
    assert!(evicted > 0, "the stream must overflow the budget");
    assert!(stats.iter().map(|s| s.rows_rejected).sum::<u64>() > 0);
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

#[test]
fn bad_dynamic_settings_fail_the_start_by_name() {
    let mut dense = Config::new(10, 2);
    dense.dynamic = Some(DynamicPolicy::default());
    let err = dense.key_space().unwrap_err().to_string();
    assert!(err.contains("sparse (dynamic) key space"), "{err}");
    let cfg = Config::dynamic(
        2,
        DynamicPolicy {
            admission: Admission::Count {
                min_count: 0,
                sketch_width: 8,
            },
            ..DynamicPolicy::default()
        },
    );
    let err = cfg.key_space().unwrap_err().to_string();
    assert!(err.contains("min_count = 0"), "{err}");
    // A byte budget below one record (16 values and Adagrad's 16: 128 bytes).
    let mut cfg = Config::dynamic(
        16,
        DynamicPolicy {
            max_bytes: Some(100),
            ..DynamicPolicy::default()
        },
    );
    cfg.optimizer = Some(Optimizer::adagrad(0.1));
    let err = cfg.key_space().unwrap_err().to_string();
    assert!(
        err.contains("max_bytes = 100") && err.contains("at least one record (128 bytes)"),
        "{err}"
    );
    let mut cfg = Config::sparse(2);
    cfg.initializer = Initializer::Normal {
        mean: 0.0,
        std: f32::NAN,
        seed: 0,
    };
    assert!(cfg.key_space().is_err());
}
