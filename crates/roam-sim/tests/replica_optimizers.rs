//! Stateful optimizers on replicated keys (`roam_core::replica`, `replica/grads.rs`): a
//! `push_gradients` of a replicated key accumulates at the node; each sync round ships the
//! sums to the key's hub, which steps the primary once per round with the sum of the gradients
//! that reached it, and the new value flows back to every replica.
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

use common::{test_rng, total, workers_of};
use rand::Rng;
use rand::seq::index::sample;
use roam_core::{Key, KeySpace, NodeId, Optimizer, Partitioning};
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
    let optimizer = match rng.random_range(0..4) {
        0 => Optimizer::adam(0.05),
        1 => Optimizer::Ftrl {
            alpha: 0.1,
            beta: 1.0,
            l1: 0.05,
            l2: 0.01,
        },
        _ => Optimizer::adagrad(0.1),
    };
    let space = match rng.random_range(0..3) {
        0 => KeySpace::uniform(num_keys, rng.random_range(1..=4)).unwrap(),
        1 => KeySpace::uniform(num_keys, 17).unwrap(),
        _ => KeySpace::per_key((0..num_keys).map(|_| rng.random_range(1..=3)).collect()).unwrap(),
    };
    let space = space.with_optimizer(optimizer).unwrap();
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
        .with_partitioning(if rng.random_bool(0.5) {
            Partitioning::Range
        } else {
            Partitioning::Hash
        })
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
                for &k in &keys {
                    let tag = pushed[k as usize].len() as i32;
                    let mut g = vec![2f32.powi(tag - 8)];
                    g.extend((1..space.len(k)).map(|_| rng.random_range(-8i8..=8) as f32 / 4.0));
                    grads.extend_from_slice(&g);
                    pushed[k as usize].push(g);
                }
                script.push(Op::PushGradients {
                    keys,
                    grads,
                    wait: rng.random_bool(0.5),
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
        let log: Vec<&Vec<f32>> = sim
            .node(hub)
            .replica_steps()
            .iter()
            .filter(|(key, _)| *key == k)
            .map(|(_, g)| g)
            .collect();
        for n in (0..nodes).filter(|&n| NodeId(n) != hub) {
            assert!(
                sim.node(NodeId(n))
                    .replica_steps()
                    .iter()
                    .all(|(key, _)| *key != k),
                "seed {seed}: key {k} stepped at node {n}, not its hub {hub:?}"
            );
        }
        // Conservation: the tags of the steps are disjoint and cover every gradient.
        let mut seen = 0u32;
        let mut rest = vec![0f32; len - 1];
        for g in &log {
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
            rest.iter_mut().zip(&g[1..]).for_each(|(r, g)| *r += g);
        }
        let want_rest = pushed[k as usize]
            .iter()
            .fold(vec![0f32; len - 1], |mut s, g| {
                s.iter_mut().zip(&g[1..]).for_each(|(s, g)| *s += g);
                s
            });
        assert_eq!(
            seen,
            ((1u64 << pushed[k as usize].len()) - 1) as u32,
            "seed {seed}: key {k}: the steps cover every gradient once"
        );
        assert_eq!(rest, want_rest, "seed {seed}: key {k}: summed gradients");
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
