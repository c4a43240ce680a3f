//! The `ctr` workload: click-through-rate prediction with sparse id fields (`roam train ctr`).
//!
//! Model (`model`): each example has `F` id fields, each a bag of ids (usually one). Every id
//! of field `f` has a `--dim`-long embedding; a field's bag is mean-pooled (an empty bag gives
//! zeros), the `F` vectors are concatenated and fed to a 2-layer MLP (`F·dim → --hidden → 1`,
//! ReLU) whose output is the click logit; the loss is the logistic loss, averaged over a
//! batch. The same network is `examples/ctr/train.py` in PyTorch.
//!
//! Keys (one sparse `u64` key space, value length `--dim`): the embedding of id `i` of field
//! `f` is key [`data::feature_key`]`(f, i)`, a hash of the pair with the top bit clear, so any
//! 64-bit id works and no table is sized in advance (rows are created as zeros on first use).
//! The dense MLP parameters are ordinary roam keys too: `RESERVED_BIT + j` for
//! `j < Shape::dense_keys`, followed by the reserved keys of two [`SumKeys`]. Every parameter
//! is updated by `push_gradients`, so the node's server-side optimizer (`--optimizer`,
//! Adagrad by default) steps each row where it lives, its state hidden in the record. Dense
//! gradients from all workers are applied as they arrive (asynchronous, like the embeddings);
//! every batch pulls the dense parameters afresh.
//!
//! Training (`train`): global worker `p` of `P` trains on the training rows `r ≡ p (mod P)` (or,
//! under `--shard-by FIELD`, those whose id in the field hashes to `p`: `shard`), in a seeded
//! shuffled order per epoch, in batches of `--batch`: pull the batch's distinct
//! rows and the dense keys, forward and backward, push both gradients (not waited; a worker's
//! later pulls see its own pushes). Modes change only where rows live: `lapse` moves each row
//! that only this node's workers train on here once, before the first epoch, and reads every
//! other row where it is (`--localize exclusive`: every node holds the data, so it knows which
//! rows are its own; a row two nodes train on would move back and forth); or it localizes the
//! next batch's rows while the current one computes, all of them or only those the node has
//! seen before (`--localize all|repeats`, [`crate::sightings`]); `adapm`
//! signals them as intents a few batches ahead, and the dense keys for the whole epoch. The
//! NuPS modes replicate the dense keys and the hot rows on every node (`replicate`); in the
//! other modes the dense keys never move.
//!
//! Checkpoints (`--checkpoint-dir`, `--resume`; `checkpoint`): the whole model is in roam
//! keys, so the node checkpoint holds it; a resume skips the dense initialisation and continues
//! at the checkpoint's next epoch.
//!
//! Reported per epoch: `loss`, the mean training log-loss (online: each example's loss
//! before its batch's update); `test_auc` and `test_logloss` of the model after the epoch,
//! computed by global worker 0 over the whole test set while the others wait; `rows_per_second`
//! (training rows of the whole cluster over the epoch's wall time), CPU seconds and the local
//! fraction.

pub mod budget;
pub mod checkpoint;
pub mod data;
pub mod model;
pub mod replicate;
pub mod shard;
pub mod synthetic;
pub mod train;

use std::path::PathBuf;

use anyhow::{Context, ensure};
use roam::{Config, Key, Optimizer};
use serde_json::json;

use crate::common::{self, Mode, SumKeys, TrainReport};
use crate::intents::{self, NodeIntents};
use crate::output::{Console, OutputArgs};
use crate::replication;
use crate::sightings::{Localize, Sightings};
use data::{Dataset, RESERVED_BIT};
use model::Shape;
use synthetic::Spec;

/// Options of `roam train ctr`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Allocation mode.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Directory with `train.tsv` and `test.tsv` (`scripts/fetch-data.sh ml-100k-ctr`).
    #[arg(long, conflicts_with = "synthetic")]
    pub data: Option<PathBuf>,
    /// Synthetic clicks, e.g. `fields=26,ids=1e8,zipf=1.1,rows=1e6,test=0.1,signal=2,seed=1`
    /// (without --data or --synthetic: a small embedded synthetic set).
    #[arg(long)]
    pub synthetic: Option<String>,
    /// Epochs.
    #[arg(long, default_value_t = 3)]
    pub epochs: u32,
    /// Embedding dimension (roam's value length).
    #[arg(long, default_value_t = 16)]
    pub dim: u32,
    /// Hidden units of the MLP.
    #[arg(long, default_value_t = 64)]
    pub hidden: u32,
    /// Examples per batch (per worker).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Server-side optimizer of every parameter: adagrad, adam or sgd.
    #[arg(long, default_value = "adagrad")]
    pub optimizer: String,
    /// Learning rate (FTRL: alpha).
    #[arg(long, default_value_t = 0.05)]
    pub lr: f32,
    /// Seed of the dense initialisation and the example order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// adapm: signal a batch's rows this many batches ahead.
    #[arg(long, default_value_t = 4)]
    pub intent_ahead: u32,
    /// lapse and nups: which rows to localize: `exclusive`, once before training, the rows no
    /// other node trains on (none during the epochs: every other row is read where it is);
    /// `repeats`, those of the next batch this node has seen before (a tail id used once is
    /// pulled and pushed remotely instead of moved); or `all` of the next batch's. Default:
    /// `exclusive`, or `repeats` under a row budget (`--max-rows`, `--max-bytes`: a node's own
    /// rows, most of them ids used once, would be created and moved only to be evicted).
    #[arg(long, value_enum)]
    pub localize: Option<Localize>,
    /// Spread the training rows over the workers by this field's id (all rows with one id go
    /// to one worker, so its row is one node's: `--localize exclusive` moves it there) instead
    /// of row by row (`r ≡ p (mod P)`). A field name of the data (`f0`, `f1`, … for synthetic
    /// data).
    #[arg(long)]
    pub shard_by: Option<String>,
    /// Worker threads per node (default: ROAM_WORKERS_PER_NODE, set by `roam launch`, else 1).
    #[arg(long)]
    pub workers: Option<u32>,
    /// Share-sync rounds (the adapm modes).
    #[command(flatten)]
    pub share: crate::intents::ShareOptions,
    /// Output: report, JSON, plot.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Checkpoints and resume (`ctr/checkpoint.rs`).
    #[command(flatten)]
    pub checkpoint: crate::checkpointing::Options,
    /// Per-node memory budget and spill file (`ctr/budget.rs`).
    #[command(flatten)]
    pub budget: budget::Budget,
    /// Replication (the nups modes, `ctr/replicate.rs`).
    #[command(flatten)]
    pub replication: replicate::Options,
}

impl Args {
    /// The `--localize` policy, with its default resolved (see the option).
    pub fn localize(&self) -> Localize {
        self.localize.unwrap_or(if self.budget.is_set() {
            Localize::Repeats
        } else {
            Localize::Exclusive
        })
    }

    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.epochs >= 1, "--epochs must be at least 1");
        ensure!(
            (1..=1024).contains(&self.dim),
            "--dim {} must be in 1..=1024",
            self.dim
        );
        ensure!(
            (1..=4096).contains(&self.hidden),
            "--hidden {} must be in 1..=4096",
            self.hidden
        );
        ensure!(
            (1..=1 << 20).contains(&self.batch),
            "--batch {} must be in 1..=1048576",
            self.batch
        );
        ensure!(
            self.lr.is_finite() && self.lr > 0.0,
            "--lr {} must be > 0",
            self.lr
        );
        ensure!(
            (1..=1 << 16).contains(&self.intent_ahead),
            "--intent-ahead must be in 1..=65536"
        );
        ensure!(self.workers != Some(0), "--workers must be at least 1");
        self.checkpoint.validate()?;
        self.replication.validate()?;
        Ok(())
    }

    /// The optimizer every key uses.
    fn optimizer(&self) -> anyhow::Result<Optimizer> {
        let opt =
            Optimizer::from_parts(&self.optimizer, &[("lr", self.lr)]).with_context(|| {
                format!(
                    "--optimizer {:?} (expected adagrad, adam or sgd)",
                    self.optimizer
                )
            })?;
        // FTRL computes a row's weights from its state (z, n), which starts at zero, so the
        // MLP would start (and stay) at the symmetric all-zero point and not learn.
        ensure!(
            opt.name() != "ftrl",
            "--optimizer ftrl: FTRL sets every weight from its state, which starts at zero, and an \
             MLP cannot train from all-zero weights; use adagrad, adam or sgd (FTRL suits the \
             linear part of a Wide&Deep model, which `ctr` does not have)"
        );
        Ok(opt)
    }

    /// The data and the dataset name for the report.
    fn load(&self) -> anyhow::Result<(Dataset, String)> {
        if let Some(dir) = &self.data {
            return Ok((data::load_dir(dir)?, dir.display().to_string()));
        }
        let (spec, name): (Spec, _) = common::synthetic_spec(
            self.synthetic.as_deref(),
            Spec::EMBEDDED,
            "embedded-synthetic",
        )?;
        Ok((synthetic::generate(&spec)?, name))
    }
}

/// Where the reserved keys of the sums start (after any realistic number of dense keys).
const SUMS_BASE: Key = RESERVED_BIT + (1 << 40);

/// Trains on this node; rank 0 outputs the report ([`OutputArgs`]) and returns it.
pub fn run(args: &Args) -> anyhow::Result<Option<serde_json::Value>> {
    args.validate()?;
    let optimizer = args.optimizer()?;
    let (data, dataset) = args.load()?;
    ensure!(
        !data.train.is_empty(),
        "{dataset}: the training set is empty"
    );
    ensure!(!data.test.is_empty(), "{dataset}: the test set is empty");
    let shard_field = match &args.shard_by {
        None => None,
        Some(name) => Some(
            data.field_names
                .iter()
                .position(|f| f == name)
                .with_context(|| {
                    format!(
                        "--shard-by {name}: {dataset} has no such field (its fields: {})",
                        data.field_names.join(", ")
                    )
                })?,
        ),
    };
    let dim = args.dim as usize;
    let shape = Shape {
        fields: data.field_names.len(),
        dim,
        hidden: args.hidden as usize,
    };
    let epoch_keys = SumKeys::keys_needed(train::EPOCH_SUMS, dim);
    let counter_sums_len = common::CLUSTER_COUNTERS + replication::COUNTERS;
    let counter_keys = SumKeys::keys_needed(counter_sums_len, dim);
    let mut cfg = Config::sparse(args.dim);
    cfg.optimizer = Some(optimizer);
    cfg.workers_per_node = args.workers;
    args.share.validate()?;
    args.share.configure(&mut cfg);
    args.output.configure(&mut cfg);
    let start = args.checkpoint.configure(&mut cfg, args.epochs)?;
    args.budget.configure(&mut cfg)?;
    let reserved = |from: Key, n: usize| -> Vec<Key> { (from..from + n as Key).collect() };
    let dense_keys = reserved(RESERVED_BIT, shape.dense_keys());
    let plan = if args.mode.replicates() {
        replicate::Plan::choose(&data.train, &dense_keys, &args.replication)
    } else {
        replicate::Plan::default()
    };
    cfg.replicated_keys = plan.keys.clone();
    args.replication.configure(&mut cfg, plan.keys.len());
    let node = args.mode.start(cfg).context("starting the roam node")?;
    args.output.start(node.rank())?;
    let epoch_sums = SumKeys::new(reserved(SUMS_BASE, epoch_keys), dim, train::EPOCH_SUMS);
    let counter_sums = SumKeys::new(
        reserved(SUMS_BASE + epoch_keys as Key, counter_keys),
        dim,
        counter_sums_len,
    );
    let mut settings = json!({
        "metric": "test_auc",
        "dim": args.dim, "hidden": args.hidden, "batch": args.batch, "seed": args.seed,
        "optimizer": optimizer.name(), "lr": short(args.lr),
        "fields": data.field_names, "train_rows": data.train.len(), "test_rows": data.test.len(),
        "train_click_rate": data.train.click_rate(), "test_click_rate": data.test.click_rate(),
        "oracle_test_auc": data.oracle_test_auc,
        "dense_params": shape.dense_len(), "dense_keys": shape.dense_keys(),
        "model": "mean-pooled field embeddings, concatenated, MLP F*dim-hidden-1 (ReLU), logistic loss",
        "dense": "roam keys with the same server-side optimizer, gradients applied as they arrive, pulled every batch",
        "loss": "online mean training log-loss (each example before its batch's update)",
        "evaluation": "global worker 0, whole test set, after every epoch",
    });
    if args.mode.localizes() {
        settings["localize"] = json!(args.localize().name());
    }
    // `--localize exclusive`: the rows only this node's workers train, moved here before the
    // first epoch (every node derives the same split from its copy of the data).
    let shards = shard::Shards {
        parts: (node.num_nodes() * node.workers_per_node()) as usize,
        by: shard_field,
    };
    // (On one node every row is the node's own: nothing would move.)
    let exclusive =
        (args.mode.localizes() && args.localize() == Localize::Exclusive && node.num_nodes() > 1)
            .then(|| {
                shard::exclusive_rows(
                    &data.train,
                    &shards,
                    node.num_nodes() as usize,
                    node.rank() as usize,
                    |key| plan.keys.binary_search(&key).is_ok(),
                )
            });
    if let Some(e) = &exclusive {
        settings["exclusive_rows"] = json!(e.per_node);
    }
    settings["shard_by"] = json!(args.shard_by);
    // 2 MiB per node, so only when it is used.
    let sightings =
        (args.mode.localizes() && args.localize() == Localize::Repeats).then(Sightings::default);
    let node_intents = NodeIntents::default();
    let job = train::Job {
        args,
        data: &data,
        shape,
        node: &node,
        epoch_sums,
        counter_sums,
        node_intents: &node_intents,
        sightings: sightings.as_ref(),
        exclusive: exclusive.as_ref().map(|e| e.mine.as_slice()),
        shards,
        console: Console::new(&args.output, "test_auc", "rows"),
        dense_keys,
        start: &start,
        plan: &plan,
    };
    let workers = node.workers().context("taking the node's workers")?;
    let outcome = std::thread::scope(|scope| -> anyhow::Result<train::Outcome> {
        let handles: Vec<_> = workers
            .into_iter()
            .map(|worker| {
                let job = &job;
                scope.spawn(move || job.worker(&worker))
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
        if args.mode.replicates() {
            settings["replication"] =
                args.replication
                    .report(plan.fields(), &replica_sums, node.num_nodes());
        }
        let parts = u64::from(node.num_nodes() * node.workers_per_node());
        let value = TrainReport {
            app: "ctr",
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
                .then(|| intents::report(&intent_sums, parts)),
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

/// An `f32` as the `f64` with the same shortest decimal form (`0.05`, not `0.0500000007`).
fn short(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}
