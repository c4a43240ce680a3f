//! `roam bench replicas`: the cost of synchronising replicated keys (NuPS), run under
//! `roam launch`.
//!
//! Every node replicates `--keys` keys of `--value-len` values. Each of `--rounds` steps, each
//! node's worker pushes to `--updated` keys drawn at random from the replicated set (seeded,
//! drawn before the clock), then all workers call `sync_replicas`, whose duration is the
//! latency of one full synchronisation (every node's deltas to their hubs, every hub's changed
//! primaries back). Background rounds run meanwhile at `--sync-every-ms`. Every node prints one
//! JSON line: its sync-latency percentiles, bytes sent per sync round, replicated keys it sent
//! and received per round, and the staleness of remote updates as they landed.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Args;
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use roam_core::Key;
use serde_json::json;

use crate::config::{Allocation, Config};
use crate::runtime::NodeHandle;

/// Arguments of `roam bench replicas`.
#[derive(Args, Clone, Debug)]
pub struct ReplicasArgs {
    /// Replicated keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Values (f32) per key.
    #[arg(long, default_value_t = 100)]
    pub value_len: u32,
    /// Keys each node updates per step.
    #[arg(long, default_value_t = 1_000)]
    pub updated: usize,
    /// Steps (push, then `sync_replicas`).
    #[arg(long, default_value_t = 50)]
    pub rounds: usize,
    /// Background sync period, ms.
    #[arg(long, default_value_t = 10.0)]
    pub sync_every_ms: f64,
    /// Seed of the key draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs the benchmark on this node (one worker); every node prints its JSON line.
pub fn run_replicas(args: &ReplicasArgs) -> anyhow::Result<()> {
    ensure!(
        args.keys > 0 && args.value_len > 0,
        "--keys and --value-len must be positive"
    );
    ensure!(
        args.updated as u64 <= args.keys,
        "--updated ({}) exceeds --keys ({})",
        args.updated,
        args.keys
    );
    let len = args.value_len as usize;
    let mut cfg = Config::new(args.keys, args.value_len).replicate(0..args.keys);
    cfg.allocation = Allocation::StaticHash;
    cfg.workers_per_node = Some(1);
    cfg.replica_sync_every = Duration::try_from_secs_f64(args.sync_every_ms / 1e3)
        .context("--sync-every-ms must be a positive number")?;
    let node = NodeHandle::start(cfg).context("starting the node")?;
    let rank = node.rank();
    let w = node.worker(0)?;
    let mut rng = SmallRng::seed_from_u64(args.seed ^ (u64::from(rank) << 32));
    let steps: Vec<Vec<Key>> = (0..args.rounds)
        .map(|_| {
            rand::seq::index::sample(&mut rng, args.keys as usize, args.updated)
                .into_iter()
                .map(|k| k as Key)
                .collect()
        })
        .collect();
    let update = vec![1.0f32; args.updated * len];
    let mut latency = Histogram::<u64>::new(3)?;
    w.sync_replicas()?;
    let before = node.stats();
    let start = Instant::now();
    for keys in &steps {
        w.push(keys, &update)?.wait()?;
        let t0 = Instant::now();
        w.sync_replicas()?;
        latency.record(t0.elapsed().as_micros() as u64)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let after = node.stats();
    // Every key got `rounds × updated` pushes over all nodes in expectation; check exactly.
    let mut out = vec![0f32; len];
    let mut total = 0f64;
    for key in 0..args.keys {
        w.pull(&[key], &mut out)?.wait()?;
        total += f64::from(out[0]);
    }
    let expected = (args.rounds * args.updated) as f64 * f64::from(node.num_nodes());
    ensure!(
        total == expected,
        "the replicas hold {total} updates in all, not {expected}"
    );
    let rounds = (after.replica_rounds - before.replica_rounds).max(1);
    let line = json!({
        "bench": "replicas",
        "rank": rank,
        "nodes": node.num_nodes(),
        "keys": args.keys,
        "value_len": args.value_len,
        "updated": args.updated,
        "steps": args.rounds,
        "sync_every_ms": args.sync_every_ms,
        "seconds": seconds,
        "sync_p50_us": latency.value_at_quantile(0.5),
        "sync_p99_us": latency.value_at_quantile(0.99),
        "rounds": rounds,
        "bytes_per_round": (after.replica_bytes_sent - before.replica_bytes_sent) as f64 / rounds as f64,
        "keys_sent_per_round": (after.replica_keys_sent - before.replica_keys_sent) as f64 / rounds as f64,
        "keys_received_per_round": (after.replica_keys_received - before.replica_keys_received) as f64 / rounds as f64,
        "staleness_p50_us": after.replica_staleness_p50_us,
        "staleness_p99_us": after.replica_staleness_p99_us,
    });
    println!("{line}");
    w.barrier()?;
    drop(w);
    node.shutdown()?;
    Ok(())
}
