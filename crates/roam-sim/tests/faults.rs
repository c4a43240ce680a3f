//! Failures: a crashed node, a broken connection, lossy links and a partition. Operations that
//! depend on a lost peer fail with `PeerGone` naming it, the others are unaffected, and nothing
//! hangs; a partition only delays.

mod common;

use common::{all_keys, concat, home_of, random_increments, random_space, test_rng};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use roam_core::{Key, KeySpace, NodeId, OpError, Partitioning};
use roam_sim::{
    Op, OpKind, OpRecord, Outcome, Sim, SimConfig, WorkerRef, check_per_key_linearizable,
    for_each_seed,
};

/// Random sync and async pulls and pushes over all keys, in `rounds` rounds that each end with
/// `WaitAll` and (if `barriers`) a barrier.
fn mixed_scripts(
    rng: &mut ChaCha8Rng,
    sim: &mut Sim,
    rounds: usize,
    ops_per_round: usize,
    barriers: bool,
) {
    let space = sim.config().space.clone();
    for w in sim.workers() {
        let mut script = Vec::new();
        for _ in 0..rounds {
            for _ in 0..ops_per_round {
                let keys: Vec<Key> = (0..rng.random_range(1..=4))
                    .map(|_| rng.random_range(0..space.num_keys()))
                    .collect();
                let len = keys.iter().map(|&k| space.len(k)).sum();
                let wait = rng.random_bool(0.6);
                script.push(if rng.random_bool(0.5) {
                    Op::Pull { keys, wait }
                } else {
                    Op::Push {
                        keys,
                        vals: vec![1.0; len],
                        wait,
                    }
                });
            }
            script.push(Op::WaitAll);
            if barriers {
                script.push(Op::Barrier);
            }
        }
        sim.add_script(w, script);
    }
}

fn touches(sim: &Sim, op: &OpRecord, node: NodeId) -> bool {
    op.keys.iter().any(|&k| home_of(sim, k) == node)
}

/// Checks the outcome of every op of the live workers after `lost` became unreachable from
/// some nodes. `peers_lost_by(node)` lists the peers each node may have been told about.
fn check_failures_name_the_lost_peer(sim: &Sim, seed: u64) {
    let history = sim.history();
    for op in history
        .ops()
        .iter()
        .filter(|op| !sim.is_crashed(op.worker.node))
    {
        let node = op.worker.node;
        assert!(op.ret.is_some(), "seed {seed}: op never completed: {op}");
        let lost_before = |peer: NodeId| {
            history
                .peer_lost_at(node, peer)
                .is_some_and(|at| at < op.invoke)
        };
        match &op.outcome {
            Outcome::Failed(OpError::PeerGone { peer }) => {
                let known = history
                    .peer_lost_at(node, *peer)
                    .is_some_and(|at| at < op.ret.unwrap());
                assert!(
                    known,
                    "seed {seed}: failure names {peer}, which {node} was not told is lost: {op}"
                );
                if op.kind != OpKind::Barrier {
                    assert!(
                        touches(sim, op, *peer),
                        "seed {seed}: op failed for a peer it does not use: {op}"
                    );
                }
            }
            Outcome::Failed(err) => panic!("seed {seed}: unexpected error {err}: {op}"),
            _ => {
                for peer in (0..sim.config().nodes)
                    .map(NodeId)
                    .filter(|&p| lost_before(p))
                {
                    assert!(
                        op.kind != OpKind::Barrier && !touches(sim, op, peer),
                        "seed {seed}: op that needs {peer}, known lost before it started, succeeded: {op}"
                    );
                }
            }
        }
    }
}

#[test]
fn crash_fails_dependent_ops_with_peer_gone_and_nothing_hangs() {
    for_each_seed(30, |seed| {
        for partitioning in [Partitioning::Range, Partitioning::Hash] {
            let mut rng = test_rng(seed);
            let space = random_space(&mut rng, 18);
            let fast = rng.random_bool(0.5);
            let cfg = SimConfig::new(3, 2, space)
                .with_seed(seed)
                .with_partitioning(partitioning)
                .with_fast_local_access(fast);
            let mut sim = Sim::new(cfg);
            mixed_scripts(&mut rng, &mut sim, 3, 8, true);
            let crash_after = rng.random_range(0..400);
            let victim = NodeId(rng.random_range(0..3));
            sim.run_steps(crash_after);
            sim.crash(victim);
            sim.run_until_idle().unwrap();

            assert!(
                sim.unfinished_workers().is_empty(),
                "seed {seed}: hung: {:?}",
                sim.unfinished_workers()
            );
            for n in (0..3).map(NodeId).filter(|&n| n != victim) {
                assert!(
                    sim.node(n).is_lost(victim),
                    "seed {seed}: {n} was never told about {victim}"
                );
                assert_eq!(sim.node(n).pending_ops(), 0);
                // Every later barrier on a live node fails, naming the crashed node.
                let late_barriers: Vec<_> = sim
                    .history()
                    .ops()
                    .iter()
                    .filter(|op| op.worker.node == n && op.kind == OpKind::Barrier)
                    .filter(|op| op.invoke > sim.history().peer_lost_at(n, victim).unwrap())
                    .collect();
                for op in late_barriers {
                    assert_eq!(
                        op.outcome,
                        Outcome::Failed(OpError::PeerGone { peer: victim }),
                        "{op}"
                    );
                }
            }
            check_failures_name_the_lost_peer(&sim, seed);
            check_per_key_linearizable(sim.history())
                .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        }
    });
}

#[test]
fn a_barrier_waiting_for_a_crashed_node_fails() {
    for_each_seed(8, |seed| {
        let cfg = SimConfig::new(3, 2, KeySpace::uniform(6, 1).unwrap()).with_seed(seed);
        let mut sim = Sim::new(cfg);
        // Node 2's workers never reach the barrier; the others wait in it when node 2 crashes.
        for w in sim.workers().into_iter().filter(|w| w.node != NodeId(2)) {
            sim.add_script(w, [Op::Barrier]);
        }
        sim.run_until_idle().unwrap();
        assert_eq!(
            sim.unfinished_workers().len(),
            4,
            "the barrier cannot complete without node 2"
        );
        sim.crash(NodeId(2));
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty());
        for op in sim.history().ops() {
            assert_eq!(
                op.outcome,
                Outcome::Failed(OpError::PeerGone { peer: NodeId(2) }),
                "{op}"
            );
        }
    });
}

#[test]
fn broken_connection_fails_only_ops_across_it() {
    for_each_seed(20, |seed| {
        let mut rng = test_rng(seed);
        let space = random_space(&mut rng, 18);
        let cfg = SimConfig::new(3, 2, space)
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash);
        let mut sim = Sim::new(cfg);
        mixed_scripts(&mut rng, &mut sim, 2, 12, false);
        sim.run_steps(rng.random_range(0..300));
        sim.drop_link(NodeId(1), NodeId(2));
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty());
        assert!(sim.node(NodeId(1)).is_lost(NodeId(2)) && sim.node(NodeId(2)).is_lost(NodeId(1)));
        assert!(!sim.node(NodeId(0)).is_lost(NodeId(1)) && !sim.node(NodeId(0)).is_lost(NodeId(2)));
        for op in sim
            .history()
            .ops()
            .iter()
            .filter(|op| op.worker.node == NodeId(0))
        {
            assert!(op.succeeded(), "node 0 is unaffected: {op}");
        }
        check_failures_name_the_lost_peer(&sim, seed);
    });
}

/// A connection that breaks between two workers' nodes makes those nodes fail their barriers
/// immediately and never report to the coordinator, which nobody tells: its workers wait
/// forever. This documents a liveness bug of the core (`Node::issue_barrier` fails locally
/// without telling the coordinator); it is ignored until the core propagates barrier failures.
#[test]
#[ignore = "roam-core bug: coordinator barrier hangs when two other nodes lose each other"]
fn barrier_does_not_hang_when_two_non_coordinators_lose_each_other() {
    for_each_seed(1, |seed| {
        let cfg = SimConfig::new(3, 1, KeySpace::uniform(6, 1).unwrap()).with_seed(seed);
        let mut sim = Sim::new(cfg);
        sim.drop_link(NodeId(1), NodeId(2));
        sim.run_until_idle().unwrap();
        for w in sim.workers() {
            sim.add_script(w, [Op::Barrier]);
        }
        sim.run_until_idle().unwrap();
        assert!(
            sim.unfinished_workers().is_empty(),
            "hung: {:?}",
            sim.unfinished_workers()
        );
    });
}

#[test]
fn lossy_links_become_lost_peers_not_silent_loss() {
    for_each_seed(30, |seed| {
        let mut rng = test_rng(seed);
        let space = random_space(&mut rng, 18);
        let cfg = SimConfig::new(3, 2, space)
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash)
            .with_drop_probability(0.01);
        let mut sim = Sim::new(cfg);
        mixed_scripts(&mut rng, &mut sim, 3, 10, false);
        sim.run_until_idle().unwrap();
        assert!(
            sim.unfinished_workers().is_empty(),
            "seed {seed}: hung: {:?}",
            sim.unfinished_workers()
        );
        check_failures_name_the_lost_peer(&sim, seed);
        check_per_key_linearizable(sim.history()).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        // A connection breaks as a whole: a frame lost means both ends learn about it.
        let dropped = sim.net_stats().frames_dropped;
        let lost_pairs = (0..3)
            .flat_map(|a| (0..3).map(move |b| (NodeId(a), NodeId(b))))
            .filter(|&(a, b)| sim.node(a).is_lost(b))
            .count();
        assert_eq!(
            dropped > 0,
            lost_pairs > 0,
            "seed {seed}: drops {dropped}, lost pairs {lost_pairs}"
        );
        assert_eq!(lost_pairs % 2, 0, "loss is reported at both ends");
    });
}

#[test]
fn partition_holds_frames_and_heal_delivers_them_all() {
    for_each_seed(15, |seed| {
        let mut rng = test_rng(seed);
        let space = random_space(&mut rng, 18);
        let cfg = SimConfig::new(3, 2, space.clone())
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash);
        let mut sim = Sim::new(cfg);
        let workers = sim.workers();
        let work = random_increments(&mut rng, &space, &workers, 15, 4);
        let keys = all_keys(&space);
        for (w, script) in work.scripts {
            sim.add_script(w, script);
            sim.add_script(w, [Op::WaitAll, Op::Barrier, Op::pull(keys.clone())]);
        }
        sim.partition(NodeId(0), NodeId(1));
        sim.run_until_idle().unwrap();
        // Node 0 coordinates the barrier, so nobody can finish while it is cut from node 1.
        assert!(sim.in_flight() > 0, "frames are held, not dropped");
        assert_eq!(sim.unfinished_workers().len(), workers.len());
        assert_eq!(sim.link_stats(NodeId(0), NodeId(1)).frames_delivered, 0);
        assert_eq!(sim.link_stats(NodeId(1), NodeId(0)).frames_delivered, 0);
        sim.heal(NodeId(0), NodeId(1));
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty());
        assert_eq!(sim.net_stats().frames_dropped, 0);
        let want = concat(&work.expected, &keys);
        for w in workers {
            let last = sim.history().of_worker(w).last().unwrap();
            assert_eq!(
                last.outcome,
                Outcome::Pulled(want.clone()),
                "seed {seed}: {w}"
            );
        }
    });
}

#[test]
fn ops_of_a_crashed_node_stay_pending_and_others_finish() {
    let cfg = SimConfig::new(2, 1, KeySpace::uniform(4, 1).unwrap());
    let mut sim = Sim::new(cfg);
    let remote_key = 3; // range partitioning: keys 2 and 3 live on node 1
    sim.add_script(WorkerRef::new(0, 0), [Op::pull(vec![remote_key])]);
    sim.run_steps(1); // the pull is issued and its frame is in flight
    sim.crash(NodeId(0));
    sim.run_until_idle().unwrap();
    let op = &sim.history().ops()[0];
    assert_eq!((op.ret, &op.outcome), (None, &Outcome::Pending));
    assert!(
        sim.unfinished_workers().is_empty(),
        "crashed nodes' workers are not waited for"
    );
    // What node 0 sent before crashing still arrives; the answer to it is lost.
    assert_eq!(sim.link_stats(NodeId(0), NodeId(1)).frames_delivered, 1);
    assert_eq!(sim.link_stats(NodeId(1), NodeId(0)).frames_dropped, 1);
    assert!(sim.node(NodeId(1)).is_lost(NodeId(0)));
}
