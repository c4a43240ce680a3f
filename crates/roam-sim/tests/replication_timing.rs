//! Replicated keys in the simulator, their timing and failures: the staleness the nodes
//! measure stays within two sync periods plus two deliveries, one push becomes visible
//! everywhere within that bound, a work clock drives the rounds by pushes instead of time, a
//! node that alone changed a key is not sent it back, and a sync ends (with success or
//! `PeerGone`) when links break. (The random runs with exact sums are `replication.rs`.)

mod common;

use common::{run_fault_free, run_to_end, test_rng, workers_of};
use rand::Rng;
use roam_core::{Key, KeySpace, NodeId, OpError, Partitioning};
use roam_sim::{
    Consistency, Op, OpKind, Outcome, Sim, SimConfig, WorkerRef, check_linearizable,
    check_per_key_linearizable, for_each_seed, seeds,
};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 2_000 }
}

/// With no pauses between ops and one-way delays of at most `D`, every update lands in every
/// replica within two sync periods plus two deliveries of its push (`replica.rs`): up to a
/// period until its node's round, a delivery to the hub, up to a period until the hub's round,
/// a delivery back. The nodes measure the age of each update as it lands; the largest must
/// stay within `2P + 2D` (plus the histogram's rounding: three significant figures).
#[test]
fn replicas_are_at_most_two_periods_and_two_deliveries_stale() {
    let count = default_seeds() / 4;
    let mut worst_ratio = 0.0f64;
    for_each_seed(count, |seed| {
        let mut rng = test_rng(seed ^ 0x57a1e);
        let nodes = 2 + (seed % 4) as u32;
        let period = rng.random_range(5_000..=200_000);
        let max_delay = rng.random_range(1_000..=100_000);
        let min_delay = rng.random_range(0..=max_delay);
        let num_keys = 16;
        let space = KeySpace::uniform(num_keys, 2).unwrap();
        let replicated: Vec<Key> = (0..num_keys).filter(|k| k % 3 == 0).collect();
        let cfg = SimConfig::new(nodes, rng.random_range(1..=2), space)
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash)
            .with_delay(min_delay, max_delay)
            .with_think(0, 0)
            .with_replication(replicated.clone(), period);
        let mut scripts = Vec::new();
        for w in workers_of(&cfg) {
            let mut script = Vec::new();
            for _ in 0..rng.random_range(10..=40) {
                let key = replicated[rng.random_range(0..replicated.len())];
                script.push(Op::push(vec![key], vec![1.0, 2.0]));
                script.push(match rng.random_range(0..3) {
                    // A remote round trip or a pause: virtual time passes between pushes.
                    0 => Op::pull(vec![rng.random_range(0..num_keys)]),
                    1 => Op::Sleep(rng.random_range(0..=period)),
                    _ => Op::Sleep(rng.random_range(0..=3 * period)),
                });
            }
            script.extend([Op::SyncReplicas, Op::pull(replicated.clone())]);
            scripts.push((w, script));
        }
        let sim = run_fault_free(seed, cfg, scripts);
        let bound = 2 * period + 2 * max_delay;
        let slack = bound / 500 + 1;
        let mut measured = 0;
        for n in 0..nodes {
            let Some(worst) = sim.node(NodeId(n)).replica_staleness_ns(100.0) else {
                continue;
            };
            measured += 1;
            assert!(
                worst <= bound + slack,
                "seed {seed}: node {n} saw an update {worst} ns old, above 2P + 2D = {bound} \
                 (P = {period}, D = {max_delay})"
            );
            worst_ratio = worst_ratio.max(worst as f64 / bound as f64);
        }
        // Pushes from every node to keys hubbed all over the cluster: updates land everywhere.
        assert!(measured >= 1, "seed {seed}: no node measured any staleness");
    });
    eprintln!("largest staleness seen: {worst_ratio:.3} of 2P + 2D");
    if seeds(count).len() >= 100 {
        // The bound is not vacuous: runs come close to it.
        assert!(
            worst_ratio > 0.5,
            "largest staleness only {worst_ratio:.3} of the bound"
        );
    }
}

/// A push is visible at once in its own replica, reaches the others in the background within
/// two sync periods plus two deliveries, and everywhere at once after a sync.
#[test]
fn a_push_is_local_at_once_and_everywhere_within_two_periods_and_two_deliveries() {
    const P: u64 = 100_000;
    const D: u64 = 10_000;
    let cfg = SimConfig::new(3, 1, KeySpace::uniform(6, 1).unwrap())
        .with_delay(D, D)
        .with_think(0, 0)
        .with_replication(vec![1, 4], P);
    let mut sim = Sim::new(cfg);
    // Range partitioning of 6 keys over 3 nodes: key 1's hub (its bucket's creator) is node 0.
    assert_eq!(sim.node(NodeId(0)).directory().home(1), NodeId(0));
    let w = |n| WorkerRef::new(n, 0);
    // Node 2 pushes at time 1, after every node's first round (at time 0): its delta waits for
    // node 2's round at P, reaches the hub at P + D, is broadcast at the hub's round at 2P
    // and reaches node 1 at 2P + D.
    sim.add_script(
        w(2),
        [
            Op::Sleep(1),
            Op::push(vec![1], vec![5.0]),
            Op::pull(vec![1]),
        ],
    );
    sim.add_script(
        w(1),
        [
            Op::Sleep(2 * P + D - 1),
            Op::pull(vec![1]),
            Op::Sleep(2),
            Op::pull(vec![1]),
        ],
    );
    sim.add_script(
        w(0),
        [
            Op::Sleep(P + D + 1),
            Op::pull(vec![1]),
            Op::Sleep(P - D),
            Op::pull(vec![1]),
        ],
    );
    run_to_end(0, &mut sim);
    let pulls = |n| -> Vec<(u64, Outcome)> {
        sim.history()
            .of_worker(w(n))
            .filter(|op| op.kind == OpKind::Pull)
            .map(|op| (op.invoke.time.0, op.outcome.clone()))
            .collect()
    };
    let read = |v: f32| Outcome::Pulled(vec![v]);
    assert_eq!(pulls(2), [(1, read(5.0))], "local at once");
    // (The first read is stale: a linearizability check of key 1 would fail.)
    assert_eq!(
        pulls(1),
        [(2 * P + D - 1, read(0.0)), (2 * P + D + 1, read(5.0))],
        "node 1 sees the push once the hub's broadcast arrived"
    );
    // The hub's own replica follows the primary at the hub's round (2P), not when the delta
    // arrives (P + D).
    assert_eq!(pulls(0), [(P + D + 1, read(0.0)), (2 * P + 1, read(5.0))]);
    // A sync makes a push visible everywhere at once.
    for n in 0..3 {
        let mut script = vec![Op::SyncReplicas, Op::pull(vec![1, 4])];
        if n == 1 {
            script.insert(0, Op::push(vec![1, 4], vec![2.0, 3.0]));
        }
        sim.add_script(w(n), script);
    }
    run_to_end(0, &mut sim);
    for n in 0..3 {
        let last = sim.history().of_worker(w(n)).last().unwrap();
        assert_eq!(last.outcome, Outcome::Pulled(vec![7.0, 3.0]), "node {n}");
    }
    assert!(sim.warnings().is_empty(), "{:?}", sim.warnings());
    // Replicated keys are held (owned) by nobody, and the checkers skip them.
    assert!(sim.holders(1).is_empty() && sim.holders(4).is_empty());
    assert_eq!(sim.history().keys_checked(), [0, 2, 3, 5]);
    sim.check_quiescent_placement().unwrap();
    check_linearizable(sim.history(), Consistency::with_program_order(), None).unwrap();
    check_per_key_linearizable(sim.history()).unwrap();
}

/// With a work clock, rounds follow the pushes, not the period: a node that pushed enough
/// starts a round at once, and a hub whose own worker is idle broadcasts once other nodes'
/// deltas count for enough updates, so a push is everywhere long before the period (10 s
/// here), which alone would leave the others reading 0 (checked too).
#[test]
fn with_a_work_clock_rounds_follow_the_pushes_not_the_period() {
    const P: u64 = 10_000_000_000;
    const MS: u64 = 1_000_000;
    for work_clock in [true, false] {
        let cfg = SimConfig::new(3, 1, KeySpace::uniform(6, 1).unwrap())
            .with_delay(10_000, 10_000)
            .with_think(0, 0)
            .with_replication(vec![1, 4], P);
        // Two key-updates per round: one push of both keys.
        let cfg = if work_clock {
            cfg.with_sync_after_updates(2)
        } else {
            cfg
        };
        let mut sim = Sim::new(cfg);
        let w = |n| WorkerRef::new(n, 0);
        let mut pusher = vec![Op::Sleep(1)];
        for _ in 0..4 {
            pusher.push(Op::push(vec![1, 4], vec![1.0, 1.0]));
            pusher.push(Op::Sleep(10 * MS));
        }
        sim.add_script(w(2), pusher);
        for n in 0..2 {
            sim.add_script(w(n), [Op::Sleep(200 * MS), Op::pull(vec![1, 4])]);
        }
        run_to_end(0, &mut sim);
        for n in 0..2 {
            let read = sim.history().of_worker(w(n)).last().unwrap();
            let Outcome::Pulled(values) = &read.outcome else {
                panic!("node {n}: {:?}", read.outcome);
            };
            if work_clock {
                assert!(
                    values.iter().all(|&v| (1.0..=4.0).contains(&v)),
                    "node {n} sees the first pushes well before the period: {values:?}"
                );
            } else {
                assert_eq!(values, &[0.0, 0.0], "node {n}: by time alone, nothing yet");
            }
        }
        let rounds = sim.node(NodeId(2)).replica_rounds();
        if work_clock {
            assert!(rounds >= 4, "a round after each push: {rounds}");
        } else {
            assert!(rounds <= 2, "rounds at 0 and P only: {rounds}");
        }
        assert!(sim.warnings().is_empty(), "{:?}", sim.warnings());
    }
}

/// A hub sends a node only the keys that some other node changed: a node that alone pushed to
/// a key already holds the sum (its own deltas), so it gets the acknowledgement of its deltas
/// and not the values back. The others get every change, and everyone ends exact.
#[test]
fn a_node_that_alone_changed_a_key_is_not_sent_it_back() {
    const P: u64 = 100_000;
    let cfg = SimConfig::new(3, 1, KeySpace::uniform(6, 2).unwrap())
        .with_delay(10_000, 10_000)
        .with_think(0, 0)
        .with_replication(vec![1, 4], P);
    let mut sim = Sim::new(cfg);
    let w = |n| WorkerRef::new(n, 0);
    let mut pusher = Vec::new();
    for _ in 0..10 {
        pusher.push(Op::push(vec![1, 4], vec![1.0, 2.0, 3.0, 4.0]));
        pusher.push(Op::Sleep(P / 3));
    }
    pusher.extend([Op::SyncReplicas, Op::pull(vec![1, 4])]);
    sim.add_script(w(2), pusher);
    for n in 0..2 {
        sim.add_script(w(n), [Op::SyncReplicas, Op::pull(vec![1, 4])]);
    }
    run_to_end(0, &mut sim);
    for n in 0..3 {
        let last = sim.history().of_worker(w(n)).last().unwrap();
        assert_eq!(
            last.outcome,
            Outcome::Pulled(vec![10.0, 20.0, 30.0, 40.0]),
            "node {n}"
        );
    }
    let received = |n: u32| {
        sim.node(NodeId(n))
            .counters()
            .replica_keys_received
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let hubs: Vec<NodeId> = [1, 4].map(|k| sim.node(NodeId(0)).hub(k)).to_vec();
    assert!(
        hubs.iter().any(|&h| h != NodeId(2)),
        "a key's hub is another node than the pusher: {hubs:?}"
    );
    assert_eq!(received(2), 0, "the only pusher is sent nothing back");
    // Each other node gets each key whose hub it is not at least once (a hub rebases its own
    // replica directly).
    for n in 0..2 {
        let foreign = hubs.iter().filter(|&&h| h != NodeId(n)).count() as u64;
        assert!(
            received(n) >= foreign,
            "node {n}: {} < {foreign}",
            received(n)
        );
    }
    assert!(sim.warnings().is_empty(), "{:?}", sim.warnings());
}

/// Lossy links break connections (peer loss): every sync completes, successfully or with
/// `PeerGone` naming a peer its node knew to be lost, and no worker hangs.
#[test]
fn syncs_end_with_success_or_peer_gone_when_links_break() {
    let (mut ok, mut failed, mut runs_with_loss) = (0, 0, 0);
    for_each_seed(default_seeds() / 4, |seed| {
        let mut rng = test_rng(seed ^ 0x10557);
        let nodes = 2 + (seed % 4) as u32;
        let num_keys = 16;
        let space = KeySpace::uniform(num_keys, 1).unwrap();
        let replicated: Vec<Key> = (0..num_keys).filter(|k| k % 3 == 1).collect();
        let dynamic = rng.random_bool(0.5);
        let cfg = SimConfig::new(nodes, rng.random_range(1..=2), space)
            .with_seed(seed)
            .with_dynamic(dynamic)
            .with_partitioning(Partitioning::Hash)
            .with_drop_probability(rng.random_range(0.002..0.03))
            .with_replication(replicated.clone(), rng.random_range(5_000..=100_000));
        let mut sim = Sim::new(cfg);
        for w in sim.workers() {
            let mut script = Vec::new();
            for _ in 0..3 {
                for _ in 0..rng.random_range(3..=10) {
                    let keys = vec![rng.random_range(0..num_keys)];
                    script.push(match rng.random_range(0..3) {
                        0 => Op::pull(keys),
                        1 => Op::push_async(keys, vec![1.0]),
                        _ => Op::Sleep(rng.random_range(0..=50_000)),
                    });
                }
                script.extend([Op::WaitAll, Op::SyncReplicas, Op::pull(replicated.clone())]);
            }
            sim.add_script(w, script);
        }
        run_to_end(seed, &mut sim);
        let history = sim.history();
        for op in history.ops() {
            assert!(op.ret.is_some(), "seed {seed}: never completed: {op}");
            let node = op.worker.node;
            match &op.outcome {
                Outcome::Failed(OpError::PeerGone { peer }) => {
                    assert!(
                        history
                            .peer_lost_at(node, *peer)
                            .is_some_and(|at| Some(at) < op.ret),
                        "seed {seed}: fails for {peer}, which {node} did not know lost: {op}"
                    );
                    if op.kind == OpKind::SyncReplicas {
                        failed += 1;
                    }
                }
                Outcome::Failed(err) => panic!("seed {seed}: unexpected error {err}: {op}"),
                _ => {
                    if op.kind == OpKind::SyncReplicas {
                        ok += 1;
                    }
                }
            }
            // Accesses to replicated keys alone never need a peer.
            if matches!(op.kind, OpKind::Pull | OpKind::Push)
                && op.keys.iter().all(|k| replicated.contains(k))
            {
                assert!(op.succeeded(), "seed {seed}: {op}");
            }
        }
        // (Replies to ops already failed by a loss are warned about; nothing about replicas.)
        for w in sim.warnings() {
            assert!(
                !matches!(w.core, Some(roam_core::Warning::Replica { .. })),
                "seed {seed}: {}",
                w.message
            );
        }
        if sim.net_stats().frames_dropped > 0 {
            runs_with_loss += 1;
        }
        for n in 0..nodes {
            assert_eq!(
                sim.node(NodeId(n)).pending_ops(),
                0,
                "seed {seed}: node {n}"
            );
        }
        check_per_key_linearizable(history).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    });
    eprintln!(
        "syncs: {ok} succeeded, {failed} failed with PeerGone; {runs_with_loss} runs lost frames"
    );
    if seeds(default_seeds() / 4).len() >= 50 {
        assert!(ok > 0 && failed > 0, "both outcomes must occur");
    }
}
