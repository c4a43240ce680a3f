//! The bucket schedule (PyTorch-BigGraph's, as a DSGD schedule for graphs): entities split
//! into `2W` parts for `W` workers, the training triples into buckets by the parts of their
//! head and tail, and each epoch into `2W − 1` rounds in which every worker trains the
//! triples among the two parts it holds — no part is used by two workers in a round.
//!
//! Why: a KGE triple reads two entities and 2N negatives drawn from all entities, so under
//! per-triple intents every entity is wanted by every node within any window and the system
//! can only replicate or bounce it (AdaPM 8× `single`'s CPU at 2 nodes, 22× at 4, on the
//! quick graph). With buckets an entity is used by one worker for a whole round, and each
//! worker keeps one of its two parts into the next round, so `W` parts move at each round's
//! end (like MF's column blocks); negatives are drawn from the two parts the worker holds (PBG's
//! same-partition negatives: local reads) and from a pool of the other parts' entities, read at
//! the round's start, whose gradients are pushed every `--bucket-pool-flush` triples and at the
//! round's end.
//!
//! How the parts move is [`PartMoves`]: under adapm each round's intent is signalled a round
//! ahead (the relations, used everywhere at once, are in it and end up shared); under lapse and
//! nups the worker localizes the round's parts when the barrier before it releases them (nups
//! replicates the relations, lapse reads them at their homes); the other modes leave the parts
//! where they are.
//!
//! Invariants of [`Buckets::new`]: every training triple is in exactly one (round, worker);
//! in each round the workers' part pairs are disjoint and cover all parts; every pair of
//! distinct parts meets in exactly one round (the circle method of round-robin tournaments),
//! and a triple with both ends in one part goes to one of that part's rounds, in turn; each
//! worker's pair shares exactly one part with its pair of the round before; parts
//! balance the entities' degrees (largest first, each to the lightest part); the result
//! depends only on the triples, the entity count and `W`.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use roam::{Key, Ticket, Worker};

use super::data::{Graph, Triple};
use super::params::{mix, relation_key};
use super::pool::Pool;
use super::train::{Epoch, Hyper, LossSum, Negatives, Step, end_epoch, retire_pushes};

/// The name reports give the bucket schedule's negatives (uniform over the two parts held
/// and the round's pool), in place of a sampling scheme's.
pub const BUCKETS_SCHEME: &str = "buckets";

/// The share-sync period of runs on this schedule (roam's default is 10 ms). Under buckets
/// only the relations and the parts being handed over are shared, so a round costs little,
/// and a part's next user reads it right after the barrier that ends its last user's round:
/// with 10 ms it read values up to a period old. Measured on the quick graph, 10 epochs at 4
/// nodes under 10gbe, 3 runs each: MRR 0.166 (0.165–0.202) with 10 ms, 0.213 (0.188–0.237)
/// with 1 ms (`docs/workloads-kge.md`, "Bucket schedule").
pub const SHARE_SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// Triples between two pushes of a round's pool gradients (`--bucket-pool-flush`; 0: once, at
/// the round's end). Measured on the quick graph under `nups` (`docs/workloads-kge.md`, "`nups`
/// with the bucket schedule"): pushing every 64–512 triples brought the MRR after 12 epochs
/// from 0.12 (2 nodes) and 0.18 (4) to 0.17–0.25 (`single`: 0.26; flush 256 at 4 nodes: 0.166),
/// at 1.6–1.9× the CPU of pushing once a round at 2 nodes and 1.2–2.9× at 4; the schedule exists
/// to cut CPU, so the default is the cheap end.
pub const DEFAULT_POOL_FLUSH: usize = 0;

/// How a round's parts reach the worker that trains them, by mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartMoves {
    /// The adapm modes: each round's intent is signalled a round ahead, and roam acts on it
    /// (`adapm-replicate-only` shares the parts instead of moving them).
    Intents,
    /// lapse and nups: the worker localizes the round's parts once the barrier before it
    /// released them.
    Localize,
    /// The other modes: keys stay where they are (all here under `single`; at their hash
    /// homes under `classic` and `nups-replicate-only`, read and pushed there).
    Stay,
}

impl PartMoves {
    /// What mode `mode` does.
    pub fn of(mode: crate::common::Mode) -> Self {
        if mode.signals_intents() {
            Self::Intents
        } else if mode.localizes() {
            Self::Localize
        } else {
            Self::Stay
        }
    }
}

/// How the training triples are spread over workers and time (`--schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Schedule {
    /// Each worker trains the triples of its relations (`partition.rs`), in one pass.
    Relation,
    /// Entities in 2W parts, each round a disjoint pair of parts per worker (`buckets.rs`).
    Buckets,
}

impl Schedule {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Relation => "relation",
            Self::Buckets => "buckets",
        }
    }
}

/// The schedule of one cluster shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// `members[p]`: the entities of part `p`, ascending.
    pub members: Vec<Vec<u32>>,
    /// `part_of[e]`: the part of entity `e`.
    pub part_of: Vec<u32>,
    /// `pairs[r][w]`: the two parts global worker `w` holds in round `r`.
    pub pairs: Vec<Vec<[u32; 2]>>,
    /// `triples[r][w]`: indices into the training triples that worker `w` trains in round
    /// `r`, in file order.
    pub triples: Vec<Vec<Vec<u32>>>,
    /// `relations[r][w]`: the relations of those triples, ascending.
    pub relations: Vec<Vec<Vec<u32>>>,
}

impl Buckets {
    /// The schedule of `train` (entity ids `< num_entities`) for `workers` workers.
    pub fn new(train: &[Triple], num_entities: u32, workers: u32) -> Self {
        let workers = workers.max(1) as usize;
        let parts = 2 * workers;
        let mut degree = vec![0u64; num_entities as usize];
        for t in train {
            degree[t.s as usize] += 1;
            degree[t.o as usize] += 1;
        }
        let mut by_degree: Vec<u32> = (0..num_entities).collect();
        by_degree.sort_by_key(|&e| (std::cmp::Reverse(degree[e as usize]), e));
        let (mut load, mut size) = (vec![0u64; parts], vec![0usize; parts]);
        let mut part_of = vec![0u32; num_entities as usize];
        for e in by_degree {
            // Lightest by degree, then by entity count (isolated entities spread evenly too).
            let p = (0..parts)
                .min_by_key(|&p| (load[p], size[p], p))
                .unwrap_or(0);
            load[p] += degree[e as usize];
            size[p] += 1;
            part_of[e as usize] = p as u32;
        }
        let mut members = vec![Vec::new(); parts];
        for (e, &p) in part_of.iter().enumerate() {
            members[p as usize].push(e as u32);
        }
        let pairs = keep_one_part(round_robin(parts));
        let rounds = pairs.len();
        // Where each pair of parts meets: (round, worker).
        let mut meets = vec![(0usize, 0usize); parts * parts];
        for (r, round) in pairs.iter().enumerate() {
            for (w, &[a, b]) in round.iter().enumerate() {
                meets[a as usize * parts + b as usize] = (r, w);
                meets[b as usize * parts + a as usize] = (r, w);
            }
        }
        // A part's own triples go to its rounds in turn.
        let rounds_of: Vec<Vec<(usize, usize)>> = (0..parts)
            .map(|p| {
                (0..parts)
                    .filter(|&q| q != p)
                    .map(|q| meets[p * parts + q])
                    .collect()
            })
            .collect();
        let mut turn = vec![0usize; parts];
        let mut triples = vec![vec![Vec::new(); workers]; rounds];
        let mut relations = vec![vec![Vec::new(); workers]; rounds];
        for (i, t) in train.iter().enumerate() {
            let (a, b) = (
                part_of[t.s as usize] as usize,
                part_of[t.o as usize] as usize,
            );
            let (r, w) = if a != b {
                meets[a * parts + b]
            } else {
                let at = rounds_of[a][turn[a] % rounds_of[a].len()];
                turn[a] += 1;
                at
            };
            triples[r][w].push(i as u32);
            relations[r][w].push(t.r);
        }
        for round in &mut relations {
            for rels in round {
                rels.sort_unstable();
                rels.dedup();
            }
        }
        Self {
            members,
            part_of,
            pairs,
            triples,
            relations,
        }
    }

    /// Rounds per epoch.
    pub fn rounds(&self) -> usize {
        self.pairs.len()
    }

    /// The triples global worker `w` trains in an epoch, over all rounds.
    pub fn triples_of(&self, w: usize) -> usize {
        self.triples.iter().map(|round| round[w].len()).sum()
    }
}

impl Epoch<'_> {
    /// The epoch of global worker `gid` under the bucket schedule. How the parts move is
    /// [`PartMoves`]: under adapm, round `r` trains from clock `c` to `c + n` (`n` triples, one
    /// tick each), then a barrier and one more tick; its keys — the two parts and the round's
    /// relations — are wanted for exactly that range. Each round signals the next one's intent
    /// (the last one the next epoch's first, unless `last_epoch`; the run's first epoch — the
    /// first after a resume too — signals its own first round), so roam moves the parts while
    /// the rounds run. Under lapse and nups the worker localizes each round's parts after the
    /// barrier before it (every epoch starts with one, in `job.rs`), which is when their last
    /// user has pushed.
    ///
    /// Negatives are drawn uniformly from the entities held and the round's *pool*: as many
    /// entities again (× [`Hyper::bucket_pool`]) drawn uniformly from the other parts, pulled
    /// while the barrier before the round waits; their gradients are summed meanwhile and
    /// pushed every [`Hyper::bucket_pool_flush`] triples and when the round ends (one AdaGrad
    /// step per pooled key and push, where the key lives: the semantics of a replica under a
    /// stateful optimizer), and a pooled value is the one read at the round's start, at most
    /// one round old. Without a pool every
    /// negative of a triple comes from its own two parts, and its ranking against the rest is
    /// never trained: on the quick graph after 10 epochs at 4
    /// nodes the MRR was 0.158 (0.149–0.191) without and 0.213 (0.188–0.237) with a pool as
    /// large as the parts held (`docs/workloads-kge.md`, "Bucket schedule").
    #[allow(clippy::too_many_arguments)]
    pub fn run_buckets(
        &self,
        buckets: &Buckets,
        worker: &Worker,
        gid: u32,
        epoch: u32,
        (first_epoch, last_epoch): (bool, bool),
        step: &mut Step,
        mut tick: impl FnMut(u64),
    ) -> anyhow::Result<LossSum> {
        let (hyper, graph) = (&self.hyper, self.graph);
        let w = gid as usize;
        let per = 2 * hyper.neg_ratio;
        let entity_len = hyper.model.entity_len();
        let mut rng =
            SmallRng::seed_from_u64(mix(mix(hyper.seed, u64::from(gid)), u64::from(epoch)));
        let counters = worker.counters();
        let [sampled_before, fallbacks_before] = crate::sampling::worker_counts(&counters);
        let mut keys: Vec<Key> = Vec::new();
        // adapm: round r's intent, its two parts and its relations over its clock range.
        let mut signal = |r: usize, start: u64| -> anyhow::Result<()> {
            let n = buckets.triples[r][w].len() as u64;
            if n == 0 || self.part_moves != PartMoves::Intents {
                return Ok(());
            }
            keys.clear();
            for &p in &buckets.pairs[r][w] {
                keys.extend(buckets.members[p as usize].iter().map(|&e| u64::from(e)));
            }
            keys.extend(
                buckets.relations[r][w]
                    .iter()
                    .map(|&rel| relation_key(graph, rel)),
            );
            worker.intent(&keys, start, start + n)?;
            Ok(())
        };
        // lapse and nups: round r's parts are brought here once the barrier before it has
        // released them (their last user has pushed); the kept part is here already, which
        // `localize` skips. The relations are not localized: every worker uses them in every
        // round (nups replicates them; under lapse they are read where they are).
        let mut part_keys: Vec<Key> = Vec::new();
        let mut localize = |r: usize| -> anyhow::Result<Option<Ticket<'static>>> {
            if self.part_moves != PartMoves::Localize || buckets.triples[r][w].is_empty() {
                return Ok(None);
            }
            part_keys.clear();
            for &p in &buckets.pairs[r][w] {
                part_keys.extend(
                    buckets.members[p as usize]
                        .iter()
                        .map(|&e| u64::from(e))
                        .filter(|&k| !self.plan.is_replicated(k)),
                );
            }
            Ok(Some(worker.localize(&part_keys)?))
        };
        let mut start = worker.current_clock();
        if first_epoch {
            signal(0, start)?;
        }
        let moving = localize(0)?;
        let mut sum = LossSum::default();
        let mut drawn = 0u64;
        let mut pending: VecDeque<Ticket<'_>> = VecDeque::new();
        let mut candidates: Vec<Key> = Vec::new();
        let mut negatives: Vec<Key> = vec![0; per];
        let mut pool = Pool::default();
        let (mut pool_keys, mut incoming): (Vec<Key>, Vec<f32>) = (Vec::new(), Vec::new());
        let (mut flushed_keys, mut flushed_grads): (Vec<Key>, Vec<f32>) = (Vec::new(), Vec::new());
        // Pool gradients are pushed every `flush` triples (0: at the round's end only).
        let flush = hyper.bucket_pool_flush;
        // Round r's pool: `hyper.bucket_pool` × as many entities as it holds, from the others.
        let draw_pool = |r: usize, rng: &mut SmallRng, keys: &mut Vec<Key>| {
            keys.clear();
            let held = buckets.pairs[r][w];
            if buckets.triples[r][w].is_empty() || per == 0 {
                return;
            }
            let mine: usize = held
                .iter()
                .map(|&p| buckets.members[p as usize].len())
                .sum();
            let others = graph.num_entities as usize - mine;
            let size = ((mine as f64 * hyper.bucket_pool) as usize).min(others);
            // A uniform subset of the other parts' entities, without replacement (drawing with
            // replacement until `size` distinct ones is a coupon collector: quadratic when the
            // pool takes most of them, as the default does).
            let other: Vec<u32> = (0..graph.num_entities)
                .filter(|&e| !held.contains(&buckets.part_of[e as usize]))
                .collect();
            keys.extend(
                rand::seq::index::sample(rng, other.len(), size)
                    .into_iter()
                    .map(|i| u64::from(other[i])),
            );
            keys.sort_unstable();
        };
        draw_pool(0, &mut rng, &mut pool_keys);
        incoming.resize(pool_keys.len() * entity_len, 0.0);
        worker.pull(&pool_keys, &mut incoming)?.wait()?;
        moving.map(Ticket::wait).transpose()?;
        pool.install(&pool_keys, &incoming, entity_len);
        for r in 0..buckets.rounds() {
            let mut order = buckets.triples[r][w].clone();
            let next = start + order.len() as u64 + 1;
            if r + 1 < buckets.rounds() {
                signal(r + 1, next)?;
            } else if !last_epoch {
                signal(0, next)?;
            }
            order.shuffle(&mut rng);
            candidates.clear();
            for &p in &buckets.pairs[r][w] {
                candidates.extend(buckets.members[p as usize].iter().map(|&e| u64::from(e)));
            }
            candidates.extend_from_slice(&pool.keys);
            let mut trainer = Trainer {
                worker,
                hyper,
                graph,
                step: &mut *step,
                negatives: &mut negatives,
                sum: &mut sum,
                pending: &mut pending,
                drawn: &mut drawn,
                since_tick: 0,
            };
            for (i, &triple) in order.iter().enumerate() {
                trainer.train(triple, &candidates, &mut pool, &mut rng, &mut tick)?;
                if flush > 0 && (i + 1) % flush == 0 {
                    pool.take_aggregates(&mut flushed_keys, &mut flushed_grads);
                    if !flushed_keys.is_empty() {
                        let push = worker.push_gradient_sums(&flushed_keys, &flushed_grads)?;
                        trainer.pending.push_back(push);
                        retire_pushes(trainer.pending, hyper.pushes_in_flight)?;
                    }
                }
            }
            let since_tick = trainer.since_tick;
            tick(since_tick);
            pool.take_aggregates(&mut flushed_keys, &mut flushed_grads);
            if !flushed_keys.is_empty() {
                pending.push_back(worker.push_gradient_sums(&flushed_keys, &flushed_grads)?);
            }
            // The round's updates land before its parts go to their next users.
            retire_pushes(&mut pending, 0)?;
            if r + 1 < buckets.rounds() {
                // The next round's pool is read while the barrier waits (at the round's start
                // it stalled the clock, and the owners' deferrals expired: 6.2× single's CPU
                // at 4 nodes against 2.6×), a round stale at most; training on the held parts'
                // negatives until it arrived instead cost lapse-toy's MRR 0.40–0.44 against
                // 0.45–0.51 (4 runs each, 2 × 2 workers, 4 epochs).
                draw_pool(r + 1, &mut rng, &mut pool_keys);
                incoming.resize(pool_keys.len() * entity_len, 0.0);
                let arriving = worker.pull(&pool_keys, &mut incoming)?;
                worker.barrier()?;
                let moving = localize(r + 1)?;
                arriving.wait()?;
                moving.map(Ticket::wait).transpose()?;
                pool.install(&pool_keys, &incoming, entity_len);
            } else {
                worker.barrier()?;
            }
            worker.advance_clock();
            start = next;
        }
        let mut sum = end_epoch(pending, &counters, [sampled_before, fallbacks_before], sum)?;
        // Drawn by the app from the parts held and the pool (no sampler), counted as the
        // sampler's draws would be.
        sum.sampled += drawn;
        Ok(sum)
    }
}

/// What training one triple of a round needs (borrowed from the epoch).
struct Trainer<'a, 'w> {
    worker: &'w Worker,
    hyper: &'a Hyper,
    graph: &'a Graph,
    step: &'a mut Step,
    negatives: &'a mut Vec<Key>,
    sum: &'a mut LossSum,
    pending: &'a mut VecDeque<Ticket<'w>>,
    drawn: &'a mut u64,
    since_tick: u64,
}

impl Trainer<'_, '_> {
    /// Trains triple `triple` with negatives drawn uniformly from `candidates`.
    fn train(
        &mut self,
        triple: u32,
        candidates: &[Key],
        pool: &mut Pool,
        rng: &mut SmallRng,
        tick: &mut impl FnMut(u64),
    ) -> anyhow::Result<()> {
        for slot in self.negatives.iter_mut() {
            *slot = candidates[rng.random_range(0..candidates.len())];
        }
        *self.drawn += self.negatives.len() as u64;
        let t = self.graph.train[triple as usize];
        let push = self.step.run(
            self.worker,
            self.hyper,
            self.graph,
            t,
            Negatives::Pooled(self.negatives, pool),
            self.sum,
        )?;
        self.pending.push_back(push);
        retire_pushes(self.pending, self.hyper.pushes_in_flight)?;
        self.worker.advance_clock();
        self.since_tick += 1;
        if self.since_tick == 256 {
            tick(self.since_tick);
            self.since_tick = 0;
        }
        Ok(())
    }
}

/// Reassigns each round's pairs to workers so that every worker keeps one of its two parts
/// from the round before: only half the parts move at each boundary. Such an assignment
/// always exists: a worker can take the new pairs of its two parts, and each new pair can go
/// to the old holders of its two parts (no pair meets twice, so these are distinct), a
/// bipartite graph in which every vertex has degree 2 — even cycles, which have a perfect
/// matching. Found by augmenting paths (Kuhn's algorithm).
fn keep_one_part(mut rounds: Vec<Vec<[u32; 2]>>) -> Vec<Vec<[u32; 2]>> {
    for r in 1..rounds.len() {
        let (before, now) = rounds.split_at_mut(r);
        let old = &before[r - 1];
        let new = &now[0];
        let shares = |w: usize, p: usize| old[w].iter().any(|x| new[p].contains(x));
        let workers = old.len();
        // pair_of_worker[w] and worker_of_pair[p] of the matching.
        let mut worker_of_pair = vec![usize::MAX; workers];
        for w in 0..workers {
            let mut seen = vec![false; workers];
            let matched = augment(w, &shares, &mut seen, &mut worker_of_pair);
            debug_assert!(matched, "a perfect matching exists");
        }
        let mut assigned = vec![[0u32; 2]; workers];
        for (p, &w) in worker_of_pair.iter().enumerate() {
            if w == usize::MAX {
                // Unreachable by the argument above; keep the pair rather than lose it.
                continue;
            }
            let [a, b] = new[p];
            // The kept part first.
            assigned[w] = if old[w].contains(&a) { [a, b] } else { [b, a] };
        }
        if worker_of_pair.iter().all(|&w| w != usize::MAX) {
            now[0] = assigned;
        }
    }
    rounds
}

/// One augmenting-path step of Kuhn's matching from worker `w`.
fn augment(
    w: usize,
    shares: &impl Fn(usize, usize) -> bool,
    seen: &mut [bool],
    worker_of_pair: &mut [usize],
) -> bool {
    for p in 0..worker_of_pair.len() {
        if !seen[p] && shares(w, p) {
            seen[p] = true;
            if worker_of_pair[p] == usize::MAX
                || augment(worker_of_pair[p], shares, seen, worker_of_pair)
            {
                worker_of_pair[p] = w;
                return true;
            }
        }
    }
    false
}

/// The circle method: `parts` (even) teams, `parts − 1` rounds of `parts / 2` disjoint pairs,
/// every pair of distinct teams once.
fn round_robin(parts: usize) -> Vec<Vec<[u32; 2]>> {
    let fixed = parts - 1;
    (0..fixed)
        .map(|r| {
            let mut round = vec![[r as u32, fixed as u32]];
            for k in 1..parts / 2 {
                let a = (r + k) % fixed;
                let b = (r + fixed - k) % fixed;
                round.push([a as u32, b as u32]);
            }
            round
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn every_triple_once_and_no_part_held_twice_in_a_round() {
        let seed = 11;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let ne = 300;
        // Skewed entity degrees, as in real graphs.
        let mut entity = || ((rng.random::<f64>().powi(3)) * f64::from(ne)) as u32;
        let train: Vec<Triple> = (0..6_000)
            .map(|_| Triple::new(entity(), 0, entity()))
            .collect();
        for workers in [1u32, 2, 3, 4, 8] {
            let b = Buckets::new(&train, ne, workers);
            let parts = 2 * workers as usize;
            assert_eq!(b.rounds(), parts - 1);
            let part_of: Vec<usize> = {
                let mut p = vec![usize::MAX; ne as usize];
                for (i, m) in b.members.iter().enumerate() {
                    for &e in m {
                        assert_eq!(p[e as usize], usize::MAX, "entity {e} in two parts");
                        p[e as usize] = i;
                    }
                }
                assert!(p.iter().all(|&x| x != usize::MAX), "every entity in a part");
                p
            };
            let mut met = HashSet::new();
            let mut seen = vec![0u32; train.len()];
            for (r, round) in b.pairs.iter().enumerate() {
                let held: HashSet<u32> = round.iter().flatten().copied().collect();
                assert_eq!(
                    held.len(),
                    parts,
                    "round {r}: disjoint pairs over all parts"
                );
                for (w, &[x, y]) in round.iter().enumerate() {
                    assert!(met.insert((x.min(y), x.max(y))), "pair met twice");
                    for &i in &b.triples[r][w] {
                        seen[i as usize] += 1;
                        let t = train[i as usize];
                        let ends = [part_of[t.s as usize] as u32, part_of[t.o as usize] as u32];
                        assert!(
                            ends.iter().all(|p| *p == x || *p == y),
                            "triple {i} in round {r} of worker {w} reads a part it lacks"
                        );
                        assert!(b.relations[r][w].binary_search(&t.r).is_ok());
                    }
                }
            }
            assert_eq!(met.len(), parts * (parts - 1) / 2, "every pair meets");
            for r in 1..b.rounds() {
                for w in 0..workers as usize {
                    let kept = b.pairs[r][w]
                        .iter()
                        .filter(|p| b.pairs[r - 1][w].contains(p));
                    assert_eq!(kept.count(), 1, "worker {w} keeps one part into round {r}");
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "each triple exactly once");
            let total: usize = (0..workers as usize).map(|w| b.triples_of(w)).sum();
            assert_eq!(total, train.len());
            assert_eq!(b, Buckets::new(&train, ne, workers), "deterministic");
        }
    }

    #[test]
    fn parts_balance_degrees() {
        // A star: entity 0 in every triple, the rest once each.
        let train: Vec<Triple> = (1..=400).map(|e| Triple::new(0, 0, e)).collect();
        let b = Buckets::new(&train, 401, 2);
        let sizes: Vec<usize> = b.members.iter().map(Vec::len).collect();
        // The hub alone carries 400 of the 800 endpoint uses: its part gets no other entity
        // until the others are as heavy.
        let hub = b.members.iter().position(|m| m.contains(&0)).unwrap();
        assert!(sizes[hub] <= 2, "hub part {sizes:?}");
        assert!(sizes.iter().sum::<usize>() == 401);
    }
}
