//! A fixed amount of local fast-path work through the worker API, for instruction counts
//! (`valgrind --tool=callgrind`; wall-clock benchmarks are `local_bench`): one node, one
//! worker, `keys` dense keys of `value_len` values, `batches` pulls then as many pushes of
//! `batch` uniformly random keys (seeded, so every run does the same work). The space is dense
//! (`dense`, the default), sparse (`sparse`: the same keys in a sparse index) or one named
//! table of those ids beside a second table (`table`: pulls and pushes of the table's ids).
//! `cargo run --release -p roam --example fastpath_ir -- [keys] [value_len] [batch] [batches]
//! [dense|sparse|table]`.
//! Divide the inclusive instructions of `roam::worker::Worker::pull` (or `push`) by
//! `batches × batch` for instructions per key (docs/benchmarks.md).

use rand::{Rng, SeedableRng};
use roam::{Config, NodeHandle, TableSpec};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut next = |default: u64| -> anyhow::Result<u64> {
        Ok(match args.next() {
            Some(a) => a.parse()?,
            None => default,
        })
    };
    let keys = next(100_000)?;
    let len = next(8)? as usize;
    let batch = next(100)? as usize;
    let batches = next(22_000)? as usize;
    let kind = args.next().unwrap_or_else(|| "dense".into());
    let mut cfg = match kind.as_str() {
        "dense" | "sparse" => Config::new(keys, len as u32),
        "table" => Config::tables(vec![
            TableSpec::dense("t", keys, len as u32),
            TableSpec::dense("other", 10, 1),
        ]),
        other => anyhow::bail!("space {other:?}: expected dense, sparse or table"),
    };
    cfg.sparse_keys = kind == "sparse";
    cfg.workers_per_node = Some(1);
    cfg.print_stats = false;
    let node = NodeHandle::start(cfg)?;
    let worker = node.worker(0)?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let drawn: Vec<u64> = (0..batch * batches)
        .map(|_| rng.random_range(0..keys))
        .collect();
    let mut buf = vec![0.5f32; batch * len];
    if kind == "table" {
        let table = worker.table("t")?;
        for batch_ids in drawn.chunks_exact(batch) {
            table.pull(batch_ids, &mut buf)?.wait()?;
        }
        for batch_ids in drawn.chunks_exact(batch) {
            table.push(batch_ids, &buf)?.wait()?;
        }
    } else {
        for batch_keys in drawn.chunks_exact(batch) {
            worker.pull(batch_keys, &mut buf)?.wait()?;
        }
        for batch_keys in drawn.chunks_exact(batch) {
            worker.push(batch_keys, &buf)?.wait()?;
        }
    }
    println!("{} pulls and pushes of {batch} keys", batches);
    drop(worker);
    node.shutdown()?;
    Ok(())
}
