//! The CTR model's arithmetic: per-field mean-pooled embeddings, concatenated, into a 2-layer
//! MLP (`F·dim → hidden → 1`, ReLU), logistic loss; its forward and backward over a batch, and
//! the test metrics (AUC, log-loss).
//!
//! Parameters are plain slices: the batch's embedding rows (one per distinct key, pulled from
//! roam) and the dense vector ([`Shape::dense_len`] floats: `W1` row-major `hidden × F·dim`,
//! `b1`, `w2`, `b2`). Gradients come out in the same shapes, for the batch's mean loss (as
//! PyTorch's `BCEWithLogitsLoss` with `reduction="mean"`), a row named twice in a batch getting
//! the sum. An empty bag contributes a zero vector (as `torch.nn.EmbeddingBag`'s `mean`).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam::Key;
use rustc_hash::FxHashMap;

use super::data::Examples;

/// The model's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Id fields.
    pub fields: usize,
    /// Embedding dimension (roam's value length).
    pub dim: usize,
    /// Hidden units.
    pub hidden: usize,
}

impl Shape {
    /// Inputs of the MLP.
    pub fn input(&self) -> usize {
        self.fields * self.dim
    }

    /// Dense parameters.
    pub fn dense_len(&self) -> usize {
        self.hidden * self.input() + 2 * self.hidden + 1
    }

    /// Roam keys holding the dense parameters (`dim` floats each, the last padded).
    pub fn dense_keys(&self) -> usize {
        self.dense_len().div_ceil(self.dim)
    }

    /// The initial dense parameters: PyTorch's `nn.Linear` default,
    /// `U(−1/√fan_in, 1/√fan_in)` for weights and biases, seeded; padded to whole keys.
    pub fn init_dense(&self, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut v = Vec::with_capacity(self.dense_keys() * self.dim);
        let (a1, a2) = (
            1.0 / (self.input() as f32).sqrt(),
            1.0 / (self.hidden as f32).sqrt(),
        );
        for _ in 0..self.hidden * self.input() + self.hidden {
            v.push(rng.random_range(-a1..a1));
        }
        for _ in 0..self.hidden + 1 {
            v.push(rng.random_range(-a2..a2));
        }
        v.resize(self.dense_keys() * self.dim, 0.0);
        v
    }
}

/// A batch's distinct keys and, for every id of every bag, the row it reads.
#[derive(Debug, Default)]
pub struct Batch {
    /// The batch's rows (indices into the examples).
    pub rows: Vec<usize>,
    /// Distinct keys, in first-use order.
    pub unique: Vec<Key>,
    /// For each id of each bag of each row, in order: its index in `unique`.
    slots: Vec<u32>,
    seen: FxHashMap<Key, u32>,
}

impl Batch {
    /// Fills the batch with `rows` of `ex`.
    pub fn fill(&mut self, ex: &Examples, rows: &[usize]) {
        self.rows.clear();
        self.rows.extend_from_slice(rows);
        self.unique.clear();
        self.slots.clear();
        self.seen.clear();
        for &r in rows {
            for f in 0..ex.fields {
                for &k in ex.bag(r, f) {
                    let next = self.unique.len() as u32;
                    let slot = *self.seen.entry(k).or_insert(next);
                    if slot == next {
                        self.unique.push(k);
                    }
                    self.slots.push(slot);
                }
            }
        }
    }
}

/// The parameters a batch reads: its embedding rows (`unique × dim`, in [`Batch::unique`]
/// order) and the dense vector.
#[derive(Clone, Copy, Debug)]
pub struct Params<'a> {
    /// The batch's embedding rows.
    pub emb: &'a [f32],
    /// The dense parameters ([`Shape::dense_len`], padded to whole keys).
    pub dense: &'a [f32],
}

/// Gradients in the shapes of [`Params`].
#[derive(Debug, Default)]
pub struct Grads {
    /// Of the batch's embedding rows.
    pub emb: Vec<f32>,
    /// Of the dense parameters.
    pub dense: Vec<f32>,
}

/// Forward and backward work buffers (reused across batches).
#[derive(Debug, Default)]
pub struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    dx: Vec<f32>,
}

/// `log(1 + e^{-|z|}) + max(z, 0) − z·y`: the logistic loss of logit `z`, label `y`, without
/// overflow.
pub fn log_loss(z: f32, y: f32) -> f64 {
    let z = f64::from(z);
    z.max(0.0) - z * f64::from(y) + (-z.abs()).exp().ln_1p()
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// The MLP's logit for row `i` of the batch, leaving its input in `s.x` and hidden
/// pre-activations in `s.h`; `cursor` walks the batch's slots.
fn forward_row(
    shape: &Shape,
    ex: &Examples,
    row: usize,
    slots: &[u32],
    cursor: &mut usize,
    p: Params<'_>,
    s: &mut Scratch,
) -> f32 {
    let (emb, dense) = (p.emb, p.dense);
    let (d, n_in, hid) = (shape.dim, shape.input(), shape.hidden);
    s.x.clear();
    s.x.resize(n_in, 0.0);
    for f in 0..shape.fields {
        let bag = ex.bag(row, f).len();
        if bag == 0 {
            continue;
        }
        let x = &mut s.x[f * d..(f + 1) * d];
        for &slot in &slots[*cursor..*cursor + bag] {
            let e = &emb[slot as usize * d..(slot as usize + 1) * d];
            for (xi, ei) in x.iter_mut().zip(e) {
                *xi += ei;
            }
        }
        let inv = 1.0 / bag as f32;
        x.iter_mut().for_each(|xi| *xi *= inv);
        *cursor += bag;
    }
    let (w1, rest) = dense.split_at(hid * n_in);
    let (b1, rest) = rest.split_at(hid);
    let (w2, rest) = rest.split_at(hid);
    s.h.clear();
    let mut z = rest[0];
    for j in 0..hid {
        let row = &w1[j * n_in..(j + 1) * n_in];
        let pre = b1[j] + row.iter().zip(&s.x).map(|(w, x)| w * x).sum::<f32>();
        s.h.push(pre);
        z += w2[j] * pre.max(0.0);
    }
    z
}

/// Forward and backward of the batch's mean logistic loss: writes the gradients of the
/// batch's embedding rows (`unique × dim`) and of the dense parameters (same length as
/// `dense`), and returns the summed (not mean) loss of the batch.
pub fn train_step(
    shape: &Shape,
    ex: &Examples,
    batch: &Batch,
    p: Params<'_>,
    g: &mut Grads,
    s: &mut Scratch,
) -> f64 {
    let (d, n_in, hid) = (shape.dim, shape.input(), shape.hidden);
    let (dense, grad_emb, grad_dense) = (p.dense, &mut g.emb, &mut g.dense);
    grad_emb.clear();
    grad_emb.resize(batch.unique.len() * d, 0.0);
    grad_dense.clear();
    grad_dense.resize(dense.len(), 0.0);
    let scale = 1.0 / batch.rows.len().max(1) as f32;
    let (w1, rest) = dense.split_at(hid * n_in);
    let w2 = &rest[hid..2 * hid];
    let mut loss = 0.0;
    let mut cursor = 0;
    for &row in &batch.rows {
        let start = cursor;
        let z = forward_row(shape, ex, row, &batch.slots, &mut cursor, p, s);
        let y = f32::from(ex.labels[row]);
        loss += log_loss(z, y);
        let dz = (sigmoid(z) - y) * scale;
        let (gw1, grest) = grad_dense.split_at_mut(hid * n_in);
        let (gb1, grest) = grest.split_at_mut(hid);
        let (gw2, gb2) = grest.split_at_mut(hid);
        gb2[0] += dz;
        s.dx.clear();
        s.dx.resize(n_in, 0.0);
        for j in 0..hid {
            let pre = s.h[j];
            gw2[j] += dz * pre.max(0.0);
            if pre <= 0.0 {
                continue;
            }
            let dh = dz * w2[j];
            gb1[j] += dh;
            let wrow = &w1[j * n_in..(j + 1) * n_in];
            let grow = &mut gw1[j * n_in..(j + 1) * n_in];
            for ((g, x), (w, dx)) in grow.iter_mut().zip(&s.x).zip(wrow.iter().zip(&mut s.dx)) {
                *g += dh * x;
                *dx += dh * w;
            }
        }
        let mut c = start;
        for f in 0..shape.fields {
            let bag = ex.bag(row, f).len();
            if bag == 0 {
                continue;
            }
            let inv = 1.0 / bag as f32;
            let dx = &s.dx[f * d..(f + 1) * d];
            for &slot in &batch.slots[c..c + bag] {
                let g = &mut grad_emb[slot as usize * d..(slot as usize + 1) * d];
                for (gi, dxi) in g.iter_mut().zip(dx) {
                    *gi += dxi * inv;
                }
            }
            c += bag;
        }
    }
    loss
}

/// The batch's logits, appended to `out`.
pub fn predict(
    shape: &Shape,
    ex: &Examples,
    batch: &Batch,
    p: Params<'_>,
    out: &mut Vec<f32>,
    s: &mut Scratch,
) {
    let mut cursor = 0;
    for &row in &batch.rows {
        out.push(forward_row(shape, ex, row, &batch.slots, &mut cursor, p, s));
    }
}

/// Area under the ROC curve of `scores` for `labels` (ties count one half); `None` when one
/// class is missing.
pub fn auc(scores: &[f32], labels: &[u8]) -> Option<f64> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let (mut rank_sum, mut pos) = (0.0f64, 0u64);
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        // Ranks i+1 ..= j+1 share their mean.
        let mean_rank = (i + j + 2) as f64 / 2.0;
        for &k in &order[i..=j] {
            if labels[k] == 1 {
                rank_sum += mean_rank;
                pos += 1;
            }
        }
        i = j + 1;
    }
    let neg = scores.len() as u64 - pos;
    (pos > 0 && neg > 0)
        .then(|| (rank_sum - (pos * (pos + 1)) as f64 / 2.0) / (pos as f64 * neg as f64))
}

#[cfg(test)]
mod tests {
    use super::super::data::parse;
    use super::*;

    #[test]
    fn auc_counts_pairs_and_ties() {
        assert_eq!(auc(&[0.1, 0.9], &[0, 1]), Some(1.0));
        assert_eq!(auc(&[0.9, 0.1], &[0, 1]), Some(0.0));
        assert_eq!(auc(&[0.5, 0.5], &[0, 1]), Some(0.5));
        // Pairs (pos, neg): (0.8 > 0.3), (0.8 > 0.6), (0.4 > 0.3), (0.4 < 0.6): 3 of 4.
        assert_eq!(auc(&[0.8, 0.4, 0.3, 0.6], &[1, 1, 0, 0]), Some(0.75));
        assert_eq!(auc(&[0.1, 0.2], &[1, 1]), None);
    }

    /// The analytic gradients equal central finite differences of the loss. Finite
    /// differences are wrong across a ReLU kink, so the parameters are drawn from the first
    /// seed whose hidden pre-activations are all at least 0.02 from zero (a step of 1e-3
    /// moves them by less than that).
    #[test]
    fn gradients_match_finite_differences() {
        let (_, ex) = parse("label\ta\tb\n1\t1\t2,3\n0\t4\t\n1\t1\t3\n").unwrap();
        let shape = Shape {
            fields: 2,
            dim: 3,
            hidden: 4,
        };
        let mut batch = Batch::default();
        batch.fill(&ex, &[0, 1, 2]);
        assert_eq!(batch.unique.len(), 4);
        let mut s = Scratch::default();
        let (mut emb, mut dense) = (0..100u64)
            .map(|seed| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let emb: Vec<f32> = (0..4 * 3).map(|_| rng.random_range(-0.5..0.5)).collect();
                (emb, shape.init_dense(seed))
            })
            .find(|(emb, dense)| {
                let mut cursor = 0;
                batch.rows.iter().all(|&row| {
                    let p = Params { emb, dense };
                    forward_row(&shape, &ex, row, &batch.slots, &mut cursor, p, &mut s);
                    s.h.iter().all(|p| p.abs() > 0.02)
                })
            })
            .expect("a seed without pre-activations near zero");
        let mut g = Grads::default();
        let n = batch.rows.len() as f64;
        let loss = |emb: &[f32], dense: &[f32], s: &mut Scratch| {
            train_step(
                &shape,
                &ex,
                &batch,
                Params { emb, dense },
                &mut Grads::default(),
                s,
            ) / n
        };
        train_step(
            &shape,
            &ex,
            &batch,
            Params {
                emb: &emb,
                dense: &dense,
            },
            &mut g,
            &mut s,
        );
        let (ge, gd) = (g.emb, g.dense);
        let h = 1e-3f32;
        let mut check = |params: &mut Vec<f32>,
                         grads: &[f32],
                         len: usize,
                         name: &str,
                         other: &[f32],
                         emb_first: bool| {
            for i in 0..len {
                let old = params[i];
                params[i] = old + h;
                let up = if emb_first {
                    loss(params, other, &mut s)
                } else {
                    loss(other, params, &mut s)
                };
                params[i] = old - h;
                let down = if emb_first {
                    loss(params, other, &mut s)
                } else {
                    loss(other, params, &mut s)
                };
                params[i] = old;
                let fd = (up - down) / (2.0 * f64::from(h));
                assert!(
                    (fd - f64::from(grads[i])).abs() < 1e-3,
                    "{name} {i}: {fd} vs {}",
                    grads[i]
                );
            }
        };
        let len = emb.len();
        check(&mut emb, &ge, len, "emb", &dense, true);
        check(&mut dense, &gd, shape.dense_len(), "dense", &emb, false);
    }
}
