//! The skip-gram negative-sampling arithmetic, independent of where the vectors live.
//!
//! A batch of consecutive sentences is first *planned* (subsampling, random window shrinks and
//! the negatives it will use are drawn up front), so a worker knows every key the batch touches
//! before training it: that is what lets it localize the next batch and pull a whole batch at
//! once. Training then applies word2vec.c's per-pair updates, in word2vec.c's order, to local
//! copies of the vectors (windows stay inside their sentence):
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
//! the center word is skipped. The loss of a pair is `-ln σ(h·v_w) − Σ ln σ(−h·v_n)` over
//! the negatives used.

use rand::Rng;

/// Scores beyond ±`MAX_EXP` saturate the sigmoid (word2vec.c).
pub const MAX_EXP: f32 = 6.0;
const TABLE: usize = 1000;

/// Tabulated σ and softplus on `[−MAX_EXP, MAX_EXP]` (word2vec.c's `expTable`, plus the loss),
/// read with one lookup per target.
#[derive(Clone, Debug)]
pub struct Sigmoid {
    /// `(σ(x), ln(1 + e^x))` at `TABLE + 1` points.
    table: Vec<(f32, f32)>,
}

impl Default for Sigmoid {
    fn default() -> Self {
        Self::new()
    }
}

impl Sigmoid {
    /// Builds the table.
    pub fn new() -> Self {
        let x = |i: usize| (i as f64 / TABLE as f64 * 2.0 - 1.0) * f64::from(MAX_EXP);
        let table = (0..=TABLE)
            .map(|i| {
                (
                    (1.0 / (1.0 + (-x(i)).exp())) as f32,
                    x(i).exp().ln_1p() as f32,
                )
            })
            .collect();
        Self { table }
    }

    /// For score `f` of a positive (`label` 1) or negative (0) target: the gradient scale
    /// `label − σ(f)`, with σ saturated to 0 or 1 beyond ±[`MAX_EXP`] as word2vec.c does, and
    /// the target's loss `−ln σ(f)` or `−ln σ(−f)` (exact beyond the table).
    #[inline(always)]
    pub fn step(&self, f: f32, positive: bool) -> (f32, f32) {
        let (sigma, softplus) = if f > MAX_EXP {
            (1.0, f + (-f).exp().ln_1p())
        } else if f < -MAX_EXP {
            (0.0, f.exp().ln_1p())
        } else {
            // In range, so the float-to-int conversion needs no saturation.
            self.table[((f + MAX_EXP) * (TABLE as f32 / MAX_EXP / 2.0)) as i32 as usize]
        };
        // softplus(−f) = softplus(f) − f.
        if positive {
            (1.0 - sigma, softplus - f)
        } else {
            (-sigma, softplus)
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

/// A batch of consecutive sentences with all their random choices made.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The words kept by subsampling, sentence after sentence.
    pub words: Vec<u32>,
    /// End (exclusive index in `words`) of each sentence: windows never cross these.
    pub ends: Vec<usize>,
    /// Per position, how much the window shrinks (`0..window`).
    pub shrink: Vec<u32>,
    /// The negatives, `negative` per pair, in training order.
    pub negatives: Vec<u32>,
    /// Words of the sentences before subsampling (what learning-rate decay counts).
    pub raw_words: usize,
}

impl Plan {
    /// Empties the plan.
    pub fn clear(&mut self) {
        self.words.clear();
        self.ends.clear();
        self.shrink.clear();
        self.negatives.clear();
        self.raw_words = 0;
    }

    /// Plans one sentence alone (see [`Plan::add`]).
    pub fn make<R: Rng>(
        &mut self,
        sentence: &[u32],
        keep: &[f32],
        p: Params,
        rng: &mut R,
        draw_negative: impl FnMut(&mut R) -> u32,
    ) {
        self.clear();
        self.add(sentence, keep, p, rng, draw_negative);
    }

    /// Appends `sentence`: keeps each word with probability `keep[w]`, draws a window shrink
    /// per kept position and `negative` negatives per pair from `draw_negative`.
    pub fn add<R: Rng>(
        &mut self,
        sentence: &[u32],
        keep: &[f32],
        p: Params,
        rng: &mut R,
        mut draw_negative: impl FnMut(&mut R) -> u32,
    ) {
        self.add_with(sentence, keep, p, rng, |rng, out, n| {
            out.extend((0..n).map(|_| draw_negative(rng)));
        });
    }

    /// [`Plan::add`] with the negatives appended by `negatives(rng, out, n)`, `n` at a time
    /// (all of one position's pairs at once): the same draws in the same order, without a
    /// call per negative.
    pub fn add_with<R: Rng>(
        &mut self,
        sentence: &[u32],
        keep: &[f32],
        p: Params,
        rng: &mut R,
        mut negatives: impl FnMut(&mut R, &mut Vec<u32>, usize),
    ) {
        self.raw_words += sentence.len();
        let start = self.words.len();
        for &w in sentence {
            let k = keep[w as usize];
            if k >= 1.0 || rng.random::<f32>() < k {
                self.words.push(w);
            }
        }
        let len = self.words.len() - start;
        if len == 0 {
            return;
        }
        self.ends.push(self.words.len());
        for i in 0..len {
            let b = rng.random_range(0..p.window as u32);
            self.shrink.push(b);
            let reach = p.window - b as usize;
            let contexts = (i + reach).min(len - 1) - i.saturating_sub(reach);
            if contexts * p.negative > 0 {
                negatives(rng, &mut self.negatives, contexts * p.negative);
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

/// Marks a negative whose vector is unavailable in [`Offsets::negatives`].
pub const ABSENT: usize = usize::MAX;

/// Where a planned sentence's vectors sit in the batch buffer, resolved once per sentence so
/// the pair loop does no lookups.
#[derive(Clone, Debug, Default)]
pub struct Offsets {
    /// Per kept position, the offset of its word's input vector.
    pub syn0: Vec<usize>,
    /// Per kept position, the offset of its word's output vector.
    pub syn1: Vec<usize>,
    /// Per planned negative, the offset of its output vector, or [`ABSENT`].
    pub negatives: Vec<usize>,
}

impl Offsets {
    /// Resolves `plan` through `syn0(w)` and `syn1(w)` (`None`: the vector is unavailable, only
    /// allowed for negatives).
    pub fn fill(
        &mut self,
        plan: &Plan,
        syn0: impl Fn(u32) -> usize,
        syn1: impl Fn(u32) -> Option<usize>,
    ) {
        self.syn0.clear();
        self.syn1.clear();
        self.negatives.clear();
        for &w in &plan.words {
            self.syn0.push(syn0(w));
            self.syn1
                .push(syn1(w).expect("a sentence word's output vector is always present"));
        }
        self.negatives
            .extend(plan.negatives.iter().map(|&n| syn1(n).unwrap_or(ABSENT)));
    }
}

/// One target of one pair: scores `h` against `v`, adds the gradient for `h` to `e`, updates
/// `v`; returns the target's loss.
#[inline(always)]
fn update_target(
    h: &[f32],
    e: &mut [f32],
    v: &mut [f32],
    positive: bool,
    alpha: f32,
    sig: &Sigmoid,
) -> f32 {
    let (g, loss) = sig.step(dot(h, v), positive);
    let g = g * alpha;
    // In chunks of four (one SSE register), then the tail. Each chunk is loaded into registers
    // before it is written, so the compiler need not fear that `e` and `v` overlap and keeps
    // it in SIMD.
    let n = h.len();
    let (h4, ht) = h.as_chunks::<4>();
    let (e4, et) = e[..n].as_chunks_mut::<4>();
    let (v4, vt) = v[..n].as_chunks_mut::<4>();
    for ((h, e), v) in h4.iter().zip(e4).zip(v4) {
        let (hv, ev, vv) = (*h, *e, *v);
        *e = std::array::from_fn(|i| ev[i] + g * vv[i]);
        *v = std::array::from_fn(|i| vv[i] + g * hv[i]);
    }
    for ((h, e), v) in ht.iter().zip(et).zip(vt) {
        *e += g * *v;
        *v += g * h;
    }
    loss
}

/// Trains one planned batch of sentences on local copies: input vectors in `syn0`, output
/// vectors in `syn1`, located by `at` (offsets into the respective buffer); negatives marked
/// [`ABSENT`] are skipped. `e` is scratch of `p.dim` values. Input and output vectors live in
/// separate buffers so the context's input vector `h` is read in place while output vectors
/// are written (word2vec.c reads `syn0[c]` in place too: nothing writes it before the pair's
/// end).
pub fn train_batch(
    plan: &Plan,
    at: &Offsets,
    p: Params,
    alpha: f32,
    sig: &Sigmoid,
    bufs: (&mut [f32], &mut [f32]),
    e: &mut [f32],
) -> SentenceStats {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU supports AVX, checked just above.
        return unsafe { train_batch_avx(plan, at, p, alpha, sig, bufs, e) };
    }
    train_batch_by_length(plan, at, p, alpha, sig, bufs, e)
}

/// [`train_batch`] compiled for AVX: the same operations in the same order (the compiler may
/// not reorder float arithmetic), so the same results, with twice as wide vector registers.
/// The baseline x86-64 target only has SSE's four lanes.
///
/// # Safety
/// The CPU must support AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn train_batch_avx(
    plan: &Plan,
    at: &Offsets,
    p: Params,
    alpha: f32,
    sig: &Sigmoid,
    bufs: (&mut [f32], &mut [f32]),
    e: &mut [f32],
) -> SentenceStats {
    train_batch_by_length(plan, at, p, alpha, sig, bufs, e)
}

/// Dispatches on the vector length.
#[inline(always)]
fn train_batch_by_length(
    plan: &Plan,
    at: &Offsets,
    p: Params,
    alpha: f32,
    sig: &Sigmoid,
    bufs: (&mut [f32], &mut [f32]),
    e: &mut [f32],
) -> SentenceStats {
    // Short vectors (up to 32 values) get a copy of the loop with their length known at
    // compile time: the vector loops unroll into a few SIMD instructions and no loop control,
    // which matters when a target costs only a few dozen operations (e.g. Lapse's `--dim 10`
    // benchmark). Longer vectors amortise the loop control anyway.
    macro_rules! by_length {
        ($($n:literal)*) => {
            match p.dim {
                $($n => train_batch_n::<$n>(plan, at, p, alpha, sig, bufs, e),)*
                _ => train_batch_n::<0>(plan, at, p, alpha, sig, bufs, e),
            }
        };
    }
    by_length!(
        1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
        17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32
    )
}

/// [`train_batch`] for vectors of `N` values (`N = 0`: `p.dim`, known only at run time).
#[inline(always)]
fn train_batch_n<const N: usize>(
    plan: &Plan,
    at: &Offsets,
    p: Params,
    alpha: f32,
    sig: &Sigmoid,
    (syn0, syn1): (&mut [f32], &mut [f32]),
    e: &mut [f32],
) -> SentenceStats {
    let dim = if N > 0 { N } else { p.dim };
    let e_dyn = &mut e[..dim];
    // With the length known, `h` and `e` live in local arrays the compiler keeps in registers
    // across a pair's targets instead of storing and reloading them for every target.
    let mut h_fix = [0f32; N];
    let mut e_fix: [f32; N];
    let mut stats = SentenceStats::default();
    let mut next_negative = 0;
    let mut start = 0;
    for &end in &plan.ends {
        for i in start..end {
            let word = plan.words[i];
            let reach = p.window - plan.shrink[i] as usize;
            let center_out = at.syn1[i];
            for c in i.saturating_sub(reach).max(start)..(i + reach + 1).min(end) {
                if c == i {
                    continue;
                }
                let l1 = at.syn0[c];
                let (h, e): (&[f32], &mut [f32]) = if N > 0 {
                    h_fix.copy_from_slice(&syn0[l1..l1 + N]);
                    e_fix = [0.0; N];
                    (&h_fix, &mut e_fix)
                } else {
                    e_dyn.fill(0.0);
                    (&syn0[l1..l1 + dim], &mut *e_dyn)
                };
                let mut loss = update_target(
                    h,
                    e,
                    &mut syn1[center_out..center_out + dim],
                    true,
                    alpha,
                    sig,
                );
                let targets = next_negative..next_negative + p.negative;
                for (&target, &l2) in plan.negatives[targets.clone()]
                    .iter()
                    .zip(&at.negatives[targets])
                {
                    if target == word {
                        continue;
                    }
                    if l2 == ABSENT {
                        stats.skipped += 1;
                    } else {
                        loss += update_target(h, e, &mut syn1[l2..l2 + dim], false, alpha, sig);
                        stats.negatives += 1;
                    }
                }
                next_negative += p.negative;
                for (x, d) in syn0[l1..l1 + dim].iter_mut().zip(e.iter()) {
                    *x += d;
                }
                stats.loss += f64::from(loss);
                stats.pairs += 1;
            }
        }
        start = end;
    }
    debug_assert_eq!(next_negative, plan.negatives.len());
    stats
}

/// Dot product in chunks of four with two independent accumulators, so that it vectorises and
/// long vectors are not bound by the latency of one chain of additions; a last odd chunk of
/// four and the scalar tail come after.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a4, at) = a.as_chunks::<4>();
    let (b4, bt) = b[..a.len()].as_chunks::<4>();
    let (mut acc0, mut acc1) = ([0f32; 4], [0f32; 4]);
    let pairs = a4.len() / 2 * 2;
    for (x, y) in a4[..pairs].chunks_exact(2).zip(b4[..pairs].chunks_exact(2)) {
        acc0 = std::array::from_fn(|i| acc0[i] + x[0][i] * y[0][i]);
        acc1 = std::array::from_fn(|i| acc1[i] + x[1][i] * y[1][i]);
    }
    if let (Some(x), Some(y)) = (a4[pairs..].first(), b4[pairs..].first()) {
        acc0 = std::array::from_fn(|i| acc0[i] + x[i] * y[i]);
    }
    let mut tail = 0.0;
    for (x, y) in at.iter().zip(bt) {
        tail += x * y;
    }
    ((acc0[0] + acc1[0]) + (acc0[2] + acc1[2])) + ((acc0[1] + acc1[1]) + (acc0[3] + acc1[3])) + tail
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::SmallRng};

    use super::*;

    fn offsets(
        plan: &Plan,
        syn0: impl Fn(u32) -> usize,
        syn1: impl Fn(u32) -> Option<usize>,
    ) -> Offsets {
        let mut at = Offsets::default();
        at.fill(plan, syn0, syn1);
        at
    }

    #[test]
    fn dot_matches_the_sum_of_products() {
        for n in [0usize, 3, 8, 13, 100] {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.25).collect();
            let expect: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!(
                (dot(&a, &b) - expect).abs() <= 1e-3 * expect.abs().max(1.0),
                "n {n}"
            );
        }
    }

    #[test]
    fn tables_match_the_functions() {
        let s = Sigmoid::new();
        for x in [-7.0f32, -5.9, -1.0, 0.0, 0.3, 2.5, 5.99, 8.0] {
            let sigma = 1.0 / (1.0 + (-x).exp());
            let clipped = if x > MAX_EXP {
                1.0
            } else if x < -MAX_EXP {
                0.0
            } else {
                sigma
            };
            let softplus = |y: f32| y.exp().ln_1p();
            let (g, loss) = s.step(x, true);
            assert!((g - (1.0 - clipped)).abs() < 0.01, "{x}");
            assert!((loss - softplus(-x)).abs() < 0.02, "{x}: {loss}");
            let (g, loss) = s.step(x, false);
            assert!((g + clipped).abs() < 0.01, "{x}");
            assert!((loss - softplus(x)).abs() < 0.02, "{x}: {loss}");
        }
    }

    #[test]
    fn plans_draw_negative_per_pair_and_keep_everything_without_subsampling() {
        let mut rng = SmallRng::seed_from_u64(5);
        let p = Params {
            dim: 4,
            window: 2,
            negative: 3,
        };
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

    #[test]
    fn subsampling_keeps_words_at_their_keep_probability() {
        let seed = 9;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let p = Params {
            dim: 1,
            window: 1,
            negative: 0,
        };
        let keep = [1.0, 0.3, 0.05];
        let sentence: Vec<u32> = (0..30_000).map(|i| i % 3).collect();
        let mut plan = Plan::default();
        plan.make(&sentence, &keep, p, &mut rng, |_| 0);
        for (w, &k) in keep.iter().enumerate() {
            let kept = plan.words.iter().filter(|&&x| x == w as u32).count() as f64 / 10_000.0;
            let tol = 5.0 * (f64::from(k) * (1.0 - f64::from(k)) / 10_000.0).sqrt() + 1e-9;
            assert!(
                (kept - f64::from(k)).abs() <= tol,
                "word {w}: kept {kept}, expected {k}"
            );
        }
    }

    /// Brute-force reference: the same updates written with explicit vectors.
    #[test]
    fn one_pair_update_matches_the_formula() {
        let sig = Sigmoid::new();
        let p = Params {
            dim: 2,
            window: 1,
            negative: 1,
        };
        // Words 0 and 1 in a sentence; negative for both pairs is word 2.
        let plan = Plan {
            words: vec![0, 1],
            ends: vec![2],
            shrink: vec![0, 0],
            negatives: vec![2, 2],
            raw_words: 2,
        };
        // Layout: syn0 of 0, 1 at 0, 2; syn1 of 0, 1, 2 at 4, 6, 8 (offsets 0, 2, 4 of the
        // second half).
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
        let mut e = vec![0.0; 2];
        let at = offsets(&plan, |w| 2 * w as usize, |w| Some(2 * w as usize));
        let stats = train_batch(&plan, &at, p, alpha, &sig, buf.split_at_mut(4), &mut e);
        for (a, b) in buf.iter().zip(&expect) {
            assert!((a - b).abs() < 2e-3, "{buf:?} vs {expect:?}");
        }
        assert_eq!((stats.pairs, stats.negatives, stats.skipped), (2, 2, 0));
        assert!(stats.loss > 0.0);
    }

    #[test]
    fn windows_stay_inside_their_sentence_in_a_batch() {
        let mut rng = SmallRng::seed_from_u64(2);
        let p = Params {
            dim: 1,
            window: 3,
            negative: 1,
        };
        let mut plan = Plan::default();
        plan.make(&[0, 1], &[1.0; 4], p, &mut rng, |_| 9);
        plan.add(&[], &[1.0; 4], p, &mut rng, |_| 9);
        plan.add(&[2, 3], &[1.0; 4], p, &mut rng, |_| 9);
        assert_eq!((plan.ends.clone(), plan.raw_words), (vec![2, 4], 4));
        // Two sentences of two words: exactly one context per position, whatever the shrink.
        assert_eq!(plan.negatives.len(), 4);
        let mut buf = [0.1; 4 + 4 + 1];
        let at = offsets(&plan, |w| w as usize, |w| Some(w.min(4) as usize));
        let sig = Sigmoid::new();
        let s = train_batch(&plan, &at, p, 0.1, &sig, buf.split_at_mut(4), &mut [0.0]);
        assert_eq!((s.pairs, s.negatives), (4, 4));
    }

    #[test]
    fn unavailable_and_center_negatives_are_skipped() {
        let sig = Sigmoid::new();
        let p = Params {
            dim: 1,
            window: 1,
            negative: 2,
        };
        let plan = Plan {
            words: vec![0, 1],
            ends: vec![2],
            shrink: vec![0, 0],
            negatives: vec![0, 7, 2, 7],
            raw_words: 2,
        };
        let mut buf = [0.1, 0.2, 0.0, 0.0, 0.0];
        let at = offsets(
            &plan,
            |w| w as usize,
            |w| match w {
                0 | 1 => Some(w as usize),
                2 => Some(2),
                _ => None,
            },
        );
        let stats = train_batch(&plan, &at, p, 0.1, &sig, buf.split_at_mut(2), &mut [0.0]);
        // Pair 1 (center 0): negative 0 is the center (skipped silently), 7 is unavailable.
        // Pair 2 (center 1): 2 trains, 7 unavailable.
        assert_eq!((stats.pairs, stats.negatives, stats.skipped), (2, 1, 2));
    }

    #[test]
    fn short_vector_copies_compute_exactly_what_the_generic_loop_does() {
        let sig = Sigmoid::new();
        for dim in [1usize, 3, 10, 32, 33] {
            let p = Params {
                dim,
                window: 2,
                negative: 2,
            };
            let mut rng = SmallRng::seed_from_u64(dim as u64);
            let mut plan = Plan::default();
            plan.make(&[0, 1, 2, 3, 4, 1, 2], &[1.0; 5], p, &mut rng, |r| {
                r.random_range(0..8)
            });
            // Words 0..5 have input vectors; outputs of 0..8 follow.
            let at = offsets(&plan, |w| dim * w as usize, |w| Some(dim * w as usize));
            let init: Vec<f32> = (0..13 * dim).map(|_| rng.random::<f32>() - 0.5).collect();
            let (mut a, mut b) = (init.clone(), init);
            let (mut ea, mut eb) = (vec![0.0; dim], vec![0.0; dim]);
            let sa = train_batch(&plan, &at, p, 0.2, &sig, a.split_at_mut(5 * dim), &mut ea);
            let sb = train_batch_n::<0>(&plan, &at, p, 0.2, &sig, b.split_at_mut(5 * dim), &mut eb);
            assert_eq!(a, b, "dim {dim}");
            assert_eq!(sa, sb, "dim {dim}");
        }
    }

    #[test]
    fn training_lowers_the_loss_of_a_repeated_sentence() {
        let sig = Sigmoid::new();
        let p = Params {
            dim: 8,
            window: 2,
            negative: 2,
        };
        let mut rng = SmallRng::seed_from_u64(1);
        let mut buf: Vec<f32> = (0..120).map(|_| rng.random::<f32>() - 0.5).collect();
        let mut plan = Plan::default();
        let mut losses = Vec::new();
        for _ in 0..50 {
            plan.make(&[0, 1, 2, 3, 4], &[1.0; 5], p, &mut rng, |r| {
                5 + r.random_range(0..5)
            });
            let at = offsets(&plan, |w| 8 * w as usize, |w| Some(8 * w as usize));
            let s = train_batch(
                &plan,
                &at,
                p,
                0.05,
                &sig,
                buf.split_at_mut(40),
                &mut [0.0; 8],
            );
            losses.push(s.loss / s.pairs as f64);
        }
        assert!(losses[49] < 0.5 * losses[0], "{losses:?}");
    }
}
