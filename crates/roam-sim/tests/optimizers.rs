//! Server-side optimizers (`push_gradients`, `push_gradient_sums`) under relocation and home
//! moves.
//!
//! - SGD is linear: the random dynamic cases of `home_moves.rs` with every push turned into the
//!   gradient whose SGD step is that push (`lr = 0.5`, `g = −2·v`, exact in `f32`; every other
//!   one as a `push_gradient_sums` aggregate) must end with the same exact sums and stay
//!   linearizable (the simulator records an SGD gradient as the push it is, so every checker
//!   covers it).
//! - Adagrad, Adam and FTRL are order-sensitive and stateful: each key's gradients come from one
//!   worker, synchronously, so each key sees one sequence; while every worker also pulls,
//!   relocates and moves homes of any keys, each key's whole record (visible values and hidden
//!   state) must end bit-exact equal to that sequence applied by `Optimizer::step` from zeros,
//!   and pulls must return the visible part only. With intents, a key shared at its writer's
//!   node accumulates its gradients there and its owner steps once per sync round with their
//!   sum (`share/sync.rs`): its record must then be the sequence applied in consecutive groups
//!   (every grouping of up to 14 gradients is tried).
//! - `push_gradient_sums` takes the same paths: with aggregates of 1–3 copies of a gradient
//!   instead of gradients, each key's record is its aggregates applied by `step_sums` in order
//!   (where shared, in consecutive groups stepped with their sums).

mod common;

use common::{
    DynShape, dynamic_case, random_lengths, random_partitioning, roaming_op, run_dyn_case,
    run_fault_free, sole_record, stepped, test_rng, total, workers_of,
};
use rand::Rng;
use rand::seq::index::sample;
use roam_core::{Key, Optimizer};
use roam_sim::{Op, Outcome, SimConfig, for_each_seed};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 100 } else { 2_000 }
}

#[test]
fn sgd_gradients_with_relocations_and_home_moves_keep_exact_sums() {
    let shape = DynShape {
        ops_per_phase: 12,
        home_moves: true,
        ..DynShape::default()
    };
    for_each_seed(default_seeds(), |seed| {
        let mut case = dynamic_case(seed, shape);
        case.cfg.space = case
            .cfg
            .space
            .clone()
            .with_optimizer(Optimizer::sgd(0.5))
            .unwrap();
        let mut gradients = 0;
        let space = case.cfg.space.clone();
        for (_, script) in &mut case.scripts {
            for op in script.iter_mut() {
                if let Op::Push { keys, vals, wait } = op {
                    gradients += 1;
                    let grads: Vec<f32> = vals.iter().map(|v| -2.0 * v).collect();
                    // Every other one as an aggregate (SGD steps with its sums; the squares,
                    // any values, are unused).
                    *op = if gradients % 2 == 0 {
                        let mut aggregates = Vec::with_capacity(2 * grads.len());
                        let mut at = 0;
                        for &key in keys.iter() {
                            let g = &grads[at..at + space.len(key)];
                            aggregates.extend_from_slice(g);
                            aggregates.extend(g.iter().map(|g| g * g + 1.0));
                            at += g.len();
                        }
                        Op::PushGradientSums {
                            keys: std::mem::take(keys),
                            aggregates,
                            wait: *wait,
                        }
                    } else {
                        Op::PushGradients {
                            keys: std::mem::take(keys),
                            grads,
                            wait: *wait,
                        }
                    };
                }
            }
        }
        let (sim, _, _) = run_dyn_case(seed, case, true);
        let pushes = sim
            .history()
            .ops()
            .iter()
            .filter(|op| op.kind == roam_sim::OpKind::Push)
            .count();
        assert_eq!(pushes, gradients, "seed {seed}: every gradient recorded");
    });
}

/// A random run where worker `k % workers` alone sends key `k`'s gradients (synchronously),
/// and every worker pulls, localizes and moves homes of random keys; returns the config, the
/// scripts and each key's sequence of steps, each an aggregate (sums, then squares: a
/// gradient `g` is `(g, g²)`). With `aggregates`, the steps are `push_gradient_sums` of `m`
/// copies of a gradient (`m` in 1..=3), else `push_gradients`.
#[allow(clippy::type_complexity)]
fn one_writer_per_key(
    seed: u64,
    optimizer: Optimizer,
    intents: bool,
    aggregates: bool,
) -> (
    SimConfig,
    Vec<(roam_sim::WorkerRef, Vec<Op>)>,
    Vec<Vec<Vec<f32>>>,
) {
    let mut rng = test_rng(seed ^ 0x0971);
    let nodes = rng.random_range(2..=4);
    let workers_per_node = rng.random_range(1..=2);
    let num_keys: u64 = rng.random_range(2..=8);
    // Short uniform values take the batched (optimistic-store) path, 17 values the plain one,
    // per-key lengths the per-key path.
    let space = random_lengths(&mut rng, num_keys, 4)
        .with_optimizer(optimizer)
        .unwrap();
    let min_delay = rng.random_range(0..=2_000);
    let cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_partitioning(random_partitioning(&mut rng))
        .with_fast_local_access(rng.random_bool(0.75))
        .with_dynamic(true)
        .with_location_caches(rng.random_bool(0.5))
        .with_delay(min_delay, min_delay + rng.random_range(1..=80_000))
        .with_think(0, rng.random_range(0..=20_000))
        .with_intent_techniques(
            if intents {
                roam_core::IntentTechniques::All
            } else {
                roam_core::IntentTechniques::RelocateOnly
            },
            roam_core::share::DEFAULT_SHARE_SYNC_NS,
        );
    let workers = workers_of(&cfg);
    let mut sequences: Vec<Vec<Vec<f32>>> = vec![Vec::new(); num_keys as usize];
    let mut scripts = Vec::new();
    for (w, &worker) in workers.iter().enumerate() {
        let mine: Vec<Key> = (0..num_keys)
            .filter(|k| *k as usize % workers.len() == w)
            .collect();
        let mut script = Vec::new();
        for _ in 0..20 {
            let n = rng.random_range(1..=num_keys.min(3) as usize);
            let any: Vec<Key> = sample(&mut rng, num_keys as usize, n)
                .into_iter()
                .map(|k| k as Key)
                .collect();
            let roll = rng.random_range(0..10);
            let op = match roll {
                0..5 if !mine.is_empty() => {
                    let n = rng.random_range(1..=mine.len());
                    let keys: Vec<Key> = sample(&mut rng, mine.len(), n)
                        .into_iter()
                        .map(|i| mine[i])
                        .collect();
                    let mut grads = Vec::new();
                    for &k in &keys {
                        let g: Vec<f32> = (0..space.len(k))
                            .map(|_| rng.random_range(-8i8..=8) as f32 / 4.0)
                            .collect();
                        // Small integer multiples of quarters: every product is exact.
                        let m = if aggregates {
                            rng.random_range(1..=3) as f32
                        } else {
                            1.0
                        };
                        let sums = g.iter().map(|g| g * m);
                        let aggregate: Vec<f32> = sums.chain(g.iter().map(|g| g * g * m)).collect();
                        if aggregates {
                            grads.extend_from_slice(&aggregate);
                        } else {
                            grads.extend_from_slice(&g);
                        }
                        sequences[k as usize].push(aggregate);
                    }
                    if aggregates {
                        Op::PushGradientSums {
                            keys,
                            aggregates: grads,
                            wait: true,
                        }
                    } else {
                        Op::PushGradients {
                            keys,
                            grads,
                            wait: true,
                        }
                    }
                }
                0..7 if intents => {
                    let clock = script
                        .iter()
                        .filter(|op| matches!(op, Op::AdvanceClock))
                        .count() as u64;
                    let start = clock + rng.random_range(0..=3);
                    Op::Intent {
                        keys: any,
                        start,
                        end: start + rng.random_range(1..=4),
                    }
                }
                _ => roaming_op(&mut rng, roll, any, nodes),
            };
            script.push(op);
            if intents {
                script.push(Op::AdvanceClock);
            }
        }
        if intents {
            // Past every intent's end: shares are dropped, keys settle at their owners.
            script.extend((0..8).map(|_| Op::AdvanceClock));
        }
        script.extend([Op::WaitAll, Op::Barrier]);
        script.push(Op::pull((0..num_keys).collect::<Vec<_>>()));
        scripts.push((worker, script));
    }
    (cfg, scripts, sequences)
}

fn stateful_optimizers_match_a_sequential_application(optimizer: Optimizer) {
    match_a_sequential_application(optimizer, false, false);
}

/// `record` after `optimizer` steps it with each aggregate (sums, then squares) of `sequence`
/// in order (`Optimizer::step_sums`, which for `(g, g²)` is `step` of `g`).
fn stepped_aggregates(
    optimizer: Optimizer,
    len: usize,
    mut record: Vec<f32>,
    sequence: &[Vec<f32>],
) -> Vec<f32> {
    for aggregate in sequence {
        let (w, state) = record.split_at_mut(len);
        let (sums, squares) = aggregate.split_at(len);
        optimizer.step_sums(w, state, sums, squares);
    }
    record
}

/// Longest sequence whose groupings are all tried (2^(n−1) of them).
const MAX_GROUPED: usize = 14;

/// Every record the aggregates of `sequence` give when applied in consecutive groups: each
/// group one `Optimizer::step` with the sum of its aggregates' sums (summed in order, as a
/// share's accumulator does), and a group of one aggregate also as `Optimizer::step_sums` (the
/// owner stepping it itself).
fn grouped_application(
    optimizer: Optimizer,
    record_len: usize,
    len: usize,
    sequence: &[Vec<f32>],
) -> Vec<Vec<f32>> {
    // Records reachable after each prefix, deduplicated by their bits.
    let mut after: Vec<Vec<Vec<f32>>> = vec![Vec::new(); sequence.len() + 1];
    let mut seen: Vec<std::collections::HashSet<Vec<u32>>> =
        vec![std::collections::HashSet::new(); sequence.len() + 1];
    after[0].push(vec![0.0; record_len]);
    for i in 0..sequence.len() {
        let from = std::mem::take(&mut after[i]);
        let mut sum = vec![0.0f32; len];
        for j in i..sequence.len() {
            sum.iter_mut().zip(&sequence[j]).for_each(|(s, g)| *s += g);
            for record in &from {
                let (sums, squares) = sequence[i].split_at(len);
                // A share's round steps with the sum of its aggregates' sums; an aggregate
                // alone may also have been stepped at the owner itself, squares and all.
                let steps = [(sum.as_slice(), None), (sums, Some(squares))];
                for (sums, squares) in steps.into_iter().take(if j == i { 2 } else { 1 }) {
                    let mut next = record.clone();
                    let (w, state) = next.split_at_mut(len);
                    match squares {
                        Some(squares) => optimizer.step_sums(w, state, sums, squares),
                        None => optimizer.step(w, state, sums),
                    }
                    if seen[j + 1].insert(next.iter().map(|v| v.to_bits()).collect()) {
                        after[j + 1].push(next);
                    }
                }
            }
        }
        after[i] = from;
    }
    after.pop().unwrap_or_default()
}

/// With `intents`, workers signal intents instead of localizing (relocation and, while several
/// nodes want a key, shares: replicas by intent, whose gradients accumulate there and are
/// stepped by the owner once per sync round with their sum, so a key's record may be its
/// sequence applied in consecutive groups); the final pulls are not checked then (a share may
/// still serve them, bounded-stale).
fn match_a_sequential_application(optimizer: Optimizer, intents: bool, aggregates: bool) {
    let (mut steps, mut moved, mut homes, mut shares, mut runs) = (0usize, 0, 0, 0, 0);
    let mut grouped = 0;
    for_each_seed(default_seeds(), |seed| {
        let (cfg, scripts, sequences) = one_writer_per_key(seed, optimizer, intents, aggregates);
        let space = cfg.space.clone();
        let sim = run_fault_free(seed, cfg, scripts);
        moved += total(&sim, |c| &c.relocations_in);
        homes += total(&sim, |c| &c.homes_moved_in);
        shares += total(&sim, |c| &c.shares_in);
        runs += 1;
        let mut visible_all = Vec::new();
        for (key, sequence) in sequences.iter().enumerate() {
            let key = key as Key;
            let len = space.len(key);
            let zeros = vec![0.0; space.record_len(key)];
            let want = if aggregates {
                stepped_aggregates(optimizer, len, zeros, sequence)
            } else {
                // Plain gradients against `Optimizer::step` itself, independently of `step_sums`.
                let gradients: Vec<Vec<f32>> = sequence.iter().map(|a| a[..len].to_vec()).collect();
                stepped(&optimizer, len, zeros, &gradients)
            };
            steps += sequence.len();
            let got = sole_record(seed, &sim, key);
            if intents && got != want {
                // A share accumulates its gradients and the owner steps once per round with
                // their sum: the record is the sequence applied in consecutive groups.
                grouped += 1;
                if sequence.len() <= MAX_GROUPED {
                    assert!(
                        grouped_application(optimizer, space.record_len(key), len, sequence)
                            .contains(&got),
                        "seed {seed}: {} record of key {key}: no grouping of its {} gradients \
                         into consecutive steps gives it",
                        optimizer.name(),
                        sequence.len()
                    );
                }
                visible_all.extend_from_slice(&got[..len]);
                continue;
            }
            assert_eq!(
                got,
                want,
                "seed {seed}: {} record of key {key} after {} steps (visible then state)",
                optimizer.name(),
                sequence.len()
            );
            visible_all.extend_from_slice(&want[..len]);
        }
        for w in sim.workers().into_iter().filter(|_| !intents) {
            let last = sim.history().of_worker(w).last().unwrap();
            assert_eq!(
                last.outcome,
                Outcome::Pulled(visible_all.clone()),
                "seed {seed}: {w}'s final pull returns the visible values only"
            );
        }
    });
    eprintln!(
        "{}: {runs} runs, {steps} gradient steps checked, {moved} relocations, {homes} home \
         moves, {shares} shares, {grouped} keys stepped in groups",
        optimizer.name()
    );
    assert!(steps > 0, "no gradient was applied");
    if runs >= 100 && intents {
        assert!(shares > 0, "keys must be shared while they are stepped");
    }
    if runs >= 100 && !intents {
        assert!(
            moved > 0 && homes > 0,
            "records must move while they are stepped"
        );
    }
}

#[test]
fn adagrad_with_relocations_and_home_moves_matches_a_sequential_application() {
    stateful_optimizers_match_a_sequential_application(Optimizer::adagrad(0.1));
}

#[test]
fn adam_with_relocations_and_home_moves_matches_a_sequential_application() {
    stateful_optimizers_match_a_sequential_application(Optimizer::adam(0.05));
}

#[test]
fn ftrl_with_relocations_and_home_moves_matches_a_sequential_application() {
    stateful_optimizers_match_a_sequential_application(Optimizer::Ftrl {
        alpha: 0.1,
        beta: 1.0,
        l1: 0.05,
        l2: 0.01,
    });
}

#[test]
fn adagrad_with_intents_and_shares_matches_a_sequential_application() {
    match_a_sequential_application(Optimizer::adagrad(0.1), true, false);
}

/// `push_gradient_sums` takes the paths of `push_gradients` (local steps, requests forwarded
/// and queued behind relocations and home moves, shares' accumulators): each key's record is
/// its aggregates applied in order (in groups where shared).
#[test]
fn aggregates_with_relocations_and_home_moves_match_a_sequential_application() {
    for optimizer in [
        Optimizer::adagrad(0.1),
        Optimizer::Ftrl {
            alpha: 0.1,
            beta: 1.0,
            l1: 0.05,
            l2: 0.01,
        },
    ] {
        match_a_sequential_application(optimizer, false, true);
    }
    match_a_sequential_application(Optimizer::adagrad(0.1), true, true);
}
