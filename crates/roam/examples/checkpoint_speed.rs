//! Checkpoint and restore speed of one node's table against the disk (docs/reliability.md):
//! `cargo run --release -p roam --example checkpoint_speed -- DIR [keys] [value_len]`.
//! Fills `keys` keys of `value_len` floats (default 4 Mi × 64: 1 GiB), writes a checkpoint
//! into DIR (which must not hold one), then starts a second node restoring it; prints the
//! table size, both times and both rates as one JSON line. Run `dd` on the same disk beside
//! it for the reference rates.

use std::time::Instant;

use roam::{Config, NodeHandle};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(
        args.next()
            .expect("usage: checkpoint_speed DIR [keys] [value_len]"),
    );
    let keys: u64 = args.next().map_or(Ok(4 << 20), |a| a.parse())?;
    let len: u32 = args.next().map_or(Ok(64), |a| a.parse())?;
    let config = || {
        let mut cfg = Config::new(keys, len);
        cfg.workers_per_node = Some(1);
        cfg
    };
    let bytes = keys * u64::from(len) * 4;
    let node = NodeHandle::start(config())?;
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
    worker.checkpoint(&dir)?;
    let write = start.elapsed().as_secs_f64();
    drop(worker);
    node.shutdown()?;
    let start = Instant::now();
    let restored = NodeHandle::start(config().restore_from(&dir))?;
    let read = start.elapsed().as_secs_f64();
    drop(restored);
    let mb = bytes as f64 / 1e6;
    println!(
        "{}",
        serde_json::json!({
            "table_bytes": bytes, "checkpoint_s": write, "checkpoint_mb_s": mb / write,
            "restore_s": read, "restore_mb_s": mb / read,
        })
    );
    Ok(())
}
