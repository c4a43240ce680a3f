//! Workload generators and expectations shared by the simulator's integration tests.
//!
//! Expected values are computed here from the scripts alone, never from the simulator or the
//! core, so a test compares two independent derivations. Values are small integers so that
//! `f32` sums are exact whatever the order of application.

#![allow(dead_code)] // each test binary uses a different subset

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam_core::{Key, KeySpace, NodeId};
use roam_sim::{
    Consistency, Op, Outcome, Sim, SimConfig, WorkerRef, check_final_sums_exact, check_linearizable,
};

/// `nodes` nodes of one worker and as many one-float keys, homed by range (key `k` at node
/// `k`), keys moved by intent (all techniques, share-sync rounds 100 µs apart), 1 µs message
/// delays and no think time: the scripted intent scenarios.
pub(crate) fn scripted_intents_cfg(nodes: u32, seed: u64) -> SimConfig {
    SimConfig::new(nodes, 1, KeySpace::uniform(u64::from(nodes), 1).unwrap())
        .with_seed(seed)
        .with_partitioning(roam_core::Partitioning::Range)
        .with_dynamic(true)
        .with_intent_techniques(roam_core::IntentTechniques::All, 100_000)
        .with_delay(1_000, 1_000)
        .with_think(0, 0)
}

/// One clock of a worker that is 10 µs a clock: a sleep, then a tick.
pub(crate) fn tick_10us(script: &mut Vec<Op>) {
    script.extend([Op::Sleep(10_000), Op::AdvanceClock]);
}

/// A worker of `clocks` clocks of 10 µs that, from clock `from` on, uses `key` one clock at a
/// time: an intent for the next clock, the tick, a push of 1.
pub(crate) fn one_clock_uses(key: Key, from: u64, clocks: u64) -> Vec<Op> {
    let mut script = Vec::new();
    for clock in 0..clocks {
        let using = clock >= from;
        if using {
            script.push(Op::Intent {
                keys: vec![key],
                start: clock + 1,
                end: clock + 2,
            });
        }
        tick_10us(&mut script);
        if using {
            script.push(Op::push(vec![key], vec![1.0]));
        }
    }
    script
}

/// The RNG a test uses to generate its workload: separate from the simulator's, so the
/// workload does not change when the simulator draws a different number of values.
pub(crate) fn test_rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ 0x7e57_5eed_0000_0000)
}

/// `num_keys` keys of 1 to 3 values each.
pub(crate) fn random_space(rng: &mut ChaCha8Rng, num_keys: usize) -> KeySpace {
    KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=3)).collect()).unwrap()
}

/// Range or hash home partitioning, with even odds.
pub(crate) fn random_partitioning(rng: &mut impl Rng) -> roam_core::Partitioning {
    if rng.random_bool(0.5) {
        roam_core::Partitioning::Range
    } else {
        roam_core::Partitioning::Hash
    }
}

/// Message delay bounds in ns: a minimum up to 2 µs and a maximum up to 80 µs above it.
pub(crate) fn random_delays(rng: &mut impl Rng) -> (u64, u64) {
    let min_delay = rng.random_range(0..=2_000);
    (min_delay, min_delay + rng.random_range(1..=80_000))
}

/// 1 to 3 distinct random keys of `0..num_keys` (all of them when there are fewer), in
/// random order: the key batch of one random operation.
pub(crate) fn random_keys(rng: &mut impl Rng, num_keys: Key) -> Vec<Key> {
    let n = rng.random_range(1..=num_keys.min(3) as usize);
    rand::seq::index::sample(rng, num_keys as usize, n)
        .into_iter()
        .map(|k| k as Key)
        .collect()
}

/// A push of small integer values (1 to 4, so `f32` sums stay exact) to `keys`, its values
/// also added into `sums`, the keys' expected totals.
pub(crate) fn counted_push(
    rng: &mut impl Rng,
    space: &KeySpace,
    keys: Vec<Key>,
    wait: bool,
    sums: &mut [Vec<f32>],
) -> Op {
    let len: usize = keys.iter().map(|&k| space.len(k)).sum();
    let vals: Vec<f32> = (0..len)
        .map(|_| f32::from(rng.random_range(1u8..=4)))
        .collect();
    let mut at = 0;
    for &k in &keys {
        for slot in &mut sums[k as usize] {
            *slot += vals[at];
            at += 1;
        }
    }
    Op::Push { keys, vals, wait }
}

/// All keys of the space, in order.
pub(crate) fn all_keys(space: &KeySpace) -> Vec<Key> {
    (0..space.num_keys()).collect()
}

/// The home node of `key` under the simulation's initial placement.
pub(crate) fn home_of(sim: &Sim, key: Key) -> NodeId {
    sim.node(NodeId(0)).directory().home(key)
}

/// Scripts for every worker and the values every key must end with once all have run.
pub(crate) struct Increments {
    /// One script per worker.
    pub(crate) scripts: Vec<(WorkerRef, Vec<Op>)>,
    /// Per key, the sum of every increment pushed to it.
    pub(crate) expected: Vec<Vec<f32>>,
    /// Per worker (same order as `scripts`), the number of keys it pushed (counting repeats).
    pub(crate) keys_pushed: Vec<u64>,
}

/// Random increments (sync and async pushes of 1 to `max_batch` keys, repeats allowed, values
/// 1 to 4) from every worker; scripts end with nothing appended, so the caller decides what
/// follows.
pub(crate) fn random_increments(
    rng: &mut ChaCha8Rng,
    space: &KeySpace,
    workers: &[WorkerRef],
    ops_per_worker: usize,
    max_batch: usize,
) -> Increments {
    let mut expected: Vec<Vec<f32>> = (0..space.num_keys())
        .map(|k| vec![0.0; space.len(k)])
        .collect();
    let mut scripts = Vec::new();
    let mut keys_pushed = Vec::new();
    for &w in workers {
        let mut script = Vec::new();
        let mut pushed = 0;
        for _ in 0..ops_per_worker {
            let n = rng.random_range(1..=max_batch);
            let keys: Vec<Key> = (0..n)
                .map(|_| rng.random_range(0..space.num_keys()))
                .collect();
            let mut vals = Vec::new();
            for &k in &keys {
                for slot in expected[k as usize].iter_mut() {
                    let v = f32::from(rng.random_range(1u8..=4));
                    *slot += v;
                    vals.push(v);
                }
            }
            pushed += keys.len() as u64;
            script.push(if rng.random_bool(0.5) {
                Op::push(keys, vals)
            } else {
                Op::push_async(keys, vals)
            });
            if rng.random_bool(0.1) {
                script.push(Op::WaitAll);
            }
        }
        scripts.push((w, script));
        keys_pushed.push(pushed);
    }
    Increments {
        scripts,
        expected,
        keys_pushed,
    }
}

/// The concatenation of the expected values of `keys`.
pub(crate) fn concat(expected: &[Vec<f32>], keys: &[Key]) -> Vec<f32> {
    keys.iter()
        .flat_map(|&k| expected[k as usize].iter().copied())
        .collect()
}

/// Shape of a random case (dynamic allocation unless `static_alloc`); `None` fields are drawn
/// at random.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DynShape {
    pub(crate) caches: Option<bool>,
    pub(crate) fast: Option<bool>,
    pub(crate) partitioning: Option<roam_core::Partitioning>,
    /// Ops per worker in each of the two random phases.
    pub(crate) ops_per_phase: usize,
    /// Whether workers also move buckets' homes to random nodes.
    pub(crate) home_moves: bool,
    /// A sparse key space (keys created on first use by their bucket's creator); the workload
    /// still names keys `0..num_keys`.
    pub(crate) sparse: bool,
    /// Static allocation instead of dynamic: localizes are no-ops and a home move carries the
    /// bucket's keys along.
    pub(crate) static_alloc: bool,
    /// Half the localizes become intents (starting 0–60 clocks ahead, lasting 1–3) and workers
    /// tick their clocks between ops; timing drawn per run (timed or immediate).
    pub(crate) intents: bool,
}

/// A random dynamic-allocation run: the configuration, every worker's script and the value
/// each key must end with (computed from the scripts alone).
pub(crate) struct DynCase {
    pub(crate) cfg: roam_sim::SimConfig,
    pub(crate) scripts: Vec<(WorkerRef, Vec<Op>)>,
    pub(crate) expected: Vec<Vec<f32>>,
}

/// 2–4 nodes of 1–3 workers over 1–6 keys of 1–2 values, so that relocations collide, random
/// delays and pauses, and scripts in four phases separated by `WaitAll` + `Barrier`:
/// 1. random sync and async pulls, pushes, sets and localizes (batches of distinct keys), and
///    with [`DynShape::home_moves`] moves of random keys' homes to random nodes;
/// 2. one synchronous set per key (a fence value, by a worker chosen per key);
/// 3. random pulls, pushes, localizes and home moves (no sets);
/// 4. a synchronous pull of every key by every worker.
///
/// A key's final value is therefore its fence value plus every push of phase 3.
pub(crate) fn dynamic_case(seed: u64, shape: DynShape) -> DynCase {
    let mut rng = test_rng(seed ^ 0xd1a);
    let nodes = rng.random_range(2..=4);
    let workers_per_node = rng.random_range(1..=3);
    let num_keys = rng.random_range(1..=6);
    let space = if shape.sparse {
        KeySpace::sparse(rng.random_range(1..=2)).unwrap()
    } else {
        KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=2)).collect()).unwrap()
    };
    // Drawn even when the shape fixes it, so that every shape keeps its seeds' workloads.
    let partitioning = shape.partitioning.unwrap_or(random_partitioning(&mut rng));
    let (min_delay, max_delay) = random_delays(&mut rng);
    let max_think = rng.random_range(0..=20_000);
    // Drawn only with intents, so that other shapes keep their seeds' workloads.
    let timing = if shape.intents && rng.random_bool(0.5) {
        roam_core::IntentTiming::Immediate
    } else {
        roam_core::IntentTiming::Timed
    };
    // Intents only relocate here: sharing (bounded-stale replicas) is checked in `sharing.rs`.
    let cfg = roam_sim::SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_intent_timing(timing)
        .with_intent_techniques(
            roam_core::IntentTechniques::RelocateOnly,
            roam_core::share::DEFAULT_SHARE_SYNC_NS,
        )
        .with_partitioning(partitioning)
        .with_fast_local_access(shape.fast.unwrap_or_else(|| rng.random_bool(0.5)))
        .with_dynamic(!shape.static_alloc)
        .with_location_caches(shape.caches.unwrap_or_else(|| rng.random_bool(0.5)))
        .with_delay(min_delay, max_delay)
        .with_think(0, max_think);
    let mut scripts: Vec<(WorkerRef, Vec<Op>)> = workers_of(&cfg)
        .into_iter()
        .map(|w| (w, Vec::new()))
        .collect();
    let mut expected: Vec<Vec<f32>> = (0..num_keys).map(|k| vec![0.0; space.len(k)]).collect();
    let all: Vec<Key> = (0..num_keys).collect();
    let fence = [Op::WaitAll, Op::Barrier];
    let random_phase = |rng: &mut ChaCha8Rng,
                        script: &mut Vec<Op>,
                        sets: bool,
                        counted: Option<&mut Vec<Vec<f32>>>| {
        let mut counted = counted;
        for _ in 0..shape.ops_per_phase {
            let keys = random_keys(rng, num_keys);
            let len: usize = keys.iter().map(|&k| space.len(k)).sum();
            let wait = rng.random_bool(0.5);
            let op = match rng.random_range(0..20) {
                0..5 => Op::Pull { keys, wait },
                5..10 => {
                    let vals: Vec<f32> = (0..len)
                        .map(|_| f32::from(rng.random_range(1u8..=4)))
                        .collect();
                    if let Some(expected) = counted.as_deref_mut() {
                        let mut pos = 0;
                        for &k in &keys {
                            for slot in expected[k as usize].iter_mut() {
                                *slot += vals[pos];
                                pos += 1;
                            }
                        }
                    }
                    Op::Push { keys, vals, wait }
                }
                10..12 if sets => {
                    let vals = (0..len)
                        .map(|_| f32::from(rng.random_range(0u8..=50)))
                        .collect();
                    Op::Set { keys, vals, wait }
                }
                10..12 => Op::WaitAll,
                12..15 if shape.home_moves => Op::MoveHome {
                    key: keys[0],
                    to: rng.random_range(0..nodes),
                    wait,
                },
                _ if shape.intents && rng.random_bool(0.5) => {
                    let clock = script
                        .iter()
                        .filter(|op| matches!(op, Op::AdvanceClock))
                        .count();
                    let start = clock as u64 + rng.random_range(0..=60);
                    Op::Intent {
                        keys,
                        start,
                        end: start + rng.random_range(1..=3),
                    }
                }
                _ => Op::Localize { keys, wait },
            };
            script.push(op);
            if shape.intents && rng.random_bool(0.5) {
                script.push(Op::AdvanceClock);
            }
            if rng.random_bool(0.08) {
                script.push(Op::WaitAll);
            }
        }
        if shape.intents {
            // Past every start of the phase: each of its intents must have been acted on.
            script.extend((0..=60).map(|_| Op::AdvanceClock));
        }
    };
    for (_, script) in &mut scripts {
        random_phase(&mut rng, script, true, None);
        script.extend(fence.clone());
    }
    for k in 0..num_keys {
        let vals: Vec<f32> = (0..space.len(k))
            .map(|_| f32::from(rng.random_range(0u8..=50)))
            .collect();
        expected[k as usize].clone_from(&vals);
        let w = rng.random_range(0..scripts.len());
        scripts[w].1.push(Op::set(vec![k], vals));
    }
    for (_, script) in &mut scripts {
        script.extend(fence.clone());
        random_phase(&mut rng, script, false, Some(&mut expected));
        script.extend(fence.clone());
        script.push(Op::pull(all.clone()));
    }
    DynCase {
        cfg,
        scripts,
        expected,
    }
}

/// Every worker of the cluster of `cfg`, node by node (the order of `Sim::workers`).
pub(crate) fn workers_of(cfg: &SimConfig) -> Vec<WorkerRef> {
    (0..cfg.nodes)
        .flat_map(|n| (0..cfg.workers_per_node).map(move |w| WorkerRef::new(n, w)))
        .collect()
}

/// The consistency a fault-free run of `cfg` must pass: with every worker's program order too
/// where it is kept (fast local access, no location caches: see `async_order.rs`; no home
/// moves: per-worker issue order of asynchronous ops is not kept across one, see
/// docs/architecture.md, "Home moves"; synchronous ops stay sequentially consistent).
pub(crate) fn consistency(cfg: &SimConfig, home_moves: bool) -> Consistency {
    if cfg.fast_local_access && !cfg.location_caches && !home_moves {
        Consistency::with_program_order()
    } else {
        Consistency::linearizable()
    }
}

/// The operations of the workers on nodes that did not crash (those of crashed nodes may never
/// return), in history order.
pub(crate) fn surviving_ops(sim: &Sim) -> impl Iterator<Item = &roam_sim::OpRecord> {
    sim.history()
        .ops()
        .iter()
        .filter(move |op| !sim.is_crashed(op.worker.node))
}

/// Every key's value as held by the live nodes at the end of a run.
pub(crate) fn finals(sim: &Sim) -> Vec<Option<Vec<f32>>> {
    (0..sim.history().key_bound())
        .map(|k| sim.peek(k))
        .collect()
}

/// Sum of a node counter over all nodes.
pub(crate) fn total(
    sim: &Sim,
    counter: impl Fn(&roam_core::stats::NodeCounters) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    (0..sim.config().nodes)
        .map(|n| counter(sim.node(NodeId(n)).counters()).load(std::sync::atomic::Ordering::Relaxed))
        .sum()
}

/// Runs `sim` until nothing is pending and checks that no worker is left waiting.
pub(crate) fn run_to_end(seed: u64, sim: &mut Sim) {
    sim.run_until_idle().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        sim.unfinished_workers().is_empty(),
        "seed {seed}: hung: {:?}",
        sim.unfinished_workers()
    );
}

/// [`run_fault_free`] with one worker per node: `(node, script)` pairs, each script ending
/// with a wait for all of its operations.
pub(crate) fn run_one_worker_per_node(
    seed: u64,
    cfg: SimConfig,
    scripts: Vec<(u32, Vec<Op>)>,
) -> Sim {
    let scripts = scripts
        .into_iter()
        .map(|(node, mut script)| {
            script.push(Op::WaitAll);
            (WorkerRef::new(node, 0), script)
        })
        .collect();
    run_fault_free(seed, cfg, scripts)
}

/// A simulation of `cfg` running `scripts`, run to the end and checked for what every
/// fault-free run must satisfy: every operation succeeded, no warning, no anomaly.
pub(crate) fn run_fault_free(seed: u64, cfg: SimConfig, scripts: Vec<(WorkerRef, Vec<Op>)>) -> Sim {
    let mut sim = Sim::new(cfg);
    for (w, script) in scripts {
        sim.add_script(w, script);
    }
    run_to_end(seed, &mut sim);
    for op in sim.history().ops() {
        assert!(
            op.succeeded(),
            "seed {seed}: op failed in a fault-free run: {op}"
        );
    }
    assert!(
        sim.warnings().is_empty(),
        "seed {seed}: warnings: {:?}",
        sim.warnings()
    );
    assert_eq!(total(&sim, |c| &c.anomalies), 0, "seed {seed}");
    sim
}

/// Runs one random case and checks everything a fault-free run must satisfy.
pub(crate) fn run_case(seed: u64, shape: DynShape) -> (Sim, bool, bool) {
    run_dyn_case(seed, dynamic_case(seed, shape), shape.home_moves)
}

/// Runs `case` (a [`dynamic_case`], possibly transformed) and checks everything a fault-free
/// run must satisfy; `home_moves` if its scripts move homes.
pub(crate) fn run_dyn_case(seed: u64, case: DynCase, home_moves: bool) -> (Sim, bool, bool) {
    let (caches, fast) = (case.cfg.location_caches, case.cfg.fast_local_access);
    let sim = run_fault_free(seed, case.cfg, case.scripts);
    let history = sim.history();
    sim.check_quiescent_placement()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(
        total(&sim, |c| &c.relocations_in),
        total(&sim, |c| &c.relocations_out),
        "seed {seed}: every key that left a node arrived somewhere"
    );
    // Exact sums, from the scripts alone and from the history's accounting, in the stores and
    // in every worker's last pull.
    let finals = finals(&sim);
    for (key, want) in case.expected.iter().enumerate() {
        assert_eq!(
            finals[key].as_ref(),
            Some(want),
            "seed {seed}: final value of key {key}"
        );
    }
    check_final_sums_exact(history, &finals).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let want: Vec<f32> = case.expected.concat();
    for w in sim.workers() {
        let last = history.of_worker(w).last().unwrap();
        assert_eq!(
            last.outcome,
            Outcome::Pulled(want.clone()),
            "seed {seed}: final pull of {w}"
        );
    }
    // Per-key linearizability (with every worker's program order where it is guaranteed), the
    // final values included.
    let opts = consistency(sim.config(), home_moves);
    check_linearizable(history, opts, Some(&finals)).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    (sim, caches, fast)
}

/// Random pushes from every worker of `cfg` (`ops` each, batches of up to `max_batch` keys),
/// then, after all of them are applied, every worker reads every key: run fault-free, and
/// checked for the exact sums in every worker's last pull and for linearizability (with home
/// moves allowed, if `home_moves`).
#[allow(dead_code)]
pub(crate) fn run_increments(
    seed: u64,
    cfg: SimConfig,
    ops: usize,
    max_batch: usize,
    home_moves: bool,
) -> Sim {
    let mut rng = test_rng(seed);
    let workers = workers_of(&cfg);
    let inc = random_increments(&mut rng, &cfg.space, &workers, ops, max_batch);
    let keys = all_keys(&cfg.space);
    let scripts = inc
        .scripts
        .iter()
        .map(|(w, script)| {
            let mut script = script.clone();
            // The barrier does not wait for a worker's asynchronous pushes: wait for them first.
            script.push(Op::WaitAll);
            script.push(Op::Barrier);
            script.push(Op::pull(keys.clone()));
            (*w, script)
        })
        .collect();
    let sim = run_fault_free(seed, cfg.clone(), scripts);
    let want = concat(&inc.expected, &keys);
    for &w in &workers {
        let last = sim.history().of_worker(w).last().unwrap();
        assert_eq!(
            last.outcome,
            Outcome::Pulled(want.clone()),
            "seed {seed}: {w:?}"
        );
    }
    let finals = finals(&sim);
    check_linearizable(sim.history(), consistency(&cfg, home_moves), Some(&finals))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    sim
}

/// Load reports every 2 ms of virtual time (a worker gets a few answers from each peer in
/// one); slow at 2× the others' median and 100 µs above it for 3 reports in a row.
#[allow(dead_code)]
pub(crate) fn load_watch() -> roam_core::LoadWatch {
    roam_core::LoadWatch {
        report_every: 2_000_000,
        slow_factor: 2.0,
        min_excess_ns: 100_000,
        recover_factor: 1.5,
        sustain: 3,
        min_answers: 3,
        min_served_keys: 64,
    }
}

/// Adam, FTRL or (half the time) Adagrad, drawn with one roll: the stateful optimizers the
/// random optimizer tests step.
pub(crate) fn random_stateful_optimizer(rng: &mut impl Rng) -> roam_core::Optimizer {
    match rng.random_range(0..4) {
        0 => roam_core::Optimizer::adam(0.05),
        1 => roam_core::Optimizer::Ftrl {
            alpha: 0.1,
            beta: 1.0,
            l1: 0.05,
            l2: 0.01,
        },
        _ => roam_core::Optimizer::adagrad(0.1),
    }
}

/// `num_keys` keys whose value lengths take each of the store's paths: roll `0..rolls` (3 or
/// more); 0 is short uniform values (the batched, optimistic-store path), 1 is 17 values (the
/// plain one), anything else per-key lengths of 1 to 3 (the per-key path).
pub(crate) fn random_lengths(rng: &mut impl Rng, num_keys: u64, rolls: u32) -> KeySpace {
    match rng.random_range(0..rolls) {
        0 => KeySpace::uniform(num_keys, rng.random_range(1..=4)).unwrap(),
        1 => KeySpace::uniform(num_keys, 17).unwrap(),
        _ => KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=3)).collect()).unwrap(),
    }
}

/// The op a worker issues on the random keys `any` when its `roll` (of `0..10`) is not taken by
/// a test's own ops: below 7 a relocation, 7 a move of `any[0]`'s home to a random one of
/// `nodes`, above it a pull; each sync or async at random.
pub(crate) fn roaming_op(rng: &mut impl Rng, roll: u32, any: Vec<Key>, nodes: u32) -> Op {
    match roll {
        0..7 => Op::Localize {
            keys: any,
            wait: rng.random_bool(0.5),
        },
        7 => Op::MoveHome {
            key: any[0],
            to: rng.random_range(0..nodes),
            wait: rng.random_bool(0.5),
        },
        _ => Op::Pull {
            keys: any,
            wait: rng.random_bool(0.5),
        },
    }
}

/// The `tag`-th gradient of a key of `len` values: coordinate 0 is `2^(tag−8)` (exact in `f32`
/// for up to 24 gradients per key), so a step's sum names the gradients in it; the others are
/// random quarters in `-2..=2`.
pub(crate) fn tagged_gradient(rng: &mut impl Rng, tag: usize, len: usize) -> Vec<f32> {
    let mut g = vec![2f32.powi(tag as i32 - 8)];
    g.extend((1..len).map(|_| rng.random_range(-8i8..=8) as f32 / 4.0));
    g
}

/// The steps of key `k` logged at node `at` (`log_replica_steps`), after checking that no
/// other node stepped it (`at` is its `role`, e.g. "owner" or "hub").
pub(crate) fn steps_only_at<'a>(
    seed: u64,
    sim: &'a Sim,
    k: Key,
    at: NodeId,
    role: &str,
) -> Vec<&'a Vec<f32>> {
    for n in (0..sim.config().nodes).map(NodeId).filter(|&n| n != at) {
        assert!(
            sim.node(n).replica_steps().iter().all(|(key, _)| *key != k),
            "seed {seed}: key {k} stepped at {n:?}, not its {role} {at:?}"
        );
    }
    sim.node(at)
        .replica_steps()
        .iter()
        .filter(|(key, _)| *key == k)
        .map(|(_, g)| g)
        .collect()
}

/// Conservation of [`tagged_gradient`]s: the tag sets of key `k`'s logged steps are disjoint
/// and cover every one of the `pushed` gradients, none lost or stepped twice. Returns how many
/// steps summed several gradients.
pub(crate) fn check_tags_cover(seed: u64, k: Key, log: &[&Vec<f32>], pushed: usize) -> usize {
    let (mut seen, mut merged) = (0u32, 0);
    for g in log {
        let bits = g[0] * 256.0;
        assert!(
            bits.fract() == 0.0 && bits > 0.0,
            "seed {seed}: key {k}: step sum {g:?}"
        );
        let bits = bits as u32;
        assert_eq!(
            seen & bits,
            0,
            "seed {seed}: key {k}: a gradient stepped twice"
        );
        if bits.count_ones() > 1 {
            merged += 1;
        }
        seen |= bits;
    }
    assert_eq!(
        u64::from(seen),
        (1u64 << pushed) - 1,
        "seed {seed}: key {k}: the steps cover every gradient once"
    );
    merged
}

/// `record` (visible values, then optimizer state) after `optimizer` steps it with each
/// gradient of `sequence` in order.
pub(crate) fn stepped(
    optimizer: &roam_core::Optimizer,
    len: usize,
    mut record: Vec<f32>,
    sequence: &[Vec<f32>],
) -> Vec<f32> {
    for g in sequence {
        let (w, state) = record.split_at_mut(len);
        optimizer.step(w, state, g);
    }
    record
}

/// The whole record of `key` (visible values and optimizer state) at the end of a run, after
/// checking that exactly one node holds it.
pub(crate) fn sole_record(seed: u64, sim: &Sim, key: Key) -> Vec<f32> {
    let mut got = Vec::new();
    let holders: Vec<u32> = (0..sim.config().nodes)
        .filter(|&n| sim.node(NodeId(n)).store().read_record(key, &mut got))
        .collect();
    assert_eq!(
        holders.len(),
        1,
        "seed {seed}: key {key:#x} held by {holders:?}"
    );
    got
}

/// The end of a fault-free run with intents (`label` names the case in messages): no node
/// shares or wants a key any more, placement is quiescent, each key holds exactly the sum of
/// every push (`expected`), every read was a sum of pushes (replica reads may lag, never
/// invent), every replica granted was dropped and every key that left a node arrived.
pub(crate) fn check_shared_run(sim: &Sim, expected: &[Vec<f32>], label: &str) {
    for n in 0..sim.config().nodes {
        let node = sim.node(NodeId(n));
        assert_eq!(
            (node.shared_replicas(), node.shared_keys()),
            (0, 0),
            "{label}: node {n} still shares keys after every intent ended"
        );
        for key in 0..expected.len() as Key {
            assert!(
                !node.interest().wanted(key),
                "{label}: node {n} still wants key {key}"
            );
        }
    }
    sim.check_quiescent_placement()
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    for (key, want) in expected.iter().enumerate() {
        assert_eq!(
            sim.peek(key as Key).as_ref(),
            Some(want),
            "{label}: final value of key {key} (every push exactly once)"
        );
    }
    for op in sim.history().ops() {
        if let Outcome::Pulled(values) = &op.outcome {
            let mut at = 0;
            for &key in &op.keys {
                let len = expected[key as usize].len();
                for (i, &v) in values[at..at + len].iter().enumerate() {
                    let most = expected[key as usize][i];
                    assert!(
                        (0.0..=most).contains(&v) && v.fract() == 0.0,
                        "{label}: {op}: key {key} read {v}, not a sum of pushes (≤ {most})"
                    );
                }
                at += len;
            }
        }
    }
    assert_eq!(
        total(sim, |c| &c.shares_in),
        total(sim, |c| &c.share_leaves),
        "{label}: every replica granted was dropped"
    );
    assert_eq!(
        total(sim, |c| &c.relocations_in),
        total(sim, |c| &c.relocations_out),
        "{label}: every key that left a node arrived somewhere"
    );
}
