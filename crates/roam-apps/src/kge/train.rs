//! One worker's training: the update of one positive triple with its negatives, and an epoch
//! over the worker's triples with look-ahead localization.
//!
//! Per positive (s, r, o) with tails t₁..t_N and heads h₁..h_N (uniform random entities, drawn
//! through roam's sampling API from the job's one sampler, [`Epoch::sampler`]):
//! 1. one pull of s, o and r (their embeddings only) and, at the same time, one
//!    `pull_sample` of the 2N negatives (N tails, then N heads) into a buffer of their own;
//!    the negatives are then merged into the step's slots: a negative equal to s, o or an
//!    earlier negative shares that key's slot (and its values, those already in the slot);
//! 2. the logistic loss of all 1 + 2N scored triples (label 1 for the positive, 0 for the
//!    corruptions, as in Lapse's kge app, which keeps corruptions that happen to be true),
//!    with gradients summed per key: a key used by several of the scored triples (s, o, r,
//!    or a repeated negative) gets one gradient, the sum, computed from the pulled values;
//! 3. L2 regularisation `gamma/len · x` added once per use of the key (Lapse's per-update
//!    weight), then one `push_gradients` of all keys (not waited for): the key space's AdaGrad
//!    ([`super::params::optimizer`]) steps each record where it lives, `acc += g²; w −= eta·g/√(acc+eps)`,
//!    its accumulator hidden state in the record (moved with it, checkpointed, never pulled).
//!    A replicated key's gradients accumulate until the sync, and its hub steps it once per
//!    round with their sum (`roam_core::replica`).
//!
//! Summing before the step (instead of Lapse's 1 + 2N separate pull/update/push rounds) makes
//! the whole positive one read and one write per key, which is what makes remote keys cheap
//! enough; the per-key sum is the exact gradient of the positive's summed loss.
//!
//! Samples are prepared ahead, on the localize schedule: the negatives of a batch of
//! `localize_batch` positives are one `prepare_sample` (a queue of handles), issued when the
//! look-ahead localize of that batch's s and o is, `localize_ahead` positives ahead (at the
//! batch's first positive when that is 0). So `preloc` and `pool` can bring the negatives here
//! before they are pulled; `naive` and `local` draw at pull time.
//!
//! Look-ahead localizes are detached (hints: nothing waits for a relocation; the epoch's
//! closing barrier still waits for them), cover s and o only (the sampler moves negatives),
//! and leave out replicated keys (NuPS modes), which are local on every node. Pushes are kept
//! in a bounded queue and reaped as they finish, which bounds the operations in flight and
//! surfaces their errors.
//!
//! adapm mode ([`Hyper::intent_ahead`] > 0) localizes nothing: the worker's clock ticks once
//! per triple, and when triple `i` is about to train, triple `i + A` (`A` =
//! [`crate::intents::KGE_AHEAD_TRIPLES`] by default) gets its 2N negatives drawn (one
//! `prepare_sample` and `sample_keys` under `naive`: exact uniform draws, nothing moves) into a
//! queue, and an intent for its s, r, o and negatives at the clock it will train at; roam moves
//! them here shortly before. When the triple trains its negatives are read with an ordinary
//! pull, alongside the pull of s, o and r. Under `--sampling local` (AdaPM's own KGE setup,
//! [`Epoch::draw_ahead`] false) the intent names s, r and o only, and the negatives are drawn
//! when the triple trains, with `pull_sample`, from the entities held here then (owned, or
//! replicas): no intent, no communication, not uniform.
//!
//! Under `--schedule buckets` the epoch is `buckets.rs`'s instead: rounds of entity parts, moved
//! as [`super::buckets::PartMoves`] says (an intent per round under adapm, a localize at the
//! round's barrier under lapse and nups, not at all otherwise), negatives from the parts held
//! and a pool ([`Negatives::Pooled`]).

use std::collections::VecDeque;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use roam::{Key, SampleHandle, SamplerId, Ticket, Worker};

use super::buckets::{Buckets, PartMoves};
use super::data::{Graph, Triple};
use super::model::{Model, axpy, dot, logistic};
use super::params::{mix, relation_key};
use super::partition::Partition;
use super::pool::Pool;
use super::replicate::Plan;

/// Settings shared by all workers of a process.
#[derive(Clone, Copy, Debug)]
pub struct Hyper {
    /// The scoring model.
    pub model: Model,
    /// AdaGrad learning rate.
    pub eta: f32,
    /// L2 weight (divided by the embedding length, as in Lapse).
    pub gamma: f32,
    /// Corrupted tails and corrupted heads per positive (N each).
    pub neg_ratio: usize,
    /// Triples of look-ahead for localizing entities (0: never localize).
    pub localize_ahead: usize,
    /// Triples whose entities are localized in one request (every `localize_batch` triples,
    /// those of the next batch starting `localize_ahead` ahead; 1 is Lapse's technique).
    pub localize_batch: usize,
    /// Seed of initialisation and shuffles (the negatives come from the sampler's seed).
    pub seed: u64,
    /// How the scored triples of one positive become one push.
    pub update: UpdateRule,
    /// Half-width of the uniform initialisation of embeddings.
    pub init_range: f32,
    /// Pushes a worker may leave unfinished before it waits for the oldest (0: each push is
    /// waited for before the next triple, Lapse's default `async_push=0`).
    pub pushes_in_flight: usize,
    /// adapm mode: triples of look-ahead for intents (0: no intents, the other modes).
    pub intent_ahead: usize,
    /// The bucket schedule's pool of global negatives per round, as a multiple of the
    /// entities a worker holds (`buckets.rs`).
    pub bucket_pool: f64,
    /// Triples between two pushes of the pool's gradients (0: once, at the round's end).
    pub bucket_pool_flush: usize,
}

/// Where the negatives of a positive come from.
pub enum Negatives<'a> {
    /// Drawn now from a prepared sample (the sampling schemes).
    Sample(&'a mut SampleHandle),
    /// Drawn earlier (adapm: when the positive's intent was signalled), read with a pull.
    Drawn(&'a [Key]),
    /// Drawn earlier; those in the pool are read from it and their updates summed into it
    /// (the bucket schedule's global negatives, `buckets.rs`), the rest pulled and pushed.
    Pooled(&'a [Key], &'a mut Pool),
}

/// How the 1 + 2N scored triples of a positive are turned into one push per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum UpdateRule {
    /// Lapse's sequence of updates (positive, then each corrupted tail and head), applied to
    /// the pulled copy; the push carries the sum of the steps.
    Sequential,
    /// All gradients from the pulled values, summed per key, then one AdaGrad step per key.
    Summed,
}

impl UpdateRule {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Summed => "summed",
        }
    }
}

/// Buffers for the update of one positive triple (reused across triples).
#[derive(Debug, Default)]
pub struct Step {
    keys: Vec<Key>,
    offsets: Vec<usize>,
    vals: Vec<f32>,
    grads: Vec<f32>,
    slot_t: Vec<usize>,
    slot_h: Vec<usize>,
    neg_keys: Vec<Key>,
    neg_vals: Vec<f32>,
    fetch_keys: Vec<Key>,
    fetch_at: Vec<usize>,
    fetch_vals: Vec<f32>,
    push_keys: Vec<Key>,
    push_grads: Vec<f32>,
    q: Vec<f32>,
    p: Vec<f32>,
    u: Vec<f32>,
    w: Vec<f32>,
    v: Vec<f32>,
    tmp: Vec<f32>,
    end: usize,
}

/// Loss of the scored triples of an epoch on one worker, and what its sampler did.
#[derive(Clone, Copy, Debug, Default)]
pub struct LossSum {
    /// Sum of logistic losses.
    pub loss: f64,
    /// Scored triples (positives and negatives).
    pub scored: u64,
    /// Negatives drawn (the worker's `sampled_keys` counter over the epoch).
    pub sampled: u64,
    /// Of those, `local` draws that found no local key and were read remotely.
    pub fallbacks: u64,
}

impl Step {
    /// The slot of `key` (of `len` values) in this batch, added if new: repeated keys share
    /// one slot, which is what sums their gradients.
    fn slot(&mut self, key: Key, len: usize) -> usize {
        if let Some(i) = self.keys.iter().position(|&k| k == key) {
            return i;
        }
        self.keys.push(key);
        self.offsets.push(self.end);
        self.end += len;
        self.keys.len() - 1
    }

    /// Pulls, computes and pushes the update of positive `t` with its 2N negatives (N corrupted
    /// tails, then N corrupted heads), drawn from a sample or drawn already; returns the push's
    /// ticket (not waited) and adds the loss to `sum`.
    pub fn run<'w>(
        &mut self,
        worker: &'w Worker,
        hyper: &Hyper,
        graph: &Graph,
        t: Triple,
        mut negatives: Negatives<'_>,
        sum: &mut LossSum,
    ) -> anyhow::Result<Ticket<'w>> {
        let model = hyper.model;
        let (e, rl) = (model.entity_len(), model.relation_len());
        let n = hyper.neg_ratio;
        self.keys.clear();
        self.offsets.clear();
        self.end = 0;
        let slot_s = self.slot(u64::from(t.s), e);
        let slot_o = self.slot(u64::from(t.o), e);
        let slot_r = self.slot(relation_key(graph, t.r), rl);
        self.vals.resize(self.end, 0.0);
        self.neg_keys.resize(2 * n, 0);
        self.neg_vals.resize(2 * n * e, 0.0);
        {
            // Both reads in flight at once: s, o and r, and the negatives.
            let positive = worker.pull(&self.keys, &mut self.vals)?;
            let pending = match &mut negatives {
                _ if n == 0 => None,
                Negatives::Sample(sample) => {
                    Some(worker.pull_sample(sample, &mut self.neg_keys, &mut self.neg_vals)?)
                }
                Negatives::Drawn(keys) => {
                    self.neg_keys.copy_from_slice(keys);
                    Some(worker.pull(&self.neg_keys, &mut self.neg_vals)?)
                }
                Negatives::Pooled(keys, pool) => {
                    self.neg_keys.copy_from_slice(keys);
                    self.fetch_keys.clear();
                    self.fetch_at.clear();
                    let len = e;
                    for (i, &key) in keys.iter().enumerate() {
                        match pool.index.get(&key) {
                            Some(&at) => self.neg_vals[i * len..(i + 1) * len]
                                .copy_from_slice(pool.values(at)),
                            None => {
                                self.fetch_keys.push(key);
                                self.fetch_at.push(i);
                            }
                        }
                    }
                    self.fetch_vals.resize(self.fetch_keys.len() * len, 0.0);
                    Some(worker.pull(&self.fetch_keys, &mut self.fetch_vals)?)
                }
            };
            positive.wait()?;
            pending.map(Ticket::wait).transpose()?;
        }
        if let Negatives::Pooled(..) = negatives {
            let len = e;
            for (j, &i) in self.fetch_at.iter().enumerate() {
                self.neg_vals[i * len..(i + 1) * len]
                    .copy_from_slice(&self.fetch_vals[j * len..(j + 1) * len]);
            }
        }
        // Merge: a negative already in a slot (s, o, or an earlier negative) shares it, with
        // the values already there; a new one gets a slot and its sampled values.
        self.slot_t.clear();
        self.slot_h.clear();
        for i in 0..2 * n {
            let before = self.keys.len();
            let slot = self.slot(self.neg_keys[i], e);
            if self.keys.len() > before {
                self.vals
                    .extend_from_slice(&self.neg_vals[i * e..(i + 1) * e]);
            }
            if i < n {
                self.slot_t.push(slot);
            } else {
                self.slot_h.push(slot);
            }
        }
        debug_assert_eq!(self.vals.len(), self.end);
        self.push_keys.clear();
        self.push_grads.clear();
        let loss = match hyper.update {
            UpdateRule::Summed => self.summed(hyper, slot_s, slot_o, slot_r),
            UpdateRule::Sequential => self.sequential(hyper, slot_s, slot_o, slot_r),
        };
        sum.loss += loss;
        sum.scored += 1 + 2 * n as u64;
        if hyper.eta == 0.0 {
            // The untrained baseline: no optimizer, nothing to apply.
            return Ok(worker.push(&[], &[])?);
        }
        if let Negatives::Pooled(_, pool) = negatives {
            // Gradients of pooled keys are summed in the pool until the schedule pushes them
            // (one AdaGrad step per key and push, as a replica's at its sync); the pooled
            // values stay as read at the round's start.
            let (keys, grads) = (&mut self.push_keys, &mut self.push_grads);
            let ne = u64::from(graph.num_entities);
            let (mut kept, mut read, mut write) = (0, 0, 0);
            for i in 0..keys.len() {
                let key = keys[i];
                let len = if key < ne { e } else { rl };
                match pool.index.get(&key).copied() {
                    Some(at) => pool.add(at, &grads[read..read + len]),
                    None => {
                        keys[kept] = key;
                        grads.copy_within(read..read + len, write);
                        kept += 1;
                        write += len;
                    }
                }
                read += len;
            }
            keys.truncate(kept);
            grads.truncate(write);
        }
        Ok(worker.push_gradients(&self.push_keys, &self.push_grads)?)
    }

    /// Gradients of all scored triples from the pulled values, summed per key, into the push
    /// (one AdaGrad step per key where the key lives); returns the loss.
    fn summed(&mut self, hyper: &Hyper, slot_s: usize, slot_o: usize, slot_r: usize) -> f64 {
        let model = hyper.model;
        let (e, rl) = (model.entity_len(), model.relation_len());
        self.grads.clear();
        self.grads.resize(self.vals.len(), 0.0);
        for buf in [
            &mut self.q,
            &mut self.p,
            &mut self.u,
            &mut self.w,
            &mut self.v,
            &mut self.tmp,
        ] {
            buf.clear();
            buf.resize(e, 0.0);
        }
        let vals = &self.vals;
        let at = |slot: usize, len: usize| &vals[self.offsets[slot]..self.offsets[slot] + len];
        let (s, o, r) = (at(slot_s, e), at(slot_o, e), at(slot_r, rl));
        model.tail_query(s, r, &mut self.q);
        model.head_query(r, o, &mut self.p);

        let f = dot(&self.q, o);
        let (dl, l) = logistic(f, 1.0);
        let mut loss = f64::from(l);
        // u = Σ dl·tail over (s, r, ·) triples; w = Σ dl·head over (·, r, o) triples;
        // v = the corrupted heads' part of w (the positive's relation gradient is in u).
        axpy(dl, o, &mut self.u);
        axpy(dl, s, &mut self.w);
        let grads = &mut self.grads;
        for &slot in &self.slot_t {
            let x = at(slot, e);
            let f = dot(&self.q, x);
            let (dl, l) = logistic(f, 0.0);
            loss += f64::from(l);
            let off = self.offsets[slot];
            axpy(dl, &self.q, &mut grads[off..off + e]);
            axpy(dl, x, &mut self.u);
        }
        for &slot in &self.slot_h {
            let x = at(slot, e);
            let f = dot(x, &self.p);
            let (dl, l) = logistic(f, 0.0);
            loss += f64::from(l);
            let off = self.offsets[slot];
            axpy(dl, &self.p, &mut grads[off..off + e]);
            axpy(dl, x, &mut self.w);
            axpy(dl, x, &mut self.v);
        }
        model.head_query(r, &self.u, &mut self.tmp);
        let off = self.offsets[slot_s];
        axpy(1.0, &self.tmp, &mut grads[off..off + e]);
        model.tail_query(&self.w, r, &mut self.tmp);
        let off = self.offsets[slot_o];
        axpy(1.0, &self.tmp, &mut grads[off..off + e]);
        let off = self.offsets[slot_r];
        model.add_relation_grad(s, &self.u, &mut grads[off..off + rl]);
        model.add_relation_grad(&self.v, o, &mut grads[off..off + rl]);

        // L2, once per use: s and o in N + 1 triples each, r in 2N + 1, negatives in one.
        let n = self.slot_t.len() as f32;
        let (ge, gr) = (hyper.gamma / e as f32, hyper.gamma / rl as f32);
        if hyper.gamma > 0.0 {
            let uses = [
                (slot_s, ge * (n + 1.0), e),
                (slot_o, ge * (n + 1.0), e),
                (slot_r, gr * (2.0 * n + 1.0), rl),
            ];
            for (slot, weight, len) in uses
                .into_iter()
                .chain(self.slot_t.iter().chain(&self.slot_h).map(|&s| (s, ge, e)))
            {
                let off = self.offsets[slot];
                axpy(weight, &vals[off..off + len], &mut grads[off..off + len]);
            }
        }

        self.push_keys.extend_from_slice(&self.keys);
        self.push_grads.extend_from_slice(grads);
        loss
    }

    /// Lapse's order of updates: the positive, then each corrupted tail and head in turn, each
    /// a gradient of its three keys, pushed in that order, so that the key's owner applies one
    /// AdaGrad step per scored triple in Lapse's sequence. The gradients are taken at the
    /// pulled values (the accumulators are not pulled, so the copy cannot be stepped here);
    /// returns the loss.
    fn sequential(&mut self, hyper: &Hyper, slot_s: usize, slot_o: usize, slot_r: usize) -> f64 {
        let model = hyper.model;
        let (e, rl) = (model.entity_len(), model.relation_len());
        let (ge, gr) = (hyper.gamma / e as f32, hyper.gamma / rl as f32);
        for buf in [&mut self.q, &mut self.p, &mut self.u, &mut self.w] {
            buf.clear();
            buf.resize(e, 0.0);
        }
        self.v.clear();
        self.v.resize(rl, 0.0);
        let mut loss = 0.0;
        let scored = std::iter::once((slot_s, slot_o, 1.0)).chain(
            self.slot_t
                .iter()
                .zip(&self.slot_h)
                .flat_map(|(&t, &h)| [(slot_s, t, 0.0), (h, slot_o, 0.0)]),
        );
        let (oa_r, offsets, vals) = (self.offsets[slot_r], &self.offsets, &self.vals);
        let key_r = self.keys[slot_r];
        for (a, b, label) in scored {
            let (oa, ob) = (offsets[a], offsets[b]);
            let (va, vb, vr) = (&vals[oa..oa + e], &vals[ob..ob + e], &vals[oa_r..oa_r + rl]);
            model.tail_query(va, vr, &mut self.q);
            model.head_query(vr, vb, &mut self.p);
            let f = dot(&self.q, vb);
            let (dl, l) = logistic(f, label);
            loss += f64::from(l);
            for i in 0..e {
                self.u[i] = dl * self.p[i] + ge * va[i];
                self.w[i] = dl * self.q[i] + ge * vb[i];
            }
            self.v.fill(0.0);
            model.add_relation_grad(va, vb, &mut self.v);
            for (g, x) in self.v.iter_mut().zip(vr) {
                *g = dl * *g + gr * x;
            }
            self.push_keys
                .extend_from_slice(&[self.keys[a], self.keys[b], key_r]);
            self.push_grads.extend_from_slice(&self.u);
            self.push_grads.extend_from_slice(&self.w);
            self.push_grads.extend_from_slice(&self.v);
        }
        loss
    }
}

/// One epoch of one worker over its share of the training triples.
pub struct Epoch<'a> {
    /// The graph.
    pub graph: &'a Graph,
    /// Data clustering.
    pub partition: &'a Partition,
    /// Settings.
    pub hyper: Hyper,
    /// Replicated keys (never localized).
    pub plan: &'a Plan,
    /// The sampler of negatives: uniform over the entity keys.
    pub sampler: SamplerId,
    /// The bucket schedule, when the run uses it (`buckets.rs`) instead of `partition`.
    pub buckets: Option<&'a Buckets>,
    /// adapm mode: whether a triple's negatives are drawn when its intent is signalled and
    /// named in it (`naive`), or drawn when it trains, from the keys held here (`local`).
    pub draw_ahead: bool,
    /// How the bucket schedule's parts reach the workers that train them.
    pub part_moves: PartMoves,
}

/// The prepared samples of an epoch: one handle per batch of positives, in order.
struct Samples {
    sampler: SamplerId,
    /// Samples per positive (2N).
    per: usize,
    /// Positives of the epoch.
    len: usize,
    /// Positives whose samples are prepared (the end of the last handle's range).
    prepared: usize,
    /// Handles with the end of their range of positives.
    queue: VecDeque<(usize, SampleHandle)>,
}

impl Samples {
    /// Prepares the samples of the positives up to `end` (one handle for all not yet prepared,
    /// or several if that would exceed roam's limit on one prepare).
    fn prepare_to(&mut self, worker: &Worker, end: usize) -> anyhow::Result<()> {
        let end = end.min(self.len);
        let most = (roam_core::sampling::MAX_PREPARED / self.per.max(1)).max(1);
        while end > self.prepared {
            let to = end.min(self.prepared + most);
            let handle = worker.prepare_sample(self.sampler, (to - self.prepared) * self.per)?;
            self.queue.push_back((to, handle));
            self.prepared = to;
        }
        Ok(())
    }

    /// The handle of positive `i` (finishing those of earlier positives; prepares it now if it
    /// is not yet).
    fn of(&mut self, worker: &Worker, i: usize) -> anyhow::Result<&mut SampleHandle> {
        while self.queue.front().is_some_and(|(end, _)| *end <= i) {
            if let Some((_, done)) = self.queue.pop_front() {
                worker.finish_sample(done);
            }
        }
        self.prepare_to(worker, i + 1)?;
        Ok(&mut self
            .queue
            .front_mut()
            .expect("positive i's samples are prepared")
            .1)
    }

    /// Ends every handle.
    fn finish(&mut self, worker: &Worker) {
        for (_, handle) in self.queue.drain(..) {
            worker.finish_sample(handle);
        }
    }
}

impl Epoch<'_> {
    /// Trains global worker `gid` for epoch `epoch` (1-based); `tick` is called with the
    /// number of triples done since its last call.
    pub fn run(
        &self,
        worker: &Worker,
        gid: u32,
        epoch: u32,
        step: &mut Step,
        mut tick: impl FnMut(u64),
    ) -> anyhow::Result<LossSum> {
        let hyper = &self.hyper;
        let graph = self.graph;
        let mut rng =
            SmallRng::seed_from_u64(mix(mix(hyper.seed, u64::from(gid)), u64::from(epoch)));
        let mut order = self.partition.triples[gid as usize].clone();
        order.shuffle(&mut rng);
        if hyper.intent_ahead > 0 {
            return self.run_with_intents(worker, &order, step, tick);
        }
        let counters = worker.counters();
        let [sampled_before, fallbacks_before] = crate::sampling::worker_counts(&counters);
        let mut samples = Samples {
            sampler: self.sampler,
            per: 2 * hyper.neg_ratio,
            len: order.len(),
            prepared: 0,
            queue: VecDeque::new(),
        };
        let mut pending: VecDeque<Ticket<'_>> = VecDeque::new();
        let mut ahead_keys: Vec<Key> = Vec::new();
        let (ahead, batch) = (hyper.localize_ahead, hyper.localize_batch.max(1));
        // The entities s and o of triples `range` that are not replicated, in one request (not
        // waited for); the sampler localizes the negatives (`preloc`, `pool`).
        let plan = self.plan;
        let mut localize = |range: std::ops::Range<usize>| -> anyhow::Result<()> {
            ahead_keys.clear();
            for &triple in order.iter().take(range.end).skip(range.start) {
                let t = graph.train[triple as usize];
                ahead_keys.extend(
                    [t.s, t.o]
                        .iter()
                        .map(|&x| u64::from(x))
                        .filter(|&k| !plan.is_replicated(k)),
                );
            }
            ahead_keys.sort_unstable();
            ahead_keys.dedup();
            if !ahead_keys.is_empty() {
                worker.localize(&ahead_keys)?.detach();
            }
            Ok(())
        };
        if ahead > 0 {
            localize(0..ahead)?;
            samples.prepare_to(worker, ahead)?;
        }
        let mut sum = LossSum::default();
        let mut since_tick = 0;
        for i in 0..order.len() {
            if i % batch == 0 {
                if ahead > 0 && i + ahead < order.len() {
                    localize(i + ahead..i + ahead + batch)?;
                }
                samples.prepare_to(worker, i + ahead + batch)?;
            }
            let t = graph.train[order[i] as usize];
            let sample = Negatives::Sample(samples.of(worker, i)?);
            pending.push_back(step.run(worker, hyper, graph, t, sample, &mut sum)?);
            retire_pushes(&mut pending, hyper.pushes_in_flight)?;
            since_tick += 1;
            if since_tick == 256 {
                tick(since_tick);
                since_tick = 0;
            }
        }
        samples.finish(worker);
        let sum = end_epoch(pending, &counters, [sampled_before, fallbacks_before], sum)?;
        tick(since_tick);
        Ok(sum)
    }

    /// The epoch in adapm mode over the triples `order`: intents `intent_ahead` triples
    /// ahead with their negatives drawn then (see the module docs), one clock tick per triple.
    fn run_with_intents(
        &self,
        worker: &Worker,
        order: &[u32],
        step: &mut Step,
        mut tick: impl FnMut(u64),
    ) -> anyhow::Result<LossSum> {
        let (hyper, graph) = (&self.hyper, self.graph);
        // No further ahead than the epoch (a larger `--intent-ahead` means "all of it").
        let (ahead, per) = (hyper.intent_ahead.min(order.len()), 2 * hyper.neg_ratio);
        let counters = worker.counters();
        let [sampled_before, fallbacks_before] = crate::sampling::worker_counts(&counters);
        let draw_ahead = self.draw_ahead;
        // The drawn negatives of the triples whose intents are signalled, `per` each, in order
        // (`naive`; `local` draws at training time and leaves this empty).
        let mut drawn: VecDeque<Key> =
            VecDeque::with_capacity(if draw_ahead { (ahead + 1) * per } else { 0 });
        let mut draw = vec![0; if draw_ahead { per } else { 0 }];
        let mut keys: Vec<Key> = Vec::with_capacity(3 + per);
        // `local`: handles prepared in batches (a `local` prepare draws nothing).
        let mut samples = Samples {
            sampler: self.sampler,
            per,
            len: order.len(),
            prepared: 0,
            queue: VecDeque::new(),
        };
        // The clock at which triple `i` of this epoch trains is `base + i`.
        let base = worker.current_clock();
        let mut signal = |i: usize, drawn: &mut VecDeque<Key>| -> anyhow::Result<()> {
            let t = graph.train[order[i] as usize];
            if draw_ahead && per > 0 {
                let mut sample = worker.prepare_sample(self.sampler, per)?;
                worker.sample_keys(&mut sample, &mut draw)?;
                worker.finish_sample(sample);
                drawn.extend(&draw);
            }
            keys.clear();
            keys.extend([u64::from(t.s), u64::from(t.o), relation_key(graph, t.r)]);
            keys.extend_from_slice(&draw);
            keys.sort_unstable();
            keys.dedup();
            let start = base + i as u64;
            worker.intent(&keys, start, start + 1)?;
            Ok(())
        };
        for i in 0..ahead.min(order.len()) {
            signal(i, &mut drawn)?;
        }
        let mut negatives: Vec<Key> = vec![0; per];
        let mut pending: VecDeque<Ticket<'_>> = VecDeque::new();
        let mut sum = LossSum::default();
        let mut since_tick = 0;
        for (i, &triple) in order.iter().enumerate() {
            if i + ahead < order.len() {
                signal(i + ahead, &mut drawn)?;
            }
            let t = graph.train[triple as usize];
            let drawn_now = if draw_ahead {
                for (slot, key) in negatives.iter_mut().zip(drawn.drain(..per)) {
                    *slot = key;
                }
                Negatives::Drawn(&negatives)
            } else {
                if i % LOCAL_PREPARE == 0 {
                    samples.prepare_to(worker, i + LOCAL_PREPARE)?;
                }
                Negatives::Sample(samples.of(worker, i)?)
            };
            let push = step.run(worker, hyper, graph, t, drawn_now, &mut sum)?;
            pending.push_back(push);
            retire_pushes(&mut pending, hyper.pushes_in_flight)?;
            worker.advance_clock();
            since_tick += 1;
            if since_tick == 256 {
                tick(since_tick);
                since_tick = 0;
            }
        }
        samples.finish(worker);
        let sum = end_epoch(pending, &counters, [sampled_before, fallbacks_before], sum)?;
        tick(since_tick);
        Ok(sum)
    }
}

/// adapm under `local`: positives whose sample handles are prepared at once (a `local`
/// prepare draws nothing, so this only saves calls).
const LOCAL_PREPARE: usize = 256;

/// Waits for finished pushes, and for the oldest while more than `limit` are in flight.
pub(super) fn retire_pushes(
    pending: &mut VecDeque<Ticket<'_>>,
    limit: usize,
) -> anyhow::Result<()> {
    while pending.front().is_some_and(|t| t.is_finished()) || pending.len() > limit {
        if let Some(t) = pending.pop_front() {
            t.wait()?;
        }
    }
    Ok(())
}

/// Ends an epoch: waits for its last pushes and adds the worker's sampling counts since
/// `before` (negatives drawn, `local` fallbacks) to its sums.
pub(super) fn end_epoch(
    pending: VecDeque<Ticket<'_>>,
    counters: &roam_core::stats::WorkerCounters,
    before: [u64; 2],
    mut sum: LossSum,
) -> anyhow::Result<LossSum> {
    for t in pending {
        t.wait()?;
    }
    let [sampled, fallbacks] = crate::sampling::worker_counts(counters);
    sum.sampled = sampled.saturating_sub(before[0]);
    sum.fallbacks = fallbacks.saturating_sub(before[1]);
    Ok(sum)
}
