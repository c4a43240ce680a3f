//! Replicated keys (NuPS-style, `roam_core::replica`) in the simulator: every node holds a
//! replica of each replicated key, pushes to it are local, background sync rounds on the
//! nodes' timers carry them through the key's hub, and `Op::SyncReplicas` (a collective of
//! every worker) makes every earlier push visible in every replica.
//!
//! Random runs (2–5 nodes, 1–2 workers each, ~16 keys of which ~5 are replicated, static or
//! dynamic allocation, random delays, pauses and sync periods) check that after a sync every
//! replica holds exactly the sum of the pushes (plus the last set), that every read in between
//! is explained by some of the pushes — its own node's and all those older than two sync
//! periods plus two deliveries included — and that the other keys stay linearizable with exact
//! final sums. Other tests here check gradients under SGD and that replicas converge after sets
//! racing with pushes; `replication_timing.rs` bounds the staleness the nodes measure, scripts
//! the eventual visibility of one push, and checks that a sync never hangs when links break.

mod common;

use common::{consistency, finals, run_fault_free, test_rng, total, workers_of};
use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use roam_core::{Key, KeySpace, NodeId, Partitioning};
use roam_sim::{
    Consistency, History, Op, OpKind, OpRecord, Outcome, Sim, SimConfig, WorkerRef,
    check_final_sums_exact, check_linearizable, check_per_key_linearizable, for_each_seed, seeds,
};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 200 } else { 2_000 }
}

/// A random run with replicated keys: configuration, scripts and expected values, all derived
/// from the seed alone.
struct Case {
    cfg: SimConfig,
    scripts: Vec<(WorkerRef, Vec<Op>)>,
    /// The replicated keys, sorted.
    replicated: Vec<Key>,
    /// Per replicated key (in `replicated` order), the sum of the pushes of phase 1: what the
    /// pull right after the first sync must return.
    after_first_sync: Vec<Vec<f32>>,
    /// Per key, the value every worker's last pull must return: the key's set of phase 3 (if
    /// any) plus every push after it (see [`replication_case`]).
    expected: Vec<Vec<f32>>,
    /// Whether the run has home moves.
    home_moves: bool,
}

/// What a random phase may do besides pulls and pushes.
#[derive(Clone, Copy)]
struct Phase {
    /// Sets of keys that are not replicated.
    sets: bool,
    /// Sets of replicated keys too (racing with pushes and other sets).
    replicated_sets: bool,
    /// Localizes (dynamic allocation only).
    moves: bool,
    /// Home moves to random nodes (dynamic allocation only).
    home_moves: bool,
}

/// What the random phases of a run draw from: its key space, node count, replicated keys
/// (sorted) and sync period.
struct Workload<'a> {
    space: &'a KeySpace,
    nodes: u32,
    replicated: &'a [Key],
    period: u64,
}

impl Workload<'_> {
    /// The random ops of one phase of one worker: pulls, pushes (counted into `sums`), and as
    /// `phase` allows sets, localizes and home moves, with waits and pauses mixed in. Batches
    /// name distinct keys, replicated and not alike.
    fn random_phase(
        &self,
        rng: &mut ChaCha8Rng,
        ops: usize,
        phase: Phase,
        sums: &mut [Vec<f32>],
    ) -> Vec<Op> {
        let Self {
            space,
            nodes,
            replicated,
            period,
        } = *self;
        let num_keys = space.num_keys() as usize;
        let mut script = Vec::new();
        for _ in 0..ops {
            let n = rng.random_range(1..=3);
            let mut keys: Vec<Key> = sample(rng, num_keys, n)
                .into_iter()
                .map(|k| k as Key)
                .collect();
            // Make replicated keys frequent (they are about a third of the space).
            if rng.random_bool(0.3) {
                let r = replicated[rng.random_range(0..replicated.len())];
                if !keys.contains(&r) {
                    keys[0] = r;
                }
            }
            let len: usize = keys.iter().map(|&k| space.len(k)).sum();
            let wait = rng.random_bool(0.5);
            let op = match rng.random_range(0..20) {
                0..6 => Op::Pull { keys, wait },
                6..14 => {
                    let vals: Vec<f32> = (0..len)
                        .map(|_| f32::from(rng.random_range(1u8..=4)))
                        .collect();
                    let mut pos = 0;
                    for &k in &keys {
                        for slot in sums[k as usize].iter_mut() {
                            *slot += vals[pos];
                            pos += 1;
                        }
                    }
                    Op::Push { keys, vals, wait }
                }
                14..16 if phase.sets => {
                    let keys: Vec<Key> = keys
                        .into_iter()
                        .filter(|k| phase.replicated_sets || replicated.binary_search(k).is_err())
                        .collect();
                    let len = keys.iter().map(|&k| space.len(k)).sum();
                    let vals = (0..len)
                        .map(|_| f32::from(rng.random_range(0u8..=50)))
                        .collect();
                    Op::Set { keys, vals, wait }
                }
                16..18 if phase.home_moves => Op::MoveHome {
                    key: keys[0],
                    to: rng.random_range(0..nodes),
                    wait,
                },
                16..20 if phase.moves => Op::Localize { keys, wait },
                _ => Op::Sleep(rng.random_range(0..=period.saturating_mul(2))),
            };
            script.push(op);
            if rng.random_bool(0.08) {
                script.push(Op::WaitAll);
            }
        }
        script
    }
}

/// 2–5 nodes (the node count cycles with the seed) of 1–2 workers, 14–18 keys of 1–2 values
/// of which 4–6 are replicated, static or dynamic allocation (with or without location caches
/// and home moves), either partitioning, with or without fast local access, a sync period of
/// 5–200 µs and random delays and pauses. Scripts:
/// 1. random pulls and pushes (and, with a set phase, sets of non-replicated keys; with dynamic
///    allocation, localizes and home moves);
/// 2. `WaitAll`, `SyncReplicas`, a pull of every replicated key, `Barrier`;
/// 3. on half the seeds, one synchronous set per key by a random worker, then `WaitAll`,
///    `SyncReplicas`;
/// 4. random pulls and pushes (no sets);
/// 5. `WaitAll`, `SyncReplicas`, a pull of every key.
fn replication_case(seed: u64) -> Case {
    let mut rng = test_rng(seed ^ 0x4e9_1ca);
    let nodes = 2 + (seed % 4) as u32;
    let workers_per_node = rng.random_range(1..=2);
    let num_keys: u64 = rng.random_range(14..=18);
    let space =
        KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=2)).collect()).unwrap();
    let count = rng.random_range(4..=6);
    let mut replicated: Vec<Key> = sample(&mut rng, num_keys as usize, count)
        .into_iter()
        .map(|k| k as Key)
        .collect();
    replicated.sort_unstable();
    let dynamic = rng.random_bool(0.5);
    let caches = dynamic && rng.random_bool(0.5);
    let home_moves = dynamic && rng.random_bool(0.3);
    let partitioning = if rng.random_bool(0.5) {
        Partitioning::Range
    } else {
        Partitioning::Hash
    };
    // A quarter of the runs start rounds by work too, with periods long against the work
    // clock's 5 ms polls, so that rounds are started by work and the period still bounds them.
    let work_clock = rng.random_bool(0.25);
    let period = if work_clock {
        rng.random_range(10_000_000..=50_000_000)
    } else {
        rng.random_range(5_000..=200_000)
    };
    let min_delay = rng.random_range(0..=2_000);
    let max_delay = min_delay + rng.random_range(1..=80_000);
    let max_think = rng.random_range(0..=20_000);
    let cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_partitioning(partitioning)
        .with_fast_local_access(rng.random_bool(0.5))
        .with_dynamic(dynamic)
        .with_location_caches(caches)
        .with_delay(min_delay, max_delay)
        .with_think(0, max_think)
        .with_replication(replicated.clone(), period);
    // A quarter of the runs hold back small deltas (values pushed are 1 to 4 per component).
    let cfg = match rng.random_range(0..8) {
        0 => cfg.with_min_delta_norm(2.5),
        1 => cfg.with_min_delta_norm(1e6),
        _ => cfg,
    };
    let cfg = if work_clock {
        cfg.with_sync_after_updates(rng.random_range(1..=8))
    } else {
        cfg
    };
    let workload = Workload {
        space: &space,
        nodes,
        replicated: &replicated,
        period,
    };
    let all: Vec<Key> = (0..num_keys).collect();
    let zeros = || -> Vec<Vec<f32>> { all.iter().map(|&k| vec![0.0; space.len(k)]).collect() };
    let with_sets = rng.random_bool(0.5);
    let ops = rng.random_range(10..=25);

    let mut phase1 = zeros();
    let mut scripts: Vec<(WorkerRef, Vec<Op>)> = Vec::new();
    let first = Phase {
        sets: with_sets,
        replicated_sets: false,
        moves: dynamic,
        home_moves,
    };
    for w in workers_of(&cfg) {
        let mut script = workload.random_phase(&mut rng, ops, first, &mut phase1);
        script.extend([
            Op::WaitAll,
            Op::SyncReplicas,
            Op::pull(replicated.clone()),
            Op::Barrier,
        ]);
        scripts.push((w, script));
    }
    let after_first_sync = replicated
        .iter()
        .map(|&k| phase1[k as usize].clone())
        .collect();
    let mut expected = if with_sets {
        let mut fences = zeros();
        for &k in &all {
            let vals: Vec<f32> = (0..space.len(k))
                .map(|_| f32::from(rng.random_range(0u8..=50)))
                .collect();
            fences[k as usize].clone_from(&vals);
            let w = rng.random_range(0..scripts.len());
            scripts[w].1.push(Op::set(vec![k], vals));
        }
        for (_, script) in &mut scripts {
            script.extend([Op::WaitAll, Op::SyncReplicas]);
        }
        fences
    } else {
        phase1
    };
    let last = Phase {
        sets: false,
        ..first
    };
    for (_, script) in &mut scripts {
        script.extend(workload.random_phase(&mut rng, ops, last, &mut expected));
        script.extend([Op::WaitAll, Op::SyncReplicas, Op::pull(all.clone())]);
    }
    Case {
        cfg,
        scripts,
        replicated,
        after_first_sync,
        expected,
        home_moves,
    }
}

/// Checks every pull of a replicated key, synced or not, in a run whose sets of replicated keys
/// are fenced (no push or pull of the key runs concurrently with a set of it) and whose pushes
/// add non-negative integers. A replica is its last set (or zero) plus some subset of the
/// pushes after it, so each value read must be the base plus:
/// - every push of the reader's own node that returned before the read (they went into this
///   very replica),
/// - every push that returned more than `2P + 2D` before the read in virtual time (the
///   staleness bound of `roam_core::replica`: a period to its node's round, a delivery to the
///   hub, a period to the hub's round, a delivery back; timers run while workers do),
/// - and some subset of the other pushes invoked before the read returned (exact per value
///   component: a bitset subset sum).
///
/// Also, on each node, a read that starts after another read of the key returned sees at least
/// as much in every component (a replica only grows between sets). Returns the number of reads
/// checked.
fn check_replica_reads(history: &History, cfg: &SimConfig) -> Result<usize, String> {
    let space = history.space();
    let replication = cfg.replication.as_ref().expect("a replicated run");
    // With a delta threshold, small deltas may stay pending until the next `sync_replicas`:
    // no staleness bound then, only the other properties.
    let stale_bound = if replication.min_delta_norm > 0.0 {
        u64::MAX / 2
    } else {
        2 * replication.sync_every_ns + 2 * cfg.max_delay
    };
    let ops = history.ops();
    let ret_seq = |op: &OpRecord| op.ret.map_or(u64::MAX, |r| r.seq);
    let value_for = |op: &OpRecord, key: Key| -> Vec<f32> {
        let mut sum = vec![0.0f32; space.len(key)];
        for (_, vals) in op.writes(space).filter(|&(k, _)| k == key) {
            match op.kind {
                OpKind::Set => sum.copy_from_slice(vals),
                _ => sum.iter_mut().zip(vals).for_each(|(s, v)| *s += v),
            }
        }
        sum
    };
    let mut checked = 0;
    for &key in &replication.keys {
        let on_key = |kind: OpKind| {
            ops.iter()
                .filter(move |op| op.kind == kind && op.keys.contains(&key))
        };
        let sets: Vec<&OpRecord> = on_key(OpKind::Set).collect();
        let pushes: Vec<&OpRecord> = on_key(OpKind::Push).collect();
        // (node, invoke, return, value) of every read of the key.
        let mut reads: Vec<(NodeId, u64, u64, Vec<f32>)> = Vec::new();
        for read in on_key(OpKind::Pull) {
            let (ri, rr) = (read.invoke, ret_seq(read));
            for (_, observed) in read.reads(space).filter(|&(k, _)| k == key) {
                reads.push((read.worker.node, ri.seq, rr, observed.to_vec()));
                if let Some(s) = sets
                    .iter()
                    .find(|s| s.invoke.seq < rr && ret_seq(s) > ri.seq)
                {
                    return Err(format!("unfenced: set {s} overlaps read {read}"));
                }
                let base_set = sets
                    .iter()
                    .filter(|s| ret_seq(s) < ri.seq)
                    .max_by_key(|s| s.invoke.seq);
                let (mut must, after) = match base_set {
                    Some(s) => (value_for(s, key), ret_seq(s)),
                    None => (vec![0.0; space.len(key)], 0),
                };
                let mut may: Vec<Vec<f32>> = Vec::new();
                for p in pushes.iter().filter(|p| p.invoke.seq < rr) {
                    if p.invoke.seq < after {
                        if ret_seq(p) > base_set.map_or(0, |s| s.invoke.seq) {
                            return Err(format!("unfenced: push {p} overlaps a set"));
                        }
                        continue;
                    }
                    let done_before = p.ret.filter(|r| r.seq < ri.seq);
                    let certain = done_before.is_some_and(|r| {
                        p.worker.node == read.worker.node || r.time.0 + stale_bound < ri.time.0
                    });
                    let v = value_for(p, key);
                    if certain {
                        must.iter_mut().zip(&v).for_each(|(m, v)| *m += v);
                    } else {
                        may.push(v);
                    }
                }
                for c in 0..must.len() {
                    let target = observed[c] - must[c];
                    let items: Vec<u32> = may.iter().map(|v| v[c] as u32).collect();
                    if !subset_sum(&items, target) {
                        return Err(format!(
                            "{read} read {} from key {key} (component {c}): the base and the \
                             certain pushes give {}, and no subset of {items:?} makes up the rest",
                            observed[c], must[c]
                        ));
                    }
                }
                checked += 1;
            }
        }
        // Monotone per node between sets (sets are fenced: compare reads on one side of each).
        for (i, (node, ri, _, value)) in reads.iter().enumerate() {
            let epoch = |at: u64| sets.iter().filter(|s| ret_seq(s) < at).count();
            for (node2, ri2, rr2, value2) in &reads[..i] {
                if node2 == node
                    && rr2 < ri
                    && epoch(*ri2) == epoch(*ri)
                    && value2.iter().zip(value).any(|(a, b)| a > b)
                {
                    return Err(format!(
                        "key {key} on {node}: read {value:?} after an earlier read returned \
                         {value2:?}"
                    ));
                }
            }
        }
    }
    Ok(checked)
}

/// Whether some subset of `items` sums to `target` (a non-negative integer).
fn subset_sum(items: &[u32], target: f32) -> bool {
    if target < 0.0 || target.fract() != 0.0 {
        return false;
    }
    let target = target as usize;
    let mut reach = vec![false; target + 1];
    reach[0] = true;
    for &item in items {
        let item = item as usize;
        for t in (item..=target).rev() {
            reach[t] |= reach[t - item];
        }
    }
    reach[target]
}

/// Runs one random case and checks everything (see the module docs). Returns the finished run
/// and the number of reads of replicated keys checked.
fn run_replication_case(seed: u64) -> (Sim, usize) {
    run_case(seed, replication_case(seed))
}

/// Runs `case` (a [`replication_case`], possibly transformed) and checks it.
fn run_case(seed: u64, case: Case) -> (Sim, usize) {
    let sim = run_fault_free(seed, case.cfg, case.scripts);
    let (cfg, history) = (sim.config(), sim.history());
    for n in 0..cfg.nodes {
        let node = sim.node(NodeId(n));
        assert_eq!(node.replicated_keys(), &case.replicated[..], "seed {seed}");
        assert!(
            case.replicated.iter().all(|&k| node.is_replicated(k)),
            "seed {seed}"
        );
        // A round at time 0 and one per sync at least.
        assert!(node.replica_rounds() >= 3, "seed {seed}: node {n}");
    }
    // The pull right after the first sync sees exactly the pushes before it, on every node.
    let want_first: Vec<f32> = case.after_first_sync.concat();
    let want_last: Vec<f32> = case.expected.concat();
    for w in sim.workers() {
        let ops: Vec<_> = history.of_worker(w).collect();
        let sync = ops
            .iter()
            .position(|op| op.kind == OpKind::SyncReplicas)
            .expect("every script syncs");
        assert_eq!(
            ops[sync + 1].outcome,
            Outcome::Pulled(want_first.clone()),
            "seed {seed}: {w}'s pull of the replicated keys {:?} after the first sync",
            case.replicated
        );
        assert_eq!(
            ops.last().unwrap().outcome,
            Outcome::Pulled(want_last.clone()),
            "seed {seed}: {w}'s final pull of every key (replicated: {:?})",
            case.replicated
        );
    }
    // Every replica, read from every node's store, holds the exact sum.
    for n in 0..cfg.nodes {
        for &k in &case.replicated {
            let mut out = vec![0.0; cfg.space.len(k)];
            let store = sim.node(NodeId(n)).store();
            assert!(store.has_replica(k), "seed {seed}: node {n}, key {k}");
            assert!(store.pull_local(k, &mut out));
            assert_eq!(
                out, case.expected[k as usize],
                "seed {seed}: node {n}'s replica of key {k}"
            );
        }
    }
    // The other keys: single holders recorded by their homes, exact sums, linearizable.
    sim.check_quiescent_placement()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let finals = finals(&sim);
    for k in (0..cfg.space.num_keys()).filter(|k| case.replicated.binary_search(k).is_err()) {
        assert_eq!(
            finals[k as usize].as_ref(),
            Some(&case.expected[k as usize]),
            "seed {seed}: final value of key {k}"
        );
    }
    let checked =
        check_final_sums_exact(history, &finals).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(
        checked as u64,
        cfg.space.num_keys() - case.replicated.len() as u64,
        "seed {seed}: the final sums cover exactly the keys that are not replicated"
    );
    check_per_key_linearizable(history).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    let reads = check_replica_reads(history, cfg).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let opts = consistency(cfg, case.home_moves);
    check_linearizable(history, opts, Some(&finals)).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    (sim, reads)
}

#[test]
fn random_runs_sum_replicated_keys_exactly_after_a_sync_and_keep_the_others_linearizable() {
    let n = seeds(default_seeds()).len();
    let (mut rounds, mut sent, mut received, mut by_nodes) = (0, 0, 0, [0u64; 6]);
    let mut reads = 0;
    for_each_seed(default_seeds(), |seed| {
        let (sim, checked) = run_replication_case(seed);
        reads += checked;
        if seed % 100 == 0 {
            // Sync rounds run on the nodes' timers, in virtual time: a seed replays bit for bit.
            let (again, _) = run_replication_case(seed);
            assert_eq!(
                (again.trace_hash(), again.order_hash(), again.steps()),
                (sim.trace_hash(), sim.order_hash(), sim.steps()),
                "seed {seed}: the replay diverged"
            );
        }
        rounds += total(&sim, |c| &c.replica_rounds);
        sent += total(&sim, |c| &c.replica_keys_sent);
        received += total(&sim, |c| &c.replica_keys_received);
        by_nodes[sim.config().nodes as usize] += 1;
    });
    eprintln!(
        "{n} seeds (by node count {:?}): {rounds} sync rounds, {sent} deltas sent to hubs, \
         {received} primaries received, {reads} reads of replicated keys checked",
        &by_nodes[2..]
    );
    if n >= 100 {
        assert!(
            by_nodes[2..].iter().all(|&c| c > 0),
            "every node count runs"
        );
        assert!(sent > 0 && received > 0, "replicas must sync through hubs");
    }
}

/// SGD's `push_gradients` on replicated keys steps each replica and travels in its delta like
/// a push: the random runs above, with every push turned into the gradient whose SGD step it is
/// (`lr = 0.5`, `g = −2·v`, exact), pass the same checks (exact sums after each sync in every
/// replica, reads explained by the pushes, the other keys linearizable).
#[test]
fn sgd_gradients_on_replicated_keys_sum_like_pushes() {
    for_each_seed(default_seeds() / 4, |seed| {
        let mut case = replication_case(seed);
        case.cfg.space = case
            .cfg
            .space
            .clone()
            .with_optimizer(roam_core::Optimizer::sgd(0.5))
            .unwrap();
        for (_, script) in &mut case.scripts {
            for op in script.iter_mut() {
                if let Op::Push { keys, vals, wait } = op {
                    *op = Op::PushGradients {
                        keys: std::mem::take(keys),
                        grads: vals.iter().map(|v| -2.0 * v).collect(),
                        wait: *wait,
                    };
                }
            }
        }
        run_case(seed, case);
    });
}

/// Sets of replicated keys racing with pushes and with each other: a set overwrites the
/// primary at the hub, and pushes not yet applied there land on top of it. After a sync (and
/// before anyone pushes again: a barrier follows) every replica holds the same value — some
/// set's value (or zero) plus some of the pushes — and the pushes after that sync then add up
/// exactly.
#[test]
fn replicas_converge_after_a_sync_even_with_concurrent_sets() {
    let mut sets = 0;
    for_each_seed(default_seeds() / 4, |seed| {
        let mut rng = test_rng(seed ^ 0xc0_5e75);
        let nodes = 2 + (seed % 4) as u32;
        let num_keys: u64 = 16;
        let space =
            KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=2)).collect()).unwrap();
        let mut replicated: Vec<Key> = sample(&mut rng, num_keys as usize, 5)
            .into_iter()
            .map(|k| k as Key)
            .collect();
        replicated.sort_unstable();
        let dynamic = rng.random_bool(0.5);
        let period = rng.random_range(5_000..=200_000);
        let max_delay = rng.random_range(1..=80_000);
        let cfg = SimConfig::new(nodes, rng.random_range(1..=2), space.clone())
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash)
            .with_fast_local_access(rng.random_bool(0.5))
            .with_dynamic(dynamic)
            .with_delay(0, max_delay)
            .with_think(0, rng.random_range(0..=20_000))
            .with_replication(replicated.clone(), period);
        let workload = Workload {
            space: &space,
            nodes,
            replicated: &replicated,
            period,
        };
        let zeros =
            || -> Vec<Vec<f32>> { (0..num_keys).map(|k| vec![0.0; space.len(k)]).collect() };
        let (mut racing, mut after) = (zeros(), zeros());
        let racy = Phase {
            sets: true,
            replicated_sets: true,
            moves: dynamic,
            home_moves: false,
        };
        let additive = Phase {
            sets: false,
            ..racy
        };
        let mut scripts = Vec::new();
        for w in workers_of(&cfg) {
            let ops = rng.random_range(10..=30);
            let mut script = workload.random_phase(&mut rng, ops, racy, &mut racing);
            script.extend([
                Op::WaitAll,
                Op::SyncReplicas,
                Op::pull(replicated.clone()),
                Op::Barrier,
            ]);
            script.extend(workload.random_phase(&mut rng, ops, additive, &mut after));
            script.extend([Op::WaitAll, Op::SyncReplicas, Op::pull(replicated.clone())]);
            scripts.push((w, script));
        }
        let sim = run_fault_free(seed, cfg, scripts);
        let history = sim.history();
        // Every worker's pull after the first sync, and every worker's last pull.
        let syncs: Vec<(Vec<f32>, Vec<f32>)> = sim
            .workers()
            .into_iter()
            .map(|w| {
                let ops: Vec<&OpRecord> = history.of_worker(w).collect();
                let first = ops
                    .iter()
                    .position(|op| op.kind == OpKind::SyncReplicas)
                    .unwrap();
                let pulled = |op: &OpRecord| match &op.outcome {
                    Outcome::Pulled(v) => v.clone(),
                    other => panic!("seed {seed}: {other:?}"),
                };
                (pulled(ops[first + 1]), pulled(ops.last().unwrap()))
            })
            .collect();
        let (converged, last) = &syncs[0];
        for (i, s) in syncs.iter().enumerate() {
            assert_eq!(
                &s.0, converged,
                "seed {seed}: worker {i} after the first sync"
            );
            assert_eq!(&s.1, last, "seed {seed}: worker {i} at the end");
        }
        // The converged value: a set's value (or zero) plus some of the pushes.
        let mut at = 0;
        for &k in &replicated {
            let len = space.len(k);
            let value = &converged[at..at + len];
            let wrote = |kind: OpKind| {
                history
                    .ops()
                    .iter()
                    .filter(move |op| op.kind == kind)
                    .flat_map(move |op| {
                        op.writes(history.space()).filter(move |&(key, _)| key == k)
                    })
            };
            let pushes: Vec<&[f32]> = wrote(OpKind::Push).map(|(_, v)| v).collect();
            let bases: Vec<Vec<f32>> = std::iter::once(vec![0.0; len])
                .chain(wrote(OpKind::Set).map(|(_, v)| v.to_vec()))
                .collect();
            sets += bases.len() - 1;
            let explained = bases.iter().any(|base| {
                (0..len).all(|c| {
                    let items: Vec<u32> = pushes.iter().map(|p| p[c] as u32).collect();
                    subset_sum(&items, value[c] - base[c])
                })
            });
            assert!(
                explained,
                "seed {seed}: key {k} converged to {value:?}, not a set or zero plus some pushes"
            );
            // Then the pushes after the sync add up exactly, in every node's replica too.
            let want: Vec<f32> = value
                .iter()
                .zip(&after[k as usize])
                .map(|(v, a)| v + a)
                .collect();
            assert_eq!(
                &last[at..at + len],
                &want[..],
                "seed {seed}: key {k} at the end"
            );
            for n in 0..nodes {
                let mut out = vec![0.0; len];
                assert!(sim.node(NodeId(n)).store().pull_local(k, &mut out));
                assert_eq!(out, want, "seed {seed}: node {n}'s replica of key {k}");
            }
            at += len;
        }
        let finals = finals(&sim);
        check_linearizable(history, Consistency::linearizable(), Some(&finals))
            .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    });
    eprintln!("{sets} sets of replicated keys");
}
