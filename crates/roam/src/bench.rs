//! `roam bench ops`: micro-benchmark of local and remote access and of relocation, run under
//! `roam launch`.
//!
//! Phases, separated by barriers, run by every worker of every node:
//! 1. `local_pull`, `local_push`: batches of keys this node owns (`--seconds` each);
//! 2. `remote_pull`, `remote_push`: synchronous batches of keys other nodes own (`--seconds`
//!    each; pull latency recorded per batch);
//! 3. `relocate` (dynamic allocation): each worker synchronously localizes `--relocations` keys,
//!    one at a time, from the next node's keys;
//! 4. path latencies: synchronous single-key pulls served locally, by the owner directly
//!    (requester → owner), and forwarded (requester → home → owner; needs 3 nodes).
//!
//! Keys are drawn with a seeded generator before the clock starts. Static phases use the lower
//! half of each node's home range, relocation the upper half, so phases do not disturb each
//! other. Per-worker throughputs are summed through the parameter server itself (additive
//! pushes into result keys), and rank 0 prints one JSON line.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roam_core::{Directory, Key, NodeId};
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
    /// Seconds per throughput phase.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Keys each worker relocates, one at a time (dynamic allocation).
    #[arg(long, default_value_t = 2_000)]
    pub relocations: usize,
    /// Single-key pulls per path for the path latencies.
    #[arg(long, default_value_t = 2_000)]
    pub path_samples: usize,
    /// Allocation (static-range skips the relocation phases).
    #[arg(long, default_value = "dynamic")]
    pub allocation: Allocation,
    /// Route local keys through messages too (classic, ps-lite-like ablation).
    #[arg(long)]
    pub no_fast_local_access: bool,
    /// Seed of the key generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

const PHASES: [&str; 5] = [
    "local_pull",
    "local_push",
    "remote_pull",
    "remote_push",
    "relocate",
];

/// Which keys each phase draws from, per node.
struct KeyPlan {
    /// Lower half of each node's home range: never relocated.
    fixed: Vec<Vec<Key>>,
    /// Upper half of each node's home range: relocated in the relocation phase.
    movable: Vec<Vec<Key>>,
}

impl KeyPlan {
    fn new(keys: u64, table: &Directory) -> Self {
        let (mut fixed, mut movable) = (Vec::new(), Vec::new());
        for &NodeId(n) in table.members() {
            let mine: Vec<Key> = table.keys_of(NodeId(n)).filter(|&k| k < keys).collect();
            let mid = mine.len().div_ceil(2);
            fixed.push(mine[..mid].to_vec());
            movable.push(mine[mid..].to_vec());
        }
        Self { fixed, movable }
    }

    /// Keys that worker `w` (of `t` per node) of node `r` relocates: from the next node's
    /// movable keys, indices `w, w + t, ...`.
    fn relocated_by(&self, r: u32, w: u32, t: u32, count: usize) -> Vec<Key> {
        let from = &self.movable[((r + 1) % self.movable.len() as u32) as usize];
        from.iter()
            .skip(w as usize)
            .step_by(t as usize)
            .take(count)
            .copied()
            .collect()
    }
}

/// Runs the benchmark on this node; rank 0 prints the JSON line.
pub fn run_ops(args: &OpsArgs) -> anyhow::Result<()> {
    let value_len = args.value_len.max(1);
    // Result keys after the data keys: one float per phase, summed over all workers.
    let result_keys = (PHASES.len() as u64).div_ceil(u64::from(value_len));
    let total_keys = args.keys + result_keys;
    let mut cfg = Config::new(total_keys, value_len);
    cfg.allocation = args.allocation;
    cfg.home = roam_core::Partitioning::Range;
    cfg.fast_local_access = !args.no_fast_local_access;
    // Resident size around start-up isolates what the node costs (store, threads, buffers)
    // from the benchmark's own key lists and the row-copy reference, allocated after.
    let rss_before_start = rss_bytes();
    let node = NodeHandle::start(cfg).context("starting the node")?;
    let rss_after_start = rss_bytes();
    let rank = node.rank();
    let num_nodes = node.num_nodes();
    let reference = (rank == 0).then(row_copy_reference);
    let plan = KeyPlan::new(args.keys, &node.directory());

    let (workers, results): (Vec<Worker>, Vec<WorkerResult>) = std::thread::scope(|scope| {
        let handles: Vec<_> = node
            .workers()?
            .into_iter()
            .map(|w| {
                let plan = &plan;
                scope.spawn(move || {
                    run_worker(&w, plan, args, args.keys, result_keys).map(|r| (w, r))
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
        // After the phases, while the other nodes wait in their final barrier, so that the
        // reference does not share the cores with a benchmark phase.
        let shape = (args.keys as usize, value_len as usize, args.batch);
        let matched = matched_row_reference(shape, RowOp::Copy);
        let matched_add = matched_row_reference(shape, RowOp::Add);
        let mut rates = vec![0f32; (result_keys * u64::from(value_len)) as usize];
        let keys: Vec<Key> = (args.keys..args.keys + result_keys).collect();
        workers[0].pull(&keys, &mut rates)?.wait()?;
        let mine = &results[0];
        let quantile = |h: &Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
        };
        let stats = node.stats();
        let line = json!({
            "bench": "ops",
            "nodes": num_nodes,
            "workers_per_node": node.workers_per_node(),
            "keys": args.keys,
            "value_len": value_len,
            "batch": args.batch,
            "seconds": args.seconds,
            "allocation": args.allocation.name(),
            "fast_local_access": !args.no_fast_local_access,
            "emulated_latency_us": stats.emulated_latency_us,
            "local_pull_keys_per_s": rates[0] as f64,
            "local_push_keys_per_s": rates[1] as f64,
            "remote_pull_keys_per_s": rates[2] as f64,
            "remote_push_keys_per_s": rates[3] as f64,
            "remote_pull_p50_us": quantile(&mine.remote_pull, 0.5),
            "remote_pull_p99_us": quantile(&mine.remote_pull, 0.99),
            "relocate_keys_per_s": args.allocation.is_dynamic().then_some(rates[4] as f64),
            "localize_p50_us": quantile(&mine.localize, 0.5),
            "localize_p99_us": quantile(&mine.localize, 0.99),
            "pull_latency_p50_us": {
                "local": quantile(&mine.paths[0], 0.5),
                "owner": quantile(&mine.paths[1], 0.5),
                "forwarded": quantile(&mine.paths[2], 0.5),
            },
            "reference_row_copy_rows_per_s": reference,
            "reference_matched_rows_per_s": matched,
            "reference_matched_add_rows_per_s": matched_add,
            "rss_bytes": rss_bytes(),
            "rss_before_start_bytes": rss_before_start,
            "rss_after_start_bytes": rss_after_start,
            "values_bytes_held": stats.keys_held * u64::from(value_len) * 4,
        });
        println!("{line}");
    }
    drop(workers);
    node.shutdown()?;
    Ok(())
}

struct WorkerResult {
    remote_pull: Histogram<u64>,
    localize: Histogram<u64>,
    /// Single-key pull latency served locally, by the owner, forwarded.
    paths: [Histogram<u64>; 3],
}

fn draw(rng: &mut SmallRng, pool: &[Key], n: usize) -> Vec<Key> {
    if pool.is_empty() {
        return Vec::new();
    }
    (0..n)
        .map(|_| pool[rng.random_range(0..pool.len())])
        .collect()
}

fn run_worker(
    w: &Worker,
    plan: &KeyPlan,
    args: &OpsArgs,
    first_result_key: Key,
    result_keys: u64,
) -> anyhow::Result<WorkerResult> {
    let (rank, nodes, t) = (w.rank(), w.num_nodes(), w.workers_per_node());
    let len = w.key_space().len(0);
    let batch = args.batch.max(1);
    let seconds = Duration::from_secs_f64(args.seconds);
    let mut rng = SmallRng::seed_from_u64(args.seed ^ (u64::from(w.global_id()) << 32));
    let local = &plan.fixed[rank as usize];
    let remote: Vec<Key> = (0..nodes)
        .filter(|&n| n != rank)
        .flat_map(|n| plan.fixed[n as usize].clone())
        .collect();
    let mut buf = vec![0.5f32; batch * len];
    let mut result = WorkerResult {
        remote_pull: Histogram::new(3)?,
        localize: Histogram::new(3)?,
        paths: [Histogram::new(3)?, Histogram::new(3)?, Histogram::new(3)?],
    };
    let mut rates = vec![0f32; (result_keys as usize) * len];

    // Throughput phases.
    for (phase, name) in PHASES[..4].iter().enumerate() {
        w.barrier()?;
        let pool = if name.starts_with("local") {
            local
        } else {
            &remote
        };
        // Drawn before the clock starts: the benchmark measures the server, not the RNG.
        let drawn = draw(&mut rng, pool, (1 << 20).max(batch));
        if drawn.is_empty() {
            continue;
        }
        let pull = name.ends_with("pull");
        let start = Instant::now();
        let (mut done_keys, mut cursor) = (0u64, 0usize);
        loop {
            if cursor + batch > drawn.len() {
                cursor = 0;
            }
            let keys = &drawn[cursor..cursor + batch];
            cursor += batch;
            let t0 = (phase == 2).then(Instant::now);
            if pull {
                w.pull(keys, &mut buf)?.wait()?;
            } else {
                w.push(keys, &buf)?.wait()?;
            }
            if let Some(t0) = t0 {
                result.remote_pull.record(t0.elapsed().as_nanos() as u64)?;
            }
            done_keys += batch as u64;
            // Reading the clock costs as much as a local access of a small batch: do it rarely.
            if (done_keys / batch as u64).is_multiple_of(64) && start.elapsed() >= seconds {
                break;
            }
        }
        rates[phase] = (done_keys as f64 / start.elapsed().as_secs_f64()) as f32;
    }

    if args.allocation.is_dynamic() && nodes > 1 {
        // Relocation: synchronous single-key localizes.
        w.barrier()?;
        let mine = plan.relocated_by(rank, w.id(), t, args.relocations);
        let start = Instant::now();
        for &key in &mine {
            let t0 = Instant::now();
            w.localize(&[key])?.wait()?;
            result.localize.record(t0.elapsed().as_nanos() as u64)?;
        }
        rates[4] = (mine.len() as f64 / start.elapsed().as_secs_f64()) as f32;
    }

    // Path latencies, single-key synchronous pulls.
    w.barrier()?;
    let mut one = vec![0f32; len];
    let forwarded: Vec<Key> = if args.allocation.is_dynamic() && nodes >= 3 {
        // Keys homed two nodes on, now owned by the next node: requester, home and owner differ.
        let owner = (rank + 1) % nodes;
        (0..t)
            .flat_map(|w| plan.relocated_by(owner, w, t, args.relocations))
            .collect()
    } else {
        Vec::new()
    };
    for (path, pool) in [&local[..], &remote[..], &forwarded[..]]
        .into_iter()
        .enumerate()
    {
        for key in draw(&mut rng, pool, args.path_samples) {
            let t0 = Instant::now();
            w.pull(&[key], &mut one)?.wait()?;
            result.paths[path].record(t0.elapsed().as_nanos() as u64)?;
        }
    }

    let result_keys: Vec<Key> = (first_result_key..first_result_key + result_keys).collect();
    w.push(&result_keys, &rates)?.wait()?;
    w.barrier()?;
    Ok(result)
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

/// What [`matched_row_reference`] does with each drawn row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOp {
    /// Copy the row into the batch buffer (the shape of a local pull).
    Copy,
    /// Add the batch buffer's row into the table row (the shape of a local push: a
    /// read-modify-write, which also writes the row back to memory).
    Add,
}

/// The physical reference matched to the benchmark: one thread copying (or adding into)
/// random rows of `row_len` floats of a `rows`-row array, `batch` rows at a time, the row
/// indices drawn before the clock starts (as the benchmark's keys are). `shape` is
/// `(rows, row_len, batch)`. Returns rows per second: what a local pull (push) of the same shape
/// would reach if it were only the copy (add).
pub fn matched_row_reference(shape: (usize, usize, usize), op: RowOp) -> f64 {
    let (rows, row_len, batch) = (shape.0.max(1), shape.1.max(1), shape.2.max(1));
    let mut table = vec![1.0f32; rows * row_len];
    let mut rng = SmallRng::seed_from_u64(7);
    let drawn: Vec<usize> = (0..(1 << 20).max(batch))
        .map(|_| rng.random_range(0..rows))
        .collect();
    let mut out = vec![0f32; batch * row_len];
    let mut checksum = 0f32;
    let target = 20_000_000usize;
    let (mut done, mut cursor) = (0usize, 0usize);
    let start = Instant::now();
    while done < target {
        if cursor + batch > drawn.len() {
            cursor = 0;
        }
        for (row, &r) in out
            .chunks_exact_mut(row_len)
            .zip(&drawn[cursor..cursor + batch])
        {
            let stored = &mut table[r * row_len..(r + 1) * row_len];
            match op {
                RowOp::Copy => row.copy_from_slice(stored),
                RowOp::Add => stored.iter_mut().zip(&*row).for_each(|(s, u)| *s += u),
            }
        }
        checksum += out[done % out.len()] + table[done % table.len()];
        cursor += batch;
        done += batch;
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
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
