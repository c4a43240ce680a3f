//! Per-key consistency of static allocation: a set is read back, a write that completed before a
//! read on another node is seen by it, and random histories of sync and async pulls, pushes and
//! sets pass the per-key linearizability checker (which must, in turn, catch a corrupted value).

mod common;

use common::test_rng;
use rand::Rng;
use rand::seq::index::sample;
use roam_core::wire::{FLAG_POSITIONS, HEADER_LEN, Kind};
use roam_core::{Key, KeySpace, NodeId, Partitioning};
use roam_sim::{
    Op, OpKind, Outcome, Sim, SimConfig, WorkerRef, check_per_key_linearizable, for_each_seed,
};

const CONFIGS: [(Partitioning, bool); 4] = [
    (Partitioning::Range, true),
    (Partitioning::Range, false),
    (Partitioning::Hash, true),
    (Partitioning::Hash, false),
];

fn first_key_homed_at(sim: &Sim, node: u32) -> Key {
    (0..sim.config().space.num_keys())
        .find(|&k| common::home_of(sim, k) == NodeId(node))
        .expect("every node is home of some key")
}

#[test]
fn set_is_read_back_and_completed_writes_are_seen_from_other_nodes() {
    for_each_seed(8, |seed| {
        for (partitioning, fast) in CONFIGS {
            let cfg = SimConfig::new(3, 2, KeySpace::uniform(12, 2).unwrap())
                .with_seed(seed)
                .with_partitioning(partitioning)
                .with_fast_local_access(fast);
            let mut sim = Sim::new(cfg);
            let local = first_key_homed_at(&sim, 0);
            let remote = first_key_homed_at(&sim, 2);
            let keys = vec![remote, local];
            let writer = WorkerRef::new(0, 0);
            let reader = WorkerRef::new(1, 0);
            sim.add_script(
                writer,
                [
                    Op::set(keys.clone(), [10.0, 11.0, 20.0, 21.0]),
                    Op::pull(keys.clone()),
                    Op::push(keys.clone(), [1.0, 1.0, 1.0, 1.0]),
                ],
            );
            // Far longer than the writer's three round trips (at most 100 µs each).
            sim.add_script(reader, [Op::Sleep(10_000_000), Op::pull(keys.clone())]);
            sim.add_script(
                WorkerRef::new(2, 1),
                [Op::pull(keys.clone()), Op::pull(keys.clone())],
            );
            sim.run_until_idle().unwrap();

            let w: Vec<_> = sim.history().of_worker(writer).cloned().collect();
            assert_eq!(
                w[1].outcome,
                Outcome::Pulled(vec![10.0, 11.0, 20.0, 21.0]),
                "set not read back"
            );
            let r = sim.history().of_worker(reader).next().unwrap().clone();
            assert!(
                w[2].ret.unwrap() < r.invoke,
                "premise: the push completed before the pull started"
            );
            assert_eq!(
                r.outcome,
                Outcome::Pulled(vec![11.0, 12.0, 21.0, 22.0]),
                "completed push not seen"
            );
            check_per_key_linearizable(sim.history()).unwrap_or_else(|v| panic!("{v}"));
        }
    });
}

/// Random ops on a few hot keys so that reads race with writes.
fn random_register_workload(sim: &mut Sim, seed: u64, ops_per_worker: usize) {
    let mut rng = test_rng(seed);
    let space = sim.config().space.clone();
    for w in sim.workers() {
        let mut script = Vec::new();
        for _ in 0..ops_per_worker {
            let n = rng.random_range(1..=3);
            let keys: Vec<Key> = sample(&mut rng, space.num_keys() as usize, n)
                .into_iter()
                .map(|k| k as Key)
                .collect();
            let len: usize = keys.iter().map(|&k| space.len(k)).sum();
            let wait = rng.random_bool(0.8);
            let op = match rng.random_range(0..10) {
                0..4 => Op::Pull { keys, wait },
                4..8 => Op::Push {
                    keys,
                    vals: (0..len)
                        .map(|_| f32::from(rng.random_range(1u8..=4)))
                        .collect(),
                    wait,
                },
                _ => Op::Set {
                    keys,
                    vals: (0..len)
                        .map(|_| f32::from(rng.random_range(0u8..=50)))
                        .collect(),
                    wait,
                },
            };
            script.push(op);
            if rng.random_bool(0.1) {
                script.push(Op::WaitAll);
            }
        }
        script.push(Op::WaitAll);
        sim.add_script(w, script);
    }
}

#[test]
fn random_histories_are_per_key_linearizable() {
    for_each_seed(20, |seed| {
        for (partitioning, fast) in CONFIGS {
            let space = KeySpace::per_key(vec![1, 2, 1, 3, 1, 2]).unwrap();
            let cfg = SimConfig::new(3, 2, space)
                .with_seed(seed)
                .with_partitioning(partitioning)
                .with_fast_local_access(fast)
                .with_delay(1_000, 20_000);
            let mut sim = Sim::new(cfg);
            random_register_workload(&mut sim, seed, 40);
            sim.run_until_idle().unwrap();
            assert!(sim.unfinished_workers().is_empty());
            assert!(
                sim.history().ops().iter().all(|op| op.succeeded()),
                "all ops succeed without faults"
            );
            let reads = check_per_key_linearizable(sim.history())
                .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
            assert!(
                reads > 100,
                "too few reads checked ({reads}) for the test to mean anything"
            );
        }
    });
}

#[test]
fn the_checker_catches_a_value_corrupted_in_flight() {
    for_each_seed(6, |seed| {
        let space = KeySpace::uniform(6, 1).unwrap();
        let cfg = SimConfig::new(3, 2, space)
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash);
        let mut sim = Sim::new(cfg);
        random_register_workload(&mut sim, seed, 30);
        let mut corrupted = 0;
        // Add 1000 to the first value of the fifth pull reply: a value no write can explain.
        sim.set_tamper(move |_, _, bytes: &mut Vec<u8>| {
            let n_keys = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
            if bytes[0] == Kind::PullReply as u8 && n_keys > 0 {
                corrupted += 1;
                if corrupted == 5 {
                    let positions = if bytes[1] & FLAG_POSITIONS != 0 {
                        8 * n_keys.div_ceil(2)
                    } else {
                        0
                    };
                    let at = HEADER_LEN + 8 * n_keys + positions;
                    let v = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) + 1000.0;
                    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        });
        sim.run_until_idle().unwrap();
        let pulls = sim
            .history()
            .ops()
            .iter()
            .filter(|op| op.kind == OpKind::Pull)
            .count();
        assert!(pulls > 0);
        let violation =
            check_per_key_linearizable(sim.history()).expect_err("corruption must be caught");
        assert!(violation.observed >= 1000.0, "{violation}");
    });
}
