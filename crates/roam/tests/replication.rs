//! Replicated keys (NuPS) over TCP: three nodes × two workers push to replicated keys on the
//! fast path while background sync rounds run; after `sync_replicas` every replica holds the
//! exact sum of every push, a setup-phase `set` reaches every replica, and keys that are not
//! replicated keep their exact sums.

mod common;

use std::time::Duration;

use common::cluster;
use roam::{Allocation, Config, StartError};

const PUSHES: usize = 100_000;

#[test]
fn replicas_on_three_nodes_hold_the_exact_sum_after_sync() {
    let nodes = cluster(3, || {
        let mut cfg = Config::new(8, 2).replicate([1, 5]);
        cfg.workers_per_node = Some(2);
        cfg.allocation = Allocation::Dynamic;
        cfg.replica_sync_every = Duration::from_millis(1);
        cfg
    });
    std::thread::scope(|scope| {
        for node in &nodes {
            for w in 0..2 {
                scope.spawn(move || {
                    let w = node.worker(w).unwrap();
                    let first = node.rank() == 0 && w.id() == 0;
                    if first {
                        // Setup-phase set of a replicated key, made visible everywhere.
                        w.set(&[5], &[10.0, 20.0]).unwrap().wait().unwrap();
                    }
                    w.sync_replicas().unwrap();
                    let mut out = [0.0f32; 2];
                    w.pull(&[5], &mut out).unwrap().wait().unwrap();
                    assert_eq!(out, [10.0, 20.0], "the set is in every replica");
                    // Nobody pushes before every worker has checked.
                    w.barrier().unwrap();
                    // Replicated pulls and pushes never leave the node.
                    for _ in 0..PUSHES {
                        w.push(&[1], &[1.0, 2.0]).unwrap().wait().unwrap();
                        w.push(&[5], &[1.0, 2.0]).unwrap().wait().unwrap();
                    }
                    // A non-replicated key under dynamic allocation, for contrast.
                    w.push(&[3], &[1.0, 1.0]).unwrap().wait().unwrap();
                    w.sync_replicas().unwrap();
                    let mut out = [0.0f32; 6];
                    w.pull(&[1, 5, 3], &mut out).unwrap().wait().unwrap();
                    let total = (6 * PUSHES) as f32;
                    assert_eq!(
                        out,
                        [
                            total,
                            2.0 * total,
                            10.0 + total,
                            20.0 + 2.0 * total,
                            6.0,
                            6.0
                        ],
                        "node {} worker {}",
                        node.rank(),
                        w.id()
                    );
                    w.barrier().unwrap();
                });
            }
        }
    });
    let stats: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    for s in &stats {
        assert_eq!(s.replicated_keys, 2);
        assert!(s.replica_rounds > 0, "node {}: rounds ran", s.rank);
    }
    assert!(
        stats.iter().any(|s| s.replica_keys_received > 0),
        "primaries reached other nodes"
    );
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

/// With the work clock and an hour-long period, pushes still reach the other replica: each
/// node's 100 pushes start its round, and the hub's broadcast follows the deltas it received
/// (or its own later work).
/// (By time alone this would wait for an hour; the loop's cap turns that into a failure.)
#[test]
fn with_a_work_clock_pushes_reach_every_replica_without_waiting_for_the_period() {
    let nodes = cluster(2, || {
        let mut cfg = Config::new(4, 1).replicate([1]);
        cfg.workers_per_node = Some(1);
        cfg.replica_sync_every = Duration::from_secs(3600);
        cfg.replica_sync_after_updates = 100;
        cfg
    });
    std::thread::scope(|scope| {
        for node in &nodes {
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                w.barrier().unwrap();
                for _ in 0..100 {
                    w.push(&[1], &[1.0]).unwrap().wait().unwrap();
                }
                let cap = std::time::Instant::now() + Duration::from_secs(60);
                let mut out = [0.0f32];
                loop {
                    w.pull(&[1], &mut out).unwrap().wait().unwrap();
                    if out == [200.0] {
                        break;
                    }
                    // Work that changes nothing: a hub whose round the other node's deltas
                    // started before its own pushes were all made needs more of its own to
                    // start the next.
                    w.push(&[1], &[0.0]).unwrap().wait().unwrap();
                    assert!(
                        std::time::Instant::now() < cap,
                        "node {}: still {out:?} after 60 s",
                        node.rank()
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                w.barrier().unwrap();
            });
        }
    });
    for node in &nodes {
        // No round by time (the first is an hour after the start): every round was work's.
        assert!(node.stats().replica_rounds >= 1, "work rounds ran");
    }
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

#[test]
fn replicated_keys_outside_the_key_space_are_refused_at_start() {
    let mut cfg = Config::new(8, 2).replicate([3, 8]);
    cfg.workers_per_node = Some(1);
    cfg.cluster = roam::cluster_env::ClusterOverrides {
        rank: Some(0),
        num_nodes: Some(1),
        coordinator: Some("127.0.0.1:0".into()),
    };
    match roam::NodeHandle::start(cfg) {
        Err(StartError::ReplicatedKeyOutOfRange {
            key: 8,
            num_keys: 8,
        }) => {}
        Err(other) => panic!("expected the out-of-range replicated key to be named: {other}"),
        Ok(_) => panic!("a replicated key outside the key space was accepted"),
    }
}
