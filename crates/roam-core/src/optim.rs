//! Server-side optimizers: what `push_gradients` does to a key's record where the record lives.
//!
//! An [`Optimizer`] is chosen once per key space (it fixes the record layout, see
//! [`Optimizer::layout`]) and validated before any node starts. Its state lives in the hidden
//! part of each record, right after the visible values, so it moves with relocation, is saved by
//! checkpoints and is never returned by a pull. [`Optimizer::step`] updates one record in place
//! from one gradient; [`Optimizer::step_sums`] from an aggregate of several (their sum and sum
//! of squares, `push_gradient_sums` and replicas' accumulators); the store calls them under the
//! key's latch, exactly where a push would add.
//!
//! Hidden state per record of `len` visible values (zero-initialised, like every new record):
//!
//! | optimizer | hidden state                                  | layout (per value, per key) |
//! |-----------|-----------------------------------------------|-----------------------------|
//! | SGD       | none                                          | (0, 0)                      |
//! | Adagrad   | `acc[len]` (sum of squared gradients)         | (1, 0)                      |
//! | Adam      | `m[len]`, `v[len]`, step count `t` (as `f32`) | (2, 1)                      |
//! | FTRL      | `z[len]`, `n[len]`                            | (2, 0)                      |
//!
//! Invariants: `step` and `step_sums` are pure functions of (record, gradient or aggregate,
//! hyper-parameters): no clock, no randomness, so every node applying the same gradients in the
//! same order gets the same bits.
//! Adam's step count is an `f32`: exact up to 2^24 steps of one row, after which it stops
//! growing, when both bias corrections are 1 to within `f32` anyway.

use crate::keyspace::RecordLayout;

/// An optimizer and its hyper-parameters. See the module docs for the state it keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// `w -= lr·g`.
    Sgd {
        /// Learning rate.
        lr: f32,
    },
    /// `acc += g²; w -= lr·g / sqrt(acc + eps)` (eps under the root, as in Lapse's KGE).
    Adagrad {
        /// Learning rate.
        lr: f32,
        /// Added to the accumulator under the square root.
        eps: f32,
    },
    /// Adam with bias correction from a per-row step count:
    /// `t += 1; m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
    /// w -= lr·(m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)`.
    Adam {
        /// Learning rate.
        lr: f32,
        /// Decay of the first moment, in `[0, 1)`.
        beta1: f32,
        /// Decay of the second moment, in `[0, 1)`.
        beta2: f32,
        /// Added to the root of the second moment.
        eps: f32,
    },
    /// FTRL-Proximal (McMahan et al. 2013), per coordinate:
    /// `σ = (sqrt(n + g²) − sqrt(n)) / alpha; z += g − σ·w; n += g²;
    /// w = 0 if |z| ≤ l1, else −(z − sign(z)·l1) / ((beta + sqrt(n)) / alpha + l2)`.
    Ftrl {
        /// Learning-rate scale.
        alpha: f32,
        /// Learning-rate smoothing.
        beta: f32,
        /// L1 regularisation (sparsity).
        l1: f32,
        /// L2 regularisation.
        l2: f32,
    },
}

/// Why an optimizer configuration was refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum OptimizerError {
    /// A hyper-parameter is outside its valid range.
    #[error("optimizer {optimizer}: {param} = {value} is invalid; it must be {rule}")]
    Invalid {
        /// The optimizer's name.
        optimizer: &'static str,
        /// The hyper-parameter.
        param: &'static str,
        /// The value given.
        value: f32,
        /// What it must be.
        rule: &'static str,
    },
    /// An unknown optimizer name (from a command line or Python).
    #[error("unknown optimizer {0:?}; expected sgd, adagrad, adam or ftrl")]
    Unknown(String),
    /// The key space already has a hand-made record layout.
    #[error("an optimizer sets the record layout itself; do not also set record_layout")]
    LayoutConflict,
}

impl Optimizer {
    /// SGD with learning rate `lr`.
    pub fn sgd(lr: f32) -> Self {
        Self::Sgd { lr }
    }

    /// Adagrad with learning rate `lr` and `eps = 1e-6`.
    pub fn adagrad(lr: f32) -> Self {
        Self::Adagrad { lr, eps: 1e-6 }
    }

    /// Adam with learning rate `lr` and the usual `β1 = 0.9, β2 = 0.999, eps = 1e-8`.
    pub fn adam(lr: f32) -> Self {
        Self::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }

    /// FTRL-Proximal with `alpha`, and `beta = 1, l1 = 0, l2 = 0`.
    pub fn ftrl(alpha: f32) -> Self {
        Self::Ftrl {
            alpha,
            beta: 1.0,
            l1: 0.0,
            l2: 0.0,
        }
    }

    /// The optimizer's name (`sgd`, `adagrad`, `adam`, `ftrl`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sgd { .. } => "sgd",
            Self::Adagrad { .. } => "adagrad",
            Self::Adam { .. } => "adam",
            Self::Ftrl { .. } => "ftrl",
        }
    }

    /// Builds an optimizer from its name and `(name, value)` hyper-parameters, the others at
    /// their defaults (see the constructors; `lr`/`alpha` default to 0.01), then validates it.
    pub fn from_parts(kind: &str, params: &[(&str, f32)]) -> Result<Self, OptimizerError> {
        let lr = 0.01;
        let mut opt = match kind.to_ascii_lowercase().as_str() {
            "sgd" => Self::sgd(lr),
            "adagrad" => Self::adagrad(lr),
            "adam" => Self::adam(lr),
            "ftrl" => Self::ftrl(lr),
            _ => return Err(OptimizerError::Unknown(kind.to_owned())),
        };
        for &(name, value) in params {
            let slot = match (&mut opt, name) {
                (Self::Sgd { lr: p }, "lr")
                | (Self::Adagrad { lr: p, .. }, "lr")
                | (Self::Adam { lr: p, .. }, "lr")
                | (Self::Adagrad { eps: p, .. }, "eps")
                | (Self::Adam { eps: p, .. }, "eps")
                | (Self::Adam { beta1: p, .. }, "beta1")
                | (Self::Adam { beta2: p, .. }, "beta2")
                | (Self::Ftrl { alpha: p, .. }, "alpha" | "lr")
                | (Self::Ftrl { beta: p, .. }, "beta")
                | (Self::Ftrl { l1: p, .. }, "l1")
                | (Self::Ftrl { l2: p, .. }, "l2") => p,
                _ => {
                    return Err(OptimizerError::Invalid {
                        optimizer: opt.name(),
                        param: leak_name(name),
                        value,
                        rule: "a parameter of this optimizer",
                    });
                }
            };
            *slot = value;
        }
        opt.validate()?;
        Ok(opt)
    }

    /// Checks every hyper-parameter's range.
    pub fn validate(&self) -> Result<(), OptimizerError> {
        let name = self.name();
        let check = |param, value: f32, ok: bool, rule| {
            if ok && value.is_finite() {
                Ok(())
            } else {
                Err(OptimizerError::Invalid {
                    optimizer: name,
                    param,
                    value,
                    rule,
                })
            }
        };
        const POS: &str = "finite and > 0";
        const NONNEG: &str = "finite and >= 0";
        const BETA: &str = "in [0, 1)";
        match *self {
            Self::Sgd { lr } => check("lr", lr, lr > 0.0, POS),
            Self::Adagrad { lr, eps } => {
                check("lr", lr, lr > 0.0, POS)?;
                check("eps", eps, eps > 0.0, POS)
            }
            Self::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                check("lr", lr, lr > 0.0, POS)?;
                check("beta1", beta1, (0.0..1.0).contains(&beta1), BETA)?;
                check("beta2", beta2, (0.0..1.0).contains(&beta2), BETA)?;
                check("eps", eps, eps > 0.0, POS)
            }
            Self::Ftrl {
                alpha,
                beta,
                l1,
                l2,
            } => {
                check("alpha", alpha, alpha > 0.0, POS)?;
                check("beta", beta, beta >= 0.0, NONNEG)?;
                check("l1", l1, l1 >= 0.0, NONNEG)?;
                check("l2", l2, l2 >= 0.0, NONNEG)
            }
        }
    }

    /// The record layout this optimizer's state needs (module docs).
    pub fn layout(&self) -> RecordLayout {
        let (hidden_per_value, hidden_per_key) = match self {
            Self::Sgd { .. } => (0, 0),
            Self::Adagrad { .. } => (1, 0),
            Self::Adam { .. } => (2, 1),
            Self::Ftrl { .. } => (2, 0),
        };
        RecordLayout {
            hidden_per_value,
            hidden_per_key,
        }
    }

    /// Whether the update is a fixed linear function of the gradient (SGD): then gradients
    /// can be summed before they are applied, e.g. in a replica's delta.
    pub fn is_linear(&self) -> bool {
        matches!(self, Self::Sgd { .. })
    }

    /// Applies gradient `g` to a record: `w` its visible values (`g.len()` of them), `state`
    /// its hidden part (the layout's length for `w.len()` values).
    #[inline]
    pub fn step(&self, w: &mut [f32], state: &mut [f32], g: &[f32]) {
        let len = g.len();
        let w = &mut w[..len];
        match *self {
            Self::Sgd { lr } => {
                for (w, g) in w.iter_mut().zip(g) {
                    *w -= lr * g;
                }
            }
            Self::Adagrad { lr, eps } => {
                let acc = &mut state[..len];
                for ((w, a), &g) in w.iter_mut().zip(acc.iter_mut()).zip(g) {
                    *a += g * g;
                    *w -= lr * g / (*a + eps).sqrt();
                }
            }
            Self::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                let (m, rest) = state.split_at_mut(len);
                let (v, t) = rest.split_at_mut(len);
                t[0] += 1.0;
                let step = t[0] as i32;
                // Bias corrections once per row, folded into one scale and the eps.
                let c1 = 1.0 - beta1.powi(step);
                let c2 = (1.0 - beta2.powi(step)).sqrt();
                let scale = lr * c2 / c1;
                let eps = eps * c2;
                for (((w, m), v), &g) in w.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
                    *m = beta1 * *m + (1.0 - beta1) * g;
                    *v = beta2 * *v + (1.0 - beta2) * g * g;
                    *w -= scale * *m / (v.sqrt() + eps);
                }
            }
            Self::Ftrl {
                alpha,
                beta,
                l1,
                l2,
            } => {
                let (z, n) = state.split_at_mut(len);
                let n = &mut n[..len];
                for (((w, z), n), &g) in w.iter_mut().zip(z.iter_mut()).zip(n.iter_mut()).zip(g) {
                    let n_new = *n + g * g;
                    let sigma = (n_new.sqrt() - n.sqrt()) / alpha;
                    *z += g - sigma * *w;
                    *n = n_new;
                    *w = if z.abs() <= l1 {
                        0.0
                    } else {
                        -(*z - z.signum() * l1) / ((beta + n_new.sqrt()) / alpha + l2)
                    };
                }
            }
        }
    }
}

impl Optimizer {
    /// Applies an *aggregate* of gradients to a record: `sums` the sum of `n ≥ 1` gradients
    /// of the key, `squares` the sum of their squares (per value). What pushes that gather a
    /// key's gradients before they travel use (a worker's pool of remote rows,
    /// `Worker::push_gradient_sums`): one step that stands for `n` in a row.
    ///
    /// - SGD: `w -= lr·sum`, exactly the `n` steps.
    /// - Adagrad: `acc += squares` (exactly the `n` steps' accumulator), and `w` moves as `n̂`
    ///   steps of the mean gradient would, `n̂ = max(1, sum²/squares)` (the count when the
    ///   gradients agree; 1 when they cancel): `w -= lr·sum/sqrt(acc + eps)` for `n̂ ≤ 1`
    ///   (one gradient is exactly its own step), else the midpoint-rule integral of those steps,
    ///   `w -= lr·2·sum / (sqrt(a + eps + squares + q/2) + sqrt(a + eps + q/2))` with `a` the
    ///   accumulator before and `q = squares/n̂`. One sum of `n` equal gradients then moves
    ///   about `2√n` steps' worth, as `n` steps do; a plain step with the sum would move one
    ///   and add `n²·g²` to the accumulator, which shrinks every later step of the key.
    /// - FTRL: `n += squares` and `σ` from it; `z += sum − σ·w` (the per-coordinate learning
    ///   rate is the `n` steps' own).
    /// - Adam: one step with the sum (`squares` unused): its second moment is a running mean,
    ///   not a sum, so there is no count-free way to fold `n` steps into one.
    ///
    /// A negative or NaN square counts as 0 (the front refuses them from workers; this keeps
    /// a peer's bad frame from poisoning the state).
    #[inline]
    pub fn step_sums(&self, w: &mut [f32], state: &mut [f32], sums: &[f32], squares: &[f32]) {
        let len = sums.len();
        let (w, squares) = (&mut w[..len], &squares[..len]);
        match *self {
            Self::Sgd { .. } | Self::Adam { .. } => self.step(w, state, sums),
            Self::Adagrad { lr, eps } => {
                let acc = &mut state[..len];
                for (((w, a), &s), &q2) in w.iter_mut().zip(acc.iter_mut()).zip(sums).zip(squares) {
                    // A sum of squares is never negative: a bad one (a peer's, say) would make
                    // the accumulator, and every later step of the row, NaN.
                    let q2 = q2.max(0.0);
                    let before = *a + eps;
                    *a += q2;
                    let after = *a + eps;
                    let agree = s * s;
                    *w -= if agree <= q2 {
                        // One gradient (or ones that cancel): exactly `step`'s arithmetic.
                        lr * s / after.sqrt()
                    } else {
                        // n̂ = sum²/squares, q = squares/n̂ = squares²/sum².
                        // (`q2 / agree` < 1 first: no overflow for huge squares.)
                        let half_q = 0.5 * q2 * (q2 / agree);
                        // sqrt(x + Q) − sqrt(x) = Q / (sqrt(x + Q) + sqrt(x)): no
                        // cancellation when the accumulator dwarfs the squares.
                        lr * 2.0 * s / ((after + half_q).sqrt() + (before + half_q).sqrt())
                    };
                }
            }
            Self::Ftrl {
                alpha,
                beta,
                l1,
                l2,
            } => {
                let (z, n) = state.split_at_mut(len);
                let n = &mut n[..len];
                for ((((w, z), n), &s), &q2) in w
                    .iter_mut()
                    .zip(z.iter_mut())
                    .zip(n.iter_mut())
                    .zip(sums)
                    .zip(squares)
                {
                    let n_new = *n + q2.max(0.0);
                    let sigma = (n_new.sqrt() - n.sqrt()) / alpha;
                    *z += s - sigma * *w;
                    *n = n_new;
                    *w = if z.abs() <= l1 {
                        0.0
                    } else {
                        -(*z - z.signum() * l1) / ((beta + n_new.sqrt()) / alpha + l2)
                    };
                }
            }
        }
    }
}

/// The static name of a hyper-parameter for an error (the names of the valid ones; any other
/// is reported as "unknown").
fn leak_name(name: &str) -> &'static str {
    const KNOWN: [&str; 8] = ["lr", "eps", "beta1", "beta2", "alpha", "beta", "l1", "l2"];
    KNOWN
        .into_iter()
        .find(|k| *k == name)
        .unwrap_or("an unknown parameter")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Textbook per-coordinate loops, written independently of `step` (f64 where the formula
    /// is stated in reals), to compare against.
    fn reference(opt: &Optimizer, w: &mut [f32], state: &mut [f32], g: &[f32]) {
        let len = g.len();
        match *opt {
            Optimizer::Sgd { lr } => (0..len).for_each(|i| w[i] -= lr * g[i]),
            Optimizer::Adagrad { lr, eps } => {
                for i in 0..len {
                    state[i] += g[i] * g[i];
                    w[i] -= lr * g[i] / (state[i] + eps).sqrt();
                }
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                state[2 * len] += 1.0;
                let t = state[2 * len] as i32;
                for i in 0..len {
                    let (b1, b2) = (f64::from(beta1), f64::from(beta2));
                    let m = b1 * f64::from(state[i]) + (1.0 - b1) * f64::from(g[i]);
                    let v = b2 * f64::from(state[len + i])
                        + (1.0 - b2) * f64::from(g[i]) * f64::from(g[i]);
                    state[i] = m as f32;
                    state[len + i] = v as f32;
                    let m_hat = m / (1.0 - b1.powi(t));
                    let v_hat = v / (1.0 - b2.powi(t));
                    let w_new =
                        f64::from(w[i]) - f64::from(lr) * m_hat / (v_hat.sqrt() + f64::from(eps));
                    w[i] = w_new as f32;
                }
            }
            Optimizer::Ftrl {
                alpha,
                beta,
                l1,
                l2,
            } => {
                for i in 0..len {
                    let (z, n) = (f64::from(state[i]), f64::from(state[len + i]));
                    let gi = f64::from(g[i]);
                    let n_new = n + gi * gi;
                    let sigma = (n_new.sqrt() - n.sqrt()) / f64::from(alpha);
                    let z_new = z + gi - sigma * f64::from(w[i]);
                    state[i] = z_new as f32;
                    state[len + i] = n_new as f32;
                    w[i] = if z_new.abs() <= f64::from(l1) {
                        0.0
                    } else {
                        (-(z_new - z_new.signum() * f64::from(l1))
                            / ((f64::from(beta) + n_new.sqrt()) / f64::from(alpha) + f64::from(l2)))
                            as f32
                    };
                }
            }
        }
    }

    fn all() -> [Optimizer; 5] {
        [
            Optimizer::sgd(0.1),
            Optimizer::adagrad(0.1),
            Optimizer::adam(0.01),
            Optimizer::ftrl(0.1),
            Optimizer::Ftrl {
                alpha: 0.05,
                beta: 1.0,
                l1: 0.01,
                l2: 0.1,
            },
        ]
    }

    /// A deterministic gradient sequence (no randomness needed: signs and sizes vary).
    fn grad(step: usize, i: usize) -> f32 {
        let x = ((step * 7 + i * 13) % 23) as f32 - 11.0;
        x / 7.0
    }

    #[test]
    fn step_matches_the_reference_loop() {
        let len = 5;
        for opt in all() {
            let hidden = opt.layout().record_len(len) - len;
            let (mut w, mut s) = (vec![0.25f32; len], vec![0.0f32; hidden]);
            let (mut rw, mut rs) = (w.clone(), s.clone());
            for step in 0..200 {
                let g: Vec<f32> = (0..len).map(|i| grad(step, i)).collect();
                opt.step(&mut w, &mut s, &g);
                reference(&opt, &mut rw, &mut rs, &g);
                for i in 0..len {
                    let tol = 1e-4 * (1.0 + rw[i].abs());
                    assert!(
                        (w[i] - rw[i]).abs() <= tol,
                        "{} step {step} value {i}: {} vs reference {}",
                        opt.name(),
                        w[i],
                        rw[i]
                    );
                }
                if matches!(opt, Optimizer::Sgd { .. } | Optimizer::Adagrad { .. }) {
                    // Same f32 operations in the same order: bit-exact.
                    assert_eq!(w, rw, "{} step {step}", opt.name());
                    assert_eq!(s, rs, "{} step {step}", opt.name());
                }
            }
        }
    }

    #[test]
    fn an_aggregate_of_one_gradient_is_that_gradients_step() {
        let len = 5;
        for opt in all() {
            let hidden = opt.layout().record_len(len) - len;
            let (mut w, mut s) = (vec![0.25f32; len], vec![0.0f32; hidden]);
            let (mut aw, mut as_) = (w.clone(), s.clone());
            for step in 0..50 {
                let g: Vec<f32> = (0..len).map(|i| grad(step, i)).collect();
                let squares: Vec<f32> = g.iter().map(|g| g * g).collect();
                opt.step(&mut w, &mut s, &g);
                opt.step_sums(&mut aw, &mut as_, &g, &squares);
                assert_eq!((&w, &s), (&aw, &as_), "{} step {step}", opt.name());
            }
        }
    }

    /// Adagrad from several accumulator levels: `n` equal gradients as one aggregate end with
    /// the accumulator of `n` steps and move within 3 % of them (a step with their sum moves
    /// about `1/(2√n)` as far); SGD's aggregate is the `n` steps; FTRL's accumulator is theirs.
    #[test]
    fn an_aggregate_of_n_gradients_moves_like_n_steps() {
        for start in [0.0f32, 0.01, 1.0, 100.0] {
            for n in [2usize, 4, 16, 64, 1000] {
                let g = 0.3f32;
                let opt = Optimizer::adagrad(0.1);
                let (mut w, mut acc) = ([0.0f32], [start]);
                for _ in 0..n {
                    opt.step(&mut w, &mut acc, &[g]);
                }
                let sum = g * n as f32;
                let squares = g * g * n as f32;
                let (mut aw, mut aacc) = ([0.0f32], [start]);
                opt.step_sums(&mut aw, &mut aacc, &[sum], &[squares]);
                let rel = |a: f32, b: f32| (a - b).abs() / b.abs();
                assert!(rel(aacc[0], acc[0]) < 1e-4, "acc {aacc:?} vs {acc:?}");
                assert!(
                    rel(aw[0], w[0]) < 0.03,
                    "start {start}, n {n}: moved {} vs {} in {n} steps",
                    aw[0],
                    w[0]
                );
                let (mut sw, mut sacc) = ([0.0f32], [start]);
                opt.step(&mut sw, &mut sacc, &[sum]);
                if start < 1.0 && n >= 16 {
                    assert!(
                        sw[0].abs() < 0.5 * w[0].abs(),
                        "the sum's one step moves less"
                    );
                }
            }
        }
        let sgd = Optimizer::sgd(0.5);
        let mut w = [1.0f32, 2.0];
        sgd.step_sums(&mut w, &mut [], &[2.0, -4.0], &[4.0, 16.0]);
        assert_eq!(w, [0.0, 4.0]);
        let ftrl = Optimizer::ftrl(0.1);
        let (mut w, mut state) = ([0.0f32], [0.0f32, 0.0]);
        ftrl.step_sums(&mut w, &mut state, &[0.6], &[0.2]);
        assert_eq!(state[1], 0.2, "n grows by the squares");
        // σ·w = 0 from w = 0: z is the sum; w = −z / ((β + √n)/α) with β = 1, α = 0.1.
        assert_eq!(state[0], 0.6);
        let want = -0.6 / ((1.0 + 0.2f32.sqrt()) / 0.1);
        assert!((w[0] - want).abs() < 1e-6, "{} vs {want}", w[0]);
        // Bad squares (a peer's) count as zero instead of poisoning the state.
        let (mut w, mut acc) = ([0.0f32], [1.0f32]);
        opt_nan_free(&mut w, &mut acc);
    }

    fn opt_nan_free(w: &mut [f32; 1], acc: &mut [f32; 1]) {
        let opt = Optimizer::adagrad(0.1);
        for bad in [-4.0, f32::NAN] {
            opt.step_sums(w, acc, &[1.0], &[bad]);
            assert!(
                w[0].is_finite() && acc[0] == 1.0,
                "square {bad}: {w:?} {acc:?}"
            );
        }
    }

    #[test]
    fn adam_counts_steps_per_row() {
        let opt = Optimizer::adam(0.1);
        let mut w = [0.0f32; 2];
        let mut s = [0.0f32; 5];
        opt.step(&mut w, &mut s, &[1.0, -1.0]);
        assert_eq!(s[4], 1.0);
        // First step of Adam moves every coordinate by lr·sign(g) (bias-corrected).
        assert!(
            (w[0] + 0.1).abs() < 1e-6 && (w[1] - 0.1).abs() < 1e-6,
            "{w:?}"
        );
        opt.step(&mut w, &mut s, &[1.0, -1.0]);
        assert_eq!(s[4], 2.0);
    }

    #[test]
    fn ftrl_l1_keeps_small_weights_at_zero() {
        let opt = Optimizer::Ftrl {
            alpha: 0.1,
            beta: 1.0,
            l1: 10.0,
            l2: 0.0,
        };
        let mut w = [0.0f32; 1];
        let mut s = [0.0f32; 2];
        for _ in 0..5 {
            opt.step(&mut w, &mut s, &[0.5]);
        }
        assert_eq!(w[0], 0.0, "|z| = 2.5 <= l1");
        for _ in 0..30 {
            opt.step(&mut w, &mut s, &[0.5]);
        }
        assert!(
            w[0] < 0.0,
            "|z| > l1: a positive gradient pulls the weight down"
        );
    }

    #[test]
    fn bad_hyper_parameters_are_named() {
        let err = Optimizer::from_parts("adam", &[("beta1", 1.0)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "optimizer adam: beta1 = 1 is invalid; it must be in [0, 1)"
        );
        assert!(matches!(
            Optimizer::from_parts("sgd", &[("lr", -1.0)]),
            Err(OptimizerError::Invalid { param: "lr", .. })
        ));
        assert!(matches!(
            Optimizer::from_parts("adagrad", &[("eps", f32::NAN)]),
            Err(OptimizerError::Invalid { param: "eps", .. })
        ));
        assert!(matches!(
            Optimizer::from_parts("sgd", &[("beta1", 0.5)]),
            Err(OptimizerError::Invalid { param: "beta1", .. })
        ));
        assert_eq!(
            Optimizer::from_parts("rmsprop", &[]),
            Err(OptimizerError::Unknown("rmsprop".into()))
        );
        assert_eq!(
            Optimizer::from_parts("FTRL", &[("l1", 0.5), ("alpha", 0.2)]),
            Ok(Optimizer::Ftrl {
                alpha: 0.2,
                beta: 1.0,
                l1: 0.5,
                l2: 0.0
            })
        );
    }
}
