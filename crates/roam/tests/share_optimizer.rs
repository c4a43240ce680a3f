//! A stateful optimizer (Adagrad) on a key shared by intent (AdaPM) over TCP: node 0 signals
//! an intent on a key node 1 owns and gets a replica (replicate-only); its `push_gradients` of
//! the key accumulate there (the replica's value does not move), and when the intent ends the
//! replica's leave ships the sum to the owner, which steps its record **once** with it
//! (`share/sync.rs`, `store/replica_grad.rs`).
//!
//! Background share rounds are off (a one-hour period), so the whole sum goes with the leave:
//! the owner's value must equal, bit for bit, one Adagrad step from zeros on the sum (the
//! gradients are multiples of 1/4, so the sum is exact in any order), and the stats must show
//! one sum shipped, one step taken, and no gradient sent as a remote push.

mod common;

use std::time::{Duration, Instant};

use common::cluster;
use roam::{Allocation, Config, IntentTechniques, IntentTiming, Optimizer};

/// Owned by node 1 (range homes: keys 4..8).
const KEY: u64 = 5;
const PUSHES: usize = 20;

fn adagrad() -> Optimizer {
    Optimizer::Adagrad { lr: 0.5, eps: 1e-6 }
}

fn grad(i: usize) -> [f32; 2] {
    [0.25 * (i % 5) as f32 + 0.25, -0.5]
}

#[test]
fn gradients_at_a_share_replica_step_the_owner_once_with_their_sum_over_tcp() {
    let nodes = cluster(2, || {
        let mut cfg = Config::new(8, 2);
        cfg.workers_per_node = Some(1);
        cfg.allocation = Allocation::Dynamic;
        cfg.optimizer = Some(adagrad());
        cfg.intent_techniques = IntentTechniques::ReplicateOnly;
        cfg.intent_timing = IntentTiming::Immediate;
        // No round in the test's time (by time or by work): the sum goes with the leave.
        cfg.share_sync_every = Duration::from_secs(3600);
        cfg.share_sync_updates_per_key = 0;
        cfg
    });
    let w0 = nodes[0].worker(0).unwrap();
    w0.intent(&[KEY], 0, 10).unwrap();
    // The grant arrives asynchronously: wait for the replica (an event, with a generous bound
    // that only turns a hang into a clear failure).
    let mut out = [0.0f32; 2];
    let deadline = Instant::now() + Duration::from_secs(60);
    while !w0.pull_if_local(KEY, &mut out).unwrap() {
        assert!(Instant::now() < deadline, "no replica of key {KEY} granted");
        std::thread::yield_now();
    }
    assert_eq!(out, [0.0, 0.0]);
    let mut sum = [0.0f32; 2];
    for i in 0..PUSHES {
        let g = grad(i);
        sum[0] += g[0];
        sum[1] += g[1];
        w0.push_gradients(&[KEY], &g).unwrap().wait().unwrap();
    }
    assert!(w0.pull_if_local(KEY, &mut out).unwrap());
    assert_eq!(out, [0.0, 0.0], "a replica's value never holds a gradient");
    // The intent ends: the replica leaves, its sum ahead of its leave.
    for _ in 0..10 {
        w0.advance_clock();
    }
    assert_eq!(w0.wait_all(), Ok(()));
    let w1 = nodes[1].worker(0).unwrap();
    let w1 = std::thread::scope(|scope| {
        let other = scope.spawn(move || {
            w1.barrier().unwrap();
            w1
        });
        w0.barrier().unwrap();
        other.join().unwrap()
    });
    let mut want = [0.0f32; 4];
    let (w, acc) = want.split_at_mut(2);
    adagrad().step(w, acc, &sum);
    assert!(
        w1.pull_if_local(KEY, &mut out).unwrap(),
        "the owner keeps it"
    );
    assert_eq!(
        out,
        [want[0], want[1]],
        "one step with the sum, at the owner"
    );
    drop((w0, w1));
    let mut stats = Vec::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .into_iter()
            .map(|node| scope.spawn(move || node.shutdown().expect("clean shutdown")))
            .collect();
        stats = handles.into_iter().map(|h| h.join().unwrap()).collect();
    });
    assert_eq!(stats[0].share_grad_keys_sent, 1, "{:?}", stats[0]);
    assert_eq!(stats[1].share_grad_steps, 1, "{:?}", stats[1]);
    assert_eq!(
        stats[0].remote_push_keys, 0,
        "no gradient went as a remote push"
    );
}
