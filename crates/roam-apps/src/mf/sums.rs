//! The loss sums of an epoch: per-node accumulators that the node's workers add to, in fixed
//! point, before one of them contributes the node's totals to the cluster-wide sums.
//!
//! Invariant: sums are exact and independent of the order of workers and nodes (fixed point
//! with a cap that 256 workers' contributions cannot overflow); a non-finite or too large
//! figure sets the non-finite flag instead of corrupting the sum.

use std::sync::atomic::{AtomicU64, Ordering};

use super::train::Loss;

/// Fixed-point scale of loss sums: exact, order-independent sums over workers.
const SCALE: f64 = 65536.0;
/// Largest per-worker contribution: 256 workers of these still fit in a `u64`.
const CAP: u64 = 1 << 55;

/// Per-node accumulators the node's workers add to before one of them contributes the
/// node's total to the cluster-wide sums.
#[derive(Debug, Default)]
pub struct NodeSums {
    vals: [AtomicU64; SUMS],
}

/// Counters in [`NodeSums`] (and the cluster-wide sums): online sse, online reg, points,
/// non-finite flag, train sse, train points, test sse, test points.
pub const SUMS: usize = 8;

/// Converts a non-negative loss sum to fixed point; `None` if it is not finite or too large.
fn fixed(x: f64) -> Option<u64> {
    let scaled = x * SCALE;
    (scaled.is_finite() && scaled >= 0.0 && scaled < CAP as f64).then(|| scaled.round() as u64)
}

/// Converts a fixed-point sum back.
pub fn unfixed(x: u64) -> f64 {
    x as f64 / SCALE
}

impl NodeSums {
    /// Adds one worker's epoch figures (`train`/`test` evaluation results if evaluated).
    pub fn add(&self, online: Loss, train: Option<Loss>, test: Option<Loss>) {
        let mut bad = 0;
        let mut fx = |x: f64| {
            fixed(x).unwrap_or_else(|| {
                bad = 1;
                0
            })
        };
        let (train, test) = (train.unwrap_or_default(), test.unwrap_or_default());
        let vals = [
            fx(online.sse),
            fx(online.reg),
            online.points,
            0,
            fx(train.sse),
            train.points,
            fx(test.sse),
            test.points,
        ];
        for (slot, v) in self.vals.iter().zip(vals) {
            slot.fetch_add(v, Ordering::Relaxed);
        }
        self.vals[3].fetch_add(bad, Ordering::Relaxed);
    }

    /// Takes the node's totals and resets them.
    pub fn take(&self) -> [u64; SUMS] {
        std::array::from_fn(|i| self.vals[i].swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_sums_round_trip_and_flag_overflow() {
        let sums = NodeSums::default();
        sums.add(
            Loss {
                sse: 1.5,
                reg: 0.25,
                points: 3,
            },
            None,
            Some(Loss {
                sse: 2.0,
                reg: 0.0,
                points: 1,
            }),
        );
        sums.add(
            Loss {
                sse: 0.5,
                reg: 0.0,
                points: 1,
            },
            None,
            None,
        );
        let t = sums.take();
        assert_eq!(
            (unfixed(t[0]), unfixed(t[1]), t[2], t[3], t[7]),
            (2.0, 0.25, 4, 0, 1)
        );
        assert_eq!(sums.take(), [0; SUMS]);
        sums.add(
            Loss {
                sse: f64::NAN,
                reg: 0.0,
                points: 1,
            },
            None,
            None,
        );
        assert_eq!(sums.take()[3], 1);
    }
}
