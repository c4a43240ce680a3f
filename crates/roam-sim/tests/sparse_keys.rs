//! Sparse key spaces in the simulator: no key exists at start; each is created, with zero
//! values, by its bucket's creator when a request, a hand-over or an access first reaches it.
//! Random runs (pulls, pushes, sets, localizes and home moves from several workers, with
//! delays and reordering across links) check what every fault-free dynamic run must satisfy
//! (`common::run_case`: linearizability, exact final sums, one holder per key recorded by its
//! home, no warning), and that each key was created exactly once in the cluster.

mod common;

use common::{DynShape, run_case, total};
use roam_sim::{for_each_seed, seeds};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 2_000 }
}

#[test]
fn random_runs_over_sparse_keys_create_each_key_once_and_sum_exactly() {
    let n = seeds(default_seeds()).len();
    let (mut created, mut keys, mut relocated) = (0, 0, 0);
    for_each_seed(default_seeds(), |seed| {
        let shape = DynShape {
            ops_per_phase: 10,
            home_moves: seed % 2 == 0,
            sparse: true,
            ..DynShape::default()
        };
        let (sim, _, _) = run_case(seed, shape);
        let named = sim.history().keys_checked().len() as u64;
        let made = total(&sim, |c| &c.keys_created);
        assert_eq!(
            made, named,
            "seed {seed}: {made} keys created for {named} keys used"
        );
        created += made;
        keys += named;
        relocated += total(&sim, |c| &c.relocations_in);
    });
    eprintln!("{n} seeds: {keys} keys, {created} created, {relocated} relocations");
    if n >= 100 {
        assert!(relocated > 0, "the runs must move keys");
    }
}
