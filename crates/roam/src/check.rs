//! `roam check`: end-to-end self-checks of a running cluster, with exact expected results.
//!
//! Run under `roam launch` (or any launcher) to verify a deployment; the test suite runs them on
//! loopback. Each check exits non-zero with a message naming the first wrong key and value.
//!
//! - `increments`: every worker thread of every node pushes `(1, 2)` increments to shared keys
//!   while some workers localize keys; the final values must equal the exact sums.
//! - `peer-loss`: the last node leaves without saying goodbye; operations of the others that
//!   need it must fail with an error naming it, within the peer timeout, and never hang.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::{Args, Subcommand};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roam_core::{Key, OpError};

use crate::config::{Allocation, Config};
use crate::runtime::NodeHandle;
use crate::worker::Worker;

/// The checks.
#[derive(Subcommand, Debug, Clone)]
pub enum CheckCommand {
    /// Concurrent increments from all workers, with relocations; exact final sums.
    Increments(IncrementsArgs),
    /// A node disappears; operations that need it fail promptly with an error naming it.
    PeerLoss(PeerLossArgs),
}

/// Options of `roam check increments`.
#[derive(Args, Debug, Clone)]
pub struct IncrementsArgs {
    /// Number of shared keys (each holds two values).
    #[arg(long, default_value_t = 1)]
    pub keys: u64,
    /// Pushes per worker thread.
    #[arg(long, default_value_t = 100_000)]
    pub ops: u64,
    /// A localizing worker localizes the key it pushes every this many operations (0: never).
    #[arg(long, default_value_t = 1_000)]
    pub localize_every: u64,
    /// How many workers localize, counted from the last worker of the last node (0: all).
    #[arg(long, default_value_t = 0)]
    pub localizers: u32,
    /// Pushes in flight per worker before it waits (1: synchronous).
    #[arg(long, default_value_t = 16)]
    pub window: usize,
    /// Allocation mode.
    #[arg(long, default_value = "dynamic")]
    pub allocation: Allocation,
    /// Route local keys through messages too.
    #[arg(long)]
    pub no_fast_local_access: bool,
    /// Enable location caches (dynamic allocation).
    #[arg(long)]
    pub location_caches: bool,
    /// Seed of the key choices.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

/// Options of `roam check peer-loss`.
#[derive(Args, Debug, Clone)]
pub struct PeerLossArgs {
    /// Seconds of silence after which a peer is declared gone.
    #[arg(long, default_value_t = 2.0)]
    pub peer_timeout: f64,
}

/// Runs a check on this node.
pub fn run(command: &CheckCommand) -> anyhow::Result<()> {
    match command {
        CheckCommand::Increments(args) => increments(args),
        CheckCommand::PeerLoss(args) => peer_loss(args),
    }
}

/// The key pushed by worker `global` at step `i`: a pure function, so that every node can
/// compute every worker's pushes and hence the exact expected totals.
fn key_at(rng: &mut SmallRng, keys: u64) -> Key {
    rng.random_range(0..keys)
}

fn worker_rng(seed: u64, global: u32) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ (u64::from(global) << 40))
}

fn increments(args: &IncrementsArgs) -> anyhow::Result<()> {
    ensure!(
        args.keys > 0 && args.window > 0,
        "--keys and --window must be positive"
    );
    let mut cfg = Config::new(args.keys, 2);
    cfg.allocation = args.allocation;
    cfg.fast_local_access = !args.no_fast_local_access;
    cfg.location_caches = args.location_caches;
    let node = NodeHandle::start(cfg).context("starting the node")?;
    let total_workers = node.num_nodes() * node.workers_per_node();
    let started = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = node
            .workers()?
            .into_iter()
            .map(|w| scope.spawn(move || push_increments(&w, args, total_workers)))
            .collect();
        for h in handles {
            h.join().expect("check worker panicked")?;
        }
        Ok(())
    })?;
    let stats = node.stats();
    if node.rank() == 0 {
        println!(
            "increments: {} workers x {} ops on {} keys verified exactly in {:.2} s",
            total_workers,
            args.ops,
            args.keys,
            started.elapsed().as_secs_f64()
        );
    }
    eprintln!(
        "relocations in {}, out {}, forwards {}",
        stats.relocations_in, stats.relocations_out, stats.forwards
    );
    node.shutdown()?;
    Ok(())
}

fn push_increments(w: &Worker, args: &IncrementsArgs, total_workers: u32) -> anyhow::Result<()> {
    let me = w.global_id();
    let total = w.num_nodes() * w.workers_per_node();
    let localizes = args.localize_every > 0
        && (args.localizers == 0 || me >= total.saturating_sub(args.localizers));
    let mut rng = worker_rng(args.seed, me);
    let mut tickets = std::collections::VecDeque::new();
    for i in 0..args.ops {
        let key = key_at(&mut rng, args.keys);
        if localizes && i % args.localize_every == 0 {
            // Not waited on: the pushes that follow must be right wherever the key is.
            drop(w.localize(&[key])?);
        }
        tickets.push_back(w.push(&[key], &[1.0, 2.0])?);
        if tickets.len() >= args.window {
            tickets.pop_front().expect("non-empty").wait()?;
        }
    }
    while let Some(t) = tickets.pop_front() {
        t.wait()?;
    }
    w.barrier()?;

    // Every node recomputes every worker's key sequence to know the exact totals.
    let mut expected = vec![0f64; args.keys as usize];
    for global in 0..total_workers {
        let mut rng = worker_rng(args.seed, global);
        for _ in 0..args.ops {
            expected[key_at(&mut rng, args.keys) as usize] += 1.0;
        }
    }
    let keys: Vec<Key> = (0..args.keys).collect();
    let mut values = vec![0f32; keys.len() * 2];
    w.pull(&keys, &mut values)?.wait()?;
    for (key, pair) in values.chunks_exact(2).enumerate() {
        let want = expected[key];
        if f64::from(pair[0]) != want || f64::from(pair[1]) != 2.0 * want {
            bail!(
                "key {key}: value ({}, {}) but exactly ({want}, {}) was pushed",
                pair[0],
                pair[1],
                2.0 * want
            );
        }
    }
    w.barrier()?;
    Ok(())
}

fn peer_loss(args: &PeerLossArgs) -> anyhow::Result<()> {
    let mut cfg = Config::new(64, 4);
    cfg.peer_timeout = Duration::from_secs_f64(args.peer_timeout);
    let node = NodeHandle::start(cfg).context("starting the node")?;
    ensure!(node.num_nodes() >= 2, "peer-loss needs at least 2 nodes");
    let last = node.num_nodes() - 1;
    let worker = node.worker(0)?;
    // Everyone is up and connected before the last node disappears.
    let ready = worker.barrier();
    if node.rank() == last {
        // Leave without a goodbye, as a crashed process would (the kernel closes the sockets).
        std::process::exit(0);
    }
    match ready {
        // The last node leaves as soon as it is released: a node that learns of the loss
        // before its own release arrives sees its barrier fail, naming that node, which is
        // the behaviour this check is about (the pull below must then fail the same way).
        Ok(()) => {}
        Err(OpError::PeerGone { peer }) if peer.0 == last => {}
        Err(e) => return Err(e.into()),
    }
    // A key homed on the vanished node (range allocation: the last keys).
    let key = 63;
    let started = Instant::now();
    let mut out = [0f32; 4];
    let result = loop {
        // Until the loss is noticed the pull may still succeed; afterwards it must fail.
        match worker.pull(&[key], &mut out)?.wait() {
            Ok(()) if started.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            other => break other,
        }
    };
    let waited = started.elapsed();
    match result {
        Err(OpError::PeerGone { peer }) if peer.0 == last => {}
        other => bail!("expected the pull to fail with node {last} gone, got {other:?}"),
    }
    match worker.barrier() {
        Err(OpError::PeerGone { .. }) => {}
        other => bail!("expected the barrier to fail with a peer gone, got {other:?}"),
    }
    println!(
        "peer-loss: node {} saw node {last} gone after {:.3} s",
        node.rank(),
        waited.as_secs_f64()
    );
    drop(worker);
    drop(node);
    Ok(())
}
