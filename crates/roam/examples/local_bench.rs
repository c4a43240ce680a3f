//! Single-node, single-worker micro-benchmark of the local fast path through the worker API
//! (key checks, store, counters, tickets), for profiling it apart from the network:
//! `cargo run --release -p roam --example local_bench -- [keys] [value_len] [batch] [seconds]`.
//! Prints ns per key for batched local pulls and pushes of uniformly random keys.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use roam::{Config, NodeHandle};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut next = |default: f64| -> anyhow::Result<f64> {
        Ok(match args.next() {
            Some(a) => a.parse()?,
            None => default,
        })
    };
    let keys = next(100_000.0)? as u64;
    let len = next(10.0)? as usize;
    let batch = next(100.0)? as usize;
    let seconds = Duration::from_secs_f64(next(1.0)?);
    let mut cfg = Config::new(keys, len as u32);
    cfg.workers_per_node = Some(1);
    let node = NodeHandle::start(cfg)?;
    let worker = node.worker(0)?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let drawn: Vec<u64> = (0..1 << 20).map(|_| rng.random_range(0..keys)).collect();
    let mut buf = vec![0.5f32; batch * len];
    for name in ["pull", "push", "pull", "push"] {
        let (start, mut done, mut cursor) = (Instant::now(), 0u64, 0usize);
        while done % (64 * batch as u64) != 0 || start.elapsed() < seconds {
            if cursor + batch > drawn.len() {
                cursor = 0;
            }
            let batch_keys = &drawn[cursor..cursor + batch];
            cursor += batch;
            if name == "pull" {
                worker.pull(batch_keys, &mut buf)?.wait()?;
            } else {
                worker.push(batch_keys, &buf)?.wait()?;
            }
            done += batch as u64;
        }
        let ns = start.elapsed().as_nanos() as f64 / done as f64;
        println!("{name}: {ns:.2} ns/key ({:.1} M keys/s)", 1e3 / ns);
    }
    drop(worker);
    node.shutdown()?;
    Ok(())
}
