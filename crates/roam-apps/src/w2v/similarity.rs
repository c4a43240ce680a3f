//! Standard word-vector benchmarks, scored exactly as gensim 4.4.0's `KeyedVectors` scores them
//! (`evaluate_word_pairs` and `evaluate_word_analogies` with their defaults), so roam's vectors
//! and gensim's can be compared number for number:
//!
//! - **word similarity** (WordSim-353, SimLex-999: `word1<TAB>word2<TAB>score` lines, `#`
//!   comments): Spearman's rank correlation (ties get average ranks, as `scipy.stats.spearmanr`)
//!   between the human scores and the cosine of the two words' input vectors, over the pairs
//!   whose words are both in the vocabulary; a pair of a word with itself counts (cosine 1);
//! - **analogies** (Mikolov's `questions-words.txt`: `: section` headers, then `a b c d` lines
//!   meaning a : b = c : d): 3CosAdd — the prediction is the vocabulary word, other than a, b
//!   and c, whose unit input vector has the largest dot product with `b̂ + ĉ − â` (hats: unit
//!   vectors) — and the accuracy over the questions whose four words are in the vocabulary
//!   (gensim's "Total accuracy"); also split into the semantic sections and the syntactic
//!   `gram*` ones.
//!
//! Words are matched case-insensitively as gensim does: every vocabulary word among the first
//! `restrict_vocab` (default 300 000, gensim's; the vocabulary is ordered by decreasing count)
//! is upper-cased, the most frequent one winning when two words collide; the benchmark's words
//! are upper-cased too. Out-of-vocabulary pairs and questions are left out and counted
//! (gensim's `dummy4unknown=False`).
//!
//! Cost: one dot product per vocabulary word and question (19 544 questions × 29 k words × 100
//! values on gcide, about 1–2 s of CPU); questions are cut into blocks (every vocabulary vector
//! is read once per block) and the blocks spread over the machine's cores.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use super::eval::{Embeddings, spearman};
use super::sgns::dot;

/// gensim's default `restrict_vocab` for both evaluations.
pub const RESTRICT_VOCAB: usize = 300_000;

/// The files of an `--eval-dir` (gensim's test data names): WordSim-353, SimLex-999, analogies.
pub const EVAL_FILES: [&str; 3] = ["wordsim353.tsv", "simlex999.txt", "questions-words.txt"];

/// Questions scored together: every vocabulary vector is read once per block.
const BLOCK: usize = 32;

/// Upper-cased word → vocabulary index, over the first `restrict` words (most frequent wins).
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    index: HashMap<String, u32>,
    /// Per vocabulary word below `restrict`: the index its upper-cased form maps to.
    canon: Vec<u32>,
}

impl Lookup {
    /// From the vocabulary's words in vocabulary order (decreasing count).
    pub fn new<S: AsRef<str>>(words: &[S], restrict: usize) -> Self {
        let n = words.len().min(restrict);
        let mut index = HashMap::with_capacity(n);
        let mut canon = Vec::with_capacity(n);
        for (i, w) in words[..n].iter().enumerate() {
            let key = w.as_ref().to_uppercase();
            canon.push(*index.entry(key).or_insert(i as u32));
        }
        Self { index, canon }
    }

    /// The vocabulary index of `word` (any case), if it is among the first `restrict` words.
    pub fn get(&self, word: &str) -> Option<u32> {
        self.index.get(&word.to_uppercase()).copied()
    }

    /// Vocabulary words that can be predicted (the first `restrict`).
    pub fn len(&self) -> usize {
        self.canon.len()
    }

    /// Whether no word is searchable.
    pub fn is_empty(&self) -> bool {
        self.canon.is_empty()
    }
}

/// A word-similarity list (WordSim-353, SimLex-999), its pairs resolved to vocabulary indices.
#[derive(Clone, Debug, Default)]
pub struct SimilarityList {
    /// Covered pairs: both words in the vocabulary, with the human score.
    pub pairs: Vec<(u32, u32, f64)>,
    /// Pairs in the file.
    pub listed: usize,
}

impl SimilarityList {
    /// Reads a list (see [`SimilarityList::parse`]).
    pub fn read(path: &Path, lookup: &Lookup) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the word-similarity list {}", path.display()))?;
        Self::parse(&text, lookup)
            .with_context(|| format!("in the word-similarity list {}", path.display()))
    }

    /// Parses `word1<TAB>word2<TAB>score` lines; `#` comments and blank lines are skipped.
    pub fn parse(text: &str, lookup: &Lookup) -> anyhow::Result<Self> {
        let mut out = Self::default();
        for (no, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let [a, b, score] = fields[..] else {
                bail!(
                    "line {}: expected word1<TAB>word2<TAB>score, got {} tab-separated fields",
                    no + 1,
                    fields.len()
                );
            };
            let score: f64 = score
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite())
                .with_context(|| format!("line {}: score {score:?} is not a number", no + 1))?;
            let (a, b) = (a.trim(), b.trim());
            if a.is_empty() || b.is_empty() {
                bail!("line {}: empty word", no + 1);
            }
            out.listed += 1;
            if let (Some(x), Some(y)) = (lookup.get(a), lookup.get(b)) {
                out.pairs.push((x, y, score));
            }
        }
        if out.listed == 0 {
            bail!("the file lists no pairs");
        }
        Ok(out)
    }

    /// Spearman correlation of the human scores and the cosines (`None` with < 2 covered pairs
    /// or constant scores). The cosines are computed in `f64`: barely trained vectors can have
    /// cosines equal to 6 digits, whose order `f32` rounding would decide.
    pub fn spearman(&self, emb: &Embeddings) -> Option<f64> {
        let gold: Vec<f64> = self.pairs.iter().map(|p| p.2).collect();
        let model: Vec<f64> = self
            .pairs
            .iter()
            .map(|&(a, b, _)| cosine64(emb, a, b))
            .collect();
        spearman(&gold, &model)
    }
}

/// Cosine of the input vectors of `a` and `b`, in `f64` (0 for a zero vector).
fn cosine64(emb: &Embeddings, a: u32, b: u32) -> f64 {
    let row = |w: u32| &emb.syn0[w as usize * emb.dim..(w as usize + 1) * emb.dim];
    let (x, y) = (row(a), row(b));
    let d = |u: &[f32], v: &[f32]| {
        u.iter()
            .zip(v)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum::<f64>()
    };
    let n = (d(x, x) * d(y, y)).sqrt();
    if n > 0.0 { d(x, y) / n } else { 0.0 }
}

/// An analogy set (`questions-words.txt`), its questions resolved to vocabulary indices.
#[derive(Clone, Debug, Default)]
pub struct Analogies {
    /// Covered questions `a : b = c : d` as `[a, b, c, d]`.
    pub questions: Vec<[u32; 4]>,
    /// Per covered question: whether its section is syntactic (name starts with `gram`).
    pub syntactic: Vec<bool>,
    /// Questions in the file.
    pub listed: usize,
}

/// Accuracy of an analogy evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AnalogyScore {
    /// Correct predictions, all sections.
    pub correct: usize,
    /// Questions scored, all sections.
    pub total: usize,
    /// Correct predictions in the semantic sections.
    pub semantic_correct: usize,
    /// Questions scored in the semantic sections.
    pub semantic_total: usize,
}

impl AnalogyScore {
    fn ratio(a: usize, b: usize) -> Option<f64> {
        (b > 0).then(|| a as f64 / b as f64)
    }

    /// Overall accuracy (gensim's "Total accuracy").
    pub fn accuracy(&self) -> Option<f64> {
        Self::ratio(self.correct, self.total)
    }

    /// Accuracy on the semantic sections.
    pub fn semantic(&self) -> Option<f64> {
        Self::ratio(self.semantic_correct, self.semantic_total)
    }

    /// Accuracy on the syntactic (`gram*`) sections.
    pub fn syntactic(&self) -> Option<f64> {
        Self::ratio(
            self.correct - self.semantic_correct,
            self.total - self.semantic_total,
        )
    }
}

impl Analogies {
    /// Reads a set (see [`Analogies::parse`]).
    pub fn read(path: &Path, lookup: &Lookup) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the analogy set {}", path.display()))?;
        Self::parse(&text, lookup).with_context(|| format!("in the analogy set {}", path.display()))
    }

    /// Parses `: section` headers and `a b c d` question lines (blank lines skipped).
    pub fn parse(text: &str, lookup: &Lookup) -> anyhow::Result<Self> {
        let mut out = Self::default();
        let mut section: Option<bool> = None;
        for (no, line) in text.lines().enumerate() {
            if let Some(name) = line.strip_prefix(": ") {
                section = Some(name.trim().starts_with("gram"));
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let Some(syntactic) = section else {
                bail!(
                    "line {}: a question before the first `: section` line",
                    no + 1
                );
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            let [a, b, c, d] = words[..] else {
                bail!(
                    "line {}: expected four words `a b c d` (a : b = c : d), got {}",
                    no + 1,
                    words.len()
                );
            };
            out.listed += 1;
            if let (Some(a), Some(b), Some(c), Some(d)) =
                (lookup.get(a), lookup.get(b), lookup.get(c), lookup.get(d))
            {
                out.questions.push([a, b, c, d]);
                out.syntactic.push(syntactic);
            }
        }
        if out.listed == 0 {
            bail!("the file lists no questions");
        }
        Ok(out)
    }

    /// Answers every covered question by 3CosAdd over the first `lookup.len()` words, as
    /// gensim's `evaluate_word_analogies`: the 5 best words other than a, b and c (gensim's
    /// `most_similar(positive=[b, c], negative=[a], topn=5)`), of which the first whose
    /// upper-cased form is not that of a, b or c is the prediction.
    pub fn evaluate(&self, emb: &Embeddings, lookup: &Lookup) -> AnalogyScore {
        let (dim, rows) = (emb.dim, lookup.len());
        let unit = unit_rows(&emb.syn0[..rows * dim], dim);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(self.questions.len().div_ceil(BLOCK))
            .max(1);
        let per = self.questions.len().div_ceil(threads).max(1);
        let predictions: Vec<u32> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .questions
                .chunks(per)
                .map(|qs| {
                    let unit = &unit;
                    s.spawn(move || predict(qs, unit, dim, &lookup.canon))
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("an analogy thread panicked"))
                .collect()
        });
        let mut score = AnalogyScore::default();
        for ((q, &syntactic), &p) in self.questions.iter().zip(&self.syntactic).zip(&predictions) {
            let right = usize::from(p == q[3]);
            score.correct += right;
            score.total += 1;
            if !syntactic {
                score.semantic_correct += right;
                score.semantic_total += 1;
            }
        }
        score
    }
}

/// Rows of `m` scaled to unit length (zero rows stay zero).
fn unit_rows(m: &[f32], dim: usize) -> Vec<f32> {
    let mut out = m.to_vec();
    for row in out.chunks_exact_mut(dim.max(1)) {
        let n = dot(row, row).sqrt();
        if n > 0.0 {
            row.iter_mut().for_each(|x| *x /= n);
        }
    }
    out
}

/// gensim's prediction (a canonical vocabulary index, `u32::MAX` for none) per question.
fn predict(questions: &[[u32; 4]], unit: &[f32], dim: usize, canon: &[u32]) -> Vec<u32> {
    let rows = canon.len();
    // gensim asks for topn + len(all_keys) = 5 + 3 candidates, drops the input words, keeps 5.
    let k = 8usize.min(rows);
    let mut out = Vec::with_capacity(questions.len());
    let mut query = vec![0f32; BLOCK * dim];
    let mut best: Vec<Vec<(f32, u32)>> = (0..BLOCK).map(|_| Vec::with_capacity(k + 1)).collect();
    for block in questions.chunks(BLOCK) {
        for (qi, q) in block.iter().enumerate() {
            let v = |w: u32| &unit[w as usize * dim..(w as usize + 1) * dim];
            let (a, b, c) = (v(q[0]), v(q[1]), v(q[2]));
            let mean = &mut query[qi * dim..(qi + 1) * dim];
            for (i, m) in mean.iter_mut().enumerate() {
                *m = b[i] + c[i] - a[i];
            }
            let n = dot(mean, mean).sqrt();
            if n > 0.0 {
                mean.iter_mut().for_each(|x| *x /= n);
            }
            best[qi].clear();
        }
        for r in 0..rows {
            let row = &unit[r * dim..(r + 1) * dim];
            for (qi, top) in best.iter_mut().enumerate().take(block.len()) {
                let s = dot(row, &query[qi * dim..(qi + 1) * dim]);
                // Descending by score, earlier words first among equal scores.
                if top.len() < k || s > top[top.len() - 1].0 {
                    let at = top.partition_point(|&(t, _)| t >= s);
                    top.insert(at, (s, r as u32));
                    top.truncate(k);
                }
            }
        }
        for (q, top) in block.iter().zip(&best) {
            let inputs = [q[1], q[2], q[0]];
            let mut predicted = u32::MAX;
            for &(_, w) in top.iter().filter(|(_, w)| !inputs.contains(w)).take(5) {
                predicted = canon[w as usize];
                if !inputs.contains(&predicted) {
                    break;
                }
            }
            out.push(predicted);
        }
    }
    out
}

/// The benchmarks given on the command line, read against the vocabulary.
#[derive(Clone, Debug, Default)]
pub struct Benchmarks {
    lookup: Lookup,
    wordsim: Option<SimilarityList>,
    simlex: Option<SimilarityList>,
    analogies: Option<Analogies>,
}

impl Benchmarks {
    /// Reads whichever files are given; `words` is the vocabulary in vocabulary order.
    pub fn read<S: AsRef<str>>(
        words: &[S],
        restrict: usize,
        wordsim: Option<&Path>,
        simlex: Option<&Path>,
        analogies: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let lookup = Lookup::new(words, restrict);
        Ok(Self {
            wordsim: wordsim
                .map(|p| SimilarityList::read(p, &lookup))
                .transpose()?,
            simlex: simlex
                .map(|p| SimilarityList::read(p, &lookup))
                .transpose()?,
            analogies: analogies.map(|p| Analogies::read(p, &lookup)).transpose()?,
            lookup,
        })
    }

    /// Whether any benchmark is given.
    pub fn any(&self) -> bool {
        self.wordsim.is_some() || self.simlex.is_some() || self.analogies.is_some()
    }

    /// The metric to headline when no corpus-specific one applies: WordSim, else SimLex, else
    /// the analogies.
    pub fn headline(&self) -> Option<&'static str> {
        if self.wordsim.is_some() {
            Some("wordsim_spearman")
        } else if self.simlex.is_some() {
            Some("simlex_spearman")
        } else if self.analogies.is_some() {
            Some("analogy_accuracy")
        } else {
            None
        }
    }

    /// Coverage of each benchmark, for the report's settings.
    pub fn settings(&self) -> Map<String, Value> {
        let mut out = Map::new();
        if !self.any() {
            return out;
        }
        out.insert("restrict_vocab".into(), json!(self.lookup.len()));
        for (name, list) in [("wordsim", &self.wordsim), ("simlex", &self.simlex)] {
            if let Some(l) = list {
                out.insert(format!("{name}_pairs_covered"), json!(l.pairs.len()));
                out.insert(format!("{name}_pairs_listed"), json!(l.listed));
            }
        }
        if let Some(a) = &self.analogies {
            out.insert("analogy_questions_covered".into(), json!(a.questions.len()));
            out.insert("analogy_questions_listed".into(), json!(a.listed));
            let syn = a.syntactic.iter().filter(|&&s| s).count();
            out.insert(
                "analogy_questions_semantic".into(),
                json!(a.questions.len() - syn),
            );
        }
        out
    }

    /// The scores, as JSON fields of an epoch row (absent when undefined).
    pub fn evaluate(&self, emb: &Embeddings) -> Map<String, Value> {
        let mut out = Map::new();
        for (name, list) in [("wordsim", &self.wordsim), ("simlex", &self.simlex)] {
            if let Some(r) = list.as_ref().and_then(|l| l.spearman(emb)) {
                out.insert(format!("{name}_spearman"), json!(r));
            }
        }
        if let Some(a) = &self.analogies {
            let s = a.evaluate(emb, &self.lookup);
            for (name, v) in [
                ("analogy_accuracy", s.accuracy()),
                ("analogy_semantic", s.semantic()),
                ("analogy_syntactic", s.syntactic()),
            ] {
                if let Some(v) = v {
                    out.insert(name.into(), json!(v));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emb(rows: &[[f32; 2]]) -> Embeddings {
        Embeddings {
            dim: 2,
            syn0: rows.iter().flatten().copied().collect(),
            syn1: vec![0.0; rows.len() * 2],
        }
    }

    #[test]
    fn spearman_uses_average_ranks_for_ties() {
        // scipy.stats.spearmanr([1, 2, 2, 3, 4, 4, 4], [3, 1, 2, 2, 5, 4, 4]) = 0.7145774380937868
        // (x ranks 1, 2.5, 2.5, 4, 6, 6, 6; y ranks 4, 1, 2.5, 2.5, 7, 5.5, 5.5).
        let r = spearman(
            &[1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 4.0],
            &[3.0, 1.0, 2.0, 2.0, 5.0, 4.0, 4.0],
        )
        .unwrap();
        assert!((r - 0.714_577_438_093_786_8).abs() < 1e-12, "{r}");
        // Pearson on the average ranks, by hand.
        let (rx, ry) = (
            [1.0, 2.5, 2.5, 4.0, 6.0, 6.0, 6.0],
            [4.0, 1.0, 2.5, 2.5, 7.0, 5.5, 5.5],
        );
        let m = 4.0;
        let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - m) * (b - m)).sum();
        let var = |v: &[f64]| v.iter().map(|a| (a - m) * (a - m)).sum::<f64>();
        assert!((r - cov / (var(&rx) * var(&ry)).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn lookup_is_case_insensitive_and_the_most_frequent_variant_wins() {
        let l = Lookup::new(&["the", "Paris", "paris", "rare"], 3);
        assert_eq!(l.get("THE"), Some(0));
        assert_eq!(l.get("paris"), Some(1));
        assert_eq!(l.get("PaRiS"), Some(1));
        assert_eq!(l.get("rare"), None, "beyond restrict_vocab");
        assert_eq!(l.canon, vec![0, 1, 1]);
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn similarity_lists_are_scored_by_rank_correlation_with_coverage() {
        let words = ["cat", "dog", "car", "tiger"];
        let l = Lookup::new(&words, RESTRICT_VOCAB);
        let text = "# comment\nCat\tdog\t8\ncat\tcar\t1.5\n\ntiger\tcat\t9\ntiger\ttiger\t10\n\
                    cat\tunicorn\t5\n";
        let list = SimilarityList::parse(text, &l).unwrap();
        assert_eq!(list.listed, 5);
        assert_eq!(
            list.pairs.len(),
            4,
            "the pair with an unknown word is left out"
        );
        // cos(cat, dog) = 0.8, cos(cat, car) = 0, cos(tiger, cat) ≈ 0.99, (tiger, tiger) = 1:
        // the same order as the scores.
        let e = emb(&[[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [1.0, 0.1]]);
        assert!((list.spearman(&e).unwrap() - 1.0).abs() < 1e-12);
        for (bad, needle) in [
            ("a\tb\n", "line 1: expected"),
            ("a\tb\t1\nc d 3\n", "line 2: expected"),
            ("a\tb\tx\n", "line 1: score"),
            ("\tb\t1\n", "empty word"),
            ("# only\n", "no pairs"),
        ] {
            let err = SimilarityList::parse(bad, &l).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    /// A hand-made embedding (gender and royalty directions); the expected answers are
    /// gensim 4.4.0's `evaluate_word_analogies` on the same vectors and file (3 of 5 right:
    /// `king queen man` gives girl, cosine 0.946 against woman's 0.927, and `man king woman`
    /// gives queen, not apple; with `restrict_vocab=4`, 3 of 3).
    #[test]
    fn analogies_are_answered_by_3cosadd_excluding_the_question_words() {
        let words = ["man", "woman", "king", "queen", "boy", "girl", "apple"];
        let e = Embeddings {
            dim: 3,
            syn0: vec![
                1.0, 0.0, 0.1, // man
                0.0, 1.0, 0.1, // woman
                1.0, 0.0, 1.0, // king
                0.0, 1.0, 1.0, // queen
                0.9, 0.1, 0.3, // boy
                0.1, 0.9, 0.3, // girl
                -1.0, -1.0, 0.2, // apple
            ],
            syn1: vec![0.0; 21],
        };
        let l = Lookup::new(&words, RESTRICT_VOCAB);
        let text = ": family\nman woman king queen\nMAN WOMAN BOY GIRL\nking queen man woman\n\
                    man woman king unicorn\n: gram-test\nwoman man queen king\n\
                    man king woman apple\n";
        let set = Analogies::parse(text, &l).unwrap();
        assert_eq!((set.listed, set.questions.len()), (6, 5));
        let s = set.evaluate(&e, &l);
        assert_eq!((s.correct, s.total), (3, 5), "{s:?}");
        assert_eq!((s.semantic_correct, s.semantic_total), (2, 3));
        assert_eq!(s.syntactic(), Some(0.5));
        let q = predict(&[[2, 3, 0, 1]], &unit_rows(&e.syn0, 3), 3, &l.canon);
        assert_eq!(q, vec![5], "king : queen = man : girl");
        // Restricting the vocabulary drops questions whose words fall outside it.
        let small = Lookup::new(&words, 4);
        let set = Analogies::parse(text, &small).unwrap();
        assert_eq!(set.questions.len(), 3);
        assert_eq!(set.evaluate(&e, &small).correct, 3);
        for (bad, needle) in [
            ("man woman king queen\n", "before the first"),
            (": s\nman woman king\n", "line 2: expected four words"),
            (": s\n", "no questions"),
        ] {
            let err = Analogies::parse(bad, &l).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn blocks_and_threads_give_the_same_predictions_as_one_by_one() {
        use rand::{Rng, SeedableRng, rngs::SmallRng};
        let seed = 4;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let (v, dim) = (300, 7);
        let words: Vec<String> = (0..v).map(|i| format!("w{i}")).collect();
        let e = Embeddings {
            dim,
            syn0: (0..v * dim).map(|_| rng.random::<f32>() - 0.5).collect(),
            syn1: vec![],
        };
        let l = Lookup::new(&words, RESTRICT_VOCAB);
        let mut text = String::from(": s\n");
        let mut qs = Vec::new();
        for _ in 0..100 {
            let q: [u32; 4] = std::array::from_fn(|_| rng.random_range(0..v as u32));
            text.push_str(&format!("w{} w{} w{} w{}\n", q[0], q[1], q[2], q[3]));
            qs.push(q);
        }
        let set = Analogies::parse(&text, &l).unwrap();
        let unit = unit_rows(&e.syn0, dim);
        let together = predict(&qs, &unit, dim, &l.canon);
        for (q, &p) in qs.iter().zip(&together) {
            // Brute force: the best word that is not an input.
            let mean: Vec<f32> = (0..dim)
                .map(|i| {
                    let u = |w: u32| unit[w as usize * dim + i];
                    u(q[1]) + u(q[2]) - u(q[0])
                })
                .collect();
            let best = (0..v as u32)
                .filter(|w| ![q[0], q[1], q[2]].contains(w))
                .max_by(|&x, &y| {
                    let s = |w: u32| dot(&unit[w as usize * dim..][..dim], &mean);
                    s(x).total_cmp(&s(y)).then(y.cmp(&x))
                })
                .unwrap();
            assert_eq!(p, best, "{q:?}");
        }
        let right = qs
            .iter()
            .zip(&together)
            .filter(|(q, p)| q[3] == **p)
            .count();
        assert_eq!(set.evaluate(&e, &l).correct, right);
    }
}
