//! Failures: a crashed node, a broken connection, lossy links and a partition. Operations that
//! depend on a lost peer fail with `PeerGone` naming it, the others are unaffected, and nothing
//! hangs; a partition only delays.
//!
//! Semantics of a loss: a node that loses a peer (its connection ended) tells every other node
//! it is still connected to with a `PeerLost` notice, and every node told does the same, so a
//! loss seen by any node becomes a loss everywhere (the two ends of a broken connection do not
//! lose anyone else, and nobody is told that it is itself lost). Under static allocation a node
//! then fails exactly the operations that need a lost peer.

mod common;

use common::{all_keys, concat, home_of, random_increments, random_space, test_rng};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use roam_core::{Key, KeySpace, NodeId, OpError, Partitioning};
use roam_sim::{
    Fault, Op, OpKind, OpRecord, Outcome, Sim, SimConfig, WorkerRef, check_per_key_linearizable,
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

/// Whether the connection between `a` and `b` broke (explicitly, by loss or by a crash).
fn connection_broke(sim: &Sim, a: NodeId, b: NodeId) -> bool {
    sim.history().faults().iter().any(|f| match f.fault {
        Fault::LinkBroken(x, y) => (x, y) == (a, b) || (x, y) == (b, a),
        Fault::Crash(x) => x == a || x == b,
        _ => false,
    })
}

/// Checks how losses spread: every loss a node saw is justified (its own connection to the
/// peer ended, or a node that had lost the peer before told it), both ends of every broken
/// connection saw it, and every node still connected to a node that lost a peer was told.
fn check_loss_propagation(sim: &Sim, seed: u64) {
    let nodes: Vec<NodeId> = (0..sim.config().nodes).map(NodeId).collect();
    let history = sim.history();
    for f in history.faults() {
        let Fault::PeerLost { at, peer, via } = f.fault else {
            continue;
        };
        assert_ne!(at, peer, "seed {seed}: {at} was told it is itself lost");
        match via {
            None => assert!(
                connection_broke(sim, at, peer),
                "seed {seed}: {at} lost {peer} without its connection breaking"
            ),
            Some(via) => assert!(
                via != peer && history.peer_lost_at(via, peer).is_some_and(|t| t < f.at),
                "seed {seed}: {at} was told by {via} that {peer} is lost before {via} knew"
            ),
        }
    }
    let live = |n: NodeId| !sim.is_crashed(n);
    for &a in nodes.iter().filter(|&&a| live(a)) {
        for &b in nodes.iter().filter(|&&b| b != a && live(b)) {
            if connection_broke(sim, a, b) {
                assert!(
                    sim.node(a).is_lost(b),
                    "seed {seed}: {a} never saw its connection to {b} end"
                );
            }
        }
    }
    for &z in nodes.iter().filter(|&&z| live(z)) {
        for &y in nodes.iter().filter(|&&y| sim.node(z).is_lost(y)) {
            for &x in nodes.iter().filter(|&&x| x != z && x != y && live(x)) {
                if !sim.node(z).is_lost(x) && !connection_broke(sim, z, x) {
                    assert!(
                        sim.node(x).is_lost(y),
                        "seed {seed}: {z} lost {y} but {x}, still connected to it, was never told"
                    );
                }
            }
        }
    }
}

/// Checks the outcome of every op of the live workers after `lost` became unreachable from
/// some nodes. `peers_lost_by(node)` lists the peers each node may have been told about.
fn check_failures_name_the_lost_peer(sim: &Sim, seed: u64) {
    let history = sim.history();
    for op in common::surviving_ops(sim) {
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
            check_loss_propagation(&sim, seed);
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

/// A connection breaks between nodes 1 and 2: each loses the other, and node 0 is told of both
/// losses by the other end's notice. Node 1 and 2 keep using node 0, node 0 keeps its own keys,
/// and every op fails exactly when it needs a node its issuer knew to be lost.
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
        let broke_at = sim.history().ops().len();
        sim.drop_link(NodeId(1), NodeId(2));
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty());
        let (n0, n1, n2) = (NodeId(0), NodeId(1), NodeId(2));
        assert!(sim.node(n1).is_lost(n2) && sim.node(n2).is_lost(n1));
        assert!(
            sim.node(n0).is_lost(n1) && sim.node(n0).is_lost(n2),
            "node 0 was told of both losses"
        );
        assert!(
            !sim.node(n1).is_lost(n0) && !sim.node(n2).is_lost(n0),
            "nobody loses node 0"
        );
        let history = sim.history();
        // Each end told node 0 about the other; nobody else told anybody anything new.
        let losses: Vec<_> = history
            .faults()
            .iter()
            .filter_map(|f| match f.fault {
                Fault::PeerLost { at, peer, via } => Some((at, peer, via)),
                _ => None,
            })
            .collect();
        let mut sorted = losses.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            [
                (n0, n1, Some(n2)),
                (n0, n2, Some(n1)),
                (n1, n2, None),
                (n2, n1, None)
            ],
            "seed {seed}"
        );
        for op in history.ops() {
            let only_own_node_0_keys =
                op.worker.node == n0 && !touches(&sim, op, n1) && !touches(&sim, op, n2);
            if op.id < broke_at
                && op
                    .ret
                    .is_some_and(|r| history.faults().iter().all(|f| r < f.at))
            {
                assert!(
                    op.succeeded(),
                    "seed {seed}: op done before the break failed: {op}"
                );
            }
            if only_own_node_0_keys {
                assert!(
                    op.succeeded(),
                    "seed {seed}: node 0's own keys are unaffected: {op}"
                );
            }
        }
        check_failures_name_the_lost_peer(&sim, seed);
        check_loss_propagation(&sim, seed);
        check_per_key_linearizable(history).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    });
}

/// A connection that breaks between two non-coordinators used to leave the coordinator waiting
/// forever at the next barrier (nobody told it); now both ends' `PeerLost` notices reach it, so
/// every barrier fails with `PeerGone` and nothing hangs, whether the barrier started before,
/// during or after the break.
#[test]
fn barrier_does_not_hang_when_two_non_coordinators_lose_each_other() {
    for_each_seed(20, |seed| {
        let mut rng = test_rng(seed);
        let cfg = SimConfig::new(3, 2, KeySpace::uniform(6, 1).unwrap()).with_seed(seed);
        let mut sim = Sim::new(cfg);
        // Seed 0: the break is fully known before the barrier; others: it races with it.
        let break_first = seed == 0;
        if break_first {
            sim.drop_link(NodeId(1), NodeId(2));
            sim.run_until_idle().unwrap();
        }
        // Node 0's workers arrive at different times, so it is often waiting when it learns.
        for w in sim.workers() {
            let pause = rng.random_range(0..100_000);
            sim.add_script(w, [Op::Sleep(pause), Op::Barrier, Op::Barrier]);
        }
        if !break_first {
            sim.run_steps(rng.random_range(0..12));
            sim.drop_link(NodeId(1), NodeId(2));
        }
        sim.run_until_idle().unwrap();
        assert!(
            sim.unfinished_workers().is_empty(),
            "seed {seed}: hung: {:?}",
            sim.unfinished_workers()
        );
        for n in 0..3 {
            let node = NodeId(n);
            let last = sim
                .history()
                .of_worker(WorkerRef::new(n, 0))
                .last()
                .unwrap();
            // The second barrier starts after the first ended; by then every node knows.
            assert!(
                matches!(last.outcome, Outcome::Failed(OpError::PeerGone { peer }) if peer != node),
                "seed {seed}: {last}"
            );
        }
        check_failures_name_the_lost_peer(&sim, seed);
        check_loss_propagation(&sim, seed);
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
        // A connection breaks as a whole: a frame lost means both ends learn about it, and
        // every node still connected to one of them is told.
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
        check_loss_propagation(&sim, seed);
        if lost_pairs > 0 {
            // With three nodes one broken connection already leaves every node knowing every
            // lost end: at least the two ends and the third node's two notices.
            assert!(lost_pairs >= 4, "seed {seed}: only {lost_pairs} lost pairs");
        }
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
