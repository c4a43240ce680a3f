//! Determinism: a seed fixes the whole run (trace hashes, history, counters, warnings), even with
//! crashes and lossy links; different seeds with the same workload give different interleavings.

mod common;

use common::{all_keys, random_increments, random_space, test_rng};
use rand::Rng;
use roam_core::{NodeId, Partitioning};
use roam_sim::{Op, Outcome, Sim, SimConfig, for_each_seed};

/// Everything observable about a finished run.
#[derive(Debug, PartialEq)]
struct Fingerprint {
    trace: u64,
    order: u64,
    steps: u64,
    history: String,
    warnings: String,
    /// The outcome of each worker's last op (the pull of every key).
    finals: Vec<Outcome>,
    counters: Vec<Vec<(&'static str, u64)>>,
}

/// A workload fixed by `workload_seed`, run with simulator seed `sim_seed`: increments, pulls and
/// barriers, links that break with probability `loss`, and optionally a crash of node 2 after a
/// workload-chosen number of steps.
fn run(workload_seed: u64, sim_seed: u64, loss: f64, crash: bool) -> Fingerprint {
    let mut rng = test_rng(workload_seed);
    let space = random_space(&mut rng, 16);
    let cfg = SimConfig::new(3, 2, space.clone())
        .with_seed(sim_seed)
        .with_partitioning(Partitioning::Hash)
        .with_drop_probability(loss);
    let mut sim = Sim::new(cfg);
    let workers = sim.workers();
    let work = random_increments(&mut rng, &space, &workers, 12, 4);
    for (w, script) in work.scripts {
        sim.add_script(w, script);
        sim.add_script(
            w,
            [
                Op::WaitAll,
                Op::Barrier,
                Op::pull_async(all_keys(&space)),
                Op::WaitAll,
            ],
        );
    }
    if crash {
        sim.run_steps(rng.random_range(50..250));
        sim.crash(NodeId(2));
    }
    sim.run_until_idle().unwrap();
    assert!(
        sim.unfinished_workers().is_empty() || loss > 0.0,
        "hung: {:?}",
        sim.unfinished_workers()
    );
    Fingerprint {
        trace: sim.trace_hash(),
        order: sim.order_hash(),
        steps: sim.steps(),
        history: format!("{:?}", sim.history().ops()),
        warnings: format!("{:?}", sim.warnings()),
        finals: workers
            .iter()
            .map(|&w| sim.history().of_worker(w).last().unwrap().outcome.clone())
            .collect(),
        counters: (0..3)
            .map(|n| sim.node(NodeId(n)).counters().snapshot())
            .collect(),
    }
}

#[test]
fn the_same_seed_replays_the_same_run() {
    for_each_seed(10, |seed| {
        for (loss, crash) in [(0.0, false), (0.0, true), (0.02, false), (0.02, true)] {
            let a = run(seed, seed, loss, crash);
            let b = run(seed, seed, loss, crash);
            assert_eq!(
                a, b,
                "seed {seed}, loss {loss}, crash {crash}: runs diverged"
            );
        }
    });
}

#[test]
fn different_seeds_interleave_differently() {
    for_each_seed(3, |workload| {
        let runs: Vec<Fingerprint> = (0..8)
            .map(|sim_seed| run(workload, sim_seed, 0.0, false))
            .collect();
        let mut orders: Vec<u64> = runs.iter().map(|r| r.order).collect();
        orders.sort_unstable();
        orders.dedup();
        assert_eq!(
            orders.len(),
            runs.len(),
            "some seeds produced the very same interleaving"
        );
        // Yet every interleaving computes the same sums.
        assert!(matches!(runs[0].finals[0], Outcome::Pulled(_)));
        assert!(runs.windows(2).all(|w| w[0].finals == w[1].finals));
    });
}
