//! A dynamic key space's policy (issue #17): which ids get a row (admission), and when rows
//! go (a budget in rows or bytes, a TTL in time or in steps) — the settings and their checks.
//! The mechanism that applies them is `dynamic.rs`.
//!
//! Invariant: a policy that passed [`DynamicPolicy::validate`] admits at least one row and
//! sets at most one TTL.

use crate::directory::mix64;
use crate::id::Key;

/// Admission of new rows in a dynamic key space. See the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Admission {
    /// Every id gets a row on first use.
    #[default]
    All,
    /// An id gets a row once its creator has seen it `min_count` times (count-min sketch of
    /// `SKETCH_DEPTH × sketch_width` counters).
    Count {
        /// Sightings needed (1: admit at once).
        min_count: u32,
        /// Counters per sketch row (rounded up to a power of two).
        sketch_width: u32,
    },
    /// A fixed fraction `p` of the ids gets a row, chosen by a hash of `(seed, id)`.
    Probability {
        /// Fraction admitted, in `(0, 1]`.
        p: f64,
        /// Seed of the hash.
        seed: u64,
    },
}

/// Rows of the count-min sketch.
pub const SKETCH_DEPTH: usize = 4;
/// The largest sketch width (2^24 counters per row: 128 MiB in all).
pub const MAX_SKETCH_WIDTH: u32 = 1 << 24;

/// Admission and eviction of a dynamic key space. See the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DynamicPolicy {
    /// Which ids get a row.
    pub admission: Admission,
    /// The most rows this node creates and holds (`None`: unbounded).
    pub max_rows: Option<u64>,
    /// The most bytes of records (visible values and optimizer state, 4 bytes a float) this
    /// node creates and holds (`None`: unbounded): a row budget of `max_bytes / record bytes`
    /// (per table: named tables have their own dimensions). With `max_rows` too, the smaller.
    pub max_bytes: Option<u64>,
    /// Rows untouched this long (ns of the core's time) are evicted (`None`: never).
    pub ttl_ns: Option<u64>,
    /// Rows untouched for this many steps are evicted (`None`: never): a step is one tick of
    /// the node's clock, the largest of its workers' clocks (`Front::advance_clock`, which
    /// training loops call once a batch). At most one of `ttl_ns` and `ttl_steps`.
    pub ttl_steps: Option<u64>,
    /// Evicted rows are kept whole in the node's spill (`spill.rs`; a file per node in `roam`)
    /// and a later creation of the id takes its record back, instead of being discarded.
    pub spill: bool,
}

/// Why a dynamic policy is invalid.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DynamicError {
    /// Admission and eviction need a sparse key space.
    #[error("admission and eviction need a sparse (dynamic) key space, not a dense one")]
    Dense,
    /// `min_count` must be at least 1 and the sketch width in `1..=MAX_SKETCH_WIDTH`.
    #[error(
        "admission by count: min_count = {min_count} and sketch_width = {sketch_width} are invalid; \
         min_count must be >= 1 and sketch_width in 1..={MAX_SKETCH_WIDTH}"
    )]
    BadCount {
        /// Given count.
        min_count: u32,
        /// Given width.
        sketch_width: u32,
    },
    /// `p` must be in `(0, 1]`.
    #[error("admission probability p = {0} is invalid; it must be in (0, 1]")]
    BadProbability(f64),
    /// A budget of zero rows admits nothing.
    #[error("max_rows = 0 is invalid; the budget must allow at least one row")]
    ZeroBudget,
    /// A byte budget below one record admits nothing.
    #[error(
        "max_bytes = {max_bytes} is invalid; the budget must hold at least one record \
         ({record_bytes} bytes)"
    )]
    BytesBelowOneRecord {
        /// Given budget.
        max_bytes: u64,
        /// Bytes of one record (at least 4: one float, when the record is not known yet).
        record_bytes: u64,
    },
    /// A TTL below 2 ns cannot be swept in halves.
    #[error("ttl = {0} ns is invalid; it must be at least 2 ns")]
    BadTtl(u64),
    /// A TTL below 2 steps cannot be swept in halves.
    #[error("ttl_steps = {0} is invalid; it must be at least 2 steps")]
    BadTtlSteps(u64),
    /// A TTL is in time or in steps, not both.
    #[error(
        "ttl_ns (Python \"ttl\") and ttl_steps are both set; a TTL is in time or in steps, not both"
    )]
    TwoTtls,
}

impl DynamicPolicy {
    /// Fails if a parameter is not usable.
    pub fn validate(&self) -> Result<(), DynamicError> {
        match self.admission {
            Admission::All => {}
            Admission::Count {
                min_count,
                sketch_width,
            } => {
                if min_count == 0 || sketch_width == 0 || sketch_width > MAX_SKETCH_WIDTH {
                    return Err(DynamicError::BadCount {
                        min_count,
                        sketch_width,
                    });
                }
            }
            Admission::Probability { p, .. } => {
                if !(p > 0.0 && p <= 1.0) {
                    return Err(DynamicError::BadProbability(p));
                }
            }
        }
        if self.max_rows == Some(0) {
            return Err(DynamicError::ZeroBudget);
        }
        self.validate_bytes(1)?;
        if let Some(ttl) = self.ttl_ns
            && ttl < 2
        {
            return Err(DynamicError::BadTtl(ttl));
        }
        if let Some(steps) = self.ttl_steps
            && steps < 2
        {
            return Err(DynamicError::BadTtlSteps(steps));
        }
        if self.ttl_ns.is_some() && self.ttl_steps.is_some() {
            return Err(DynamicError::TwoTtls);
        }
        Ok(())
    }
}

impl DynamicPolicy {
    /// Whether rows may be evicted (a budget in rows or bytes, or a TTL in time or steps):
    /// then workers' accesses mark rows REFERENCED for the clock.
    pub fn evicts(&self) -> bool {
        self.max_rows.is_some()
            || self.max_bytes.is_some()
            || self.ttl_ns.is_some()
            || self.ttl_steps.is_some()
    }

    /// The row budget for records of `record_len` floats: the smaller of `max_rows` and
    /// `max_bytes / (4 × record_len)`; `None` when neither is set.
    pub fn row_budget(&self, record_len: usize) -> Option<u64> {
        let by_bytes = self.max_bytes.map(|b| b / (4 * record_len.max(1) as u64));
        match (self.max_rows, by_bytes) {
            (Some(r), Some(b)) => Some(r.min(b)),
            (r, b) => r.or(b),
        }
    }

    /// Fails if `max_bytes` cannot hold one record of `record_len` floats.
    pub fn validate_bytes(&self, record_len: usize) -> Result<(), DynamicError> {
        let record_bytes = 4 * record_len.max(1) as u64;
        match self.max_bytes {
            Some(max_bytes) if max_bytes < record_bytes => Err(DynamicError::BytesBelowOneRecord {
                max_bytes,
                record_bytes,
            }),
            _ => Ok(()),
        }
    }
}

/// Whether `Probability { p, seed }` admits `key`: the same answer at every node, every time.
pub fn admitted_by_hash(p: f64, seed: u64, key: Key) -> bool {
    let h = mix64(mix64(seed ^ 0xa076_1d64_78bd_642f) ^ key);
    ((h >> 11) as f64) < p * (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probability_admission_is_a_fixed_fraction() {
        let admitted = (0..100_000u64)
            .filter(|&k| admitted_by_hash(0.25, 9, k))
            .count();
        assert!((24_000..26_000).contains(&admitted), "{admitted}");
        assert!((0..1000u64).all(|k| admitted_by_hash(0.25, 9, k) == admitted_by_hash(0.25, 9, k)));
        assert!((0..1000u64).all(|k| admitted_by_hash(1.0, 9, k)));
    }

    #[test]
    fn bad_policies_are_named() {
        let bad = DynamicPolicy {
            admission: Admission::Probability { p: 0.0, seed: 0 },
            ..Default::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "admission probability p = 0 is invalid; it must be in (0, 1]"
        );
        let bad = DynamicPolicy {
            max_rows: Some(0),
            ..Default::default()
        };
        assert_eq!(bad.validate(), Err(DynamicError::ZeroBudget));
        let steps = |n| DynamicPolicy {
            ttl_steps: Some(n),
            ..Default::default()
        };
        assert_eq!(steps(1).validate(), Err(DynamicError::BadTtlSteps(1)));
        assert_eq!(steps(2).validate(), Ok(()));
        let both = DynamicPolicy {
            ttl_ns: Some(1_000),
            ..steps(10)
        };
        assert_eq!(
            both.validate().unwrap_err().to_string(),
            "ttl_ns (Python \"ttl\") and ttl_steps are both set; a TTL is in time or in steps, not both"
        );
    }

    #[test]
    fn a_byte_budget_is_rows_of_the_record_and_the_smaller_budget_wins() {
        let bytes = DynamicPolicy {
            max_bytes: Some(1_000),
            ..Default::default()
        };
        // 25 floats (dim 8 with Adam's state) are 100 bytes: 10 rows.
        assert_eq!(bytes.row_budget(25), Some(10));
        assert_eq!(bytes.row_budget(2), Some(125));
        let both = DynamicPolicy {
            max_rows: Some(50),
            ..bytes
        };
        assert_eq!(
            (both.row_budget(25), both.row_budget(2)),
            (Some(10), Some(50))
        );
        assert_eq!(DynamicPolicy::default().row_budget(4), None);
        assert_eq!(
            bytes.validate_bytes(300),
            Err(DynamicError::BytesBelowOneRecord {
                max_bytes: 1_000,
                record_bytes: 1_200
            })
        );
        let zero = DynamicPolicy {
            max_bytes: Some(0),
            ..Default::default()
        };
        assert!(
            zero.validate()
                .unwrap_err()
                .to_string()
                .contains("max_bytes = 0")
        );
        // A named table is checked against its own record.
        let err =
            crate::tables::Tables::new(vec![crate::tables::TableSpec::dynamic("wide", 300, bytes)])
                .unwrap_err()
                .to_string();
        assert!(err.contains("at least one record (1200 bytes)"), "{err}");
    }
}
