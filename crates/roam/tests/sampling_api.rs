//! Tests of the sampling API over TCP on loopback: without replacement a handle's keys are
//! distinct under every scheme, `local:next` never takes a zero-weight key, and the refusals of
//! the public API (at draw time and at start) carry their reasons and change nothing.
//!
//! Seeds: every test prints the seed it runs with; `ROAM_SAMPLING_SEED=<u64>` replays one
//! (see `sampling_support`).

mod common;
mod sampling_support;

use std::collections::{HashMap, HashSet};

use common::cluster;
use roam::{
    Allocation, Config, Distribution, Key, NodeHandle, SampleError, SamplerId, SamplerSpec, Scheme,
    StartError, Support,
};
use roam_core::sampling::{MAX_GROUP_SAMPLES, MAX_PREPARED, SamplerSetupError};
use sampling_support::*;

/// A small support with zero weights: positions 9, 19, … can never be drawn.
fn sparse_weighted() -> Distribution {
    let weights = (0..60)
        .map(|i| {
            if i % 10 == 9 {
                0.0
            } else {
                1.0 / (i + 1) as f64
            }
        })
        .collect();
    Distribution::weighted(2, 5, weights).unwrap()
}

const SCHEMES: [&str; 6] = [
    "naive",
    "preloc",
    "pool:4",
    "pool:4:strict",
    "local",
    "local:next",
];

#[test]
fn without_replacement_a_handle_has_distinct_keys() {
    let seed = seed("without replacement");
    let dist = sparse_weighted();
    let reachable: HashSet<Key> = (0..60)
        .filter(|&i| dist.probability(i) > 0.0)
        .map(|i| dist.support().key(i))
        .collect();
    assert_eq!(reachable.len(), 54);
    let mut cfg = config(Allocation::Dynamic, seed);
    let ids: Vec<(Scheme, SamplerId)> = SCHEMES
        .iter()
        .map(|s| {
            let scheme: Scheme = s.parse().unwrap();
            let mut spec = SamplerSpec::new(dist.clone(), scheme);
            spec.with_replacement = false;
            (scheme, cfg.add_sampler(spec))
        })
        .collect();
    let nodes = cluster(2, || cfg.clone());
    std::thread::scope(|scope| {
        for node in &nodes {
            let (ids, reachable, dist) = (&ids, &reachable, &dist);
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                set_values(node, &w);
                for &(scheme, id) in ids {
                    for round in 0..200 {
                        // 40 of the 54 reachable keys, then all of them.
                        let n = if round % 10 == 9 { 54 } else { 40 };
                        let mut handle = w.prepare_sample(id, n).unwrap();
                        let mut keys = vec![0; n];
                        let mut vals = vec![0.0; n * VALUE_LEN];
                        let cuts = [0, 7, 20, n];
                        for c in cuts.windows(2) {
                            w.pull_sample(
                                &mut handle,
                                &mut keys[c[0]..c[1]],
                                &mut vals[c[0] * VALUE_LEN..c[1] * VALUE_LEN],
                            )
                            .unwrap()
                            .wait()
                            .unwrap();
                        }
                        assert_eq!(w.finish_sample(handle), 0);
                        check_values(&keys, &vals);
                        let distinct: HashSet<Key> = keys.iter().copied().collect();
                        assert_eq!(
                            distinct.len(),
                            n,
                            "{scheme}, node {}: repeated keys in {keys:?}",
                            node.rank()
                        );
                        assert!(
                            keys.iter().all(|k| dist.support().position(*k).is_some()),
                            "{scheme}: a key outside the support in {keys:?}"
                        );
                        if scheme != (Scheme::Local { next: true }) {
                            // (local:next: see local_next_never_takes_a_zero_weight_key.)
                            assert!(
                                distinct.is_subset(reachable),
                                "{scheme}: a zero-weight key in {keys:?}"
                            );
                        }
                    }
                    // More distinct keys than can be drawn: refused, nothing drawn.
                    assert_eq!(
                        w.prepare_sample(id, 55).unwrap_err(),
                        SampleError::NotEnoughKeys {
                            requested: 55,
                            reachable: 54
                        },
                        "{scheme}"
                    );
                }
                w.barrier().unwrap();
            });
        }
    });
    shutdown(nodes);
}

/// `local:next` moves a drawn key's probability to the next held key of the support that the
/// target can draw: never to a key of weight zero (which sampling without replacement does not
/// count as reachable either, `Distribution::reachable`).
#[test]
fn local_next_never_takes_a_zero_weight_key() {
    let seed = seed("local:next zero weights");
    let dist = sparse_weighted();
    let mut cfg = config(Allocation::StaticHash, seed);
    let id = cfg.add_sampler(SamplerSpec::new(
        dist.clone(),
        "local:next".parse().unwrap(),
    ));
    let nodes = cluster(2, || cfg.clone());
    // Per node: each zero-weight key sampled, and how often.
    let zero_weight: Vec<Vec<(Key, usize)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|node| {
                let dist = &dist;
                scope.spawn(move || {
                    let w = node.worker(0).unwrap();
                    set_values(node, &w);
                    let stream = draw(&w, id, 10_000);
                    w.barrier().unwrap();
                    let mut bad: HashMap<Key, usize> = HashMap::new();
                    for k in stream {
                        if dist.probability(dist.support().position(k).unwrap()) == 0.0 {
                            *bad.entry(k).or_default() += 1;
                        }
                    }
                    let mut bad: Vec<(Key, usize)> = bad.into_iter().collect();
                    bad.sort_unstable();
                    bad
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    shutdown(nodes);
    assert!(
        zero_weight.iter().all(Vec::is_empty),
        "local:next sampled zero-weight keys ((key, samples) of 10000 per node): {}",
        zero_weight
            .iter()
            .enumerate()
            .map(|(rank, bad)| format!("node {rank}: {bad:?}"))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

#[test]
fn refusals_name_their_reason_and_change_nothing() {
    let seed = seed("refusals");
    let mut cfg = config(Allocation::Dynamic, seed);
    let ids: Vec<(Scheme, SamplerId, SamplerId)> = SCHEMES
        .iter()
        .map(|s| {
            let scheme: Scheme = s.parse().unwrap();
            let with = cfg.add_sampler(SamplerSpec::new(uniform(), scheme));
            let mut spec = SamplerSpec::new(sparse_weighted(), scheme);
            spec.with_replacement = false;
            (scheme, with, cfg.add_sampler(spec))
        })
        .collect();
    let registered = cfg.samplers.len();
    let nodes = cluster(1, || cfg.clone());
    let w = nodes[0].worker(0).unwrap();
    set_values(&nodes[0], &w);
    assert_eq!(
        w.prepare_sample(SamplerId(registered as u32), 1)
            .unwrap_err(),
        SampleError::UnknownSampler {
            sampler: registered as u32,
            registered
        }
    );
    assert_eq!(w.sample_value_len(SamplerId(registered as u32)), None);
    for &(scheme, with, without) in &ids {
        assert_eq!(
            w.prepare_sample(with, MAX_PREPARED + 1).unwrap_err(),
            SampleError::TooManyPrepared {
                requested: MAX_PREPARED + 1,
                max: MAX_PREPARED
            },
            "{scheme}"
        );
        assert_eq!(w.sample_value_len(with), Some(VALUE_LEN));
        let mut handle = w.prepare_sample(with, 5).unwrap();
        assert_eq!(handle.remaining(), 5);
        assert_eq!(handle.sampler(), with);
        let mut keys = [0; 6];
        let mut vals = [0.0; 6 * VALUE_LEN];
        assert_eq!(
            refused(w.pull_sample(&mut handle, &mut keys, &mut vals)),
            SampleError::TooMany {
                requested: 6,
                remaining: 5
            },
            "{scheme}"
        );
        assert_eq!(
            refused(w.pull_sample(&mut handle, &mut keys[..3], &mut vals[..5])),
            SampleError::LengthMismatch {
                keys: 3,
                value_len: VALUE_LEN,
                expected: 3 * VALUE_LEN,
                actual: 5
            },
            "{scheme}"
        );
        assert_eq!(
            w.sample_keys(&mut handle, &mut keys).unwrap_err(),
            SampleError::TooMany {
                requested: 6,
                remaining: 5
            },
            "{scheme}"
        );
        assert_eq!(handle.remaining(), 5, "{scheme}: refusals draw nothing");
        w.pull_sample(&mut handle, &mut keys[..2], &mut vals[..2 * VALUE_LEN])
            .unwrap()
            .wait()
            .unwrap();
        check_values(&keys[..2], &vals[..2 * VALUE_LEN]);
        assert_eq!(handle.remaining(), 3);
        assert_eq!(w.finish_sample(handle), 3, "{scheme}: three never pulled");
        // Without replacement: at most the 54 keys of non-zero weight.
        assert_eq!(
            w.prepare_sample(without, 55).unwrap_err(),
            SampleError::NotEnoughKeys {
                requested: 55,
                reachable: 54
            },
            "{scheme}"
        );
        let handle = w.prepare_sample(without, 54).unwrap();
        assert_eq!(w.finish_sample(handle), 54);
    }
    drop(w);
    shutdown(nodes);
}

/// The reason of a refused `pull_sample`.
fn refused(pulled: Result<roam::Ticket<'_>, SampleError>) -> SampleError {
    match pulled {
        Err(e) => e,
        Ok(_) => panic!("the pull was accepted"),
    }
}

/// Starts a single node with `cfg`, expecting a refusal.
fn start_error(mut cfg: Config) -> StartError {
    cfg.workers_per_node = Some(1);
    cfg.cluster = roam::cluster_env::ClusterOverrides {
        rank: Some(0),
        num_nodes: Some(1),
        coordinator: Some("127.0.0.1:0".into()),
    };
    match NodeHandle::start(cfg) {
        Err(e) => e,
        Ok(_) => panic!("the node started"),
    }
}

#[test]
fn samplers_the_key_space_cannot_serve_are_refused_at_start() {
    // The support's last key, 2998, is one past the key space (whose first is fine).
    let mut cfg = Config::new(2998, VALUE_LEN as u32);
    cfg.add_sampler(SamplerSpec::new(
        Distribution::uniform(Support::range(0..2998)).unwrap(),
        Scheme::Naive,
    ));
    cfg.add_sampler(SamplerSpec::new(uniform(), Scheme::Naive));
    match start_error(cfg) {
        StartError::Sampler {
            sampler: 1,
            reason:
                SamplerSetupError::OutsideKeySpace {
                    key: 2998,
                    num_keys: 2998,
                },
        } => {}
        other => panic!("expected sampler 1's key 2998 to be named: {other}"),
    }
    // A pool group larger than MAX_GROUP_SAMPLES.
    let mut cfg = Config::new(NUM_KEYS, VALUE_LEN as u32);
    let mut spec = SamplerSpec::new(uniform(), "pool:64".parse().unwrap());
    spec.group_draws = MAX_GROUP_SAMPLES / 64 + 1;
    cfg.add_sampler(spec);
    match start_error(cfg) {
        StartError::Sampler {
            sampler: 0,
            reason:
                SamplerSetupError::PoolTooLarge {
                    reuse: 64,
                    max: MAX_GROUP_SAMPLES,
                    ..
                },
        } => {}
        other => panic!("expected sampler 0's pool to be refused: {other}"),
    }
    // Support keys of different value lengths: key 7 has 3 values, the others 2.
    let mut lengths = vec![2; 20];
    lengths[7] = 3;
    let mut cfg = Config::per_key(lengths);
    cfg.add_sampler(SamplerSpec::new(
        Distribution::uniform(Support {
            first: 1,
            stride: 3,
            len: 5,
        })
        .unwrap(),
        Scheme::Preloc,
    ));
    match start_error(cfg) {
        StartError::Sampler {
            sampler: 0,
            reason: SamplerSetupError::MixedLengths { key: 7, .. },
        } => {}
        other => panic!("expected sampler 0's key 7 to be named: {other}"),
    }
}
