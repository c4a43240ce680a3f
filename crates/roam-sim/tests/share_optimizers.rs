//! Server-side optimizers on keys shared by intent (AdaPM shares; `share/sync.rs`,
//! `store/replica_grad.rs`): a `push_gradients` of a key held here as a share replica adds into
//! the replica's accumulator; each share-sync round (and the replica's leave) ships the sum to
//! the owner, which steps its record once with it. Every other push of gradients is a
//! `push_gradient_sums` of aggregates of one (`(g, g²)`), which must act exactly as the
//! gradients (a replica's accumulator takes an aggregate's sums).
//!
//! Random runs (2–4 nodes, 1–2 workers each, 2–8 keys, uniform or per-key lengths, fast local
//! access or not, random delays, think times and sync periods; replicate-only, so keys stay
//! with their first owner while intents come and go): every worker signals overlapping intents
//! on keys its node does not own and pushes gradients of them, before, during and after its
//! replicas exist. Checked:
//! - **stateful (Adagrad, Adam, FTRL):** every step the owner took on a key is logged (a
//!   member's round or leave sum, or a remote push of one gradient). Coordinate 0 of the `j`-th
//!   gradient of a key is `2^(j−8)`, so a step's sum names the gradients in it: the steps'
//!   sets are disjoint and cover every gradient pushed (none lost or stepped twice), and the
//!   owner's final record (visible values and state) is, bit for bit, the optimizer applied
//!   from zeros to the logged sums in order; no node but the owner steps the key;
//! - **SGD:** a run pushing gradients `g` ends, bit for bit, where the same run pushing
//!   `−lr·g` additively ends (a replica takes SGD steps into its delta).
//!
//! Every run ends with no replica left and every operation succeeded.

mod common;

use common::{
    check_tags_cover, random_lengths, random_partitioning, random_stateful_optimizer, run_to_end,
    steps_only_at, tagged_gradient, test_rng, total, workers_of,
};
use rand::Rng;
use roam_core::{IntentTechniques, Key, NodeId, Optimizer, Residency};
use roam_sim::{Op, Sim, SimConfig, WorkerRef, for_each_seed};

fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 100 } else { 1_000 }
}

/// Most gradients one key gets (coordinate 0 tags them with distinct powers of two).
const MAX_PER_KEY: usize = 24;

struct Case {
    cfg: SimConfig,
    scripts: Vec<(WorkerRef, Vec<Op>)>,
    /// Per key, the gradients pushed (in tag order).
    pushed: Vec<Vec<Vec<f32>>>,
    /// Per key, its owner (fixed: replicate-only).
    owner: Vec<NodeId>,
}

/// The random case of `seed` under `optimizer`, or, with `additive`, the same case pushing
/// `−lr·g` additively (SGD only).
fn case(seed: u64, stateful: bool, additive: bool) -> Case {
    let mut rng = test_rng(seed ^ 0x05_4a2e_0a11);
    let nodes = rng.random_range(2..=4);
    let workers_per_node = rng.random_range(1..=2);
    let num_keys: u64 = rng.random_range(2..=8);
    let optimizer = if !stateful {
        Optimizer::sgd(0.25)
    } else {
        random_stateful_optimizer(&mut rng)
    };
    let space = random_lengths(&mut rng, num_keys, 3)
        .with_optimizer(optimizer)
        .unwrap();
    let min_delay = rng.random_range(0..=2_000);
    let cfg = SimConfig::new(nodes, workers_per_node, space.clone())
        .with_seed(seed)
        .with_partitioning(random_partitioning(&mut rng))
        .with_dynamic(true)
        .with_fast_local_access(rng.random_bool(0.7))
        .with_intent_techniques(
            IntentTechniques::ReplicateOnly,
            rng.random_range(5_000..=200_000),
        )
        .with_delay(min_delay, min_delay + rng.random_range(1..=80_000))
        .with_think(0, rng.random_range(0..=20_000));
    // The first owners (replicate-only: they stay).
    let sim = Sim::new(cfg.clone());
    let owner: Vec<NodeId> = (0..num_keys)
        .map(|k| {
            (0..nodes)
                .map(NodeId)
                .find(|&n| sim.node(n).store().residency(k) == Residency::Local)
                .expect("every key starts at its home")
        })
        .collect();
    let mut pushed: Vec<Vec<Vec<f32>>> = vec![Vec::new(); num_keys as usize];
    let mut scripts = Vec::new();
    for worker in workers_of(&cfg) {
        // Keys this worker's node does not own: its gradients of them go to the owner (one
        // step each) or into a replica's accumulator.
        let others: Vec<Key> = (0..num_keys)
            .filter(|&k| owner[k as usize] != worker.node)
            .collect();
        let mut script = Vec::new();
        let mut clock = 0u64;
        for _ in 0..rng.random_range(8..=24) {
            if others.is_empty() {
                break;
            }
            let mut keys: Vec<Key> = others
                .iter()
                .copied()
                .filter(|_| rng.random_bool(0.6))
                .collect();
            if keys.is_empty() {
                keys.push(others[rng.random_range(0..others.len())]);
            }
            match rng.random_range(0..10) {
                0..3 => {
                    let start = clock + rng.random_range(0..=3);
                    script.push(Op::Intent {
                        keys,
                        start,
                        end: start + rng.random_range(1..=8),
                    });
                }
                3..4 => script.push(Op::Pull {
                    keys,
                    wait: rng.random_bool(0.5),
                }),
                _ => {
                    keys.retain(|&k| pushed[k as usize].len() < MAX_PER_KEY);
                    if keys.is_empty() {
                        continue;
                    }
                    let (mut grads, mut aggregates) = (Vec::new(), Vec::new());
                    for &k in &keys {
                        let g = tagged_gradient(&mut rng, pushed[k as usize].len(), space.len(k));
                        grads.extend_from_slice(&g);
                        aggregates.extend(g.iter().copied().chain(g.iter().map(|g| g * g)));
                        pushed[k as usize].push(g);
                    }
                    let wait = rng.random_bool(0.5);
                    // Every other push of gradients as aggregates of one (`(g, g²)`): they
                    // must step exactly as the gradients do (decided without the random
                    // generator, so that the additive twin run draws the same script).
                    let as_aggregates = script.len() % 2 == 1;
                    script.push(if additive {
                        let lr = 0.25f32;
                        Op::Push {
                            keys,
                            vals: grads.iter().map(|g| -lr * g).collect(),
                            wait,
                        }
                    } else if as_aggregates {
                        Op::PushGradientSums {
                            keys,
                            aggregates,
                            wait,
                        }
                    } else {
                        Op::PushGradients { keys, grads, wait }
                    });
                }
            }
            if rng.random_bool(0.5) {
                script.push(Op::AdvanceClock);
                clock += 1;
            }
        }
        // Every intent ends: the replicas leave (flushing their sums).
        script.extend((0..12).map(|_| Op::AdvanceClock));
        script.push(Op::WaitAll);
        scripts.push((worker, script));
    }
    Case {
        cfg,
        scripts,
        pushed,
        owner,
    }
}

fn run_case(seed: u64, case: Case) -> (Sim, Vec<Vec<Vec<f32>>>, Vec<NodeId>) {
    let Case {
        cfg,
        scripts,
        pushed,
        owner,
    } = case;
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    for n in 0..nodes {
        sim.node_mut(NodeId(n)).log_replica_steps(true);
    }
    for (w, script) in scripts {
        sim.add_script(w, script);
    }
    run_to_end(seed, &mut sim);
    for op in sim.history().ops() {
        assert!(op.succeeded(), "seed {seed}: {op}");
    }
    assert!(
        sim.warnings().is_empty(),
        "seed {seed}: warnings: {:?}",
        sim.warnings()
    );
    for n in 0..nodes {
        let node = sim.node(NodeId(n));
        assert_eq!(
            (node.shared_replicas(), node.shared_keys()),
            (0, 0),
            "seed {seed}: node {n} still shares keys after every intent ended"
        );
    }
    (sim, pushed, owner)
}

/// Runs and checks one stateful seed; returns (steps, steps that summed several gradients,
/// gradient sums shipped by members).
fn run_stateful(seed: u64) -> (usize, usize, u64) {
    let (sim, pushed, owner) = run_case(seed, case(seed, true, false));
    let space = sim.config().space.clone();
    let optimizer = *space.optimizer().expect("stateful");
    let (mut steps, mut merged) = (0, 0);
    for k in 0..space.num_keys() {
        let len = space.len(k);
        let at = owner[k as usize];
        assert_eq!(
            sim.node(at).store().residency(k),
            Residency::Local,
            "seed {seed}: key {k} left its owner under replicate-only"
        );
        let log = steps_only_at(seed, &sim, k, at, "owner");
        // Conservation: the tags of the steps are disjoint and cover every gradient.
        merged += check_tags_cover(seed, k, &log, pushed[k as usize].len());
        steps += log.len();
        // One optimizer, at the owner: its record is the logged sums applied in order.
        let mut want = vec![0f32; space.record_len(k)];
        for g in &log {
            let (w, state) = want.split_at_mut(len);
            optimizer.step(w, state, g);
        }
        let mut got = Vec::new();
        assert!(sim.node(at).store().remove(k, &mut got));
        assert_eq!(
            got,
            want,
            "seed {seed}: key {k}: the owner's record (visible, then {} state)",
            optimizer.name()
        );
    }
    (steps, merged, total(&sim, |c| &c.share_grad_keys_sent))
}

#[test]
fn stateful_optimizers_on_shared_keys_step_once_per_round_at_the_owner() {
    let (mut steps, mut merged, mut shipped, mut runs) = (0, 0, 0, 0);
    for_each_seed(default_seeds(), |seed| {
        let (s, m, g) = run_stateful(seed);
        steps += s;
        merged += m;
        shipped += g;
        runs += 1;
    });
    eprintln!(
        "{runs} runs: {steps} optimizer steps at owners ({merged} of several gradients), \
         {shipped} gradient sums shipped by members"
    );
    assert!(steps > 0);
    if runs >= 100 {
        assert!(shipped > 0 && merged > 0, "some replicas must ship sums");
    }
}

#[test]
fn sgd_gradients_on_shared_keys_equal_additive_pushes_scaled_by_minus_lr() {
    let mut runs = 0;
    for_each_seed(default_seeds(), |seed| {
        let (grads, ..) = run_case(seed, case(seed, false, false));
        let (adds, ..) = run_case(seed, case(seed, false, true));
        for k in 0..grads.config().space.num_keys() {
            assert_eq!(
                grads.peek(k),
                adds.peek(k),
                "seed {seed}: key {k}: SGD gradients against additive pushes of −lr·g"
            );
        }
        runs += 1;
    });
    eprintln!("{runs} runs: SGD gradients equal additive pushes");
}

/// A gradient pushed while its key's grant is on the way (the key wanted by an intent, the
/// push queued at the wanter) joins the new replica's gradient sum, as one pushed a moment
/// later would: every step the owner takes is a member's round or leave sum, none a remote
/// push of one gradient (issue #17). The pushes follow the intent at once, so most runs queue
/// all of them and the owner steps once.
#[test]
fn gradients_queued_for_a_grant_join_the_replicas_sum() {
    let seeds = if cfg!(debug_assertions) { 40 } else { 200 };
    let (mut runs, mut single_steps) = (0, 0);
    for_each_seed(seeds, |seed| {
        let mut rng = test_rng(seed ^ 0x009a_175e);
        let optimizer = random_stateful_optimizer(&mut rng);
        let len: u32 = rng.random_range(1..=4);
        let space = roam_core::KeySpace::uniform(1, len)
            .unwrap()
            .with_optimizer(optimizer)
            .unwrap();
        let min_delay = rng.random_range(1_000..=5_000);
        let cfg = SimConfig::new(2, 1, space)
            .with_seed(seed)
            .with_dynamic(true)
            .with_intent_techniques(IntentTechniques::ReplicateOnly, 1_000_000)
            .with_delay(min_delay, min_delay + rng.random_range(1..=50_000));
        let mut sim = Sim::new(cfg);
        let owner = (0..2)
            .map(NodeId)
            .find(|&n| sim.node(n).store().residency(0) == Residency::Local)
            .expect("the key starts at its home");
        let member = NodeId(1 - owner.0);
        let pushes = rng.random_range(2..=4);
        let grads: Vec<Vec<f32>> = (0..pushes)
            .map(|tag| tagged_gradient(&mut rng, tag, len as usize))
            .collect();
        let mut script = vec![Op::Intent {
            keys: vec![0],
            start: 0,
            end: 4,
        }];
        // Every other one as an aggregate of itself, `(g, g²)`: queued aggregates join the
        // replica's sum as gradients do.
        script.extend(grads.iter().enumerate().map(|(i, g)| {
            if i % 2 == 0 {
                Op::PushGradients {
                    keys: vec![0],
                    grads: g.clone(),
                    wait: false,
                }
            } else {
                Op::PushGradientSums {
                    keys: vec![0],
                    aggregates: g.iter().copied().chain(g.iter().map(|g| g * g)).collect(),
                    wait: false,
                }
            }
        }));
        script.extend((0..8).map(|_| Op::AdvanceClock));
        script.push(Op::WaitAll);
        sim.node_mut(owner).log_replica_steps(true);
        sim.node_mut(member).log_replica_steps(true);
        sim.add_script(WorkerRef::new(member.0, 0), script);
        run_to_end(seed, &mut sim);
        for op in sim.history().ops() {
            assert!(op.succeeded(), "seed {seed}: {op}");
        }
        let log = steps_only_at(seed, &sim, 0, owner, "owner");
        check_tags_cover(seed, 0, &log, pushes);
        assert_eq!(
            total(&sim, |c| &c.share_grad_steps),
            log.len() as u64,
            "seed {seed}: the owner stepped with something else than members' sums \
             ({pushes} gradients pushed, steps {log:?})"
        );
        assert_eq!(total(&sim, |c| &c.shares_in), 1, "seed {seed}: one grant");
        single_steps += usize::from(log.len() == 1);
        runs += 1;
    });
    eprintln!("{runs} runs: {single_steps} with every gradient in one step");
    if runs >= 20 {
        assert!(
            single_steps * 2 > runs,
            "most runs queue every push for the grant: {single_steps} of {runs}"
        );
    }
}
