//! Dynamic key spaces in the simulator (issue #17): rows created through admission with the
//! space's initializer, evicted under a per-node row budget (LRU clock) and a TTL, and created
//! again, while keys are relocated and homes move (dynamic allocation, 2–4 nodes, random
//! delays). The random cases are `common::dynamic_case`'s (sparse keys) with a dynamic policy
//! drawn per seed.
//!
//! What is exact and checked:
//! - every operation succeeds, no warning, no anomaly; no key is ever held by two nodes (the
//!   simulator checks it after every step);
//! - at the end, every key is held by at most one node, and its home records exactly that node;
//!   a key held by none is "not created" at its creator (evicted or never admitted), and its
//!   home records the creator (the default owner): no dangling owner;
//! - rows created minus rows evicted equals the rows held, summed over the nodes;
//! - the budget: no node holds more rows than `max_rows` plus the rows relocated to it (rows
//!   are only evicted at their creator; see `roam_core::dynamic`), and once nothing is in
//!   flight (seeds without home moves) none holds more than `max_rows`: rows that moved in
//!   beyond it were sent back to their creators;
//! - every value pulled is explained: the key's initializer value plus whole pushes (a row
//!   created, then pushed to), or a set value plus whole pushes (pushed values are integers
//!   1–4 and set values integers 0–50; the initializer's values are not integers);
//! - without eviction and admission (every id admitted, no budget, zeros), the full checks of
//!   every sparse run (`common::run_dyn_case`: exact sums, linearizability) still hold.

mod common;

use common::{DynShape, dynamic_case, run_dyn_case, total};
use roam_core::{Admission, DynamicPolicy, Initializer, KeySpace, NodeId};
use roam_sim::{OpKind, Outcome, Sim, for_each_seed, seeds};

/// Sized so that the file's tests run in under 30 s in release builds (28 s measured at load
/// average 2 on 2 vCPUs); replay one seed with `ROAM_SIM_SEED=N`, run more with
/// `ROAM_SIM_SEEDS=N`.
fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 100 } else { 1_000 }
}

fn init(seed: u64) -> Initializer {
    Initializer::Normal {
        mean: 0.5,
        std: 0.1,
        seed,
    }
}

/// A policy drawn from the seed: admission by count, by probability or all; a budget of 1–2
/// rows per node; a TTL in half the seeds; a spill in half the seeds (`seed % 4 >= 2`, so with
/// and without a TTL).
fn policy(seed: u64) -> DynamicPolicy {
    let admission = match seed % 3 {
        0 => Admission::All,
        1 => Admission::Count {
            min_count: 2,
            sketch_width: 16,
        },
        _ => Admission::Probability { p: 0.7, seed },
    };
    DynamicPolicy {
        admission,
        max_rows: Some(1 + (seed / 3) % 2),
        max_bytes: None,
        ttl_ns: seed
            .is_multiple_of(2)
            .then_some(300_000 + (seed % 7) * 100_000),
        ttl_steps: None,
        spill: seed % 4 >= 2,
    }
}

/// Whether `value` of key `key`'s value `j` is its initializer value plus whole pushes, or a
/// whole number (a set plus whole pushes).
fn explained(init: &Initializer, key: u64, len: usize, j: usize, value: f32) -> bool {
    let mut row = vec![0.0; len];
    init.fill(key, &mut row);
    let whole = |x: f32| x >= -1e-3 && (x - x.round()).abs() < 1e-3;
    whole(value - row[j]) || (value >= 0.0 && value.fract() == 0.0)
}

#[test]
fn rows_are_admitted_evicted_and_created_again_while_keys_move() {
    let n = seeds(default_seeds()).len();
    let (mut created, mut evicted, mut rejected, mut relocated, mut pulls) = (0, 0, 0, 0, 0);
    let mut returned = 0;
    let (mut spilled, mut unspilled, mut exact_seeds, mut exact_keys) = (0, 0, 0, 0);
    for_each_seed(default_seeds(), |seed| {
        let shape = DynShape {
            ops_per_phase: 10,
            home_moves: seed % 4 == 1,
            sparse: true,
            ..DynShape::default()
        };
        let mut case = dynamic_case(seed, shape);
        let len = case.cfg.space.uniform_len().unwrap();
        let policy = policy(seed);
        case.cfg.space = KeySpace::sparse(len as u32)
            .and_then(|s| s.with_initializer(init(seed)))
            .and_then(|s| s.with_dynamic(policy))
            .unwrap();
        let mut sim = Sim::new(case.cfg);
        for (w, script) in case.scripts {
            sim.add_script(w, script);
        }
        // With a TTL the timers never go quiet: run until every worker is done and nothing is
        // in flight instead of until idle.
        let mut steps = 0u64;
        while !(sim.unfinished_workers().is_empty() && quiet(&sim)) {
            assert!(sim.run_steps(1_000) > 0, "seed {seed}: stuck");
            steps += 1_000;
            assert!(
                steps < 20_000_000,
                "seed {seed}: no end after {steps} steps"
            );
            check_budget(seed, &sim, policy.max_rows.unwrap());
        }
        for op in sim.history().ops() {
            assert!(op.succeeded(), "seed {seed}: op failed: {op}");
        }
        assert!(
            sim.warnings().is_empty(),
            "seed {seed}: {:?}",
            sim.warnings()
        );
        assert_eq!(total(&sim, |c| &c.anomalies), 0, "seed {seed}");
        check_placement(seed, &sim);
        if !shape.home_moves {
            check_budget_at_rest(seed, &sim, policy.max_rows.unwrap());
        }
        returned += total(&sim, |c| &c.rows_returned);
        let init = init(seed);
        for op in sim.history().ops() {
            if let (OpKind::Pull, Outcome::Pulled(values)) = (op.kind, &op.outcome) {
                pulls += 1;
                for (i, &key) in op.keys.iter().enumerate() {
                    for j in 0..len {
                        let v = values[i * len + j];
                        assert!(
                            explained(&init, key, len, j, v),
                            "seed {seed}: key {key} read {v} (op {op})"
                        );
                    }
                }
            }
        }
        let (made, gone) = (
            total(&sim, |c| &c.keys_created),
            total(&sim, |c| &c.rows_evicted),
        );
        let held: u64 = (0..sim.config().nodes)
            .map(|i| sim.node(NodeId(i)).store().count_local())
            .sum();
        assert_eq!(made - gone, held, "seed {seed}: created − evicted = held");
        if policy.spill {
            spilled += total(&sim, |c| &c.rows_spilled);
            unspilled += total(&sim, |c| &c.rows_unspilled);
            assert_eq!(total(&sim, |c| &c.spill_errors), 0, "seed {seed}");
            assert_eq!(
                total(&sim, |c| &c.rows_spilled),
                gone,
                "seed {seed}: every evicted row is spilled"
            );
            if total(&sim, |c| &c.grads_dropped) == 0 {
                exact_seeds += 1;
                exact_keys += check_nothing_lost(seed, &sim, &init, len);
            }
        } else {
            assert_eq!(total(&sim, |c| &c.rows_spilled), 0, "seed {seed}");
        }
        created += made;
        evicted += gone;
        rejected += total(&sim, |c| &c.rows_rejected);
        relocated += total(&sim, |c| &c.relocations_in);
    });
    eprintln!(
        "{n} seeds: {created} rows created, {evicted} evicted, {rejected} accesses refused, \
         {relocated} relocations, {returned} rows sent back to their creators, {pulls} pulls \
         explained; spill: {spilled} rows spilled, \
         {unspilled} created again from it, {exact_keys} keys' final values exact in \
         {exact_seeds} seeds without a dropped update"
    );
    if n >= 100 {
        assert!(
            evicted > 0 && rejected > 0 && relocated > 0 && returned > 0,
            "the runs must evict, move and send rows back"
        );
        assert!(
            unspilled > 0 && exact_keys > 0,
            "the spill runs must evict and create again"
        );
    }
}

/// With a spill and no update dropped, nothing is lost across evictions: every key never set
/// ends (held by one node, or spilled at its creator, or never created) at its initializer
/// value plus every push it was given; every key set ends at a whole number (its last set plus
/// whole pushes: a row lost and created again from the initializer would not be whole).
/// Returns the keys checked.
fn check_nothing_lost(seed: u64, sim: &Sim, init: &Initializer, len: usize) -> u64 {
    use std::collections::{BTreeMap, BTreeSet};
    let mut sums: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
    let mut set: BTreeSet<u64> = BTreeSet::new();
    for op in sim.history().ops() {
        match op.kind {
            OpKind::Push => {
                for (i, &key) in op.keys.iter().enumerate() {
                    let sum = sums.entry(key).or_insert_with(|| vec![0.0; len]);
                    for (total, &pushed) in sum.iter_mut().zip(&op.input[i * len..][..len]) {
                        *total += pushed;
                    }
                }
            }
            OpKind::Set | OpKind::Gradient => set.extend(op.keys.iter().copied()),
            _ => {}
        }
    }
    let mut checked = 0;
    let mut record = Vec::new();
    for key in sim.history().keys_checked() {
        let dir = sim.node(NodeId(0)).directory();
        let creator = sim.node(dir.creator(dir.bucket(key)));
        let found = match sim.holders(key)[..] {
            [holder] => sim.node(holder).store().read_record(key, &mut record),
            _ => creator
                .spill()
                .is_some_and(|s| s.get(key, &mut record).unwrap()),
        };
        if set.contains(&key) {
            let whole = |x: f32| x >= -1e-3 && (x - x.round()).abs() < 1e-3;
            assert!(
                !found || record[..len].iter().all(|&v| whole(v)),
                "seed {seed}: key {key} was set, but ends at {:?}",
                &record[..len]
            );
            checked += u64::from(found);
            continue;
        }
        let mut want = vec![0.0; len];
        init.fill(key, &mut want);
        let pushed = sums.get(&key);
        if !found {
            assert!(
                pushed.is_none_or(|p| p.iter().all(|&v| v == 0.0)),
                "seed {seed}: key {key} was pushed to, but is held nowhere and not spilled"
            );
            continue;
        }
        for j in 0..len {
            let want = want[j] + pushed.map_or(0.0, |p| p[j]);
            assert!(
                (record[j] - want).abs() < 1e-3,
                "seed {seed}: key {key} value {j} is {}, its history says {want}",
                record[j]
            );
        }
        checked += 1;
    }
    checked
}

fn quiet(sim: &Sim) -> bool {
    (0..sim.config().nodes).all(|i| {
        let node = sim.node(NodeId(i));
        node.keys_in_transit() == 0 && node.pending_ops() == 0
    }) && sim.in_flight() == 0
}

/// No node holds more than the budget plus the rows relocated to it.
fn check_budget(seed: u64, sim: &Sim, max_rows: u64) {
    for i in 0..sim.config().nodes {
        let node = sim.node(NodeId(i));
        let held = node.store().count_local();
        let moved_in = node
            .counters()
            .relocations_in
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            held <= max_rows + moved_in,
            "seed {seed}: node {i} holds {held} rows, budget {max_rows}, {moved_in} moved in"
        );
    }
}

/// Once nothing is in flight, no node holds more than the budget: rows that moved in beyond it
/// went back to their creators, which evicted down to it (without home moves, every home is
/// its buckets' creator).
fn check_budget_at_rest(seed: u64, sim: &Sim, max_rows: u64) {
    for i in 0..sim.config().nodes {
        let held = sim.node(NodeId(i)).store().count_local();
        assert!(
            held <= max_rows,
            "seed {seed}: node {i} holds {held} rows at rest, budget {max_rows}"
        );
    }
}

/// Each key held once and recorded by its home, or held nowhere, "not created" at its creator
/// and recorded as the creator's.
fn check_placement(seed: u64, sim: &Sim) {
    for key in sim.history().keys_checked() {
        let holders = sim.holders(key);
        let dir = sim.node(NodeId(0)).directory();
        let home = dir.home(key);
        let creator = dir.creator(dir.bucket(key));
        let recorded = sim.node(home).recorded_owner(key);
        match holders[..] {
            [holder] => assert_eq!(
                recorded,
                Some(holder),
                "seed {seed}: key {key} held by {holder}, home {home} records {recorded:?}"
            ),
            [] => {
                assert!(
                    !sim.node(creator).store().is_created(key),
                    "seed {seed}: key {key} held nowhere but created at {creator}"
                );
                assert_eq!(
                    recorded,
                    Some(creator),
                    "seed {seed}: key {key} held nowhere; home {home} records {recorded:?}"
                );
            }
            _ => panic!("seed {seed}: key {key} held by {holders:?}"),
        }
    }
}

/// A dynamic space that admits every id into an unbounded budget is the plain sparse space:
/// exact sums and linearizability as in `sparse_keys.rs`.
#[test]
fn admit_all_without_budget_keeps_every_exact_check() {
    for_each_seed(default_seeds() / 5, |seed| {
        let shape = DynShape {
            ops_per_phase: 10,
            home_moves: seed % 2 == 0,
            sparse: true,
            ..DynShape::default()
        };
        let mut case = dynamic_case(seed, shape);
        let len = case.cfg.space.uniform_len().unwrap() as u32;
        case.cfg.space = KeySpace::sparse(len)
            .and_then(|s| s.with_dynamic(DynamicPolicy::default()))
            .unwrap();
        let (sim, _, _) = run_dyn_case(seed, case, shape.home_moves);
        assert_eq!(total(&sim, |c| &c.rows_evicted), 0);
    });
}

/// Every node creates bit-identical rows: 3 nodes with hash homes, each id created by its
/// creator and read by every node's worker equals `Initializer::fill` of (seed, id).
#[test]
fn every_node_reads_the_same_initial_rows() {
    use roam_sim::{Op, SimConfig, WorkerRef};
    let init = init(11);
    let space = KeySpace::sparse(3)
        .and_then(|s| s.with_initializer(init))
        .and_then(|s| s.with_dynamic(DynamicPolicy::default()))
        .unwrap();
    let keys: Vec<u64> = (0..40u64)
        .map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let cfg = SimConfig::new(3, 1, space)
        .with_seed(5)
        .with_partitioning(roam_core::Partitioning::Hash);
    let mut sim = Sim::new(cfg);
    for n in 0..3 {
        sim.add_script(WorkerRef::new(n, 0), vec![Op::pull(keys.clone())]);
    }
    sim.run_until_idle().unwrap();
    let want: Vec<f32> = keys
        .iter()
        .flat_map(|&k| {
            let mut row = [0.0; 3];
            init.fill(k, &mut row);
            row
        })
        .collect();
    for op in sim.history().ops() {
        assert_eq!(op.outcome, Outcome::Pulled(want.clone()), "{op}");
    }
    assert_eq!(total(&sim, |c| &c.keys_created), keys.len() as u64);
}

/// TTL: rows untouched for 1.5 × the TTL are evicted by the nodes' timers, rows touched within
/// the TTL stay; a later pull creates an evicted row again, with its initial values.
#[test]
fn ttl_evicts_untouched_rows_and_a_pull_creates_them_again() {
    use roam_sim::{Op, SimConfig, WorkerRef};
    const TTL: u64 = 10_000_000;
    let init = init(3);
    let policy = DynamicPolicy {
        ttl_ns: Some(TTL),
        ..DynamicPolicy::default()
    };
    let space = sparse_space(init, policy);
    let cold: Vec<u64> = (100..120).collect();
    let hot: Vec<u64> = (0..20).collect();
    let ones = |keys: &[u64]| vec![1.0f32; keys.len() * 2];
    let mut script = vec![
        Op::push(cold.clone(), ones(&cold)),
        Op::push(hot.clone(), ones(&hot)),
    ];
    // The hot keys are touched every TTL / 4 for 3 TTLs; the cold ones never again.
    for _ in 0..12 {
        script.push(Op::Sleep(TTL / 4));
        script.push(Op::pull(hot.clone()));
    }
    script.push(Op::pull(cold.clone()));
    let cfg = SimConfig::new(2, 1, space)
        .with_seed(9)
        .with_partitioning(roam_core::Partitioning::Hash);
    let mut sim = Sim::new(cfg);
    sim.add_script(WorkerRef::new(0, 0), script);
    while !(sim.unfinished_workers().is_empty() && quiet(&sim)) {
        assert!(sim.run_steps(1_000) > 0);
    }
    let ops = sim.history().ops();
    assert_eq!(
        ops[ops.len() - 1].outcome,
        Outcome::Pulled(initial_plus(&init, &cold, 0.0)),
        "cold rows were evicted"
    );
    assert_eq!(
        ops[ops.len() - 2].outcome,
        Outcome::Pulled(initial_plus(&init, &hot, 1.0)),
        "hot rows stay"
    );
    assert_eq!(total(&sim, |c| &c.rows_evicted), cold.len() as u64);
}

/// A sparse space of 2 values a key, rows made by `init`, under `policy`.
fn sparse_space(init: Initializer, policy: DynamicPolicy) -> KeySpace {
    KeySpace::sparse(2)
        .and_then(|s| s.with_initializer(init))
        .and_then(|s| s.with_dynamic(policy))
        .unwrap()
}

/// The 2-value rows of `keys` as `init` makes them, plus `pushes` in every value.
fn initial_plus(init: &Initializer, keys: &[u64], pushes: f32) -> Vec<f32> {
    keys.iter()
        .flat_map(|&k| {
            let mut row = [0.0; 2];
            init.fill(k, &mut row);
            row.map(|v| v + pushes)
        })
        .collect()
}

/// TTL in steps (8): rows untouched for 24 steps of the node's clock (its workers'
/// `advance_clock` ticks; the bound is 1.5 × the TTL plus the looks' delays) are evicted, rows
/// touched every 2 steps stay, and time alone evicts nothing: after a second of virtual time
/// without a tick every row is still there. Reading
/// a row on the fast path counts as a touch (`Store::new` marks pulled rows REFERENCED when a
/// TTL in steps is set: without it this fails on the hot rows held where the worker runs).
#[test]
fn ttl_in_steps_evicts_rows_untouched_for_that_many_ticks_and_time_alone_does_not() {
    use roam_sim::{Op, SimConfig, WorkerRef};
    const STEPS: u64 = 8;
    // Longer than the timer's look at the clock (5 ms), so that every tick is looked at.
    const BETWEEN_TICKS: u64 = 6_000_000;
    let init = init(4);
    let policy = DynamicPolicy {
        ttl_steps: Some(STEPS),
        ..DynamicPolicy::default()
    };
    let space = sparse_space(init, policy);
    let cold: Vec<u64> = (100..120).collect();
    let hot: Vec<u64> = (0..20).collect();
    let ones = |keys: &[u64]| vec![1.0f32; keys.len() * 2];
    let rows = |keys: &[u64], pushes: f32| initial_plus(&init, keys, pushes);
    let mut script = vec![
        Op::push(cold.clone(), ones(&cold)),
        Op::push(hot.clone(), ones(&hot)),
        // A second of time, no step: nothing may go.
        Op::Sleep(1_000_000_000),
        Op::pull(cold.clone()),
    ];
    // The hot keys are touched every STEPS / 4 ticks for 3 × STEPS ticks; the cold ones never
    // again.
    for tick in 1..=3 * STEPS {
        script.push(Op::AdvanceClock);
        script.push(Op::Sleep(BETWEEN_TICKS));
        if tick % (STEPS / 4) == 0 {
            script.push(Op::pull(hot.clone()));
        }
    }
    script.push(Op::pull(cold.clone()));
    let cfg = SimConfig::new(2, 1, space)
        .with_seed(5)
        .with_partitioning(roam_core::Partitioning::Hash);
    let mut sim = Sim::new(cfg);
    sim.add_script(WorkerRef::new(0, 0), script);
    // Each node counts its own workers' steps: node 1's worker trains alongside, touching
    // nothing (the rows homed there are node 0's worker's, pulled and pushed remotely).
    let mut ticks = vec![Op::Sleep(1_000_000_000)];
    for _ in 0..3 * STEPS {
        ticks.extend([Op::AdvanceClock, Op::Sleep(BETWEEN_TICKS)]);
    }
    sim.add_script(WorkerRef::new(1, 0), ticks);
    while !(sim.unfinished_workers().is_empty() && quiet(&sim)) {
        assert!(sim.run_steps(1_000) > 0);
    }
    let ops = sim.history().ops();
    let pulls: Vec<_> = ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Pulled(_)))
        .collect();
    assert_eq!(
        pulls[0].outcome,
        Outcome::Pulled(rows(&cold, 1.0)),
        "a second without a step evicts nothing"
    );
    assert_eq!(
        pulls[pulls.len() - 2].outcome,
        Outcome::Pulled(rows(&hot, 1.0)),
        "rows touched within the TTL's steps stay"
    );
    assert_eq!(
        pulls[pulls.len() - 1].outcome,
        Outcome::Pulled(rows(&cold, 0.0)),
        "rows untouched for 3 × the TTL's steps were evicted and come back fresh"
    );
    assert_eq!(total(&sim, |c| &c.rows_evicted), cold.len() as u64);
}

/// Static allocation: a home move carries a bucket's keys, and its creator changes. Spilled
/// rows of the bucket go along (taken out of the old creator's spill and carried as held
/// rows), so every key, pushed to, evicted into the spill, then moved, reads back its
/// initializer value plus every push, before and after further evictions at the new home.
#[test]
fn spilled_rows_move_with_their_bucket_under_static_allocation() {
    use roam_sim::{Op, SimConfig, WorkerRef};
    let init = init(17);
    let policy = DynamicPolicy {
        max_rows: Some(2),
        spill: true,
        ..DynamicPolicy::default()
    };
    let space = KeySpace::sparse(2)
        .and_then(|s| s.with_initializer(init))
        .and_then(|s| s.with_dynamic(policy))
        .unwrap();
    let keys: Vec<u64> = (0..24u64)
        .map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let ones = |keys: &[u64]| vec![1.0f32; keys.len() * 2];
    let mut script = Vec::new();
    for &k in &keys {
        script.push(Op::push(vec![k], ones(&[k])));
    }
    // Every key's bucket to the other node.
    let cfg = SimConfig::new(2, 1, space)
        .with_seed(3)
        .with_partitioning(roam_core::Partitioning::Hash);
    let mut sim = Sim::new(cfg);
    let dir = sim.node(NodeId(0)).directory().clone();
    for &k in &keys {
        let to = 1 - dir.home(k).0;
        script.push(Op::move_home(k, to));
    }
    for &k in &keys {
        script.push(Op::push(vec![k], ones(&[k])));
    }
    script.push(Op::pull(keys.clone()));
    sim.add_script(WorkerRef::new(0, 0), script);
    sim.run_until_idle().unwrap();
    for op in sim.history().ops() {
        assert!(op.succeeded(), "{op}");
    }
    assert!(total(&sim, |c| &c.rows_spilled) > 0);
    let last = sim.history().ops().last().unwrap().clone();
    let Outcome::Pulled(values) = &last.outcome else {
        panic!("{last}")
    };
    for (i, &k) in keys.iter().enumerate() {
        let mut row = [0.0; 2];
        init.fill(k, &mut row);
        for j in 0..2 {
            assert!(
                (values[2 * i + j] - (row[j] + 2.0)).abs() < 1e-5,
                "key {k}: {} (initial {}, two pushes)",
                values[2 * i + j],
                row[j]
            );
        }
    }
}
