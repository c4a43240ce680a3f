//! Home moves: a bucket's home (and its placement records) moves to another node while every
//! worker pulls, pushes, sets and localizes its keys.
//!
//! Random runs check what every fault-free dynamic run must satisfy (see `common::run_case`:
//! per-key linearizability with program order where it is guaranteed, exact final sums, every
//! op complete, each key at one node recorded by its home, no warning) with home moves mixed
//! in; scripted runs pin down the protocol: records follow the bucket, every node switches its
//! table, and a frame routed by the old table is forwarded by the old home and held at the new
//! one until every node has switched.

mod common;

use std::sync::atomic::Ordering::Relaxed;

use common::{DynShape, finals, run_case, total};
use roam_core::{KeySpace, NodeId, Partitioning};
use roam_sim::{
    Consistency, Op, OpKind, Outcome, Sim, SimConfig, WorkerRef, check_linearizable, for_each_seed,
    seeds,
};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 2_000 }
}

#[test]
fn random_runs_with_home_moves_are_linearizable_with_exact_sums() {
    let shape = DynShape {
        ops_per_phase: 12,
        home_moves: true,
        ..DynShape::default()
    };
    let (mut moved, mut held, mut moves) = (0, 0, 0);
    let n = seeds(default_seeds()).len();
    for_each_seed(default_seeds(), |seed| {
        let (sim, _, _) = run_case(seed, shape);
        moved += total(&sim, |c| &c.homes_moved_in);
        held += total(&sim, |c| &c.held_frames);
        moves += sim
            .history()
            .ops()
            .iter()
            .filter(|op| op.kind == OpKind::MoveHome)
            .count();
        // Every node ends with the same table.
        let dir = sim.node(NodeId(0)).directory().clone();
        for node in 1..sim.config().nodes {
            assert_eq!(
                sim.node(NodeId(node)).directory(),
                &dir,
                "seed {seed}: node {node}'s table differs from node 0's"
            );
        }
    });
    eprintln!("{n} seeds: {moves} move ops, {moved} homes moved, {held} frames held");
    if n >= 100 {
        assert!(moved > 0 && held > 0, "moves {moved}, held {held}");
    }
}

#[test]
fn random_runs_with_home_moves_under_each_partitioning() {
    for partitioning in [Partitioning::Range, Partitioning::Hash] {
        let shape = DynShape {
            ops_per_phase: 25,
            partitioning: Some(partitioning),
            home_moves: true,
            ..DynShape::default()
        };
        for_each_seed(default_seeds() / 20, |seed| {
            run_case(seed, shape);
        });
    }
}

#[test]
fn static_allocation_moves_carry_the_keys_and_keep_exact_sums() {
    // Under static allocation a move takes the bucket's keys to the new home: every key must
    // end at its home (checked by `run_case`), once, with its exact sum, dense or sparse,
    // under either partitioning.
    let (mut carried, mut moved) = (0, 0);
    for sparse in [false, true] {
        let shape = DynShape {
            ops_per_phase: 12,
            home_moves: true,
            static_alloc: true,
            sparse,
            ..DynShape::default()
        };
        for_each_seed(default_seeds() / 2, |seed| {
            let (sim, _, _) = run_case(seed, shape);
            carried += total(&sim, |c| &c.relocations_in);
            moved += total(&sim, |c| &c.homes_moved_in);
            for key in 0..sim.history().key_bound() {
                let holders = sim.holders(key);
                let home = sim.node(NodeId(0)).directory().home(key);
                assert!(
                    holders.is_empty() || holders == [home],
                    "seed {seed}: key {key} held by {holders:?}, its home is {home}"
                );
            }
        });
    }
    eprintln!("static: {moved} homes moved, {carried} keys carried");
    if seeds(default_seeds()).len() >= 100 {
        assert!(moved > 0 && carried > 0, "moved {moved}, carried {carried}");
    }
}

/// A dynamic cluster with fixed 10 µs delays, no pauses, one value per key, one key per bucket.
fn scripted(nodes: u32, keys: u64) -> Sim {
    let cfg = SimConfig::new(nodes, 1, KeySpace::uniform(keys, 1).unwrap())
        .with_dynamic(true)
        .with_delay(10_000, 10_000)
        .with_think(0, 0);
    Sim::new(cfg)
}

fn w(node: u32) -> WorkerRef {
    WorkerRef::new(node, 0)
}

fn check_quiet(sim: &mut Sim) {
    sim.run_until_idle().unwrap();
    assert!(sim.unfinished_workers().is_empty());
    assert!(sim.warnings().is_empty(), "{:?}", sim.warnings());
    assert_eq!(total(sim, |c| &c.anomalies), 0);
    sim.check_quiescent_placement().unwrap();
    let finals = finals(sim);
    check_linearizable(
        sim.history(),
        Consistency::with_program_order(),
        Some(&finals),
    )
    .unwrap();
}

#[test]
fn a_bucket_moves_with_its_records_and_later_relocations_go_to_the_new_home() {
    // Keys 0..6 on 3 nodes: key 0's home is node 0.
    let mut sim = scripted(3, 6);
    assert_eq!(sim.node(NodeId(0)).directory().home(0), NodeId(0));
    sim.add_script(w(2), [Op::set(vec![0], vec![5.0]), Op::localize(vec![0])]);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.node(NodeId(0)).recorded_owner(0), Some(NodeId(2)));
    // Node 2 (not the coordinator) asks for the move.
    sim.add_script(w(2), [Op::move_home(0, 1)]);
    sim.run_until_idle().unwrap();
    for node in 0..3 {
        let dir = sim.node(NodeId(node)).directory();
        assert_eq!(dir.home(0), NodeId(1), "node {node}");
        assert_eq!(dir.epoch(), 1, "node {node}");
    }
    assert_eq!(sim.node(NodeId(0)).recorded_owner(0), None);
    assert_eq!(sim.node(NodeId(1)).recorded_owner(0), Some(NodeId(2)));
    // Node 0 relocates key 0: its localize goes to the new home, which hands it over.
    sim.add_script(
        w(0),
        [
            Op::localize(vec![0]),
            Op::push(vec![0], vec![1.0]),
            Op::pull(vec![0]),
        ],
    );
    sim.run_until_idle().unwrap();
    assert_eq!(sim.holders(0), [NodeId(0)]);
    assert_eq!(sim.node(NodeId(1)).recorded_owner(0), Some(NodeId(0)));
    assert_eq!(
        sim.history().ops().last().unwrap().outcome,
        Outcome::Pulled(vec![6.0])
    );
    let move_op = sim
        .history()
        .ops()
        .iter()
        .find(|op| op.kind == OpKind::MoveHome)
        .unwrap();
    assert_eq!(move_op.outcome, Outcome::Done);
    check_quiet(&mut sim);
}

#[test]
fn a_frame_routed_by_the_old_table_is_forwarded_and_held_until_every_node_switched() {
    // Keys 0..6 on 4 nodes: key 0's home is node 0; node 3 owns it after localizing.
    let mut sim = scripted(4, 6);
    sim.add_script(w(3), [Op::localize(vec![0])]);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.node(NodeId(0)).recorded_owner(0), Some(NodeId(3)));
    // Node 2's links to node 0 (the old home) hold everything until healed: its push and its
    // switch to the new table wait there.
    sim.partition(NodeId(2), NodeId(0));
    sim.add_script(w(2), [Op::push_async(vec![0], vec![1.0]), Op::WaitAll]);
    sim.add_script(w(1), [Op::move_home(0, 1), Op::pull(vec![0])]);
    sim.run_until_idle().unwrap();
    let move_op = sim.history().of_worker(w(1)).next().unwrap();
    assert_eq!(
        move_op.outcome,
        Outcome::Pending,
        "the move waits for node 2"
    );
    assert_eq!(sim.node(NodeId(1)).directory().home(0), NodeId(1));
    assert_eq!(sim.node(NodeId(2)).directory().home(0), NodeId(0));
    sim.heal(NodeId(2), NodeId(0));
    sim.run_until_idle().unwrap();
    // The push, routed by the old table, reached the old home after the hand-off: forwarded
    // to the new home and held there until node 2 switched (which completed the move), then
    // served; the pull after the move sees it.
    let ops: Vec<_> = sim
        .history()
        .of_worker(w(1))
        .map(|op| op.outcome.clone())
        .collect();
    assert_eq!(ops, [Outcome::Done, Outcome::Pulled(vec![1.0])]);
    assert!(sim.node(NodeId(0)).counters().forwards.load(Relaxed) >= 1);
    assert!(sim.node(NodeId(1)).counters().held_frames.load(Relaxed) >= 1);
    assert_eq!(sim.node(NodeId(2)).directory().home(0), NodeId(1));
    assert_eq!(sim.node(NodeId(1)).recorded_owner(0), Some(NodeId(3)));
    check_quiet(&mut sim);
}

#[test]
fn moves_to_no_member_or_of_no_bucket_fail_and_change_nothing() {
    let mut sim = scripted(2, 4);
    sim.add_script(w(1), [Op::move_home(0, 7)]);
    sim.run_until_idle().unwrap();
    let op = sim.history().ops().last().unwrap();
    assert!(
        matches!(&op.outcome, Outcome::Failed(e) if e.to_string().contains("cannot move")),
        "{op}"
    );
    assert_eq!(sim.node(NodeId(1)).directory().epoch(), 0);
    // A move to the current home is done at once and changes no epoch.
    sim.add_script(w(1), [Op::move_home(0, 0)]);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.history().ops().last().unwrap().outcome, Outcome::Done);
    assert_eq!(sim.node(NodeId(0)).directory().epoch(), 0);
}

/// Measures (does not assert) how often a worker's asynchronous ops on one key apply out of
/// issue order in runs with home moves and no location caches, with fast local access (the
/// configuration where runs without home moves keep issue order). The figure quoted in
/// docs/architecture.md comes from:
/// `cargo test --release -p roam-sim --test home_moves -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check"]
fn issue_order_across_home_moves_is_measured() {
    let shape = DynShape {
        ops_per_phase: 12,
        home_moves: true,
        caches: Some(false),
        fast: Some(true),
        ..DynShape::default()
    };
    let (mut runs, mut reordered) = (0, 0);
    for_each_seed(2_000, |seed| {
        let (sim, _, _) = run_case(seed, shape);
        let finals = finals(&sim);
        runs += 1;
        if check_linearizable(
            sim.history(),
            Consistency::with_program_order(),
            Some(&finals),
        )
        .is_err()
        {
            reordered += 1;
        }
    });
    eprintln!("{reordered} of {runs} runs applied some worker's async ops out of issue order");
}
