//! Quality metrics of trained word vectors, all computed on data the model did not train on.
//!
//! - `heldout_auc` (every corpus): (center, context) pairs within the window of the held-out
//!   tail of the corpus (subsampled once, with the training's keep probabilities, because the
//!   model is trained to separate subsampled contexts from negatives: without it, frequent
//!   words, which subsampling makes rare as training contexts, are true contexts in the
//!   held-out text and drag the AUC below 0.5) against pairs whose context is drawn from the
//!   unigram^0.75 distribution (the training negatives'); the score is the model's own
//!   `syn0[c]·syn1neg[o]`. AUC = probability that a true pair outscores a sampled one (ties
//!   count half). Untrained output vectors are zero, so every score ties and the AUC is 0.5.
//!   Because contexts follow the unigram distribution and negatives unigram^0.75, a model that
//!   only knew word frequencies would also beat 0.5: [`Evaluator::frequency_baseline`] reports
//!   that AUC so results can be read against it.
//! - `topic_auc` (synthetic corpora): same-topic word pairs against different-topic pairs,
//!   scored by the cosine of the input vectors.
//! - `pair_auc` (with `--pairs`): listed pairs (e.g. WordNet synonyms) against mismatched pairs
//!   (the first word of one listed pair with the second word of another), by cosine of the input
//!   vectors; `pair_spearman` when the list carries scores. `pair_auc_uniform` scores against
//!   pairs of uniformly drawn vocabulary words instead; it is reported but not the headline,
//!   because rare words (most of a vocabulary) get vectors dominated by the direction of the
//!   frequent context words, so random rare pairs have a high cosine and the uniform baseline
//!   mostly measures word frequency (on gcide it stays below 0.5 while pair_auc rises).
//!
//! - word-similarity Spearman and analogy accuracy on standard benchmarks (`--wordsim`,
//!   `--simlex`, `--analogies`), scored as gensim does: [`super::similarity`].
//!
//! Invariants: pair sets are drawn once, from a seed, before training, so every epoch and every
//! mode is scored on exactly the same pairs.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use serde_json::{Map, Value, json};

use super::corpus::Sentences;
use super::similarity::Benchmarks;
use super::vocab::{UnigramTable, Vocab};
use crate::common::{Stopwatch, micros_to_seconds, process_cpu_micros};

/// Area under the ROC curve of `pos` against `neg` scores (Mann–Whitney, ties count half).
/// `None` when either side is empty.
pub fn auc(pos: &[f32], neg: &[f32]) -> Option<f64> {
    if pos.is_empty() || neg.is_empty() {
        return None;
    }
    let mut all: Vec<(f32, bool)> = pos
        .iter()
        .map(|&s| (s, true))
        .chain(neg.iter().map(|&s| (s, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let ranks = average_ranks(&all.iter().map(|x| f64::from(x.0)).collect::<Vec<_>>());
    let rank_sum: f64 = all
        .iter()
        .zip(&ranks)
        .filter(|(x, _)| x.1)
        .map(|(_, r)| r)
        .sum();
    let (np, nn) = (pos.len() as f64, neg.len() as f64);
    Some((rank_sum - np * (np + 1.0) / 2.0) / (np * nn))
}

/// 1-based ranks of sorted `xs`, ties getting their average rank.
fn average_ranks(sorted: &[f64]) -> Vec<f64> {
    let mut ranks = vec![0.0; sorted.len()];
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[i] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        ranks[i..=j].fill(avg);
        i = j + 1;
    }
    ranks
}

/// Spearman's rank correlation of `x` and `y` (ties get average ranks). `None` if undefined.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    let rank = |v: &[f64]| {
        let mut order: Vec<usize> = (0..v.len()).collect();
        order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        let sorted: Vec<f64> = order.iter().map(|&i| v[i]).collect();
        let r = average_ranks(&sorted);
        let mut out = vec![0.0; v.len()];
        for (k, &i) in order.iter().enumerate() {
            out[i] = r[k];
        }
        out
    };
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let (rx, ry) = (rank(x), rank(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    (vx > 0.0 && vy > 0.0).then(|| cov / (vx * vy).sqrt())
}

/// All input and output vectors, gathered for evaluation (vocabulary order).
#[derive(Clone, Debug)]
pub struct Embeddings {
    /// Vector length.
    pub dim: usize,
    /// Input vectors, `V × dim`.
    pub syn0: Vec<f32>,
    /// Output vectors, `V × dim`.
    pub syn1: Vec<f32>,
}

impl Embeddings {
    fn row(m: &[f32], dim: usize, w: u32) -> &[f32] {
        &m[w as usize * dim..(w as usize + 1) * dim]
    }

    /// The model's score of context `o` around `c`: `syn0[c]·syn1neg[o]`.
    pub fn score(&self, c: u32, o: u32) -> f32 {
        dot(
            Self::row(&self.syn0, self.dim, c),
            Self::row(&self.syn1, self.dim, o),
        )
    }

    /// Cosine similarity of the input vectors of `a` and `b` (0 for a zero vector).
    pub fn cosine(&self, a: u32, b: u32) -> f32 {
        let (x, y) = (
            Self::row(&self.syn0, self.dim, a),
            Self::row(&self.syn0, self.dim, b),
        );
        let n = (dot(x, x) * dot(y, y)).sqrt();
        if n > 0.0 { dot(x, y) / n } else { 0.0 }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A word-pair list read from `--pairs`.
#[derive(Clone, Debug)]
pub struct PairList {
    /// Pairs whose words are both in the vocabulary, with their score if the file has one.
    pub pairs: Vec<(u32, u32, Option<f64>)>,
    /// Pairs in the file.
    pub listed: usize,
}

impl PairList {
    /// Reads `word1<TAB>word2[<TAB>score]` lines (blank lines and `#` comments skipped) and
    /// keeps the pairs covered by the vocabulary (`index` maps words to vocabulary indices).
    pub fn read(path: &Path, index: &HashMap<&str, u32>) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the pair list {}", path.display()))?;
        Self::parse(&text, index).with_context(|| format!("in the pair list {}", path.display()))
    }

    /// Parses the text of a pair list (see [`PairList::read`]).
    pub fn parse(text: &str, index: &HashMap<&str, u32>) -> anyhow::Result<Self> {
        let mut out = Self {
            pairs: Vec::new(),
            listed: 0,
        };
        for (no, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let score = match fields.len() {
                2 => None,
                3 => Some(
                    fields[2]
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite())
                        .with_context(|| {
                            format!("line {}: score {:?} is not a number", no + 1, fields[2])
                        })?,
                ),
                n => bail!(
                    "line {}: expected word1<TAB>word2[<TAB>score], got {n} tab-separated fields",
                    no + 1
                ),
            };
            let (a, b) = (fields[0].trim(), fields[1].trim());
            if a.is_empty() || b.is_empty() {
                bail!("line {}: empty word", no + 1);
            }
            out.listed += 1;
            if let (Some(&x), Some(&y)) = (index.get(a), index.get(b))
                && x != y
            {
                out.pairs.push((x, y, score));
            }
        }
        if out.listed == 0 {
            bail!("the file lists no pairs");
        }
        Ok(out)
    }
}

/// The fixed evaluation sets and the metrics over them.
#[derive(Clone, Debug, Default)]
pub struct Evaluator {
    heldout_pos: Vec<(u32, u32)>,
    heldout_neg: Vec<(u32, u32)>,
    topic_same: Vec<(u32, u32)>,
    topic_diff: Vec<(u32, u32)>,
    listed: Option<PairList>,
    random_pairs: Vec<(u32, u32)>,
    mismatched_pairs: Vec<(u32, u32)>,
    frequency_baseline: Option<f64>,
    benchmarks: Benchmarks,
    save: Option<(PathBuf, Vec<String>)>,
}

impl Evaluator {
    /// Draws the evaluation sets: up to `max_pairs` held-out pairs within `window` of `heldout`
    /// (subsampled with the training's keep probabilities `keep`),
    /// topic pairs if `topics` (per vocabulary word) is given, random pairs for `listed`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        vocab: &Vocab,
        heldout: &Sentences,
        keep: &[f32],
        window: usize,
        table: &UnigramTable,
        topics: Option<&[Option<u32>]>,
        listed: Option<PairList>,
        max_pairs: usize,
        seed: u64,
    ) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6576_616c);
        let mut pos = Vec::new();
        let mut words = Vec::new();
        for s in 0..heldout.len() {
            // Subsampled like the training text: the model learns to tell subsampled
            // contexts from unigram^0.75 draws, so that is the task it is scored on.
            words.clear();
            words.extend(heldout.get(s).iter().copied().filter(|&w| {
                let k = keep[w as usize];
                k >= 1.0 || rng.random::<f32>() < k
            }));
            for (i, &c) in words.iter().enumerate() {
                for (j, &o) in words
                    .iter()
                    .enumerate()
                    .take((i + window + 1).min(words.len()))
                    .skip(i.saturating_sub(window))
                {
                    if j != i {
                        pos.push((c, o));
                    }
                }
            }
        }
        sample_in_place(&mut pos, max_pairs, &mut rng);
        let neg: Vec<(u32, u32)> = pos
            .iter()
            .map(|&(c, _)| (c, table.sample(&mut rng)))
            .collect();
        let frequency_baseline = {
            let f = |pairs: &[(u32, u32)]| {
                pairs
                    .iter()
                    .map(|&(_, o)| vocab.counts[o as usize] as f32)
                    .collect::<Vec<_>>()
            };
            auc(&f(&pos), &f(&neg))
        };
        let (mut topic_same, mut topic_diff) = (Vec::new(), Vec::new());
        if let Some(topics) = topics {
            let topical: Vec<u32> = (0..vocab.len() as u32)
                .filter(|&w| topics[w as usize].is_some())
                .collect();
            let mut by_topic: HashMap<u32, Vec<u32>> = HashMap::new();
            for &w in &topical {
                by_topic
                    .entry(topics[w as usize].unwrap_or(0))
                    .or_default()
                    .push(w);
            }
            let groups: Vec<&Vec<u32>> = by_topic.values().filter(|g| g.len() >= 2).collect();
            let target = max_pairs.min(20_000);
            if !groups.is_empty() && by_topic.len() >= 2 {
                // Same-topic pairs: a random word, then a random other word of its topic.
                while topic_same.len() < target {
                    let a = topical[rng.random_range(0..topical.len())];
                    let g = &by_topic[&topics[a as usize].unwrap_or(0)];
                    let b = g[rng.random_range(0..g.len())];
                    if a != b {
                        topic_same.push((a, b));
                    }
                }
                while topic_diff.len() < target {
                    let (a, b) = (
                        topical[rng.random_range(0..topical.len())],
                        topical[rng.random_range(0..topical.len())],
                    );
                    if topics[a as usize] != topics[b as usize] {
                        topic_diff.push((a, b));
                    }
                }
            }
        }
        let (mut random_pairs, mut mismatched_pairs) = (Vec::new(), Vec::new());
        if let Some(list) = &listed
            && vocab.len() >= 2
            && list.pairs.len() >= 2
        {
            let n = list.pairs.len().max(10_000);
            while random_pairs.len() < n {
                let (a, b) = (
                    rng.random_range(0..vocab.len() as u32),
                    rng.random_range(0..vocab.len() as u32),
                );
                if a != b {
                    random_pairs.push((a, b));
                }
            }
            // The first word of one listed pair with the second word of another: the same
            // words, hence the same word frequencies, but (almost always) unrelated.
            let listed: HashSet<(u32, u32)> = list.pairs.iter().map(|&(a, b, _)| (a, b)).collect();
            let mut tries = 0;
            while mismatched_pairs.len() < n && tries < 100 * n {
                tries += 1;
                let (i, j) = (
                    rng.random_range(0..list.pairs.len()),
                    rng.random_range(0..list.pairs.len()),
                );
                let (a, b) = (list.pairs[i].0, list.pairs[j].1);
                if a != b && !listed.contains(&(a, b)) && !listed.contains(&(b, a)) {
                    mismatched_pairs.push((a, b));
                }
            }
        }
        Self {
            heldout_pos: pos,
            heldout_neg: neg,
            topic_same,
            topic_diff,
            listed,
            random_pairs,
            mismatched_pairs,
            frequency_baseline,
            benchmarks: Benchmarks::default(),
            save: None,
        }
    }

    /// Also writes the input vectors to `path` at every evaluation (the time it takes counts in
    /// `eval_seconds`), in word2vec's text format (`words` in vocabulary order), e.g. to score
    /// them with other tools.
    pub fn with_saved_vectors(mut self, path: PathBuf, words: Vec<String>) -> Self {
        self.save = Some((path, words));
        self
    }

    /// Also scores the standard benchmarks `b` (word similarity, analogies).
    pub fn with_benchmarks(mut self, b: Benchmarks) -> Self {
        self.benchmarks = b;
        self
    }

    /// The benchmarks' coverage, for the report's settings.
    pub fn benchmark_settings(&self) -> Map<String, Value> {
        self.benchmarks.settings()
    }

    /// Held-out pairs scored (0 when the held-out part is empty).
    pub fn heldout_pairs(&self) -> usize {
        self.heldout_pos.len()
    }

    /// The held-out AUC of a model that scores a pair by its context's frequency only.
    pub fn frequency_baseline(&self) -> Option<f64> {
        self.frequency_baseline
    }

    /// Listed pairs covered by the vocabulary, and listed in total.
    pub fn pair_coverage(&self) -> Option<(usize, usize)> {
        self.listed.as_ref().map(|l| (l.pairs.len(), l.listed))
    }

    /// The metrics that apply, as JSON fields (absent metrics are left out), and the time the
    /// evaluation took (`eval_seconds`, and `eval_cpu_seconds` of the whole process).
    pub fn evaluate(&self, emb: &Embeddings) -> Map<String, Value> {
        let (clock, cpu) = (Stopwatch::start(), process_cpu_micros());
        if let Some((path, words)) = &self.save
            && let Err(e) = save_vectors(path, words, emb)
        {
            // The path was checked to be writable at start: report, keep training.
            eprintln!("Error: writing the vectors to {}: {e:#}", path.display());
        }
        let mut out = self.metrics(emb);
        out.insert("eval_seconds".into(), json!(clock.seconds()));
        out.insert(
            "eval_cpu_seconds".into(),
            json!(micros_to_seconds(process_cpu_micros().saturating_sub(cpu))),
        );
        out
    }

    fn metrics(&self, emb: &Embeddings) -> Map<String, Value> {
        let mut out = Map::new();
        let score = |pairs: &[(u32, u32)]| {
            pairs
                .iter()
                .map(|&(c, o)| emb.score(c, o))
                .collect::<Vec<_>>()
        };
        if let Some(a) = auc(&score(&self.heldout_pos), &score(&self.heldout_neg)) {
            out.insert("heldout_auc".into(), json!(a));
        }
        let cos = |pairs: &[(u32, u32)]| {
            pairs
                .iter()
                .map(|&(a, b)| emb.cosine(a, b))
                .collect::<Vec<_>>()
        };
        if let Some(a) = auc(&cos(&self.topic_same), &cos(&self.topic_diff)) {
            out.insert("topic_auc".into(), json!(a));
        }
        if let Some(list) = &self.listed {
            let listed: Vec<(u32, u32)> = list.pairs.iter().map(|&(a, b, _)| (a, b)).collect();
            let sims = cos(&listed);
            if let Some(a) = auc(&sims, &cos(&self.mismatched_pairs)) {
                out.insert("pair_auc".into(), json!(a));
            }
            if let Some(a) = auc(&sims, &cos(&self.random_pairs)) {
                out.insert("pair_auc_uniform".into(), json!(a));
            }
            let scores: Option<Vec<f64>> = list.pairs.iter().map(|p| p.2).collect();
            if let Some(scores) = scores {
                let sims: Vec<f64> = sims.iter().map(|&s| f64::from(s)).collect();
                if let Some(r) = spearman(&scores, &sims) {
                    out.insert("pair_spearman".into(), json!(r));
                }
            }
        }
        out.extend(self.benchmarks.evaluate(emb));
        out
    }
}

/// Writes the input vectors in word2vec's text format: `V dim`, then `word v1 … vdim` per
/// word (each value printed so that it reads back to the same `f32`).
fn save_vectors(path: &Path, words: &[String], emb: &Embeddings) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "{} {}", words.len(), emb.dim)?;
    for (w, row) in words.iter().zip(emb.syn0.chunks_exact(emb.dim.max(1))) {
        write!(f, "{w}")?;
        for x in row {
            write!(f, " {x}")?;
        }
        writeln!(f)?;
    }
    f.flush()?;
    Ok(())
}

/// Keeps a uniform random subset of at most `n` items.
fn sample_in_place<T>(items: &mut Vec<T>, n: usize, rng: &mut impl Rng) {
    if items.len() <= n {
        return;
    }
    for i in 0..n {
        let j = rng.random_range(i..items.len());
        items.swap(i, j);
    }
    items.truncate(n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_auc(pos: &[f32], neg: &[f32]) -> f64 {
        let mut s = 0.0;
        for &p in pos {
            for &n in neg {
                s += if p > n {
                    1.0
                } else if p == n {
                    0.5
                } else {
                    0.0
                };
            }
        }
        s / (pos.len() * neg.len()) as f64
    }

    #[test]
    fn auc_matches_the_pairwise_definition() {
        let seed = 11;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        assert_eq!(auc(&[2.0, 3.0], &[0.0, 1.0]), Some(1.0));
        assert_eq!(auc(&[0.0], &[1.0, 2.0]), Some(0.0));
        assert_eq!(auc(&[1.0, 1.0], &[1.0]), Some(0.5));
        assert_eq!(auc(&[], &[1.0]), None);
        for _ in 0..50 {
            // Coarse values force many ties.
            let pos: Vec<f32> = (0..rng.random_range(1..40))
                .map(|_| rng.random_range(0..8) as f32)
                .collect();
            let neg: Vec<f32> = (0..rng.random_range(1..40))
                .map(|_| rng.random_range(0..6) as f32)
                .collect();
            assert!((auc(&pos, &neg).unwrap() - brute_auc(&pos, &neg)).abs() < 1e-12);
        }
    }

    #[test]
    fn spearman_of_monotone_and_reversed_orders() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!((spearman(&x, &[10.0, 20.0, 35.0, 100.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((spearman(&x, &[4.0, 3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(spearman(&x, &[1.0; 4]), None);
        // With ties: ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4).
        let r = spearman(&[1.0, 1.0, 2.0, 3.0], &x).unwrap();
        assert!((r - 0.9486832980505138).abs() < 1e-9, "{r}");
    }

    #[test]
    fn pair_lists_parse_and_report_bad_lines() {
        let index: HashMap<&str, u32> = [("car", 0), ("auto", 1), ("big", 2)].into_iter().collect();
        let l = PairList::parse("# synonyms\ncar\tauto\nbig\thuge\n\ncar\tcar\n", &index).unwrap();
        assert_eq!((l.pairs.clone(), l.listed), (vec![(0, 1, None)], 3));
        let l = PairList::parse("car\tauto\t8.5\n", &index).unwrap();
        assert_eq!(l.pairs, vec![(0, 1, Some(8.5))]);
        for (bad, needle) in [
            ("car auto\n", "line 1: expected"),
            ("car\tauto\n\tbig\n", "line 2: empty word"),
            ("car\tauto\thigh\n", "line 1: score"),
            ("# nothing\n", "no pairs"),
        ] {
            let err = PairList::parse(bad, &index).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn listed_pairs_beat_mismatched_ones_when_their_vectors_agree() {
        let vocab = Vocab::build(&(0..6).collect::<Vec<u32>>(), 6, 1, |r| r.to_string()).unwrap();
        // Pairs (0,1), (2,3), (4,5); each pair shares a direction, pairs are orthogonal.
        let list = PairList {
            pairs: vec![(0, 1, None), (2, 3, None), (4, 5, None)],
            listed: 3,
        };
        let empty = Sentences {
            words: vec![],
            starts: vec![0],
        };
        let table = UnigramTable::new(&vocab.counts, 0.75);
        let ev = Evaluator::new(
            &vocab,
            &empty,
            &[1.0; 6],
            2,
            &table,
            None,
            Some(list),
            100,
            3,
        );
        let dirs = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let syn0: Vec<f32> = (0..6).flat_map(|w| dirs[w / 2]).collect();
        let m = ev.evaluate(&Embeddings {
            dim: 3,
            syn0,
            syn1: vec![0.0; 18],
        });
        assert_eq!(m["pair_auc"], json!(1.0), "{m:?}");
        assert!(m["pair_auc_uniform"].as_f64().unwrap() > 0.7, "{m:?}");
        assert_eq!(ev.pair_coverage(), Some((3, 3)));
    }

    #[test]
    fn heldout_auc_is_half_for_zero_output_vectors_and_high_for_planted_ones() {
        let vocab = Vocab::build(&[0, 0, 0, 1, 1, 2, 3, 3], 4, 1, |r| r.to_string()).unwrap();
        // Held-out text alternates two pairs of words that always co-occur.
        let mut held = Sentences {
            words: Vec::new(),
            starts: vec![0],
        };
        for i in 0..200 {
            held.words.extend(if i % 2 == 0 { [0, 1] } else { [2, 3] });
            held.starts.push(held.words.len());
        }
        let table = UnigramTable::new(&vocab.counts, 0.75);
        let ev = Evaluator::new(&vocab, &held, &[1.0; 4], 2, &table, None, None, 1000, 1);
        assert_eq!(ev.heldout_pairs(), 400);
        let zero = Embeddings {
            dim: 2,
            syn0: vec![0.3; 8],
            syn1: vec![0.0; 8],
        };
        assert_eq!(ev.evaluate(&zero)["heldout_auc"], json!(0.5));
        // syn0·syn1 is 1 within {0,1} and within {2,3}, 0 across.
        let planted = Embeddings {
            dim: 2,
            syn0: vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0],
            syn1: vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0],
        };
        let a = ev.evaluate(&planted)["heldout_auc"].as_f64().unwrap();
        assert!(a > 0.7, "{a}");
    }

    #[test]
    fn topic_auc_separates_planted_topics() {
        let vocab = Vocab::build(&(0..8).collect::<Vec<u32>>(), 8, 1, |r| r.to_string()).unwrap();
        let topics: Vec<Option<u32>> = (0..8).map(|w| Some(w % 2)).collect();
        let ev = Evaluator::new(
            &vocab,
            &Sentences {
                words: vec![],
                starts: vec![0],
            },
            &[1.0; 8],
            2,
            &UnigramTable::new(&vocab.counts, 0.75),
            Some(&topics),
            None,
            500,
            2,
        );
        let syn0: Vec<f32> = (0..8)
            .flat_map(|w| if w % 2 == 0 { [1.0, 0.1] } else { [0.1, 1.0] })
            .collect();
        let emb = Embeddings {
            dim: 2,
            syn0,
            syn1: vec![0.0; 16],
        };
        let m = ev.evaluate(&emb);
        assert_eq!(m["topic_auc"], json!(1.0));
        assert!(!m.contains_key("heldout_auc"));
    }
}
