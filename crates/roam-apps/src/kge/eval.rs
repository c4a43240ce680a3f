//! Filtered link prediction: MRR and Hits@1/3/10.
//!
//! For each evaluated triple (s, r, o), the true tail is ranked among all entities for
//! (s, r, ?) and the true head among all entities for (?, r, o). "Filtered" (Bordes et al.
//! 2013): every other entity that forms a known true triple (in train, valid or test) is left
//! out of the ranking. Ties count half (rank = 1 + #better + #tied/2), so a degenerate model
//! that scores everything equally gets the random-guess rank rather than rank 1; a non-finite
//! true score gets the worst rank. Both directions are averaged into one MRR and Hits@k.
//!
//! Scoring all entities for one query is one dense matrix–vector product (the query vector
//! from [`Model::tail_query`] / [`Model::head_query`] against the packed entity embeddings),
//! spread over threads by triple.

use std::collections::HashMap;

use serde::Serialize;

use super::data::Triple;
use super::model::{Model, dot};

/// The known true tails of each (s, r) and heads of each (o, r).
#[derive(Clone, Debug, Default)]
pub struct Filter {
    tails: HashMap<(u32, u32), Vec<u32>>,
    heads: HashMap<(u32, u32), Vec<u32>>,
}

impl Filter {
    /// Indexes `triples` (duplicates are fine).
    pub fn new<'a>(triples: impl IntoIterator<Item = &'a Triple>) -> Self {
        let mut f = Self::default();
        for t in triples {
            f.tails.entry((t.s, t.r)).or_default().push(t.o);
            f.heads.entry((t.o, t.r)).or_default().push(t.s);
        }
        for list in f.tails.values_mut().chain(f.heads.values_mut()) {
            list.sort_unstable();
            list.dedup();
        }
        f
    }

    /// Known tails of (s, r, ?).
    pub fn tails(&self, s: u32, r: u32) -> &[u32] {
        self.tails.get(&(s, r)).map_or(&[], Vec::as_slice)
    }

    /// Known heads of (?, r, o).
    pub fn heads(&self, o: u32, r: u32) -> &[u32] {
        self.heads.get(&(o, r)).map_or(&[], Vec::as_slice)
    }
}

/// Filtered rank of candidate `target` given every candidate's score; `known` lists the
/// candidates to filter out (may include `target`, which is never filtered; no duplicates).
pub fn filtered_rank(scores: &[f32], target: u32, known: &[u32]) -> f64 {
    let truth = scores[target as usize];
    if !truth.is_finite() {
        return scores.len() as f64;
    }
    let (mut better, mut tied) = (0i64, 0i64);
    for &x in scores {
        better += i64::from(x > truth);
        tied += i64::from(x == truth);
    }
    tied -= 1; // the target itself
    for &k in known {
        if k != target {
            let x = scores[k as usize];
            better -= i64::from(x > truth);
            tied -= i64::from(x == truth);
        }
    }
    1.0 + better as f64 + tied as f64 / 2.0
}

/// Ranking quality over a set of triples (both directions).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Metrics {
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Fraction of ranks ≤ 1.
    pub hits_at_1: f64,
    /// Fraction of ranks ≤ 3.
    pub hits_at_3: f64,
    /// Fraction of ranks ≤ 10.
    pub hits_at_10: f64,
    /// MRR of tail prediction (s, r, ?) alone: Lapse's evaluator reports each direction.
    pub mrr_tail: f64,
    /// MRR of head prediction (?, r, o) alone.
    pub mrr_head: f64,
}

/// Sums of reciprocal ranks and hits, for combining threads.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    rr: f64,
    /// Reciprocal ranks of tail and of head predictions.
    rr_dir: [f64; 2],
    hits: [u64; 3],
    count: u64,
}

/// Index into [`Sums::rr_dir`].
const TAIL: usize = 0;
const HEAD: usize = 1;

impl Sums {
    fn add(&mut self, rank: f64, direction: usize) {
        self.rr += 1.0 / rank;
        self.rr_dir[direction] += 1.0 / rank;
        for (h, k) in self.hits.iter_mut().zip([1.0, 3.0, 10.0]) {
            *h += u64::from(rank <= k);
        }
        self.count += 1;
    }

    fn merge(mut self, o: Self) -> Self {
        self.rr += o.rr;
        self.rr_dir[TAIL] += o.rr_dir[TAIL];
        self.rr_dir[HEAD] += o.rr_dir[HEAD];
        for i in 0..3 {
            self.hits[i] += o.hits[i];
        }
        self.count += o.count;
        self
    }

    fn metrics(&self) -> Metrics {
        let n = self.count.max(1) as f64;
        Metrics {
            mrr: self.rr / n,
            hits_at_1: self.hits[0] as f64 / n,
            hits_at_3: self.hits[1] as f64 / n,
            hits_at_10: self.hits[2] as f64 / n,
            // Every triple adds one rank in each direction.
            mrr_tail: self.rr_dir[TAIL] / (n / 2.0).max(1.0),
            mrr_head: self.rr_dir[HEAD] / (n / 2.0).max(1.0),
        }
    }
}

/// Packed embeddings: entity `e` at `entities[e·E..(e+1)·E]`,
/// relation `r` at `relations[r·R..(r+1)·R]`.
#[derive(Clone, Debug)]
pub struct Embeddings {
    /// The model (gives E and R).
    pub model: Model,
    /// Entity embeddings, row-major.
    pub entities: Vec<f32>,
    /// Relation embeddings, row-major.
    pub relations: Vec<f32>,
}

impl Embeddings {
    fn entity(&self, e: u32) -> &[f32] {
        let n = self.model.entity_len();
        &self.entities[e as usize * n..(e as usize + 1) * n]
    }

    fn relation(&self, r: u32) -> &[f32] {
        let n = self.model.relation_len();
        &self.relations[r as usize * n..(r as usize + 1) * n]
    }

    fn num_entities(&self) -> usize {
        self.entities.len() / self.model.entity_len()
    }
}

/// Filtered MRR and Hits@k of `triples` (tail and head prediction averaged), on `threads`
/// threads.
pub fn evaluate(emb: &Embeddings, triples: &[Triple], filter: &Filter, threads: usize) -> Metrics {
    let threads = threads.clamp(1, triples.len().max(1));
    let sums = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || rank_share(emb, triples, filter, t, threads)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("ranking threads do not panic"))
            .fold(Sums::default(), Sums::merge)
    });
    sums.metrics()
}

fn rank_share(
    emb: &Embeddings,
    triples: &[Triple],
    filter: &Filter,
    share: usize,
    shares: usize,
) -> Sums {
    let n = emb.model.entity_len();
    let mut query = vec![0f32; n];
    let mut scores = vec![0f32; emb.num_entities()];
    let mut sums = Sums::default();
    for t in triples.iter().skip(share).step_by(shares) {
        let r = emb.relation(t.r);
        emb.model.tail_query(emb.entity(t.s), r, &mut query);
        score_all(&emb.entities, n, &query, &mut scores);
        sums.add(filtered_rank(&scores, t.o, filter.tails(t.s, t.r)), TAIL);
        emb.model.head_query(r, emb.entity(t.o), &mut query);
        score_all(&emb.entities, n, &query, &mut scores);
        sums.add(filtered_rank(&scores, t.s, filter.heads(t.o, t.r)), HEAD);
    }
    sums
}

fn score_all(entities: &[f32], n: usize, query: &[f32], scores: &mut [f32]) {
    for (s, e) in scores.iter_mut().zip(entities.chunks_exact(n)) {
        *s = dot(query, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::model::ModelKind;

    #[test]
    fn filtered_rank_of_a_hand_made_case() {
        // Candidates 0..6 scored; the target is 2 (score 0.5).
        let scores = [0.9, 0.1, 0.5, 0.7, 0.5, 0.8];
        // Raw: better are 0, 3, 5; one tie (4) counts half.
        assert_eq!(filtered_rank(&scores, 2, &[]), 4.5);
        // Filtering true answers 0 and 4 (and the target itself, which stays).
        assert_eq!(filtered_rank(&scores, 2, &[0, 2, 4]), 3.0);
        // Filtering a worse candidate changes nothing.
        assert_eq!(filtered_rank(&scores, 2, &[1]), 4.5);
        assert_eq!(filtered_rank(&scores, 0, &[]), 1.0);
        assert_eq!(filtered_rank(&[f32::NAN, 1.0, 2.0], 0, &[]), 3.0);
        // All equal: the middle rank, not 1.
        assert_eq!(filtered_rank(&[0.0; 5], 3, &[]), 3.0);
    }

    #[test]
    fn evaluate_averages_both_directions_with_the_filter() {
        // RESCAL with dim 1: score(s, r, o) = R·s·o; entity values 1, 2, 3, 4.
        let model = Model {
            kind: ModelKind::Rescal,
            dim: 1,
        };
        let emb = Embeddings {
            model,
            entities: vec![1.0, 2.0, 3.0, 4.0],
            relations: vec![1.0],
        };
        let test = [Triple::new(1, 0, 2)];
        // Unfiltered: tails by s·o = 2·(1,2,3,4): true 2 (score 6) beaten by 3 (8): rank 2.
        // Heads by s·3: true 1 (6) beaten by 2 (9) and 3 (12): rank 3.
        let m = evaluate(&emb, &test, &Filter::new(&test), 2);
        assert!((m.mrr - (0.5 + 1.0 / 3.0) / 2.0).abs() < 1e-12, "{m:?}");
        assert_eq!((m.hits_at_1, m.hits_at_3, m.hits_at_10), (0.0, 1.0, 1.0));
        assert!((m.mrr_tail - 0.5).abs() < 1e-12 && (m.mrr_head - 1.0 / 3.0).abs() < 1e-12);
        // Known (1, 0, 3) filters tail 3; known (3, 0, 2) filters head 3.
        let known = [
            Triple::new(1, 0, 2),
            Triple::new(1, 0, 3),
            Triple::new(3, 0, 2),
        ];
        let m = evaluate(&emb, &test, &Filter::new(&known), 1);
        assert!((m.mrr - (1.0 + 0.5) / 2.0).abs() < 1e-12, "{m:?}");
        assert_eq!(m.hits_at_1, 0.5);
        assert_eq!((m.mrr_tail, m.mrr_head), (1.0, 0.5));
    }
}
