//! The `kge` workload: knowledge-graph embeddings (ComplEx, RESCAL) trained with AdaGrad and
//! negative sampling on roam, evaluated by filtered link prediction. See
//! `docs/workloads-kge.md` for the method, the modes and measured numbers.
//!
//! Keys: entities `0..ne`, relations `ne..ne+nr` (one key each, also RESCAL's D×D matrices,
//! through per-key value lengths), then the reserved [`SumKeys`] keys. Each key holds its
//! embedding; its AdaGrad accumulator is the key space's optimizer state
//! ([`params::optimizer`]), hidden in the record. Negatives come from one sampler registered
//! here, uniform over the entity keys, under the `--sampling` scheme (default per mode,
//! [`crate::sampling::default_scheme`]).
//!
//! Layout of this module: [`data`] (loading `--data`), [`synthetic`] (`--synthetic`),
//! [`partition`] (data clustering by relation), [`buckets`] (the bucket schedule: entity parts
//! and rounds, `--schedule buckets`), [`model`] (scores, gradients, AdaGrad),
//! [`train`] (one worker's updates and epochs), [`eval`] (filtered ranking), [`job`] (one
//! worker thread's collective sequence), [`replicate`] (the keys the NuPS modes replicate).
//! This file parses options and runs the threads.
//!
//! Every node loads the same data and computes the same partition, so no data is shipped
//! between nodes. A worker that fails ends its process (after printing the error) instead of
//! returning: its peers would otherwise wait at the next barrier forever.

pub mod buckets;
pub mod data;
pub mod eval;
pub mod job;
pub mod model;
pub mod params;
pub mod partition;
pub mod pool;
pub mod replicate;
pub mod synthetic;
pub mod train;

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context, ensure};
use roam::{Config, Distribution, SamplerSpec, Scheme, Support};
use serde::Serialize;
use serde_json::json;

use crate::common::{Mode, SumKeys, TrainReport};
use crate::sampling::App;
use buckets::Schedule;
use data::Graph;
use model::{Model, ModelKind};

/// Options of `roam train kge`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Allocation mode.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Directory with train, valid and test files (`.del` integer ids, or `.txt`/`.tsv` names).
    #[arg(long, conflicts_with = "synthetic")]
    pub data: Option<PathBuf>,
    /// Synthetic graph, e.g. `entities=50000,relations=500,triples=1000000,seed=1` (keys:
    /// entities, relations, triples, clusters, valid, test, seed). Neither this nor `--data`:
    /// a small built-in synthetic graph.
    #[arg(long)]
    pub synthetic: Option<String>,
    /// Scoring model.
    #[arg(long, value_enum, default_value = "complex")]
    pub model: ModelKind,
    /// Embedding dimension: complex components for ComplEx (2·dim reals), reals for RESCAL.
    /// The default 50 is Lapse's ComplEx `--embed_dim 100` (100 real values per embedding);
    /// much smaller ComplEx models can stall near their flat start (docs/workloads-kge.md).
    #[arg(long, default_value_t = 50)]
    pub dim: usize,
    /// Epochs.
    #[arg(long, default_value_t = 10)]
    pub epochs: u32,
    /// AdaGrad learning rate (0 keeps the initial random model, a baseline). 0.12 with gamma
    /// 0.25 learns faster in the first epochs than the earlier 0.1 with gamma 0.2, with the same
    /// quality after 12 (docs/workloads-kge.md, "How the defaults were chosen").
    #[arg(long, default_value_t = 0.12)]
    pub eta: f32,
    /// L2 regularisation weight (divided by the embedding length, per use of a key). Chosen
    /// with eta on lapse-toy's validation split after 2 and 12 epochs (the lapse-toy README
    /// uses 0.1, Lapse's own default is 1e-3; denser graphs such as UMLS prefer 0.1; see
    /// docs/workloads-kge.md).
    #[arg(long, default_value_t = 0.25)]
    pub gamma: f32,
    /// How a positive's 1 + 2N scored triples become one push per key: `sequential` (Lapse's
    /// update order, on the pulled copy) or `summed` (one AdaGrad step on the summed gradient).
    #[arg(long, value_enum, default_value = "summed")]
    pub update: train::UpdateRule,
    /// Half-width of the uniform initialisation of embeddings.
    #[arg(long, default_value_t = model::INIT_RANGE)]
    pub init_range: f32,
    /// Corrupted tails and corrupted heads per positive triple (each).
    #[arg(long, default_value_t = 6)]
    pub neg_ratio: usize,
    /// Evaluate every N epochs (0: only after the last epoch, which is always evaluated).
    #[arg(long, default_value_t = 0)]
    pub eval_every: u32,
    /// Also report filtered metrics on the validation triples.
    #[arg(long)]
    pub eval_valid: bool,
    /// Evaluate at most this many test (and valid) triples, the first ones (0: all).
    #[arg(long, default_value_t = 0)]
    pub eval_max: usize,
    /// adapm mode: signal the intent of the triple this many triples ahead (default 1000,
    /// `roam_apps::intents::KGE_AHEAD_TRIPLES`).
    #[arg(long)]
    pub intent_ahead: Option<usize>,
    /// How the training triples are spread over workers and time: `relation` (each worker
    /// trains the triples of its relations, Lapse's data clustering) or `buckets` (entities
    /// in 2W parts, each epoch in 2W − 1 rounds in which each worker trains the triples among
    /// the two parts it holds, negatives drawn from those parts: PyTorch-BigGraph's schedule;
    /// adapm signals each round's parts, lapse and nups localize them, the other modes leave
    /// them where they are; docs/workloads-kge.md, "Bucket schedule").
    #[arg(long, value_enum, default_value = "relation")]
    pub schedule: Schedule,
    /// `--schedule buckets`: each round also draws negatives from a pool of entities of the
    /// other parts, this many times as many as the worker holds, pulled when the round starts
    /// (0: negatives from the two parts held only).
    #[arg(long, default_value_t = 1.0)]
    pub bucket_pool: f64,
    /// `--schedule buckets`: send the aggregated gradients (sums and squares,
    /// `push_gradient_sums`) of the pool's entities every this many triples, and at the round's
    /// end (0: at the round's end only, which is cheapest but
    /// applies a round's gradients of a pooled entity late and in one AdaGrad step).
    #[arg(long, default_value_t = buckets::DEFAULT_POOL_FLUSH)]
    pub bucket_pool_flush: usize,
    /// Lapse mode: localize the entities of the triple this many triples ahead (0: never).
    #[arg(long, default_value_t = 1)]
    pub localize_ahead: usize,
    /// Lapse mode: localize the entities of this many triples in one request, once per as many
    /// triples (1: one request per triple, exactly Lapse's schedule; batching bounds how
    /// often two nodes can pull the same entity back and forth, see the docs). 256 cut the CPU
    /// per epoch 5.7× on the suite's 5000-entity graph at 4 nodes but lost most of the MRR
    /// after 8 epochs: with the sampled negatives localized too, one worker gathers nearly
    /// every key and the workers train their relations one after another instead of together
    /// (docs/benchmarks.md, "Sampling"), so the default stays 32.
    #[arg(long, default_value_t = 32)]
    pub localize_batch: usize,
    /// Pushes a worker may leave unfinished before waiting for the oldest. 0 waits for each
    /// (Lapse's default, `async_push=0`): slower, since a remote push costs a round trip per
    /// triple, but the next triples never read entities before the worker's own updates land;
    /// at 2 epochs on lapse-toy that gives the distributed modes 0.01–0.02 more validation
    /// MRR (docs/workloads-kge.md).
    #[arg(long, default_value_t = 64)]
    pub pushes_in_flight: usize,
    /// Seed of initialisation, negatives and shuffles (and of the default synthetic graph).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads per node (default: ROAM_WORKERS_PER_NODE, else 1).
    #[arg(long)]
    pub workers_per_node: Option<u32>,
    /// Negative sampling scheme (roam's sampling API): naive, preloc, pool:U, pool:U:strict,
    /// local or local:next. Default per mode: preloc in lapse and nups, naive
    /// elsewhere (`roam_apps::sampling::default_scheme`). adapm takes naive (it draws a
    /// triple's negatives when it signals the triple's intent, which names them) or local /
    /// local:next (AdaPM's own KGE setup: the intent names the triple's entities and relation
    /// only, and the negatives come from the entities held here when it trains, not uniform;
    /// docs/workloads-kge.md, "adapm with local negatives").
    #[arg(long, value_parser = crate::sampling::parse_scheme)]
    pub sampling: Option<Scheme>,
    /// Replication (the nups modes).
    #[command(flatten)]
    pub replication: replicate::Options,
    /// Checkpoints and resuming.
    #[command(flatten)]
    pub checkpoint: crate::checkpointing::Options,
    /// Share-sync rounds (the adapm modes).
    #[command(flatten)]
    pub share: crate::intents::ShareOptions,
    /// Output: report, JSON, plot.
    #[command(flatten)]
    pub output: crate::output::OutputArgs,
}

impl Args {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.dim >= 1, "--dim must be at least 1");
        ensure!(self.epochs >= 1, "--epochs must be at least 1");
        self.checkpoint.validate()?;
        ensure!(
            self.eta.is_finite() && self.eta >= 0.0,
            "--eta must be a finite number >= 0, got {}",
            self.eta
        );
        ensure!(
            self.gamma.is_finite() && self.gamma >= 0.0,
            "--gamma must be a finite number >= 0, got {}",
            self.gamma
        );
        ensure!(
            self.init_range.is_finite() && self.init_range >= 0.0,
            "--init-range must be a finite number >= 0, got {}",
            self.init_range
        );
        ensure!(
            self.localize_batch >= 1,
            "--localize-batch must be at least 1"
        );
        ensure!(
            self.workers_per_node != Some(0),
            "--workers-per-node must be at least 1"
        );
        ensure!(
            self.intent_ahead.is_none() || self.mode.signals_intents(),
            "--intent-ahead applies to mode adapm, not {}",
            self.mode.name()
        );
        ensure!(
            self.intent_ahead.is_none() || self.schedule == Schedule::Relation,
            "--intent-ahead applies to --schedule relation (buckets signal a round ahead)"
        );
        ensure!(
            self.bucket_pool.is_finite() && self.bucket_pool >= 0.0,
            "--bucket-pool must be a number ≥ 0, not {}",
            self.bucket_pool
        );
        ensure!(
            self.intent_ahead != Some(0),
            "--intent-ahead must be at least 1"
        );
        crate::sampling::check_scheme(
            self.mode,
            crate::sampling::resolve(App::Kge, self.mode, self.sampling),
        )?;
        ensure!(
            self.schedule != Schedule::Buckets || self.sampling.is_none_or(|s| s == Scheme::Naive),
            "--schedule buckets draws its negatives itself (from the parts held and the pool), \
             so it takes no --sampling scheme"
        );
        self.replication.validate()?;
        if self.model == ModelKind::Rescal {
            ensure!(
                self.dim <= 4096,
                "--dim {} is too large for RESCAL (a relation holds 2·dim² values)",
                self.dim
            );
        }
        Ok(())
    }

    fn load(&self) -> anyhow::Result<Graph> {
        match (&self.data, &self.synthetic) {
            (Some(dir), _) => data::load_dir(dir),
            (None, Some(spec)) => synthetic::Spec::parse(spec)?.generate(),
            (None, None) => {
                let spec = format!("{},seed={}", synthetic::DEFAULT_SPEC, self.seed);
                synthetic::Spec::parse(&spec)?.generate()
            }
        }
    }
}

/// Rank 0's JSON line: the common report and the run's `sampling` figures (summed over the
/// cluster and the epochs).
#[derive(Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    report: &'a TrainReport,
    sampling: serde_json::Value,
}

/// Trains on this node; rank 0 outputs the report ([`crate::output::OutputArgs`]) and
/// returns it.
pub fn run(args: &Args) -> anyhow::Result<Option<serde_json::Value>> {
    args.validate()?;
    let graph = args.load()?;
    let model = Model {
        kind: args.model,
        dim: args.dim,
    };
    let mut lengths = params::key_lengths(&graph, model);
    let sum_len = model.entity_len();
    let sum_base = lengths.len() as u64;
    let sum_keys = SumKeys::keys_needed(job::SUMS, sum_len);
    lengths.resize(lengths.len() + sum_keys, sum_len as u32);
    let mut cfg = if lengths.iter().all(|&l| l == lengths[0]) {
        // ComplEx: every key has the same length, which keeps the store's uniform fast path.
        Config::new(lengths.len() as u64, lengths[0])
    } else {
        Config::per_key(lengths)
    };
    cfg.workers_per_node = args.workers_per_node;
    cfg.optimizer = params::optimizer(args.eta);
    if args.schedule == Schedule::Buckets {
        cfg.share_sync_every = buckets::SHARE_SYNC_EVERY;
    }
    // Negatives: uniform over the entity keys 0..ne (all of one value length, 2 × entity_len).
    let scheme = crate::sampling::resolve(App::Kge, args.mode, args.sampling);
    let entities = Distribution::uniform(Support::range(0..u64::from(graph.num_entities)))
        .context("the negative sampler's distribution (entities)")?;
    let sampler = cfg.add_sampler(SamplerSpec::new(entities, scheme));
    cfg.sampling_seed = args.seed;
    let plan = if args.mode.replicates() {
        replicate::Plan::choose(&graph, &args.replication, args.neg_ratio)
    } else {
        replicate::Plan::none(&graph)
    };
    cfg.replicated_keys = plan.keys.clone();
    let replication = replicate::with_sync_default(&args.replication);
    replication.configure(&mut cfg, plan.keys.len());
    args.share.validate()?;
    args.share.configure(&mut cfg);
    args.output.configure(&mut cfg);
    let start = args.checkpoint.configure(&mut cfg, args.epochs)?;
    let node = args.mode.start(cfg).context("starting the roam node")?;
    args.output.start(node.rank())?;
    let workers = node.num_nodes() * node.workers_per_node();
    let partition = partition::by_relation(&graph.train, graph.num_relations, workers);
    let buckets = (args.schedule == Schedule::Buckets)
        .then(|| buckets::Buckets::new(&graph.train, graph.num_entities, workers));
    let scheme_name = match buckets {
        Some(_) => buckets::BUCKETS_SCHEME.to_string(),
        None => scheme.to_string(),
    };
    let filter = eval::Filter::new(graph.all());
    let hyper = train::Hyper {
        model,
        eta: args.eta,
        gamma: args.gamma,
        neg_ratio: args.neg_ratio,
        localize_ahead: if args.mode.localizes() && args.schedule == Schedule::Relation {
            args.localize_ahead
        } else {
            0
        },
        localize_batch: args.localize_batch,
        pushes_in_flight: args.pushes_in_flight,
        intent_ahead: if args.mode.signals_intents() {
            args.intent_ahead
                .unwrap_or(crate::intents::KGE_AHEAD_TRIPLES)
        } else {
            0
        },
        seed: args.seed,
        bucket_pool: args.bucket_pool,
        bucket_pool_flush: args.bucket_pool_flush,
        update: args.update,
        init_range: args.init_range,
    };
    let shared = job::Shared {
        node: &node,
        graph: &graph,
        partition: &partition,
        buckets: buckets.as_ref(),
        filter: &filter,
        hyper,
        mode: args.mode,
        epochs: args.epochs,
        start: &start,
        checkpoint: &args.checkpoint,
        eval_every: args.eval_every,
        eval_valid: args.eval_valid,
        eval_max: args.eval_max,
        sums: SumKeys::new(
            (sum_base..sum_base + sum_keys as u64).collect(),
            sum_len,
            job::SUMS,
        ),
        node_loss: Mutex::default(),
        node_intents: crate::intents::NodeIntents::default(),
        plan: &plan,
        sampler,
        scheme,
        console: crate::output::Console::new(&args.output, "mrr", "triples"),
    };
    let outcome = std::thread::scope(|scope| -> anyhow::Result<Option<job::Outcome>> {
        let handles = node
            .workers()?
            .into_iter()
            .map(|worker| {
                let shared = &shared;
                scope.spawn(move || match shared.run(&worker) {
                    Ok(outcome) => outcome,
                    Err(err) => {
                        eprintln!("error: kge worker {}: {err:#}", worker.global_id());
                        std::process::exit(1);
                    }
                })
            })
            .collect::<Vec<_>>();
        let mut outcome = None;
        for h in handles {
            if let Some(o) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a kge worker thread panicked"))?
            {
                outcome = Some(o);
            }
        }
        Ok(outcome)
    })?;
    let mut value = None;
    if let Some(outcome) = outcome {
        let per_worker: Vec<usize> = match &buckets {
            Some(b) => (0..workers as usize).map(|w| b.triples_of(w)).collect(),
            None => partition.triples.iter().map(Vec::len).collect(),
        };
        let replication = args.mode.replicates().then(|| {
            replicate::report(&plan, &replication, &outcome.replica_sums, node.num_nodes())
        });
        let report = TrainReport {
            app: "kge",
            mode: args.mode.name(),
            nodes: node.num_nodes(),
            workers_per_node: node.workers_per_node(),
            dataset: graph.name.clone(),
            epochs: outcome.epochs,
            counters: outcome.counters,
            settings: json!({
                "model": model.kind.name(),
                "dim": model.dim,
                "eta": args.eta,
                "gamma": args.gamma,
                "neg_ratio": args.neg_ratio,
                "update": args.update.name(),
                "init_range": args.init_range,
                "localize_ahead": hyper.localize_ahead,
                "localize_batch": hyper.localize_batch,
                "intent_ahead": hyper.intent_ahead,
                "schedule": args.schedule.name(),
                "bucket_pool": args.bucket_pool,
                "bucket_pool_flush": args.bucket_pool_flush,
                "pushes_in_flight": hyper.pushes_in_flight,
                "seed": args.seed,
                "entities": graph.num_entities,
                "relations": graph.num_relations,
                "train_triples": graph.train.len(),
                "valid_triples": graph.valid.len(),
                "test_triples": graph.test.len(),
                "eval_max": args.eval_max,
                "triples_per_worker": per_worker,
                "replication": replication,
                "sampling": scheme_name,
            }),
            intents: args
                .mode
                .signals_intents()
                .then(|| crate::intents::report(&outcome.intents, u64::from(workers))),
        };
        let [sampled, fallbacks] = outcome.sampled;
        let line = Report {
            report: &report,
            sampling: {
                let mut report = crate::sampling::report(scheme, sampled, fallbacks);
                report["scheme"] = json!(scheme_name);
                report
            },
        };
        let report = serde_json::to_value(&line).context("serialising the report")?;
        args.output.finish(&report)?;
        value = Some(report);
    }
    args.output.trace(&node)?;
    let stats = node.shutdown()?;
    args.output.node_stats(&stats)?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(given: &[&str]) -> Args {
        crate::common::parse_args("kge", given)
    }

    #[test]
    fn adapm_takes_naive_or_local_negatives_and_its_own_look_ahead_only() {
        args(&["--mode", "adapm"]).validate().unwrap();
        args(&["--mode", "adapm", "--intent-ahead", "50"])
            .validate()
            .unwrap();
        for scheme in ["naive", "local", "local:next"] {
            args(&["--mode", "adapm", "--sampling", scheme])
                .validate()
                .unwrap();
        }
        let err = args(&[
            "--mode",
            "adapm",
            "--schedule",
            "buckets",
            "--sampling",
            "local",
        ])
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("takes no --sampling"), "{err}");
        for (mode, extra, needle) in [
            (
                "lapse",
                ["--intent-ahead", "10"],
                "--intent-ahead applies to mode adapm",
            ),
            (
                "adapm",
                ["--intent-ahead", "0"],
                "--intent-ahead must be at least 1",
            ),
            (
                "adapm",
                ["--sampling", "preloc"],
                "only --sampling naive, local",
            ),
            (
                "adapm",
                ["--sampling", "pool:4"],
                "only --sampling naive, local",
            ),
        ] {
            let err = args(&[&["--mode", mode][..], &extra].concat())
                .validate()
                .unwrap_err();
            assert!(err.to_string().contains(needle), "{mode} {extra:?}: {err}");
        }
    }
}
