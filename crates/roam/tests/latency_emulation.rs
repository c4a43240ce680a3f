//! Latency emulation over real TCP (`transport.rs`, `due_timer.rs`): frames wait in their
//! link's queue until due and leave in order, whether they find the queue empty (and arm the
//! sender's timer) or queue behind frames already waiting (and rely on the sender waking for
//! those first).

mod common;

use std::time::{Duration, Instant};

use roam::{Allocation, Config};

const LATENCY: Duration = Duration::from_millis(20);
const KEYS: u64 = 64;
const LEN: usize = 2;

fn config() -> Config {
    let mut cfg = Config::new(KEYS, LEN as u32);
    cfg.allocation = Allocation::StaticRange;
    cfg.emulate_latency_us = Some(LATENCY.as_micros() as u64);
    cfg
}

/// Node 0 pushes bursts of single-key pushes to node 1's keys without waiting (each burst
/// queues behind its first frame), then pulls them back: every pull sees exactly the sum of
/// the pushes before it, and no remote round trip is shorter than twice the emulated latency.
#[test]
fn bursts_under_emulated_latency_arrive_in_order_and_never_early() {
    let nodes = common::cluster(2, config);
    std::thread::scope(|scope| {
        for node in &nodes {
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                if node.rank() == 0 {
                    let directory = node.directory();
                    let remote: Vec<u64> =
                        (0..KEYS).filter(|&k| directory.home(k).0 == 1).collect();
                    assert!(!remote.is_empty());
                    for round in 1..=3u64 {
                        for &key in &remote {
                            let vals = [key as f32, round as f32];
                            w.push(&[key], &vals).unwrap().detach();
                        }
                        let started = Instant::now();
                        let mut out = vec![0.0; remote.len() * LEN];
                        w.pull(&remote, &mut out).unwrap().wait().unwrap();
                        assert!(
                            started.elapsed() >= 2 * LATENCY,
                            "a round trip took {:?}, under twice the emulated {LATENCY:?}",
                            started.elapsed()
                        );
                        for (i, &key) in remote.iter().enumerate() {
                            let sum: u64 = (1..=round).sum();
                            assert_eq!(
                                &out[i * LEN..(i + 1) * LEN],
                                &[(key * round) as f32, sum as f32],
                                "key {key} after round {round}"
                            );
                        }
                    }
                    w.wait_all().unwrap();
                }
                w.barrier().unwrap();
            });
        }
    });
    // Shutdown is collective: every node at once.
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().expect("clean shutdown"));
        }
    });
}
