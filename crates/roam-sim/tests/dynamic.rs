//! Dynamic allocation (Lapse): keys relocate with `Op::Localize` while every worker pulls,
//! pushes and sets them. Random runs on small clusters with few keys, so relocations collide,
//! under every combination of location caches, fast local access and home partitioning; plus
//! scripted scenarios for the protocol's corner cases.
//!
//! Every run must be linearizable per key (so synchronous ops are sequentially consistent), end
//! with exact sums (no update lost or applied twice), complete every op, leave every key at
//! exactly one node recorded by its home, and raise no warning or anomaly.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use common::{DynShape, dynamic_case, finals, run_case, run_to_end, total};
use roam_core::wire::{self, Kind, Limits};
use roam_core::{Key, KeySpace, NodeId, Partitioning};
use roam_sim::{
    Consistency, Op, OpKind, Outcome, Sim, SimConfig, WorkerRef, check_final_sums_exact,
    check_linearizable, for_each_seed, seeds,
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

#[test]
fn random_dynamic_runs_are_linearizable_with_exact_sums() {
    let shape = DynShape {
        ops_per_phase: 10,
        ..DynShape::default()
    };
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
        t.reads_checked += sim
            .history()
            .ops()
            .iter()
            .filter(|op| op.kind == OpKind::Pull)
            .count();
    });
    eprintln!("{n} seeds in {:.1?}: {totals:#?}", started.elapsed());
    if n >= 100 {
        for ((caches, fast), t) in &totals {
            assert!(
                t.runs > 0 && t.relocations > 0,
                "caches {caches} fast {fast}: no relocation: {t:?}"
            );
            assert!(
                t.forwards > 0,
                "caches {caches} fast {fast}: no forwarding: {t:?}"
            );
            assert_eq!(
                t.cache_hits > 0,
                *caches,
                "caches {caches} fast {fast}: {t:?}"
            );
        }
        assert_eq!(
            totals.len(),
            4,
            "every combination of caches and fast local access ran"
        );
    }
}

/// The same under each home partitioning separately, with more ops per phase and thus more
/// collisions (fewer seeds).
#[test]
fn random_dynamic_runs_under_each_partitioning() {
    for partitioning in [Partitioning::Range, Partitioning::Hash] {
        let shape = DynShape {
            ops_per_phase: 25,
            partitioning: Some(partitioning),
            ..DynShape::default()
        };
        let mut relocations = 0;
        for_each_seed(default_seeds() / 20, |seed| {
            let (sim, _, _) = run_case(seed, shape);
            assert_eq!(sim.config().partitioning, partitioning);
            relocations += total(&sim, |c| &c.relocations_in);
        });
        assert!(relocations > 0);
    }
}

// ----- scripted scenarios ------------------------------------------------------------------

/// Every frame delivered, in order: (from, to, kind, keys).
type FrameLog = Rc<RefCell<Vec<(NodeId, NodeId, Kind, Vec<Key>)>>>;

/// Logs every delivered frame (read-only: the bytes are not changed).
fn log_frames(sim: &mut Sim) -> FrameLog {
    let log: FrameLog = Rc::default();
    let sink = log.clone();
    sim.set_tamper(move |from, to, bytes| {
        let (frame, _) =
            wire::decode(bytes, &Limits::default()).expect("the core sends valid frames");
        sink.borrow_mut()
            .push((from, to, frame.header.kind, frame.keys().to_vec()));
    });
    log
}

/// Kinds of the frames logged since `since`.
fn kinds_since(log: &FrameLog, since: usize) -> Vec<(u32, u32, Kind)> {
    log.borrow()[since..]
        .iter()
        .map(|(f, t, k, _)| (f.0, t.0, *k))
        .collect()
}

/// A dynamic cluster with fixed 10 µs delays, no pauses, one value per key, range partitioning.
fn scripted(nodes: u32, workers: u32, keys: u64) -> Sim {
    let cfg = SimConfig::new(nodes, workers, KeySpace::uniform(keys, 1).unwrap())
        .with_dynamic(true)
        .with_delay(10_000, 10_000)
        .with_think(0, 0);
    Sim::new(cfg)
}

fn w(node: u32, worker: u32) -> WorkerRef {
    WorkerRef::new(node, worker)
}

/// Runs until idle and checks the quiet-cluster invariants and the whole history.
fn settle_and_check(sim: &mut Sim) {
    sim.run_until_idle().unwrap();
    assert!(
        sim.unfinished_workers().is_empty(),
        "hung: {:?}",
        sim.unfinished_workers()
    );
    assert!(sim.warnings().is_empty(), "{:?}", sim.warnings());
    assert_eq!(total(sim, |c| &c.anomalies), 0);
    sim.check_quiescent_placement().unwrap();
    let finals = finals(sim);
    check_linearizable(
        sim.history(),
        Consistency::with_program_order(),
        Some(&finals),
    )
    .unwrap_or_else(|v| panic!("{v}"));
    check_final_sums_exact(sim.history(), &finals).unwrap();
}

fn counter(sim: &Sim, node: u32, c: impl Fn(&roam_core::stats::NodeCounters) -> &AtomicU64) -> u64 {
    c(sim.node(NodeId(node)).counters()).load(Relaxed)
}

/// The key's home is its owner: localize costs exactly two frames (`Localize` to the home,
/// `Transfer` back), and a second localize of the now local key costs none and completes at once.
#[test]
fn localize_from_the_home_owner_costs_two_frames_and_a_local_key_none() {
    let mut sim = scripted(2, 1, 4);
    let log = log_frames(&mut sim);
    sim.add_script(w(1, 0), [Op::localize(vec![0])]);
    sim.run_until_idle().unwrap();
    assert_eq!(
        kinds_since(&log, 0),
        [(1, 0, Kind::Localize), (0, 1, Kind::Transfer)]
    );
    assert_eq!(sim.holders(0), [NodeId(1)]);
    assert_eq!(sim.node(NodeId(0)).recorded_owner(0), Some(NodeId(1)));
    // Already local: the worker does not even involve its node.
    sim.add_script(w(1, 0), [Op::localize(vec![0]), Op::localize(vec![0, 3])]);
    let before = log.borrow().len();
    let ops_before = sim.history().ops().len();
    sim.run_until_idle().unwrap();
    let again = &sim.history().ops()[ops_before];
    assert_eq!(
        (again.outcome.clone(), again.ret.unwrap().time),
        (Outcome::Done, again.invoke.time)
    );
    // Key 3 is node 1's own home key: local too.
    assert_eq!(
        log.borrow().len(),
        before,
        "no frame for keys already local"
    );
    assert_eq!(
        counter(&sim, 1, |c| &c.localize_keys),
        1,
        "only the first localize reached the node"
    );
    settle_and_check(&mut sim);
}

/// The requester is the home: it records itself as owner and sends `HandOver` straight to the
/// owner, which answers with the `Transfer`: two frames, no `Localize`.
#[test]
fn requester_is_home_sends_hand_over_directly() {
    let mut sim = scripted(3, 1, 6);
    let log = log_frames(&mut sim);
    sim.add_script(w(0, 0), [Op::set(vec![0], vec![7.0])]);
    sim.add_script(w(2, 0), [Op::Sleep(1_000_000), Op::localize(vec![0])]);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.holders(0), [NodeId(2)]);
    let before = log.borrow().len();
    sim.add_script(
        w(0, 0),
        [
            Op::localize(vec![0]),
            Op::push(vec![0], vec![1.0]),
            Op::pull(vec![0]),
        ],
    );
    sim.run_until_idle().unwrap();
    assert_eq!(
        kinds_since(&log, before),
        [(0, 2, Kind::HandOver), (2, 0, Kind::Transfer)]
    );
    assert_eq!(sim.holders(0), [NodeId(0)]);
    assert_eq!(sim.node(NodeId(0)).recorded_owner(0), Some(NodeId(0)));
    assert_eq!(
        sim.history().ops().last().unwrap().outcome,
        Outcome::Pulled(vec![8.0])
    );
    settle_and_check(&mut sim);
}

/// A localize of a key already on its way costs no frame: a second worker of the same node
/// queues behind the first, and both complete when the key lands, with the ops queued in
/// between applied in order.
#[test]
fn localize_of_a_key_in_transit_is_free_and_completes_on_landing() {
    let mut sim = scripted(2, 2, 2);
    let log = log_frames(&mut sim);
    sim.add_script(
        w(1, 0),
        [
            Op::localize_async(vec![0]),
            Op::push_async(vec![0], vec![1.0]),
            Op::WaitAll,
        ],
    );
    sim.add_script(w(1, 1), [Op::localize(vec![0]), Op::pull(vec![0])]);
    sim.run_until_idle().unwrap();
    assert_eq!(
        kinds_since(&log, 0),
        [(1, 0, Kind::Localize), (0, 1, Kind::Transfer)],
        "one relocation only"
    );
    assert_eq!(
        counter(&sim, 1, |c| &c.localize_keys),
        2,
        "both localizes reached the node"
    );
    let history = sim.history();
    let first = history.of_worker(w(1, 0)).next().unwrap();
    let second = history.of_worker(w(1, 1)).next().unwrap();
    assert_eq!(
        (first.kind, second.kind),
        (OpKind::Localize, OpKind::Localize)
    );
    assert!(
        second.invoke < first.ret.unwrap(),
        "premise: the second began while the key was on its way"
    );
    assert_eq!(
        first.ret.unwrap().time,
        second.ret.unwrap().time,
        "both complete when the key lands"
    );
    assert_eq!(
        history.of_worker(w(1, 1)).last().unwrap().outcome,
        Outcome::Pulled(vec![1.0])
    );
    settle_and_check(&mut sim);
}

/// Chained relocation: the key moves A → B, and while it is on its way to B, C asks for it.
/// The home hands it over to B a second time; B notes C, applies what queued for it on
/// landing, and passes it on. Nothing is lost, and every queued op sees the value in order.
#[test]
fn chained_relocation_while_in_transit() {
    // Home H = node 0 (key 0), A = node 1, B = node 2, C = node 3.
    let mut sim = scripted(4, 1, 4);
    let log = log_frames(&mut sim);
    sim.add_script(w(0, 0), [Op::set(vec![0], vec![100.0])]);
    sim.add_script(w(1, 0), [Op::Sleep(1_000_000), Op::localize(vec![0])]);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.holders(0), [NodeId(1)], "A owns the key");
    // Hold A <-> B: the transfer to B will wait.
    sim.partition(NodeId(1), NodeId(2));
    sim.add_script(
        w(2, 0),
        [
            Op::localize_async(vec![0]),
            Op::push_async(vec![0], vec![1.0]),
            Op::pull_async(vec![0]),
        ],
    );
    sim.run_until_idle().unwrap();
    assert_eq!(sim.node(NodeId(0)).recorded_owner(0), Some(NodeId(2)));
    assert!(
        sim.holders(0).is_empty(),
        "the value is in flight from A to B"
    );
    assert_eq!(sim.node(NodeId(2)).keys_in_transit(), 1);
    // C asks while the key is still on its way to B; the home's own worker pushes too.
    sim.add_script(
        w(3, 0),
        [Op::localize_async(vec![0]), Op::pull_async(vec![0])],
    );
    sim.add_script(
        w(0, 0),
        [Op::Sleep(100_000), Op::push_async(vec![0], vec![2.0])],
    );
    sim.run_until_idle().unwrap();
    assert_eq!(sim.node(NodeId(0)).recorded_owner(0), Some(NodeId(3)));
    assert_eq!(sim.node(NodeId(3)).keys_in_transit(), 1);
    assert!(
        log.borrow()
            .iter()
            .any(|(f, t, k, _)| (f.0, t.0, *k) == (0, 2, Kind::HandOver)),
        "home hands over to B again"
    );
    assert_eq!(
        sim.unfinished_workers().len(),
        3,
        "B, C and the home's push wait for the key"
    );
    let before = log.borrow().len();
    sim.heal(NodeId(1), NodeId(2));
    sim.run_until_idle().unwrap();
    let after: Vec<_> = kinds_since(&log, before)
        .into_iter()
        .filter(|k| k.2 == Kind::Transfer)
        .collect();
    assert_eq!(
        after,
        [(1, 2, Kind::Transfer), (2, 3, Kind::Transfer)],
        "A to B, then straight on to C"
    );
    assert_eq!(sim.holders(0), [NodeId(3)]);
    assert_eq!(sim.peek(0), Some(vec![103.0]));
    // B's queue was applied before the key moved on: its pull saw its own push.
    let b_pull = sim.history().of_worker(w(2, 0)).last().unwrap();
    assert_eq!(b_pull.outcome, Outcome::Pulled(vec![101.0]));
    let c_pull = sim.history().of_worker(w(3, 0)).last().unwrap();
    assert!(
        matches!(&c_pull.outcome, Outcome::Pulled(v) if v[0] == 101.0 || v[0] == 103.0),
        "{c_pull}"
    );
    assert_eq!(
        (0..4)
            .map(|n| counter(&sim, n, |c| &c.relocations_in))
            .collect::<Vec<_>>(),
        [0, 1, 1, 1],
        "A once, B once (passed on), C once"
    );
    assert_eq!(
        (0..4)
            .map(|n| counter(&sim, n, |c| &c.relocations_out))
            .collect::<Vec<_>>(),
        [1, 1, 1, 0]
    );
    settle_and_check(&mut sim);
}

/// A batched pull whose keys live on three other nodes, one of them on its way to a fourth,
/// plus a local key: each holder answers its part straight to the requester (the in-transit
/// key once it lands), and the parts are assembled in the pull's key order.
#[test]
fn batched_pull_is_answered_in_parts_and_assembled_in_key_order() {
    // Range partitioning, 8 keys over 4 nodes: node n is home of keys 2n and 2n + 1.
    let mut sim = scripted(4, 1, 8);
    let log = log_frames(&mut sim);
    for n in 0..4 {
        let keys = vec![2 * u64::from(n), 2 * u64::from(n) + 1];
        sim.add_script(
            w(n, 0),
            [Op::set(
                keys.clone(),
                keys.iter().map(|&k| 10.0 + k as f32).collect::<Vec<_>>(),
            )],
        );
    }
    sim.add_script(w(1, 0), [Op::Sleep(1_000_000), Op::localize(vec![0])]);
    sim.run_until_idle().unwrap();
    // Key 0 (home 0) now at node 1; hold node 1 <-> 2 and let node 2 ask for it.
    sim.partition(NodeId(1), NodeId(2));
    sim.add_script(w(2, 0), [Op::localize_async(vec![0])]);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.node(NodeId(2)).keys_in_transit(), 1);
    let before = log.borrow().len();
    let keys = vec![5, 0, 2, 6, 1, 4];
    sim.add_script(w(3, 0), [Op::pull(keys.clone())]);
    sim.run_until_idle().unwrap();
    let replies = |since: usize| -> Vec<(u32, Vec<Key>)> {
        log.borrow()[since..]
            .iter()
            .filter(|(_, t, k, _)| t.0 == 3 && *k == Kind::PullReply)
            .map(|(f, _, _, keys)| (f.0, keys.clone()))
            .collect()
    };
    let mut early = replies(before);
    early.sort();
    assert_eq!(
        early,
        [(0, vec![1]), (1, vec![2]), (2, vec![5, 4])],
        "three nodes answer their parts"
    );
    assert_eq!(
        sim.unfinished_workers(),
        [w(2, 0), w(3, 0)],
        "key 0 is still in transit"
    );
    let landed = log.borrow().len();
    sim.heal(NodeId(1), NodeId(2));
    sim.run_until_idle().unwrap();
    assert_eq!(
        replies(landed),
        [(2, vec![0])],
        "the last part once key 0 landed at node 2"
    );
    let pull = sim.history().of_worker(w(3, 0)).last().unwrap();
    assert_eq!(
        pull.outcome,
        Outcome::Pulled(keys.iter().map(|&k| 10.0 + k as f32).collect())
    );
    assert_eq!(
        counter(&sim, 0, |c| &c.forwards),
        1,
        "the home forwarded key 0 to its new owner"
    );
    settle_and_check(&mut sim);
}

/// Faults under dynamic allocation: a connection breaks or a node crashes at a random point of a
/// random run. A loss fails every remote access in flight (a request may have been forwarded to
/// the lost node) and later the accesses that need it (`peer_loss.rs`), so nothing may hang;
/// every failure is `PeerGone`; the history stays
/// linearizable; and every key still held somewhere ends with its last set plus all successful
/// pushes after it plus only some of those that failed with `PeerGone` (never a lost success or
/// a double application). Keys that were on a crashed node or in a transfer cut by the break
/// may vanish.
#[test]
fn random_faults_under_dynamic_allocation_lose_only_failed_pushes() {
    let shape = DynShape {
        ops_per_phase: 10,
        ..DynShape::default()
    };
    let mut verdicts: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut anomalies, mut warnings) = (0, Vec::new());
    for_each_seed(default_seeds() / 10, |seed| {
        let case = dynamic_case(seed, shape);
        let nodes = case.cfg.nodes;
        let mut sim = Sim::new(case.cfg);
        for (w, script) in case.scripts {
            sim.add_script(w, script);
        }
        let mut rng = common::test_rng(seed ^ 0xfa);
        sim.run_steps(rand::Rng::random_range(&mut rng, 0..400));
        let a = NodeId(rand::Rng::random_range(&mut rng, 0..nodes));
        if rand::Rng::random_bool(&mut rng, 0.5) {
            sim.crash(a);
        } else {
            let b = NodeId((a.0 + 1 + rand::Rng::random_range(&mut rng, 0..nodes - 1)) % nodes);
            sim.drop_link(a, b);
        }
        run_to_end(seed, &mut sim);
        let history = sim.history();
        for op in common::surviving_ops(&sim) {
            assert!(op.ret.is_some(), "seed {seed}: {op}");
            if let Some(err) = op.error() {
                assert!(
                    matches!(err, roam_core::OpError::PeerGone { .. }),
                    "seed {seed}: {op}"
                );
            }
        }
        anomalies += total(&sim, |c| &c.anomalies);
        warnings.extend(sim.warnings().iter().take(1).map(|w| w.message.clone()));
        let finals = finals(&sim);
        check_linearizable(history, Consistency::linearizable(), Some(&finals))
            .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        for v in roam_sim::final_sums(history, &finals) {
            let name = match v.verdict {
                roam_sim::FinalVerdict::Exact => "exact",
                roam_sim::FinalVerdict::WithinLosses { .. } => "within losses",
                roam_sim::FinalVerdict::Ambiguous(_) => "ambiguous",
                roam_sim::FinalVerdict::Vanished => "vanished",
                roam_sim::FinalVerdict::Wrong(w) => panic!("seed {seed}: key {}: {w}", v.key),
            };
            *verdicts.entry(name).or_default() += 1;
        }
    });
    eprintln!("final values under faults: {verdicts:?}");
    // Late answers to ops already failed when a loss became known count as anomalies at the
    // requester (the answering node was only reported lost, or answered for another key).
    eprintln!(
        "anomalies under faults: {anomalies}; e.g. {:?}",
        warnings.iter().take(3).collect::<Vec<_>>()
    );
}
