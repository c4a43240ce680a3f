//! Failure detection by the core's timers, in virtual time: heartbeats keep idle links alive,
//! and a peer that falls silent (frozen: no connection breaks) is declared lost once nothing
//! came from it for the configured timeout. Exactly the operations that needed it fail, with
//! an error naming it; the others complete.

mod common;

use common::total;
use roam_core::{KeySpace, Liveness, NodeId, OpError};
use roam_sim::{Op, OpKind, Outcome, Sim, SimConfig, WorkerRef, for_each_seed};

const MS: u64 = 1_000_000;

/// Static range allocation on 3 nodes, one worker each, keys 0..6: keys 0-1 at node 0, 2-3 at
/// node 1, 4-5 at node 2. Heartbeats every 1 ms, silence timeout 4 ms, delays 10-50 µs.
fn cluster(seed: u64) -> Sim {
    let cfg = SimConfig::new(3, 1, KeySpace::uniform(6, 1).unwrap())
        .with_seed(seed)
        .with_delay(10_000, 50_000)
        .with_think(0, 0)
        .with_liveness(Liveness {
            heartbeat_every: MS,
            silent_after: 4 * MS,
        });
    Sim::new(cfg)
}

fn w(node: u32) -> WorkerRef {
    WorkerRef::new(node, 0)
}

#[test]
fn a_silent_peer_is_detected_after_the_timeout_and_only_operations_that_need_it_fail() {
    for_each_seed(50, |seed| {
        let mut sim = cluster(seed);
        // Node 2 falls silent at once: nothing comes from it after the links came up at 0.
        sim.freeze(NodeId(2));
        // Node 0 needs node 2 for key 4; node 1 only needs nodes 0 and 1, but stays busy long
        // past the timeout, so every link is idle for longer than a heartbeat period.
        sim.add_script(
            w(0),
            [
                Op::push(vec![0, 2], vec![1.0; 2]),
                Op::pull(vec![0, 4]),
                Op::pull(vec![0, 2]),
            ],
        );
        sim.add_script(
            w(1),
            [
                Op::Sleep(20 * MS),
                Op::push(vec![0, 3], vec![1.0; 2]),
                Op::pull(vec![0, 2, 3]),
            ],
        );
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty(), "seed {seed}");
        let ops: Vec<_> = sim.history().of_worker(w(0)).skip(1).collect();
        assert_eq!(
            ops[0].outcome,
            Outcome::Failed(OpError::PeerGone { peer: NodeId(2) }),
            "seed {seed}: the pull that needs node 2"
        );
        // Silent since 0: detected when the timeout has passed, not before, and at once then.
        let failed_at = ops[0].ret.unwrap().time.0;
        assert!(
            (4 * MS..=4 * MS + 100_000).contains(&failed_at),
            "seed {seed}: detected at {failed_at} ns; the timeout is {} ns",
            4 * MS
        );
        assert_eq!(
            ops[1].outcome,
            Outcome::Pulled(vec![1.0, 1.0]),
            "seed {seed}"
        );
        let pull = sim.history().of_worker(w(1)).last().unwrap();
        assert_eq!(pull.kind, OpKind::Pull);
        assert_eq!(
            pull.outcome,
            Outcome::Pulled(vec![2.0, 1.0, 1.0]),
            "seed {seed}"
        );
        for node in [0, 1] {
            let node = sim.node(NodeId(node));
            assert!(node.is_lost(NodeId(2)), "seed {seed}");
            assert!(
                !node.is_lost(NodeId(0)) && !node.is_lost(NodeId(1)),
                "seed {seed}: a live peer was suspected"
            );
        }
        assert!(
            sim.history().peer_lost_at(NodeId(0), NodeId(2)).is_some(),
            "seed {seed}"
        );
        assert_eq!(total(&sim, |c| &c.anomalies), 0, "seed {seed}");
    });
}

#[test]
fn idle_links_are_kept_alive_by_heartbeats() {
    for_each_seed(20, |seed| {
        let mut sim = cluster(seed);
        // Long pauses between remote accesses: every link is idle for many timeouts.
        let script: Vec<Op> = (0..5)
            .flat_map(|i| [Op::Sleep(10 * MS), Op::push(vec![(i % 3) * 2], vec![1.0])])
            .collect();
        for node in 0..3 {
            sim.add_script(w(node), script.clone());
        }
        sim.run_until_idle().unwrap();
        for op in sim.history().ops() {
            assert!(op.succeeded(), "seed {seed}: {op}");
        }
        for node in 0..3 {
            for peer in 0..3 {
                assert!(!sim.node(NodeId(node)).is_lost(NodeId(peer)), "seed {seed}");
            }
        }
    });
}

#[test]
fn without_liveness_a_silent_peer_is_never_suspected() {
    let cfg = SimConfig::new(2, 1, KeySpace::uniform(2, 1).unwrap()).with_delay(10_000, 10_000);
    let mut sim = Sim::new(cfg);
    sim.freeze(NodeId(1));
    sim.add_script(w(0), [Op::pull(vec![1])]);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.unfinished_workers(), [w(0)], "the pull waits forever");
    assert_eq!(sim.node(NodeId(0)).poll_timeout(), None);
}

/// Nothing waits forever on a silent peer (frozen, no connection breaks): a localize of a key
/// it holds (dynamic allocation: the key would come from it), a `WaitAll` on an asynchronous
/// pull from it, and the barriers after them all fail with `PeerGone` naming it.
#[test]
fn localize_wait_all_and_barrier_on_a_silent_peer_fail_naming_it() {
    for_each_seed(30, |seed| {
        let cfg = SimConfig::new(3, 1, KeySpace::uniform(6, 1).unwrap())
            .with_seed(seed)
            .with_delay(10_000, 50_000)
            .with_think(0, 0)
            .with_dynamic(true)
            .with_liveness(Liveness {
                heartbeat_every: MS,
                silent_after: 4 * MS,
            });
        let mut sim = Sim::new(cfg);
        sim.freeze(NodeId(2));
        // Keys 4 and 5 start at node 2.
        sim.add_script(w(0), [Op::localize(vec![4]), Op::Barrier]);
        sim.add_script(w(1), [Op::pull_async(vec![5]), Op::WaitAll, Op::Barrier]);
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty(), "seed {seed}");
        let mut kinds = Vec::new();
        for node in [0, 1] {
            for op in sim.history().of_worker(w(node)) {
                assert_eq!(
                    op.outcome,
                    Outcome::Failed(OpError::PeerGone { peer: NodeId(2) }),
                    "seed {seed}: {op}"
                );
                kinds.push(op.kind);
            }
        }
        assert_eq!(
            kinds,
            [
                OpKind::Localize,
                OpKind::Barrier,
                OpKind::Pull,
                OpKind::Barrier
            ],
            "seed {seed}"
        );
    });
}

/// Dynamic allocation, exact failure: a silent peer is detected after the timeout, and then
/// exactly the operations that need it fail, naming it — keys homed on it, keys a survivor's
/// home records it as owning, a localize of such a key, and the pull that was waiting on it
/// when it froze. Keys that are local, or homed and owned on survivors (including one moved
/// from its home to another survivor before the freeze), keep working, localize included, with
/// exact values.
#[test]
fn under_dynamic_allocation_a_silent_peer_fails_exactly_the_operations_that_need_it() {
    for_each_seed(50, |seed| {
        // Keys 0-8, range homes: 0-2 at node 0, 3-5 at node 1, 6-8 at node 2.
        let cfg = SimConfig::new(3, 1, KeySpace::uniform(9, 1).unwrap())
            .with_seed(seed)
            .with_delay(10_000, 50_000)
            .with_think(0, 0)
            .with_dynamic(true)
            .with_liveness(Liveness {
                heartbeat_every: MS,
                silent_after: 4 * MS,
            });
        let mut sim = Sim::new(cfg);
        // Before the fault: every key holds 1; key 3 (home 1) moves to node 0, keys 1 (home 0)
        // and 4 (home 1) to node 2.
        sim.add_script(
            w(0),
            [
                Op::push((0..9).collect::<Vec<_>>(), vec![1.0; 9]),
                Op::localize(vec![3]),
                Op::Barrier,
            ],
        );
        sim.add_script(w(1), [Op::Barrier]);
        sim.add_script(w(2), [Op::localize(vec![1, 4]), Op::Barrier]);
        sim.run_until_idle().unwrap();
        let setup = sim.history().ops().len();
        assert!(
            sim.history().ops().iter().all(|op| op.succeeded()),
            "seed {seed}: the setup failed"
        );
        let frozen_at = sim.now().0;
        sim.freeze(NodeId(2));
        let gone = || Outcome::Failed(OpError::PeerGone { peer: NodeId(2) });
        let done = || Outcome::Done;
        let pulled = |v: &[f32]| Outcome::Pulled(v.to_vec());
        // Node 0: a pull of a key homed on node 2 waits for it until the timeout; then only
        // what needs node 2 fails.
        let w0 = [
            (Op::pull(vec![6]), gone()),
            (Op::pull(vec![0, 3, 5]), pulled(&[1.0, 1.0, 1.0])),
            (Op::localize(vec![5]), done()),
            (Op::pull(vec![5]), pulled(&[1.0])),
            (Op::localize(vec![4]), gone()),
            (Op::pull(vec![1]), gone()),
            (Op::push(vec![8], vec![1.0]), gone()),
            (Op::push(vec![2, 3], vec![1.0, 1.0]), done()),
            (Op::pull(vec![2, 3]), pulled(&[2.0, 2.0])),
            (Op::localize(vec![4]), gone()),
        ];
        // Node 1 starts after the timeout, so it knows of the loss (detected, or told by node
        // 0) before its first op.
        let w1 = [
            (Op::pull(vec![0]), pulled(&[1.0])),
            (Op::push(vec![0], vec![2.0]), done()),
            (Op::pull(vec![0]), pulled(&[3.0])),
            (Op::pull(vec![7]), gone()),
            (Op::pull(vec![4]), gone()),
            (Op::pull(vec![0, 4]), gone()),
            (Op::localize(vec![1]), gone()),
            (Op::localize(vec![0]), done()),
            (Op::pull(vec![0]), pulled(&[3.0])),
        ];
        sim.add_script(w(0), w0.iter().map(|(op, _)| op.clone()));
        sim.add_script(
            w(1),
            std::iter::once(Op::Sleep(8 * MS)).chain(w1.iter().map(|(op, _)| op.clone())),
        );
        sim.run_until_idle().unwrap();
        assert!(sim.unfinished_workers().is_empty(), "seed {seed}: hung");
        for (worker, expected) in [(w(0), &w0[..]), (w(1), &w1[..])] {
            let ops: Vec<_> = sim
                .history()
                .of_worker(worker)
                .filter(|op| op.id >= setup)
                .collect();
            assert_eq!(ops.len(), expected.len(), "seed {seed}");
            for (op, (_, want)) in ops.iter().zip(expected) {
                assert_eq!(&op.outcome, want, "seed {seed}: {op}");
            }
        }
        // Detected by the timeout: node 2's last frame is at most a heartbeat period older
        // than the freeze, and silence is checked as it becomes due.
        let failed_at = sim
            .history()
            .of_worker(w(0))
            .find(|op| op.id >= setup)
            .and_then(|op| op.ret)
            .unwrap()
            .time
            .0;
        assert!(
            (frozen_at + 3 * MS..=frozen_at + 4 * MS + 100_000).contains(&failed_at),
            "seed {seed}: frozen at {frozen_at} ns, the waiting pull failed at {failed_at} ns"
        );
        for node in [0, 1] {
            assert!(sim.node(NodeId(node)).is_lost(NodeId(2)), "seed {seed}");
            assert!(
                !sim.node(NodeId(node)).is_lost(NodeId(1 - node)),
                "seed {seed}: a live peer was suspected"
            );
            assert_eq!(sim.node(NodeId(node)).pending_ops(), 0, "seed {seed}");
        }
    });
}
