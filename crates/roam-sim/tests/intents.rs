//! Intent signaling (AdaPM, issue #15) in the simulator: intents and clock ticks mixed into
//! random dynamic-allocation runs (with localizes, pulls, pushes and sets colliding on few
//! keys) must keep every guarantee of those runs — per-key linearizability, exact final sums,
//! every key at one node — and every intent is acted on exactly once by the time the clock
//! passes its start; scripted runs check what intents are for: keys signalled far
//! enough ahead are here when the worker's clock reaches their start.

mod common;

use std::sync::atomic::Ordering::Relaxed;

use common::{DynShape, run_case, run_fault_free, total};
use roam_core::{IntentTiming, Key, KeySpace, NodeId, Partitioning};
use roam_sim::{Op, SimConfig, WorkerRef, for_each_seed, seeds};

/// About two thousand seeds in a release build (CI), fewer in a debug build; `ROAM_SIM_SEEDS`
/// / `ROAM_SIM_SEED` override (see `roam_sim::seed`).
fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 2_000 }
}

#[derive(Debug, Default)]
struct Totals {
    runs: u64,
    intents: u64,
    intent_actions: u64,
    late: u64,
    relocations: u64,
}

#[test]
fn random_runs_with_intents_are_linearizable_with_exact_sums() {
    let shape = DynShape {
        ops_per_phase: 12,
        intents: true,
        ..DynShape::default()
    };
    let n = seeds(default_seeds()).len();
    let mut by_timing = std::collections::BTreeMap::<String, Totals>::new();
    for_each_seed(default_seeds(), |seed| {
        let (sim, _, _) = run_case(seed, shape);
        let t = by_timing
            .entry(format!("{:?}", sim.config().intent_timing))
            .or_default();
        t.runs += 1;
        for w in sim.workers() {
            let c = sim.worker_counters(w);
            assert_eq!(
                c.intents_acted.load(Relaxed),
                c.intents.load(Relaxed),
                "seed {seed}: {w}: every intent acted on once its start was past"
            );
            t.intents += c.intents.load(Relaxed);
            t.intent_actions += c.intent_actions.load(Relaxed);
            t.late += c.late_intents.load(Relaxed);
        }
        t.relocations += total(&sim, |c| &c.relocations_in);
    });
    eprintln!("{n} seeds: {by_timing:#?}");
    if n >= 100 {
        for (timing, t) in &by_timing {
            assert!(
                t.intents > 0 && t.intent_actions > 0 && t.relocations > 0,
                "{timing}: intents never acted on: {t:?}"
            );
        }
        assert_eq!(by_timing.len(), 2, "both timings drawn: {by_timing:?}");
    }
}

/// Node 0's worker signals, `ahead` clocks early, one key homed on node 1 per clock, then at
/// each clock pushes that key; node 1's worker only pulls unrelated keys. Returns the sim.
fn ahead_run(seed: u64, timing: IntentTiming, ahead: u64, clocks: u64) -> roam_sim::Sim {
    let num_keys = 2 * clocks;
    let space = KeySpace::uniform(num_keys, 2).unwrap();
    let cfg = SimConfig::new(2, 1, space)
        .with_seed(seed)
        .with_partitioning(Partitioning::Range)
        .with_dynamic(true)
        .with_intent_timing(timing)
        .with_delay(20_000, 60_000)
        .with_think(2_000, 4_000);
    // Range homes: keys clocks..2·clocks are homed on node 1.
    let wanted = |c: u64| -> Key { clocks + c };
    let mut script = Vec::new();
    for c in 0..ahead.min(clocks) {
        script.push(Op::intent(vec![wanted(c)], c));
    }
    for c in 0..clocks {
        if c + ahead < clocks {
            script.push(Op::intent(vec![wanted(c + ahead)], c + ahead));
        }
        script.push(Op::push_async(vec![wanted(c)], vec![1.0, 2.0]));
        script.push(Op::AdvanceClock);
    }
    script.push(Op::WaitAll);
    script.push(Op::Barrier);
    let other = (0..clocks)
        .map(|c| Op::pull(vec![c % clocks]))
        .chain([Op::WaitAll, Op::Barrier]);
    let scripts = vec![
        (WorkerRef::new(0, 0), script),
        (WorkerRef::new(1, 0), other.collect()),
    ];
    let sim = run_fault_free(seed, cfg, scripts);
    for c in 0..clocks {
        assert_eq!(
            sim.peek(wanted(c)),
            Some(vec![1.0, 2.0]),
            "seed {seed}: key {} pushed once",
            wanted(c)
        );
        assert_eq!(
            sim.holders(wanted(c)),
            vec![NodeId(0)],
            "seed {seed}: key {} moved to the node that signalled it",
            wanted(c)
        );
    }
    sim
}

#[test]
fn keys_signalled_far_enough_ahead_are_here_at_their_start_clock() {
    for seed in seeds(20) {
        let sim = ahead_run(seed, IntentTiming::Timed, 400, 600);
        let c = sim.worker_counters(WorkerRef::new(0, 0));
        assert_eq!(c.intents.load(Relaxed), 600, "seed {seed}");
        assert_eq!(c.intent_actions.load(Relaxed), 600, "seed {seed}");
        // Only the intent for clock 0 is late: it is signalled when the clock already is at
        // its start, with its key on node 1. The others are signalled 400 clocks ahead.
        assert_eq!(
            c.late_intents.load(Relaxed),
            1,
            "seed {seed}: an intent signalled 400 clocks ahead was late"
        );
        // Acted on shortly before the start, not when signalled: the push of each clock found
        // its key here, so no push went by message.
        assert_eq!(
            sim.node(NodeId(0))
                .counters()
                .remote_push_keys
                .load(Relaxed),
            0,
            "seed {seed}"
        );
    }
}

#[test]
fn intents_signalled_too_late_are_counted_late() {
    // One clock ahead is less than one relocation takes here (a round trip of 40–120 µs against
    // 4–8 µs per clock): most intents are late, and their keys still end up here.
    let sim = ahead_run(7, IntentTiming::Timed, 1, 300);
    let c = sim.worker_counters(WorkerRef::new(0, 0));
    let (intents, late) = (c.intents.load(Relaxed), c.late_intents.load(Relaxed));
    assert_eq!(intents, 300);
    assert!(late > intents / 2, "{late} of {intents} late");
}

#[test]
fn timed_intents_act_shortly_before_their_start_and_immediate_ones_at_once() {
    // Intents 5000 clocks ahead of a 300-clock run: timed, none is due before the run ends and
    // no key moves; immediate, every one moves at once.
    for (timing, moved) in [(IntentTiming::Timed, 0), (IntentTiming::Immediate, 10)] {
        let space = KeySpace::uniform(20, 1).unwrap();
        let cfg = SimConfig::new(2, 1, space)
            .with_seed(3)
            .with_dynamic(true)
            .with_intent_timing(timing);
        let mut script: Vec<Op> = (10..20).map(|k| Op::intent(vec![k], 5_000)).collect();
        script.extend((0..300).map(|_| Op::AdvanceClock));
        script.extend([Op::WaitAll, Op::Barrier]);
        let sim = run_fault_free(
            3,
            cfg,
            vec![
                (WorkerRef::new(0, 0), script),
                (WorkerRef::new(1, 0), vec![Op::Barrier]),
            ],
        );
        let c = sim.worker_counters(WorkerRef::new(0, 0));
        assert_eq!(c.intents.load(Relaxed), 10, "{timing:?}");
        assert_eq!(c.intent_actions.load(Relaxed), moved, "{timing:?}");
        assert_eq!(
            total(&sim, |c| &c.relocations_in),
            moved,
            "{timing:?}: keys moved"
        );
    }
}
