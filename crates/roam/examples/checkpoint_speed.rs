//! Checkpoint and restore speed of one node's table against the disk (docs/reliability.md):
//! `cargo run --release -p roam --example checkpoint_speed -- DIR [keys] [value_len]
//! [--drop-caches] [--ranks M]`.
//! Fills `keys` keys of `value_len` floats (default 4 Mi × 64: 1 GiB), writes a checkpoint
//! into DIR (which must not hold one), then starts a second node restoring it; prints the
//! table size, both times and both rates as one JSON line. `--drop-caches` (root) syncs and
//! drops the page cache before each restore, so that it reads the disk; `--ranks M` also
//! restores the checkpoint into each rank of an M-node cluster in turn (the restore alone, on
//! an unstarted core node) and prints each rank's time and bytes read.
//! `--restore-only`: DIR already holds a checkpoint of such a table (written
//! by an earlier run); only the restores run (for profiling them), after an empty node's start
//! unless `--no-empty-start`.
//! `scripts/checkpoint-speed.sh` runs it beside `dd` for the reference rates.

use std::time::Instant;

use roam::{Config, NodeHandle};
use roam_core::node::{Node, NodeConfig};
use roam_core::{NodeId, Partitioning};

fn drop_caches() -> anyhow::Result<()> {
    std::process::Command::new("sync").status()?;
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| anyhow::anyhow!("--drop-caches needs root: /proc/sys/vm/drop_caches: {e}"))
}

/// CPU time (user + system) of this process so far, in seconds: less noisy than wall time on a
/// shared machine, and it counts the kernel's work (page faults, copies from the page cache)
/// that an instruction count misses.
fn cpu_s() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let usage = unsafe {
        let mut u = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut flag = |name: &str| match args.iter().position(|a| a == name) {
        Some(i) => {
            args.remove(i);
            true
        }
        None => false,
    };
    let uncached = flag("--drop-caches");
    let restore_only = flag("--restore-only");
    // With --restore-only: no empty node's start either (so that a profile of every
    // `NodeHandle::start` is the restore's alone).
    let no_empty_start = flag("--no-empty-start");
    let ranks: u32 = match args.iter().position(|a| a == "--ranks") {
        Some(i) => {
            args.remove(i);
            args.remove(i).parse()?
        }
        None => 0,
    };
    let mut args = args.into_iter();
    let dir = std::path::PathBuf::from(args.next().ok_or_else(|| {
        anyhow::anyhow!(
            "usage: checkpoint_speed DIR [keys] [value_len] [--drop-caches] [--ranks M] \
             [--restore-only]"
        )
    })?);
    let keys: u64 = args.next().map_or(Ok(4 << 20), |a| a.parse())?;
    let len: u32 = args.next().map_or(Ok(64), |a| a.parse())?;
    let config = || {
        let mut cfg = Config::new(keys, len);
        cfg.workers_per_node = Some(1);
        cfg
    };
    let bytes = keys * u64::from(len) * 4;
    let (empty_start, write) = if restore_only && no_empty_start {
        (f64::NAN, f64::NAN)
    } else if restore_only {
        let start = Instant::now();
        drop(NodeHandle::start(config())?);
        (start.elapsed().as_secs_f64(), f64::NAN)
    } else {
        fill_and_checkpoint(&dir, config(), keys, len)?
    };
    if uncached {
        drop_caches()?;
    }
    let (start, cpu) = (Instant::now(), cpu_s());
    let restored = NodeHandle::start(config().restore_from(&dir))?;
    let read = start.elapsed().as_secs_f64();
    let read_cpu = cpu_s() - cpu;
    drop(restored);
    // The floor of any restore into a fresh process: the kernel hands out a table's worth of
    // zeroed pages, one fault each (dd reuses one buffer and pays none of it).
    let (start, cpu) = (Instant::now(), cpu_s());
    let fresh = std::hint::black_box(vec![1u8; bytes as usize]);
    let fresh_memory = (start.elapsed().as_secs_f64(), cpu_s() - cpu);
    drop(fresh);
    let mut per_rank = Vec::new();
    for rank in 0..ranks {
        if uncached {
            drop_caches()?;
        }
        let space = config().key_space()?;
        let mut node = Node::unfilled(NodeConfig::new(
            NodeId(rank),
            ranks,
            1,
            space,
            Partitioning::Range,
        ));
        let (start, cpu) = (Instant::now(), cpu_s());
        let stats = roam::checkpoint::restore_into(&mut node, &dir)?;
        let s = start.elapsed().as_secs_f64();
        let s_cpu = cpu_s() - cpu;
        per_rank.push(serde_json::json!({
            "rank": rank, "restore_s": s, "restore_cpu_s": s_cpu, "bytes_read": stats.bytes_read,
            "records": stats.loaded, "mb_s_of_its_part": bytes as f64 / f64::from(ranks) / 1e6 / s,
        }));
    }
    let mb = bytes as f64 / 1e6;
    println!(
        "{}",
        serde_json::json!({
            "table_bytes": bytes, "checkpoint_s": write, "checkpoint_mb_s": mb / write,
            "restore_s": read, "restore_cpu_s": read_cpu, "restore_mb_s": mb / read, "empty_start_s": empty_start,
            "fresh_memory_s": fresh_memory.0, "fresh_memory_cpu_s": fresh_memory.1, "caches_dropped": uncached,
            "ranks": per_rank,
        })
    );
    Ok(())
}

/// Starts a node, fills the table and checkpoints it into `dir`; returns the empty node's
/// start time and the checkpoint's.
fn fill_and_checkpoint(
    dir: &std::path::Path,
    config: Config,
    keys: u64,
    len: u32,
) -> anyhow::Result<(f64, f64)> {
    let start = Instant::now();
    let node = NodeHandle::start(config)?;
    // A node's start without a restore, to tell the restore's own time apart.
    let empty_start = start.elapsed().as_secs_f64();
    let worker = node.worker(0)?;
    let batch: Vec<u64> = (0..4096).collect();
    let mut vals = vec![0f32; batch.len() * len as usize];
    for first in (0..keys).step_by(batch.len()) {
        let ks: Vec<u64> = batch
            .iter()
            .map(|k| first + k)
            .filter(|&k| k < keys)
            .collect();
        for (i, v) in vals.iter_mut().enumerate().take(ks.len() * len as usize) {
            *v = (first as f32) + i as f32;
        }
        worker.set(&ks, &vals[..ks.len() * len as usize])?.wait()?;
    }
    let start = Instant::now();
    worker.checkpoint(dir)?;
    let write = start.elapsed().as_secs_f64();
    drop(worker);
    node.shutdown()?;
    Ok((empty_start, write))
}
