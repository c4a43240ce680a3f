//! The checkpoint cut (`roam_core::checkpoint`) in the simulator.
//!
//! Random runs: 1–4 nodes of 1–3 workers over 1–8 keys, each worker pushing, pulling and
//! localizing, signalling intents (so keys are shared and moved by intent while the cut is
//! taken), with static replicated keys in some runs, and taking one or two checkpoints
//! (`WaitAll`, `Checkpoint`, `Barrier`, as the real shell does) between phases of work; some
//! workers issue a localize or a home move just before the checkpoint without waiting for it,
//! so keys are in transit (or buckets, with their keys under static allocation, moving) when
//! the cut starts. Each
//! cut's snapshot — every node's owned records and, as hub, its replicated keys' primaries,
//! taken when the cut completes there — must hold every key exactly once, with exactly the sum
//! of the pushes issued before the checkpoint on any worker and none issued after; every run
//! ends with no hung worker, no failed op, no warning, and every key's final exact sum.

mod common;

use common::{
    counted_push, random_delays, random_keys, random_partitioning, run_fault_free, test_rng,
    workers_of,
};
use rand::Rng;
use roam_core::{IntentTechniques, Key, KeySpace};
use roam_sim::{Op, SimConfig, for_each_seed, seeds};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 3_000 }
}

/// Per key, the sum of the pushes of every phase so far.
type Sums = Vec<Vec<f32>>;

struct Case {
    cfg: SimConfig,
    scripts: Vec<(roam_sim::WorkerRef, Vec<Op>)>,
    /// The expected snapshot of each cut, then the expected final values.
    expected: Vec<Sums>,
}

fn checkpoint_case(seed: u64) -> Case {
    let mut rng = test_rng(seed ^ 0xc4e7);
    let nodes = rng.random_range(1..=4);
    let workers_per_node = rng.random_range(1..=3);
    let num_keys: u64 = rng.random_range(1..=8);
    let space =
        KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=2)).collect()).unwrap();
    let dynamic = rng.random_bool(0.8);
    let intents = dynamic && rng.random_bool(0.5);
    let replicated: Vec<Key> = if rng.random_bool(0.4) {
        (0..num_keys).filter(|_| rng.random_bool(0.3)).collect()
    } else {
        Vec::new()
    };
    let partitioning = random_partitioning(&mut rng);
    let (min_delay, max_delay) = random_delays(&mut rng);
    let mut cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_partitioning(partitioning)
        .with_dynamic(dynamic)
        .with_fast_local_access(rng.random_bool(0.7))
        .with_location_caches(rng.random_bool(0.3))
        .with_delay(min_delay, max_delay)
        .with_think(0, rng.random_range(0..=20_000));
    if intents {
        let techniques = if rng.random_bool(0.5) {
            IntentTechniques::All
        } else {
            IntentTechniques::ReplicateOnly
        };
        cfg = cfg.with_intent_techniques(techniques, rng.random_range(5_000..=200_000));
    }
    if !replicated.is_empty() {
        cfg = cfg.with_replication(replicated, rng.random_range(10_000..=500_000));
    }
    let cuts = rng.random_range(1..=2);
    let phases = cuts + 1;
    let mut sums: Sums = (0..num_keys).map(|k| vec![0.0; space.len(k)]).collect();
    let mut expected = Vec::new();
    let mut scripts: Vec<_> = workers_of(&cfg)
        .into_iter()
        .map(|w| (w, Vec::new()))
        .collect();
    let mut clocks = vec![0u64; scripts.len()];
    for phase in 0..phases {
        for ((_, script), clock) in scripts.iter_mut().zip(&mut clocks) {
            for _ in 0..rng.random_range(0..=12) {
                let keys = random_keys(&mut rng, num_keys);
                let wait = rng.random_bool(0.5);
                match rng.random_range(0..12) {
                    0..3 => script.push(Op::Pull { keys, wait }),
                    3..8 => script.push(counted_push(&mut rng, &space, keys, wait, &mut sums)),
                    8..9 if dynamic => script.push(Op::Localize { keys, wait }),
                    _ if intents => {
                        let start = *clock + rng.random_range(0..=4);
                        let end = start + rng.random_range(1..=8);
                        script.push(Op::Intent { keys, start, end });
                        if rng.random_bool(0.6) {
                            script.push(Op::AdvanceClock);
                            *clock += 1;
                        }
                    }
                    _ => script.push(Op::Pull { keys, wait }),
                }
            }
            script.push(Op::WaitAll);
            if phase < cuts {
                // Movers still under way at the call (issued, never waited for): keys in
                // transit and home moves that the cut must let land (or hold back) first.
                if dynamic && rng.random_bool(0.5) {
                    let key = rng.random_range(0..num_keys);
                    script.push(Op::Localize {
                        keys: vec![key],
                        wait: false,
                    });
                }
                if rng.random_bool(0.2) {
                    script.push(Op::MoveHome {
                        key: rng.random_range(0..num_keys),
                        to: rng.random_range(0..nodes),
                        wait: false,
                    });
                }
                script.push(Op::Checkpoint);
                script.push(Op::Barrier);
            } else {
                // Replicas lag their hub between syncs: the final check reads after one.
                script.push(Op::SyncReplicas);
            }
        }
        expected.push(sums.clone());
    }
    Case {
        cfg,
        scripts,
        expected,
    }
}

fn run_checkpoint_case(seed: u64) -> usize {
    let Case {
        cfg,
        scripts,
        expected,
    } = checkpoint_case(seed);
    let nodes = cfg.nodes as usize;
    let sim = run_fault_free(seed, cfg, scripts);
    let cuts = sim.checkpoints();
    assert_eq!(
        cuts.len(),
        expected.len() - 1,
        "seed {seed}: every cut taken"
    );
    for (i, (cut, want)) in cuts.iter().zip(&expected).enumerate() {
        assert_eq!(
            cut.nodes, nodes,
            "seed {seed}: cut {i} has every node's holdings"
        );
        assert!(
            cut.duplicates.is_empty(),
            "seed {seed}: cut {i} shows keys {:?} twice",
            cut.duplicates
        );
        let got: Vec<Vec<f32>> = (0..want.len() as Key)
            .map(|k| cut.values.get(&k).cloned().unwrap_or_default())
            .collect();
        assert_eq!(
            &got, want,
            "seed {seed}: cut {i} is not the exact sum of the pushes issued before it"
        );
    }
    let last = expected.last().expect("at least one phase");
    for (key, want) in last.iter().enumerate() {
        assert_eq!(
            sim.peek(key as Key).as_ref(),
            Some(want),
            "seed {seed}: final value of key {key}"
        );
    }
    cuts.len()
}

#[test]
fn every_cut_is_the_exact_sum_of_the_pushes_before_it() {
    let n = seeds(default_seeds()).len();
    let mut cuts = 0;
    for_each_seed(default_seeds(), |seed| cuts += run_checkpoint_case(seed));
    eprintln!("{n} seeds, {cuts} cuts checked");
}
