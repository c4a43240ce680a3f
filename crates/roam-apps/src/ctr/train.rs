//! One `ctr` worker thread: initialisation, the training loop over its rows, the evaluation
//! (global worker 0), and the per-epoch sums.
//!
//! Invariants: every worker runs the same number of collective steps (barriers, sums) per
//! epoch whatever its share of rows; the pushes of an epoch are all waited (`wait_all`) and
//! the cluster passes a barrier before the test set is evaluated, so the evaluated model
//! includes every update of the epoch. The dense keys are set once, by global worker 0,
//! before the first barrier; after that they change only by gradients.

use std::collections::VecDeque;

use anyhow::{Context, bail};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use roam::{Key, NodeHandle, Ticket, Worker};
use serde_json::{Value, json};

use super::Args;
use super::data::{Dataset, mix};
use super::model::{self, Batch, Grads, Params, Scratch, Shape};
use crate::common::{self, ClusterCounters, Mode, Stopwatch, SumKeys};
use crate::intents::{self, NodeIntents};
use crate::output::{self, Console, LocalFraction};
use crate::sightings::Sightings;

/// Counters summed over the cluster after every epoch: loss (micro-units), rows, non-finite
/// losses, CPU microseconds, the intent counters, then the cumulative (local, all) key
/// accesses.
pub const EPOCH_SUMS: usize = 4 + intents::COUNTERS + 2;
const INTENTS_AT: usize = 4;
const ACCESSES_AT: usize = INTENTS_AT + intents::COUNTERS;
/// Losses are summed as integers in these units.
const LOSS_SCALE: f64 = 1e6;
/// Pushes a worker lets pile up before it waits for the oldest.
const MAX_PENDING: usize = 16;
/// Test rows per evaluation batch.
const EVAL_BATCH: usize = 4096;

/// Keys per `localize` of a node's own rows (`--localize exclusive`): each chunk's records
/// travel in frames far below the wire's value limit whatever the row length.
const EXCLUSIVE_CHUNK: usize = 1 << 16;

/// What global worker 0 hands back: per-epoch records, cluster counters, the cluster sums of
/// the replication counters (`crate::replication::node_counters`), intent counters.
pub type Outcome = Option<(
    Vec<Value>,
    ClusterCounters,
    Vec<u64>,
    [u64; intents::COUNTERS],
)>;

/// Everything the workers of a node share.
pub struct Job<'a> {
    /// Options.
    pub args: &'a Args,
    /// The whole data set (every node holds it; each worker trains on its rows).
    pub data: &'a Dataset,
    /// Model sizes.
    pub shape: Shape,
    /// The node (for its counters).
    pub node: &'a NodeHandle,
    /// Reserved keys for the per-epoch sums.
    pub epoch_sums: SumKeys,
    /// Reserved keys for the final cluster counters.
    pub counter_sums: SumKeys,
    /// Node-local accumulation of the workers' intent counters.
    pub node_intents: &'a NodeIntents,
    /// lapse with `--localize repeats`: the keys this node has offered to `localize`.
    pub sightings: Option<&'a Sightings>,
    /// `--localize exclusive`: the rows only this node's workers train on, moved here before
    /// the first epoch.
    pub exclusive: Option<&'a [Key]>,
    /// Which worker trains which row.
    pub shards: super::shard::Shards,
    /// Progress output.
    pub console: Console,
    /// The keys of the dense parameters.
    pub dense_keys: Vec<Key>,
    /// Where the run starts (a fresh run, or a resumed checkpoint: `super::checkpoint`).
    pub start: &'a crate::checkpointing::Start,
    /// The keys replicated on every node (the nups modes; else none).
    pub plan: &'a super::replicate::Plan,
}

/// A worker's buffers.
#[derive(Default)]
struct Trainer {
    cur: Batch,
    next: Batch,
    ahead: Batch,
    repeats: Vec<Key>,
    emb: Vec<f32>,
    dense: Vec<f32>,
    grads: Grads,
    scratch: Scratch,
    pending: VecDeque<Ticket<'static>>,
}

impl Trainer {
    fn hold(&mut self, t: Ticket<'static>) -> anyhow::Result<()> {
        self.pending.push_back(t);
        if self.pending.len() > MAX_PENDING {
            self.pending.pop_front().expect("not empty").wait()?;
        }
        Ok(())
    }

    fn params(&self) -> Params<'_> {
        Params {
            emb: &self.emb,
            dense: &self.dense,
        }
    }

    fn drain(&mut self) -> anyhow::Result<()> {
        while let Some(t) = self.pending.pop_front() {
            t.wait()?;
        }
        Ok(())
    }

    /// Pulls the current batch's rows and the dense parameters.
    fn pull(&mut self, w: &Worker, dense_keys: &[Key], dim: usize) -> anyhow::Result<()> {
        self.emb.resize(self.cur.unique.len() * dim, 0.0);
        self.dense.resize(dense_keys.len() * dim, 0.0);
        let a = w.pull(&self.cur.unique, &mut self.emb)?;
        let b = w.pull(dense_keys, &mut self.dense)?;
        a.wait()?;
        b.wait()?;
        Ok(())
    }
}

impl Job<'_> {
    /// One worker thread: initialise, train, evaluate; global worker 0 returns the outcome.
    pub fn worker(&self, w: &Worker) -> anyhow::Result<Outcome> {
        let args = self.args;
        let gid = w.global_id() as usize;
        let parts = self.shards.parts;
        if args.mode.replicates() {
            crate::replication::check_same_set(&self.epoch_sums, w, &self.plan.keys)?;
        }
        let (first, init) = super::checkpoint::first_epoch(self.start);
        if gid == 0 && init {
            w.set(&self.dense_keys, &self.shape.init_dense(args.seed))?
                .wait()
                .context("initialising the dense parameters")?;
        }
        w.barrier()?;
        if args.mode.replicates() {
            // The dense keys' initial values were set at their hubs: bring them to every
            // replica before anyone reads them (a barrier does not sync replicas).
            w.sync_replicas()?;
        }
        if let Some(rows) = self.exclusive {
            // Once, by one worker per node, in chunks (a frame holds at most
            // `roam_core::wire::Limits::max_values`); the barrier keeps the moves out of the
            // first epoch's figures (`run` computes no rows on one node); nothing to move when
            // nothing is left to train.
            if w.id() == 0 && first < args.epochs {
                for chunk in rows.chunks(EXCLUSIVE_CHUNK) {
                    w.localize(chunk)?
                        .wait()
                        .context("moving this node's rows here")?;
                }
            }
            w.barrier()?;
        }
        let train = &self.data.train;
        let mine = self.shards.rows_of(train, gid);
        let mut t = Trainer::default();
        let mut records = Vec::new();
        let mut local_fraction = LocalFraction::default();
        let mut previous = None;
        let mut intents_before = [0u64; intents::COUNTERS];
        let mut intent_total = [0u64; intents::COUNTERS];
        for epoch in first..args.epochs {
            let clock = Stopwatch::start();
            let cpu_start = common::process_cpu_micros();
            let bar = self
                .console
                .bar(w, train.len() as u64, (epoch + 1, args.epochs), previous);
            let mut order = mine.clone();
            let seed = mix(args.seed ^ (u64::from(epoch) << 32) ^ gid as u64);
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
            let (loss, bad) = self.epoch(w, &mut t, &order, |n| bar.inc((n * parts) as u64))?;
            t.drain()?;
            w.wait_all()?;
            bar.finish_and_clear();
            let seconds = clock.seconds();
            let cpu = common::process_cpu_micros().saturating_sub(cpu_start);
            w.barrier()?;
            let clock = Stopwatch::start();
            if args.mode.replicates() {
                // Every node's last gradients stepped at the hubs and the results in every
                // replica: the evaluation reads the model of the whole epoch, not a changing one.
                w.sync_replicas()?;
            }
            let test = if gid == 0 {
                Some(self.evaluate(w)?)
            } else {
                None
            };
            let intents_now = intents::worker_counts(w);
            self.node_intents
                .add(&intents::since(intents_now, &intents_before));
            intents_before = intents_now;
            w.barrier()?;
            let mut sums = vec![0u64; EPOCH_SUMS];
            sums[0] = (loss * LOSS_SCALE).round() as u64;
            sums[1] = order.len() as u64;
            sums[2] = bad;
            if w.id() == 0 {
                sums[3] = cpu;
                sums[INTENTS_AT..ACCESSES_AT].copy_from_slice(&self.node_intents.take());
                sums[ACCESSES_AT..].copy_from_slice(&output::access_counts(&self.node.stats()));
            }
            self.epoch_sums.contribute(w, &sums)?;
            let sums = self.epoch_sums.barrier_and_read(w)?;
            let eval_seconds = clock.seconds();
            if sums[2] > 0 {
                bail!(
                    "training diverged in epoch {}: a loss is not finite (learning rate {}); try a smaller --lr",
                    epoch + 1,
                    args.lr
                );
            }
            let mean_loss = sums[0] as f64 / LOSS_SCALE / sums[1].max(1) as f64;
            let mut record = json!({
                "epoch": epoch + 1, "seconds": seconds, "loss": mean_loss,
                "rows_per_second": sums[1] as f64 / seconds,
                "cpu_seconds": common::micros_to_seconds(sums[3]),
                "local_fraction": local_fraction.epoch([sums[ACCESSES_AT], sums[ACCESSES_AT + 1]]),
                "eval_seconds": eval_seconds,
            });
            if let Some((auc, logloss)) = test {
                record["test_auc"] = json!(auc);
                record["test_logloss"] = json!(logloss);
            }
            let epoch_intents = &sums[INTENTS_AT..ACCESSES_AT];
            for (i, (t, e)) in intent_total.iter_mut().zip(epoch_intents).enumerate() {
                // Counts add up over the epochs; the window is the latest.
                *t = if i + 1 == intents::COUNTERS {
                    *e
                } else {
                    *t + e
                };
            }
            if args.mode.signals_intents() {
                record["intents"] = intents::report(epoch_intents, parts as u64);
            }
            self.console.epoch(w, &record, args.epochs);
            let state = super::checkpoint::state(args.lr, &record);
            records.push(record);
            previous = Some(mean_loss);
            args.checkpoint.after_epoch(w, epoch + 1, state)?;
        }
        if records.is_empty() {
            // Resumed from a checkpoint that covers every epoch: its recorded figures.
            records = self.start.recorded_epochs();
            for record in &records {
                self.console.epoch(w, record, args.epochs);
            }
        }
        w.barrier()?;
        let mut mine = vec![0u64; common::CLUSTER_COUNTERS + crate::replication::COUNTERS];
        if w.id() == 0 {
            let stats = self.node.stats();
            mine[..common::CLUSTER_COUNTERS].copy_from_slice(&common::node_counters(&stats));
            mine[common::CLUSTER_COUNTERS..]
                .copy_from_slice(&crate::replication::node_counters(&stats));
        }
        self.counter_sums.contribute(w, &mine)?;
        let sums = self.counter_sums.barrier_and_read(w)?;
        let (cluster, replica) = sums.split_at(common::CLUSTER_COUNTERS);
        let counters = ClusterCounters::from_sums(cluster);
        Ok((gid == 0).then(|| (records, counters, replica.to_vec(), intent_total)))
    }

    /// Trains on `order` (this worker's rows, shuffled) in batches; returns the summed loss
    /// and the number of non-finite batch losses. `progress` gets the rows of each batch.
    fn epoch(
        &self,
        w: &Worker,
        t: &mut Trainer,
        order: &[usize],
        progress: impl Fn(usize),
    ) -> anyhow::Result<(f64, u64)> {
        let args = self.args;
        let train = &self.data.train;
        let dim = self.shape.dim;
        let chunks: Vec<&[usize]> = order.chunks(args.batch).collect();
        let localize = args.mode.localizes() && self.exclusive.is_none();
        let intents = args.mode.signals_intents();
        let ahead = args.intent_ahead as usize;
        let base = w.current_clock();
        let signal = |t: &mut Trainer, i: usize| -> anyhow::Result<()> {
            t.ahead.fill(train, chunks[i]);
            let at = base + i as u64;
            w.intent(&t.ahead.unique, at, at + 1)?;
            Ok(())
        };
        if intents {
            // Every batch reads and pushes the dense keys: one intent for the whole epoch, so
            // that roam shares them among the nodes (each node a replica). Not when keys only
            // move (`adapm-relocate-only`): keys every node wants all the time would move from
            // node to node; and not for a worker without batches (an intent needs a clock).
            if args.mode != Mode::AdapmRelocateOnly && !chunks.is_empty() {
                w.intent(&self.dense_keys, base, base + chunks.len() as u64)?;
            }
            for i in 0..ahead.min(chunks.len()) {
                signal(t, i)?;
            }
        }
        let (mut loss, mut bad) = (0.0, 0);
        if let Some(first) = chunks.first() {
            t.cur.fill(train, first);
        }
        for i in 0..chunks.len() {
            if localize && i + 1 < chunks.len() {
                t.next.fill(train, chunks[i + 1]);
                // A hint: the batch is correct wherever its rows are when it is pulled.
                let keys = match self.sightings {
                    Some(seen) => {
                        t.repeats.clear();
                        seen.repeats(&t.next.unique, &mut t.repeats);
                        &t.repeats
                    }
                    None => &t.next.unique,
                };
                w.localize(keys)?.detach();
            }
            if intents && i + ahead < chunks.len() {
                signal(t, i + ahead)?;
            }
            t.pull(w, &self.dense_keys, dim)?;
            let mut grads = std::mem::take(&mut t.grads);
            let mut scratch = std::mem::take(&mut t.scratch);
            let l = model::train_step(
                &self.shape,
                train,
                &t.cur,
                t.params(),
                &mut grads,
                &mut scratch,
            );
            t.grads = grads;
            t.scratch = scratch;
            if l.is_finite() {
                loss += l;
            } else {
                bad += 1;
            }
            let a = w.push_gradients(&t.cur.unique, &t.grads.emb)?;
            t.hold(a)?;
            let b = w.push_gradients(&self.dense_keys, &t.grads.dense)?;
            t.hold(b)?;
            if intents {
                w.advance_clock();
            }
            progress(chunks[i].len());
            if i + 1 < chunks.len() {
                if localize {
                    std::mem::swap(&mut t.cur, &mut t.next);
                } else {
                    t.cur.fill(train, chunks[i + 1]);
                }
            }
        }
        Ok((loss, bad))
    }

    /// Test AUC and mean log-loss of the current model over the whole test set.
    fn evaluate(&self, w: &Worker) -> anyhow::Result<(Option<f64>, f64)> {
        let test = &self.data.test;
        let mut t = Trainer::default();
        let mut logits = Vec::with_capacity(test.len());
        let rows: Vec<usize> = (0..test.len()).collect();
        for chunk in rows.chunks(EVAL_BATCH) {
            t.cur.fill(test, chunk);
            t.pull(w, &self.dense_keys, self.shape.dim)?;
            let mut scratch = std::mem::take(&mut t.scratch);
            model::predict(
                &self.shape,
                test,
                &t.cur,
                t.params(),
                &mut logits,
                &mut scratch,
            );
            t.scratch = scratch;
        }
        let logloss = logits
            .iter()
            .zip(&test.labels)
            .map(|(&z, &y)| model::log_loss(z, f32::from(y)))
            .sum::<f64>()
            / test.len().max(1) as f64;
        Ok((model::auc(&logits, &test.labels), logloss))
    }
}
