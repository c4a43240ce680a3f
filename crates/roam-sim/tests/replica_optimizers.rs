//! Stateful optimizers on replicated keys (`roam_core::replica`, `replica/grads.rs`): a
//! `push_gradients` of a replicated key accumulates at the node; each sync round ships the
//! sums to the key's hub, which steps the primary once per round with the sum of the gradients
//! that reached it, and the new value flows back to every replica. Half the pushes are
//! `push_gradient_sums` of one gradient (`(g, g²)`): an aggregate's sums join the round's sum
//! exactly as the gradient would.
//!
//! Random runs (2–4 nodes, 1–2 workers each, 4–10 keys of which 2–5 are replicated, uniform or
//! per-key lengths, fast local access or not, static or dynamic allocation, random delays,
//! think times and sync periods; Adagrad, Adam or FTRL; a `sync_replicas` halfway and at the
//! end) check, against the hub's log of the steps it took:
//! - **conservation:** each gradient is in exactly one step. Coordinate 0 of the `j`-th gradient
//!   of a key is `2^(j−8)` (exact in `f32` for up to 24 gradients per key), so a step's sum
//!   names the gradients in it; the steps' sets are disjoint and cover every gradient pushed,
//!   and the other coordinates sum exactly;
//! - **one optimizer, at the hub:** the hub's primary record (visible values and state) is,
//!   bit for bit, the optimizer applied from zeros to the logged sums in order;
//! - **replicas read synced values only:** every pull of a replicated key returns one of the
//!   primary's successive values (never a value with a gradient applied locally), and after the
//!   last sync every replica and every final pull hold the last one.
//!
//! SGD is linear and keeps the additive path: `replication.rs`
//! (`sgd_gradients_on_replicated_keys_sum_like_pushes`) checks its exact sums.

mod common;

use common::{
    check_tags_cover, random_lengths, random_partitioning, random_stateful_optimizer,
    steps_only_at, tagged_gradient, test_rng, total, workers_of,
};
use rand::Rng;
use rand::seq::index::sample;
use roam_core::{Key, NodeId, Optimizer};
use roam_sim::{Op, OpKind, Outcome, Sim, SimConfig, for_each_seed};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 100 } else { 2_000 }
}

/// Most gradients one key gets (coordinate 0 tags them with distinct powers of two).
const MAX_PER_KEY: usize = 24;

struct Case {
    cfg: SimConfig,
    scripts: Vec<(roam_sim::WorkerRef, Vec<Op>)>,
    replicated: Vec<Key>,
    /// Per key, the gradients pushed (in tag order).
    pushed: Vec<Vec<Vec<f32>>>,
    optimizer: Optimizer,
}

fn case(seed: u64) -> Case {
    let mut rng = test_rng(seed ^ 0x0a7a_67ad);
    let nodes = rng.random_range(2..=4);
    let workers_per_node = rng.random_range(1..=2);
    let num_keys: u64 = rng.random_range(4..=10);
    let optimizer = random_stateful_optimizer(&mut rng);
    let space = random_lengths(&mut rng, num_keys, 3)
        .with_optimizer(optimizer)
        .unwrap();
    let count = rng.random_range(2..=5.min(num_keys as usize));
    let mut replicated: Vec<Key> = sample(&mut rng, num_keys as usize, count)
        .into_iter()
        .map(|k| k as Key)
        .collect();
    replicated.sort_unstable();
    let period = rng.random_range(5_000..=200_000);
    let min_delay = rng.random_range(0..=2_000);
    let cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_partitioning(random_partitioning(&mut rng))
        .with_fast_local_access(rng.random_bool(0.5))
        .with_dynamic(rng.random_bool(0.5))
        .with_delay(min_delay, min_delay + rng.random_range(1..=80_000))
        .with_think(0, rng.random_range(0..=20_000))
        .with_replication(replicated.clone(), period);
    let mut pushed: Vec<Vec<Vec<f32>>> = vec![Vec::new(); num_keys as usize];
    let mut scripts = Vec::new();
    for worker in workers_of(&cfg) {
        let mut script = Vec::new();
        for phase in 0..2 {
            for _ in 0..rng.random_range(4..=12) {
                let n = rng.random_range(1..=replicated.len());
                let keys: Vec<Key> = sample(&mut rng, replicated.len(), n)
                    .into_iter()
                    .map(|i| replicated[i])
                    .filter(|&k| pushed[k as usize].len() < MAX_PER_KEY)
                    .collect();
                if keys.is_empty() || rng.random_bool(0.3) {
                    let n = rng.random_range(1..=num_keys as usize);
                    let mut keys: Vec<Key> = sample(&mut rng, num_keys as usize, n)
                        .into_iter()
                        .map(|k| k as Key)
                        .collect();
                    keys.sort_unstable();
                    script.push(Op::Pull {
                        keys,
                        wait: rng.random_bool(0.5),
                    });
                    continue;
                }
                let mut grads = Vec::new();
                let as_aggregates = rng.random_bool(0.5);
                for &k in &keys {
                    let g = tagged_gradient(&mut rng, pushed[k as usize].len(), space.len(k));
                    grads.extend_from_slice(&g);
                    if as_aggregates {
                        grads.extend(g.iter().map(|g| g * g));
                    }
                    pushed[k as usize].push(g);
                }
                let wait = rng.random_bool(0.5);
                script.push(if as_aggregates {
                    Op::PushGradientSums {
                        keys,
                        aggregates: grads,
                        wait,
                    }
                } else {
                    Op::PushGradients { keys, grads, wait }
                });
            }
            script.extend([Op::WaitAll, Op::SyncReplicas]);
            if phase == 1 {
                script.push(Op::pull((0..num_keys).collect::<Vec<_>>()));
            }
        }
        scripts.push((worker, script));
    }
    Case {
        cfg,
        scripts,
        replicated,
        pushed,
        optimizer,
    }
}

/// Runs and checks one seed; returns (steps, steps that summed several gradients, pulls of
/// replicated keys checked).
fn run(seed: u64) -> (usize, usize, usize, Sim) {
    let Case {
        cfg,
        scripts,
        replicated,
        pushed,
        optimizer,
    } = case(seed);
    let space = cfg.space.clone();
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    for n in 0..nodes {
        sim.node_mut(NodeId(n)).log_replica_steps(true);
    }
    for (w, script) in scripts {
        sim.add_script(w, script);
    }
    sim.run_until_idle()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for op in sim.history().ops() {
        assert!(op.succeeded(), "seed {seed}: {op:?}");
    }
    let (mut steps, mut merged) = (0, 0);
    // Per replicated key, the primary's successive visible values.
    let mut states: Vec<Vec<Vec<f32>>> = vec![Vec::new(); space.num_keys() as usize];
    for &k in &replicated {
        let len = space.len(k);
        let hub = sim.node(NodeId(0)).hub(k);
        let log = steps_only_at(seed, &sim, k, hub, "hub");
        // Conservation: the tags of the steps are disjoint and cover every gradient, and the
        // other coordinates sum exactly.
        merged += check_tags_cover(seed, k, &log, pushed[k as usize].len());
        let sum_rest = |gs: &mut dyn Iterator<Item = &Vec<f32>>| {
            gs.fold(vec![0f32; len - 1], |mut s, g| {
                s.iter_mut().zip(&g[1..]).for_each(|(s, g)| *s += g);
                s
            })
        };
        assert_eq!(
            sum_rest(&mut log.iter().copied()),
            sum_rest(&mut pushed[k as usize].iter()),
            "seed {seed}: key {k}: summed gradients"
        );
        steps += log.len();
        // One optimizer at the hub: its record is the logged sums applied in order.
        let mut want = vec![0f32; space.record_len(k)];
        states[k as usize].push(want[..len].to_vec());
        for g in &log {
            let (w, state) = want.split_at_mut(len);
            optimizer.step(w, state, g);
            states[k as usize].push(want[..len].to_vec());
        }
        let primaries = sim.node(hub).hub_primaries();
        let got = &primaries
            .iter()
            .find(|(key, _)| *key == k)
            .expect("the hub has the primary")
            .1;
        assert_eq!(
            got,
            &want,
            "seed {seed}: key {k}: the hub's record (visible, then {} state)",
            optimizer.name()
        );
        // After the last sync every replica holds the primary.
        for n in 0..nodes {
            let mut out = vec![0.0; len];
            assert!(sim.node(NodeId(n)).store().pull_local(k, &mut out));
            assert_eq!(
                out,
                want[..len],
                "seed {seed}: node {n}'s replica of key {k}"
            );
        }
    }
    // Every read of a replicated key is one of its primary's values.
    let mut reads = 0;
    for op in sim
        .history()
        .ops()
        .iter()
        .filter(|op| op.kind == OpKind::Pull)
    {
        assert!(matches!(op.outcome, Outcome::Pulled(_)), "seed {seed}");
        for (k, vals) in op.reads(&space) {
            if replicated.binary_search(&k).is_ok() {
                reads += 1;
                assert!(
                    states[k as usize].iter().any(|s| s == vals),
                    "seed {seed}: {op:?} read {vals:?} of key {k}, not a synced value \
                     (the primary's values: {:?})",
                    states[k as usize]
                );
            }
        }
    }
    // The final pulls return the last synced values.
    for w in sim.workers() {
        let last = sim.history().of_worker(w).last().unwrap();
        for (k, vals) in last.reads(&space) {
            if replicated.binary_search(&k).is_ok() {
                assert_eq!(
                    Some(&vals.to_vec()),
                    states[k as usize].last(),
                    "seed {seed}: {w}'s final pull of key {k}"
                );
            }
        }
    }
    (steps, merged, reads, sim)
}

#[test]
fn stateful_optimizers_on_replicated_keys_step_once_per_round_at_the_hub() {
    let (mut steps, mut merged, mut reads, mut rounds, mut runs) = (0, 0, 0, 0, 0);
    for_each_seed(default_seeds(), |seed| {
        let (s, m, r, sim) = run(seed);
        if seed % 200 == 0 {
            let (.., again) = run(seed);
            assert_eq!(
                (again.trace_hash(), again.steps()),
                (sim.trace_hash(), sim.steps()),
                "seed {seed}: the replay diverged"
            );
        }
        steps += s;
        merged += m;
        reads += r;
        rounds += total(&sim, |c| &c.replica_rounds);
        runs += 1;
    });
    eprintln!(
        "{runs} runs: {rounds} sync rounds, {steps} optimizer steps at hubs ({merged} of \
         several gradients), {reads} reads of replicated keys checked"
    );
    assert!(steps > 0 && reads > 0);
    if runs >= 100 {
        assert!(merged > 0, "some rounds must sum several gradients");
    }
}
