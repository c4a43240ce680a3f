//! Dynamic allocation (Lapse): keys relocate with `Op::Localize` while every worker pulls,
//! pushes and sets them. Random runs on small clusters with few keys, so relocations collide,
//! under every combination of location caches, fast local access and home partitioning; plus
//! scripted scenarios for the protocol's corner cases.
//!
//! Every run must be linearizable per key (so synchronous ops are sequentially consistent), end
//! with exact sums (no update lost or applied twice), complete every op, leave every key at
//! exactly one node recorded by its home, and raise no warning or anomaly.

mod common;

use std::collections::BTreeMap;

use common::{DynShape, dynamic_case, finals, total};
use roam_core::{NodeId, Partitioning};
use roam_sim::{
    Consistency, Op, OpKind, Outcome, Sim, check_final_sums_exact, check_linearizable, for_each_seed, seeds,
};

/// Seeds the random test runs by default: about two thousand in a release build (CI), fewer in
/// a debug build. `ROAM_SIM_SEEDS` / `ROAM_SIM_SEED` override (see `roam_sim::seed`).
fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 2_000 }
}

/// Figures summed over the seeds of one configuration.
#[derive(Debug, Default)]
struct Totals {
    runs: u64,
    relocations: u64,
    forwards: u64,
    cache_hits: u64,
    localize_ops_sent: u64,
    reads_checked: usize,
}

/// Runs one random case and checks everything a fault-free run must satisfy.
fn run_case(seed: u64, shape: DynShape) -> (Sim, bool, bool) {
    let case = dynamic_case(seed, shape);
    let (caches, fast) = (case.cfg.location_caches, case.cfg.fast_local_access);
    let mut sim = Sim::new(case.cfg);
    for (w, script) in case.scripts {
        sim.add_script(w, script);
    }
    sim.run_until_idle().unwrap_or_else(|e| panic!("{e}"));
    assert!(sim.unfinished_workers().is_empty(), "seed {seed}: hung: {:?}", sim.unfinished_workers());
    let history = sim.history();
    for op in history.ops() {
        assert!(op.succeeded(), "seed {seed}: op failed in a fault-free run: {op}");
    }
    assert!(sim.warnings().is_empty(), "seed {seed}: warnings: {:?}", sim.warnings());
    assert_eq!(total(&sim, |c| &c.anomalies), 0, "seed {seed}");
    sim.check_quiescent_placement().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(
        total(&sim, |c| &c.relocations_in),
        total(&sim, |c| &c.relocations_out),
        "seed {seed}: every key that left a node arrived somewhere"
    );
    // Exact sums, from the scripts alone and from the history's accounting, in the stores and
    // in every worker's last pull.
    let finals = finals(&sim);
    for (key, want) in case.expected.iter().enumerate() {
        assert_eq!(finals[key].as_ref(), Some(want), "seed {seed}: final value of key {key}");
    }
    check_final_sums_exact(history, &finals).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let want: Vec<f32> = case.expected.concat();
    for w in sim.workers() {
        let last = history.of_worker(w).last().unwrap();
        assert_eq!(last.outcome, Outcome::Pulled(want.clone()), "seed {seed}: final pull of {w}");
    }
    // Per-key linearizability (with every worker's program order where it is guaranteed: see
    // `async_order.rs`), the final values included.
    let opts = if !caches && fast { Consistency::with_program_order() } else { Consistency::linearizable() };
    let t0 = std::time::Instant::now();
    let rep = check_linearizable(history, opts, Some(&finals)).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    if std::env::var_os("ROAM_SIM_VERBOSE").is_some() {
        eprintln!("seed {seed}: {} ops, {} steps, check {:?} {rep:?}", history.ops().len(), sim.steps(), t0.elapsed());
    }
    (sim, caches, fast)
}

#[test]
fn random_dynamic_runs_are_linearizable_with_exact_sums() {
    let shape = DynShape { ops_per_phase: 10, ..DynShape::default() };
    let started = std::time::Instant::now();
    let mut totals: BTreeMap<(bool, bool), Totals> = BTreeMap::new();
    let n = seeds(default_seeds()).len();
    for_each_seed(default_seeds(), |seed| {
        let (sim, caches, fast) = run_case(seed, shape);
        let t = totals.entry((caches, fast)).or_default();
        t.runs += 1;
        t.relocations += total(&sim, |c| &c.relocations_in);
        t.forwards += total(&sim, |c| &c.forwards);
        t.cache_hits += total(&sim, |c| &c.cache_hits);
        t.localize_ops_sent += sim
            .history()
            .ops()
            .iter()
            .filter(|op| op.kind == OpKind::Localize)
            .count() as u64;
        t.reads_checked += sim.history().ops().iter().filter(|op| op.kind == OpKind::Pull).count();
    });
    eprintln!("{n} seeds in {:.1?}: {totals:#?}", started.elapsed());
    if n >= 100 {
        for ((caches, fast), t) in &totals {
            assert!(t.runs > 0 && t.relocations > 0, "caches {caches} fast {fast}: no relocation: {t:?}");
            assert!(t.forwards > 0, "caches {caches} fast {fast}: no forwarding: {t:?}");
            assert_eq!(t.cache_hits > 0, *caches, "caches {caches} fast {fast}: {t:?}");
        }
        assert_eq!(totals.len(), 4, "every combination of caches and fast local access ran");
    }
}

/// The same under each home partitioning separately, with more ops per phase and thus more
/// collisions (fewer seeds).
#[test]
fn random_dynamic_runs_under_each_partitioning() {
    for partitioning in [Partitioning::Range, Partitioning::Hash] {
        let shape = DynShape { ops_per_phase: 25, partitioning: Some(partitioning), ..DynShape::default() };
        let mut relocations = 0;
        for_each_seed(default_seeds() / 10, |seed| {
            let (sim, _, _) = run_case(seed, shape);
            assert_eq!(sim.config().partitioning, partitioning);
            relocations += total(&sim, |c| &c.relocations_in);
        });
        assert!(relocations > 0);
    }
}
