//! The key space: which keys exist, how many `f32` values each one shows, and the layout of
//! each key's record.
//!
//! A space is *dense* (keys `0..num_keys`, stored in an array indexed by key, the fast case of
//! embedding ids) or *sparse* (every `u64` is a key, of one uniform length; a node creates a key
//! on its first use, see `Store`). A key's *record* is its visible values followed by hidden
//! state that pulls never return (e.g. optimizer moments): a pull copies the visible part, a
//! push combines into it, and a relocation moves the whole record.
//!
//! A space of *named tables* (`tables.rs`) is sparse too: a key's top bits name its table, which
//! gives the key's length, layout, initializer, optimizer and admission policy (the per-key
//! accessors below ask it; the space-wide ones describe a one-table space only).
//!
//! Invariant: every key has a length of at least one value, and the prefix sums of the lengths
//! fit in a `u64`. Every input from a worker or a peer is validated here before it can touch a
//! parameter.

use std::sync::Arc;

use crate::dynamic::{DynamicError, DynamicPolicy};
use crate::error::AccessError;
use crate::id::Key;
use crate::init::{Initializer, InitializerError};
use crate::optim::{Optimizer, OptimizerError};
use crate::tables::{Table, Tables};

/// Value lengths of the keys: one length for all, or one per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueLengths {
    /// Every key holds this many values.
    Uniform(u32),
    /// Key `k` holds `lengths[k]` values.
    PerKey(Arc<[u32]>),
    /// Named tables: a key's table (its top bits) gives its length (`tables.rs`).
    PerTable(Tables),
}

/// Why a key space could not be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KeySpaceError {
    /// `num_keys` was zero.
    #[error("the key space must hold at least one key")]
    Empty,
    /// A key was given a value length of zero.
    #[error("key {key} has value length 0; every key needs at least one value")]
    ZeroLength {
        /// The offending key.
        key: Key,
    },
    /// Sparse key spaces need one value length for all keys.
    #[error("a sparse key space needs one value length for all keys")]
    SparsePerKey,
    /// More keys than the store can address.
    #[error("{num_keys} keys exceed the supported maximum of {max}")]
    TooManyKeys {
        /// Requested key count.
        num_keys: u64,
        /// Largest supported key count.
        max: u64,
    },
    /// The optimizer's configuration is invalid.
    #[error(transparent)]
    Optimizer(#[from] OptimizerError),
    /// The initializer's parameters are invalid.
    #[error(transparent)]
    Initializer(#[from] InitializerError),
    /// The admission or eviction policy is invalid.
    #[error(transparent)]
    Dynamic(#[from] DynamicError),
    /// Two tables share a name.
    #[error("two tables are named {0:?}; table names must be unique")]
    DuplicateTable(String),
    /// A table's settings are invalid.
    #[error("table {table:?}: {reason}")]
    BadTable {
        /// The table.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// More tables than keys have bits for.
    #[error("{count} tables exceed the supported maximum of {max}")]
    TooManyTables {
        /// Requested table count.
        count: usize,
        /// Largest supported count.
        max: usize,
    },
    /// A table's keys sit in its own top-bits region: homes by range would put each whole
    /// table on one node.
    #[error(
        "named tables need homes by hash (allocation static-hash, or dynamic with home = hash)"
    )]
    TablesNeedHashHomes,
    /// Tables carry their own optimizers, layouts, initializers and policies.
    #[error("a space of named tables takes its {0} from each table, not from the node")]
    TablesOwn(&'static str),
}

/// The hidden part of a key's record: `per_value × len + per_key` values after the `len`
/// visible ones (Adam's two moments: `per_value: 2`; a row-wise step count: `per_key: 1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordLayout {
    /// Hidden values per visible value.
    pub hidden_per_value: u32,
    /// Hidden values per key.
    pub hidden_per_key: u32,
}

impl RecordLayout {
    /// The record length of a key of `len` visible values.
    #[inline]
    pub fn record_len(&self, len: usize) -> usize {
        len * (1 + self.hidden_per_value as usize) + self.hidden_per_key as usize
    }
}

/// The keys and the value length of each key. See the module docs.
#[derive(Clone, Debug)]
pub struct KeySpace {
    num_keys: u64,
    sparse: bool,
    lengths: ValueLengths,
    /// `offsets[k]` is the sum of the lengths of keys `0..k`; only for per-key lengths.
    offsets: Option<Arc<[u64]>>,
    layout: RecordLayout,
    /// What `push_gradients` applies (it chose `layout`); `None`: gradients are refused.
    optimizer: Option<Optimizer>,
    /// How new rows are filled (`init.rs`).
    initializer: Initializer,
    /// Admission and eviction of a sparse space's rows (`dynamic.rs`); `None`: every id gets
    /// a row on first use and keeps it.
    dynamic: Option<DynamicPolicy>,
}

/// The largest dense key count (a node addresses at most 2^32 local records; larger or
/// unbounded id spaces are sparse).
pub const MAX_KEYS: u64 = 1 << 32;

impl KeySpace {
    /// A key space of `num_keys` keys with `len` values each.
    pub fn uniform(num_keys: u64, len: u32) -> Result<Self, KeySpaceError> {
        Self::check_count(num_keys)?;
        if len == 0 {
            return Err(KeySpaceError::ZeroLength { key: 0 });
        }
        Ok(Self {
            num_keys,
            sparse: false,
            lengths: ValueLengths::Uniform(len),
            offsets: None,
            layout: RecordLayout::default(),
            optimizer: None,
            initializer: Initializer::Zeros,
            dynamic: None,
        })
    }

    /// A sparse key space: every `u64` is a key, each of `len` values. Keys are created (with
    /// zero values) where they are first used; see the module docs.
    pub fn sparse(len: u32) -> Result<Self, KeySpaceError> {
        if len == 0 {
            return Err(KeySpaceError::ZeroLength { key: 0 });
        }
        Ok(Self {
            num_keys: u64::MAX,
            sparse: true,
            lengths: ValueLengths::Uniform(len),
            offsets: None,
            layout: RecordLayout::default(),
            optimizer: None,
            initializer: Initializer::Zeros,
            dynamic: None,
        })
    }

    /// A space of named tables (see `tables.rs`): sparse keys whose table, in their top bits,
    /// gives their length, layout, initializer, optimizer and admission policy.
    pub fn tables(tables: Tables) -> Self {
        Self {
            num_keys: u64::MAX,
            sparse: true,
            lengths: ValueLengths::PerTable(tables),
            offsets: None,
            layout: RecordLayout::default(),
            optimizer: None,
            initializer: Initializer::Zeros,
            dynamic: None,
        }
    }

    /// The named tables of this space, if it has them.
    #[inline]
    pub fn named_tables(&self) -> Option<&Tables> {
        match &self.lengths {
            ValueLengths::PerTable(tables) => Some(tables),
            _ => None,
        }
    }

    /// The table of `key` in a space of named tables (`key` in range).
    #[inline]
    fn table(&self, key: Key) -> Option<&Table> {
        self.named_tables().and_then(|t| t.of(key))
    }

    /// The optimizer that steps `key`'s record (its table's, or the space's).
    #[inline]
    pub fn optimizer_for(&self, key: Key) -> Option<&Optimizer> {
        match &self.lengths {
            ValueLengths::PerTable(t) => t.of(key).and_then(Table::optimizer),
            _ => self.optimizer.as_ref(),
        }
    }

    /// Whether some key has an optimizer (a table's, or the space's).
    pub fn any_optimizer(&self) -> bool {
        match &self.lengths {
            ValueLengths::PerTable(t) => t.all().iter().any(|t| t.optimizer().is_some()),
            _ => self.optimizer.is_some(),
        }
    }

    /// How `key`'s new row is filled.
    #[inline]
    pub fn initializer_for(&self, key: Key) -> &Initializer {
        self.table(key)
            .map_or(&self.initializer, |t| t.initializer())
    }

    /// The admission and eviction policy of `key`'s row.
    #[inline]
    pub fn dynamic_for(&self, key: Key) -> Option<&DynamicPolicy> {
        match &self.lengths {
            ValueLengths::PerTable(t) => t.of(key).and_then(Table::dynamic),
            _ => self.dynamic.as_ref(),
        }
    }

    /// Whether some key may be admitted or evicted (a table's policy, or the space's).
    pub fn any_dynamic(&self) -> bool {
        self.dynamic_policies().next().is_some()
    }

    /// Every admission and eviction policy of the space (its tables', or its own).
    pub fn dynamic_policies(&self) -> impl Iterator<Item = &DynamicPolicy> {
        let (own, tables) = match &self.lengths {
            ValueLengths::PerTable(t) => (None, t.all()),
            _ => (self.dynamic.as_ref(), &[][..]),
        };
        own.into_iter()
            .chain(tables.iter().filter_map(Table::dynamic))
    }

    /// The layout of `key`'s record.
    #[inline]
    pub fn layout_for(&self, key: Key) -> RecordLayout {
        self.table(key).map_or(self.layout, Table::layout)
    }

    /// This space with records laid out as `layout` (hidden state after the visible values).
    pub fn with_layout(mut self, layout: RecordLayout) -> Self {
        self.layout = layout;
        self
    }

    /// This space with `optimizer` applied by `push_gradients`, its state in the records'
    /// hidden part (the optimizer's layout). Fails if a hyper-parameter is invalid or a layout
    /// was already set by hand.
    pub fn with_optimizer(mut self, optimizer: Optimizer) -> Result<Self, OptimizerError> {
        optimizer.validate()?;
        if self.layout != RecordLayout::default() && self.layout != optimizer.layout() {
            return Err(OptimizerError::LayoutConflict);
        }
        self.layout = optimizer.layout();
        self.optimizer = Some(optimizer);
        Ok(self)
    }

    /// This space with new rows filled by `initializer` (see `init.rs`).
    pub fn with_initializer(mut self, initializer: Initializer) -> Result<Self, KeySpaceError> {
        initializer.validate()?;
        self.initializer = initializer;
        Ok(self)
    }

    /// How new rows are filled.
    #[inline]
    pub fn initializer(&self) -> &Initializer {
        &self.initializer
    }

    /// This sparse space with admission and eviction (see `dynamic.rs`).
    pub fn with_dynamic(mut self, policy: DynamicPolicy) -> Result<Self, KeySpaceError> {
        if !self.sparse {
            return Err(DynamicError::Dense.into());
        }
        policy.validate()?;
        // The layout as set so far: set the optimizer first (an optimizer set later widens the
        // records; the row budget is computed from the final record, so the bytes still hold,
        // but a budget below one whole record then admits nothing).
        policy.validate_bytes(self.layout.record_len(self.len(0)))?;
        self.dynamic = Some(policy);
        Ok(self)
    }

    /// The admission and eviction policy of a dynamic space.
    #[inline]
    pub fn dynamic(&self) -> Option<&DynamicPolicy> {
        self.dynamic.as_ref()
    }

    /// Row `key`'s initial record: the initializer's visible values, zero hidden state.
    pub fn initial_record(&self, key: Key) -> Vec<f32> {
        self.initializer_for(key)
            .record(key, self.len(key), self.record_len(key))
    }

    /// The optimizer `push_gradients` applies, if any.
    #[inline]
    pub fn optimizer(&self) -> Option<&Optimizer> {
        self.optimizer.as_ref()
    }

    /// A key space whose key `k` holds `lengths[k]` values.
    pub fn per_key(lengths: Vec<u32>) -> Result<Self, KeySpaceError> {
        let num_keys = lengths.len() as u64;
        Self::check_count(num_keys)?;
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        let mut sum = 0u64;
        for (key, &len) in lengths.iter().enumerate() {
            if len == 0 {
                return Err(KeySpaceError::ZeroLength { key: key as Key });
            }
            offsets.push(sum);
            sum += u64::from(len);
        }
        offsets.push(sum);
        Ok(Self {
            num_keys,
            sparse: false,
            lengths: ValueLengths::PerKey(lengths.into()),
            offsets: Some(offsets.into()),
            layout: RecordLayout::default(),
            optimizer: None,
            initializer: Initializer::Zeros,
            dynamic: None,
        })
    }

    /// Builds from a [`ValueLengths`] description.
    pub fn new(num_keys: u64, lengths: ValueLengths) -> Result<Self, KeySpaceError> {
        match lengths {
            ValueLengths::Uniform(len) => Self::uniform(num_keys, len),
            ValueLengths::PerKey(lens) => Self::per_key(lens.to_vec()),
            ValueLengths::PerTable(tables) => Ok(Self::tables(tables)),
        }
    }

    fn check_count(num_keys: u64) -> Result<(), KeySpaceError> {
        if num_keys == 0 {
            return Err(KeySpaceError::Empty);
        }
        if num_keys > MAX_KEYS {
            return Err(KeySpaceError::TooManyKeys {
                num_keys,
                max: MAX_KEYS,
            });
        }
        Ok(())
    }

    /// Number of keys of a dense space; `u64::MAX` for a sparse one (use
    /// [`KeySpace::contains`] to test a key).
    pub fn num_keys(&self) -> u64 {
        self.num_keys
    }

    /// Whether every `u64` is a key (keys created on first use).
    pub fn is_sparse(&self) -> bool {
        self.sparse
    }

    /// Whether `key` is a key of this space.
    #[inline]
    pub fn contains(&self, key: Key) -> bool {
        match &self.lengths {
            ValueLengths::PerTable(t) => t.contains(key),
            _ => self.sparse || key < self.num_keys,
        }
    }

    /// The layout of the keys' records.
    pub fn layout(&self) -> RecordLayout {
        self.layout
    }

    /// Length of `key`'s whole record (visible values and hidden state).
    #[inline]
    pub fn record_len(&self, key: Key) -> usize {
        match &self.lengths {
            ValueLengths::PerTable(t) => t.of_valid(key).record_len(),
            _ => self.layout.record_len(self.len(key)),
        }
    }

    /// The lengths description.
    pub fn lengths(&self) -> &ValueLengths {
        &self.lengths
    }

    /// The uniform length, if all keys share one.
    pub fn uniform_len(&self) -> Option<usize> {
        match self.lengths {
            ValueLengths::Uniform(len) => Some(len as usize),
            ValueLengths::PerKey(_) | ValueLengths::PerTable(_) => None,
        }
    }

    /// Value length of `key`. The key must be in range (see [`KeySpace::check_key`]).
    #[inline]
    pub fn len(&self, key: Key) -> usize {
        match &self.lengths {
            ValueLengths::Uniform(len) => *len as usize,
            ValueLengths::PerKey(lens) => lens[key as usize] as usize,
            ValueLengths::PerTable(t) => t.of_valid(key).dim(),
        }
    }

    /// Position of `key`'s first value in the concatenation of all keys' values.
    #[inline]
    pub fn global_offset(&self, key: Key) -> u64 {
        match (&self.lengths, &self.offsets) {
            (ValueLengths::Uniform(len), _) => key * u64::from(*len),
            (ValueLengths::PerKey(_), Some(offsets)) => offsets[key as usize],
            (ValueLengths::PerKey(_), None) => unreachable!("per-key spaces always have offsets"),
            (ValueLengths::PerTable(_), _) => unreachable!("tables are sparse: no global offsets"),
        }
    }

    /// Sum of all keys' value lengths.
    pub fn total_len(&self) -> u64 {
        self.global_offset(self.num_keys)
    }

    /// Fails with the first key that is out of range.
    #[inline]
    pub fn check_key(&self, key: Key) -> Result<(), AccessError> {
        if self.contains(key) {
            Ok(())
        } else {
            Err(AccessError::KeyOutOfRange {
                key,
                num_keys: self.num_keys,
            })
        }
    }

    /// Validates a batch: every key in range, and `buf_len` equal to the sum of their lengths.
    /// Returns that sum.
    pub fn check_batch(&self, keys: &[Key], buf_len: usize) -> Result<usize, AccessError> {
        // The uniform case first and alone: it is every push's check on the fast path.
        let expected = if let ValueLengths::Uniform(len) = &self.lengths {
            // `max` vectorises; the culprit is only searched for when there is one.
            if !self.sparse
                && keys
                    .iter()
                    .copied()
                    .max()
                    .is_some_and(|k| k >= self.num_keys)
            {
                let key = keys
                    .iter()
                    .copied()
                    .find(|&k| k >= self.num_keys)
                    .unwrap_or(0);
                return Err(AccessError::KeyOutOfRange {
                    key,
                    num_keys: self.num_keys,
                });
            }
            keys.len() * *len as usize
        } else {
            self.per_key_batch_len(keys)?
        };
        if expected != buf_len {
            return Err(AccessError::LengthMismatch {
                keys: keys.len(),
                expected,
                actual: buf_len,
            });
        }
        Ok(expected)
    }

    /// [`KeySpace::check_batch`]'s sum of lengths for per-key and per-table lengths.
    #[inline(never)]
    fn per_key_batch_len(&self, keys: &[Key]) -> Result<usize, AccessError> {
        let mut expected = 0usize;
        for &key in keys {
            self.check_key(key)?;
            expected += match &self.lengths {
                ValueLengths::PerKey(lens) => lens[key as usize] as usize,
                ValueLengths::PerTable(t) => t.of_valid(key).dim(),
                ValueLengths::Uniform(len) => *len as usize,
            };
        }
        Ok(expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_offsets_are_prefix_sums() {
        let space = KeySpace::per_key(vec![2, 5, 1]).unwrap();
        assert_eq!(space.global_offset(0), 0);
        assert_eq!(space.global_offset(2), 7);
        assert_eq!(space.total_len(), 8);
        assert_eq!(space.len(1), 5);
    }

    #[test]
    fn batch_checks_name_the_culprit() {
        let space = KeySpace::uniform(10, 3).unwrap();
        assert_eq!(space.check_batch(&[1, 2], 6), Ok(6));
        assert_eq!(
            space.check_batch(&[1, 12], 6),
            Err(AccessError::KeyOutOfRange {
                key: 12,
                num_keys: 10
            })
        );
        assert_eq!(
            space.check_batch(&[1, 2], 5),
            Err(AccessError::LengthMismatch {
                keys: 2,
                expected: 6,
                actual: 5
            })
        );
    }

    #[test]
    fn rejects_degenerate_spaces() {
        assert_eq!(KeySpace::uniform(0, 1).unwrap_err(), KeySpaceError::Empty);
        assert_eq!(
            KeySpace::uniform(3, 0).unwrap_err(),
            KeySpaceError::ZeroLength { key: 0 }
        );
        assert_eq!(
            KeySpace::per_key(vec![1, 0]).unwrap_err(),
            KeySpaceError::ZeroLength { key: 1 }
        );
    }
}
