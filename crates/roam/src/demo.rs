//! `roam demo`: the embedded default job — a short distributed matrix factorisation.
//!
//! A rank-`r` matrix is planted from a fixed seed (no data download), `--entries` of its cells
//! are observed with noise, and every worker of every node runs mini-batch SGD on its share of
//! them through the parameter server: one key per row factor, one per column factor. Rank 0
//! reports the training RMSE after each epoch; it must fall towards the noise level.
//! Run outside a cluster it launches itself on `--nodes` local processes.

use anyhow::Context;
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roam_core::Key;
use serde_json::json;

use crate::config::{Allocation, Config};
use crate::runtime::NodeHandle;
use crate::worker::Worker;

/// Options of `roam demo`.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Nodes to launch when not already inside a cluster.
    #[arg(long, default_value_t = 2)]
    pub nodes: u32,
    /// Worker threads per node when launching.
    #[arg(long, default_value_t = 2)]
    pub workers_per_node: u32,
    /// Matrix rows.
    #[arg(long, default_value_t = 2_000)]
    pub rows: u64,
    /// Matrix columns.
    #[arg(long, default_value_t = 1_000)]
    pub cols: u64,
    /// Rank of the planted matrix and of the factors.
    #[arg(long, default_value_t = 8)]
    pub rank: u32,
    /// Observed cells.
    #[arg(long, default_value_t = 200_000)]
    pub entries: usize,
    /// Epochs.
    #[arg(long, default_value_t = 8)]
    pub epochs: u32,
    /// Learning rate.
    #[arg(long, default_value_t = 0.02)]
    pub lr: f32,
    /// Allocation: static-range or static-hash.
    #[arg(long, default_value = "static-hash")]
    pub allocation: Allocation,
    /// Seed of the planted matrix and the initial factors.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

const BATCH: usize = 64;
const NOISE: f32 = 0.05;

/// Runs the demo on this node (or launches the cluster first).
pub fn run(args: &DemoArgs) -> anyhow::Result<i32> {
    if std::env::var_os("ROAM_NUM_NODES").is_none() && args.nodes > 1 {
        let exe = std::env::current_exe().context("locating the roam binary")?;
        let mut program = vec![exe.into_os_string(), "demo".into()];
        program.extend(std::env::args_os().skip(2));
        let launch = crate::launch::LaunchArgs {
            nodes: args.nodes,
            workers_per_node: Some(args.workers_per_node),
            latency_us: None,
            network: Default::default(),
            program,
        };
        return crate::launch::run(&launch);
    }
    train(args)?;
    Ok(0)
}

fn train(args: &DemoArgs) -> anyhow::Result<()> {
    let rank = args.rank as usize;
    let loss_key = args.rows + args.cols;
    let mut cfg = Config::new(loss_key + 1, args.rank);
    cfg.allocation = args.allocation;
    let node = NodeHandle::start(cfg).context("starting the node")?;
    let total_workers = (node.num_nodes() * node.workers_per_node()) as usize;
    let (u, v) = (
        planted(args.rows, rank, args.seed),
        planted(args.cols, rank, args.seed ^ 1),
    );
    let mut rng = SmallRng::seed_from_u64(args.seed ^ 2);
    let entries: Vec<(u64, u64, f32)> = (0..args.entries)
        .map(|_| {
            let (i, j) = (
                rng.random_range(0..args.rows),
                rng.random_range(0..args.cols),
            );
            let dot: f32 = (0..rank)
                .map(|d| u[i as usize * rank + d] * v[j as usize * rank + d])
                .sum();
            (i, j, dot + NOISE * (rng.random::<f32>() - 0.5))
        })
        .collect();

    let report = std::thread::scope(|scope| -> anyhow::Result<Vec<f64>> {
        let handles: Vec<_> = node
            .workers()?
            .into_iter()
            .map(|w| {
                let entries = &entries;
                scope.spawn(move || worker_loop(&w, args, entries, total_workers, loss_key))
            })
            .collect();
        let mut rmses = Vec::new();
        for h in handles {
            let r = h.join().expect("demo worker panicked")?;
            if !r.is_empty() {
                rmses = r;
            }
        }
        Ok(rmses)
    })?;
    if node.rank() == 0 {
        println!(
            "{}",
            json!({ "app": "demo-mf", "nodes": node.num_nodes(), "workers_per_node": node.workers_per_node(),
                    "allocation": args.allocation.name(), "train_rmse": report,
                    "local_fraction": node.stats().local_fraction })
        );
    }
    node.shutdown()?;
    Ok(())
}

fn planted(n: u64, rank: usize, seed: u64) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n as usize * rank)
        .map(|_| rng.random::<f32>() / (rank as f32).sqrt() * 2.0)
        .collect()
}

/// One worker's epochs; worker 0 of rank 0 returns the RMSE per epoch.
fn worker_loop(
    w: &Worker,
    args: &DemoArgs,
    entries: &[(u64, u64, f32)],
    total: usize,
    loss_key: Key,
) -> anyhow::Result<Vec<f64>> {
    let rank = args.rank as usize;
    let me = w.global_id() as usize;
    if me == 0 {
        let mut rng = SmallRng::seed_from_u64(args.seed ^ 3);
        let keys: Vec<Key> = (0..loss_key).collect();
        let init: Vec<f32> = (0..keys.len() * rank)
            .map(|_| 0.1 + 0.2 * rng.random::<f32>())
            .collect();
        w.set(&keys, &init)?.wait()?;
    }
    w.barrier()?;
    let mine: Vec<&(u64, u64, f32)> = entries.iter().skip(me).step_by(total).collect();
    let mut rmses = Vec::new();
    let mut keys = Vec::with_capacity(2 * BATCH);
    let mut vals = vec![0f32; 2 * BATCH * rank];
    let mut grads = vec![0f32; 2 * BATCH * rank];
    for _epoch in 0..args.epochs {
        let mut sq_err = 0f64;
        for chunk in mine.chunks(BATCH) {
            keys.clear();
            for &&(i, j, _) in chunk {
                keys.push(i);
                keys.push(args.rows + j);
            }
            let n = keys.len() * rank;
            w.pull(&keys, &mut vals[..n])?.wait()?;
            for (e, &&(_, _, rating)) in chunk.iter().enumerate() {
                let (wi, hj) = (
                    &vals[2 * e * rank..(2 * e + 1) * rank],
                    &vals[(2 * e + 1) * rank..(2 * e + 2) * rank],
                );
                let err = wi.iter().zip(hj).map(|(a, b)| a * b).sum::<f32>() - rating;
                sq_err += f64::from(err * err);
                for d in 0..rank {
                    grads[2 * e * rank + d] = -args.lr * (err * hj[d] + 0.001 * wi[d]);
                    grads[(2 * e + 1) * rank + d] = -args.lr * (err * wi[d] + 0.001 * hj[d]);
                }
            }
            w.push(&keys, &grads[..n])?.wait()?;
        }
        let mut loss = vec![0f32; rank];
        loss[0] = sq_err as f32;
        loss[1] = mine.len() as f32;
        w.push(&[loss_key], &loss)?.wait()?;
        w.barrier()?;
        if me == 0 {
            w.pull(&[loss_key], &mut loss)?.wait()?;
            rmses.push((f64::from(loss[0]) / f64::from(loss[1])).sqrt());
            eprintln!(
                "epoch {}: train RMSE {:.4}",
                rmses.len(),
                rmses.last().unwrap()
            );
            w.set(&[loss_key], &vec![0f32; rank])?.wait()?;
        }
        w.barrier()?;
    }
    Ok(rmses)
}
