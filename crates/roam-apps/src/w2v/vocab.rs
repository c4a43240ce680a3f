//! The vocabulary and everything derived from word counts: the `--min-count` cut, the
//! word → key mapping, word2vec's subsampling probabilities and the unigram^0.75 sampler.
//!
//! Invariants:
//! - Vocabulary indices are ordered by decreasing training count (ties by first appearance),
//!   so index 0 is the most frequent word; every kept word has `count >= min_count`.
//! - Word `w` owns exactly two keys, `2·slot(w)` (input vector, syn0) and `2·slot(w) + 1`
//!   (output vector, syn1neg), where `slot` is a seeded permutation of `0..V` (as Lapse
//!   shuffles words onto keys): frequent words are spread over the key range instead of
//!   all landing on the first node of a range partitioning.
//! - The negative sampler draws word `w` with probability exactly `count(w)^0.75 / Σ count^0.75`
//!   (Walker's alias method instead of word2vec's 1e8-entry table: same distribution, O(V)
//!   memory, O(1) per draw).

use anyhow::{bail, ensure};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng, rngs::SmallRng};
use roam::{Distribution, Key};

/// The kept words of the training text.
#[derive(Clone, Debug)]
pub struct Vocab {
    /// Training count of each word (vocabulary order: decreasing count).
    pub counts: Vec<u64>,
    /// The raw token id (corpus dictionary index) of each word.
    pub raw: Vec<u32>,
    /// Vocabulary index of each raw token id, `u32::MAX` when the token was cut.
    pub index_of_raw: Vec<u32>,
    /// Sum of the kept words' counts (word2vec's `train_words`).
    pub train_words: u64,
}

/// Marks a raw token that is not in the vocabulary.
pub const OOV: u32 = u32::MAX;

impl Vocab {
    /// Counts `tokens` (raw ids below `num_raw`) and keeps words seen at least `min_count`
    /// times. Errors when nothing survives the cut, naming the most frequent word.
    pub fn build(
        tokens: &[u32],
        num_raw: usize,
        min_count: u64,
        describe: impl Fn(u32) -> String,
    ) -> anyhow::Result<Self> {
        ensure!(min_count >= 1, "--min-count must be at least 1 (got 0)");
        let mut counts = vec![0u64; num_raw];
        for &t in tokens {
            counts[t as usize] += 1;
        }
        let mut kept: Vec<u32> = (0..num_raw as u32)
            .filter(|&r| counts[r as usize] >= min_count)
            .collect();
        if kept.is_empty() {
            let best =
                (0..num_raw as u32).max_by_key(|&r| (counts[r as usize], std::cmp::Reverse(r)));
            match best {
                None => bail!("the training text contains no words"),
                Some(r) => bail!(
                    "no word occurs at least --min-count {min_count} times in the training text \
                     ({} distinct words; the most frequent, {:?}, occurs {} times)",
                    num_raw,
                    describe(r),
                    counts[r as usize]
                ),
            }
        }
        // Raw ids are in order of first appearance, so a stable sort breaks ties by it.
        kept.sort_by_key(|&r| std::cmp::Reverse(counts[r as usize]));
        let mut index_of_raw = vec![OOV; num_raw];
        for (i, &r) in kept.iter().enumerate() {
            index_of_raw[r as usize] = i as u32;
        }
        let kept_counts: Vec<u64> = kept.iter().map(|&r| counts[r as usize]).collect();
        let train_words = kept_counts.iter().sum();
        Ok(Self {
            counts: kept_counts,
            raw: kept,
            index_of_raw,
            train_words,
        })
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether the vocabulary is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// word2vec's probability of keeping an occurrence of each word under subsampling with
    /// threshold `sample` (`0` disables it): `(sqrt(f/s) + 1)·s/f` for frequency `f`, capped at 1.
    pub fn keep_probabilities(&self, sample: f64) -> Vec<f32> {
        self.counts
            .iter()
            .map(|&c| keep_probability(c, self.train_words, sample))
            .collect()
    }
}

/// The subsampling keep probability of a word seen `count` times among `total` words.
pub fn keep_probability(count: u64, total: u64, sample: f64) -> f32 {
    if sample <= 0.0 || count == 0 {
        return 1.0;
    }
    let threshold = sample * total as f64;
    let ran = ((count as f64 / threshold).sqrt() + 1.0) * threshold / count as f64;
    ran.min(1.0) as f32
}

/// Where each word's two vectors live in the key space.
#[derive(Clone, Debug)]
pub struct KeyMap {
    slot: Vec<u32>,
    word_of_slot: Vec<u32>,
}

impl KeyMap {
    /// A seeded random assignment of `words` words to slots (`shuffle = false`: identity).
    pub fn new(words: usize, seed: u64, shuffle: bool) -> Self {
        let mut word_of_slot: Vec<u32> = (0..words as u32).collect();
        if shuffle {
            word_of_slot.shuffle(&mut SmallRng::seed_from_u64(seed ^ 0x6b65_795f_7065_726d));
        }
        let mut slot = vec![0u32; words];
        for (s, &w) in word_of_slot.iter().enumerate() {
            slot[w as usize] = s as u32;
        }
        Self { slot, word_of_slot }
    }

    /// Keys used by the vectors (`2·V`); reserved keys start here.
    pub fn num_keys(&self) -> u64 {
        2 * self.slot.len() as u64
    }

    /// The key of word `w`'s input vector (syn0).
    #[inline]
    pub fn syn0(&self, w: u32) -> Key {
        2 * u64::from(self.slot[w as usize])
    }

    /// The key of word `w`'s output vector (syn1neg).
    #[inline]
    pub fn syn1(&self, w: u32) -> Key {
        2 * u64::from(self.slot[w as usize]) + 1
    }

    /// The word whose vector `key` is, and whether it is the output vector.
    pub fn word_of_key(&self, key: Key) -> (u32, bool) {
        (self.word_of_slot[(key / 2) as usize], key % 2 == 1)
    }
}

/// Samples words with probability proportional to `count^power`: roam's weighted distribution
/// (Walker's alias method) over word indices, for the evaluator's negatives (training draws
/// through the node's sampler, over keys).
#[derive(Clone, Debug)]
pub struct UnigramTable {
    dist: Distribution,
}

impl UnigramTable {
    /// The sampler for `counts` raised to `power` (word2vec: 0.75). Needs a non-zero count.
    pub fn new(counts: &[u64], power: f64) -> Self {
        let weights: Vec<f64> = counts.iter().map(|&c| (c as f64).powf(power)).collect();
        Self::from_weights(&weights)
    }

    /// The sampler for arbitrary non-negative weights with a positive sum.
    pub fn from_weights(weights: &[f64]) -> Self {
        let dist = Distribution::weighted(0, 1, weights.to_vec())
            .unwrap_or_else(|e| panic!("a sampler needs a positive weight: {e}"));
        Self { dist }
    }

    /// Draws one word.
    #[inline]
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        self.dist.draw_position(rng) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab_of(tokens: &[u32], num_raw: usize, min_count: u64) -> anyhow::Result<Vocab> {
        Vocab::build(tokens, num_raw, min_count, |r| format!("w{r}"))
    }

    #[test]
    fn min_count_cuts_and_orders_by_decreasing_count() {
        // raw 0 ×2, raw 1 ×5, raw 2 ×1, raw 3 ×5 (tie with 1: first appearance wins).
        let tokens = [0, 1, 1, 2, 3, 1, 3, 3, 0, 1, 3, 1, 3];
        let v = vocab_of(&tokens, 4, 2).unwrap();
        assert_eq!(v.raw, vec![1, 3, 0]);
        assert_eq!(v.counts, vec![5, 5, 2]);
        assert_eq!(v.index_of_raw, vec![2, 0, OOV, 1]);
        assert_eq!(v.train_words, 12);
        let v = vocab_of(&tokens, 4, 5).unwrap();
        assert_eq!(v.raw, vec![1, 3]);
    }

    #[test]
    fn nothing_above_min_count_is_an_error_naming_the_best_word() {
        let err = vocab_of(&[0, 1, 1], 2, 3).unwrap_err().to_string();
        assert!(
            err.contains("--min-count 3") && err.contains("\"w1\"") && err.contains("2 times"),
            "{err}"
        );
        let err = vocab_of(&[], 0, 1).unwrap_err().to_string();
        assert!(err.contains("no words"), "{err}");
        assert!(vocab_of(&[0], 1, 0).is_err());
    }

    #[test]
    fn subsampling_follows_word2vecs_formula() {
        // f = count/total; keep = (sqrt(f/s) + 1)·s/f.
        let (s, total) = (1e-3, 1_000_000u64);
        for count in [1u64, 1000, 4000, 100_000] {
            let f = count as f64 / total as f64;
            let expected = (((f / s).sqrt() + 1.0) * s / f).min(1.0);
            assert!(
                (f64::from(keep_probability(count, total, s)) - expected).abs() < 1e-6,
                "count {count}"
            );
        }
        // At f = s the word is kept with probability 2·... capped at 1; well above it, rarely.
        assert_eq!(keep_probability(1000, total, s), 1.0);
        assert!((keep_probability(100_000, total, s) - 0.1100).abs() < 1e-3);
        assert_eq!(keep_probability(100_000, total, 0.0), 1.0);
    }

    #[test]
    fn unigram_table_matches_count_to_the_power() {
        let seed = 7;
        println!("seed {seed}");
        let counts = [1000u64, 100, 10, 1, 0, 5000];
        let table = UnigramTable::new(&counts, 0.75);
        let mut rng = SmallRng::seed_from_u64(seed);
        let n = 2_000_000;
        let mut hits = [0u64; 6];
        for _ in 0..n {
            hits[table.sample(&mut rng) as usize] += 1;
        }
        let z: f64 = counts.iter().map(|&c| (c as f64).powf(0.75)).sum();
        for (i, &c) in counts.iter().enumerate() {
            let p = (c as f64).powf(0.75) / z;
            let got = hits[i] as f64 / n as f64;
            // Five standard deviations of a binomial proportion.
            let tol = 5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1e-9;
            assert!((got - p).abs() <= tol, "word {i}: p {p}, got {got}");
        }
        assert_eq!(hits[4], 0, "a zero count is never drawn");
    }

    #[test]
    fn key_map_is_a_seeded_bijection_onto_two_keys_per_word() {
        let m = KeyMap::new(1000, 3, true);
        let mut seen = vec![false; 2000];
        for w in 0..1000u32 {
            for (k, out) in [(m.syn0(w), false), (m.syn1(w), true)] {
                assert!(!seen[k as usize]);
                seen[k as usize] = true;
                assert_eq!(m.word_of_key(k), (w, out));
            }
        }
        assert_ne!(
            (0..10).map(|w| m.syn0(w)).collect::<Vec<_>>(),
            (0..10).map(|w| 2 * w).collect::<Vec<_>>()
        );
        assert_eq!(KeyMap::new(1000, 3, true).syn0(17), m.syn0(17));
        assert_eq!(KeyMap::new(10, 3, false).syn1(4), 9);
    }
}
