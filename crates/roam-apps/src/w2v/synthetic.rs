//! The synthetic corpus: Zipf-distributed words with planted topics, for scale runs, tests and
//! the embedded default.
//!
//! Generative model (everything drawn from one seeded generator, so every node produces the
//! same corpus): the vocabulary has `vocab` words; the first `vocab/20` (at least one) are
//! *common* words shared by all topics, the others are split round-robin into `topics` topics.
//! Each sentence picks a topic uniformly and a length uniformly in `[L/2, 3L/2]`; each of its
//! words is a common word with probability `common`, else a topical word: with probability
//! `mix` of a uniformly random topic (noise that blurs the planted structure), otherwise of the
//! sentence's topic; within a group, words are Zipf-distributed with exponent `zipf`. Words of
//! one topic therefore tend to share contexts, and `topic_auc` measures whether the embeddings
//! recovered that.

use anyhow::{Context, bail, ensure};
use rand::{Rng, SeedableRng, rngs::SmallRng};

use super::corpus::RawCorpus;
use super::vocab::UnigramTable;

/// A parsed `--synthetic` specification.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Tokens in the corpus.
    pub words: usize,
    /// Distinct words.
    pub vocab: usize,
    /// Planted topics.
    pub topics: usize,
    /// Zipf exponent of word frequencies within a group.
    pub zipf: f64,
    /// Fraction of tokens that are common words.
    pub common: f64,
    /// Probability that a topical token comes from a random topic instead of the sentence's.
    pub mix: f64,
    /// Mean sentence length.
    pub sentence: usize,
    /// Generator seed.
    pub seed: u64,
}

/// The corpus used when neither `--data` nor `--synthetic` is given.
pub const EMBEDDED: &str = "words=300000,vocab=5000,topics=20,zipf=1.0,seed=1";

impl Default for Spec {
    fn default() -> Self {
        Self {
            words: 1_000_000,
            vocab: 10_000,
            topics: 20,
            zipf: 1.0,
            common: 0.25,
            mix: 0.2,
            sentence: 20,
            seed: 1,
        }
    }
}

impl std::str::FromStr for Spec {
    type Err = anyhow::Error;

    /// Parses `key=value,...` with keys words, vocab, topics, zipf, common, mix, sentence, seed
    /// (unset keys keep their defaults; `words` accepts `20e6`-style and `_` separators).
    fn from_str(text: &str) -> anyhow::Result<Self> {
        let mut spec = Self::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                bail!("--synthetic: expected key=value, got {item:?}");
            };
            let value = value.trim();
            let count = || -> anyhow::Result<usize> {
                let clean = value.replace('_', "");
                let n: f64 = clean
                    .parse()
                    .with_context(|| format!("--synthetic: {key}={value:?} is not a number"))?;
                ensure!(
                    n >= 0.0 && n.fract() == 0.0 && n < 1e12,
                    "--synthetic: {key}={value:?} is not a count"
                );
                Ok(n as usize)
            };
            let real = || -> anyhow::Result<f64> {
                let x: f64 = value
                    .parse()
                    .with_context(|| format!("--synthetic: {key}={value:?} is not a number"))?;
                ensure!(x.is_finite(), "--synthetic: {key}={value:?} is not finite");
                Ok(x)
            };
            match key.trim() {
                "words" => spec.words = count()?,
                "vocab" => spec.vocab = count()?,
                "topics" => spec.topics = count()?,
                "sentence" => spec.sentence = count()?,
                "seed" => spec.seed = count()? as u64,
                "zipf" => spec.zipf = real()?,
                "common" => spec.common = real()?,
                "mix" => spec.mix = real()?,
                other => bail!(
                    "--synthetic: unknown key {other:?} \
                     (expected words, vocab, topics, zipf, common, mix, sentence, seed)"
                ),
            }
        }
        ensure!(spec.words >= 1, "--synthetic: words must be at least 1");
        ensure!(spec.topics >= 1, "--synthetic: topics must be at least 1");
        ensure!(
            spec.sentence >= 2,
            "--synthetic: sentence must be at least 2"
        );
        ensure!(
            spec.zipf >= 0.0,
            "--synthetic: zipf must be non-negative, got {}",
            spec.zipf
        );
        ensure!(
            (0.0..1.0).contains(&spec.common),
            "--synthetic: common must be in [0, 1), got {}",
            spec.common
        );
        ensure!(
            (0.0..=1.0).contains(&spec.mix),
            "--synthetic: mix must be in [0, 1], got {}",
            spec.mix
        );
        ensure!(
            spec.vocab >= spec.common_words() + 2 * spec.topics,
            "--synthetic: vocab {} is too small for {} topics (needs at least {})",
            spec.vocab,
            spec.topics,
            spec.common_words() + 2 * spec.topics
        );
        ensure!(
            spec.vocab < u32::MAX as usize,
            "--synthetic: vocab {} is too large",
            spec.vocab
        );
        Ok(spec)
    }
}

impl Spec {
    /// Number of common words (raw ids `0..common_words`).
    pub fn common_words(&self) -> usize {
        (self.vocab / 20).max(1)
    }

    /// The planted topic of raw word `id` (`None` for a common word).
    pub fn topic_of(&self, id: usize) -> Option<u32> {
        let c = self.common_words();
        (id >= c).then(|| ((id - c) % self.topics) as u32)
    }

    /// Generates the corpus.
    pub fn generate(&self) -> RawCorpus {
        let c = self.common_words();
        let zipf = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|j| 1.0 / ((j + 1) as f64).powf(self.zipf))
                .collect()
        };
        let common = UnigramTable::from_weights(&zipf(c));
        let topic_words: Vec<Vec<u32>> = (0..self.topics)
            .map(|t| {
                (c + t..self.vocab)
                    .step_by(self.topics)
                    .map(|id| id as u32)
                    .collect()
            })
            .collect();
        let topic_tables: Vec<UnigramTable> = topic_words
            .iter()
            .map(|w| UnigramTable::from_weights(&zipf(w.len())))
            .collect();
        let mut rng = SmallRng::seed_from_u64(self.seed);
        let mut tokens = Vec::with_capacity(self.words);
        let mut line_starts = Vec::with_capacity(self.words / self.sentence + 1);
        let (lo, hi) = ((self.sentence / 2).max(1), self.sentence * 3 / 2);
        while tokens.len() < self.words {
            line_starts.push(tokens.len());
            let topic = rng.random_range(0..self.topics);
            let len = rng.random_range(lo..=hi).min(self.words - tokens.len());
            for _ in 0..len {
                let id = if rng.random::<f64>() < self.common {
                    common.sample(&mut rng)
                } else {
                    let t = if rng.random::<f64>() < self.mix {
                        rng.random_range(0..self.topics)
                    } else {
                        topic
                    };
                    topic_words[t][topic_tables[t].sample(&mut rng) as usize]
                };
                tokens.push(id);
            }
        }
        let names = (0..self.vocab)
            .map(|id| match self.topic_of(id) {
                None => format!("c{id}"),
                Some(t) => format!("t{t}w{}", (id - c) / self.topics),
            })
            .collect();
        let topics = Some((0..self.vocab).map(|id| self.topic_of(id)).collect());
        RawCorpus {
            tokens,
            line_starts,
            names,
            topics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs_and_rejects_bad_ones() {
        let s: Spec = "words=20e6,vocab=100_000,topics=50,zipf=1.0,seed=1"
            .parse()
            .unwrap();
        assert_eq!(
            (s.words, s.vocab, s.topics, s.seed),
            (20_000_000, 100_000, 50, 1)
        );
        assert_eq!(s.common, 0.25);
        for (bad, needle) in [
            ("words", "key=value"),
            ("colour=red", "unknown key"),
            ("words=many", "not a number"),
            ("words=1.5", "not a count"),
            ("vocab=10,topics=10", "too small"),
            ("common=1", "common"),
            ("zipf=-1", "zipf"),
            ("zipf=inf", "finite"),
            ("mix=1.5", "mix"),
        ] {
            let err = bad.parse::<Spec>().unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn generates_the_planted_structure() {
        let spec: Spec = "words=50000,vocab=400,topics=4,zipf=1.0,mix=0,seed=3"
            .parse()
            .unwrap();
        let c = spec.generate();
        assert_eq!(c.tokens.len(), 50_000);
        assert_eq!(c.names.len(), 400);
        assert_eq!(spec.generate().tokens, c.tokens, "seeded");
        let topics = c.topics.as_ref().unwrap();
        // Every sentence's topical words share one topic.
        let mut ends = c.line_starts[1..].to_vec();
        ends.push(c.tokens.len());
        let mut common = 0;
        for (&s, &e) in c.line_starts.iter().zip(&ends) {
            let mut seen = None;
            for &t in &c.tokens[s..e] {
                match topics[t as usize] {
                    None => common += 1,
                    Some(topic) => assert_eq!(*seen.get_or_insert(topic), topic),
                }
            }
        }
        let frac = f64::from(common) / 50_000.0;
        assert!((frac - 0.25).abs() < 0.02, "common fraction {frac}");
        // Zipf: the first common word is the most frequent token.
        let mut counts = vec![0; 400];
        for &t in &c.tokens {
            counts[t as usize] += 1;
        }
        assert_eq!(
            counts
                .iter()
                .enumerate()
                .max_by_key(|(_, n)| **n)
                .unwrap()
                .0,
            0
        );
    }
}
