//! Unit tests of the store (per-key, batch and replica paths).

use super::*;
use crate::keyspace::RecordLayout;

#[test]
fn insert_pull_push_remove_roundtrip() {
    let store = Store::new(KeySpace::uniform(4, 2).unwrap());
    let mut out = [0.0; 2];
    assert!(!store.pull_local(1, &mut out));
    assert!(store.insert(1, &[1.0, 2.0]));
    assert!(
        !store.insert(1, &[9.0, 9.0]),
        "second insert must not overwrite"
    );
    assert!(store.push_local(1, &[0.5, 0.5], UpdateMode::Add));
    assert!(store.pull_local(1, &mut out));
    assert_eq!(out, [1.5, 2.5]);
    assert!(store.push_local(1, &[7.0, 8.0], UpdateMode::Set));
    let mut moved = Vec::new();
    assert!(store.remove(1, &mut moved));
    assert_eq!(moved, [7.0, 8.0]);
    assert_eq!(store.residency(1), Residency::Remote);
    assert!(!store.push_local(1, &[1.0, 1.0], UpdateMode::Add));
}

#[test]
fn freed_slots_are_reused_without_mixing_values() {
    let store = Store::new(KeySpace::uniform(3, 1).unwrap());
    store.insert(0, &[1.0]);
    store.insert(1, &[2.0]);
    let mut moved = Vec::new();
    store.remove(0, &mut moved);
    store.insert(2, &[3.0]);
    let mut out = [0.0];
    assert!(store.pull_local(1, &mut out));
    assert_eq!(out, [2.0]);
    assert!(store.pull_local(2, &mut out));
    assert_eq!(out, [3.0]);
}

/// The batch paths are compiled once per short length (`by_len!`): every one of them, and
/// the run-time-length path above them, adds, sets and reads exactly, for owned records and
/// replicas, and reports misses in batch order.
#[test]
fn batch_paths_are_exact_for_every_short_length() {
    for len in 1..=MAX_OPTIMISTIC_LEN + 2 {
        let store = Store::new(KeySpace::uniform(8, len as u32).unwrap());
        let zeros = vec![0f32; len];
        for key in [0, 2, 4, 6] {
            store.insert(key, &zeros);
        }
        store.insert_replica(5, &zeros);
        let keys = [0, 1, 2, 5, 6, 0];
        let update: Vec<f32> = (0..keys.len() * len).map(|v| v as f32).collect();
        let mut missed = Vec::new();
        store.push_batch_local(&keys, &update, len, UpdateMode::Add, |i| missed.push(i));
        assert_eq!(missed, [1], "len {len}");
        let mut out = vec![-1f32; keys.len() * len];
        missed.clear();
        store
            .pull_batch_local(&keys, &mut out, len, |i| missed.push(i))
            .unwrap();
        assert_eq!(missed, [1], "len {len}");
        let row = |i: usize| &update[i * len..(i + 1) * len];
        let twice: Vec<f32> = row(0).iter().zip(row(5)).map(|(a, b)| a + b).collect();
        for (i, expected) in [(0, &twice[..]), (2, row(2)), (3, row(3)), (4, row(4))] {
            assert_eq!(
                &out[i * len..(i + 1) * len],
                expected,
                "len {len}, key {}",
                keys[i]
            );
        }
        let mut delta = Vec::new();
        assert!(store.take_delta(5, &mut delta));
        assert_eq!(
            delta,
            row(3),
            "len {len}: a replica push lands in its delta too"
        );
        missed.clear();
        store.push_batch_local(&keys[..3], &update[..3 * len], len, UpdateMode::Set, |i| {
            missed.push(i)
        });
        assert_eq!(missed, [1], "len {len}");
        store
            .pull_batch_local(&[0], &mut out[..len], len, |_| unreachable!())
            .unwrap();
        assert_eq!(&out[..len], row(0), "len {len}");
    }
}

#[test]
fn per_key_lengths_are_stored_apart() {
    let store = Store::new(KeySpace::per_key(vec![1, 3, 2]).unwrap());
    store.insert(2, &[5.0, 6.0]);
    store.insert(1, &[1.0, 2.0, 3.0]);
    let mut out = [0.0; 2];
    assert!(store.pull_local(2, &mut out));
    assert_eq!(out, [5.0, 6.0]);
    assert_eq!(store.count_local(), 2);
}

#[test]
fn transit_mark_is_visible_and_cleared_by_insert() {
    let store = Store::new(KeySpace::uniform(2, 1).unwrap());
    store.set_in_transit(0, true);
    assert_eq!(store.residency(0), Residency::InTransit);
    store.insert(0, &[1.0]);
    assert_eq!(store.residency(0), Residency::Local);
}

#[test]
fn concurrent_pushes_are_never_lost() {
    let store = std::sync::Arc::new(Store::new(KeySpace::uniform(8, 4).unwrap()));
    for k in 0..8 {
        store.insert(k, &[0.0; 4]);
    }
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::Builder::new()
                .spawn(move || {
                    for i in 0..20_000u64 {
                        let key = (i + t) % 8;
                        assert!(store.push_local(key, &[1.0, 2.0, 3.0, 4.0], UpdateMode::Add));
                    }
                })
                .unwrap()
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let mut out = [0.0; 4];
    for k in 0..8 {
        store.pull_local(k, &mut out);
        assert_eq!(out, [10_000.0, 20_000.0, 30_000.0, 40_000.0]);
    }
}

#[test]
fn replicas_are_read_and_pushed_on_the_fast_path_with_a_separate_delta() {
    let store = Store::new(KeySpace::uniform(4, 2).unwrap());
    assert!(store.insert_replica(3, &[1.0, 2.0]));
    assert!(
        !store.insert(3, &[0.0, 0.0]),
        "a key is owned or replicated, not both"
    );
    assert_eq!(store.residency(3), Residency::Remote);
    assert!(store.has_replica(3));
    let mut out = [0.0; 2];
    assert!(store.pull_local(3, &mut out));
    assert_eq!(out, [1.0, 2.0]);
    let mut misses = Vec::new();
    store.push_batch_local(&[3, 3, 1], &[1.0; 6], 2, UpdateMode::Add, |i| {
        misses.push(i)
    });
    assert_eq!(misses, [2], "only the key held nowhere here misses");
    assert!(
        !store.push_local(3, &[9.0, 9.0], UpdateMode::Set),
        "overwriting a replica is the protocol's decision"
    );
    // Others' updates arrive as a new base (the hub's primary, without this node's pending
    // pushes): the value becomes base + pending.
    assert!(store.rebase_replica(3, &[11.0, 12.0]));
    assert!(store.pull_local(3, &mut out));
    assert_eq!(
        out,
        [13.0, 14.0],
        "the new base plus this node's two pushes"
    );
    let mut delta = Vec::new();
    assert!(store.take_delta(3, &mut delta));
    assert_eq!(delta, [2.0, 2.0], "the delta holds this node's pushes only");
    delta.clear();
    assert!(
        !store.take_delta(3, &mut delta) && delta.is_empty(),
        "taking the delta clears it, and a round skips the replica until the next push"
    );
    store.push_local(3, &[0.5, 0.5], UpdateMode::Add);
    assert!(store.take_delta(3, &mut delta));
    assert_eq!(
        delta,
        [0.5, 0.5],
        "a push marks the replica for the next round again"
    );
    assert!(
        store.rebase_replica(3, &[13.0, 14.0]),
        "nothing pending: the value is the base"
    );
    // A threshold on the delta's L2 norm leaves small deltas pending, still marked.
    delta.clear();
    store.push_local(3, &[3.0, 4.0], UpdateMode::Add);
    assert!(!store.take_delta_above(3, &mut delta, 6.0) && delta.is_empty());
    store.push_local(3, &[3.0, 4.0], UpdateMode::Add);
    assert!(store.take_delta_above(3, &mut delta, 6.0), "norm 10 now");
    assert_eq!(delta, [6.0, 8.0]);
    delta.clear();
    store.rebase_replica(3, &[13.0, 14.0]);
    let mut batch = [0.0; 2];
    store
        .pull_batch_local(&[3], &mut batch, 2, |_| panic!("replica misses"))
        .unwrap();
    assert_eq!(batch, [13.0, 14.0]);
    let mut removed = Vec::new();
    assert!(store.remove_replica(3, &mut removed));
    assert_eq!(
        removed,
        [13.0, 14.0, 13.0, 14.0],
        "value, then the synced base"
    );
    assert!(!store.has_replica(3));
    assert!(!store.pull_local(3, &mut out));
}

/// The replica operations compute the same floats, bit for bit, on both paths: atomic
/// element-wise (short values, optimistic readers) and plain vectorised (long values).
#[test]
fn replica_sync_arithmetic_is_identical_on_the_atomic_and_the_plain_path() {
    use rand::{Rng, SeedableRng};
    let seed = 0x5eed_0fba;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    for len in [3, MAX_OPTIMISTIC_LEN, MAX_OPTIMISTIC_LEN + 1, 40] {
        let store = Store::new(KeySpace::uniform(2, len as u32).unwrap());
        assert_eq!(store.plain(), len > MAX_OPTIMISTIC_LEN, "len {len}");
        // Magnitudes spread over 2^±12, so that the order of additions shows in the bits.
        let mut draw = || -> Vec<f32> {
            (0..len)
                .map(|_| (rng.random::<f32>() - 0.5) * 2f32.powi(rng.random_range(-12..12)))
                .collect()
        };
        let (init, push, base, e1, e2, push2) = (draw(), draw(), draw(), draw(), draw(), draw());
        assert!(store.insert_replica(1, &init));
        store.push_local(1, &push, UpdateMode::Add);
        let value: Vec<f32> = init.iter().zip(&push).map(|(i, p)| i + p).collect();
        let mut delta = Vec::new();
        assert!(store.take_delta(1, &mut delta));
        let want: Vec<f32> = value.iter().zip(&init).map(|(v, i)| v - i).collect();
        assert_eq!(delta, want, "delta, len {len}, seed {seed:#x}");
        store.push_local(1, &push2, UpdateMode::Add);
        let value: Vec<f32> = value.iter().zip(&push2).map(|(v, p)| v + p).collect();
        assert!(store.rebase_replica_with(1, &base, &[&e1, &e2]));
        let new_base: Vec<f32> = (0..len).map(|i| base[i] + e1[i] + e2[i]).collect();
        let mut out = vec![0.0; len];
        assert!(store.pull_local(1, &mut out));
        // The pending delta is `value - synced base`, where the synced base is the value at
        // the last take (init + push).
        let pending: Vec<f32> = (0..len).map(|i| value[i] - (init[i] + push[i])).collect();
        let want: Vec<f32> = (0..len).map(|i| new_base[i] + pending[i]).collect();
        assert_eq!(out, want, "rebased value, len {len}, seed {seed:#x}");
        let mut removed = Vec::new();
        assert!(store.remove_replica(1, &mut removed));
        assert_eq!(removed[len..], new_base[..], "synced base, len {len}");
    }
}

#[test]
fn local_updates_sum_the_registered_workers_once_each() {
    let store = Store::new(KeySpace::uniform(2, 1).unwrap());
    let (a, b) = (
        Arc::new(WorkerCounters::default()),
        Arc::new(WorkerCounters::default()),
    );
    store.register_worker(a.clone());
    store.register_worker(b.clone());
    store.register_worker(a.clone());
    a.local_push_keys.store(3, Ordering::Relaxed);
    b.local_push_keys.store(4, Ordering::Relaxed);
    a.local_pull_keys.store(100, Ordering::Relaxed);
    assert_eq!(store.local_updates(), 7, "pushes only, each worker once");
}

#[test]
fn hidden_state_moves_with_the_record_but_is_never_pulled() {
    let layout = RecordLayout {
        hidden_per_value: 2,
        hidden_per_key: 1,
    };
    for space in [
        KeySpace::uniform(4, 2).unwrap().with_layout(layout),
        KeySpace::per_key(vec![1, 2, 3, 2])
            .unwrap()
            .with_layout(layout),
    ] {
        let store = Store::new(space);
        assert_eq!(store.space().record_len(3), 7);
        let record = [1.0, 2.0, 10.0, 20.0, 30.0, 40.0, 99.0];
        assert!(store.insert(3, &record));
        assert!(store.insert(1, &[5.0; 7]), "a neighbour must not overlap");
        assert!(store.push_local(3, &[1.0, 1.0], UpdateMode::Add));
        let mut out = [0.0; 2];
        assert!(store.pull_local(3, &mut out));
        assert_eq!(out, [2.0, 3.0]);
        let mut moved = Vec::new();
        assert!(store.remove(3, &mut moved));
        assert_eq!(moved, [2.0, 3.0, 10.0, 20.0, 30.0, 40.0, 99.0]);
        assert!(store.pull_local(1, &mut out));
        assert_eq!(out, [5.0, 5.0]);
    }
}

#[test]
fn sparse_keys_anywhere_in_u64_get_state_only_when_the_protocol_creates_it() {
    let store = Store::new(KeySpace::sparse(2).unwrap());
    let keys = [u64::MAX, 0, 1 << 63, 0x9e37_79b9_7f4a_7c15];
    let mut out = [0.0; 8];
    let mut misses = Vec::new();
    store
        .pull_batch_local(&keys, &mut out, 2, |i| misses.push(i))
        .expect("every u64 is a key");
    assert_eq!(misses, [0, 1, 2, 3]);
    assert!(!store.is_known(u64::MAX));
    for (i, &key) in keys.iter().enumerate() {
        assert!(store.insert(key, &[i as f32, 1.0]));
    }
    store.push_batch_local(&keys, &[1.0; 8], 2, UpdateMode::Add, |_| panic!("miss"));
    store
        .pull_batch_local(&keys, &mut out, 2, |_| panic!("miss"))
        .unwrap();
    assert_eq!(out, [1.0, 2.0, 2.0, 2.0, 3.0, 2.0, 4.0, 2.0]);
    let mut moved = Vec::new();
    assert!(store.remove(1 << 63, &mut moved));
    assert!(store.is_known(1 << 63), "a key's word outlives its record");
    assert_eq!(store.residency(1 << 63), Residency::Remote);
    assert_eq!(store.count_local(), 3);
}

#[test]
fn scan_visits_every_held_record_once_in_bounded_steps() {
    for space in [
        KeySpace::uniform(1000, 1).unwrap(),
        KeySpace::sparse(1).unwrap(),
    ] {
        let store = Store::new(space);
        for key in (0..1000u64).step_by(7) {
            let key = key * 1_000_003;
            if store.space().contains(key) {
                store.insert(key, &[key as f32]);
            }
        }
        store.insert_replica(999, &[5.0]);
        store.set_in_transit(998, true);
        let mut seen = Vec::new();
        let mut cursor = Some(0);
        let mut steps = 0;
        while let Some(at) = cursor {
            cursor = store.scan(at, 64, |key, holding, record| {
                seen.push((key, holding, record[0]));
            });
            steps += 1;
        }
        seen.sort_by_key(|&(k, _, _)| k);
        let mut expected: Vec<_> = (0..1000u64)
            .step_by(7)
            .map(|k| k * 1_000_003)
            .filter(|&k| store.space().contains(k))
            .map(|k| (k, Holding::Owned, k as f32))
            .collect();
        expected.push((999, Holding::Replica, 5.0));
        expected.sort_by_key(|&(k, _, _)| k);
        assert_eq!(seen, expected);
        assert!(steps > 1, "a scan is bounded per step");
    }
}

pub(super) fn spawn<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .spawn(f)
        .expect("spawning a test thread")
}

/// Optimistic reads never return a torn value: every write keeps all components of a key
/// equal, and readers check that whatever they read is uniform, while the protocol thread
/// also removes and re-inserts the keys (moving their slots) underneath them.
#[test]
fn optimistic_reads_never_see_a_torn_or_moved_record() {
    reads_never_see_a_torn_or_moved_record::<16>();
}

/// Long values are read under the latch, with plain copies: the same guarantee.
#[test]
fn latched_reads_of_long_values_never_see_a_torn_or_moved_record() {
    reads_never_see_a_torn_or_moved_record::<64>();
}

fn reads_never_see_a_torn_or_moved_record<const LEN: usize>() {
    let store = std::sync::Arc::new(Store::new(KeySpace::uniform(4, LEN as u32).unwrap()));
    assert_eq!(store.optimistic, LEN <= MAX_OPTIMISTIC_LEN);
    for k in 0..4 {
        store.insert(k, &[0.0; LEN]);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, stop) = (store.clone(), stop.clone());
            spawn(move || {
                let mut out = vec![0.0; 4 * LEN];
                let mut seen = 0u64;
                // At least 1,000 reads each, and on until the writers are done.
                while seen < 1_000 || !stop.load(Ordering::Relaxed) {
                    store
                        .pull_batch_local(&[0, 1, 2, 3], &mut out, LEN, |_| {})
                        .unwrap();
                    for value in out.chunks(LEN) {
                        assert!(value.iter().all(|&v| v == value[0]), "torn: {value:?}");
                    }
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    let writer = {
        let store = store.clone();
        spawn(move || {
            for i in 0..20_000u32 {
                let key = u64::from(i % 4);
                store.push_local(key, &[1.0; LEN], UpdateMode::Add);
                store.push_local(key, &[i as f32; LEN], UpdateMode::Set);
            }
        })
    };
    move_and_join(&store, &[0, 1, 2, 3], writer, &stop, readers);
}

/// The protocol's side of the torn-read tests: moves each of `keys` out and back in (into
/// whatever slot is free) 1,250 times, checking that every record moved whole, then waits
/// for `writer`, stops the readers and checks that each read at least 1,000 times.
pub(super) fn move_and_join(
    store: &Store,
    keys: &[Key],
    writer: std::thread::JoinHandle<()>,
    stop: &std::sync::atomic::AtomicBool,
    readers: Vec<std::thread::JoinHandle<u64>>,
) {
    let mut moved = Vec::new();
    for round in 0..1_250 * keys.len() {
        let key = keys[round % keys.len()];
        moved.clear();
        if store.remove(key, &mut moved) {
            assert!(moved.iter().all(|&v| v == moved[0]));
            store.insert(key, &moved);
        }
    }
    writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() >= 1_000);
    }
}

/// The block paths of dense short-value stores (`pull_blocks`, `push_blocks`) against a
/// model, on random batches that cross block boundaries and repeat keys: every value, every
/// miss in batch order, owned records and replicas, Add and Set, and a key outside the space.
/// Replay: the seed is in every message; set `seed` to it.
#[test]
fn block_batches_match_a_model_on_random_batches() {
    use rand::{Rng, SeedableRng};
    let seed = 0x5eed_b10c;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    for len in [1, 3, 10, MAX_OPTIMISTIC_LEN, MAX_OPTIMISTIC_LEN + 1] {
        let keys = 200u64;
        let store = Store::new(KeySpace::uniform(keys, len as u32).unwrap());
        // The model: the value of each owned record or replica here, `None` if not held.
        let mut model: Vec<Option<(bool, Vec<f32>)>> = vec![None; keys as usize];
        for (key, held) in model.iter_mut().enumerate() {
            let value: Vec<f32> = (0..len).map(|_| rng.random_range(-4..4) as f32).collect();
            match rng.random_range(0..4) {
                0 | 1 => assert!(store.insert(key as u64, &value)),
                2 => {
                    store.insert_replica(key as u64, &value);
                }
                _ => continue,
            }
            *held = Some((store.residency(key as u64) == Residency::Local, value));
        }
        for round in 0..200 {
            let n = rng.random_range(0..70);
            let batch: Vec<Key> = (0..n).map(|_| rng.random_range(0..keys)).collect();
            let update: Vec<f32> = (0..n * len)
                .map(|_| rng.random_range(-8..8) as f32)
                .collect();
            let set = rng.random_range(0..3) == 0;
            let mode = if set {
                UpdateMode::Set
            } else {
                UpdateMode::Add
            };
            let mut missed = Vec::new();
            store.push_batch_local(&batch, &update, len, mode, |i| missed.push(i));
            let mut want_missed = Vec::new();
            for (i, &key) in batch.iter().enumerate() {
                let u = &update[i * len..(i + 1) * len];
                match &mut model[key as usize] {
                    Some((owned, value)) if *owned || !set => {
                        if set {
                            value.copy_from_slice(u);
                        } else {
                            value.iter_mut().zip(u).for_each(|(v, u)| *v += u);
                        }
                    }
                    _ => want_missed.push(i),
                }
            }
            let at = format!("len {len}, round {round}, seed {seed:#x}");
            assert_eq!(missed, want_missed, "push misses, {at}");
            let mut out = vec![f32::NAN; n * len];
            missed.clear();
            store
                .pull_batch_local(&batch, &mut out, len, |i| missed.push(i))
                .unwrap();
            want_missed.clear();
            for (i, &key) in batch.iter().enumerate() {
                match &model[key as usize] {
                    Some((_, value)) => {
                        assert_eq!(&out[i * len..(i + 1) * len], &value[..], "{at}")
                    }
                    None => want_missed.push(i),
                }
            }
            assert_eq!(missed, want_missed, "pull misses, {at}");
        }
        // A key outside the space is reported, wherever it is in the batch.
        let mut batch: Vec<Key> = (0..40).map(|_| rng.random_range(0..keys)).collect();
        batch[33] = keys + 7;
        let mut out = vec![0f32; batch.len() * len];
        let checked = store.pull_batch_local(&batch, &mut out, len, |_| {});
        assert_eq!(checked, Err(keys + 7), "len {len}, seed {seed:#x}");
    }
}

/// Block pushes from two threads to the same few keys (repeated within batches too) lose no
/// update, and block pulls meanwhile never see a torn value, while the protocol moves the
/// keys out and back into other slots. Not timed: each thread does a fixed amount of work.
#[test]
fn concurrent_block_pushes_lose_nothing_and_block_pulls_see_no_torn_value() {
    use rand::{Rng, SeedableRng};
    const LEN: usize = 10;
    const KEYS: u64 = 8;
    let seed = 0x5eed_c0c0;
    // Key KEYS is a filler that takes a moved key's freed slot, so that the key lands in
    // another one (a push that wrote to the slot its first look found would be lost).
    let store = std::sync::Arc::new(Store::new(KeySpace::uniform(KEYS + 1, LEN as u32).unwrap()));
    for k in 0..KEYS {
        store.insert(k, &[0.0; LEN]);
    }
    let running = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(3));
    let pushers: Vec<_> = (0..2u64)
        .map(|t| {
            let (store, running) = (store.clone(), running.clone());
            spawn(move || {
                let _done = Done(running);
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed + t);
                let mut accepted = [0u64; KEYS as usize];
                let update = [1.0f32; 40 * LEN];
                for _ in 0..20_000 {
                    let batch: Vec<Key> = (0..40).map(|_| rng.random_range(0..KEYS)).collect();
                    let mut missed = Vec::new();
                    store.push_batch_local(&batch, &update, LEN, UpdateMode::Add, |i| {
                        missed.push(i)
                    });
                    for (i, &key) in batch.iter().enumerate() {
                        if !missed.contains(&i) {
                            accepted[key as usize] += 1;
                        }
                    }
                }
                accepted
            })
        })
        .collect();
    let reader = {
        let (store, running) = (store.clone(), running.clone());
        spawn(move || {
            let _done = Done(running);
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed + 2);
            let mut out = vec![0f32; 40 * LEN];
            for _ in 0..20_000 {
                let batch: Vec<Key> = (0..40).map(|_| rng.random_range(0..KEYS)).collect();
                let mut missed = Vec::new();
                store
                    .pull_batch_local(&batch, &mut out, LEN, |i| missed.push(i))
                    .unwrap();
                // A missed key's values are unspecified (its key was moved out mid-copy).
                for (_, value) in out
                    .chunks(LEN)
                    .enumerate()
                    .filter(|(i, _)| !missed.contains(i))
                {
                    assert!(
                        value.iter().all(|&v| v == value[0]),
                        "torn: {value:?}, seed {seed:#x}"
                    );
                }
            }
        })
    };
    // The protocol's moves, for as long as any other thread runs (and at least 1,000).
    let mut moved = Vec::new();
    let mut round = 0u64;
    while round < 1_000 || running.load(Ordering::Relaxed) > 0 {
        let key = round % KEYS;
        moved.clear();
        if store.remove(key, &mut moved) {
            store.insert(KEYS, &[0.0; LEN]);
            store.insert(key, &moved);
            store.remove(KEYS, &mut Vec::new());
        }
        round += 1;
    }
    reader.join().unwrap();
    let mut accepted = [0u64; KEYS as usize];
    for pusher in pushers {
        for (sum, n) in accepted.iter_mut().zip(pusher.join().unwrap()) {
            *sum += n;
        }
    }
    let mut out = [0f32; LEN];
    for (key, &n) in accepted.iter().enumerate() {
        assert!(store.pull_local(key as u64, &mut out));
        assert_eq!(out, [n as f32; LEN], "key {key}, seed {seed:#x}");
    }
}

/// Counts a thread out when it ends, even by a panic (so the mover loop above ends too).
struct Done(std::sync::Arc<std::sync::atomic::AtomicU32>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[test]
fn the_owned_accessors_serve_owned_records_only() {
    let space = KeySpace::uniform(4, 2)
        .unwrap()
        .with_optimizer(crate::optim::Optimizer::sgd(0.5))
        .unwrap();
    let store = Store::new(space);
    assert!(store.insert(1, &[1.0, 2.0]));
    assert!(store.insert_replica(3, &[5.0, 6.0]));
    let mut out = [0.0; 2];
    assert!(store.pull_owned(1, &mut out));
    assert_eq!(out, [1.0, 2.0]);
    assert!(!store.take_dirty(1), "a read dirties nothing");
    assert!(store.push_owned(1, &[1.0, 1.0], UpdateMode::Add));
    assert!(
        store.take_dirty(1),
        "a push marks the record dirty, as push_local does"
    );
    assert!(store.push_owned(1, &[2.0, 2.0], UpdateMode::Gradient));
    assert!(store.pull_owned(1, &mut out));
    assert_eq!(out, [1.0, 2.0], "+1 then -0.5·2");
    assert!(store.push_owned(1, &[7.0, 8.0], UpdateMode::Set));
    assert!(store.pull_owned(1, &mut out));
    assert_eq!(out, [7.0, 8.0]);
    // A replica is held here but not owned: the owned accessors leave it alone (a server
    // forwards such a request to the owner), though the worker's fast path reads it.
    out = [0.0; 2];
    assert!(!store.pull_owned(3, &mut out));
    assert_eq!(out, [0.0; 2]);
    for mode in [UpdateMode::Add, UpdateMode::Set, UpdateMode::Gradient] {
        assert!(!store.push_owned(3, &[1.0, 1.0], mode), "{mode:?}");
    }
    assert!(store.pull_local(3, &mut out));
    assert_eq!(out, [5.0, 6.0], "untouched");
    // Not held here (a dense space has a word for every key), or on its way here.
    assert!(!store.pull_owned(0, &mut out));
    assert!(!store.push_owned(0, &[1.0, 1.0], UpdateMode::Add));
    store.set_in_transit(2, true);
    assert_eq!(store.residency(2), Residency::InTransit);
    assert!(!store.pull_owned(2, &mut out));
    assert!(!store.push_owned(2, &[1.0, 1.0], UpdateMode::Add));

    // Long values are read under the latch (no optimistic reader): the same answers.
    const LONG: usize = MAX_OPTIMISTIC_LEN + 1;
    let store = Store::new(KeySpace::uniform(4, LONG as u32).unwrap());
    assert!(store.plain());
    assert!(store.insert(1, &[1.0; LONG]));
    assert!(store.insert_replica(3, &[5.0; LONG]));
    let mut out = [0.0; LONG];
    assert!(store.push_owned(1, &[1.0; LONG], UpdateMode::Add));
    assert!(store.pull_owned(1, &mut out));
    assert_eq!(out, [2.0; LONG]);
    assert!(!store.pull_owned(3, &mut out));
    assert!(!store.push_owned(3, &[1.0; LONG], UpdateMode::Add));
}
