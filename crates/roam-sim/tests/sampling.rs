//! Sampling (NuPS, `roam_core::sampling`) in the simulator: workers draw samples with every
//! scheme (`naive`, `preloc`, `pool:U`, `pool:U:strict`, `local`, `local:next`) from uniform,
//! log-uniform and weighted distributions, with and without replacement, while they push known
//! increments to the sampled keys, pull them and localize them, and keys relocate under them.
//!
//! A sampled read is recorded as a pull of the keys drawn with the values read (`Op::Sample`,
//! `Op::PullSample`), so the checkers hold it to what ordinary pulls guarantee: per-key
//! linearizability (no torn value, no value from the future, none lost), with each worker's
//! program order where that is kept, and exact final sums. Each seed's runs are derived from the
//! seed alone; a failure names its seed, and `ROAM_SIM_SEED=<seed> cargo test --release -p
//! roam-sim --test sampling` replays it (`ROAM_SIM_SEEDS=<count>` runs more).
//!
//! Besides, each scheme must keep its own promise, checked where it can be exact: `local` reads
//! the keys held here from the store (a message only for the fallbacks it counts), `preloc` and
//! `pool` leave the keys they drew on the sampling node when nothing else moves them, and `naive`
//! and `local` never move a key.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;

use common::{consistency, finals, run_fault_free, run_to_end, test_rng, total};
use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use roam_core::{
    Distribution, Key, KeySpace, NodeId, OpError, Partitioning, SamplerId, SamplerSpec, Scheme,
    Support,
};
use roam_sim::{
    Consistency, FinalVerdict, Op, OpKind, Outcome, Sim, SimConfig, WorkerRef,
    check_final_sums_exact, check_linearizable, final_sums, for_each_seed, seeds,
};

/// Seeds of the main random test in a release build (fewer in a debug build; the other random
/// tests take fractions of it). `ROAM_SIM_SEEDS` / `ROAM_SIM_SEED` override.
fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 4_000 }
}

/// Scheme `i` of the six, cycled through by seed so that every one runs on many seeds; pool
/// parameters drawn.
fn scheme(rng: &mut ChaCha8Rng, i: u64) -> Scheme {
    match i % 6 {
        0 => Scheme::Naive,
        1 => Scheme::Preloc,
        2 | 3 => Scheme::Pool {
            reuse: rng.random_range(1..=3),
            postpone: i % 6 == 2,
        },
        4 => Scheme::Local { next: false },
        _ => Scheme::Local { next: true },
    }
}

/// A sampler of `scheme` over `support`: uniform, log-uniform or weighted (integer weights 0 to
/// 4, so some keys can never be drawn), with replacement on most, small pool groups (so pools
/// refill and prefetch within a short run).
fn random_sampler(rng: &mut ChaCha8Rng, support: Support, scheme: Scheme) -> SamplerSpec {
    let distribution = match rng.random_range(0..3) {
        0 => Distribution::uniform(support),
        1 => Distribution::log_uniform(support),
        _ => {
            let mut weights: Vec<f64> = (0..support.len)
                .map(|_| f64::from(rng.random_range(0u8..=4)))
                .collect();
            if weights.iter().all(|&w| w == 0.0) {
                weights[0] = 1.0;
            }
            Distribution::weighted(support.first, support.stride, weights)
        }
    };
    SamplerSpec {
        distribution: distribution.expect("a valid distribution"),
        scheme,
        with_replacement: rng.random_bool(0.7),
        group_draws: rng.random_range(1..=6),
    }
}

/// A key space whose workload names keys `0..num_keys` (4 to 12; returned too) and supports for
/// samplers: with one value length for all keys (a dense space, or on some seeds a sparse one,
/// whose keys are created on first use), a random range of at least two keys or every other key;
/// with per-key lengths, the even keys (which share one length, as a support must) from a random
/// one on.
fn space_and_support(
    rng: &mut ChaCha8Rng,
) -> (
    KeySpace,
    u64,
    impl FnMut(&mut ChaCha8Rng) -> Support + use<>,
) {
    let num_keys: u64 = rng.random_range(4..=12);
    let uniform = rng.random_bool(0.5);
    let len = rng.random_range(1..=2);
    let space = if uniform && rng.random_bool(0.3) {
        // Keys created on first use by their bucket's creator; the workload names 0..num_keys.
        KeySpace::sparse(len).unwrap()
    } else if uniform {
        KeySpace::uniform(num_keys, len).unwrap()
    } else {
        let lens = (0..num_keys).map(|k| {
            if k % 2 == 0 {
                len
            } else {
                rng.random_range(1..=3)
            }
        });
        KeySpace::per_key(lens.collect()).unwrap()
    };
    let support = move |rng: &mut ChaCha8Rng| {
        if uniform && rng.random_bool(0.5) {
            let first = rng.random_range(0..=num_keys - 2);
            Support::range(first..rng.random_range(first + 2..=num_keys))
        } else {
            let first = if uniform {
                rng.random_range(0..=1)
            } else {
                2 * rng.random_range(0..=1)
            };
            Support {
                first,
                stride: 2,
                len: (num_keys - first).div_ceil(2),
            }
        }
    };
    (space, num_keys, support)
}

/// What a random run may do besides sampling, pushing and pulling.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    /// Only this node's workers sample, they pull nothing but samples until their last pull,
    /// nobody localizes, and every sampler uses `scheme`: the samplers alone move keys.
    sampling_node: Option<u32>,
    /// The scheme of the one sampler of a `sampling_node` run.
    scheme: Option<Scheme>,
    /// Replicate one or two keys on some seeds.
    replication: bool,
}

/// A random sampling run: configuration, scripts and what the keys must end with.
struct Case {
    cfg: SimConfig,
    scripts: Vec<(WorkerRef, Vec<Op>)>,
    /// Per key, the sum of every push to it: its value at the end (there are no sets).
    expected: Vec<Vec<f32>>,
    /// Replicated keys, sorted.
    replicated: Vec<Key>,
}

/// 2–4 nodes of 1–2 workers over 4–12 keys, 1–3 samplers (the first one's scheme cycling with
/// the seed), dynamic allocation on most seeds (always for a `sampling_node` run), random delays,
/// pauses, partitioning, location caches and fast local access. Each worker runs 12–24 random
/// ops — samplings in one go or spread over the script, pushes of 1 to 4 per value (mostly to
/// keys of a sampler's support), pulls, localizes, pauses and waits — then `WaitAll`,
/// `Barrier`, `SyncReplicas` if keys are replicated, and a pull of every key.
fn sampling_case(seed: u64, shape: Shape) -> Case {
    let mut rng = test_rng(seed ^ 0x5a3_91e);
    let nodes = rng.random_range(2..=4);
    let workers_per_node = rng.random_range(1..=2);
    let (space, num_keys, mut support) = space_and_support(&mut rng);
    let samplers: Vec<SamplerSpec> = match shape.scheme {
        Some(s) => {
            let on = support(&mut rng);
            vec![random_sampler(&mut rng, on, s)]
        }
        None => (0..rng.random_range(1..=3u64))
            .map(|i| {
                let which = if i == 0 { seed } else { rng.random() };
                let s = scheme(&mut rng, which);
                let on = support(&mut rng);
                random_sampler(&mut rng, on, s)
            })
            .collect(),
    };
    let dynamic = shape.sampling_node.is_some() || rng.random_bool(0.85);
    let mut replicated: Vec<Key> = Vec::new();
    if shape.replication && rng.random_bool(0.3) {
        let count = rng.random_range(1..=2);
        replicated = sample(&mut rng, num_keys as usize, count)
            .into_iter()
            .map(|k| k as Key)
            .collect();
        replicated.sort_unstable();
    }
    let min_delay = rng.random_range(0..=2_000);
    let mut cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_partitioning(if rng.random_bool(0.5) {
            Partitioning::Range
        } else {
            Partitioning::Hash
        })
        .with_fast_local_access(rng.random_bool(0.7))
        .with_dynamic(dynamic)
        .with_location_caches(dynamic && rng.random_bool(0.4))
        .with_delay(min_delay, min_delay + rng.random_range(1..=60_000))
        .with_think(0, rng.random_range(0..=20_000));
    if !replicated.is_empty() {
        cfg = cfg.with_replication(replicated.clone(), rng.random_range(5_000..=100_000));
    }
    cfg.samplers = samplers;
    let mut expected: Vec<Vec<f32>> = (0..num_keys).map(|k| vec![0.0; space.len(k)]).collect();
    let mut scripts = Vec::new();
    for n in 0..nodes {
        for w in 0..workers_per_node {
            let samples = shape.sampling_node.is_none_or(|s| s == n);
            let mut script = random_ops(&mut rng, &cfg, shape, samples, &mut expected);
            script.extend([Op::WaitAll, Op::Barrier]);
            if !replicated.is_empty() {
                script.push(Op::SyncReplicas);
            }
            script.push(Op::pull((0..num_keys).collect::<Vec<_>>()));
            scripts.push((WorkerRef::new(n, w), script));
        }
    }
    Case {
        cfg,
        scripts,
        expected,
        replicated,
    }
}

/// One worker's random ops (see [`sampling_case`]); pushes are added into `sums`. A worker
/// that `samples` keeps track of its open handle so that every `PullSample` asks for at most
/// what is left (a refused call would be a script error here).
fn random_ops(
    rng: &mut ChaCha8Rng,
    cfg: &SimConfig,
    shape: Shape,
    samples: bool,
    sums: &mut [Vec<f32>],
) -> Vec<Op> {
    let all: Vec<Key> = (0..sums.len() as Key).collect();
    let supports: Vec<Vec<Key>> = cfg
        .samplers
        .iter()
        .map(|s| {
            let support = *s.distribution.support();
            (0..support.len).map(|i| support.key(i)).collect()
        })
        .collect();
    let pick = |rng: &mut ChaCha8Rng, from: &[Key]| -> Vec<Key> {
        let n = rng.random_range(1..=from.len().min(3));
        sample(rng, from.len(), n)
            .into_iter()
            .map(|i| from[i])
            .collect()
    };
    let mut open: Option<usize> = None;
    let mut script = Vec::new();
    for _ in 0..rng.random_range(12..=24) {
        let wait = rng.random_bool(0.5);
        let op = match rng.random_range(0..20) {
            0..7 if samples => match open {
                Some(left) if left > 0 && rng.random_bool(0.7) => {
                    let n = rng.random_range(1..=left);
                    open = Some(left - n);
                    Op::PullSample { n, wait }
                }
                Some(_) => {
                    open = None;
                    Op::FinishSample
                }
                None => {
                    let sampler = rng.random_range(0..cfg.samplers.len());
                    let spec = &cfg.samplers[sampler];
                    let most = if spec.with_replacement {
                        5
                    } else {
                        spec.distribution.reachable().min(5) as usize
                    };
                    // Now and then an empty sampling (a pool still prefetches).
                    let n = if rng.random_bool(0.05) {
                        0
                    } else {
                        rng.random_range(1..=most)
                    };
                    let sampler = sampler as u32;
                    if rng.random_bool(0.5) {
                        Op::Sample { sampler, n, wait }
                    } else {
                        open = Some(n);
                        Op::PrepareSample { sampler, n }
                    }
                }
            },
            0..13 => {
                // Mostly keys a sampler draws, so pushes race with sampled reads.
                let from = if rng.random_bool(0.7) {
                    &supports[rng.random_range(0..supports.len())]
                } else {
                    &all
                };
                let keys = pick(rng, from);
                let mut vals = Vec::new();
                for &k in &keys {
                    for slot in sums[k as usize].iter_mut() {
                        let v = f32::from(rng.random_range(1u8..=4));
                        *slot += v;
                        vals.push(v);
                    }
                }
                Op::Push { keys, vals, wait }
            }
            13..18 if shape.sampling_node.is_some() && samples => {
                Op::Sleep(rng.random_range(0..=30_000))
            }
            13..16 => Op::Pull {
                keys: pick(rng, &all),
                wait,
            },
            16..18 if cfg.dynamic && shape.sampling_node.is_none() => Op::Localize {
                keys: pick(rng, &all),
                wait,
            },
            18 => Op::WaitAll,
            _ => Op::Sleep(rng.random_range(0..=30_000)),
        };
        script.push(op);
    }
    if open.is_some() {
        script.push(Op::FinishSample);
    }
    script
}

/// Runs a fault-free case and checks what every such run must satisfy: every op succeeded,
/// single holders recorded by their homes, every key's final value (in the stores and in every
/// worker's last pull) is the exact sum of its pushes, the history is linearizable per key, and
/// the sampling figures agree with the front ends' counters ([`check_sampling_stats`]).
fn run_checked(seed: u64, case: Case) -> Sim {
    let sim = run_fault_free(seed, case.cfg, case.scripts);
    let history = sim.history();
    sim.check_quiescent_placement()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let finals = finals(&sim);
    for (k, want) in case.expected.iter().enumerate() {
        if case.replicated.binary_search(&(k as Key)).is_err() {
            let got = finals[k].as_ref();
            assert_eq!(got, Some(want), "seed {seed}: final value of key {k}");
        }
    }
    check_final_sums_exact(history, &finals).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let want = Outcome::Pulled(case.expected.concat());
    for w in sim.workers() {
        let last = history.of_worker(w).last().unwrap();
        assert_eq!(last.outcome, want, "seed {seed}: final pull of {w}");
    }
    check_linearizable(history, consistency(sim.config(), false), Some(&finals))
        .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    check_sampling_stats(&sim, seed);
    sim
}

/// Per worker: no sampling call was refused; the samples the simulator saw drawn are the front
/// end's `sampled_keys`; without fast local access every sample is read by a message, and with
/// it the samples of `local` samplers that were read by a message are exactly the fallbacks the
/// front end counted (a key held here is read from the store, never sent for); `naive` and
/// `local` never localize, nor does anything under static allocation.
fn check_sampling_stats(sim: &Sim, seed: u64) {
    let cfg = sim.config();
    for w in sim
        .workers()
        .into_iter()
        .filter(|w| !sim.is_crashed(w.node))
    {
        let counters = sim.worker_counters(w);
        let (mut drawn, mut local_remote) = (0, 0);
        for (i, spec) in cfg.samplers.iter().enumerate() {
            let s = sim.sample_stats(w, i as u32);
            assert_eq!(s.refused, 0, "seed {seed}: {w}, sampler {i}: {s:?}");
            drawn += s.samples;
            if !cfg.fast_local_access {
                assert_eq!(s.remote_samples, s.samples, "seed {seed}: {w}, sampler {i}");
            }
            let moves = matches!(spec.scheme, Scheme::Preloc | Scheme::Pool { .. });
            if !moves || !cfg.dynamic {
                assert_eq!(s.localized_keys, 0, "seed {seed}: {w}, sampler {i}: {s:?}");
            }
            if let Scheme::Local { .. } = spec.scheme {
                local_remote += s.remote_samples;
            }
        }
        assert_eq!(
            counters.sampled_keys.load(Relaxed),
            drawn,
            "seed {seed}: {w}"
        );
        if cfg.fast_local_access {
            let fallbacks = counters.sample_fallbacks.load(Relaxed);
            assert_eq!(
                local_remote, fallbacks,
                "seed {seed}: {w}: `local` samples sent to the node vs fallbacks counted"
            );
        }
    }
}

/// A scheme's name without the pool's reuse count: one of six.
fn family(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Naive => "naive",
        Scheme::Preloc => "preloc",
        Scheme::Pool { postpone: true, .. } => "pool",
        Scheme::Pool {
            postpone: false, ..
        } => "pool:strict",
        Scheme::Local { next: false } => "local",
        Scheme::Local { next: true } => "local:next",
    }
}

/// Counts the samplings of a history by scheme, for the summary line.
fn tally(sim: &Sim, by_scheme: &mut BTreeMap<&'static str, (u64, u64)>) {
    for w in sim.workers() {
        for (i, spec) in sim.config().samplers.iter().enumerate() {
            let s = sim.sample_stats(w, i as u32);
            let entry = by_scheme.entry(family(spec.scheme)).or_default();
            entry.0 += s.samples;
            entry.1 += s.remote_samples;
        }
    }
}

/// The main random test: every scheme and distribution, relocations racing with the samplers'
/// own, replicated keys on some seeds, no faults.
#[test]
fn random_sampling_runs_are_linearizable_with_exact_sums() {
    let started = std::time::Instant::now();
    let count = seeds(default_seeds()).len();
    let shape = Shape {
        replication: true,
        ..Shape::default()
    };
    let (mut by_scheme, mut relocations, mut replicated_runs) = (BTreeMap::new(), 0, 0);
    for_each_seed(default_seeds(), |seed| {
        let case = sampling_case(seed, shape);
        replicated_runs += u64::from(!case.replicated.is_empty());
        let sim = run_checked(seed, case);
        if seed % 200 == 0 {
            // Sampling draws from the nodes' seeds and the pools run in virtual time: a seed
            // replays bit for bit.
            let again = run_checked(seed, sampling_case(seed, shape));
            assert_eq!(
                (again.trace_hash(), again.steps()),
                (sim.trace_hash(), sim.steps()),
                "seed {seed}: the replay diverged"
            );
        }
        relocations += total(&sim, |c| &c.relocations_in);
        tally(&sim, &mut by_scheme);
    });
    eprintln!(
        "{count} seeds in {:.1?}: {relocations} relocations, {replicated_runs} runs with \
         replicated keys; (samples, read remotely) by scheme: {by_scheme:?}",
        started.elapsed()
    );
    if count >= 100 {
        assert_eq!(by_scheme.len(), 6, "every scheme ran: {by_scheme:?}");
        for (scheme, (samples, _)) in &by_scheme {
            assert!(*samples > 100, "{scheme}: only {samples} samples");
        }
        assert!(relocations > 0 && replicated_runs > 0);
    }
}

/// Faults: a crash, a broken connection or lossy links at a random point of a random run
/// (no replicated keys). Nothing hangs, every failure is `PeerGone`, the history stays
/// linearizable, and every key still held somewhere ends with all successful pushes and only
/// some of those that failed (never a lost success or a double application).
#[test]
fn random_sampling_runs_under_faults_lose_only_failed_pushes() {
    let mut verdicts: BTreeMap<&str, u64> = BTreeMap::new();
    let mut failed = 0;
    for_each_seed(default_seeds() / 5, |seed| {
        let mut case = sampling_case(seed, Shape::default());
        let mut rng = test_rng(seed ^ 0xfa_0175);
        let nodes = case.cfg.nodes;
        let fault = rng.random_range(0..3);
        if fault == 0 {
            case.cfg = case
                .cfg
                .with_drop_probability(rng.random_range(0.002..0.02));
        }
        let mut sim = Sim::new(case.cfg);
        for (w, script) in case.scripts {
            sim.add_script(w, script);
        }
        sim.run_steps(rng.random_range(0..400));
        let a = NodeId(rng.random_range(0..nodes));
        let b = NodeId((a.0 + rng.random_range(1..nodes)) % nodes);
        match fault {
            1 => sim.crash(a),
            2 => sim.drop_link(a, b),
            _ => {}
        }
        run_to_end(seed, &mut sim);
        let history = sim.history();
        for op in common::surviving_ops(&sim) {
            assert!(op.ret.is_some(), "seed {seed}: never returned: {op}");
            if let Some(err) = op.error() {
                failed += 1;
                let peer_gone = matches!(err, OpError::PeerGone { .. });
                assert!(peer_gone, "seed {seed}: {op}");
            }
        }
        let finals = finals(&sim);
        check_linearizable(history, Consistency::linearizable(), Some(&finals))
            .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        for v in final_sums(history, &finals) {
            let name = match v.verdict {
                FinalVerdict::Exact => "exact",
                FinalVerdict::WithinLosses { .. } => "within losses",
                FinalVerdict::Ambiguous(_) => "ambiguous",
                FinalVerdict::Vanished => "vanished",
                FinalVerdict::Wrong(w) => panic!("seed {seed}: key {}: {w}", v.key),
            };
            *verdicts.entry(name).or_default() += 1;
        }
        check_sampling_stats(&sim, seed);
    });
    eprintln!("under faults: {failed} ops failed with PeerGone; final values {verdicts:?}");
}

/// Each scheme's promise about placement, where it can be checked exactly: only one node
/// samples (one sampler, of each scheme in turn), its workers pull nothing else until their last
/// pull, and nobody localizes, so the sampler alone decides where keys go.
/// - `preloc` and `pool`: every key drawn ends on the sampling node (it was there, or was
///   localized by the prepare that drew it, and nothing moved it away);
/// - `naive` and `local`: no key moves at all;
/// - `local` (with fast local access: read by a message exactly what it counted as a
///   fallback): every sample drawn that the sampling node does not hold is a fallback, and with
///   replacement, or under `local:next` (which scans the whole support), only those are;
///   `local:next` with replacement takes a held key whenever the node holds one of the support
///   (exactly in dense spaces: in a sparse one a key is held only once it was created).
#[test]
fn schemes_keep_their_placement_promises() {
    let mut moved: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut held_fallbacks = 0;
    for_each_seed(default_seeds() / 2, |seed| {
        let mut rng = test_rng(seed ^ 0x91_ace);
        let scheme = scheme(&mut rng, seed);
        let shape = Shape {
            sampling_node: Some(rng.random_range(0..2)),
            scheme: Some(scheme),
            replication: false,
        };
        let s = NodeId(shape.sampling_node.unwrap());
        let sim = run_checked(seed, sampling_case(seed, shape));
        let cfg = sim.config();
        let spec = &cfg.samplers[0];
        let history = sim.history();
        // The sampling node's pulls before each worker's last are its samples.
        let mut drawn: Vec<Key> = Vec::new();
        let sampling_workers: Vec<WorkerRef> =
            sim.workers().into_iter().filter(|w| w.node == s).collect();
        for &w in &sampling_workers {
            let ops: Vec<_> = history.of_worker(w).collect();
            let samples = ops[..ops.len() - 1]
                .iter()
                .filter(|op| op.kind == OpKind::Pull);
            drawn.extend(samples.flat_map(|op| op.keys.iter().copied()));
        }
        let sampled: u64 = sampling_workers
            .iter()
            .map(|&w| sim.sample_stats(w, 0).samples)
            .sum();
        assert_eq!(drawn.len() as u64, sampled, "seed {seed}");
        let relocations = total(&sim, |c| &c.relocations_in);
        let entry = moved.entry(family(scheme)).or_default();
        entry.0 += drawn.len() as u64;
        entry.1 += relocations;
        let held = |k: Key| sim.holders(k) == [s];
        // Every sample is a key of the support; one the distribution can draw, except under
        // `local:next`, which takes the next held key of the support whatever its weight.
        let dist = &spec.distribution;
        for &k in &drawn {
            let position = dist.support().position(k);
            let p = position.map_or(0.0, |i| dist.probability(i));
            assert!(
                position.is_some(),
                "seed {seed}: key {k} is not in {dist:?}"
            );
            assert!(
                p > 0.0,
                "seed {seed}: {scheme} drew key {k} of probability zero"
            );
        }
        match scheme {
            Scheme::Preloc | Scheme::Pool { .. } => {
                for &k in &drawn {
                    let holders = sim.holders(k);
                    assert!(
                        held(k),
                        "seed {seed}: {scheme} drew key {k} on {s}, now held by {holders:?}"
                    );
                }
                if let Scheme::Pool { .. } = scheme {
                    let pool = sim.node(s).samplers().pool_counters(SamplerId(0));
                    let groups = pool.map_or(0, |p| p.groups);
                    assert!(drawn.is_empty() || groups > 0, "seed {seed}: {pool:?}");
                }
            }
            Scheme::Naive | Scheme::Local { .. } => {
                assert_eq!(relocations, 0, "seed {seed}: {scheme} moved keys");
            }
        }
        if let Scheme::Local { next } = scheme {
            let fallbacks: u64 = sampling_workers
                .iter()
                .map(|&w| sim.worker_counters(w).sample_fallbacks.load(Relaxed))
                .sum();
            let not_held = drawn.iter().filter(|&&k| !held(k)).count() as u64;
            // In a sparse space a key is held only once created (by its first use, the last
            // pulls at the latest): one held at the end may have been a fallback before.
            let exact = (next || spec.with_replacement) && !cfg.space.is_sparse();
            assert!(
                fallbacks >= not_held && (!exact || fallbacks == not_held),
                "seed {seed}: {scheme}: {fallbacks} fallbacks, {not_held} samples not held by {s}"
            );
            if !cfg.space.is_sparse() {
                // Without replacement, `local` may miss a held key in its redraws and fall
                // back to one (read through the node: correct, not free).
                held_fallbacks += fallbacks - not_held;
            }
            let support = *spec.distribution.support();
            let holds_some =
                (0..support.len).any(|i| spec.distribution.can_draw(i) && held(support.key(i)));
            if exact && next && spec.with_replacement && holds_some {
                assert_eq!(fallbacks, 0, "seed {seed}: {s} holds keys of the support");
            }
        }
    });
    eprintln!(
        "(samples drawn, relocations) by scheme: {moved:?}; `local` fallbacks to keys held by \
         then: {held_fallbacks}"
    );
    if seeds(default_seeds() / 2).len() >= 60 {
        for (scheme, (samples, relocations)) in &moved {
            assert!(*samples > 0, "{scheme} drew nothing");
            let moves = scheme.starts_with("preloc") || scheme.starts_with("pool");
            assert!(!moves || *relocations > 0, "{scheme} never localized");
        }
    }
}

/// A scripted sampling: a `preloc` sampling of the four keys of node 1 by node 0 records one
/// asynchronous localize of those keys and two pulls of two of them each (the first
/// asynchronous), reads the values pushed before, and leaves the keys on node 0; a `local:next`
/// sampling then reads them from node 0's store; refused calls record nothing.
#[test]
fn a_sampling_records_its_localize_and_its_pulls() {
    let space = KeySpace::uniform(8, 1).unwrap();
    let theirs = Support::range(4..8); // range partitioning: keys 4 to 7 live on node 1
    let spec = |scheme| SamplerSpec {
        with_replacement: false,
        ..SamplerSpec::new(Distribution::uniform(theirs).unwrap(), scheme)
    };
    let mut cfg = SimConfig::new(2, 1, space)
        .with_dynamic(true)
        .with_delay(10_000, 10_000);
    cfg.samplers = vec![spec(Scheme::Preloc), spec(Scheme::Local { next: true })];
    let mut sim = Sim::new(cfg);
    let (w0, w1) = (WorkerRef::new(0, 0), WorkerRef::new(1, 0));
    sim.add_script(
        w1,
        [
            Op::push(vec![4, 5, 6, 7], vec![1.0, 2.0, 3.0, 4.0]),
            Op::Barrier,
        ],
    );
    sim.add_script(
        w0,
        [
            Op::Barrier,
            Op::sample(0, 4),
            Op::WaitAll,
            Op::sample(1, 2),
            Op::sample(7, 1),
            Op::PrepareSample { sampler: 0, n: 2 },
            Op::PullSample { n: 3, wait: true },
            Op::FinishSample,
        ],
    );
    run_to_end(0, &mut sim);
    let ops: Vec<_> = sim.history().of_worker(w0).collect();
    let kinds: Vec<(OpKind, bool)> = ops.iter().map(|op| (op.kind, op.sync)).collect();
    use OpKind::{Barrier, Localize, Pull};
    let want = [
        (Barrier, true),
        (Localize, false),
        (Pull, false),
        (Pull, true),
    ];
    assert_eq!(kinds[..4], want, "{ops:#?}");
    assert_eq!(kinds[4..], [(Pull, false), (Pull, true)], "{ops:#?}");
    let mut localized = ops[1].keys.clone();
    localized.sort_unstable();
    assert_eq!(localized, [4, 5, 6, 7]);
    let mut sampled = BTreeSet::new();
    for op in &ops[2..4] {
        assert_eq!(op.keys.len(), 2, "{op}");
        let want: Vec<f32> = op.keys.iter().map(|&k| (k - 3) as f32).collect();
        assert_eq!(op.outcome, Outcome::Pulled(want), "{op}");
        sampled.extend(op.keys.iter().copied());
    }
    assert_eq!(sampled.len(), 4, "without replacement: four distinct keys");
    for k in 4..8 {
        assert_eq!(sim.holders(k), [NodeId(0)], "key {k}");
    }
    // The `local:next` sampling found every key here: read in the call, no message.
    for op in &ops[4..] {
        assert!(op.ret.is_some_and(|r| r.time == op.invoke.time), "{op}");
    }
    let (preloc, local) = (sim.sample_stats(w0, 0), sim.sample_stats(w0, 1));
    assert_eq!(
        (preloc.localized_keys, preloc.samples),
        (4, 4),
        "{preloc:?}"
    );
    assert_eq!((preloc.refused, preloc.unpulled), (1, 2), "{preloc:?}");
    assert_eq!((local.samples, local.remote_samples), (2, 0), "{local:?}");
    assert_eq!(sim.sample_stats(w0, 7).refused, 1);
    assert_eq!(sim.worker_counters(w0).sample_fallbacks.load(Relaxed), 0);
}
