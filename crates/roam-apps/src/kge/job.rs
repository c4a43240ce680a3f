//! One worker thread's whole job: initialise its share of the model, localize its relations
//! (lapse mode), run the epochs between cluster-wide barriers, sum the loss exactly over the
//! cluster, evaluate on global worker 0, and sum the node counters for the report.
//!
//! Every worker of every node executes the same sequence of barriers, [`SumKeys`] rounds and
//! (NuPS modes) `sync_replicas` calls (none is skipped on any path), which is what keeps the
//! cluster in step. Epoch seconds are measured on global worker 0 between the barrier before
//! training and the barrier after it (all pushes applied), so they cover training only: no
//! loss summing, no evaluation.
//!
//! NuPS modes: replicated keys are initialised through their hubs (`set`) and made consistent
//! by a `sync_replicas` before the first epoch; between epochs replicas are only eventually
//! consistent (roam's background sync), and a `sync_replicas` of all workers precedes every
//! evaluation (the last epoch is always evaluated, so also the final read-out). The loss needs
//! none: each worker sums the losses it computed while training.
//!
//! Sampling: each epoch's negatives drawn and `local` fallbacks are summed like the loss (per
//! node over its workers, then over the cluster through [`SumKeys`]), into the epoch's
//! `sampling` object; the run's totals are the sums over the epochs. adapm mode: the epoch's
//! intent counters likewise, into its `intents` object ([`crate::intents`]); the relations are
//! not localized up front but named in every triple's intent.

use std::sync::Mutex;
use std::time::Instant;

use roam::{NodeHandle, SamplerId, Scheme, Worker};
use serde_json::json;

use super::buckets::{BUCKETS_SCHEME, Buckets, PartMoves};
use super::data::Graph;
use super::eval::{Filter, Metrics, evaluate};
use super::params::{gather, init_params, relation_key};
use super::partition::Partition;
use super::replicate::{self, Plan};
use super::train::{Epoch, Hyper, LossSum, Step};
use crate::common::{
    CLUSTER_COUNTERS, ClusterCounters, Mode, Stopwatch, SumKeys, micros_to_seconds, node_counters,
    process_cpu_micros,
};
use crate::intents::{self, NodeIntents};
use crate::output::{self, Console, LocalFraction};
use crate::replication;
use crate::sampling;

/// Scale of the fixed-point loss sum (the cluster sums `u64` counters exactly).
const LOSS_SCALE: f64 = 1e6;

/// Counters of the per-epoch [`SumKeys`] round: loss (fixed point), scored triples, CPU
/// microseconds, negatives drawn, `local` fallbacks, then the intent counters, then the
/// cumulative (local, all) key accesses ([`output::access_counts`]).
const EPOCH_SUMS: usize = 5 + intents::COUNTERS + 2;
/// Where the access counts start in the per-epoch sums.
const ACCESSES_AT: usize = 5 + intents::COUNTERS;

/// Counters in the job's [`SumKeys`]: the cluster counters, then the replication counters
/// (the loss rounds and the start-up check use the first few), or the per-epoch round's if
/// more.
pub const SUMS: usize = if CLUSTER_COUNTERS + replicate::COUNTERS > EPOCH_SUMS {
    CLUSTER_COUNTERS + replicate::COUNTERS
} else {
    EPOCH_SUMS
};

/// An epoch's figures summed over the cluster.
struct EpochTotals {
    /// Mean logistic loss per scored triple.
    loss: f64,
    /// CPU seconds of all node processes.
    cpu_seconds: f64,
    /// Negatives drawn.
    sampled: u64,
    /// `local` draws read remotely.
    fallbacks: u64,
    /// The intent counters ([`intents::COUNTERS`]).
    intents: [u64; intents::COUNTERS],
    /// Cumulative (local, all) key accesses of all nodes.
    accesses: [u64; 2],
}

/// What the workers of one process share.
pub struct Shared<'a> {
    /// The running node.
    pub node: &'a NodeHandle,
    /// The data.
    pub graph: &'a Graph,
    /// Data clustering.
    pub partition: &'a Partition,
    /// The bucket schedule, when the run uses it instead of `partition`.
    pub buckets: Option<&'a Buckets>,
    /// Known triples for filtered ranking.
    pub filter: &'a Filter,
    /// Training settings.
    pub hyper: Hyper,
    /// The mode (whether to localize).
    pub mode: Mode,
    /// Epochs to run (the last one's number).
    pub epochs: u32,
    /// Where the run starts (a resumed run: after the checkpoint's epoch, its parameters and
    /// AdaGrad state from it).
    pub start: &'a crate::checkpointing::Start,
    /// When to write checkpoints.
    pub checkpoint: &'a crate::checkpointing::Options,
    /// Evaluate every this many epochs (0: only after the last).
    pub eval_every: u32,
    /// Also evaluate on the validation triples.
    pub eval_valid: bool,
    /// Evaluate at most this many triples per split (0: all).
    pub eval_max: usize,
    /// Reserved keys for exact cluster sums ([`SUMS`] counters).
    pub sums: SumKeys,
    /// This node's loss of the current epoch, summed over its workers.
    pub node_loss: Mutex<LossSum>,
    /// This node's intent counts of the current epoch, summed over its workers.
    pub node_intents: NodeIntents,
    /// The replicated keys (none outside the NuPS modes).
    pub plan: &'a Plan,
    /// The sampler of negatives.
    pub sampler: SamplerId,
    /// Its scheme (for the report).
    pub scheme: Scheme,
    /// Progress bars and per-epoch lines (rank 0).
    pub console: Console,
}

/// The per-epoch figures and, on global worker 0, the cluster counters.
pub struct Outcome {
    /// `{epoch, seconds, loss, mrr, hits_at_1, hits_at_3, hits_at_10, mrr_tail, mrr_head, ...}`
    /// per epoch.
    pub epochs: Vec<serde_json::Value>,
    /// Summed node counters.
    pub counters: ClusterCounters,
    /// Summed [`replicate::node_counters`].
    pub replica_sums: Vec<u64>,
    /// Negatives drawn and `local` fallbacks over all epochs, summed over the cluster.
    pub sampled: [u64; 2],
    /// The intent counts of all epochs and the last epoch's window, summed over the cluster.
    pub intents: [u64; intents::COUNTERS],
}

impl Shared<'_> {
    /// Runs `worker`'s job; `Some` on global worker 0.
    pub fn run(&self, worker: &Worker) -> anyhow::Result<Option<Outcome>> {
        let gid = worker.global_id();
        let total = u64::from(worker.num_nodes() * worker.workers_per_node());
        let hyper = self.hyper;
        let replicates = self.mode.replicates();
        if replicates {
            self.check_same_replicas(worker)?;
        }
        if !self.start.resumed {
            init_params(worker, self.graph, &hyper, u64::from(gid), total)?;
        }
        worker.barrier()?;
        if replicates {
            // The initial values of replicated keys were set at their hubs: bring them to
            // every replica before anyone reads them.
            worker.sync_replicas()?;
        }
        if self.mode.localizes() && self.buckets.is_none() {
            // (adapm names each triple's relation in its intent instead; under the bucket
            // schedule every worker uses every relation.)
            // Data clustering: this worker is the only user of its relations (replicated
            // relations are local everywhere already).
            let keys: Vec<u64> = self
                .partition
                .relations_of(gid)
                .into_iter()
                .map(|r| relation_key(self.graph, r))
                .filter(|&k| !self.plan.is_replicated(k))
                .collect();
            if !keys.is_empty() {
                worker.localize(&keys)?.wait()?;
            }
        }
        worker.barrier()?;

        let epoch_runner = Epoch {
            graph: self.graph,
            partition: self.partition,
            hyper,
            plan: self.plan,
            sampler: self.sampler,
            buckets: self.buckets,
            draw_ahead: sampling::draws_ahead(self.scheme),
            part_moves: PartMoves::of(self.mode),
        };
        let mut step = Step::default();
        let mut sampled_total = [0u64; 2];
        let mut intent_total = [0u64; intents::COUNTERS];
        let mut intents_before = [0u64; intents::COUNTERS];
        let mut epochs = Vec::new();
        let mut local_fraction = LocalFraction::default();
        let mut last_loss = None;
        let mine = match self.buckets {
            Some(b) => b.triples_of(gid as usize),
            None => self.partition.triples[gid as usize].len(),
        } as u64;
        // The bar counts the cluster's triples: worker 0's progress stands for every worker's.
        let all = self.graph.train.len() as u64;
        for epoch in self.start.epoch + 1..=self.epochs {
            worker.barrier()?;
            let clock = Stopwatch::start();
            let cpu_start = process_cpu_micros();
            let bar = self
                .console
                .bar(worker, all, (epoch, self.epochs), last_loss);
            let scale = all as f64 / mine.max(1) as f64;
            let mut done = 0u64;
            let advance = |k: u64| {
                done += k;
                bar.set_position((done as f64 * scale) as u64);
            };
            let sum = match self.buckets {
                Some(b) => {
                    let ends = (epoch == self.start.epoch + 1, epoch == self.epochs);
                    epoch_runner.run_buckets(b, worker, gid, epoch, ends, &mut step, advance)?
                }
                None => epoch_runner.run(worker, gid, epoch, &mut step, advance)?,
            };
            worker.barrier()?;
            let seconds = clock.seconds();
            let cpu = process_cpu_micros().saturating_sub(cpu_start);
            bar.finish_and_clear();

            let intents_now = intents::worker_counts(worker);
            let epoch_intents = intents::since(intents_now, &intents_before);
            intents_before = intents_now;
            let totals = self.cluster_sums(worker, sum, cpu, &epoch_intents)?;
            sampled_total[0] += totals.sampled;
            sampled_total[1] += totals.fallbacks;
            for (i, (t, e)) in intent_total.iter_mut().zip(totals.intents).enumerate() {
                // Counts add up over the epochs; the window is the latest.
                *t = if i + 1 == intents::COUNTERS {
                    e
                } else {
                    *t + e
                };
            }
            let evaluate_now =
                epoch == self.epochs || (self.eval_every > 0 && epoch % self.eval_every == 0);
            last_loss = Some(totals.loss);
            let mut row = json!({
                "epoch": epoch, "seconds": seconds, "loss": totals.loss,
                "cpu_seconds": totals.cpu_seconds,
                "local_fraction": local_fraction.epoch(totals.accesses),
                "sampling": sampling::report(self.scheme, totals.sampled, totals.fallbacks),
            });
            if self.buckets.is_some() {
                // Drawn by the schedule from the parts held and the round's pool.
                row["sampling"]["scheme"] = json!(BUCKETS_SCHEME);
            }
            if self.mode.signals_intents() {
                row["intents"] = intents::report(&totals.intents, total);
            }
            if evaluate_now {
                if replicates {
                    worker.sync_replicas()?;
                }
                if gid == 0 {
                    self.evaluate_into(worker, &mut row)?;
                }
                worker.barrier()?;
            }
            // AdaGrad's state is in the records; the learning rate is fixed. The manifest
            // keeps global worker 0's state: the epoch's row.
            let state = match gid {
                0 => crate::checkpointing::with_last_epoch(serde_json::Value::Null, &row),
                _ => serde_json::Value::Null,
            };
            if gid == 0 {
                tracing::info!("kge epoch {epoch}: {row}");
                self.console.epoch(worker, &row, self.epochs);
                epochs.push(row);
            }
            self.checkpoint.after_epoch(worker, epoch, state)?;
        }
        if gid == 0 && epochs.is_empty() {
            // Resumed from a checkpoint that covers every epoch: its recorded figures.
            epochs = self.start.recorded_epochs();
            for row in &epochs {
                self.console.epoch(worker, row, self.epochs);
            }
        }

        if worker.id() == 0 {
            let stats = self.node.stats();
            let mut mine = node_counters(&stats).to_vec();
            mine.extend(replicate::node_counters(&stats));
            // The sums are sized for the larger of this round and the per-epoch one.
            mine.resize(SUMS, 0);
            self.sums.contribute(worker, &mine)?;
        }
        let sums = self.sums.barrier_and_read(worker)?;
        let (cluster, rest) = sums.split_at(CLUSTER_COUNTERS);
        let replica = &rest[..replicate::COUNTERS];
        let counters = ClusterCounters::from_sums(cluster);
        Ok((gid == 0).then(|| Outcome {
            epochs,
            counters,
            replica_sums: replica.to_vec(),
            sampled: sampled_total,
            intents: intent_total,
        }))
    }

    /// Checks that every node replicates the same keys (collective).
    fn check_same_replicas(&self, worker: &Worker) -> anyhow::Result<()> {
        replication::check_same_set(&self.sums, worker, &self.plan.keys)
    }

    /// The epoch's mean logistic loss per scored triple, CPU seconds (`cpu_micros` of each
    /// node's worker 0), negatives drawn, `local` fallbacks and intent counts (this worker's
    /// `intent_counts`), all over the whole cluster (collective).
    fn cluster_sums(
        &self,
        worker: &Worker,
        sum: LossSum,
        cpu_micros: u64,
        intent_counts: &[u64; intents::COUNTERS],
    ) -> anyhow::Result<EpochTotals> {
        self.node_intents.add(intent_counts);
        {
            let mut node = self
                .node_loss
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            node.loss += sum.loss;
            node.scored += sum.scored;
            node.sampled += sum.sampled;
            node.fallbacks += sum.fallbacks;
        }
        worker.barrier()?;
        if worker.id() == 0 {
            let node = std::mem::take(
                &mut *self
                    .node_loss
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            let fixed = (node.loss * LOSS_SCALE).round() as u64;
            let mut counters = [0; SUMS];
            counters[..5].copy_from_slice(&[
                fixed,
                node.scored,
                cpu_micros,
                node.sampled,
                node.fallbacks,
            ]);
            counters[5..ACCESSES_AT].copy_from_slice(&self.node_intents.take());
            counters[ACCESSES_AT..EPOCH_SUMS]
                .copy_from_slice(&output::access_counts(&self.node.stats()));
            self.sums.contribute(worker, &counters)?;
        }
        let totals = self.sums.barrier_and_read(worker)?;
        Ok(EpochTotals {
            loss: totals[0] as f64 / LOSS_SCALE / totals[1].max(1) as f64,
            cpu_seconds: micros_to_seconds(totals[2]),
            sampled: totals[3],
            fallbacks: totals[4],
            intents: std::array::from_fn(|i| totals[5 + i]),
            accesses: [totals[ACCESSES_AT], totals[ACCESSES_AT + 1]],
        })
    }

    /// Pulls the model and adds filtered test (and valid) metrics to `row`.
    fn evaluate_into(&self, worker: &Worker, row: &mut serde_json::Value) -> anyhow::Result<()> {
        let started = Instant::now();
        let emb = gather(worker, self.graph, self.hyper.model)?;
        let threads = worker.workers_per_node() as usize;
        let cap = |t: &[super::data::Triple]| {
            if self.eval_max == 0 {
                t.len()
            } else {
                t.len().min(self.eval_max)
            }
        };
        let test = &self.graph.test[..cap(&self.graph.test)];
        let m: Metrics = evaluate(&emb, test, self.filter, threads);
        row["mrr"] = json!(m.mrr);
        row["hits_at_1"] = json!(m.hits_at_1);
        row["hits_at_3"] = json!(m.hits_at_3);
        row["hits_at_10"] = json!(m.hits_at_10);
        row["mrr_tail"] = json!(m.mrr_tail);
        row["mrr_head"] = json!(m.mrr_head);
        if self.eval_valid && !self.graph.valid.is_empty() {
            let valid = &self.graph.valid[..cap(&self.graph.valid)];
            let v = evaluate(&emb, valid, self.filter, threads);
            row["valid_mrr"] = json!(v.mrr);
            row["valid_hits_at_1"] = json!(v.hits_at_1);
            row["valid_hits_at_3"] = json!(v.hits_at_3);
            row["valid_hits_at_10"] = json!(v.hits_at_10);
            row["valid_mrr_tail"] = json!(v.mrr_tail);
            row["valid_mrr_head"] = json!(v.mrr_head);
        }
        row["eval_seconds"] = json!(started.elapsed().as_secs_f64());
        Ok(())
    }
}
