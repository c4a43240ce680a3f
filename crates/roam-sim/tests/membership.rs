//! Members joining and leaving while workers pull, push and localize (`membership.rs` of the
//! core): a server joins and takes its share of buckets, a node whose workers finished drains
//! and exits, and every key ends where its home records it, once, with its exact sum.

mod common;

use common::*;
use rand::Rng;
use rand::seq::SliceRandom;
use roam_core::{MembershipEvent, NodeId, Partitioning};
use roam_sim::{
    Consistency, Op, Outcome, Sim, SimConfig, WorkerRef, check_final_sums_exact,
    check_linearizable, for_each_seed,
};

/// Seeds per test (a third each of a debug or release CI budget); `ROAM_SIM_SEEDS` for more.
fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 150 } else { 1_500 }
}

/// Which nodes a case drains (node 3 is the joiner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drained {
    /// Node 3 joins; node 1 (of the initial cluster) drains once its workers finished.
    Original,
    /// Node 3 joins, takes buckets, then drains again.
    Joiner,
    /// Node 3 joins; then node 1 drains, then node 3.
    Both,
    /// Node 3 joins; node 1's last running worker asks for its own node's drain.
    Itself,
}

struct Case {
    sim: Sim,
    expected: Vec<Vec<f32>>,
    drained: Vec<NodeId>,
}

/// Three nodes of two workers and a joiner; random increments (and localizes, when keys move)
/// with node 1's workers and worker (0, 1) finishing early.
fn run_case(seed: u64, plan: Drained) -> Case {
    let mut rng = test_rng(seed);
    let space = random_space(&mut rng, 24);
    let dynamic = rng.random_bool(0.5);
    let partitioning = if rng.random_bool(0.5) {
        Partitioning::Range
    } else {
        Partitioning::Hash
    };
    let cfg = SimConfig::new(4, 2, space.clone())
        .with_seed(seed)
        .with_joiners(1)
        .with_dynamic(dynamic)
        .with_location_caches(dynamic && rng.random_bool(0.5))
        .with_partitioning(partitioning);
    let workers: Vec<WorkerRef> = (0..3)
        .flat_map(|n| (0..2).map(move |w| WorkerRef::new(n, w)))
        .collect();
    let mut inc = random_increments(&mut rng, &space, &workers, 30, 3);
    let keys = all_keys(&space);
    for (w, script) in &mut inc.scripts {
        if w.node == NodeId(1) || *w == WorkerRef::new(0, 1) {
            script.truncate(8);
        }
        for _ in 0..4 {
            // Reads while homes and keys move (with location caches, they teach locations).
            let at = rng.random_range(0..=script.len());
            let mut some = keys.clone();
            some.shuffle(&mut rng);
            some.truncate(3);
            script.insert(at, Op::pull_async(some));
        }
        if dynamic {
            for _ in 0..4 {
                let at = rng.random_range(0..=script.len());
                let mut some = keys.clone();
                some.shuffle(&mut rng);
                some.truncate(3);
                script.insert(at, Op::localize_async(some));
            }
        }
        script.push(Op::WaitAll);
        if plan == Drained::Itself && *w == WorkerRef::new(1, 0) {
            script.push(Op::Retire);
        }
    }
    // Recompute the expectation from the truncated scripts.
    let mut expected: Vec<Vec<f32>> = keys.iter().map(|&k| vec![0.0; space.len(k)]).collect();
    for (_, script) in &inc.scripts {
        for op in script {
            if let Op::Push { keys, vals, .. } = op {
                let mut at = 0;
                for &k in keys {
                    for v in &mut expected[k as usize] {
                        *v += vals[at];
                        at += 1;
                    }
                }
            }
        }
    }
    let mut sim = Sim::new(cfg);
    for (w, script) in inc.scripts {
        sim.add_script(w, script);
    }
    let join_at = rng.random_range(0..400);
    let drained = match plan {
        Drained::Original => vec![NodeId(1)],
        Drained::Joiner => vec![NodeId(3)],
        Drained::Both => vec![NodeId(1), NodeId(3)],
        Drained::Itself => vec![NodeId(1)],
    };
    let asker = if plan == Drained::Itself {
        WorkerRef::new(1, 1)
    } else {
        WorkerRef::new(0, 1)
    };
    let mut step = 0u64;
    let mut joined = false;
    let mut next_drain = 0;
    loop {
        let mut acted = false;
        if !joined && step >= join_at {
            sim.start_join(NodeId(3));
            joined = true;
            acted = true;
        }
        let admitted = sim
            .membership_events()
            .iter()
            .any(|&(_, n, e)| n == NodeId(3) && e == MembershipEvent::Admitted);
        let node1_done = !sim
            .unfinished_workers()
            .iter()
            .any(|w| w.node == NodeId(1) || *w == WorkerRef::new(0, 1));
        let previous_left = next_drain == 0 || sim.has_exited(drained[next_drain - 1]);
        if next_drain < drained.len() && admitted && node1_done && previous_left {
            sim.add_script(asker, [Op::drain(drained[next_drain].0), Op::WaitAll]);
            next_drain += 1;
            acted = true;
        }
        if sim.step() {
            step += 1;
            if step > 1_000_000 {
                break;
            }
        } else if !joined {
            step = join_at;
        } else if !acted {
            // Idle, and nothing more to ask for: the checks say what is missing.
            break;
        }
    }
    run_to_end(seed, &mut sim);
    // The survivors read everything after a barrier of the nodes that host workers.
    let survivors: Vec<WorkerRef> = workers
        .iter()
        .copied()
        .filter(|w| !drained.contains(&w.node))
        .collect();
    for &w in &survivors {
        sim.add_script(w, [Op::Barrier, Op::pull(keys.clone())]);
    }
    run_to_end(seed, &mut sim);
    Case {
        sim,
        expected,
        drained,
    }
}

fn check(seed: u64, case: &Case) {
    let sim = &case.sim;
    for op in sim.history().ops() {
        assert!(op.succeeded(), "seed {seed}: op failed: {op}");
    }
    assert!(
        sim.warnings().is_empty(),
        "seed {seed}: warnings: {:?}",
        sim.warnings()
    );
    assert_eq!(total(sim, |c| &c.anomalies), 0, "seed {seed}");
    for &node in &case.drained {
        assert!(sim.has_exited(node), "seed {seed}: {node} did not exit");
        assert!(
            sim.membership_events()
                .iter()
                .any(|&(_, n, e)| n == node && e == MembershipEvent::Drained),
            "seed {seed}: {node} was not drained"
        );
    }
    let coordinator = sim.node(NodeId(0)).directory();
    for &node in &case.drained {
        assert!(
            !coordinator.is_member(node),
            "seed {seed}: {node} still a member"
        );
    }
    // Joins and drains spread the buckets evenly: each member within one of its share.
    let members = coordinator.members().to_vec();
    let buckets = coordinator.num_buckets() as usize;
    for &m in &members {
        let held = coordinator.buckets_of(m).count();
        let share = buckets / members.len();
        assert!(
            held + 1 >= share && held <= share + members.len(),
            "seed {seed}: {m} holds {held} of {buckets} buckets ({} members)",
            members.len()
        );
    }
    sim.check_quiescent_placement()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(
        total(sim, |c| &c.relocations_in),
        total(sim, |c| &c.relocations_out),
        "seed {seed}: every key that left a node arrived somewhere"
    );
    let finals = finals(sim);
    for (key, want) in case.expected.iter().enumerate() {
        assert_eq!(finals[key].as_ref(), Some(want), "seed {seed}: key {key}");
    }
    check_final_sums_exact(sim.history(), &finals).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let want = concat(&case.expected, &all_keys(&sim.config().space));
    for w in sim.workers() {
        if case.drained.contains(&w.node) {
            continue;
        }
        let last = sim.history().of_worker(w).last().unwrap();
        assert_eq!(
            last.outcome,
            Outcome::Pulled(want.clone()),
            "seed {seed}: {w}"
        );
    }
    check_linearizable(sim.history(), Consistency::linearizable(), Some(&finals))
        .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
}

#[test]
fn a_joining_server_and_a_draining_node_keep_every_update() {
    for_each_seed(default_seeds() / 3, |seed| {
        let case = run_case(seed, Drained::Original);
        check(seed, &case);
    });
}

#[test]
fn a_joined_server_drains_again_and_the_keys_it_took_come_back() {
    for_each_seed(default_seeds() / 3, |seed| {
        let case = run_case(seed, Drained::Joiner);
        check(seed, &case);
    });
}

#[test]
fn two_drains_in_a_row_leave_two_nodes_that_hold_everything() {
    for_each_seed(default_seeds() / 3, |seed| {
        let case = run_case(seed, Drained::Both);
        check(seed, &case);
        let sim = &case.sim;
        let held: u64 = [0, 2]
            .iter()
            .map(|&n| sim.node(NodeId(n)).store().count_local())
            .sum();
        assert_eq!(held, sim.config().space.num_keys(), "seed {seed}");
    });
}

#[test]
fn the_coordinator_and_non_members_cannot_be_drained() {
    let cfg = SimConfig::new(3, 1, roam_core::KeySpace::uniform(8, 1).unwrap()).with_seed(1);
    let mut sim = Sim::new(cfg);
    sim.add_script(
        WorkerRef::new(1, 0),
        [Op::drain(0), Op::drain(7), Op::drain(2)],
    );
    run_to_end(1, &mut sim);
    let ops: Vec<_> = sim.history().of_worker(WorkerRef::new(1, 0)).collect();
    let reason = |i: usize| match &ops[i].outcome {
        Outcome::Failed(e) => e.to_string(),
        other => panic!("drain {i} did not fail: {other:?}"),
    };
    assert!(
        reason(0).contains("node 0 cannot be drained: it is the coordinator"),
        "{}",
        reason(0)
    );
    assert!(
        reason(1).contains("node 7 cannot be drained: it is no member"),
        "{}",
        reason(1)
    );
    assert!(ops[2].succeeded(), "{}", ops[2]);
    assert!(sim.has_exited(NodeId(2)));
    // Node 2's keys went to nodes 0 and 1.
    for key in 0..8 {
        assert_eq!(sim.holders(key).len(), 1, "key {key}");
    }
}

#[test]
fn a_node_drains_itself_once_its_other_workers_retired() {
    for_each_seed(default_seeds() / 3, |seed| {
        let case = run_case(seed, Drained::Itself);
        check(seed, &case);
    });
}

#[test]
fn a_leaving_node_does_not_mistake_a_slow_acknowledgement_for_a_lost_peer() {
    // With liveness on, node 3 waits for its last acknowledgement while the link from node 2
    // is held past the silence timeout: it must not declare anyone lost (every member
    // stopped timing it), and the survivors' reads succeed.
    use roam_core::{KeySpace, Liveness};
    const MS: u64 = 1_000_000;
    let cfg = SimConfig::new(4, 1, KeySpace::uniform(8, 1).unwrap())
        .with_seed(5)
        .with_delay(10_000, 50_000)
        .with_think(0, 0)
        .with_liveness(Liveness {
            heartbeat_every: MS,
            silent_after: 4 * MS,
        });
    let mut sim = Sim::new(cfg);
    let all: Vec<u64> = (0..8).collect();
    sim.add_script(WorkerRef::new(0, 0), [Op::drain(3)]);
    for n in [1, 2] {
        sim.add_script(
            WorkerRef::new(n, 0),
            [Op::Sleep(30 * MS), Op::pull(all.clone())],
        );
    }
    let mut partitioned = false;
    while sim.now().0 <= 12 * MS {
        let left = sim
            .membership_events()
            .iter()
            .any(|&(_, n, e)| n == NodeId(0) && e == MembershipEvent::Left(NodeId(3)));
        if left && !partitioned {
            sim.partition(NodeId(2), NodeId(3));
            partitioned = true;
        }
        if !sim.step() {
            break;
        }
    }
    assert!(partitioned, "node 3 never left");
    sim.heal(NodeId(2), NodeId(3));
    run_to_end(5, &mut sim);
    assert!(sim.has_exited(NodeId(3)));
    for n in 0..3 {
        for p in 0..3 {
            assert!(
                !sim.node(NodeId(n)).is_lost(NodeId(p)),
                "node {n} thinks node {p} is lost"
            );
        }
    }
    for op in sim.history().ops() {
        assert!(op.succeeded(), "{op}");
    }
    assert!(sim.warnings().is_empty(), "{:?}", sim.warnings());
}

#[test]
fn a_join_held_longer_than_the_silence_timeout_is_admitted() {
    // Four servers join a 3-node cluster at once under failure detection, on links of 0.5–1 ms
    // a frame: the coordinator admits one at a time, so the last joins wait behind the
    // others' admissions longer than the 4 ms silence timeout. A joiner gives up on a
    // coordinator it has not heard from for that long; the coordinator's heartbeats to the
    // joins it holds must keep them waiting, and every one is admitted.
    use roam_core::{KeySpace, Liveness};
    const MS: u64 = 1_000_000;
    const JOINERS: u32 = 4;
    for seed in 0..10 {
        // 7 nodes, the last 4 outside the cluster until they join.
        let cfg = SimConfig::new(3 + JOINERS, 1, KeySpace::uniform(64, 1).unwrap())
            .with_seed(seed)
            .with_joiners(JOINERS)
            .with_delay(MS / 2, MS)
            .with_think(0, 0)
            .with_liveness(Liveness {
                heartbeat_every: MS / 2,
                silent_after: 4 * MS,
            });
        let mut sim = Sim::new(cfg);
        // Timers run while a worker has work left: one sleeps through the joins, then reads.
        sim.add_script(
            WorkerRef::new(1, 0),
            [Op::Sleep(40 * MS), Op::pull((0..64).collect::<Vec<u64>>())],
        );
        for j in 0..JOINERS {
            sim.start_join(NodeId(3 + j));
        }
        run_to_end(seed, &mut sim);
        let mut last = 0;
        for j in 0..JOINERS {
            let joiner = NodeId(3 + j);
            let outcome = sim
                .membership_events()
                .iter()
                .filter(|&&(_, n, _)| n == joiner)
                .find_map(|&(at, _, e)| match e {
                    MembershipEvent::Admitted => Some(Ok(at)),
                    MembershipEvent::Refused(why) => Some(Err(why)),
                    _ => None,
                });
            let Some(Ok(at)) = outcome else {
                panic!("seed {seed}: joiner {joiner} must be admitted: {outcome:?}");
            };
            last = last.max(at.0);
        }
        eprintln!(
            "seed {seed}: the last join admitted at {:.1} ms",
            last as f64 / 1e6
        );
        assert!(
            last > 4 * MS,
            "seed {seed}: a join must have waited past the silence timeout"
        );
        for n in 0..3 + JOINERS {
            for p in 0..3 + JOINERS {
                assert!(
                    !sim.node(NodeId(n)).is_lost(NodeId(p)),
                    "seed {seed}: node {n} thinks node {p} is lost"
                );
            }
        }
    }
}

/// Two servers ask to join at once and one of them crashes right after its `Join` went out:
/// whichever join the coordinator holds behind the other's admission belongs to a node that is
/// gone. The coordinator drops a held join when the joiner's connection ends (it used to admit
/// it later and move buckets, under static allocation with their keys, to a node that was not
/// there: the moves never finished). Every worker finishes, the live joiner is admitted unless
/// the dead one was admitted first (a member's loss), and every key reads its exact sum.
#[test]
fn a_held_join_whose_joiner_crashed_is_dropped() {
    const KEYS: u64 = 64;
    let mut dropped = 0;
    for_each_seed(40, |seed| {
        let cfg = SimConfig::new(5, 1, roam_core::KeySpace::uniform(KEYS, 1).unwrap())
            .with_seed(seed)
            .with_joiners(2);
        let mut sim = Sim::new(cfg);
        let keys: Vec<u64> = (0..KEYS).collect();
        // Increments before, during and after the joins, then one read of everything.
        for n in 0..3 {
            let mut script = vec![Op::push(keys.clone(), vec![1.0; KEYS as usize])];
            script.push(Op::Sleep(2_000_000));
            script.push(Op::push(keys.clone(), vec![1.0; KEYS as usize]));
            sim.add_script(WorkerRef::new(n, 0), script);
        }
        sim.start_join(NodeId(3));
        sim.start_join(NodeId(4));
        sim.crash(NodeId(4));
        run_to_end(seed, &mut sim);
        sim.add_script(WorkerRef::new(1, 0), [Op::pull(keys.clone())]);
        run_to_end(seed, &mut sim);
        let coordinator = sim.node(NodeId(0));
        let events = sim.membership_events();
        let was_dropped = events
            .iter()
            .any(|&(_, n, e)| n == NodeId(0) && e == MembershipEvent::JoinDropped(NodeId(4)));
        if coordinator.is_lost(NodeId(4)) {
            // Admitted before its connection's end arrived: a member lost, keys may be gone.
            assert!(!was_dropped, "seed {seed}: {events:?}");
            return;
        }
        assert!(
            !coordinator.directory().is_member(NodeId(4)),
            "seed {seed}: a node that is gone became a member: {events:?}"
        );
        let admitted = events
            .iter()
            .any(|&(_, n, e)| n == NodeId(3) && e == MembershipEvent::Admitted);
        assert!(admitted, "seed {seed}: node 3 was not admitted: {events:?}");
        dropped += usize::from(was_dropped);
        let read = sim
            .history()
            .of_worker(WorkerRef::new(1, 0))
            .last()
            .unwrap();
        assert_eq!(
            read.outcome,
            Outcome::Pulled(vec![6.0; KEYS as usize]),
            "seed {seed}: {read}"
        );
    });
    assert!(dropped > 0, "no seed held node 4's join behind node 3's");
}

/// The coordinator crashes while a server waits for its welcome: the joiner's connection to it
/// ends, and the join is refused at once (`CoordinatorGone`), without failure detection (it
/// used to wait for a welcome that could not come, or, under failure detection, for the
/// silence timeout).
#[test]
fn a_joiner_whose_coordinator_crashed_gives_up_at_once() {
    for_each_seed(20, |seed| {
        let cfg = SimConfig::new(4, 1, roam_core::KeySpace::uniform(16, 1).unwrap())
            .with_seed(seed)
            .with_joiners(1);
        let mut sim = Sim::new(cfg);
        sim.start_join(NodeId(3));
        sim.crash(NodeId(0));
        sim.run_until_idle().unwrap();
        let ended: Vec<MembershipEvent> = (sim.membership_events().iter())
            .filter(|&&(_, n, _)| n == NodeId(3))
            .map(|&(_, _, e)| e)
            .collect();
        assert_eq!(
            ended,
            [MembershipEvent::Refused(
                roam_core::JoinRefusal::CoordinatorGone {
                    coordinator: NodeId(0)
                }
            )],
            "seed {seed}"
        );
    });
}
