//! Row initializers: the values a key's record starts with when a node creates it.
//!
//! A row is created by one node only (its bucket's creator, or every node's own home keys of a
//! dense space at start), but a worker that reads an id the table has not admitted gets the
//! initializer's value without any row (`dynamic.rs`), on whichever node answers. So the value
//! of row `key` must be a pure function of `(seed, key)`: every value is drawn from a
//! counter-based generator, `mix64` of the seed, the key and the value's index, with no state
//! shared between keys or nodes. Two nodes, or one node before and after an eviction, create
//! bit-identical rows.
//!
//! Only the visible values are initialised; the hidden part (optimizer state) starts at zero,
//! as the optimizers expect.

use crate::directory::mix64;
use crate::id::Key;

/// How new rows are filled. `Zeros` is the default (roam's behaviour before initializers).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Initializer {
    /// Every value 0.
    #[default]
    Zeros,
    /// Values uniform in `[low, high)`.
    Uniform {
        /// Lower bound (inclusive).
        low: f32,
        /// Upper bound (exclusive).
        high: f32,
        /// Seed of the per-(key, index) generator.
        seed: u64,
    },
    /// Values normal with `mean` and standard deviation `std` (Box–Muller).
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
        /// Seed of the per-(key, index) generator.
        seed: u64,
    },
}

/// Why an initializer is invalid.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InitializerError {
    /// `uniform` needs finite bounds with `low < high`.
    #[error("initializer uniform({low}, {high}) is invalid: the bounds must be finite, low < high")]
    BadUniform {
        /// Lower bound given.
        low: f32,
        /// Upper bound given.
        high: f32,
    },
    /// `normal` needs a finite mean and a finite, non-negative standard deviation.
    #[error("initializer normal({mean}, {std}) is invalid: mean and std must be finite, std >= 0")]
    BadNormal {
        /// Mean given.
        mean: f32,
        /// Standard deviation given.
        std: f32,
    },
    /// An unknown name (Python's `{"kind": ...}` form).
    #[error("unknown initializer {0:?}: expected zeros, uniform or normal")]
    Unknown(String),
}

impl Initializer {
    /// Fails if a parameter is not usable.
    pub fn validate(&self) -> Result<(), InitializerError> {
        match *self {
            Self::Zeros => Ok(()),
            Self::Uniform { low, high, .. } => {
                if low.is_finite() && high.is_finite() && low < high {
                    Ok(())
                } else {
                    Err(InitializerError::BadUniform { low, high })
                }
            }
            Self::Normal { mean, std, .. } => {
                if mean.is_finite() && std.is_finite() && std >= 0.0 {
                    Ok(())
                } else {
                    Err(InitializerError::BadNormal { mean, std })
                }
            }
        }
    }

    /// Whether rows start all-zero (then creating one needs no generator).
    pub fn is_zeros(&self) -> bool {
        matches!(self, Self::Zeros)
    }

    /// Writes row `key`'s initial visible values into `out` (its length is the key's).
    pub fn fill(&self, key: Key, out: &mut [f32]) {
        match *self {
            Self::Zeros => out.fill(0.0),
            Self::Uniform { low, high, seed } => {
                let base = row_seed(seed, key);
                for (j, v) in out.iter_mut().enumerate() {
                    let u = unit(mix64(base ^ mix64(j as u64)));
                    // `u < 1`, so `low + (high - low)·u < high` up to rounding; clamp that.
                    let x = low + (high - low) * u as f32;
                    *v = if x < high { x } else { low };
                }
            }
            Self::Normal { mean, std, seed } => {
                let base = row_seed(seed, key);
                for (j, v) in out.iter_mut().enumerate() {
                    // One independent pair of draws per value (not per pair of values), so a
                    // value depends on its index only and rows of any length agree on a prefix.
                    let h = mix64(base ^ mix64(j as u64));
                    let u1 = 1.0 - unit(h); // (0, 1]: ln is finite
                    let u2 = unit(mix64(h ^ 0x9e37_79b9_7f4a_7c15));
                    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                    *v = mean + std * z as f32;
                }
            }
        }
    }

    /// Row `key`'s whole record (visible values, then zero hidden state) of `record_len`
    /// values, of which the first `len` are visible.
    pub fn record(&self, key: Key, len: usize, record_len: usize) -> Vec<f32> {
        let mut record = vec![0.0; record_len];
        self.fill(key, &mut record[..len]);
        record
    }
}

/// The generator state of one row: the seed and the key mixed so that neighbouring keys and
/// seeds give unrelated streams.
#[inline]
fn row_seed(seed: u64, key: Key) -> u64 {
    mix64(mix64(seed ^ 0x5851_f42d_4c95_7f2d) ^ key)
}

/// The top 53 bits of `h` as a float in `[0, 1)`.
#[inline]
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_a_function_of_seed_and_key() {
        let init = Initializer::Normal {
            mean: 0.5,
            std: 0.1,
            seed: 7,
        };
        let a = init.record(12345, 8, 10);
        let b = init.record(12345, 8, 10);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(&a[8..], &[0.0, 0.0], "hidden state starts at zero");
        assert_ne!(a, init.record(12346, 8, 10), "another key, another row");
        let other_seed = Initializer::Normal {
            mean: 0.5,
            std: 0.1,
            seed: 8,
        };
        assert_ne!(a, other_seed.record(12345, 8, 10));
    }

    #[test]
    fn draws_follow_their_distribution() {
        let uniform = Initializer::Uniform {
            low: -0.25,
            high: 0.75,
            seed: 1,
        };
        let normal = Initializer::Normal {
            mean: 1.0,
            std: 2.0,
            seed: 1,
        };
        let n = 20_000;
        let (mut su, mut sn, mut sn2) = (0.0f64, 0.0f64, 0.0f64);
        let mut row = [0f32; 4];
        for key in 0..n / 4 {
            uniform.fill(key, &mut row);
            for &v in &row {
                assert!((-0.25..0.75).contains(&v), "{v}");
                su += f64::from(v);
            }
            normal.fill(key, &mut row);
            for &v in &row {
                sn += f64::from(v);
                sn2 += f64::from(v) * f64::from(v);
            }
        }
        let n = n as f64;
        assert!((su / n - 0.25).abs() < 0.01, "uniform mean {}", su / n);
        let mean = sn / n;
        let var = sn2 / n - mean * mean;
        assert!((mean - 1.0).abs() < 0.05, "normal mean {mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "normal std {}", var.sqrt());
    }

    #[test]
    fn bad_parameters_are_named() {
        let bad = Initializer::Uniform {
            low: 1.0,
            high: 1.0,
            seed: 0,
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "initializer uniform(1, 1) is invalid: the bounds must be finite, low < high"
        );
        let bad = Initializer::Normal {
            mean: 0.0,
            std: -1.0,
            seed: 0,
        };
        assert!(bad.validate().is_err());
        assert!(Initializer::Zeros.validate().is_ok());
    }
}
