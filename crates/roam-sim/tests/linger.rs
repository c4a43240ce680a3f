//! Interest that lingers past short intents (`roam_core::intent` `linger.rs`) in the
//! simulator: the access pattern it is for — every worker signalling one-clock intents on a
//! few keys drawn uniformly from a small set, as KGE's negative samples do — with random
//! delays, think times and share-sync periods.
//!
//! Every run must end with each key's owner holding exactly the sum of every push, no replica
//! left once every worker finished (a finished worker ends its lingers), every replica granted
//! dropped, every read a sum of pushes, no warning. Over the seeds, lingering must ask for
//! keys less often than the ablation (interest ending with each intent) on the same scripts.

mod common;

use common::{
    check_shared_run, counted_push, random_keys, run_fault_free, test_rng, total, workers_of,
};
use rand::Rng;
use roam_core::{IntentTechniques, KeySpace};
use roam_sim::{Op, SimConfig, WorkerRef, for_each_seed, seeds};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 30 } else { 300 }
}

type Case = (SimConfig, Vec<(WorkerRef, Vec<Op>)>, Vec<Vec<f32>>);

/// A random case: 2–3 nodes of 1–2 workers, 4–12 keys, 300–500 one-clock intents per worker
/// (a run spans several 1 ms spans of the workers' rate measurement, so the intents are
/// timed and short against a share-sync period of 50–400 µs).
fn case(seed: u64, linger: bool) -> Case {
    let mut rng = test_rng(seed ^ 0x11e6);
    let nodes = rng.random_range(2..=3);
    let workers_per_node = rng.random_range(1..=2);
    let num_keys: u64 = rng.random_range(4..=12);
    let space =
        KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=2)).collect()).unwrap();
    let period = rng.random_range(50_000..=400_000);
    let cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_dynamic(true)
        .with_fast_local_access(rng.random_bool(0.8))
        .with_intent_techniques(IntentTechniques::All, period)
        .with_intent_linger(linger)
        .with_delay(
            rng.random_range(1_000..=5_000),
            rng.random_range(5_000..=40_000),
        )
        .with_think(1_000, rng.random_range(2_000..=12_000));
    let mut expected: Vec<Vec<f32>> = (0..num_keys).map(|k| vec![0.0; space.len(k)]).collect();
    let mut scripts = Vec::new();
    for w in workers_of(&cfg) {
        let mut script = Vec::new();
        for clock in 0..rng.random_range(300..=500u64) {
            let keys = random_keys(&mut rng, num_keys);
            script.push(Op::Intent {
                keys: keys.clone(),
                start: clock + 1,
                end: clock + 2,
            });
            script.push(Op::AdvanceClock);
            let wait = rng.random_bool(0.3);
            if rng.random_bool(0.3) {
                script.push(Op::Pull {
                    keys: keys.clone(),
                    wait,
                });
            }
            script.push(counted_push(&mut rng, &space, keys, wait, &mut expected));
        }
        script.extend((0..5).map(|_| Op::AdvanceClock));
        script.push(Op::WaitAll);
        scripts.push((w, script));
    }
    (cfg, scripts, expected)
}

/// Runs one case and checks it; returns the keys asked for by intent (grants plus moves).
fn run(seed: u64, linger: bool) -> u64 {
    let (cfg, scripts, expected) = case(seed, linger);
    let sim = run_fault_free(seed, cfg, scripts);
    check_shared_run(&sim, &expected, &format!("seed {seed} (linger {linger})"));
    total(&sim, |c| &c.share_grants) + total(&sim, |c| &c.intent_relocations)
}

#[test]
fn lingering_loses_no_update_ends_every_replica_and_asks_for_keys_less_often() {
    let n = seeds(default_seeds()).len() as u64;
    let (mut lingering, mut ablation) = (0u64, 0u64);
    let mut fewer = 0u64;
    for_each_seed(default_seeds(), |seed| {
        let with = run(seed, true);
        let without = run(seed, false);
        lingering += with;
        ablation += without;
        fewer += u64::from(with < without);
    });
    eprintln!(
        "{n} seeds: keys asked for by intent {lingering} lingering, {ablation} without; fewer \
         in {fewer} runs"
    );
    assert!(
        lingering * 2 <= ablation,
        "lingering should at least halve the keys asked for: {lingering} against {ablation}"
    );
    assert!(fewer * 2 > n, "fewer in most runs: {fewer} of {n}");
}
