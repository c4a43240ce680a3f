//! Access to a named table (issue #17): a [`TableHandle`] maps a table's ids to keys of the
//! node's key space and calls the worker's operations with them.
//!
//! A table's id `i` is the key `index << ID_BITS | i` (`roam_core::tables`), so the handle's
//! whole job is that mapping and its check: an id outside the table (at or beyond a dense
//! table's size, or above `MAX_ID` in a dynamic one) fails the operation with an error naming
//! table and id, before anything is touched. Everything else (the fast path for local rows,
//! the table's length, optimizer and admission) is the worker's and the node's, which read it
//! from the key's top bits.

use std::cell::RefCell;

use roam_core::{AccessError, Key, Table, TableError};

use crate::worker::{Ticket, Worker};

/// Why an operation on a table failed before it was issued.
#[derive(Debug, thiserror::Error)]
pub enum TableAccessError {
    /// An unknown table or an id out of its range.
    #[error(transparent)]
    Table(#[from] TableError),
    /// `push_gradients` to a table without an optimizer.
    #[error("table {0:?} has no optimizer; push_gradients needs one")]
    NoOptimizer(String),
    /// The worker refused the batch (e.g. a buffer of the wrong length).
    #[error("table {table:?}: {error}")]
    Access {
        /// The table.
        table: String,
        /// The worker's error.
        error: AccessError,
    },
}

/// One worker's handle on one named table: see the module docs. Borrowing the worker, it is
/// as cheap to make as a name lookup; keep it for the length of a training step or longer.
pub struct TableHandle<'w> {
    worker: &'w Worker,
    table: Table,
    /// The keys of the batch being issued (reused between operations).
    keys: RefCell<Vec<Key>>,
}

impl Worker {
    /// A handle on the named table `name` (see [`crate::Config::tables`]).
    pub fn table(&self, name: &str) -> Result<TableHandle<'_>, TableError> {
        let tables = self
            .key_space()
            .named_tables()
            .ok_or(TableError::NoTables)?;
        Ok(TableHandle {
            worker: self,
            table: tables.by_name(name)?.clone(),
            keys: RefCell::default(),
        })
    }
}

impl TableHandle<'_> {
    /// The table's name.
    pub fn name(&self) -> &str {
        self.table.name()
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.table.dim()
    }

    /// The table (its spec, layout and index).
    pub fn info(&self) -> &Table {
        &self.table
    }

    /// The key of row `id`.
    pub fn key(&self, id: u64) -> Result<Key, TableError> {
        self.table.key(id)
    }

    /// Runs `op` with the keys of `ids` (all checked first).
    fn with_keys<T>(
        &self,
        ids: &[u64],
        op: impl FnOnce(&[Key]) -> Result<T, AccessError>,
    ) -> Result<T, TableAccessError> {
        let mut keys = self.keys.borrow_mut();
        keys.clear();
        for &id in ids {
            keys.push(self.table.key(id)?);
        }
        op(&keys).map_err(|error| TableAccessError::Access {
            table: self.table.name().to_owned(),
            error,
        })
    }

    /// [`Worker::pull`] of rows `ids` into `out` (`ids.len() × dim` values).
    pub fn pull<'a>(
        &self,
        ids: &[u64],
        out: &'a mut [f32],
    ) -> Result<Ticket<'a>, TableAccessError> {
        self.with_keys(ids, |keys| self.worker.pull(keys, out))
    }

    /// [`Worker::push`] of `vals` (`ids.len() × dim` values) into rows `ids`.
    pub fn push(&self, ids: &[u64], vals: &[f32]) -> Result<Ticket<'static>, TableAccessError> {
        self.with_keys(ids, |keys| self.worker.push(keys, vals))
    }

    /// [`Worker::set`] of rows `ids` to `vals`.
    pub fn set(&self, ids: &[u64], vals: &[f32]) -> Result<Ticket<'static>, TableAccessError> {
        self.with_keys(ids, |keys| self.worker.set(keys, vals))
    }

    /// [`Worker::push_gradients`] with the table's optimizer; fails, changing nothing, if the
    /// table has none.
    pub fn push_gradients(
        &self,
        ids: &[u64],
        grads: &[f32],
    ) -> Result<Ticket<'static>, TableAccessError> {
        if self.table.optimizer().is_none() {
            return Err(TableAccessError::NoOptimizer(self.table.name().to_owned()));
        }
        self.with_keys(ids, |keys| self.worker.push_gradients(keys, grads))
    }

    /// [`Worker::push_gradient_sums`] with the table's optimizer (`aggregates` holds
    /// `2 × dim` values per row: sums, then squares); fails, changing nothing, if the table
    /// has none.
    pub fn push_gradient_sums(
        &self,
        ids: &[u64],
        aggregates: &[f32],
    ) -> Result<Ticket<'static>, TableAccessError> {
        if self.table.optimizer().is_none() {
            return Err(TableAccessError::NoOptimizer(self.table.name().to_owned()));
        }
        self.with_keys(ids, |keys| self.worker.push_gradient_sums(keys, aggregates))
    }

    /// [`Worker::localize`] of rows `ids`.
    pub fn localize(&self, ids: &[u64]) -> Result<Ticket<'static>, TableAccessError> {
        self.with_keys(ids, |keys| self.worker.localize(keys))
    }
}
