//! The scoring models (ComplEx, RESCAL) and their parameter layout.
//!
//! Both models are bilinear: `score(s, r, o) = sᵀ M_r o` for a relation-specific matrix `M_r`.
//! Training and evaluation use that through three primitives, so a positive triple and all its
//! negatives cost a constant number of `M_r`-products instead of one per scored triple:
//! [`Model::tail_query`] (`M_rᵀ a`, so `score(a, r, b) = tail_query(a, r) · b`),
//! [`Model::head_query`] (`M_r b`, so `score(a, r, b) = a · head_query(r, b)`) and
//! [`Model::add_relation_grad`] (`∂(aᵀ M_r b)/∂r`, which is linear in `a` and in `b`).
//!
//! Layout of a key's values (AdaGrad's accumulator is not among them: it is the key space's
//! optimizer state, hidden in the same record, never pulled, see `params::optimizer`):
//! - ComplEx, `dim` = D complex components: entity and relation `[re(D), im(D)]`, 2D values.
//!   (Lapse's `--embed_dim 100` counts real values, i.e. 50 complex components.)
//! - RESCAL: entity `e(D)`, relation `R(D×D)` row-major as one key.

use rand::Rng;

/// Default half-width of the uniform initialisation of embeddings (Lapse's kge app uses 1e-2).
pub const INIT_RANGE: f32 = 1e-2;

/// Added under AdaGrad's square root so a zero accumulator and gradient divide safely (Lapse
/// initialises its accumulators to the same 1e-6 instead).
pub const ADAGRAD_EPS: f32 = 1e-6;

/// Which scoring model to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelKind {
    /// ComplEx (Trouillon et al. 2016): complex embeddings, diagonal relations.
    Complex,
    /// RESCAL (Nickel et al. 2011): real embeddings, full D×D relation matrices.
    Rescal,
}

impl ModelKind {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Complex => "complex",
            Self::Rescal => "rescal",
        }
    }
}

/// A model of a given dimension.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    /// ComplEx or RESCAL.
    pub kind: ModelKind,
    /// Complex components (ComplEx) or real components (RESCAL) of an entity.
    pub dim: usize,
}

impl Model {
    /// Embedding values of an entity (without the accumulator).
    pub fn entity_len(&self) -> usize {
        match self.kind {
            ModelKind::Complex => 2 * self.dim,
            ModelKind::Rescal => self.dim,
        }
    }

    /// Embedding values of a relation (without the accumulator).
    pub fn relation_len(&self) -> usize {
        match self.kind {
            ModelKind::Complex => 2 * self.dim,
            ModelKind::Rescal => self.dim * self.dim,
        }
    }

    /// `sᵀ M_r o`.
    pub fn score(&self, s: &[f32], r: &[f32], o: &[f32], scratch: &mut Vec<f32>) -> f32 {
        scratch.resize(self.entity_len(), 0.0);
        self.tail_query(s, r, scratch);
        dot(scratch, o)
    }

    /// `out = M_rᵀ a`: the vector whose dot product with `b` is `score(a, r, b)`.
    pub fn tail_query(&self, a: &[f32], r: &[f32], out: &mut [f32]) {
        let d = self.dim;
        match self.kind {
            ModelKind::Complex => {
                let (a_re, a_im) = a.split_at(d);
                let (r_re, r_im) = r.split_at(d);
                let (o_re, o_im) = out.split_at_mut(d);
                for i in 0..d {
                    o_re[i] = r_re[i] * a_re[i] - r_im[i] * a_im[i];
                    o_im[i] = r_re[i] * a_im[i] + r_im[i] * a_re[i];
                }
            }
            ModelKind::Rescal => {
                out[..d].fill(0.0);
                for (x, row) in a.iter().zip(r.chunks_exact(d)) {
                    axpy(*x, row, &mut out[..d]);
                }
            }
        }
    }

    /// `out = M_r b`: the vector whose dot product with `a` is `score(a, r, b)`.
    pub fn head_query(&self, r: &[f32], b: &[f32], out: &mut [f32]) {
        let d = self.dim;
        match self.kind {
            ModelKind::Complex => {
                let (b_re, b_im) = b.split_at(d);
                let (r_re, r_im) = r.split_at(d);
                let (o_re, o_im) = out.split_at_mut(d);
                for i in 0..d {
                    o_re[i] = r_re[i] * b_re[i] + r_im[i] * b_im[i];
                    o_im[i] = r_re[i] * b_im[i] - r_im[i] * b_re[i];
                }
            }
            ModelKind::Rescal => {
                for (o, row) in out[..d].iter_mut().zip(r.chunks_exact(d)) {
                    *o = dot(row, b);
                }
            }
        }
    }

    /// `d_r += ∂(aᵀ M_r b)/∂r`.
    pub fn add_relation_grad(&self, a: &[f32], b: &[f32], d_r: &mut [f32]) {
        let d = self.dim;
        match self.kind {
            ModelKind::Complex => {
                let (a_re, a_im) = a.split_at(d);
                let (b_re, b_im) = b.split_at(d);
                let (g_re, g_im) = d_r.split_at_mut(d);
                for i in 0..d {
                    g_re[i] += a_re[i] * b_re[i] + a_im[i] * b_im[i];
                    g_im[i] += a_re[i] * b_im[i] - a_im[i] * b_re[i];
                }
            }
            ModelKind::Rescal => {
                for (x, row) in a.iter().zip(d_r.chunks_exact_mut(d)) {
                    axpy(*x, b, row);
                }
            }
        }
    }

    /// Fills a key's initial embedding: uniform in `±range` (its AdaGrad accumulator is the
    /// key space's optimizer state, zero in a new record).
    pub fn init_key(values: &mut [f32], range: f32, rng: &mut impl Rng) {
        for v in values {
            *v = if range > 0.0 {
                rng.random_range(-range..range)
            } else {
                0.0
            };
        }
    }
}

/// Dot product, written with independent accumulators so it vectorises.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// `y += alpha·x`.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// The logistic loss of score `f` for `label` (1: true triple, 0: corruption) and its
/// derivative in `f`: `(σ(f) − label, ln(1 + e^f) − label·f)`, with one `exp` and one
/// `ln_1p`, stable for large `|f|`.
pub fn logistic(f: f32, label: f32) -> (f32, f32) {
    let z = (-f.abs()).exp();
    let sigma = if f >= 0.0 {
        1.0 / (1.0 + z)
    } else {
        z / (1.0 + z)
    };
    (sigma - label, f.max(0.0) + z.ln_1p() - label * f)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    fn random(n: usize, rng: &mut SmallRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    /// The ComplEx score written directly as Re(⟨s, r, conj(o)⟩).
    fn complex_reference(d: usize, s: &[f32], r: &[f32], o: &[f32]) -> f32 {
        (0..d)
            .map(|i| {
                let (sr, si, rr, ri, or, oi) = (s[i], s[d + i], r[i], r[d + i], o[i], o[d + i]);
                // (s * r) * conj(o), real part.
                let (pr, pi) = (sr * rr - si * ri, sr * ri + si * rr);
                pr * or + pi * oi
            })
            .sum()
    }

    #[test]
    fn queries_and_gradients_agree_with_the_score() {
        let seed = 11;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        for kind in [ModelKind::Complex, ModelKind::Rescal] {
            let m = Model { kind, dim: 5 };
            let (s, r, o) = (
                random(m.entity_len(), &mut rng),
                random(m.relation_len(), &mut rng),
                random(m.entity_len(), &mut rng),
            );
            let mut scratch = Vec::new();
            let f = m.score(&s, &r, &o, &mut scratch);
            if kind == ModelKind::Complex {
                assert!((f - complex_reference(5, &s, &r, &o)).abs() < 1e-5);
            } else {
                let direct: f32 = (0..5)
                    .flat_map(|a| (0..5).map(move |b| (a, b)))
                    .map(|(a, b)| r[a * 5 + b] * s[a] * o[b])
                    .sum();
                assert!((f - direct).abs() < 1e-5);
            }
            let mut p = vec![0.0; m.entity_len()];
            m.head_query(&r, &o, &mut p);
            assert!((dot(&s, &p) - f).abs() < 1e-5, "{kind:?}: s·M o");
            // Relation gradient against finite differences.
            let mut g = vec![0.0; m.relation_len()];
            m.add_relation_grad(&s, &o, &mut g);
            for i in 0..m.relation_len() {
                let mut r2 = r.clone();
                r2[i] += 1e-2;
                let fd = (m.score(&s, &r2, &o, &mut scratch) - f) / 1e-2;
                assert!(
                    (fd - g[i]).abs() < 1e-3,
                    "{kind:?} relation grad {i}: {fd} vs {}",
                    g[i]
                );
            }
        }
    }

    #[test]
    fn the_key_spaces_optimizer_is_the_documented_adagrad() {
        let opt = super::super::params::optimizer(0.1).expect("eta > 0 has an optimizer");
        let (mut w, mut acc) = ([1.0f32, 2.0], [0.0f32, 3.0]);
        let g = [0.5, -1.0];
        opt.step(&mut w, &mut acc, &g);
        let expect0 = 1.0 - 0.1 * 0.5 / (0.25f32 + ADAGRAD_EPS).sqrt();
        let expect1 = 2.0 + 0.1 * 1.0 / (3.0f32 + 1.0 + ADAGRAD_EPS).sqrt();
        assert!(
            (w[0] - expect0).abs() < 1e-6 && (w[1] - expect1).abs() < 1e-6,
            "{w:?}"
        );
        assert_eq!(acc, [0.25, 4.0]);
        // A first step moves every coordinate by about eta against the gradient's sign.
        assert!((w[0] - 0.9).abs() < 1e-4);
        assert!(
            super::super::params::optimizer(0.0).is_none(),
            "eta 0: no optimizer"
        );
    }

    #[test]
    fn logistic_loss_is_stable_and_matches_its_definition() {
        for f in [-3.0f32, -0.5, 0.0, 0.7, 4.0] {
            let sigma = 1.0 / (1.0 + (-f).exp());
            let (d1, l1) = logistic(f, 1.0);
            let (d0, l0) = logistic(f, 0.0);
            assert!((d1 - (sigma - 1.0)).abs() < 1e-6 && (d0 - sigma).abs() < 1e-6);
            assert!(
                (l1 + sigma.ln()).abs() < 1e-5 && (l0 + (1.0 - sigma).ln()).abs() < 1e-5,
                "{f}"
            );
        }
        assert_eq!(logistic(100.0, 1.0), (0.0, 0.0));
        assert_eq!(logistic(-100.0, 1.0), (-1.0, 100.0));
        assert_eq!(logistic(100.0, 0.0), (1.0, 100.0));
        assert!(logistic(-200.0, 0.0).1 >= 0.0 && logistic(200.0, 0.0).0.is_finite());
    }
}
