//! The `w2v` workload: skip-gram word vectors with negative sampling (word2vec.c's algorithm)
//! trained through the parameter server, `roam train w2v`.
//!
//! Every node reads (or generates) the whole corpus, holds out its tail, builds the same
//! vocabulary and the same seeded word → key permutation, then joins the cluster. The training
//! sentences are split into one contiguous part per worker (`nodes × workers_per_node` parts);
//! each worker trains its part once per epoch, with a barrier and an exact cluster-wide sum of
//! loss and counters after each epoch. Global worker 0 then gathers all vectors and scores them
//! ([`eval`]); rank 0 prints the [`TrainReport`] line.
//!
//! Keys: word `w` has `2·slot(w)` (syn0, input) and `2·slot(w)+1` (syn1neg, output), with
//! `slot` a seeded permutation; the [`SumKeys`] follow. All keys hold `dim` values.
//!
//! The NuPS modes replicate the hottest keys on every node ([`replication`] picks them from
//! the word counts, the same on every node); the worker loop never localizes them and syncs
//! the replicas before every evaluation. The `adapm` mode never localizes at all: it signals
//! the intents of the batches a fixed number of words ahead ([`train`], [`crate::intents`]).
//!
//! Layout: [`corpus`] (text, held-out split, sentences), [`synthetic`] (planted-topic Zipf
//! corpus), [`vocab`] (min-count, subsampling, unigram sampler, key map), [`replication`]
//! (which keys the NuPS modes replicate), [`sgns`] (the arithmetic), [`train`] (the worker loop
//! and locality), [`eval`] (metrics), [`similarity`] (WordSim/SimLex/analogy benchmarks).

pub mod corpus;
pub mod eval;
pub mod replication;
pub mod sgns;
pub mod similarity;
pub mod synthetic;
pub mod train;
pub mod vectors;
pub mod vocab;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use roam::{Config, Distribution, SamplerSpec};
use serde_json::json;

use self::corpus::RawCorpus;
use self::eval::{Evaluator, PairList};
use self::replication::{Chooser, Replicated};
use self::similarity::Benchmarks;

/// Milliseconds between two replica sync rounds in the NuPS modes when rounds go by time
/// alone (`--sync-every-ms` without `--sync-updates-per-key`; the default before the work
/// clock, DEFAULT_SYNC_UPDATES_PER_KEY). Measured on GCIDE (5 epochs, 4 nodes, 10gbe,
/// 10000-word batches; docs/workloads-w2v.md): WordSim-353 0.504 / 0.505 / 0.279 at 50 / 100 / 250 ms (`single`
/// 0.496), training CPU 7.7 / 6.1 / 6.2 s an epoch; 100 is the longest period that keeps
/// quality (roam's default of 10 ms cost 39 s an epoch with 1000-word batches).
pub const DEFAULT_SYNC_EVERY_MS: f64 = 100.0;

/// Key-updates per replicated key between two sync rounds (the work clock) unless
/// `--sync-updates-per-key` or `--sync-every-ms` says otherwise. Measured on GCIDE (5 epochs,
/// 4 nodes, 10gbe; docs/workloads-w2v.md, "Sync rounds by work"): WordSim-353 0.495 / 0.499 /
/// 0.481 at 2 / 4 / 6 (`single` 0.480), training CPU 17.3 / 15.8 / 14.9 s an epoch against
/// 19.6 with 100 ms periods, on a machine where 100 ms held 2.6 times less work than on the
/// one the 100 ms default was measured on. A clock in updates keeps the work between rounds,
/// and with it quality and the sync's share of the CPU, the same on any machine.
pub const DEFAULT_SYNC_UPDATES_PER_KEY: f64 = 4.0;

/// The default `--batch-words` is capped so that each worker trains at least this many batches
/// an epoch.
const MIN_BATCHES_PER_EPOCH: usize = 8;
use self::synthetic::Spec;
use self::train::{Job, NodeSums, SUMMED};
use self::vocab::{KeyMap, UnigramTable, Vocab};
use crate::common::{Mode, SumKeys, TrainReport};
use crate::sampling::App;

/// Options of `roam train w2v`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Allocation mode.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Plain-text corpus: whitespace-separated words, one sentence per line (lines longer
    /// than 1000 words are cut into several sentences).
    #[arg(long, conflicts_with = "synthetic")]
    pub data: Option<PathBuf>,
    /// Synthetic corpus with planted topics, e.g.
    /// `words=20000000,vocab=100000,topics=50,zipf=1.0,seed=1` (also `common`, `sentence`).
    /// Without --data or --synthetic a small embedded synthetic corpus is used.
    #[arg(long)]
    pub synthetic: Option<String>,
    /// Word pairs to score (`word1<TAB>word2[<TAB>score]`, e.g. WordNet synonyms): reports
    /// pair_auc (and pair_spearman when scores are given).
    #[arg(long)]
    pub pairs: Option<PathBuf>,
    /// Word-similarity list scored by Spearman correlation with the cosines, as gensim's
    /// `evaluate_word_pairs` (`word1<TAB>word2<TAB>score`, e.g. gensim's wordsim353.tsv):
    /// reports wordsim_spearman.
    #[arg(long)]
    pub wordsim: Option<PathBuf>,
    /// A second word-similarity list (e.g. gensim's simlex999.txt): reports simlex_spearman.
    #[arg(long)]
    pub simlex: Option<PathBuf>,
    /// Analogy questions (`: section` lines, then `a b c d`, e.g. questions-words.txt) answered
    /// by 3CosAdd as gensim's `evaluate_word_analogies`: reports analogy_accuracy.
    #[arg(long)]
    pub analogies: Option<PathBuf>,
    /// Directory with wordsim353.tsv, simlex999.txt and questions-words.txt (as
    /// `scripts/fetch-data.sh gensim-eval` writes it): the defaults of the three options above.
    #[arg(long)]
    pub eval_dir: Option<PathBuf>,
    /// Write the input vectors at every evaluation to this file (rank 0), in word2vec's text
    /// format (`vocab dim`, then `word v1 ... vdim` per line; gensim's
    /// `KeyedVectors.load_word2vec_format` reads it).
    #[arg(long)]
    pub save_vectors: Option<PathBuf>,
    /// The benchmarks match words among the most frequent N only (gensim's `restrict_vocab`).
    #[arg(long, default_value_t = similarity::RESTRICT_VOCAB)]
    pub restrict_vocab: usize,
    /// Passes over the training text.
    #[arg(long, default_value_t = 5)]
    pub epochs: u32,
    /// Vector length.
    #[arg(long, default_value_t = 100)]
    pub dim: u32,
    /// Maximal context words on each side (each position shrinks it at random, as word2vec).
    #[arg(long, default_value_t = 5)]
    pub window: u32,
    /// Negatives per (center, context) pair, drawn from the unigram^0.75 distribution.
    #[arg(long, default_value_t = 5)]
    pub negative: u32,
    /// Initial learning rate; it decays linearly to lr·1e-4 over all epochs' words.
    #[arg(long, default_value_t = 0.025)]
    pub lr: f32,
    /// Words seen fewer times in the training text are dropped.
    #[arg(long, default_value_t = 5)]
    pub min_count: u64,
    /// Subsampling threshold (word2vec's `sample`; 0 disables).
    #[arg(long, default_value_t = 1e-4)]
    pub subsample: f64,
    /// Exponent of the negative-sampling distribution.
    #[arg(long, default_value_t = 0.75)]
    pub neg_power: f64,
    /// How negatives are drawn (roam's sampling schemes): naive, preloc, pool:U,
    /// pool:U:strict, local or local:next. Default by mode: lapse preloc, nups the measured
    /// best trade-off, the static modes naive (see docs/workloads-w2v.md, "Negatives"); adapm
    /// takes naive (it draws negatives when it signals their intent, which names them) or
    /// local / local:next (the intent names the batch's words only; negatives come from the
    /// output vectors held here when the batch trains, not the unigram distribution).
    #[arg(long, value_parser = crate::sampling::parse_scheme)]
    pub sampling: Option<roam::Scheme>,
    /// Consecutive sentences are trained from one batched pull and push of at most this many
    /// words (windows never cross sentences; 1 gives one batch per sentence). This bounds the
    /// staleness between workers; 10000 (ten of word2vec's longest sentences) cost no measured
    /// quality and moves a batch's frequent words and negatives once instead of per sentence.
    ///
    /// Default: 10000, except in lapse mode 1000 — there a batch is also the unit of look-ahead
    /// (the next batch's words are localized while this one trains), and relocating the
    /// distinct words of ten thousand must finish within one batch's training or the batch
    /// finds them remote (local fraction 0.38–0.65 against 0.75 with 1000 on small.txt). In
    /// nups mode the frequent words are replicated and only the tail moves: 10000 keeps 0.94
    /// of accesses local on GCIDE at 4 nodes and costs 2.7× less CPU than 1000, whose every
    /// batch pulls and pushes the hot words again (docs/workloads-w2v.md). adapm mode batches
    /// as lapse does (1000: the same batches, so the two compare the techniques alone; a batch
    /// is its clock tick and the unit of its intents). Every default is
    /// capped at an eighth of a worker's share of the corpus: a batch that is a whole epoch
    /// trains every update from the epoch's starting values, which diverged on small corpora.
    #[arg(long)]
    pub batch_words: Option<usize>,
    /// adapm mode: signal the intents of the batches within this many words ahead of the one
    /// training (rounded up to whole batches; default 50000, see
    /// `roam_apps::intents::W2V_AHEAD_WORDS`).
    #[arg(long)]
    pub intent_ahead: Option<usize>,
    /// NuPS modes: replicate the word keys expected to be accessed at least this many times as
    /// often as the mean word key (NuPS's untuned heuristic at 1; see docs/workloads-w2v.md).
    #[arg(long, conflicts_with = "replicate_top")]
    pub replicate_alpha: Option<f64>,
    /// NuPS modes: replicate the N word keys (input or output vectors) expected to be accessed
    /// most, instead of the heuristic (NuPS's `replicate N`).
    #[arg(long)]
    pub replicate_top: Option<usize>,
    /// NuPS modes: given alone, rounds go by time only, one every this many milliseconds (100
    /// was the default before the work clock; see docs/workloads-w2v.md). With the work clock
    /// (the default), the longest time between two rounds (default 1000).
    #[arg(long)]
    pub sync_every_ms: Option<f64>,
    /// NuPS modes: a work clock for the sync rounds: a round starts once a node pushed this
    /// many keys per replicated key since the last one, so that rounds follow training
    /// progress instead of wall time; `--sync-every-ms` then only bounds the time between
    /// rounds (default 1000). Default 4 (see DEFAULT_SYNC_UPDATES_PER_KEY), unless only
    /// `--sync-every-ms` is given: then rounds go by time alone, every that many ms.
    #[arg(long)]
    pub sync_updates_per_key: Option<f64>,
    /// Fraction of the corpus (its tail) held out for heldout_auc; 0 disables that metric.
    #[arg(long, default_value_t = 0.05)]
    pub heldout: f64,
    /// Most pairs scored per metric.
    #[arg(long, default_value_t = 100_000)]
    pub eval_pairs: usize,
    /// Evaluate every N epochs (0: only after the last, which is always evaluated).
    #[arg(long, default_value_t = 1)]
    pub eval_every: u32,
    /// Keep words on keys in vocabulary order instead of a seeded random permutation.
    #[arg(long)]
    pub no_shuffle_keys: bool,
    /// Worker threads per node (default: ROAM_WORKERS_PER_NODE, else 1).
    #[arg(long)]
    pub workers_per_node: Option<u32>,
    /// Seed of every random choice (initial vectors, subsampling, windows, negatives, key map).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
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
    /// `--batch-words`, or its default for the mode (see the option) for workers that each
    /// train `words_per_worker` words an epoch: at most an eighth of that, so that an epoch is
    /// never one batch pulled at its start and pushed at its end (on small corpora such
    /// batches diverged at high learning rates).
    pub fn batch_words(&self, words_per_worker: usize) -> usize {
        let default =
            if (self.mode.localizes() && !self.mode.replicates()) || self.mode.signals_intents() {
                1000
            } else {
                10000
            };
        self.batch_words
            .unwrap_or_else(|| default.min(words_per_worker / MIN_BATCHES_PER_EPOCH).max(1))
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.checkpoint.validate()?;
        ensure!(self.epochs >= 1, "--epochs must be at least 1");
        ensure!(self.dim >= 1, "--dim must be at least 1");
        ensure!(self.window >= 1, "--window must be at least 1");
        ensure!(
            self.lr.is_finite() && self.lr > 0.0,
            "--lr must be positive, got {}",
            self.lr
        );
        ensure!(
            self.subsample.is_finite() && self.subsample >= 0.0,
            "--subsample must be >= 0, got {}",
            self.subsample
        );
        ensure!(self.neg_power.is_finite(), "--neg-power must be finite");
        ensure!(
            self.batch_words.is_none_or(|b| b >= 1),
            "--batch-words must be at least 1"
        );
        ensure!(self.eval_pairs >= 1, "--eval-pairs must be at least 1");
        ensure!(
            self.restrict_vocab >= 1,
            "--restrict-vocab must be at least 1"
        );
        if !self.mode.replicates() {
            for (given, name) in [
                (self.replicate_alpha.is_some(), "--replicate-alpha"),
                (self.replicate_top.is_some(), "--replicate-top"),
                (self.sync_every_ms.is_some(), "--sync-every-ms"),
                (
                    self.sync_updates_per_key.is_some(),
                    "--sync-updates-per-key",
                ),
            ] {
                ensure!(
                    !given,
                    "{name} applies to the modes nups and nups-replicate-only, not {}",
                    self.mode.name()
                );
            }
        }
        ensure!(
            self.intent_ahead.is_none() || self.mode.signals_intents(),
            "--intent-ahead applies to mode adapm, not {}",
            self.mode.name()
        );
        ensure!(
            self.intent_ahead != Some(0),
            "--intent-ahead must be at least 1"
        );
        crate::sampling::check_scheme(self.mode, self.scheme())?;
        if let Some(alpha) = self.replicate_alpha {
            ensure!(
                alpha.is_finite() && alpha > 0.0,
                "--replicate-alpha must be positive, got {alpha}"
            );
        }
        if let Some(ms) = self.sync_every_ms {
            ensure!(
                ms.is_finite() && ms > 0.0 && ms <= 3.6e6,
                "--sync-every-ms must be positive (and at most an hour), got {ms}"
            );
        }
        crate::replication::check_updates_per_key(self.sync_updates_per_key)?;
        ensure!(
            self.workers_per_node != Some(0),
            "--workers-per-node must be at least 1"
        );
        Ok(())
    }

    /// The benchmark files: the explicit options, else the files of `--eval-dir`.
    fn benchmark_paths(&self) -> anyhow::Result<[Option<PathBuf>; 3]> {
        let mut out = [
            self.wordsim.clone(),
            self.simlex.clone(),
            self.analogies.clone(),
        ];
        if let Some(dir) = &self.eval_dir {
            ensure!(
                dir.is_dir(),
                "--eval-dir {}: not a directory (scripts/fetch-data.sh gensim-eval writes one)",
                dir.display()
            );
            for (slot, name) in out.iter_mut().zip(similarity::EVAL_FILES) {
                if slot.is_none() {
                    let path = dir.join(name);
                    ensure!(
                        path.is_file(),
                        "--eval-dir {}: {name} is missing",
                        dir.display()
                    );
                    *slot = Some(path);
                }
            }
        }
        Ok(out)
    }

    /// The negative-sampling scheme of the run.
    pub fn scheme(&self) -> roam::Scheme {
        crate::sampling::resolve(App::W2v, self.mode, self.sampling)
    }

    /// adapm mode: how many batches of `batch_words` words ahead a worker signals its
    /// intents (`--intent-ahead` or [`crate::intents::W2V_AHEAD_WORDS`] words, rounded up).
    pub fn intent_ahead_batches(&self, batch_words: usize) -> usize {
        self.intent_ahead
            .unwrap_or(crate::intents::W2V_AHEAD_WORDS)
            .div_ceil(batch_words.max(1))
            .max(1)
    }

    /// How the NuPS modes pick their replicated keys.
    pub fn chooser(&self) -> Chooser {
        match self.replicate_top {
            Some(n) => Chooser::Top(n),
            None => Chooser::AboveMean(self.replicate_alpha.unwrap_or(1.0)),
        }
    }

    /// The work clock of the NuPS modes' syncs, in key-updates per replicated key (`None`:
    /// rounds by time alone, when only `--sync-every-ms` was given).
    pub fn sync_updates_per_key(&self) -> Option<f64> {
        match (self.sync_updates_per_key, self.sync_every_ms) {
            (Some(per_key), _) => Some(per_key),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_SYNC_UPDATES_PER_KEY),
        }
    }
}

/// Trains on this node (rank 0 prints the report).
pub fn run(args: &Args) -> anyhow::Result<Option<serde_json::Value>> {
    args.validate()?;
    let (raw, dataset) = load(args)?;
    let split = raw.heldout_start(args.heldout)?;
    let vocab = Vocab::build(&raw.tokens[..split], raw.names.len(), args.min_count, |r| {
        raw.names[r as usize].clone()
    })
    .with_context(|| format!("building the vocabulary of {dataset}"))?;
    let sentences = raw.sentences(0..split, &vocab);
    let heldout = raw.sentences(split..raw.tokens.len(), &vocab);
    let keep = vocab.keep_probabilities(args.subsample);
    let table = UnigramTable::new(&vocab.counts, args.neg_power);
    let keys = KeyMap::new(vocab.len(), args.seed, !args.no_shuffle_keys);
    // Every node builds the same vocabulary (counts in the same order) and key map from the same
    // corpus and seed, so every node picks the same keys.
    let replicated = if args.mode.replicates() {
        Replicated::choose(
            &vocab.counts,
            &keys,
            args.negative,
            args.neg_power,
            args.chooser(),
        )
    } else {
        Replicated::none()
    };
    let pairs = match &args.pairs {
        None => None,
        Some(path) => {
            let index: HashMap<&str, u32> = vocab
                .raw
                .iter()
                .enumerate()
                .map(|(i, &r)| (raw.names[r as usize].as_str(), i as u32))
                .collect();
            let list = PairList::read(path, &index)?;
            ensure!(
                list.pairs.len() >= 2,
                "only {} of the {} pairs listed in {} have both words in the vocabulary of \
                 {dataset} (at least 2 are needed for pair_auc)",
                list.pairs.len(),
                list.listed,
                path.display()
            );
            Some(list)
        }
    };
    let words: Vec<&str> = vocab
        .raw
        .iter()
        .map(|&r| raw.names[r as usize].as_str())
        .collect();
    let benchmarks = {
        let [wordsim, simlex, analogies] = args.benchmark_paths()?;
        Benchmarks::read(
            &words,
            args.restrict_vocab,
            wordsim.as_deref(),
            simlex.as_deref(),
            analogies.as_deref(),
        )?
    };
    let topics: Option<Vec<Option<u32>>> = raw
        .topics
        .as_ref()
        .map(|t| vocab.raw.iter().map(|&r| t[r as usize]).collect());
    let headline = if pairs.is_some() {
        "pair_auc"
    } else if topics.is_some() {
        "topic_auc"
    } else {
        benchmarks.headline().unwrap_or("heldout_auc")
    };
    if headline == "heldout_auc" && heldout.words.len() < 2 {
        bail!(
            "--heldout {} leaves no held-out text to score in {dataset}: raise it or pass \
             --pairs, --wordsim, --simlex, --analogies or --eval-dir",
            args.heldout
        );
    }

    let dim = args.dim;
    let sum_keys = SumKeys::keys_needed(SUMMED, dim as usize) as u64;
    let num_keys = keys.num_keys() + sum_keys;
    let mut cfg = Config::new(num_keys, dim);
    cfg.workers_per_node = args.workers_per_node;
    // Negatives: the output vectors (odd keys, slot order), weighted by count^neg_power.
    let weights: Vec<f64> = (0..vocab.len() as u64)
        .map(|slot| {
            let (word, _) = keys.word_of_key(2 * slot + 1);
            (vocab.counts[word as usize] as f64).powf(args.neg_power)
        })
        .collect();
    let negatives = cfg.add_sampler(SamplerSpec::new(
        Distribution::weighted(1, 2, weights).context("the negative-sampling distribution")?,
        args.scheme(),
    ));
    cfg.sampling_seed = args.seed;
    cfg.replicated_keys = replicated.keys.clone();
    let sync_ms = match args.sync_updates_per_key() {
        Some(per_key) => {
            cfg.replica_sync_after_updates =
                crate::replication::work_clock(per_key, replicated.keys.len());
            args.sync_every_ms
                .unwrap_or(crate::replication::WORK_CLOCK_BOUND_MS)
        }
        None => args.sync_every_ms.unwrap_or(DEFAULT_SYNC_EVERY_MS),
    };
    cfg.replica_sync_every = Duration::from_secs_f64(sync_ms / 1e3);
    let sync_every = cfg.replica_sync_every;
    args.share.validate()?;
    args.share.configure(&mut cfg);
    args.output.configure(&mut cfg);
    let start = args.checkpoint.configure(&mut cfg, args.epochs)?;
    let node = args.mode.start(cfg).context("starting the node")?;
    args.output.start(node.rank())?;
    let partitioning = args.mode.partitioning();
    let evaluator = (node.rank() == 0).then(|| {
        Evaluator::new(
            &vocab,
            &heldout,
            &keep,
            args.window as usize,
            &table,
            topics.as_deref(),
            pairs,
            args.eval_pairs,
            args.seed,
        )
        .with_benchmarks(benchmarks)
    });
    let evaluator = match (evaluator, &args.save_vectors) {
        (Some(ev), Some(path)) => {
            // Fail now rather than after training.
            std::fs::File::create(path)
                .with_context(|| format!("--save-vectors {}", path.display()))?;
            let words = words.iter().map(|w| w.to_string()).collect();
            Some(ev.with_saved_vectors(path.clone(), words))
        }
        (ev, _) => ev,
    };
    let workers = (node.num_nodes() * node.workers_per_node()) as usize;
    let sums = SumKeys::new((keys.num_keys()..num_keys).collect(), dim as usize, SUMMED);
    let node_sums = NodeSums::new(node.workers_per_node() as usize);
    let job = Job {
        args,
        sentences: &sentences,
        keep: &keep,
        table: &table,
        keys: &keys,
        replicated: &replicated,
        replicates: args.mode.replicates(),
        vocab_len: vocab.len(),
        sums: &sums,
        node: &node,
        node_sums: &node_sums,
        partitioning,
        num_keys,
        localize: args.mode.localizes(),
        intents: args.mode.signals_intents(),
        draw_ahead: crate::sampling::draws_ahead(args.scheme()),
        start: &start,
        negatives,
        evaluator: evaluator.as_ref(),
        console: crate::output::Console::new(&args.output, headline, "words"),
    };
    let outcome = std::thread::scope(|scope| -> anyhow::Result<Option<train::Outcome>> {
        let handles: Vec<_> = node
            .workers()?
            .into_iter()
            .map(|w| {
                let job = &job;
                scope.spawn(move || match train::run_worker(job, &w) {
                    Ok(outcome) => outcome,
                    Err(err) => {
                        // The other workers of this node (and of every node) may be blocked in a
                        // barrier this worker will never reach: end the process, so that peers
                        // see it leave and fail instead of hanging.
                        eprintln!("Error: worker {} of node {}: {err:#}", w.id(), w.rank());
                        std::process::exit(1);
                    }
                })
            })
            .collect();
        let mut outcome = None;
        for h in handles {
            if let Some(o) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a w2v worker panicked"))?
            {
                outcome = Some(o);
            }
        }
        Ok(outcome)
    })?;
    let mut report = None;
    if let Some(outcome) = outcome {
        let ev = evaluator.as_ref();
        let replication = args.mode.replicates().then(|| {
            let mut report = replication::report(
                &replicated,
                args.chooser(),
                sync_every,
                &outcome.replication,
                node.num_nodes(),
            );
            report["sync_updates_per_key"] = json!(args.sync_updates_per_key());
            report
        });
        let mut settings = json!({
            "metric": headline,
            "dim": dim,
            "window": args.window,
            "negative": args.negative,
            "lr": args.lr,
            "min_count": args.min_count,
            "subsample": args.subsample,
            "batch_words": args.batch_words(sentences.words.len() / workers),
            "intent_ahead_batches": args.mode.signals_intents().then(|| {
                args.intent_ahead_batches(args.batch_words(sentences.words.len() / workers))
            }),
            "sampling": args.scheme().to_string(),
            "seed": args.seed,
            "vocab": vocab.len(),
            "train_words": sentences.words.len(),
            "sentences": sentences.len(),
            "heldout_words": heldout.words.len(),
            "heldout_pairs": ev.map(Evaluator::heldout_pairs),
            "heldout_auc_frequency_baseline": ev.and_then(Evaluator::frequency_baseline),
            "pairs_covered": ev.and_then(Evaluator::pair_coverage).map(|c| c.0),
            "pairs_listed": ev.and_then(Evaluator::pair_coverage).map(|c| c.1),
            "replication": replication,
        });
        if let (Some(ev), serde_json::Value::Object(m)) = (ev, &mut settings) {
            m.extend(ev.benchmark_settings());
        }
        let value = TrainReport {
            app: "w2v",
            mode: args.mode.name(),
            nodes: node.num_nodes(),
            workers_per_node: node.workers_per_node(),
            dataset,
            epochs: outcome.epochs,
            counters: outcome.counters,
            settings,
            intents: args
                .mode
                .signals_intents()
                .then(|| crate::intents::report(&outcome.intents, workers as u64)),
        }
        .to_value();
        args.output.finish(&value)?;
        report = Some(value);
    }
    args.output.trace(&node)?;
    let stats = node.shutdown()?;
    args.output.node_stats(&stats)?;
    Ok(report)
}

/// Reads or generates the corpus; returns it with its name for the report.
fn load(args: &Args) -> anyhow::Result<(RawCorpus, String)> {
    if let Some(path) = &args.data {
        return Ok((RawCorpus::read(path)?, path.display().to_string()));
    }
    let (spec, name): (Spec, _) =
        crate::common::synthetic_spec(args.synthetic.as_deref(), synthetic::EMBEDDED, "embedded")?;
    Ok((spec.generate(), name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(given: &[&str]) -> Args {
        crate::common::parse_args("w2v", given)
    }

    #[test]
    fn default_batches_follow_the_mode_and_leave_every_worker_eight_an_epoch() {
        assert_eq!(args(&["--mode", "lapse"]).batch_words(1_000_000), 1000);
        assert_eq!(args(&["--mode", "nups"]).batch_words(1_000_000), 10000);
        assert_eq!(args(&["--mode", "single"]).batch_words(1_000_000), 10000);
        assert_eq!(args(&["--mode", "nups"]).batch_words(8000), 1000);
        assert_eq!(args(&["--mode", "lapse"]).batch_words(4000), 500);
        assert_eq!(args(&["--mode", "classic"]).batch_words(3), 1);
        let given = args(&["--mode", "nups", "--batch-words", "50000"]);
        assert_eq!(given.batch_words(8000), 50000);
    }

    #[test]
    fn adapm_batches_like_lapse_and_signals_whole_batches_ahead() {
        let adapm = args(&["--mode", "adapm"]);
        adapm.validate().unwrap();
        assert_eq!(adapm.batch_words(1_000_000), 1000);
        assert_eq!(adapm.scheme(), roam::Scheme::Naive);
        let ahead = crate::intents::W2V_AHEAD_WORDS;
        assert_eq!(adapm.intent_ahead_batches(1000), ahead.div_ceil(1000));
        assert_eq!(adapm.intent_ahead_batches(ahead * 2), 1);
        let given = args(&["--mode", "adapm", "--intent-ahead", "2500"]);
        given.validate().unwrap();
        assert_eq!(given.intent_ahead_batches(1000), 3);
        args(&["--mode", "adapm", "--sampling", "local"])
            .validate()
            .unwrap();
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
        ] {
            let err = args(&[&["--mode", mode][..], &extra].concat())
                .validate()
                .unwrap_err();
            assert!(err.to_string().contains(needle), "{mode} {extra:?}: {err}");
        }
    }

    #[test]
    fn syncs_go_by_work_unless_only_a_period_is_given() {
        let nups = |more: &[&str]| {
            let mut given = vec!["--mode", "nups"];
            given.extend_from_slice(more);
            let a = args(&given);
            a.validate().map(|()| a.sync_updates_per_key())
        };
        assert_eq!(nups(&[]).unwrap(), Some(DEFAULT_SYNC_UPDATES_PER_KEY));
        assert_eq!(nups(&["--sync-every-ms", "50"]).unwrap(), None);
        let both = ["--sync-every-ms", "50", "--sync-updates-per-key", "2"];
        assert_eq!(nups(&both).unwrap(), Some(2.0));
        let err = nups(&["--sync-updates-per-key", "0"]).unwrap_err();
        assert!(err.to_string().contains("--sync-updates-per-key"), "{err}");
        let lapse = args(&["--mode", "lapse", "--sync-updates-per-key", "2"]);
        let err = lapse.validate().unwrap_err();
        assert!(
            err.to_string().contains("applies to the modes nups"),
            "{err}"
        );
    }
}
