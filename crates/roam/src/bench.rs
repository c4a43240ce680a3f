//! `roam bench ops`: micro-benchmark of local and remote access, run under `roam launch`.
//!
//! Phases, each `--seconds` long and separated by barriers: local pull, local push, remote pull
//! (synchronous, latency recorded per batch), remote push (synchronous). Every worker of every
//! node runs each phase; per-worker throughputs are summed through the parameter server itself
//! (additive pushes into a few result keys homed on the last node), and rank 0 prints one JSON
//! line. Keys are drawn uniformly from this node's keys (local phases) or the other nodes' keys
//! (remote phases) with a seeded generator.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roam_core::{HomeTable, Key, NodeId, Partitioning};
use serde_json::json;

use crate::config::{Allocation, Config};
use crate::runtime::NodeHandle;
use crate::worker::Worker;

/// Options of `roam bench ops`.
#[derive(Args, Debug, Clone)]
pub struct OpsArgs {
    /// Number of parameter keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Values (f32) per key.
    #[arg(long, default_value_t = 10)]
    pub value_len: u32,
    /// Keys per pull or push.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Route local keys through messages too (classic, ps-lite-like ablation).
    #[arg(long)]
    pub no_fast_local_access: bool,
    /// Seed of the key generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

const PHASES: [&str; 4] = ["local_pull", "local_push", "remote_pull", "remote_push"];

/// Runs the benchmark on this node; rank 0 prints the JSON line.
pub fn run_ops(args: &OpsArgs) -> anyhow::Result<()> {
    let value_len = args.value_len.max(1);
    // Result keys after the data keys: one float per phase, summed over all workers.
    let result_keys = (PHASES.len() as u64).div_ceil(u64::from(value_len));
    let mut cfg = Config::new(args.keys + result_keys, value_len);
    cfg.allocation = Allocation::StaticRange;
    cfg.fast_local_access = !args.no_fast_local_access;
    let node = NodeHandle::start(cfg).context("starting the node")?;
    let rank = node.rank();
    let num_nodes = node.num_nodes();

    let reference = (rank == 0).then(row_copy_reference);

    let table = HomeTable::new(args.keys + result_keys, num_nodes, Partitioning::Range);
    let mut local: Vec<Key> = table.keys_of(NodeId(rank)).filter(|&k| k < args.keys).collect();
    let mut remote: Vec<Key> = (0..num_nodes)
        .filter(|&n| n != rank)
        .flat_map(|n| table.keys_of(NodeId(n)).filter(|&k| k < args.keys).collect::<Vec<_>>())
        .collect();
    if local.is_empty() {
        local.push(0);
    }
    if remote.is_empty() {
        remote = local.clone();
    }
    let seconds = Duration::from_secs_f64(args.seconds);
    let (workers, results): (Vec<Worker>, Vec<WorkerResult>) = std::thread::scope(|scope| {
        let handles: Vec<_> = node
            .workers()?
            .into_iter()
            .map(|w| {
                let (local, remote) = (&local, &remote);
                let seed = args.seed ^ (u64::from(w.global_id()) << 32);
                scope.spawn(move || {
                    run_worker(&w, local, remote, args.batch, seconds, seed, args.keys, result_keys)
                        .map(|r| (w, r))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench worker panicked"))
            .collect::<anyhow::Result<Vec<_>>>()
            .map(|v| v.into_iter().unzip())
    })?;

    if rank == 0 {
        let mut rates = vec![0f32; (result_keys * u64::from(value_len)) as usize];
        let keys: Vec<Key> = (args.keys..args.keys + result_keys).collect();
        workers[0].pull(&keys, &mut rates)?.wait()?;
        let (p50, p99, mean) = results
            .first()
            .map(|r| {
                let h = &r.remote_pull_latency;
                (h.value_at_quantile(0.5) as f64 / 1e3, h.value_at_quantile(0.99) as f64 / 1e3, h.mean() / 1e3)
            })
            .unwrap_or_default();
        let stats = node.stats();
        let line = json!({
            "bench": "ops",
            "nodes": num_nodes,
            "workers_per_node": node.workers_per_node(),
            "keys": args.keys,
            "value_len": value_len,
            "batch": args.batch,
            "seconds": args.seconds,
            "fast_local_access": !args.no_fast_local_access,
            "emulated_latency_us": stats.emulated_latency_us,
            "local_pull_keys_per_s": rates[0] as f64,
            "local_push_keys_per_s": rates[1] as f64,
            "remote_pull_keys_per_s": rates[2] as f64,
            "remote_push_keys_per_s": rates[3] as f64,
            "remote_pull_p50_us": p50,
            "remote_pull_p99_us": p99,
            "remote_pull_mean_us": mean,
            "reference_row_copy_rows_per_s": reference,
            "rss_bytes": rss_bytes(),
            "values_bytes_held": stats.keys_held * u64::from(value_len) * 4,
        });
        println!("{line}");
    }
    drop(workers);
    node.shutdown()?;
    Ok(())
}

struct WorkerResult {
    remote_pull_latency: Histogram<u64>,
}

#[allow(clippy::too_many_arguments)]
fn run_worker(
    w: &Worker,
    local: &[Key],
    remote: &[Key],
    batch: usize,
    seconds: Duration,
    seed: u64,
    first_result_key: Key,
    result_keys: u64,
) -> anyhow::Result<WorkerResult> {
    let len = w.key_space().len(0);
    let mut rng = SmallRng::seed_from_u64(seed);
    // Keys are drawn before the clock starts: the benchmark measures the server, not the RNG.
    const POOL: usize = 1 << 20;
    let mut keys = vec![0; batch];
    let mut buf = vec![0.5f32; batch * len];
    let mut latency = Histogram::<u64>::new(3)?;
    let mut rates = vec![0f32; (result_keys as usize) * len];
    for (phase, name) in PHASES.iter().enumerate() {
        w.barrier()?;
        let pool = if name.starts_with("local") { local } else { remote };
        let drawn: Vec<Key> = (0..POOL.max(batch)).map(|_| pool[rng.random_range(0..pool.len())]).collect();
        let mut cursor = 0;
        let pull = name.ends_with("pull");
        let start = Instant::now();
        let mut done_keys = 0u64;
        let mut iterations = 0u64;
        loop {
            if cursor + batch > drawn.len() {
                cursor = 0;
            }
            keys.copy_from_slice(&drawn[cursor..cursor + batch]);
            cursor += batch;
            let t0 = (phase == 2).then(Instant::now);
            if pull {
                w.pull(&keys, &mut buf)?.wait()?;
            } else {
                w.push(&keys, &buf)?.wait()?;
            }
            if let Some(t0) = t0 {
                latency.record(t0.elapsed().as_nanos() as u64)?;
            }
            done_keys += batch as u64;
            iterations += 1;
            // Reading the clock costs as much as a local access of a small batch: do it rarely.
            if iterations % 64 == 0 && start.elapsed() >= seconds {
                break;
            }
        }
        rates[phase] = (done_keys as f64 / start.elapsed().as_secs_f64()) as f32;
    }
    let result_keys: Vec<Key> = (first_result_key..first_result_key + result_keys).collect();
    w.push(&result_keys, &rates)?.wait()?;
    w.barrier()?;
    Ok(WorkerResult { remote_pull_latency: latency })
}

/// The physical reference: one thread copying random 400-byte rows out of a 1M-row array.
/// Returns rows per second.
pub fn row_copy_reference() -> f64 {
    const ROWS: usize = 1 << 20;
    const ROW: usize = 100;
    let table = vec![1.0f32; ROWS * ROW];
    let mut out = [0f32; ROW];
    let mut rng = SmallRng::seed_from_u64(7);
    let mut checksum = 0f32;
    let n = 20_000_000usize;
    let start = Instant::now();
    for _ in 0..n {
        let r = rng.random_range(0..ROWS);
        out.copy_from_slice(&table[r * ROW..(r + 1) * ROW]);
        checksum += out[r % ROW];
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    std::hint::black_box(checksum);
    rate
}

/// Resident set size of this process, from `/proc/self/statm`.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page.max(1) as u64)
}
