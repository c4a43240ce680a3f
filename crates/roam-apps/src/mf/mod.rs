//! The `mf` workload: matrix factorisation by DSGD with parameter blocking (`roam train mf`).
//!
//! Model: a rating is predicted as `μ + W_i·H_j`, where `μ` is the mean training rating (a
//! constant, not learned) and `W_i`, `H_j` are `--dim`-long factors. Keys: W row `i` is key
//! `i`, H column `j` is key `rows + j`, followed by the reserved keys of two
//! [`SumKeys`](crate::common::SumKeys) (per-epoch losses, final node counters).
//!
//! Training (see `schedule` and `train`): the `P` workers of the cluster split rows and
//! columns into `P` blocks each; an epoch has `P` sub-epochs separated by barriers, in which
//! worker `p` runs plain SGD on squared loss plus per-point L2 (`--lambda`) over data block
//! `(p, (p + s) mod P)` in a seeded random order. The step size follows the bold driver:
//! ×1.05 after an epoch whose loss fell, ×0.5 after one whose loss rose.
//!
//! Reported per epoch: `loss`, the training objective `Σ (r - μ - W_i·H_j)² + λ(|W_i|² + |H_j|²)`
//! summed over the epoch's points, each measured just before that point's update (the online
//! loss: exact over all training points, no extra pass; it drives the bold driver); and, on
//! evaluated epochs (`--eval-every`, always the last), `train_rmse` and `test_rmse` of the
//! model after the epoch, computed distributedly (each worker its own row block's points) and
//! summed exactly through the parameter server.
//!
//! Modes change only where parameters live (and whether lapse localizes them); the points,
//! their order, the initial factors and the arithmetic are the same in every mode for the same
//! total number of workers. The NuPS modes (`replicate`) replicate the hot columns and end
//! every sub-epoch with `sync_replicas` instead of a barrier, so the next sub-epoch's worker
//! starts from every earlier update, as in the other modes (the only difference is the
//! floating-point order in which a replicated column's deltas are summed).

pub mod data;
pub mod replicate;
pub mod schedule;
pub mod sums;
pub mod synthetic;
pub mod train;

use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use roam::{Config, Key, NodeHandle, Worker};
use serde_json::json;

use crate::checkpointing;
use crate::common::{self, ClusterCounters, Mode, Stopwatch, SumKeys, TrainReport};
use crate::intents::{self, NodeIntents};
use crate::output::{self, Console, LocalFraction, OutputArgs};
use crate::replication;
use data::Ratings;
use sums::NodeSums;
use synthetic::Spec;
use train::{Hyper, Layout, Point, Trainer, WorkerData};

/// Options of `roam train mf`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Allocation mode.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Directory with `train` and `test` (MatrixMarket `.mmc` or `user item rating` `.tsv`).
    #[arg(long, conflicts_with = "synthetic")]
    pub data: Option<PathBuf>,
    /// Synthetic matrix, e.g. `rows=10000,cols=5000,rank=10,nnz=1e6,zipf=1.1,noise=0.1,test=0.1,seed=1`
    /// (without --data or --synthetic: a small embedded synthetic matrix).
    #[arg(long)]
    pub synthetic: Option<String>,
    /// Epochs.
    #[arg(long, default_value_t = 30)]
    pub epochs: u32,
    /// Factor dimension (rank of the model).
    #[arg(long, default_value_t = 32)]
    pub dim: u32,
    /// L2 weight, applied per point to both factors.
    #[arg(long, default_value_t = 0.1)]
    pub lambda: f32,
    /// Initial learning rate (then adapted by the bold driver).
    #[arg(long, default_value_t = 0.02)]
    pub lr: f32,
    /// Seed of the blocking, the point order and the initial factors.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Evaluate train and test RMSE every N epochs (0 = only after the last).
    #[arg(long, default_value_t = 1)]
    pub eval_every: u32,
    /// Points per pull/push batch (the math does not depend on it).
    #[arg(long, default_value_t = 256)]
    pub chunk: usize,
    /// Lapse mode: localize the next sub-epoch's column block after this fraction of the
    /// current block (default: at the start of the next sub-epoch only).
    #[arg(long)]
    pub prefetch_at: Option<f64>,
    /// Standard deviation of the initial factors.
    #[arg(long, default_value_t = 0.1)]
    pub init_sd: f32,
    /// Worker threads per node (default: ROAM_WORKERS_PER_NODE, set by `roam launch`, else 1).
    #[arg(long)]
    pub workers: Option<u32>,
    /// Replication (the nups modes).
    #[command(flatten)]
    pub replication: replicate::Options,
    /// Checkpoints and resuming.
    #[command(flatten)]
    pub checkpoint: checkpointing::Options,
    /// Share-sync rounds (the adapm modes).
    #[command(flatten)]
    pub share: crate::intents::ShareOptions,
    /// Output: report, JSON, plot.
    #[command(flatten)]
    pub output: OutputArgs,
}

impl Args {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.epochs >= 1, "--epochs must be at least 1");
        ensure!(
            (1..=4096).contains(&self.dim),
            "--dim {} must be in 1..=4096",
            self.dim
        );
        ensure!(
            self.lambda.is_finite() && self.lambda >= 0.0,
            "--lambda {} must be >= 0",
            self.lambda
        );
        ensure!(
            self.lr.is_finite() && self.lr > 0.0,
            "--lr {} must be > 0",
            self.lr
        );
        ensure!(
            (1..=1 << 20).contains(&self.chunk),
            "--chunk {} must be in 1..=1048576",
            self.chunk
        );
        ensure!(
            self.prefetch_at.is_none_or(|f| (0.0..=1.0).contains(&f)),
            "--prefetch-at must be in [0, 1]"
        );
        ensure!(
            self.init_sd.is_finite() && self.init_sd >= 0.0,
            "--init-sd must be >= 0"
        );
        ensure!(self.workers != Some(0), "--workers must be at least 1");
        self.checkpoint.validate()?;
        self.replication.validate()
    }

    /// The matrix and the dataset name for the report.
    fn load(&self) -> anyhow::Result<(Ratings, String)> {
        if let Some(dir) = &self.data {
            let ratings = data::load_dir(dir)?;
            return Ok((ratings, dir.display().to_string()));
        }
        let (spec, name): (Spec, _) = common::synthetic_spec(
            self.synthetic.as_deref(),
            Spec::EMBEDDED,
            "embedded-synthetic",
        )?;
        Ok((synthetic::generate(&spec), name))
    }
}

/// Counters summed over the cluster after every epoch: [`sums::SUMS`], then the epoch's CPU
/// microseconds (each node's worker 0 measures its process around the epoch), then the
/// epoch's intent counters ([`crate::intents`]), then the cumulative (local, all) key
/// accesses ([`output::access_counts`]).
const EPOCH_SUMS: usize = sums::SUMS + 1 + intents::COUNTERS + 2;
/// Where the intent counters start in the per-epoch sums.
const INTENTS_AT: usize = sums::SUMS + 1;
/// Where the access counts start in the per-epoch sums.
const ACCESSES_AT: usize = INTENTS_AT + intents::COUNTERS;

/// Counters summed over the cluster at the end: the cluster counters, then the replication
/// counters.
const COUNTER_SUMS: usize = common::CLUSTER_COUNTERS + replicate::COUNTERS;

/// What global worker 0 hands back: the per-epoch records, the cluster counters, the summed
/// replication counters and the summed intent counters (all epochs; the last window).
type Outcome = Option<(
    Vec<serde_json::Value>,
    ClusterCounters,
    Vec<u64>,
    [u64; intents::COUNTERS],
)>;

/// Trains on this node; rank 0 outputs the report ([`OutputArgs`]) and returns it.
pub fn run(args: &Args) -> anyhow::Result<Option<serde_json::Value>> {
    args.validate()?;
    let (ratings, dataset) = args.load()?;
    ensure!(
        !ratings.train.is_empty(),
        "{dataset}: the training set is empty"
    );
    let dim = args.dim as usize;
    let mean = ratings.train_mean();
    let model_keys = u64::from(ratings.rows) + u64::from(ratings.cols);
    let loss_keys = SumKeys::keys_needed(EPOCH_SUMS, dim);
    let counter_keys = SumKeys::keys_needed(COUNTER_SUMS, dim);
    let mut cfg = Config::new(model_keys + (loss_keys + counter_keys) as u64, args.dim);
    cfg.workers_per_node = args.workers;
    // Every node holds the whole matrix here, so every node chooses the same columns.
    let plan = if args.mode.replicates() {
        replicate::Plan::choose(&ratings, &args.replication)
    } else {
        replicate::Plan::default()
    };
    cfg.replicated_keys = plan.keys.clone();
    args.replication.configure(&mut cfg, plan.keys.len());
    args.share.validate()?;
    args.share.configure(&mut cfg);
    args.output.configure(&mut cfg);
    let start = args.checkpoint.configure(&mut cfg, args.epochs)?;
    let node = args.mode.start(cfg).context("starting the roam node")?;
    args.output.start(node.rank())?;
    let parts = node.num_nodes() * node.workers_per_node();
    let mut layout = Layout::new(ratings.rows, ratings.cols, dim, parts, args.seed);
    layout.keep_local(&plan.keys);
    let reserved = |from: u64, n: usize| -> Vec<Key> { (from..from + n as u64).collect() };
    let loss_sums = SumKeys::new(reserved(model_keys, loss_keys), dim, EPOCH_SUMS);
    let counter_sums = SumKeys::new(
        reserved(model_keys + loss_keys as u64, counter_keys),
        dim,
        COUNTER_SUMS,
    );
    let settings = json!({
        "dim": args.dim, "lambda": short(args.lambda), "lr": short(args.lr), "seed": args.seed, "chunk": args.chunk,
        "prefetch_at": args.prefetch_at, "init_sd": short(args.init_sd), "eval_every": args.eval_every,
        "blocks_per_dimension": parts, "rows": ratings.rows, "cols": ratings.cols,
        "train_points": ratings.train.len(), "test_points": ratings.test.len(),
        "test_dropped_unseen": ratings.test_dropped, "train_mean": mean,
        "baseline_test_rmse": ratings.test_rmse_of_constant(mean),
        "loss": "online: sum over the epoch of (r - mean - w.h)^2 + lambda(|w|^2 + |h|^2), each before its update",
    });
    let train_points = ratings.train.len() as u64;
    let mut shares = distribute(
        &ratings,
        &layout,
        mean,
        node.rank(),
        node.workers_per_node(),
    );
    drop(ratings);
    let hyper = Hyper {
        lambda: args.lambda,
        chunk: args.chunk,
        localize: args.mode.localizes(),
        replicated: args.mode.replicates(),
        prefetch_at: args.prefetch_at,
        intents: args.mode.signals_intents(),
        seed: args.seed,
        init_sd: args.init_sd,
    };
    let node_sums = NodeSums::default();
    let node_intents = NodeIntents::default();
    let ctx = Shared {
        args,
        node: &node,
        layout: &layout,
        hyper,
        node_sums: &node_sums,
        node_intents: &node_intents,
        loss_sums,
        counter_sums,
        plan: &plan,
        start: &start,
        console: Console::new(&args.output, "test_rmse", "points"),
        train_points,
    };
    let workers = node.workers().context("taking the node's workers")?;
    let outcome = std::thread::scope(|scope| -> anyhow::Result<Outcome> {
        let handles: Vec<_> = workers
            .into_iter()
            .zip(shares.drain(..))
            .map(|(worker, share)| {
                let ctx = &ctx;
                scope.spawn(move || ctx.worker(&worker, share))
            })
            .collect();
        let mut outcome = None;
        for handle in handles {
            match handle.join() {
                Ok(result) => {
                    if let Some(o) = result? {
                        outcome = Some(o);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(outcome)
    })?;
    let mut report = None;
    if let Some((epochs, counters, replica_sums, intent_sums)) = outcome {
        let mut settings = settings;
        if args.mode.replicates() {
            settings["replication"] =
                replicate::report(&plan, &args.replication, &replica_sums, node.num_nodes());
        }
        let value = TrainReport {
            app: "mf",
            mode: args.mode.name(),
            nodes: node.num_nodes(),
            workers_per_node: node.workers_per_node(),
            dataset,
            epochs,
            counters,
            settings,
            intents: args
                .mode
                .signals_intents()
                .then(|| intents::report(&intent_sums, u64::from(parts))),
        }
        .to_value();
        args.output.finish(&value)?;
        report = Some(value);
    }
    args.output.trace(&node)?;
    let stats = node.shutdown().context("shutting the node down")?;
    args.output.node_stats(&stats)?;
    Ok(report)
}

/// Splits the training and test points among this node's workers (global ids
/// `rank * per_node ..`), by row block and then column block.
fn distribute(
    ratings: &Ratings,
    layout: &Layout,
    mean: f64,
    rank: u32,
    per_node: u32,
) -> Vec<WorkerData> {
    let parts = layout.parts as usize;
    let first = rank * per_node;
    let mut shares: Vec<WorkerData> = (0..per_node)
        .map(|_| WorkerData {
            train: vec![Vec::new(); parts],
            test: vec![Vec::new(); parts],
        })
        .collect();
    for (entries, test) in [(&ratings.train, false), (&ratings.test, true)] {
        for e in entries {
            let p = layout.rows.block[e.row as usize];
            if !(first..first + per_node).contains(&p) {
                continue;
            }
            let q = layout.cols.block[e.col as usize] as usize;
            let point = Point {
                w: layout.rows.local[e.row as usize],
                h: layout.cols.local[e.col as usize],
                r: (f64::from(e.value) - mean) as f32,
            };
            let share = &mut shares[(p - first) as usize];
            let blocks = if test {
                &mut share.test
            } else {
                &mut share.train
            };
            blocks[q].push(point);
        }
    }
    shares
}

/// An `f32` as the `f64` with the same shortest decimal form (`0.05`, not `0.0500000007`).
fn short(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

/// What the worker threads of a node share.
struct Shared<'a> {
    args: &'a Args,
    node: &'a NodeHandle,
    layout: &'a Layout,
    hyper: Hyper,
    node_sums: &'a NodeSums,
    node_intents: &'a NodeIntents,
    loss_sums: SumKeys,
    counter_sums: SumKeys,
    plan: &'a replicate::Plan,
    start: &'a checkpointing::Start,
    console: Console,
    /// Training points in the whole matrix (what the progress bar counts).
    train_points: u64,
}

impl Shared<'_> {
    /// One worker thread: initialise, train, evaluate; global worker 0 returns the outcome.
    fn worker(&self, worker: &Worker, share: WorkerData) -> anyhow::Result<Outcome> {
        let args = self.args;
        if self.hyper.replicated {
            self.check_same_replicas(worker)?;
        }
        let mut trainer = Trainer::new(worker, self.layout, share, self.hyper);
        // A resumed run's parameters (and bold-driver state) come from the checkpoint.
        trainer.init(!self.start.resumed)?;
        trainer.replay_shuffles(self.start.epoch);
        let first = self.start.epoch;
        let mut lr = self.start.f32("lr_bits").unwrap_or(args.lr);
        let mut local_fraction = LocalFraction::default();
        // All `parts` workers train at once, on blocks of about the same size: worker 0's
        // points times `parts` stand for the cluster's.
        let parts = u64::from(self.layout.parts);
        let mut previous: Option<f64> = self.start.f64("previous_bits");
        let mut records = Vec::new();
        let mut intent_total = [0u64; intents::COUNTERS];
        let mut intents_before = [0u64; intents::COUNTERS];
        for epoch in first..args.epochs {
            let clock = Stopwatch::start();
            let cpu_start = common::process_cpu_micros();
            let last = epoch + 1 == args.epochs;
            let bar = self.console.bar(
                worker,
                self.train_points,
                (epoch + 1, args.epochs),
                previous,
            );
            let online = trainer.epoch(epoch, lr, |n| bar.inc(n * parts))?;
            bar.finish_and_clear();
            let seconds = clock.seconds();
            let cpu = common::process_cpu_micros().saturating_sub(cpu_start);
            let evaluate = last || (args.eval_every > 0 && (epoch + 1) % args.eval_every == 0);
            let clock = Stopwatch::start();
            let (train, test) = if evaluate {
                (
                    Some(trainer.evaluate(false)?),
                    Some(trainer.evaluate(true)?),
                )
            } else {
                (None, None)
            };
            self.node_sums.add(online, train, test);
            let intents_now = intents::worker_counts(worker);
            self.node_intents
                .add(&intents::since(intents_now, &intents_before));
            intents_before = intents_now;
            worker.barrier()?;
            if worker.id() == 0 {
                let mut sums = self.node_sums.take().to_vec();
                sums.push(cpu);
                sums.extend(self.node_intents.take());
                sums.extend(output::access_counts(&self.node.stats()));
                self.loss_sums.contribute(worker, &sums)?;
            }
            let sums = self.loss_sums.barrier_and_read(worker)?;
            let eval_seconds = clock.seconds();
            if sums[3] > 0 {
                bail!(
                    "training diverged in epoch {}: a loss is not finite or too large (learning rate {lr}); \
                     try a smaller --lr",
                    epoch + 1
                );
            }
            let sse = sums::unfixed(sums[0]);
            let objective = sse + sums::unfixed(sums[1]);
            let rmse = |sse: u64, n: u64| (n > 0).then(|| (sums::unfixed(sse) / n as f64).sqrt());
            let mut record = json!({
                "epoch": epoch + 1, "seconds": seconds, "loss": objective, "lr": short(lr),
                "online_rmse": rmse(sums[0], sums[2]),
                "cpu_seconds": common::micros_to_seconds(sums[sums::SUMS]),
                "local_fraction": local_fraction.epoch([sums[ACCESSES_AT], sums[ACCESSES_AT + 1]]),
            });
            let epoch_intents = &sums[INTENTS_AT..ACCESSES_AT];
            for (i, (t, e)) in intent_total.iter_mut().zip(epoch_intents).enumerate() {
                // Counts add up over the epochs; the window is the latest.
                *t = if i + 1 == intents::COUNTERS {
                    *e
                } else {
                    *t + e
                };
            }
            if self.hyper.intents {
                record["intents"] = intents::report(epoch_intents, u64::from(self.layout.parts));
            }
            if evaluate {
                record["train_rmse"] = json!(rmse(sums[4], sums[5]));
                record["test_rmse"] = json!(rmse(sums[6], sums[7]));
                record["eval_seconds"] = json!(eval_seconds);
            }
            self.console.epoch(worker, &record, args.epochs);
            records.push(record);
            if let Some(prev) = previous {
                lr *= if objective < prev { 1.05 } else { 0.5 };
            }
            previous = Some(objective);
            let state = json!({
                "lr": lr, "lr_bits": checkpointing::bits_f32(lr),
                "previous": objective, "previous_bits": checkpointing::bits_f64(objective),
            });
            let state = checkpointing::with_last_epoch(state, &records[records.len() - 1]);
            args.checkpoint.after_epoch(worker, epoch + 1, state)?;
        }
        if records.is_empty() {
            // Resumed from a checkpoint that covers every epoch: its recorded figures.
            records = self.start.recorded_epochs();
            for record in &records {
                self.console.epoch(worker, record, args.epochs);
            }
        }
        worker.barrier()?;
        if worker.id() == 0 {
            let stats = self.node.stats();
            let mut mine = common::node_counters(&stats).to_vec();
            mine.extend(replicate::node_counters(&stats));
            self.counter_sums.contribute(worker, &mine)?;
        }
        let sums = self.counter_sums.barrier_and_read(worker)?;
        let (cluster, replica) = sums.split_at(common::CLUSTER_COUNTERS);
        let counters = ClusterCounters::from_sums(cluster);
        Ok((worker.global_id() == 0).then(|| (records, counters, replica.to_vec(), intent_total)))
    }

    /// Checks that every node replicates the same keys (collective).
    fn check_same_replicas(&self, worker: &Worker) -> anyhow::Result<()> {
        replication::check_same_set(&self.loss_sums, worker, &self.plan.keys)
    }
}
