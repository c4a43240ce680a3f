//! Unit tests of the named tables' batch loops (`pull_table_batch_local`,
//! `push_table_batch_local`): the same answers as the per-key paths, optimistic or latched.

use super::tests::{move_and_join, spawn};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rand::{Rng, SeedableRng};

use super::*;
use crate::optim::Optimizer;
use crate::tables::{TableSpec, Tables};

/// Three dense tables of 64 ids: `a` of `dim_a` values under Adagrad, `b` of 3 values under
/// Adam, `c` of 2 under SGD (whose gradients step replicas too).
fn space(dim_a: u32) -> KeySpace {
    KeySpace::tables(
        Tables::new(vec![
            TableSpec::dense("a", 64, dim_a).with_optimizer(Optimizer::adagrad(0.1)),
            TableSpec::dense("b", 64, 3).with_optimizer(Optimizer::adam(0.05)),
            TableSpec::dense("c", 64, 2).with_optimizer(Optimizer::sgd(0.5)),
        ])
        .unwrap(),
    )
}

/// A store reads optimistically only if every table's rows are short.
#[test]
fn a_tables_store_reads_optimistically_only_if_every_table_is_short() {
    assert!(Store::new(space(MAX_OPTIMISTIC_LEN as u32)).optimistic);
    assert!(!Store::new(space(MAX_OPTIMISTIC_LEN as u32 + 1)).optimistic);
}

/// Random batches of one table's keys, some owned, some replicas, some not here, repeating
/// keys: every pull, Add, Set, gradient and aggregate of gradients through a table's batch
/// loop (replicas stepped under SGD, missed under the stateful optimizers) leaves the store
/// exactly as the per-key paths leave a twin store, with the same misses in batch order.
/// Replay: the seed is in every message; set `seed` to it.
#[test]
fn table_batches_match_the_per_key_paths_on_random_batches() {
    let seed = 0x7ab1_e5ed;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    for dim_a in [
        1,
        4,
        MAX_OPTIMISTIC_LEN as u32,
        MAX_OPTIMISTIC_LEN as u32 + 3,
    ] {
        let space = space(dim_a);
        let tables = space.named_tables().unwrap().clone();
        let (batched, per_key) = (Store::new(space.clone()), Store::new(space.clone()));
        for table in tables.all() {
            for id in 0..64 {
                let key = table.key(id).unwrap();
                let mut record = space.initial_record(key);
                // Values of either sign; optimizer state (moments, step counts) not negative.
                for (j, v) in record.iter_mut().enumerate() {
                    let low = if j < table.dim() { -4 } else { 0 };
                    *v = rng.random_range(low..4) as f32;
                }
                let value = &record[..table.dim()];
                match rng.random_range(0..4) {
                    0 | 1 => {
                        assert!(batched.insert(key, &record) && per_key.insert(key, &record));
                    }
                    2 => {
                        assert!(batched.insert_replica(key, value));
                        assert!(per_key.insert_replica(key, value));
                    }
                    _ => {}
                }
            }
        }
        for round in 0..300 {
            let at = format!("dim_a {dim_a}, round {round}, seed {seed:#x}");
            let t = rng.random_range(0..3usize);
            let table = &tables.all()[t];
            let dim = table.dim();
            let n = rng.random_range(0..40);
            let keys: Vec<Key> = (0..n)
                .map(|_| table.key(rng.random_range(0..64)).unwrap())
                .collect();
            let mode = [
                UpdateMode::Add,
                UpdateMode::Set,
                UpdateMode::Gradient,
                UpdateMode::GradientSums,
            ][rng.random_range(0..4)];
            // Aggregates are twice as long: sums of gradients, then of their squares (not
            // negative).
            let width = dim * mode.width();
            let update: Vec<f32> = (0..n * width)
                .map(|j| {
                    let sums = mode == UpdateMode::GradientSums;
                    let low = if sums && j % width >= dim { 0 } else { -8 };
                    rng.random_range(low..8) as f32 / 4.0
                })
                .collect();
            let mut missed = Vec::new();
            batched.push_table_batch_local(t, &keys, &update, dim, mode, |i| missed.push(i));
            let want: Vec<usize> = (0..n)
                .filter(|&i| {
                    let update = &update[i * width..(i + 1) * width];
                    !per_key.push_local(keys[i], update, mode)
                })
                .collect();
            assert_eq!(missed, want, "{mode:?} misses, {at}");
            let mut out = vec![f32::NAN; n * dim];
            missed.clear();
            batched
                .pull_table_batch_local(t, &keys, &mut out, dim, |i| missed.push(i))
                .unwrap();
            let mut want_missed = Vec::new();
            let mut value = vec![0.0; dim];
            for (i, &key) in keys.iter().enumerate() {
                if per_key.pull_local(key, &mut value) {
                    assert_eq!(&out[i * dim..(i + 1) * dim], &value[..], "{mode:?}, {at}");
                } else {
                    want_missed.push(i);
                }
            }
            assert_eq!(missed, want_missed, "pull misses, {at}");
        }
        // The optimizers' hidden state too: every owned record whole.
        for table in tables.all() {
            for id in 0..64 {
                let key = table.key(id).unwrap();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                if batched.residency(key) == Residency::Local {
                    assert!(batched.remove(key, &mut a) && per_key.remove(key, &mut b));
                    assert_eq!(a, b, "key {key}, dim_a {dim_a}, seed {seed:#x}");
                }
            }
        }
    }
}

/// Optimistic reads of a table never return a torn row: every write keeps all values of a
/// row equal, and readers check that what they read is uniform, while the protocol also
/// removes and re-inserts the rows (moving their slots) underneath them.
#[test]
fn optimistic_table_reads_never_see_a_torn_or_moved_row() {
    table_reads_never_see_a_torn_or_moved_row::<{ MAX_OPTIMISTIC_LEN }>();
}

/// Long rows are read under the latch, with plain copies: the same guarantee.
#[test]
fn latched_table_reads_never_see_a_torn_or_moved_row() {
    table_reads_never_see_a_torn_or_moved_row::<40>();
}

fn table_reads_never_see_a_torn_or_moved_row<const DIM: usize>() {
    let space = KeySpace::tables(
        Tables::new(vec![
            TableSpec::dense("short", 4, 2),
            TableSpec::dense("row", 4, DIM as u32),
        ])
        .unwrap(),
    );
    let row = space
        .named_tables()
        .unwrap()
        .by_name("row")
        .unwrap()
        .clone();
    let keys: Vec<Key> = (0..4).map(|id| row.key(id).unwrap()).collect();
    let store = Arc::new(Store::new(space));
    assert_eq!(store.optimistic, DIM <= MAX_OPTIMISTIC_LEN);
    for &k in &keys {
        store.insert(k, &[0.0; DIM]);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, stop, keys) = (store.clone(), stop.clone(), keys.clone());
            spawn(move || {
                let mut out = vec![0.0; 4 * DIM];
                let mut seen = 0u64;
                // At least 1,000 reads each, and on until the writers are done.
                while seen < 1_000 || !stop.load(Ordering::Relaxed) {
                    // A missed row's values are unspecified (a copy may have begun before the
                    // row moved out): only rows read are checked.
                    let mut missed = [false; 4];
                    store
                        .pull_table_batch_local(1, &keys, &mut out, DIM, |i| missed[i] = true)
                        .unwrap();
                    for (value, _) in out.chunks(DIM).zip(missed).filter(|(_, m)| !m) {
                        assert!(value.iter().all(|&v| v == value[0]), "torn: {value:?}");
                    }
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    let writer = {
        let (store, keys) = (store.clone(), keys.clone());
        spawn(move || {
            for i in 0..20_000u32 {
                let key = &keys[i as usize % 4..][..1];
                store.push_table_batch_local(1, key, &[1.0; DIM], DIM, UpdateMode::Add, |_| {});
                let set = [i as f32; DIM];
                store.push_table_batch_local(1, key, &set, DIM, UpdateMode::Set, |_| {});
            }
        })
    };
    move_and_join(&store, &keys, writer, &stop, readers);
}
