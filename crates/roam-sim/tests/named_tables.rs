//! Named tables in the simulator (issue #17): a key space of three tables with different
//! dimensions, optimizers, initializers and kinds (dense and dynamic), addressed by their keys
//! (`table << 56 | id`), under dynamic allocation with relocations and home moves, 2–4 nodes
//! and random delays.
//!
//! Each row's gradients come from one worker, synchronously (the optimizers are stateful, so each
//! row must see one sequence); every worker also pulls, localizes and moves homes of rows of any
//! table, with batches mixing tables (so records of several lengths travel in one message) and
//! batches of one table (its batch loops; optimistic or latched reads). What is exact and checked:
//! every operation succeeds, no warning, no anomaly; every row is held by exactly one node at the
//! end, and its whole record (visible values and its table's optimizer state) is bit-exact equal to
//! its table's initializer row stepped by its gradient sequence with its table's optimizer; every
//! worker's final pull returns the visible values only.

mod common;

use common::{roaming_op, run_fault_free, sole_record, stepped, test_rng, total, workers_of};
use rand::Rng;
use rand::seq::index::sample;
use roam_core::tables::{TableSpec, Tables};
use roam_core::{DynamicPolicy, Initializer, Key, KeySpace, NodeId, Optimizer, Partitioning};
use roam_sim::{Op, Outcome, SimConfig, for_each_seed};

/// 500 seeds in release builds (replay one with `ROAM_SIM_SEED=N`, run more with
/// `ROAM_SIM_SEEDS=N`).
fn default_seeds() -> u64 {
    if cfg!(debug_assertions) { 50 } else { 500 }
}

/// The tables of seed `rng`'s run and the rows its scripts use.
fn space_and_rows(rng: &mut impl Rng) -> (KeySpace, Vec<Key>) {
    let tables = Tables::new(vec![
        TableSpec::dense("user", 4, rng.random_range(1..=4))
            .with_optimizer(Optimizer::adagrad(0.1)),
        // Seeded rows; at dim 17 (every other seed) longer than the store's optimistic
        // lengths, so that the store reads every table under the latch, else optimistically.
        TableSpec::dynamic(
            "item",
            if rng.random_bool(0.5) { 17 } else { 9 },
            DynamicPolicy::default(),
        )
        .with_optimizer(Optimizer::adam(0.05))
        .with_initializer(Initializer::Normal {
            mean: 0.0,
            std: 0.5,
            seed: 11,
        }),
        TableSpec::dense("ctx", 3, 2).with_optimizer(Optimizer::Ftrl {
            alpha: 0.1,
            beta: 1.0,
            l1: 0.05,
            l2: 0.01,
        }),
    ])
    .unwrap();
    let mut rows = Vec::new();
    for table in tables.all() {
        let ids: Vec<u64> = match table.name() {
            "item" => (0..3).map(|_| rng.random_range(0..1u64 << 56)).collect(),
            "user" => (0..4).collect(),
            _ => (0..3).collect(),
        };
        for id in ids {
            rows.push(table.key(id).unwrap());
        }
    }
    rows.sort_unstable();
    rows.dedup();
    (KeySpace::tables(tables), rows)
}

#[test]
fn rows_of_three_tables_match_their_optimizers_under_relocation() {
    let (mut steps, mut moved, mut homes, mut runs) = (0usize, 0, 0, 0);
    for_each_seed(default_seeds(), |seed| {
        let mut rng = test_rng(seed ^ 0x7ab1e5);
        let (space, rows) = space_and_rows(&mut rng);
        let nodes = rng.random_range(2..=4);
        let min_delay = rng.random_range(0..=2_000);
        let cfg = SimConfig::new(nodes, rng.random_range(1..=2), space.clone())
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash)
            .with_fast_local_access(rng.random_bool(0.75))
            .with_dynamic(true)
            .with_location_caches(rng.random_bool(0.5))
            .with_delay(min_delay, min_delay + rng.random_range(1..=80_000))
            .with_think(0, rng.random_range(0..=20_000));
        let workers = workers_of(&cfg);
        // The rows of each table, in `rows` order: each worker ends with a pull of every row
        // (tables mixed: the per-key path) and one pull per table (a named table's batch).
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (r, &key) in rows.iter().enumerate() {
            let t = Tables::index_of(key);
            groups.resize(groups.len().max(t + 1), Vec::new());
            groups[t].push(r);
        }
        groups.retain(|g| !g.is_empty());
        let mut sequences: Vec<Vec<Vec<f32>>> = vec![Vec::new(); rows.len()];
        let mut scripts = Vec::new();
        for (w, &worker) in workers.iter().enumerate() {
            let mine: Vec<usize> = (0..rows.len()).filter(|r| r % workers.len() == w).collect();
            let mut script = Vec::new();
            for _ in 0..20 {
                let n = rng.random_range(1..=4);
                let any: Vec<Key> = sample(&mut rng, rows.len(), n)
                    .into_iter()
                    .map(|r| rows[r])
                    .collect();
                let roll = rng.random_range(0..10);
                let op = match roll {
                    0..5 if !mine.is_empty() => {
                        // Half of them step one table's rows only (a named table's batch loop).
                        let pool: Vec<usize> = if rng.random_bool(0.5) {
                            let t = Tables::index_of(rows[mine[rng.random_range(0..mine.len())]]);
                            (mine.iter().copied())
                                .filter(|&r| Tables::index_of(rows[r]) == t)
                                .collect()
                        } else {
                            mine.clone()
                        };
                        let n = rng.random_range(1..=pool.len());
                        let (mut keys, mut grads) = (Vec::new(), Vec::new());
                        for i in sample(&mut rng, pool.len(), n) {
                            let r = pool[i];
                            let g: Vec<f32> = (0..space.len(rows[r]))
                                .map(|_| rng.random_range(-8i8..=8) as f32 / 4.0)
                                .collect();
                            grads.extend_from_slice(&g);
                            sequences[r].push(g);
                            keys.push(rows[r]);
                        }
                        Op::PushGradients {
                            keys,
                            grads,
                            wait: true,
                        }
                    }
                    _ => roaming_op(&mut rng, roll, any, nodes),
                };
                script.push(op);
            }
            script.extend([Op::WaitAll, Op::Barrier, Op::pull(rows.clone())]);
            script.extend(
                (groups.iter()).map(|g| Op::pull(g.iter().map(|&r| rows[r]).collect::<Vec<Key>>())),
            );
            scripts.push((worker, script));
        }
        let sim = run_fault_free(seed, cfg, scripts);
        moved += total(&sim, |c| &c.relocations_in);
        homes += total(&sim, |c| &c.homes_moved_in);
        runs += 1;
        let mut visible_all = Vec::new();
        let mut visible = Vec::new();
        for (r, sequence) in sequences.iter().enumerate() {
            let key = rows[r];
            let (len, opt) = (space.len(key), space.optimizer_for(key).unwrap());
            let want = stepped(opt, len, space.initial_record(key), sequence);
            steps += sequence.len();
            let got = sole_record(seed, &sim, key);
            assert_eq!(
                got,
                want,
                "seed {seed}: {} record of key {key:#x} after {} steps",
                opt.name(),
                sequence.len()
            );
            visible_all.extend_from_slice(&want[..len]);
            visible.push(want[..len].to_vec());
        }
        for w in sim.workers() {
            let ops: Vec<_> = sim.history().of_worker(w).collect();
            let finals = &ops[ops.len() - 1 - groups.len()..];
            assert_eq!(
                finals[0].outcome,
                Outcome::Pulled(visible_all.clone()),
                "seed {seed}: {w}'s final pull"
            );
            for (g, op) in groups.iter().zip(&finals[1..]) {
                let want: Vec<f32> = g.iter().flat_map(|&r| visible[r].clone()).collect();
                assert_eq!(
                    op.outcome,
                    Outcome::Pulled(want),
                    "seed {seed}: {w}'s final pull of one table"
                );
            }
        }
    });
    eprintln!(
        "{runs} runs, {steps} gradient steps checked, {moved} relocations, {homes} home moves"
    );
    assert!(steps > 0, "no gradient was applied");
    if runs >= 100 {
        assert!(
            moved > 0 && homes > 0,
            "records must move while they are stepped"
        );
    }
}

/// A peer's push whose frame names a key of no table, or a key of another table (so the
/// values no longer match the tables' lengths), is rejected whole: nothing changes, no panic.
#[test]
fn frames_with_keys_of_no_table_or_the_wrong_table_are_rejected_whole() {
    use roam_core::wire::{self, Frame, Kind, Limits};
    for_each_seed(8, |seed| {
        for bad in [7u64 << 56 | 1, 1 << 56 | 5] {
            let tables = Tables::new(vec![
                TableSpec::dense("user", 64, 2),
                TableSpec::dynamic("item", 3, DynamicPolicy::default()),
            ])
            .unwrap();
            let cfg = SimConfig::new(3, 1, KeySpace::tables(tables))
                .with_seed(seed)
                .with_partitioning(Partitioning::Hash);
            let mut sim = roam_sim::Sim::new(cfg);
            let tampered = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            let seen = tampered.clone();
            sim.set_tamper(move |from, _, bytes| {
                if seen.borrow().is_empty() && from.0 == 1 && bytes[0] == Kind::Push as u8 {
                    let frame = wire::decode(bytes, &Limits::default()).unwrap().0;
                    let mut keys = frame.keys().to_vec();
                    *seen.borrow_mut() = keys.clone();
                    *keys.last_mut().unwrap() = bad;
                    let h = frame.header;
                    let n = frame.values().len();
                    let mut out = if h.flags & wire::FLAG_POSITIONS != 0 {
                        let positions = frame.positions().to_vec();
                        Frame::with_positions(h.kind, h.origin, h.req, h.aux, &keys, &positions, n)
                    } else {
                        Frame::new(h.kind, h.origin, h.req, h.aux, &keys, n)
                    };
                    out.header.flags = h.flags;
                    out.values_mut().copy_from_slice(frame.values());
                    *bytes = out.to_bytes();
                }
            });
            // 64 user rows: some are remote from node 1 whatever the hash.
            let w = roam_sim::WorkerRef::new(1, 0);
            sim.add_script(w, [Op::push((0..64).collect::<Vec<Key>>(), vec![1.0; 128])]);
            sim.run_until_idle().unwrap();
            let outcome = &sim.history().ops()[0].outcome;
            assert!(
                matches!(
                    outcome,
                    Outcome::Failed(roam_core::OpError::Rejected { .. })
                ),
                "seed {seed}, key {bad:#x}: {outcome:?}"
            );
            let tampered = tampered.borrow();
            assert!(
                tampered.len() > 1,
                "seed {seed}: a remote push was tampered"
            );
            // The request was refused whole: none of its rows was created or changed (the
            // culprit is last).
            for &k in &tampered[..tampered.len() - 1] {
                let row = sim.peek(k);
                assert!(
                    row.as_ref().is_none_or(|v| v == &[0.0, 0.0]),
                    "seed {seed}: key {k} is {row:?}"
                );
            }
        }
    });
}

/// A dynamic table's row budget counts and evicts that table's rows only, while rows of both
/// tables are relocated and homes move: after every run, each node holds at most `max_rows`
/// rows of the dynamic table plus the rows relocated to it (rows are evicted only at their
/// creator, `roam_core::dynamic`), every row is held once or, if evicted, by nobody and "not
/// created" at its creator with its home recording the creator; and every row of the dense
/// table, which no budget touches, ends exactly the sum of its pushes on every worker's pull.
#[test]
fn a_tables_budget_evicts_its_own_rows_only_under_relocation() {
    const MAX_ROWS: u64 = 4;
    let (mut evicted, mut moved) = (0, 0);
    for_each_seed(default_seeds() / 2, |seed| {
        let mut rng = test_rng(seed ^ 0xb0d9e7);
        let policy = DynamicPolicy {
            max_rows: Some(MAX_ROWS),
            ..Default::default()
        };
        let tables = Tables::new(vec![
            TableSpec::dynamic("hot", 1, policy),
            TableSpec::dense("dense", 16, 2),
        ])
        .unwrap();
        let (hot, dense) = (tables.all()[0].clone(), tables.all()[1].clone());
        let nodes = rng.random_range(2..=3);
        let min_delay = rng.random_range(0..=2_000);
        let cfg = SimConfig::new(nodes, 1, KeySpace::tables(tables))
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash)
            .with_dynamic(true)
            .with_delay(min_delay, min_delay + rng.random_range(1..=50_000))
            .with_think(0, rng.random_range(0..=10_000));
        let dense_keys: Vec<Key> = (0..16).map(|id| dense.key(id).unwrap()).collect();
        let mut sums = [0.0f32; 16];
        let mut scripts = Vec::new();
        for worker in workers_of(&cfg) {
            let mut script = Vec::new();
            for _ in 0..25 {
                let hot_ids: Vec<Key> = (0..rng.random_range(1..=3))
                    .map(|_| hot.key(rng.random_range(0..40)).unwrap())
                    .collect();
                let d = rng.random_range(0..16);
                let op = match rng.random_range(0..10) {
                    0..4 => Op::push(hot_ids.clone(), vec![1.0; hot_ids.len()]),
                    4..7 => {
                        sums[d] += 1.0;
                        Op::push(vec![dense_keys[d]], vec![1.0, 1.0])
                    }
                    7..9 => Op::Localize {
                        keys: vec![hot_ids[0], dense_keys[d]],
                        wait: rng.random_bool(0.5),
                    },
                    _ => Op::MoveHome {
                        key: dense_keys[d],
                        to: rng.random_range(0..nodes),
                        wait: rng.random_bool(0.5),
                    },
                };
                script.push(op);
            }
            script.extend([Op::WaitAll, Op::Barrier, Op::pull(dense_keys.clone())]);
            scripts.push((worker, script));
        }
        let sim = run_fault_free(seed, cfg, scripts);
        evicted += total(&sim, |c| &c.rows_evicted);
        moved += total(&sim, |c| &c.relocations_in);
        for i in 0..nodes {
            let node = sim.node(NodeId(i));
            let held = node.store().count_local_in_table(0);
            let moved_in = node
                .counters()
                .relocations_in
                .load(std::sync::atomic::Ordering::Relaxed);
            assert!(
                held <= MAX_ROWS + moved_in,
                "seed {seed}: node {i} holds {held} hot rows, budget {MAX_ROWS}, {moved_in} moved in"
            );
        }
        for key in sim.history().keys_checked() {
            let holders = sim.holders(key);
            let dir = sim.node(NodeId(0)).directory();
            let creator = dir.creator(dir.bucket(key));
            let recorded = sim.node(dir.home(key)).recorded_owner(key);
            match holders[..] {
                [holder] => assert_eq!(recorded, Some(holder), "seed {seed}: key {key:#x}"),
                [] => {
                    assert!(
                        !sim.node(creator).store().is_created(key),
                        "seed {seed}: {key:#x}"
                    );
                    assert_eq!(recorded, Some(creator), "seed {seed}: key {key:#x}");
                }
                _ => panic!("seed {seed}: key {key:#x} held by {holders:?}"),
            }
        }
        let want: Vec<f32> = sums.iter().flat_map(|&s| [s, s]).collect();
        for w in sim.workers() {
            let last = sim.history().of_worker(w).last().unwrap();
            assert_eq!(
                last.outcome,
                Outcome::Pulled(want.clone()),
                "seed {seed}: {w}"
            );
        }
    });
    eprintln!("{evicted} hot rows evicted, {moved} relocations");
    assert!(evicted > 0 && moved > 0, "the runs must evict and move");
}

/// A byte budget (`max_bytes`) under a Zipf stream: two dynamic tables of different dimensions
/// and optimizers (so different record bytes), each with the same byte budget, fed gradients of
/// ids drawn Zipf(1) (the inverse transform of the continuous 1/x law over 2,000 ranks) by
/// every worker under static allocation (no row moves, so the budget holds exactly): after every
/// run, each node holds at most `max_bytes` bytes of records of each table (rows × 4 × record
/// length), which is fewer rows of the wider table; and the stream overflows both.
#[test]
fn a_byte_budget_holds_per_table_under_a_zipf_stream() {
    const MAX_BYTES: u64 = 1_000;
    let mut evicted = 0;
    for_each_seed(default_seeds() / 5, |seed| {
        let mut rng = test_rng(seed ^ 0xb17e5);
        let policy = DynamicPolicy {
            max_bytes: Some(MAX_BYTES),
            ..Default::default()
        };
        let tables = Tables::new(vec![
            // 2 floats a record (value and Adagrad's sum): 125 rows.
            TableSpec::dynamic("narrow", 1, policy).with_optimizer(Optimizer::adagrad(0.1)),
            // 8 values and Adam's two moments per value plus its step: 25 floats, 10 rows.
            TableSpec::dynamic("wide", 8, policy).with_optimizer(Optimizer::adam(0.05)),
        ])
        .unwrap();
        let all = tables.all().to_vec();
        let nodes = rng.random_range(2..=3);
        let cfg = SimConfig::new(nodes, 1, KeySpace::tables(tables))
            .with_seed(seed)
            .with_partitioning(Partitioning::Hash)
            .with_delay(0, rng.random_range(1..=20_000));
        let mut scripts = Vec::new();
        for worker in workers_of(&cfg) {
            let mut script = Vec::new();
            for _ in 0..40 {
                let table = &all[rng.random_range(0..2)];
                let keys: Vec<Key> = (0..rng.random_range(1..=8))
                    .map(|_| {
                        let rank = 2_000f64.powf(rng.random::<f64>()) as u64;
                        table.key(rank).unwrap()
                    })
                    .collect();
                let grads = vec![0.5; keys.len() * table.spec().dim as usize];
                script.push(Op::PushGradients {
                    keys,
                    grads,
                    wait: rng.random_bool(0.5),
                });
            }
            script.extend([Op::WaitAll, Op::Barrier]);
            scripts.push((worker, script));
        }
        let sim = run_fault_free(seed, cfg, scripts);
        evicted += total(&sim, |c| &c.rows_evicted);
        for i in 0..nodes {
            let store = sim.node(NodeId(i)).store();
            for (t, table) in all.iter().enumerate() {
                let bytes = store.count_local_in_table(t) * 4 * table.record_len() as u64;
                assert!(
                    bytes <= MAX_BYTES,
                    "seed {seed}: node {i} holds {bytes} bytes of table {}, budget {MAX_BYTES}",
                    table.spec().name
                );
            }
        }
    });
    eprintln!("{evicted} rows evicted");
    assert!(evicted > 0, "the stream must overflow the budgets");
}

/// Each table's budget evicts by a clock of its own: on one node, the rows of table `b` that
/// survive a stream of creations and uses under `b`'s budget are the same whether or not
/// creations of table `a`'s rows (each past `a`'s budget, so each a look of `a`'s clock) run
/// between them. With one hand for both tables, `a`'s looks move where `b`'s next look starts,
/// and other rows of `b` go.
#[test]
fn each_tables_budget_evicts_by_its_own_clock() {
    let mut filled = 0;
    for_each_seed(default_seeds() / 5, |seed| {
        let mut rng = test_rng(seed ^ 0xc10c);
        let policy = |max_rows| DynamicPolicy {
            max_rows: Some(max_rows),
            ..Default::default()
        };
        let tables = Tables::new(vec![
            TableSpec::dynamic("a", 1, policy(3)),
            TableSpec::dynamic("b", 1, policy(4)),
        ])
        .unwrap();
        let (a, b) = (tables.all()[0].clone(), tables.all()[1].clone());
        let mut alone = Vec::new();
        let mut mixed = Vec::new();
        let mut next_a = 0;
        for _ in 0..60 {
            let key = b.key(rng.random_range(0..10)).unwrap();
            let op = if rng.random_bool(0.5) {
                Op::push(vec![key], vec![1.0])
            } else {
                Op::pull(vec![key])
            };
            alone.push(op.clone());
            mixed.push(op);
            for _ in 0..rng.random_range(0..=2) {
                mixed.push(Op::push(vec![a.key(next_a).unwrap()], vec![1.0]));
                next_a += 1;
            }
        }
        let survivors = |script: Vec<Op>| -> Vec<u64> {
            let cfg = SimConfig::new(1, 1, KeySpace::tables(tables.clone())).with_seed(seed);
            let worker = workers_of(&cfg)[0];
            let sim = run_fault_free(seed, cfg, vec![(worker, script)]);
            let store = sim.node(NodeId(0)).store();
            assert!(store.count_local_in_table(0) <= 3 && store.count_local_in_table(1) <= 4);
            (0..10)
                .filter(|&id| store.is_created(b.key(id).unwrap()))
                .collect()
        };
        let want = survivors(alone);
        assert_eq!(
            survivors(mixed),
            want,
            "seed {seed}: rows of b left with and without a's evictions between its accesses"
        );
        filled += usize::from(want.len() == 4);
    });
    assert!(filled > 0, "b's budget never filled");
}
