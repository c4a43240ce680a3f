//! Sampling distributions over a key support: which keys a sampler may draw and with what
//! probability.
//!
//! A [`Support`] is an arithmetic progression of keys (`first`, `first + stride`, …), so that
//! interleaved layouts (word2vec's output vectors at odd keys, entities after relations) need no
//! key list. A [`Distribution`] puts probabilities on the support's positions: uniform,
//! log-uniform (Zipf-like, TensorFlow's `log_uniform_candidate_sampler`), or a weighted table
//! drawn in O(1) by the alias method (`alias.rs`).
//!
//! Invariants: a built distribution only draws positions below `support.len`, and
//! [`Distribution::probability`] is the exact probability of each draw (the statistical tests
//! compare against it).

use std::sync::Arc;

use rand::Rng;

use super::alias::AliasTable;
use crate::id::Key;

/// The keys a distribution draws from: `first + i * stride` for `i` in `0..len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Support {
    /// The key of position 0.
    pub first: Key,
    /// The distance between consecutive keys (at least 1).
    pub stride: u64,
    /// Number of keys.
    pub len: u64,
}

impl Support {
    /// The contiguous keys `range`.
    pub fn range(range: std::ops::Range<Key>) -> Self {
        Self {
            first: range.start,
            stride: 1,
            len: range.end.saturating_sub(range.start),
        }
    }

    /// The key at position `i`.
    #[inline]
    pub fn key(&self, i: u64) -> Key {
        self.first + i * self.stride
    }

    /// The position of `key`, if it is in the support.
    pub fn position(&self, key: Key) -> Option<u64> {
        let off = key.checked_sub(self.first)?;
        (off % self.stride == 0 && off / self.stride < self.len).then_some(off / self.stride)
    }

    /// The support's last key, `None` when it is empty or does not fit in a key.
    pub fn last(&self) -> Option<Key> {
        let span = (self.len.checked_sub(1)?).checked_mul(self.stride)?;
        self.first.checked_add(span)
    }
}

/// Which probabilities a sampler puts on its support. Build with the constructors, which
/// validate.
#[derive(Clone, Debug)]
pub struct Distribution {
    support: Support,
    shape: Shape,
}

#[derive(Clone, Debug)]
enum Shape {
    Uniform,
    /// P(i) = ln((i + 2) / (i + 1)) / ln(len + 1).
    LogUniform {
        ln_len1: f64,
    },
    Weighted {
        alias: Arc<AliasTable>,
        weights: Arc<[f64]>,
        total: f64,
    },
}

/// Why a distribution cannot be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DistributionError {
    /// No key to draw.
    #[error("the support is empty")]
    Empty,
    /// A stride of zero names one key many times.
    #[error("the support's stride is 0")]
    ZeroStride,
    /// The support's last key does not fit in 64 bits.
    #[error("the support (first {first}, stride {stride}, {len} keys) overflows the key type")]
    Overflow {
        /// First key.
        first: Key,
        /// Stride.
        stride: u64,
        /// Keys.
        len: u64,
    },
    /// A weight that is negative, NaN or infinite.
    #[error("weight {index} is {weight}; weights must be finite and non-negative")]
    BadWeight {
        /// Its position.
        index: usize,
        /// The weight.
        weight: f64,
    },
    /// Weights summing to zero.
    #[error("the weights sum to zero")]
    ZeroWeights,
    /// More weights than the alias table supports.
    #[error("{len} weights; at most {max} are supported")]
    TooManyWeights {
        /// Weights given.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl Distribution {
    /// Every key of `support` equally likely.
    pub fn uniform(support: Support) -> Result<Self, DistributionError> {
        check(&support)?;
        Ok(Self {
            support,
            shape: Shape::Uniform,
        })
    }

    /// Position `i` of `support` with probability `ln((i + 2) / (i + 1)) / ln(len + 1)`: the
    /// first keys are the likeliest, as for vocabularies sorted by frequency.
    pub fn log_uniform(support: Support) -> Result<Self, DistributionError> {
        check(&support)?;
        Ok(Self {
            support,
            shape: Shape::LogUniform {
                ln_len1: ((support.len + 1) as f64).ln(),
            },
        })
    }

    /// Position `i` of the keys `first + i * stride` with probability `weights[i] / Σ weights`
    /// (e.g. unigram counts^0.75 for word2vec's negatives).
    pub fn weighted(first: Key, stride: u64, weights: Vec<f64>) -> Result<Self, DistributionError> {
        let support = Support {
            first,
            stride,
            len: weights.len() as u64,
        };
        check(&support)?;
        let max = u32::MAX as usize;
        if weights.len() > max {
            return Err(DistributionError::TooManyWeights {
                len: weights.len(),
                max,
            });
        }
        if let Some((index, &weight)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return Err(DistributionError::BadWeight { index, weight });
        }
        let total: f64 = weights.iter().sum();
        if total <= 0.0 || !total.is_finite() {
            return Err(DistributionError::ZeroWeights);
        }
        let alias = AliasTable::new(&weights);
        Ok(Self {
            support,
            shape: Shape::Weighted {
                alias: Arc::new(alias),
                weights: weights.into(),
                total,
            },
        })
    }

    /// The keys drawn from.
    pub fn support(&self) -> &Support {
        &self.support
    }

    /// A short name of the shape: `uniform`, `log-uniform` or `weighted`.
    pub fn shape_name(&self) -> &'static str {
        match self.shape {
            Shape::Uniform => "uniform",
            Shape::LogUniform { .. } => "log-uniform",
            Shape::Weighted { .. } => "weighted",
        }
    }

    /// Draws one position of the support.
    #[inline]
    pub fn draw_position(&self, rng: &mut impl Rng) -> u64 {
        let len = self.support.len;
        match &self.shape {
            Shape::Uniform => rng.random_range(0..len),
            Shape::LogUniform { ln_len1 } => {
                // Inverse CDF: P(position < i) = ln(i + 1) / ln(len + 1).
                let u: f64 = rng.random();
                let i = ((u * ln_len1).exp() - 1.0).floor() as u64;
                i.min(len - 1)
            }
            Shape::Weighted { alias, .. } => u64::from(alias.sample(rng)),
        }
    }

    /// Draws one key.
    #[inline]
    pub fn draw(&self, rng: &mut impl Rng) -> Key {
        self.support.key(self.draw_position(rng))
    }

    /// The probability of drawing position `i` (0 outside the support); for a weighted
    /// distribution, up to the alias table's 2^-32 rounding.
    pub fn probability(&self, i: u64) -> f64 {
        if i >= self.support.len {
            return 0.0;
        }
        match &self.shape {
            Shape::Uniform => 1.0 / self.support.len as f64,
            Shape::LogUniform { ln_len1 } => ((i + 2) as f64 / (i + 1) as f64).ln() / ln_len1,
            Shape::Weighted { weights, total, .. } => weights[i as usize] / total,
        }
    }

    /// Whether position `i` has a non-zero probability.
    #[inline]
    pub fn can_draw(&self, i: u64) -> bool {
        match &self.shape {
            Shape::Weighted { weights, .. } => weights.get(i as usize).is_some_and(|&w| w > 0.0),
            _ => i < self.support.len,
        }
    }

    /// Positions with a non-zero probability (what sampling without replacement can reach).
    pub fn reachable(&self) -> u64 {
        match &self.shape {
            Shape::Weighted { weights, .. } => weights.iter().filter(|&&w| w > 0.0).count() as u64,
            _ => self.support.len,
        }
    }
}

fn check(support: &Support) -> Result<(), DistributionError> {
    if support.len == 0 {
        return Err(DistributionError::Empty);
    }
    if support.stride == 0 {
        return Err(DistributionError::ZeroStride);
    }
    if support.last().is_none() {
        return Err(DistributionError::Overflow {
            first: support.first,
            stride: support.stride,
            len: support.len,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    #[test]
    fn supports_map_positions_and_keys_both_ways() {
        let s = Support {
            first: 7,
            stride: 2,
            len: 5,
        };
        assert_eq!(s.key(0), 7);
        assert_eq!(s.key(4), 15);
        assert_eq!(s.last(), Some(15));
        assert_eq!(s.position(11), Some(2));
        assert_eq!(s.position(12), None, "between two keys");
        assert_eq!(s.position(17), None, "past the end");
        assert_eq!(s.position(5), None, "before the start");
        assert_eq!(Support::range(3..3).len, 0);
    }

    #[test]
    fn bad_distributions_are_refused_with_the_reason() {
        assert_eq!(
            Distribution::uniform(Support::range(5..5)).unwrap_err(),
            DistributionError::Empty
        );
        let zero = Support {
            first: 0,
            stride: 0,
            len: 3,
        };
        assert_eq!(
            Distribution::uniform(zero).unwrap_err(),
            DistributionError::ZeroStride
        );
        let huge = Support {
            first: u64::MAX - 3,
            stride: 2,
            len: 4,
        };
        assert!(matches!(
            Distribution::log_uniform(huge),
            Err(DistributionError::Overflow { .. })
        ));
        assert_eq!(
            Distribution::weighted(0, 1, vec![1.0, -2.0]).unwrap_err(),
            DistributionError::BadWeight {
                index: 1,
                weight: -2.0
            }
        );
        assert!(matches!(
            Distribution::weighted(0, 1, vec![1.0, f64::NAN]),
            Err(DistributionError::BadWeight { index: 1, .. })
        ));
        assert_eq!(
            Distribution::weighted(0, 1, vec![0.0, 0.0]).unwrap_err(),
            DistributionError::ZeroWeights
        );
    }

    #[test]
    fn probabilities_sum_to_one_and_draws_stay_in_the_support() {
        let mut rng = SmallRng::seed_from_u64(1);
        let support = Support {
            first: 10,
            stride: 3,
            len: 50,
        };
        let weights: Vec<f64> = (0..50).map(|i| f64::from(i % 7)).collect();
        for d in [
            Distribution::uniform(support).unwrap(),
            Distribution::log_uniform(support).unwrap(),
            Distribution::weighted(10, 3, weights).unwrap(),
        ] {
            let total: f64 = (0..50).map(|i| d.probability(i)).sum();
            assert!((total - 1.0).abs() < 1e-12, "{}: {total}", d.shape_name());
            assert_eq!(d.probability(50), 0.0);
            for _ in 0..10_000 {
                let key = d.draw(&mut rng);
                let i = support.position(key).expect("a key of the support");
                assert!(d.probability(i) > 0.0, "drew an impossible key {key}");
            }
        }
    }
}
