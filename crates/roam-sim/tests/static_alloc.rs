//! Static allocation end to end: concurrent increments from every worker, a barrier, then pulls
//! of everything must give the exact sums, with and without fast local access, under range and
//! hash partitioning. The expected sums come from the scripts alone (`common`).

mod common;

use common::{all_keys, concat, home_of, random_increments, random_space, test_rng};
use roam_core::{NodeId, Partitioning};
use roam_sim::{Op, OpKind, Outcome, Sim, SimConfig, WorkerRef, for_each_seed};
use std::sync::atomic::Ordering::Relaxed;

const NODES: u32 = 3;
const WORKERS: u32 = 2;

struct Run {
    sim: Sim,
    keys_pushed: Vec<u64>,
    /// Keys pushed per worker whose home is another node.
    remote_keys_pushed: Vec<u64>,
}

/// Runs the increment workload and checks the final values; returns the run for further checks.
fn increments_then_pull_all(seed: u64, partitioning: Partitioning, fast: bool) -> Run {
    let mut rng = test_rng(seed);
    let space = random_space(&mut rng, 24);
    let cfg = SimConfig::new(NODES, WORKERS, space.clone())
        .with_seed(seed)
        .with_partitioning(partitioning)
        .with_fast_local_access(fast);
    let mut sim = Sim::new(cfg);
    let workers = sim.workers();
    let work = random_increments(&mut rng, &space, &workers, 25, 5);
    let keys = all_keys(&space);
    let mut remote_keys_pushed = Vec::new();
    for (w, script) in work.scripts {
        remote_keys_pushed.push(
            script
                .iter()
                .filter_map(|op| match op {
                    Op::Push { keys, .. } => {
                        Some(keys.iter().filter(|&&k| home_of(&sim, k) != w.node).count() as u64)
                    }
                    _ => None,
                })
                .sum(),
        );
        sim.add_script(w, script);
        // Every increment is acknowledged before the barrier, so after it every pull sees all.
        sim.add_script(w, [Op::WaitAll, Op::Barrier, Op::pull(keys.clone())]);
    }
    sim.run_until_idle().unwrap();

    assert!(
        sim.unfinished_workers().is_empty(),
        "workers still busy: {:?}",
        sim.unfinished_workers()
    );
    let want = concat(&work.expected, &keys);
    for op in sim.history().ops() {
        assert!(op.succeeded(), "seed {seed}: op failed: {op}");
    }
    for w in &workers {
        let last = sim.history().of_worker(*w).last().expect("the worker ran");
        assert_eq!(last.kind, OpKind::Pull);
        assert_eq!(
            last.outcome,
            Outcome::Pulled(want.clone()),
            "seed {seed}: final pull of {w}"
        );
    }
    for key in keys {
        assert_eq!(
            sim.peek(key).as_deref(),
            Some(&work.expected[key as usize][..]),
            "stored value of key {key}"
        );
    }
    assert!(
        sim.warnings().is_empty(),
        "unexpected warnings: {:?}",
        sim.warnings()
    );
    for n in 0..NODES {
        assert_eq!(sim.node(NodeId(n)).counters().anomalies.load(Relaxed), 0);
        assert_eq!(sim.node(NodeId(n)).pending_ops(), 0);
    }
    Run {
        sim,
        keys_pushed: work.keys_pushed,
        remote_keys_pushed,
    }
}

/// Sums the per-worker figures of each node.
fn per_node(values: &[u64]) -> Vec<u64> {
    values
        .chunks(WORKERS as usize)
        .map(|c| c.iter().sum())
        .collect()
}

#[test]
fn increments_sum_exactly_with_fast_local_access() {
    for_each_seed(20, |seed| {
        for partitioning in [Partitioning::Range, Partitioning::Hash] {
            let run = increments_then_pull_all(seed, partitioning, true);
            let sim = &run.sim;
            let remote = per_node(&run.remote_keys_pushed);
            for n in 0..NODES {
                let id = NodeId(n);
                // Local keys never become messages, remote ones always do.
                assert_eq!(
                    sim.link_stats(id, id).frames_sent,
                    0,
                    "self-link used by {id}"
                );
                let counters = sim.node(id).counters();
                assert_eq!(
                    counters.remote_push_keys.load(Relaxed),
                    remote[n as usize],
                    "{id}"
                );
            }
            assert!(sim.net_stats().frames_delivered > 0);
            assert_eq!(sim.net_stats().frames_dropped, 0);
        }
    });
}

#[test]
fn increments_sum_exactly_without_fast_local_access() {
    for_each_seed(20, |seed| {
        for partitioning in [Partitioning::Range, Partitioning::Hash] {
            let run = increments_then_pull_all(seed, partitioning, false);
            let sim = &run.sim;
            let pushed = per_node(&run.keys_pushed);
            for n in 0..NODES {
                let id = NodeId(n);
                let counters = sim.node(id).counters();
                // Every key, local or not, went through a message, and local ones over the
                // node's link to itself.
                assert_eq!(
                    counters.remote_push_keys.load(Relaxed),
                    pushed[n as usize],
                    "{id}"
                );
                let self_link = sim.link_stats(id, id);
                assert!(
                    self_link.frames_delivered > 0 && self_link.bytes_delivered > 0,
                    "{id}: {self_link:?}"
                );
                assert!(counters.served_keys.load(Relaxed) > 0);
                assert_eq!(
                    counters.messages_received.load(Relaxed),
                    (0..NODES)
                        .map(|m| sim.link_stats(NodeId(m), id).frames_delivered)
                        .sum::<u64>()
                );
            }
        }
    });
}

#[test]
fn fast_path_and_message_path_agree_on_every_value() {
    for_each_seed(8, |seed| {
        let fast = increments_then_pull_all(seed, Partitioning::Hash, true);
        let slow = increments_then_pull_all(seed, Partitioning::Hash, false);
        let finals = |run: &Run| -> Vec<Outcome> {
            run.sim
                .workers()
                .iter()
                .map(|w| {
                    run.sim
                        .history()
                        .of_worker(*w)
                        .last()
                        .unwrap()
                        .outcome
                        .clone()
                })
                .collect()
        };
        assert_eq!(finals(&fast), finals(&slow));
        let bytes = |run: &Run| run.sim.net_stats().bytes_delivered;
        assert!(
            bytes(&slow) > bytes(&fast),
            "messages for local keys must cost bytes"
        );
    });
}

#[test]
fn a_single_node_cluster_works_over_its_self_link() {
    for_each_seed(4, |seed| {
        let mut rng = test_rng(seed);
        let space = random_space(&mut rng, 8);
        let cfg = SimConfig::new(1, 3, space.clone())
            .with_seed(seed)
            .with_fast_local_access(false);
        let mut sim = Sim::new(cfg);
        let workers = sim.workers();
        let work = random_increments(&mut rng, &space, &workers, 10, 3);
        let keys = all_keys(&space);
        for (w, script) in work.scripts {
            sim.add_script(w, script);
            sim.add_script(w, [Op::WaitAll, Op::Barrier, Op::pull(keys.clone())]);
        }
        sim.run_until_idle().unwrap();
        let last = sim
            .history()
            .of_worker(WorkerRef::new(0, 2))
            .last()
            .unwrap();
        assert_eq!(last.outcome, Outcome::Pulled(concat(&work.expected, &keys)));
    });
}
