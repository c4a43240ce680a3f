//! The skip-gram negative-sampling arithmetic, independent of where the vectors live.
//!
//! A sentence is first *planned* (subsampling, random window shrinks and the negatives it will
//! use are drawn up front), so a worker knows every key the sentence touches before training
//! it: that is what lets it localize the next sentence and pull a whole sentence at once.
//! Training then applies word2vec.c's per-pair updates, in word2vec.c's order, to local copies
//! of the vectors:
//!
//! ```text
//! for each position i (center word w), b = shrink[i]:
//!   for each context c within window - b of i:        (word2vec.c trains syn0[c] ...)
//!     h = syn0[c]; e = 0
//!     for target t in [w, negatives...] with label 1, 0...:   (... against syn1neg[t])
//!       g = (label - σ(h·syn1neg[t])) · alpha
//!       e += g · syn1neg[t];  syn1neg[t] += g · h
//!     syn0[c] += e
//! ```
//!
//! with word2vec.c's clipping (σ is 0 or 1 beyond |x| > 6) and its rule that a negative equal to
//! the center word is skipped. The loss of a pair is `-ln σ(h·v_w) − Σ ln σ(−h·v_n)` over the
//! negatives used.

use rand::Rng;

/// Scores beyond ±`MAX_EXP` saturate the sigmoid (word2vec.c).
pub const MAX_EXP: f32 = 6.0;
const TABLE: usize = 1000;

/// Tabulated σ and softplus on `[−MAX_EXP, MAX_EXP]` (word2vec.c's `expTable`).
#[derive(Clone, Debug)]
pub struct Sigmoid {
    sig: Vec<f32>,
    softplus: Vec<f32>,
}

impl Default for Sigmoid {
    fn default() -> Self {
        Self::new()
    }
}

impl Sigmoid {
    /// Builds the tables.
    pub fn new() -> Self {
        let x = |i: usize| (i as f64 / TABLE as f64 * 2.0 - 1.0) * f64::from(MAX_EXP);
        let sig = (0..=TABLE).map(|i| (1.0 / (1.0 + (-x(i)).exp())) as f32).collect();
        let softplus = (0..=TABLE).map(|i| x(i).exp().ln_1p() as f32).collect();
        Self { sig, softplus }
    }

    #[inline]
    fn index(f: f32) -> usize {
        ((f + MAX_EXP) * (TABLE as f32 / MAX_EXP / 2.0)) as usize
    }

    /// `label − σ(f)`, with σ saturated beyond ±[`MAX_EXP`] as word2vec.c does.
    #[inline]
    pub fn gradient(&self, f: f32, label: f32) -> f32 {
        if f > MAX_EXP {
            label - 1.0
        } else if f < -MAX_EXP {
            label
        } else {
            label - self.sig[Self::index(f)]
        }
    }

    /// `ln(1 + e^x)` (so the loss of a positive is `softplus(−f)`, of a negative `softplus(f)`).
    #[inline]
    pub fn softplus(&self, x: f32) -> f32 {
        if x > MAX_EXP {
            x + (-x).exp().ln_1p()
        } else if x < -MAX_EXP {
            x.exp().ln_1p()
        } else {
            self.softplus[Self::index(x)]
        }
    }
}

/// Hyper-parameters of the arithmetic.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Vector length.
    pub dim: usize,
    /// Maximal window (context words on each side).
    pub window: usize,
    /// Negatives per (center, context) pair.
    pub negative: usize,
}

/// A sentence with all its random choices made.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The words kept by subsampling.
    pub words: Vec<u32>,
    /// Per position, how much the window shrinks (`0..window`).
    pub shrink: Vec<u32>,
    /// The negatives, `negative` per pair, in training order.
    pub negatives: Vec<u32>,
    /// Words of the sentence before subsampling (what learning-rate decay counts).
    pub raw_words: usize,
}

impl Plan {
    /// Plans `sentence`: keeps each word with probability `keep[w]`, draws a window shrink per
    /// kept position and `negative` negatives per pair from `draw_negative`.
    pub fn make(
        &mut self,
        sentence: &[u32],
        keep: &[f32],
        p: Params,
        rng: &mut impl Rng,
        mut draw_negative: impl FnMut(&mut dyn rand::RngCore) -> u32,
    ) where
        for<'r> &'r mut dyn rand::RngCore: Rng,
    {
        self.words.clear();
        self.shrink.clear();
        self.negatives.clear();
        self.raw_words = sentence.len();
        for &w in sentence {
            let k = keep[w as usize];
            if k >= 1.0 || rng.random::<f32>() < k {
                self.words.push(w);
            }
        }
        let len = self.words.len();
        for i in 0..len {
            let b = rng.random_range(0..p.window as u32);
            self.shrink.push(b);
            let reach = p.window - b as usize;
            let contexts = (i + reach).min(len - 1) - i.saturating_sub(reach);
            for _ in 0..contexts * p.negative {
                self.negatives.push(draw_negative(rng));
            }
        }
    }
}

/// What training a sentence produced.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SentenceStats {
    /// Sum of the pairs' losses.
    pub loss: f64,
    /// (center, context) pairs trained.
    pub pairs: u64,
    /// Negatives trained against.
    pub negatives: u64,
    /// Planned negatives dropped because their vector was not available (only-local mode).
    pub skipped: u64,
}

impl std::ops::AddAssign for SentenceStats {
    fn add_assign(&mut self, o: Self) {
        self.loss += o.loss;
        self.pairs += o.pairs;
        self.negatives += o.negatives;
        self.skipped += o.skipped;
    }
}

/// Trains one planned sentence on local copies in `buf`: `syn0(w)` and `syn1(w)` give the
/// offset of a word's input and output vector in `buf`; `syn1` returns `None` for a negative
/// whose vector is unavailable, which is then skipped. `h` and `e` are scratch of `dim` values.
#[allow(clippy::too_many_arguments)]
pub fn train_sentence(
    plan: &Plan,
    p: Params,
    alpha: f32,
    sig: &Sigmoid,
    syn0: impl Fn(u32) -> usize,
    syn1: impl Fn(u32) -> Option<usize>,
    buf: &mut [f32],
    scratch: (&mut [f32], &mut [f32]),
) -> SentenceStats {
    let (h, e) = scratch;
    let dim = p.dim;
    let len = plan.words.len();
    let mut stats = SentenceStats::default();
    let mut next_negative = 0;
    for (i, &word) in plan.words.iter().enumerate() {
        let reach = p.window - plan.shrink[i] as usize;
        let center_out = syn1(word).expect("a sentence word's output vector is always present");
        for c in i.saturating_sub(reach)..=(i + reach).min(len - 1) {
            if c == i {
                continue;
            }
            let l1 = syn0(plan.words[c]);
            h.copy_from_slice(&buf[l1..l1 + dim]);
            e.fill(0.0);
            let mut loss = 0f32;
            let mut update = |l2: usize, label: f32, buf: &mut [f32]| {
                let v = &mut buf[l2..l2 + dim];
                let f: f32 = h.iter().zip(v.iter()).map(|(a, b)| a * b).sum();
                loss += sig.softplus(if label > 0.0 { -f } else { f });
                let g = sig.gradient(f, label) * alpha;
                for d in 0..dim {
                    e[d] += g * v[d];
                    v[d] += g * h[d];
                }
            };
            update(center_out, 1.0, buf);
            for &target in &plan.negatives[next_negative..next_negative + p.negative] {
                if target == word {
                    continue;
                }
                match syn1(target) {
                    Some(l2) => {
                        update(l2, 0.0, buf);
                        stats.negatives += 1;
                    }
                    None => stats.skipped += 1,
                }
            }
            next_negative += p.negative;
            for (x, d) in buf[l1..l1 + dim].iter_mut().zip(e.iter()) {
                *x += d;
            }
            stats.loss += f64::from(loss);
            stats.pairs += 1;
        }
    }
    debug_assert_eq!(next_negative, plan.negatives.len());
    stats
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::SmallRng};

    use super::*;

    #[test]
    fn tables_match_the_functions() {
        let s = Sigmoid::new();
        for x in [-7.0f32, -5.9, -1.0, 0.0, 0.3, 2.5, 5.99, 8.0] {
            let sigma = 1.0 / (1.0 + (-x).exp());
            let clipped = if x > MAX_EXP { 1.0 } else if x < -MAX_EXP { 0.0 } else { sigma };
            assert!((s.gradient(x, 1.0) - (1.0 - clipped)).abs() < 0.01, "{x}");
            assert!((s.gradient(x, 0.0) + clipped).abs() < 0.01, "{x}");
            assert!((s.softplus(x) - x.exp().ln_1p()).abs() < 0.02, "{x}");
        }
    }

    #[test]
    fn plans_draw_negative_per_pair_and_keep_everything_without_subsampling() {
        let mut rng = SmallRng::seed_from_u64(5);
        let p = Params { dim: 4, window: 2, negative: 3 };
        let mut plan = Plan::default();
        plan.make(&[0, 1, 2, 3, 4], &[1.0; 5], p, &mut rng, |_| 9);
        assert_eq!(plan.words, [0, 1, 2, 3, 4]);
        let pairs: usize = (0..5)
            .map(|i| {
                let r = 2 - plan.shrink[i] as usize;
                (i + r).min(4) - i.saturating_sub(r)
            })
            .sum();
        assert_eq!(plan.negatives.len(), pairs * 3);
        plan.make(&[0, 1, 2, 3, 4], &[0.0; 5], p, &mut rng, |_| 9);
        assert!(plan.words.is_empty() && plan.negatives.is_empty());
        assert_eq!(plan.raw_words, 5);
    }

    /// Brute-force reference: the same updates written with explicit vectors.
    #[test]
    fn one_pair_update_matches_the_formula() {
        let sig = Sigmoid::new();
        let p = Params { dim: 2, window: 1, negative: 1 };
        // Words 0 and 1 in a sentence; negative for both pairs is word 2.
        let plan = Plan { words: vec![0, 1], shrink: vec![0, 0], negatives: vec![2, 2], raw_words: 2 };
        // Layout: syn0 of 0, 1 at 0, 2; syn1 of 0, 1, 2 at 4, 6, 8.
        let mut buf = vec![0.5, -0.2, 0.1, 0.3, 0.2, 0.1, -0.3, 0.4, 0.05, -0.1];
        let mut expect = buf.clone();
        let alpha = 0.1;
        let exact = |x: f32| 1.0 / (1.0 + (-x).exp());
        for (center, ctx) in [(0usize, 1usize), (1, 0)] {
            let h = [expect[2 * ctx], expect[2 * ctx + 1]];
            let mut e = [0f32; 2];
            for (t, label) in [(4 + 2 * center, 1.0f32), (8, 0.0)] {
                let f = h[0] * expect[t] + h[1] * expect[t + 1];
                let g = (label - exact(f)) * alpha;
                for d in 0..2 {
                    e[d] += g * expect[t + d];
                    expect[t + d] += g * h[d];
                }
            }
            expect[2 * ctx] += e[0];
            expect[2 * ctx + 1] += e[1];
        }
        let (mut h, mut e) = (vec![0.0; 2], vec![0.0; 2]);
        let stats = train_sentence(
            &plan,
            p,
            alpha,
            &sig,
            |w| 2 * w as usize,
            |w| Some(4 + 2 * w as usize),
            &mut buf,
            (&mut h, &mut e),
        );
        for (a, b) in buf.iter().zip(&expect) {
            assert!((a - b).abs() < 2e-3, "{buf:?} vs {expect:?}");
        }
        assert_eq!((stats.pairs, stats.negatives, stats.skipped), (2, 2, 0));
        assert!(stats.loss > 0.0);
    }

    #[test]
    fn unavailable_and_center_negatives_are_skipped() {
        let sig = Sigmoid::new();
        let p = Params { dim: 1, window: 1, negative: 2 };
        let plan = Plan { words: vec![0, 1], shrink: vec![0, 0], negatives: vec![0, 7, 2, 7], raw_words: 2 };
        let mut buf = vec![0.1, 0.2, 0.0, 0.0, 0.0];
        let stats = train_sentence(
            &plan,
            p,
            0.1,
            &sig,
            |w| w as usize,
            |w| match w {
                0 | 1 => Some(2 + w as usize),
                2 => Some(4),
                _ => None,
            },
            &mut buf,
            (&mut [0.0], &mut [0.0]),
        );
        // Pair 1 (center 0): negative 0 is the center (skipped silently), 7 is unavailable.
        // Pair 2 (center 1): 2 trains, 7 unavailable.
        assert_eq!((stats.pairs, stats.negatives, stats.skipped), (2, 1, 2));
    }

    #[test]
    fn training_lowers_the_loss_of_a_repeated_sentence() {
        let sig = Sigmoid::new();
        let p = Params { dim: 8, window: 2, negative: 2 };
        let mut rng = SmallRng::seed_from_u64(1);
        let mut buf: Vec<f32> = (0..80).map(|_| rng.random::<f32>() - 0.5).collect();
        let mut plan = Plan::default();
        let mut losses = Vec::new();
        for _ in 0..50 {
            plan.make(&[0, 1, 2, 3, 4], &[1.0; 5], p, &mut rng, |r| 5 + r.random_range(0..5));
            let s = train_sentence(
                &plan,
                p,
                0.05,
                &sig,
                |w| 8 * w as usize,
                |w| Some(40 + 8 * (w as usize % 5)),
                &mut buf,
                (&mut [0.0; 8], &mut [0.0; 8]),
            );
            losses.push(s.loss / s.pairs as f64);
        }
        assert!(losses[49] < 0.5 * losses[0], "{losses:?}");
    }
}
