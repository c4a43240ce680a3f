//! The load balancer in virtual time (PSLD, issue #14; `roam_core::balance`): with one node
//! whose frames all take longer, the coordinator moves buckets — under static allocation with
//! their keys — away from it and stops (it converges); when the node recovers, exploration
//! gives it its share back; with no slow node, random delays make it move nothing. Through all
//! of it every value stays exact and every run linearizable.

mod common;

use common::{all_keys, run_increments, total};
use roam_core::{Balancer, DecisionKind, KeySpace, NodeId, Partitioning};
use roam_sim::{Sim, SimConfig, for_each_seed};

/// Judged after 3 quiet rounds, probed after 5; a loose tolerance, since a 2 ms round holds
/// only some 40 operations of the whole cluster.
fn balancer() -> Balancer {
    Balancer {
        max_bytes_per_sec: 1 << 30,
        min_weight: 0.125,
        settle_rounds: 3,
        probe_after_rounds: 5,
        tolerance: 0.2,
        trigger_factor: 1.5,
    }
}

/// How a run is set up.
#[derive(Clone, Copy)]
struct Shape {
    dynamic: bool,
    /// The slow node's extra delay per frame (ns), if any, and when it recovers.
    slow: Option<(u64, u64)>,
    /// Virtual service cost per key served (ns; 0: none counted), and how many times that
    /// node 2 pays.
    service: (u64, u64),
    delays: (u64, u64),
    ops: usize,
}

/// 4 nodes × 1 worker over 64 keys, one bucket each (range partitioning), random pushes from
/// every worker, then every worker reads every key and must get the exact sums.
fn run(seed: u64, shape: Shape) -> Sim {
    let mut cfg = SimConfig::new(4, 1, KeySpace::uniform(64, 2).unwrap())
        .with_seed(seed)
        .with_partitioning(Partitioning::Range)
        .with_dynamic(shape.dynamic)
        .with_delay(shape.delays.0, shape.delays.1)
        .with_think(0, 2_000)
        .with_load_watch(common::load_watch())
        .with_balancer(balancer());
    if shape.service.0 > 0 {
        cfg = cfg
            .with_service_cost(shape.service.0)
            .with_slow_service(NodeId(2), shape.service.1);
    }
    if let Some((extra, until)) = shape.slow {
        cfg = cfg.with_slow_node(NodeId(2), extra).with_slow_until(until);
    }
    let keys = all_keys(&cfg.space);
    let sim = run_increments(seed, cfg, shape.ops, 8, true);
    let dir = sim.node(NodeId(0)).directory().clone();
    for n in 1..4 {
        assert_eq!(
            sim.node(NodeId(n)).directory(),
            &dir,
            "seed {seed}: node {n}'s table differs from node 0's"
        );
    }
    if !shape.dynamic {
        // Static allocation: every key is at its home, the one it was carried to.
        for key in keys {
            assert_eq!(sim.holders(key), [dir.home(key)], "seed {seed}: key {key}");
        }
    }
    sim
}

fn buckets_of(sim: &Sim, node: u32) -> usize {
    sim.node(NodeId(0))
        .directory()
        .buckets_of(NodeId(node))
        .count()
}

#[test]
fn buckets_leave_a_slow_node_and_the_balancer_settles() {
    for dynamic in [false, true] {
        for_each_seed(20, |seed| {
            let shape = Shape {
                dynamic,
                slow: Some((300_000, u64::MAX)),
                service: (0, 1),
                delays: (10_000, 50_000),
                ops: 1_500,
            };
            let sim = run(seed, shape);
            let coordinator = sim.node(NodeId(0));
            let decisions = coordinator.balance_decisions();
            assert!(
                decisions
                    .iter()
                    .any(|d| d.kind == DecisionKind::Shrink && d.node == NodeId(2)),
                "seed {seed} (dynamic {dynamic}): {decisions:?}"
            );
            // Node 2 keeps at most a fraction of its 16 buckets, the others share them.
            let mine = buckets_of(&sim, 2);
            assert!(
                mine <= 6,
                "seed {seed} (dynamic {dynamic}): node 2 has {mine}"
            );
            for n in [0, 1, 3] {
                let theirs = buckets_of(&sim, n);
                assert!(
                    (18..=22).contains(&theirs),
                    "seed {seed} (dynamic {dynamic}): node {n} has {theirs}"
                );
            }
            // It converges: a bounded number of decisions and moves, none in the last third.
            let moves = total(&sim, |c| &c.balancer_moves);
            assert!(
                decisions.len() <= 8 && moves <= 40,
                "seed {seed} (dynamic {dynamic}): {moves} moves, {decisions:?}"
            );
            let last = decisions.last().unwrap().at.0;
            assert!(
                last < sim.now().0 / 3 * 2,
                "seed {seed} (dynamic {dynamic}): last decision at {last} of {}",
                sim.now().0
            );
            if !dynamic {
                assert!(total(&sim, |c| &c.relocations_in) > 0, "seed {seed}");
            }
        });
    }
}

#[test]
fn a_recovered_node_gets_its_share_back_by_exploration() {
    // Long runs (some 6 000 operations per worker): few seeds by default; ROAM_SIM_SEEDS=N
    // runs more.
    for_each_seed(6, |seed| {
        let shape = Shape {
            dynamic: false,
            slow: Some((300_000, 100_000_000)),
            service: (0, 1),
            delays: (10_000, 50_000),
            ops: 6_000,
        };
        let sim = run(seed, shape);
        let coordinator = sim.node(NodeId(0));
        let decisions = coordinator.balance_decisions();
        let shrunk = decisions
            .iter()
            .position(|d| d.kind == DecisionKind::Shrink && d.node == NodeId(2));
        let probed = decisions
            .iter()
            .rposition(|d| d.kind == DecisionKind::Probe && d.node == NodeId(2));
        assert!(
            matches!((shrunk, probed), (Some(s), Some(p)) if s < p),
            "seed {seed}: {decisions:?}"
        );
        assert!(
            sim.now().0 > 3 * 100_000_000,
            "seed {seed}: the run ended at {:?}, too soon after the recovery",
            sim.now()
        );
        assert!(
            coordinator.balance_weights().is_empty(),
            "seed {seed}: weights {:?}, decisions {decisions:?}",
            coordinator.balance_weights()
        );
        let mine = buckets_of(&sim, 2);
        assert!(
            (15..=17).contains(&mine),
            "seed {seed}: node 2 has {mine} buckets"
        );
    });
}

/// Link delays spread from 1 to 150 µs: nobody is a straggler, so nothing moves.
#[test]
fn random_delays_alone_move_nothing() {
    for_each_seed(20, |seed| {
        let shape = Shape {
            dynamic: seed % 2 == 1,
            slow: None,
            service: (0, 1),
            delays: (1_000, 150_000),
            ops: 1_500,
        };
        let sim = run(seed, shape);
        assert_eq!(total(&sim, |c| &c.balancer_moves), 0, "seed {seed}");
        assert!(
            sim.node(NodeId(0)).balance_decisions().is_empty(),
            "seed {seed}: {:?}",
            sim.node(NodeId(0)).balance_decisions()
        );
        assert!(
            sim.now().0 > 20 * common::load_watch().report_every,
            "seed {seed}"
        );
    });
}

/// Node 2 serves every key at three times the others' cost (virtual service time; its answers
/// are not late): detection names it by capacity alone, and the balancer gives it a third of
/// an even share, its capacity's, in one step and no further.
#[test]
fn a_node_of_lower_capacity_gets_its_capacitys_share() {
    let mut shrunk = 0;
    for_each_seed(20, |seed| {
        let shape = Shape {
            dynamic: false,
            slow: None,
            service: (1_000, 3),
            delays: (10_000, 50_000),
            ops: 1_500,
        };
        let sim = run(seed, shape);
        let decisions = sim.node(NodeId(0)).balance_decisions();
        for d in decisions {
            assert!(
                d.node == NodeId(2),
                "seed {seed}: only node 2 is shrunk: {decisions:?}"
            );
            if d.kind != DecisionKind::Shrink {
                continue;
            }
            shrunk += 1;
            let (capacity, others) = d.capacity.expect("the capacities were compared");
            assert!(
                (capacity * 3.0 - others).abs() < others * 0.01,
                "seed {seed}: {d:?}"
            );
            assert!(
                (d.weight.1 - 1.0 / 3.0).abs() < 0.01,
                "seed {seed}: the shrink goes to the capacity's share: {d:?}"
            );
        }
        let shrinks = (decisions.iter())
            .filter(|d| d.kind == DecisionKind::Shrink)
            .count();
        let undone = (decisions.iter())
            .filter(|d| d.kind == DecisionKind::Undo)
            .count();
        assert!(
            shrinks <= undone + 1,
            "seed {seed}: a kept shrink to the capacity's share is the last: {decisions:?}"
        );
    });
    assert!(shrunk > 0, "node 2 was never shrunk");
}
