//! One worker's training loop on the parameter server: batched pulls and pushes per batch of
//! sentences, look-ahead localization (lapse mode) or intents (adapm mode), negatives through
//! roam's sampling API, and the per-epoch sums.
//!
//! A worker's part of the corpus is cut into batches of consecutive sentences of at most
//! `--batch-words` words (default 10000, ten of word2vec's longest sentences; a longer
//! sentence is a batch of its own). Per batch the worker pulls every vector the
//! batch needs at once (syn0 and syn1neg of its words, syn1neg of its negatives, which it draws
//! from the run's sampler with `sample_keys`), trains word2vec's per-pair updates on
//! those local copies ([`super::sgns`]), and pushes the accumulated differences back (negatives
//! included: pushes to sampled keys are ordinary pushes) in one additive batch without waiting.
//! Every mode runs exactly this arithmetic with the same random choices for windows and
//! subsampling; modes differ in where keys live and in the sampling scheme:
//! - lapse: while batch `i` trains, batch `i + 1`'s keys are being localized (issued, never
//!   waited), and its negatives are prepared (`prepare_sample` when batch `i + 1` is planned),
//!   so that `preloc` and `pool` have a batch's time to bring them here;
//! - adapm: the worker's clock ticks once per batch, and batch `i + A` (`A` batches of
//!   [`crate::intents::W2V_AHEAD_WORDS`] words) is planned while batch `i` trains, its
//!   negatives drawn at once (`naive`: the same draws, in the same order, as the other modes
//!   under `naive`), and an intent signalled for the distinct keys it will pull (syn0 and
//!   syn1neg of its words, syn1neg of its negatives) at the clock it will train at; the planned
//!   batches wait in a queue, and roam moves their keys here shortly before their clock. No
//!   `localize` is ever called. Under `--sampling local` (AdaPM's "local sampling") a planned
//!   batch's negatives are not drawn ahead: its intent names its sentence words' keys only,
//!   and the negatives are drawn when the batch trains, from the output vectors held here then
//!   (no intent names them);
//! - the scheme decides which keys the negatives are (`local` only takes keys held here, which
//!   changes their distribution) and whether drawing them moves keys;
//! - nups modes: the replicated keys ([`Replicated`]) are read and pushed in every node's
//!   replica, so they are never localized (nups localizes the others as lapse does); before
//!   training starts and before every evaluation all workers call `sync_replicas`, so that the
//!   initial vectors and every pushed update are in every replica.
//!
//! Staleness: a worker's copies are as old as its batch's pull, so updates other workers push
//! meanwhile are not seen until its next batch, and its own updates reach the server only at
//! the batch's end (they are never lost: pushes add deltas). A batch is at most `--batch-words`
//! words, so this is word2vec's usual Hogwild-style asynchrony, coarsened to batches of
//! sentences. (A worker alone trains the same updates at any batch size, up to the rounding
//! of the pushed differences.)
//!
//! Invariants: every ticket a worker issues is kept in its pending queue until it finishes or is
//! waited, and the queue is drained before every barrier; counters exclude initialisation and
//! evaluation traffic (each node snapshots its counters between barriers around them).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Mutex;

use anyhow::Context;
use rand::{SeedableRng, rngs::SmallRng};
use roam::{Key, NodeHandle, SampleHandle, SamplerId, Ticket, Worker};
use roam_core::Partitioning;
use serde_json::{Map, Value, json};

use super::Args;
use super::corpus::Sentences;
use super::eval::Evaluator;
use super::replication::{self, Replicated};
use super::sgns::{Offsets, Params, Plan, SentenceStats, Sigmoid, train_batch};
use super::vectors::{gather, init_vectors};
use super::vocab::{KeyMap, UnigramTable};
use crate::common::{CLUSTER_COUNTERS, ClusterCounters, Stopwatch, SumKeys, node_counters};
use crate::intents::{self, NodeIntents};

/// Training counters summed over the cluster each epoch, before the cluster counters.
pub const TRAIN_COUNTERS: usize = 6;
/// All counters summed through [`SumKeys`]: training, cluster, replication, intents.
pub const SUMMED: usize =
    TRAIN_COUNTERS + CLUSTER_COUNTERS + replication::COUNTERS + intents::COUNTERS;
/// Where the replication counters start in the sums.
const REPLICATION_AT: usize = TRAIN_COUNTERS + CLUSTER_COUNTERS;
/// Where the intent counters start in the sums.
const INTENTS_AT: usize = REPLICATION_AT + replication::COUNTERS;
/// Loss is summed as an integer in these units.
const LOSS_SCALE: f64 = 1e6;
/// Keys per message when initialising or gathering vectors.
pub(super) const CHUNK: usize = 8192;
/// Outstanding pushes and localizes a worker lets pile up before it waits for the oldest.
const MAX_PENDING: usize = 64;

/// Everything a worker reads, shared by all workers of a node.
pub struct Job<'a> {
    /// Options.
    pub args: &'a Args,
    /// Training sentences (all of them; each worker takes its part).
    pub sentences: &'a Sentences,
    /// Subsampling keep probability per word.
    pub keep: &'a [f32],
    /// The unigram^0.75 table (the evaluator's; training draws through `negatives`).
    pub table: &'a UnigramTable,
    /// Word → keys.
    pub keys: &'a KeyMap,
    /// The keys replicated on every node (nups modes; else none).
    pub replicated: &'a Replicated,
    /// Whether the mode replicates (then the workers sync the replicas before evaluations).
    pub replicates: bool,
    /// Vocabulary size.
    pub vocab_len: usize,
    /// Reserved keys for the per-epoch sums.
    pub sums: &'a SumKeys,
    /// The node (for its counters).
    pub node: &'a NodeHandle,
    /// Node-local accumulation of the workers' counters.
    pub node_sums: &'a NodeSums,
    /// Home partitioning of the run's allocation (who initialises which key).
    pub partitioning: Partitioning,
    /// Total keys in the key space.
    pub num_keys: u64,
    /// Whether this worker localizes its batches' words (lapse mode).
    pub localize: bool,
    /// Whether this worker signals intents for its batches instead (adapm mode).
    pub intents: bool,
    /// adapm mode: whether a batch's negatives are drawn when it is planned and named in its
    /// intent (`naive`), or drawn when it trains, from the keys held here (`local`).
    pub draw_ahead: bool,
    /// Where the run starts (a resumed run: after the checkpoint's epoch, vectors from it).
    pub start: &'a crate::checkpointing::Start,
    /// The sampler of negatives (output vectors by count^neg_power).
    pub negatives: SamplerId,
    /// The metrics (rank 0 only).
    pub evaluator: Option<&'a Evaluator>,
    /// Progress bars and per-epoch lines (rank 0).
    pub console: crate::output::Console,
}

/// What global worker 0 returns: per-epoch reports and the run's cluster counters.
pub struct Outcome {
    /// One JSON object per epoch.
    pub epochs: Vec<Value>,
    /// Summed node counters of the training (initialisation and evaluation excluded).
    pub counters: ClusterCounters,
    /// The last epoch's sums of [`replication::node_counters`].
    pub replication: Vec<u64>,
    /// The intent counts of all epochs and the last epoch's window ([`intents::COUNTERS`]),
    /// summed over the cluster.
    pub intents: Vec<u64>,
}

/// Per-node accumulation of worker counters, and a barrier of the node's workers.
pub struct NodeSums {
    acc: Mutex<[u64; TRAIN_COUNTERS]>,
    intents: NodeIntents,
    barrier: std::sync::Barrier,
}

impl NodeSums {
    /// For `workers` worker threads.
    pub fn new(workers: usize) -> Self {
        Self {
            acc: Mutex::new([0; TRAIN_COUNTERS]),
            intents: NodeIntents::default(),
            barrier: std::sync::Barrier::new(workers),
        }
    }

    fn add(&self, c: &[u64; TRAIN_COUNTERS]) {
        let mut acc = self
            .acc
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (a, b) in acc.iter_mut().zip(c) {
            *a += b;
        }
    }

    fn take(&self) -> [u64; TRAIN_COUNTERS] {
        std::mem::take(
            &mut *self
                .acc
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Word → position in the batch's key list, cleared in O(1) by bumping a stamp.
struct SlotMap {
    slot: Vec<u32>,
    stamp: Vec<u32>,
    now: u32,
}

impl SlotMap {
    fn new(words: usize) -> Self {
        Self {
            slot: vec![0; words],
            stamp: vec![0; words],
            now: 1,
        }
    }

    fn clear(&mut self) {
        self.now = self.now.wrapping_add(1);
        if self.now == 0 {
            self.stamp.fill(0);
            self.now = 1;
        }
    }

    /// `w`'s position in `keys`, appending `key(w)` to `keys` the first time `w` is seen.
    #[inline]
    fn slot_of(&mut self, w: u32, keys: &mut Vec<Key>, key: impl FnOnce(u32) -> Key) -> usize {
        let i = w as usize;
        if self.stamp[i] == self.now {
            return self.slot[i] as usize;
        }
        self.stamp[i] = self.now;
        self.slot[i] = keys.len() as u32;
        keys.push(key(w));
        keys.len() - 1
    }

    /// Records `w` at `slot` unless already present; returns whether it was new.
    #[inline]
    fn insert(&mut self, w: u32, slot: usize) -> bool {
        if self.stamp[w as usize] == self.now {
            return false;
        }
        self.stamp[w as usize] = self.now;
        self.slot[w as usize] = slot as u32;
        true
    }
}

/// A worker's buffers and outstanding operations.
struct State<'w> {
    w: &'w Worker,
    dim: usize,
    plan: Plan,
    next_plan: Plan,
    at: Offsets,
    syn0: SlotMap,
    syn1: SlotMap,
    seen: SlotMap,
    keys: Vec<Key>,
    orig: Vec<f32>,
    work: Vec<f32>,
    local_keys: Vec<Key>,
    e: Vec<f32>,
    /// adapm: the planned batches after the current one (negatives drawn, intents signalled).
    ahead: VecDeque<Plan>,
    /// adapm: plans to reuse.
    spare_plans: Vec<Plan>,
    /// adapm: the distinct output vectors of a planned batch.
    seen_out: SlotMap,
    /// The negatives of `next_plan`, prepared when it was planned.
    next_sample: Option<SampleHandle>,
    sample: Option<SampleHandle>,
    neg_keys: Vec<Key>,
    pending: VecDeque<Ticket<'w>>,
    rng: SmallRng,
}

impl<'w> State<'w> {
    /// Keeps a ticket until it finishes; waits for the oldest ones if too many are out.
    fn hold(&mut self, t: Ticket<'w>) -> anyhow::Result<()> {
        self.pending.push_back(t);
        while let Some(front) = self.pending.front() {
            if front.is_finished() || self.pending.len() > MAX_PENDING {
                self.pending.pop_front().map(Ticket::wait).transpose()?;
            } else {
                break;
            }
        }
        Ok(())
    }

    fn drain(&mut self) -> anyhow::Result<()> {
        while let Some(t) = self.pending.pop_front() {
            t.wait()?;
        }
        Ok(())
    }

    /// Plans the sentences `batch` into `next_plan` with placeholders for its negatives,
    /// prepares their sample (so that `preloc` and `pool` start bringing them here) and, in
    /// lapse mode, localizes the plan's own keys.
    fn plan_next(&mut self, job: &Job<'_>, batch: Range<usize>, p: Params) -> anyhow::Result<()> {
        self.next_plan.clear();
        for s in batch {
            self.next_plan.add_with(
                job.sentences.get(s),
                job.keep,
                p,
                &mut self.rng,
                |_, out, n| out.resize(out.len() + n, 0),
            );
        }
        if let Some(old) = self.next_sample.take() {
            self.w.finish_sample(old);
        }
        let wanted = self.next_plan.negatives.len();
        self.next_sample = Some(self.w.prepare_sample(job.negatives, wanted)?);
        if !job.localize {
            return Ok(());
        }
        self.seen.clear();
        self.local_keys.clear();
        let (plan, hot) = (&self.next_plan, job.replicated);
        // Replicated keys are here already: they are left out (no node round trip for them).
        for &w in &plan.words {
            if self.seen.insert(w, 0) {
                if !hot.syn0(w) {
                    self.local_keys.push(job.keys.syn0(w));
                }
                if !hot.syn1(w) {
                    self.local_keys.push(job.keys.syn1(w));
                }
            }
        }
        if !self.local_keys.is_empty() {
            let t = self.w.localize(&self.local_keys)?;
            self.hold(t)?;
        }
        Ok(())
    }

    /// adapm: plans the sentences `batch`, to train at clock `start`, into the look-ahead
    /// queue: draws its negatives now (from the run's sampler, `naive`: the distribution and
    /// the order of the draws are those of the other modes) and signals the intent for the
    /// distinct keys the batch will pull.
    fn plan_ahead(
        &mut self,
        job: &Job<'_>,
        batch: Range<usize>,
        start: u64,
        p: Params,
    ) -> anyhow::Result<()> {
        let mut plan = self.spare_plans.pop().unwrap_or_default();
        plan.clear();
        for s in batch {
            plan.add_with(
                job.sentences.get(s),
                job.keep,
                p,
                &mut self.rng,
                |_, out, n| out.resize(out.len() + n, 0),
            );
        }
        if job.draw_ahead && !plan.negatives.is_empty() {
            self.neg_keys.resize(plan.negatives.len(), 0);
            let mut sample = self.w.prepare_sample(job.negatives, plan.negatives.len())?;
            self.w.sample_keys(&mut sample, &mut self.neg_keys)?;
            self.w.finish_sample(sample);
            for (word, &key) in plan.negatives.iter_mut().zip(&self.neg_keys) {
                *word = job.keys.word_of_key(key).0;
            }
        }
        self.seen.clear();
        self.seen_out.clear();
        self.local_keys.clear();
        for &w in &plan.words {
            if self.seen.insert(w, 0) {
                self.local_keys.push(job.keys.syn0(w));
            }
        }
        // (Under `local` the negatives are placeholders still: the intent leaves them out.)
        let negatives = if job.draw_ahead {
            &plan.negatives[..]
        } else {
            &[]
        };
        for &w in plan.words.iter().chain(negatives) {
            if self.seen_out.insert(w, 0) {
                self.local_keys.push(job.keys.syn1(w));
            }
        }
        if !self.local_keys.is_empty() {
            self.w.intent(&self.local_keys, start, start + 1)?;
        }
        self.ahead.push_back(plan);
        Ok(())
    }

    /// adapm: makes the oldest planned batch the current plan.
    fn take_ahead(&mut self) -> anyhow::Result<()> {
        let next = self
            .ahead
            .pop_front()
            .context("a batch is planned before it trains")?;
        let done = std::mem::replace(&mut self.plan, next);
        self.spare_plans.push(done);
        Ok(())
    }

    /// Draws the current plan's negatives from its prepared sample. Only their keys: their
    /// values are read with the batch's other keys, in one pull in which a word drawn many
    /// times (the frequent ones are) is read once.
    fn draw_negatives(&mut self, job: &Job<'_>) -> anyhow::Result<()> {
        self.neg_keys.resize(self.plan.negatives.len(), 0);
        let mut sample = self
            .sample
            .take()
            .context("a plan's negatives are prepared when it is planned")?;
        self.w.sample_keys(&mut sample, &mut self.neg_keys)?;
        self.w.finish_sample(sample);
        for (word, &key) in self.plan.negatives.iter_mut().zip(&self.neg_keys) {
            *word = job.keys.word_of_key(key).0;
        }
        Ok(())
    }

    /// Pulls, trains and pushes the current plan.
    ///
    /// The batch's keys are laid out as its distinct input vectors, then its distinct output
    /// vectors (sentence words first, then negatives); the offsets `train_batch` reads are
    /// recorded while the keys are collected, so no word is looked up twice.
    fn train_plan(
        &mut self,
        job: &Job<'_>,
        p: Params,
        alpha: f32,
        sig: &Sigmoid,
    ) -> anyhow::Result<SentenceStats> {
        if self.plan.words.is_empty() {
            return Ok(SentenceStats::default());
        }
        if job.intents && !job.draw_ahead {
            // adapm under `local`: drawn now, from the keys held here now.
            let wanted = self.plan.negatives.len();
            self.sample = Some(self.w.prepare_sample(job.negatives, wanted)?);
        }
        if !job.intents || !job.draw_ahead {
            // (adapm under `naive` drew them when the batch was planned.)
            self.draw_negatives(job)?;
        }
        let (dim, km) = (self.dim, job.keys);
        self.syn0.clear();
        self.syn1.clear();
        self.keys.clear();
        let at = &mut self.at;
        at.syn0.clear();
        at.syn1.clear();
        at.negatives.clear();
        for &w in &self.plan.words {
            let slot = self.syn0.slot_of(w, &mut self.keys, |w| km.syn0(w));
            at.syn0.push(slot * dim);
        }
        let inputs = self.keys.len();
        for &w in &self.plan.words {
            let slot = self.syn1.slot_of(w, &mut self.keys, |w| km.syn1(w)) - inputs;
            at.syn1.push(slot * dim);
        }
        for &w in &self.plan.negatives {
            let slot = self.syn1.slot_of(w, &mut self.keys, |w| km.syn1(w)) - inputs;
            at.negatives.push(slot * dim);
        }
        let n = self.keys.len();
        self.orig.resize(n * dim, 0.0);
        self.work.resize(n * dim, 0.0);
        self.w.pull(&self.keys, &mut self.orig[..n * dim])?.wait()?;
        self.work.copy_from_slice(&self.orig);
        let stats = train_batch(
            &self.plan,
            &self.at,
            p,
            alpha,
            sig,
            self.work.split_at_mut(inputs * dim),
            &mut self.e,
        );
        // The deltas, in place.
        for (x, o) in self.work.iter_mut().zip(&self.orig) {
            *x -= o;
        }
        let t = self.w.push(&self.keys, &self.work[..n * dim])?;
        self.hold(t)?;
        Ok(stats)
    }
}

fn sub(a: [u64; CLUSTER_COUNTERS], b: &[u64; CLUSTER_COUNTERS]) -> [u64; CLUSTER_COUNTERS] {
    std::array::from_fn(|i| a[i].saturating_sub(b[i]))
}

/// Groups consecutive sentences of `range` into batches of at most `max_words` words (a longer
/// sentence is a batch of its own).
pub fn batches(sentences: &Sentences, range: Range<usize>, max_words: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = range.start;
    for s in range.clone() {
        if s > start && sentences.words_in(start..s + 1) > max_words {
            out.push(start..s);
            start = s;
        }
    }
    if start < range.end {
        out.push(start..range.end);
    }
    out
}

/// Runs one worker's whole training; global worker 0 returns the outcome.
pub fn run_worker(job: &Job<'_>, w: &Worker) -> anyhow::Result<Option<Outcome>> {
    let a = job.args;
    let dim = a.dim as usize;
    let p = Params {
        dim,
        window: a.window as usize,
        negative: a.negative as usize,
    };
    let sig = Sigmoid::new();
    let gid = w.global_id() as usize;
    let parts = (w.num_nodes() * w.workers_per_node()) as usize;
    let mine = job.sentences.part(gid, parts);
    let my_words = job.sentences.words_in(mine.clone()) as f64;
    let batch_words = a.batch_words(job.sentences.words.len() / parts);
    let batches = batches(job.sentences, mine, batch_words);
    let ahead = a.intent_ahead_batches(batch_words);
    let schedule = my_words * f64::from(a.epochs) + 1.0;

    if !job.start.resumed {
        init_vectors(job, w).context("initialising the vectors")?;
    }
    if job.replicates {
        // A replicated key's `set` went to its hub; this brings it into every replica.
        w.sync_replicas()
            .context("bringing the initial vectors into every replica")?;
    }
    w.barrier()?;
    // Counters not to report: everything up to here, then every evaluation.
    let mut excluded = if w.id() == 0 {
        node_counters(&job.node.stats())
    } else {
        [0; CLUSTER_COUNTERS]
    };
    w.barrier()?;

    let rng =
        SmallRng::seed_from_u64(a.seed ^ (gid as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f));
    let v = job.vocab_len;
    let mut st = State {
        w,
        dim,
        plan: Plan::default(),
        next_plan: Plan::default(),
        at: Offsets::default(),
        syn0: SlotMap::new(v),
        syn1: SlotMap::new(v),
        seen: SlotMap::new(v),
        ahead: VecDeque::new(),
        spare_plans: Vec::new(),
        seen_out: SlotMap::new(if job.intents { v } else { 0 }),
        keys: Vec::new(),
        orig: Vec::new(),
        work: Vec::new(),
        local_keys: Vec::new(),
        e: vec![0.0; dim],
        next_sample: None,
        sample: None,
        neg_keys: Vec::new(),
        pending: VecDeque::new(),
        rng,
    };

    let first = job.start.epoch;
    // The bar counts the cluster's words: worker 0's progress stands for every worker's.
    let all_words = job.sentences.words.len() as u64;
    let scale = all_words as f64 / my_words.max(1.0);
    let mut local_fraction = crate::output::LocalFraction::default();
    let mut last_loss = None;
    // The learning rate decays with the words processed: a resumed run has done `first`
    // epochs of them.
    let mut processed = my_words * f64::from(first);
    let mut epochs = Vec::new();
    let mut counters = ClusterCounters::default();
    // Sized as every epoch's sums are: a resume with nothing left to train reports these.
    let mut replicas = vec![0u64; INTENTS_AT - REPLICATION_AT];
    let mut intent_total = vec![0u64; intents::COUNTERS];
    let mut intents_before = [0u64; intents::COUNTERS];
    let mut cpu_before = 0.0;
    // The worker's sampling counters: negatives drawn, and `local` fallbacks among them.
    let mut sampling_before = crate::sampling::worker_counts(&w.counters());
    for epoch in first + 1..=a.epochs {
        let clock = Stopwatch::start();
        let bar = job.console.bar(w, all_words, (epoch, a.epochs), last_loss);
        let mut done = 0f64;
        let mut stats = SentenceStats::default();
        let mut alpha = a.lr;
        if job.intents {
            // The clock at which batch `b` of this epoch trains.
            let base = w.current_clock();
            for (b, batch) in batches.iter().enumerate().take(ahead) {
                st.plan_ahead(job, batch.clone(), base + b as u64, p)?;
            }
            for (b, batch) in batches.iter().enumerate() {
                if let Some(later) = b.checked_add(ahead).and_then(|later| batches.get(later)) {
                    st.plan_ahead(job, later.clone(), base + (b + ahead) as u64, p)?;
                }
                st.take_ahead()?;
                alpha = a.lr * (1.0 - processed / schedule).max(1e-4) as f32;
                stats += st.train_plan(job, p, alpha, &sig)?;
                debug_assert_eq!(st.plan.raw_words, job.sentences.words_in(batch.clone()));
                processed += st.plan.raw_words as f64;
                done += st.plan.raw_words as f64;
                bar.set_position((done * scale) as u64);
                w.advance_clock();
            }
        } else if let Some(first) = batches.first() {
            st.plan_next(job, first.clone(), p)?;
            for (b, batch) in batches.iter().enumerate() {
                std::mem::swap(&mut st.plan, &mut st.next_plan);
                st.sample = st.next_sample.take();
                if let Some(next) = batches.get(b + 1) {
                    st.plan_next(job, next.clone(), p)?;
                }
                alpha = a.lr * (1.0 - processed / schedule).max(1e-4) as f32;
                stats += st.train_plan(job, p, alpha, &sig)?;
                debug_assert_eq!(st.plan.raw_words, job.sentences.words_in(batch.clone()));
                processed += st.plan.raw_words as f64;
                done += st.plan.raw_words as f64;
                bar.set_position((done * scale) as u64);
            }
        }
        st.drain()?;
        bar.finish_and_clear();
        let sampling = crate::sampling::worker_counts(&w.counters());
        job.node_sums.add(&[
            (stats.loss * LOSS_SCALE).round() as u64,
            stats.pairs,
            stats.negatives,
            sampling[1] - sampling_before[1],
            my_words as u64,
            sampling[0] - sampling_before[0],
        ]);
        sampling_before = sampling;
        let intents_now = intents::worker_counts(w);
        job.node_sums
            .intents
            .add(&intents::since(intents_now, &intents_before));
        intents_before = intents_now;
        job.node_sums.barrier.wait();
        if w.id() == 0 {
            let train = job.node_sums.take();
            let stats = job.node.stats();
            let cluster = sub(node_counters(&stats), &excluded);
            let replicas = replication::node_counters(&job.replicated.keys, &stats);
            let node_intents = job.node_sums.intents.take();
            let all: Vec<u64> = train
                .iter()
                .chain(&cluster)
                .chain(&replicas)
                .chain(&node_intents)
                .copied()
                .collect();
            job.sums.contribute(w, &all)?;
        }
        let sums = job.sums.barrier_and_read(w)?;
        let seconds = clock.seconds();
        counters = ClusterCounters::from_sums(&sums[TRAIN_COUNTERS..REPLICATION_AT]);
        replicas = sums[REPLICATION_AT..INTENTS_AT].to_vec();
        let epoch_intents = &sums[INTENTS_AT..];
        for (i, (t, e)) in intent_total.iter_mut().zip(epoch_intents).enumerate() {
            // Counts add up over the epochs; the window is the latest.
            *t = if i + 1 == intents::COUNTERS {
                *e
            } else {
                *t + e
            };
        }
        let fingerprint = replication::fingerprint(&job.replicated.keys);
        // Every worker sees the same sums, so all of them stop here together.
        anyhow::ensure!(
            replicas[0] == u64::from(w.num_nodes()) * fingerprint,
            "the nodes replicate different keys (fingerprints sum to {}, expected {} × {}): \
             same corpus, --min-count, --seed and replication options on every node?",
            replicas[0],
            w.num_nodes(),
            fingerprint
        );
        let cpu_seconds = counters.cpu_seconds - cpu_before;
        cpu_before = counters.cpu_seconds;

        let evaluate = epoch == a.epochs || (a.eval_every > 0 && epoch % a.eval_every == 0);
        let mut metrics = Map::new();
        if evaluate {
            let before = if w.id() == 0 {
                node_counters(&job.node.stats())
            } else {
                [0; CLUSTER_COUNTERS]
            };
            if job.replicates {
                // Replicas are only eventually consistent: make every update visible first.
                w.sync_replicas()
                    .context("syncing the replicas for evaluation")?;
            }
            w.barrier()?;
            if let Some(ev) = job.evaluator.filter(|_| gid == 0) {
                metrics =
                    ev.evaluate(&gather(job, w).context("gathering the vectors for evaluation")?);
            }
            w.barrier()?;
            if w.id() == 0 {
                let spent = sub(node_counters(&job.node.stats()), &before);
                for (x, s) in excluded.iter_mut().zip(spent) {
                    *x += s;
                }
            }
            w.barrier()?;
        }
        if gid == 0 {
            let (loss, pairs) = (sums[0] as f64 / LOSS_SCALE, sums[1]);
            let loss = if pairs > 0 {
                loss / pairs as f64
            } else {
                f64::NAN
            };
            last_loss = Some(loss);
            let mut row = json!({
                "epoch": epoch,
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "loss": loss,
                "local_fraction": local_fraction.epoch([sums[TRAIN_COUNTERS], sums[TRAIN_COUNTERS + 1]]),
                "pairs": pairs,
                "negatives": sums[2],
                "words": sums[4],
                "lr": alpha,
            });
            // Drawn, not trained: a negative equal to its pair's center is drawn but skipped.
            row["sampling"] = crate::sampling::report(a.scheme(), sums[5], sums[3]);
            if job.intents {
                row["intents"] = intents::report(epoch_intents, parts as u64);
            }
            if let Value::Object(m) = &mut row {
                m.extend(metrics);
            }
            job.console.epoch(w, &row, a.epochs);
            epochs.push(row);
        }
        // The manifest keeps global worker 0's state: the epoch's row.
        let state = match (gid, epochs.last()) {
            (0, Some(row)) => crate::checkpointing::with_last_epoch(Value::Null, row),
            _ => Value::Null,
        };
        a.checkpoint.after_epoch(w, epoch, state)?;
    }
    if gid == 0 && epochs.is_empty() {
        // Resumed from a checkpoint that covers every epoch: its recorded figures.
        epochs = job.start.recorded_epochs();
        for row in &epochs {
            job.console.epoch(w, row, a.epochs);
        }
    }
    Ok((gid == 0).then_some(Outcome {
        epochs,
        counters,
        replication: replicas,
        intents: intent_total,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_group_consecutive_sentences_up_to_the_word_budget() {
        // Sentence lengths 3, 4, 2, 9, 1, 1.
        let mut s = Sentences {
            words: Vec::new(),
            starts: vec![0],
        };
        for len in [3, 4, 2, 9, 1, 1] {
            s.words.extend(std::iter::repeat_n(0, len));
            s.starts.push(s.words.len());
        }
        assert_eq!(batches(&s, 0..6, 7), vec![0..2, 2..3, 3..4, 4..6]);
        assert_eq!(batches(&s, 1..4, 100), vec![1..4]);
        assert_eq!(
            batches(&s, 0..6, 1),
            (0..6).map(|i| i..i + 1).collect::<Vec<_>>()
        );
        assert!(batches(&s, 3..3, 10).is_empty());
    }
}
