//! Named tables: several embedding tables in one key space, each with its own dimension,
//! initializer, optimizer and kind (issue #17).
//!
//! A table is a disjoint region of the `u64` key space: table `t`'s id `i` is the key
//! `t << ID_BITS | i`. The top [`TABLE_BITS`] bits name the table, the other [`ID_BITS`] the
//! id, so the key alone says which table (and so which value length, record layout,
//! initializer, optimizer and admission policy) applies: every place that asks "how long is key
//! `k`'s record" asks the key's table (one shift and an index). Keys of the tables space are
//! sparse (a node holds state only for keys it has seen, homes by hash); a *dense* table refuses
//! ids `>= num_ids`, a *dynamic* one takes any id below `2^ID_BITS` and may admit and evict
//! rows (`dynamic.rs`).
//!
//! Invariants: names are unique and non-empty, every table has a dimension of at least one,
//! there are at most [`MAX_TABLES`] tables; a key is in the space iff its table exists and its id
//! is in the table's range. Ids that do not fit are refused with an error naming table and id.

use std::sync::Arc;

use crate::dynamic::DynamicPolicy;
use crate::id::Key;
use crate::init::Initializer;
use crate::keyspace::{KeySpaceError, RecordLayout};
use crate::optim::Optimizer;

/// Bits of a key that hold the id within its table.
pub const ID_BITS: u32 = 56;
/// Bits of a key that name its table.
pub const TABLE_BITS: u32 = 64 - ID_BITS;
/// Most tables in one key space.
pub const MAX_TABLES: usize = 1 << TABLE_BITS;
/// Ids of a dynamic table are `0..=MAX_ID`.
pub const MAX_ID: u64 = (1 << ID_BITS) - 1;

/// Which ids a table has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TableKind {
    /// Ids `0..num_ids`.
    Dense {
        /// Number of ids.
        num_ids: u64,
    },
    /// Any id in `0..=MAX_ID`, its row created on first use under the policy (admission,
    /// row budget, TTL; the default policy admits every id and never evicts).
    Dynamic(DynamicPolicy),
}

/// What a table is, as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    /// Its name (unique in the space).
    pub name: String,
    /// Visible values per row.
    pub dim: u32,
    /// How new rows are filled (seeded by key, which holds table and id).
    pub initializer: Initializer,
    /// What `push_gradients` applies to its rows; `None`: gradients are refused.
    pub optimizer: Option<Optimizer>,
    /// Dense or dynamic.
    pub kind: TableKind,
}

impl TableSpec {
    /// A dense table of `num_ids` rows of `dim` values, zero-initialised, no optimizer.
    pub fn dense(name: impl Into<String>, num_ids: u64, dim: u32) -> Self {
        Self {
            name: name.into(),
            dim,
            initializer: Initializer::Zeros,
            optimizer: None,
            kind: TableKind::Dense { num_ids },
        }
    }

    /// A dynamic table of rows of `dim` values under `policy`.
    pub fn dynamic(name: impl Into<String>, dim: u32, policy: DynamicPolicy) -> Self {
        Self {
            kind: TableKind::Dynamic(policy),
            ..Self::dense(name, 0, dim)
        }
    }

    /// This table with `optimizer`.
    pub fn with_optimizer(mut self, optimizer: Optimizer) -> Self {
        self.optimizer = Some(optimizer);
        self
    }

    /// This table with `initializer`.
    pub fn with_initializer(mut self, initializer: Initializer) -> Self {
        self.initializer = initializer;
        self
    }
}

/// A validated table: its spec and its record layout.
#[derive(Clone, Debug)]
pub struct Table {
    spec: TableSpec,
    layout: RecordLayout,
    index: u32,
}

impl Table {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its position in the space (the top bits of its keys).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Visible values per row.
    #[inline]
    pub fn dim(&self) -> usize {
        self.spec.dim as usize
    }

    /// The layout of its records.
    #[inline]
    pub fn layout(&self) -> RecordLayout {
        self.layout
    }

    /// Length of one whole record (visible values and hidden state).
    #[inline]
    pub fn record_len(&self) -> usize {
        self.layout.record_len(self.dim())
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// Its optimizer.
    #[inline]
    pub fn optimizer(&self) -> Option<&Optimizer> {
        self.spec.optimizer.as_ref()
    }

    /// Its initializer.
    #[inline]
    pub fn initializer(&self) -> &Initializer {
        &self.spec.initializer
    }

    /// Its admission and eviction policy (dynamic tables).
    #[inline]
    pub fn dynamic(&self) -> Option<&DynamicPolicy> {
        match &self.spec.kind {
            TableKind::Dynamic(policy) => Some(policy),
            TableKind::Dense { .. } => None,
        }
    }

    /// Whether `id` is an id of this table.
    #[inline]
    pub fn contains_id(&self, id: u64) -> bool {
        match self.spec.kind {
            TableKind::Dense { num_ids } => id < num_ids,
            TableKind::Dynamic(_) => id <= MAX_ID,
        }
    }

    /// The key of `id`, or an error naming table and id.
    #[inline]
    pub fn key(&self, id: u64) -> Result<Key, TableError> {
        if self.contains_id(id) {
            Ok(u64::from(self.index) << ID_BITS | id)
        } else {
            Err(TableError::IdOutOfRange {
                table: self.spec.name.clone(),
                id,
                limit: match self.spec.kind {
                    TableKind::Dense { num_ids } => num_ids,
                    TableKind::Dynamic(_) => MAX_ID + 1,
                },
            })
        }
    }
}

/// Why a table could not be addressed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TableError {
    /// No table of this name.
    #[error("no table named {name:?} (tables: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The tables there are, comma-separated.
        known: String,
    },
    /// The id is not in the table.
    #[error("id {id} is out of range for table {table:?} (ids are 0..{limit})")]
    IdOutOfRange {
        /// The table.
        table: String,
        /// The id.
        id: u64,
        /// One more than its largest id.
        limit: u64,
    },
    /// The space has no tables (it is one plain key space).
    #[error("this node has no named tables (it was configured as one key space)")]
    NoTables,
}

/// The tables of a key space, by index.
#[derive(Clone, Debug)]
pub struct Tables {
    tables: Arc<[Table]>,
}

/// Two table lists are equal when their specs are (validated specs hold no NaN, so the
/// comparison is an equivalence).
impl PartialEq for Tables {
    fn eq(&self, other: &Self) -> bool {
        self.tables.len() == other.tables.len()
            && self
                .tables
                .iter()
                .zip(other.tables.iter())
                .all(|(a, b)| a.spec == b.spec)
    }
}

impl Eq for Tables {}

impl Tables {
    /// Validates `specs` (unique non-empty names, dimensions of at least one, valid
    /// initializers, optimizers and policies) into tables, in the given order.
    pub fn new(specs: Vec<TableSpec>) -> Result<Self, KeySpaceError> {
        if specs.is_empty() {
            return Err(KeySpaceError::Empty);
        }
        if specs.len() > MAX_TABLES {
            return Err(KeySpaceError::TooManyTables {
                count: specs.len(),
                max: MAX_TABLES,
            });
        }
        let mut tables = Vec::with_capacity(specs.len());
        for (index, spec) in specs.into_iter().enumerate() {
            let bad = |reason: String| KeySpaceError::BadTable {
                table: spec.name.clone(),
                reason,
            };
            if spec.name.is_empty() {
                return Err(bad("a table needs a non-empty name".into()));
            }
            if tables.iter().any(|t: &Table| t.spec.name == spec.name) {
                return Err(KeySpaceError::DuplicateTable(spec.name.clone()));
            }
            if spec.dim == 0 {
                return Err(bad("dim = 0; every row needs at least one value".into()));
            }
            spec.initializer
                .validate()
                .map_err(|e| bad(e.to_string()))?;
            let layout = match &spec.optimizer {
                Some(opt) => {
                    opt.validate().map_err(|e| bad(e.to_string()))?;
                    opt.layout()
                }
                None => RecordLayout::default(),
            };
            match &spec.kind {
                TableKind::Dense { num_ids } => {
                    if *num_ids == 0 || *num_ids > MAX_ID + 1 {
                        return Err(bad(format!(
                            "num_ids = {num_ids}; a dense table holds 1..={} ids",
                            MAX_ID + 1
                        )));
                    }
                }
                TableKind::Dynamic(policy) => {
                    policy.validate().map_err(|e| bad(e.to_string()))?;
                    policy
                        .validate_bytes(layout.record_len(spec.dim as usize))
                        .map_err(|e| bad(e.to_string()))?;
                }
            }
            tables.push(Table {
                spec,
                layout,
                index: index as u32,
            });
        }
        // One TTL sweep serves every table (`dynamic.rs`), so tables that set a TTL share it
        // (the same time, or the same steps).
        let ttl = |t: &Table| t.dynamic().map(|p| (p.ttl_ns, p.ttl_steps));
        let ttls: Vec<&Table> = tables
            .iter()
            .filter(|t| {
                t.dynamic()
                    .is_some_and(|p| p.ttl_ns.or(p.ttl_steps).is_some())
            })
            .collect();
        if let Some(first) = ttls.first()
            && let Some(other) = ttls.iter().find(|t| ttl(t) != ttl(first))
        {
            return Err(KeySpaceError::BadTable {
                table: other.spec.name.clone(),
                reason: format!(
                    "its ttl differs from table {:?}'s; tables that set a ttl must share it",
                    first.spec.name
                ),
            });
        }
        Ok(Self {
            tables: tables.into(),
        })
    }

    /// The tables, by index.
    pub fn all(&self) -> &[Table] {
        &self.tables
    }

    /// The table named `name`.
    pub fn by_name(&self, name: &str) -> Result<&Table, TableError> {
        self.tables
            .iter()
            .find(|t| t.spec.name == name)
            .ok_or_else(|| TableError::Unknown {
                name: name.to_owned(),
                known: self
                    .tables
                    .iter()
                    .map(|t| t.spec.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The table of `key`, if it names one.
    #[inline]
    pub fn of(&self, key: Key) -> Option<&Table> {
        self.tables.get((key >> ID_BITS) as usize)
    }

    /// The table of a key known to be in the space.
    #[inline]
    pub fn of_valid(&self, key: Key) -> &Table {
        &self.tables[(key >> ID_BITS) as usize]
    }

    /// Whether `key` is a key of some table.
    #[inline]
    pub fn contains(&self, key: Key) -> bool {
        self.of(key).is_some_and(|t| t.contains_id(key & MAX_ID))
    }

    /// The id of `key` within its table.
    #[inline]
    pub fn id_of(key: Key) -> u64 {
        key & MAX_ID
    }

    /// The index of `key`'s table.
    #[inline]
    pub fn index_of(key: Key) -> usize {
        (key >> ID_BITS) as usize
    }

    /// The table every one of `keys` is in and its dimension, if they are all in one existing
    /// table (a named table's batch); `None` for an empty batch or keys of several tables.
    pub fn common_table(&self, keys: &[Key]) -> Option<(usize, usize)> {
        let table = Self::index_of(*keys.first()?);
        let dim = self.tables.get(table)?.dim();
        keys.iter()
            .all(|&key| Self::index_of(key) == table)
            .then_some((table, dim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamic::Admission;
    use crate::keyspace::KeySpace;

    fn two() -> Tables {
        Tables::new(vec![
            TableSpec::dense("user", 10, 4).with_optimizer(Optimizer::adam(0.1)),
            TableSpec::dynamic("item", 3, DynamicPolicy::default()),
        ])
        .unwrap()
    }

    #[test]
    fn keys_are_disjoint_regions_of_the_space() {
        let tables = two();
        let user = tables.by_name("user").unwrap();
        let item = tables.by_name("item").unwrap();
        assert_eq!(user.key(7).unwrap(), 7);
        assert_eq!(item.key(7).unwrap(), 1 << ID_BITS | 7);
        assert_eq!(item.key(MAX_ID).unwrap() >> ID_BITS, 1);
        assert_eq!(tables.of_valid(item.key(5).unwrap()).name(), "item");
        assert_eq!(Tables::id_of(item.key(5).unwrap()), 5);
        assert!(tables.contains(9) && !tables.contains(10), "dense: 0..10");
        assert!(tables.contains(1 << ID_BITS | MAX_ID));
        assert!(!tables.contains(2 << ID_BITS), "no third table");
        assert_eq!(
            user.record_len(),
            4 * 3 + 1,
            "Adam: two moments and a step count"
        );
        assert_eq!(item.record_len(), 3);
    }

    #[test]
    fn bad_ids_and_names_are_named() {
        let tables = two();
        assert_eq!(
            tables
                .by_name("user")
                .unwrap()
                .key(10)
                .unwrap_err()
                .to_string(),
            "id 10 is out of range for table \"user\" (ids are 0..10)"
        );
        assert_eq!(
            tables
                .by_name("item")
                .unwrap()
                .key(1 << ID_BITS)
                .unwrap_err(),
            TableError::IdOutOfRange {
                table: "item".into(),
                id: 1 << ID_BITS,
                limit: MAX_ID + 1
            }
        );
        assert_eq!(
            tables.by_name("ads").unwrap_err().to_string(),
            "no table named \"ads\" (tables: user, item)"
        );
    }

    #[test]
    fn bad_specs_are_refused_by_name() {
        let dup = Tables::new(vec![
            TableSpec::dense("a", 1, 1),
            TableSpec::dense("a", 2, 2),
        ]);
        assert_eq!(dup.unwrap_err(), KeySpaceError::DuplicateTable("a".into()));
        let zero = Tables::new(vec![TableSpec::dense("z", 1, 0)]).unwrap_err();
        assert_eq!(
            zero.to_string(),
            "table \"z\": dim = 0; every row needs at least one value"
        );
        let empty = Tables::new(vec![TableSpec::dense("e", 0, 1)]).unwrap_err();
        assert!(empty.to_string().starts_with("table \"e\": num_ids = 0"));
        assert_eq!(Tables::new(vec![]).unwrap_err(), KeySpaceError::Empty);
        let bad_opt = Tables::new(vec![
            TableSpec::dense("o", 1, 1).with_optimizer(Optimizer::sgd(-1.0)),
        ])
        .unwrap_err();
        assert!(
            bad_opt.to_string().starts_with("table \"o\": "),
            "{bad_opt}"
        );
        let bad_policy = DynamicPolicy {
            admission: Admission::Probability { p: 2.0, seed: 0 },
            ..Default::default()
        };
        let bad_dyn = Tables::new(vec![TableSpec::dynamic("d", 1, bad_policy)]).unwrap_err();
        assert!(bad_dyn.to_string().contains("probability"), "{bad_dyn}");
        let ttl = |t| DynamicPolicy {
            ttl_ns: Some(t),
            spill: false,
            ..Default::default()
        };
        let ttls = Tables::new(vec![
            TableSpec::dynamic("a", 1, ttl(10)),
            TableSpec::dynamic("b", 1, ttl(20)),
        ])
        .unwrap_err();
        assert!(
            ttls.to_string().starts_with("table \"b\": its ttl"),
            "{ttls}"
        );
        let steps = DynamicPolicy {
            ttl_steps: Some(10),
            ..Default::default()
        };
        let mixed = Tables::new(vec![
            TableSpec::dynamic("a", 1, ttl(10)),
            TableSpec::dynamic("b", 1, steps),
        ])
        .unwrap_err();
        assert!(
            mixed.to_string().starts_with("table \"b\": its ttl"),
            "a ttl in time and one in steps differ: {mixed}"
        );
        assert!(
            Tables::new(vec![
                TableSpec::dynamic("a", 1, steps),
                TableSpec::dynamic("b", 1, steps),
                TableSpec::dynamic("c", 1, DynamicPolicy::default()),
            ])
            .is_ok()
        );
    }

    #[test]
    fn the_space_and_the_store_hold_records_of_each_tables_length() {
        use crate::store::{Store, UpdateMode};
        let tables = two();
        let (user, item) = (tables.all()[0].clone(), tables.all()[1].clone());
        let space = KeySpace::tables(tables);
        let (u, i) = (user.key(3).unwrap(), item.key(1 << 40).unwrap());
        assert_eq!((space.len(u), space.record_len(u)), (4, 13));
        assert_eq!((space.len(i), space.record_len(i)), (3, 3));
        assert_eq!(space.uniform_len(), None, "batches take the per-key paths");
        assert_eq!(space.check_batch(&[u, i, u], 11), Ok(11));
        assert_eq!(
            space.check_batch(&[u, 10], 8),
            Err(crate::error::AccessError::KeyOutOfRange {
                key: 10,
                num_keys: u64::MAX
            })
        );
        assert!(space.optimizer_for(u).is_some() && space.optimizer_for(i).is_none());
        assert!(space.dynamic_for(i).is_some() && space.dynamic_for(u).is_none());

        let store = Store::new(space.clone());
        assert!(store.insert(u, &space.initial_record(u)));
        assert!(store.insert(i, &[1.0, 2.0, 3.0]));
        assert_eq!(
            (store.count_local_in_table(0), store.count_local_in_table(1)),
            (1, 1)
        );
        assert!(store.push_local(i, &[1.0, 1.0, 1.0], UpdateMode::Add));
        assert!(store.push_local(u, &[1.0; 4], UpdateMode::Gradient));
        assert!(
            !store.push_local(i, &[1.0; 3], UpdateMode::Gradient),
            "no optimizer: a miss, refused by the front and the node"
        );
        let mut out = [0.0; 3];
        assert!(store.pull_local(i, &mut out));
        assert_eq!(out, [2.0, 3.0, 4.0]);
        // Adam's first step moves each value by about lr, and its state is in the record.
        let mut record = Vec::new();
        assert!(store.remove(u, &mut record));
        assert_eq!(record.len(), 13);
        let mut want = vec![0.0f32; 13];
        let (w, state) = want.split_at_mut(4);
        Optimizer::adam(0.1).step(w, state, &[1.0; 4]);
        assert_eq!(record, want);
        assert_eq!(store.count_local_in_table(0), 0);
        assert_eq!(store.count_local(), 1);
    }
}
