//! Which word vectors the NuPS modes replicate (`--mode nups`, `nups-replicate-only`).
//!
//! NuPS's word2vec (`determine_hotspot_keys` in its `apps/word2vec.cc`) ranks *keys*, not words,
//! by their expected share of accesses, from the word counts alone:
//! - input vector (syn0) of word `a`: `cn(a) / Σ cn` — it is read once per pair in which `a`
//!   is the context;
//! - output vector (syn1neg): `negative · cn(a)^p / Σ cn^p + cn(a) / Σ cn` — it is the
//!   positive target once per pair in which `a` is the center, and each pair draws `negative`
//!   negatives from `cn^p` (`p = --neg-power`).
//!
//! So a mid-frequency word's output vector, drawn as a negative by nearly every batch of every
//! worker, is hot while its input vector is not. Here the same shares are kept as integer
//! expected accesses per epoch, scaled by `Σ cn` (syn0: `cn`, syn1neg:
//! `cn + round(negative · Σcn · cn^p / Σcn^p)`), and handed to [`roam::choose`]:
//! [`roam::choose::above_mean`] over the `2·V` word keys (NuPS's untuned heuristic, `alpha` 1:
//! a key at least as hot as the mean key) or [`roam::choose::top_n`] (NuPS's `replicate N`,
//! a number of keys). Subsampling is ignored, as in NuPS.
//!
//! Invariant: the choice depends only on the vocabulary (counts, in vocabulary order), the key
//! map and the options, which every node derives identically from the same corpus and seed —
//! so every node is given the same set, as replication requires. The job checks it: every node
//! adds [`fingerprint`] of its set into the first epoch's cluster sums.

use std::time::Duration;

use roam::choose;
use roam::{Key, NodeStats};

use crate::replication;
use serde_json::{Value, json};

use super::vocab::KeyMap;

/// How the replicated keys are picked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Chooser {
    /// Keys with at least `alpha` times the mean expected accesses over all word keys.
    AboveMean(f64),
    /// The `n` keys with the most expected accesses.
    Top(usize),
}

/// The replicated keys, with per-word flags for the training loop's hot path.
#[derive(Clone, Debug, Default)]
pub struct Replicated {
    /// The keys, ascending.
    pub keys: Vec<Key>,
    /// Whether word `w`'s input vector is replicated (empty: nothing is).
    syn0: Vec<bool>,
    /// Whether word `w`'s output vector is replicated (empty: nothing is).
    syn1: Vec<bool>,
    /// Expected accesses of the replicated keys over those of all word keys.
    pub access_fraction: f64,
    /// Training occurrences of words with at least one replicated vector, over all.
    pub occurrence_fraction: f64,
}

/// Expected accesses per epoch of each word's input and output vector (see the module).
pub fn expected_accesses(counts: &[u64], negative: u32, power: f64) -> (Vec<u64>, Vec<u64>) {
    let total: u64 = counts.iter().sum();
    let weights: Vec<f64> = counts.iter().map(|&c| (c as f64).powf(power)).collect();
    let total_pow: f64 = weights.iter().sum();
    let syn1 = counts
        .iter()
        .zip(&weights)
        .map(|(&c, &wt)| {
            let negatives = if total_pow > 0.0 {
                f64::from(negative) * total as f64 * wt / total_pow
            } else {
                0.0
            };
            c + negatives.round() as u64
        })
        .collect();
    (counts.to_vec(), syn1)
}

impl Replicated {
    /// Nothing replicated.
    pub fn none() -> Self {
        Self::default()
    }

    /// Picks the keys of the vocabulary with `counts` (vocabulary order) under `keys`.
    pub fn choose(
        counts: &[u64],
        keys: &KeyMap,
        negative: u32,
        power: f64,
        chooser: Chooser,
    ) -> Self {
        let (a0, a1) = expected_accesses(counts, negative, power);
        let words = counts.len() as u32;
        let all = (0..words).flat_map(|w| {
            [
                (keys.syn0(w), a0[w as usize]),
                (keys.syn1(w), a1[w as usize]),
            ]
        });
        let chosen = match chooser {
            Chooser::AboveMean(alpha) => choose::above_mean(all, keys.num_keys(), alpha),
            Chooser::Top(n) => choose::top_n(all, n),
        };
        let mut syn0 = vec![false; counts.len()];
        let mut syn1 = vec![false; counts.len()];
        for &k in &chosen {
            let (w, output) = keys.word_of_key(k);
            if output {
                syn1[w as usize] = true;
            } else {
                syn0[w as usize] = true;
            }
        }
        let sum = |v: &[u64], pick: &[bool]| -> u64 {
            v.iter().zip(pick).filter(|p| *p.1).map(|p| *p.0).sum()
        };
        let accesses: u64 = a0.iter().chain(&a1).sum();
        let replicated = sum(&a0, &syn0) + sum(&a1, &syn1);
        let either: Vec<bool> = syn0.iter().zip(&syn1).map(|(a, b)| *a || *b).collect();
        let occurrences: u64 = counts.iter().sum();
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Self {
            access_fraction: ratio(replicated, accesses),
            occurrence_fraction: ratio(sum(counts, &either), occurrences),
            keys: chosen,
            syn0,
            syn1,
        }
    }

    /// Whether word `w`'s input vector is replicated.
    #[inline]
    pub fn syn0(&self, w: u32) -> bool {
        self.syn0.get(w as usize).copied().unwrap_or(false)
    }

    /// Whether word `w`'s output vector is replicated.
    #[inline]
    pub fn syn1(&self, w: u32) -> bool {
        self.syn1.get(w as usize).copied().unwrap_or(false)
    }

    /// Words with at least one replicated vector.
    pub fn words(&self) -> usize {
        self.syn0
            .iter()
            .zip(&self.syn1)
            .filter(|(a, b)| **a || **b)
            .count()
    }

    /// Replicated input vectors.
    pub fn syn0_keys(&self) -> usize {
        self.syn0.iter().filter(|x| **x).count()
    }

    /// Replicated output vectors.
    pub fn syn1_keys(&self) -> usize {
        self.syn1.iter().filter(|x| **x).count()
    }
}

pub use crate::replication::fingerprint;

/// Replication counters every node adds to each epoch's cluster sums: the set's
/// [`fingerprint`], then the shared [`crate::replication::COUNTERS`].
pub const COUNTERS: usize = 1 + replication::COUNTERS;

/// This node's [`COUNTERS`].
pub fn node_counters(keys: &[Key], stats: &NodeStats) -> [u64; COUNTERS] {
    let mut counters = [0; COUNTERS];
    counters[0] = fingerprint(keys);
    counters[1..].copy_from_slice(&replication::node_counters(stats));
    counters
}

/// The `replication` object of the report's settings, from the choice and the last epoch's
/// cluster sums of [`node_counters`] over `nodes` nodes.
pub fn report(
    r: &Replicated,
    chooser: Chooser,
    sync_every: Duration,
    sums: &[u64],
    nodes: u32,
) -> Value {
    let (alpha, top) = match chooser {
        Chooser::AboveMean(alpha) => (alpha, None),
        Chooser::Top(n) => (0.0, Some(n)),
    };
    let mut report = json!({
        "replicated_keys": r.keys.len(),
        "words": r.words(),
        "syn0_keys": r.syn0_keys(),
        "syn1_keys": r.syn1_keys(),
        "occurrence_fraction": r.occurrence_fraction,
        "access_fraction": r.access_fraction,
    });
    let object = report.as_object_mut().expect("an object");
    object.extend(replication::chooser_figures(alpha, top, sync_every));
    object.extend(replication::sync_figures(&sums[1..], nodes));
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_accesses_follow_nups_shares() {
        // counts 8, 1 (total 9), power 0.5: weights 2.83, 1 (sum 3.83); 2 negatives.
        let (a0, a1) = expected_accesses(&[8, 1], 2, 0.5);
        assert_eq!(a0, vec![8, 1]);
        let w = [8f64.sqrt(), 1.0];
        let z = w[0] + w[1];
        assert_eq!(a1[0], 8 + (2.0 * 9.0 * w[0] / z).round() as u64);
        assert_eq!(a1[1], 1 + (2.0 * 9.0 * w[1] / z).round() as u64);
    }

    #[test]
    fn the_heuristic_prefers_output_vectors_and_is_the_same_on_every_node() {
        // Zipf-like counts over 200 words.
        let counts: Vec<u64> = (1..=200u64).map(|r| 100_000 / r).collect();
        let keys = KeyMap::new(counts.len(), 9, true);
        let r = Replicated::choose(&counts, &keys, 5, 0.75, Chooser::AboveMean(1.0));
        assert!(!r.keys.is_empty());
        assert!(r.syn1_keys() > r.syn0_keys(), "{r:?}");
        // Frequent words first: the replicated input vectors are a prefix of the vocabulary.
        let n0 = r.syn0_keys() as u32;
        assert!((0..n0).all(|w| r.syn0(w)) && !r.syn0(n0));
        assert!(r.syn0(0) && r.syn1(0) && !r.syn0(199) && !r.syn1(199));
        assert_eq!(
            r.words(),
            r.syn1_keys(),
            "every hot input vector's word is hot"
        );
        assert_eq!(r.keys.len(), r.syn0_keys() + r.syn1_keys());
        assert!(r.access_fraction > 0.5 && r.access_fraction < 1.0, "{r:?}");
        assert!(
            r.occurrence_fraction > 0.0 && r.occurrence_fraction < 1.0,
            "{r:?}"
        );
        // Deterministic: the same inputs give the same keys (what makes the sets agree).
        let again = Replicated::choose(&counts, &keys, 5, 0.75, Chooser::AboveMean(1.0));
        assert_eq!(again.keys, r.keys);
        // A higher alpha replicates fewer keys; top-N takes exactly N.
        let fewer = Replicated::choose(&counts, &keys, 5, 0.75, Chooser::AboveMean(4.0));
        assert!(fewer.keys.len() < r.keys.len());
        let top = Replicated::choose(&counts, &keys, 5, 0.75, Chooser::Top(3));
        assert_eq!(top.keys.len(), 3);
        assert!(top.syn1(0) && top.syn1(1) && top.syn1(2), "{top:?}");
        let none = Replicated::none();
        assert!(!none.syn0(0) && !none.syn1(0) && none.words() == 0);
    }

    /// What every node does before it starts (`w2v::run`): corpus, held-out split, vocabulary,
    /// key map, choice. Two nodes doing it independently must agree on the keys.
    fn chosen_as_a_node_would(raw: &super::super::corpus::RawCorpus) -> Vec<Key> {
        use super::super::vocab::Vocab;
        let split = raw.heldout_start(0.05).unwrap();
        let vocab = Vocab::build(&raw.tokens[..split], raw.names.len(), 5, |r| {
            raw.names[r as usize].clone()
        })
        .unwrap();
        let keys = KeyMap::new(vocab.len(), 1, true);
        Replicated::choose(&vocab.counts, &keys, 5, 0.75, Chooser::AboveMean(1.0)).keys
    }

    #[test]
    fn every_node_derives_the_same_set_from_the_same_corpus() {
        use super::super::corpus::RawCorpus;
        use super::super::synthetic::Spec;
        let spec: Spec = "words=60000,vocab=2000,topics=10,seed=4".parse().unwrap();
        let a = chosen_as_a_node_would(&spec.generate());
        assert!(!a.is_empty());
        assert_eq!(a, chosen_as_a_node_would(&spec.generate()));
        // A text file: raw ids are numbered by first appearance (not by hash order), and
        // equal counts are ordered by raw id, so the vocabulary order is the same everywhere.
        let text: String = (0..3000)
            .map(|i| format!("w{} w{} common w{}\n", i % 7, i % 31, (i * 7) % 101))
            .collect();
        let raw = RawCorpus::parse(text.as_bytes()).unwrap();
        let b = chosen_as_a_node_would(&raw);
        assert!(!b.is_empty());
        assert_eq!(
            b,
            chosen_as_a_node_would(&RawCorpus::parse(text.as_bytes()).unwrap())
        );
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&a[1..]));
        assert!(fingerprint(&a) < 1 << 32);
    }
}
