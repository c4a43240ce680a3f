//! Spill of evicted rows (issue #17): with [`DynamicPolicy::spill`], a row evicted at its
//! creator (`dynamic.rs`) is kept whole (visible values and optimizer state) in the node's
//! [`Spill`] instead of being discarded, and the row's next creation takes it back from there.
//! The row budget is then a cache over the spill: nothing trained is lost by an eviction.
//!
//! The core stays sans-IO: the shell gives the node a `Box<dyn Spill>` ([`Node::set_spill`]),
//! a file per node in `roam` (`crates/roam/src/spill.rs`), [`MemorySpill`] in the simulator and
//! by default. It is called only where rows are evicted or created, both of which happen under
//! the node lock already (the protocol's slow path): the workers' fast path never touches it.
//! Why a trait object and not an output the shell drains: a creation must have the row's record
//! at once (the access that creates it is answered from it in the same call), so reading the
//! record back cannot wait for a shell round trip without a new "waiting for the spill" key
//! state.
//!
//! Invariants:
//! - a key has a spilled record only while it is GONE at its creator (not created): a creation
//!   takes the record out ([`Spill::take`]) before the row is inserted, so a row is never both
//!   held and spilled, and `keys_created − rows_evicted = held` still holds;
//! - an id with a spilled record was admitted once, so its creation skips the admission test
//!   (count or probability) and only needs room under the budget; an access refused for lack of
//!   room reads the spilled record's visible values (not the initializer's), and its update is
//!   dropped and counted as for any refused access;
//! - a spill error (a damaged or unreadable file) never panics: the node records a
//!   [`Warning::Spill`] naming it (file and offset) and counts `spill_errors`; a record that
//!   cannot be read back is replaced by the initializer's row, a record that cannot be written
//!   is lost.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::dynamic::DynamicPolicy;
use crate::id::Key;
use crate::node::Node;
use crate::stats::add;
use crate::warning::Warning;

/// Why a spill could not keep or give back a record.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    /// Reading or writing the file failed.
    #[error("spill file {path}: {what} at offset {offset}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Where in the file.
        offset: u64,
        /// The error.
        error: std::io::Error,
    },
    /// A record or the file would exceed what a spill file holds.
    #[error("spill file {path}: {reason}")]
    Limit {
        /// The file.
        path: PathBuf,
        /// Which limit.
        reason: String,
    },
    /// The bytes read back are not the record written (truncated, bad length, bad checksum).
    #[error("spill file {path} is damaged at offset {offset}: {reason}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Where a node keeps the records of its evicted rows (see the module docs). Methods are called
/// by the protocol only (under the node lock).
pub trait Spill: Send {
    /// Keeps `record` as `key`'s spilled record (replacing an older one).
    fn put(&mut self, key: Key, record: &[f32]) -> Result<(), SpillError>;
    /// Copies `key`'s spilled record into `out` (cleared first), keeping it; false if there
    /// is none.
    fn get(&self, key: Key, out: &mut Vec<f32>) -> Result<bool, SpillError>;
    /// Forgets `key`'s spilled record (nothing if there is none).
    fn remove(&mut self, key: Key) -> Result<(), SpillError>;
    /// Whether `key` has a spilled record.
    fn contains(&self, key: Key) -> bool;
    /// Spilled records.
    fn len(&self) -> u64;
    /// Whether no record is spilled.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The spilled keys, ascending (what a checkpoint writes).
    fn keys(&self) -> Vec<Key>;
    /// Moves `key`'s record into `out` (see [`Spill::get`]) and forgets it.
    fn take(&mut self, key: Key, out: &mut Vec<f32>) -> Result<bool, SpillError> {
        let found = self.get(key, out)?;
        if found {
            self.remove(key)?;
        }
        Ok(found)
    }
}

/// A spill in memory (the simulator's, and a node's until its shell gives it another): keeps
/// the records, so it bounds nothing; it only makes the semantics testable without files.
#[derive(Debug, Default)]
pub struct MemorySpill {
    records: HashMap<Key, Box<[f32]>>,
}

impl Spill for MemorySpill {
    fn put(&mut self, key: Key, record: &[f32]) -> Result<(), SpillError> {
        self.records.insert(key, record.into());
        Ok(())
    }

    fn get(&self, key: Key, out: &mut Vec<f32>) -> Result<bool, SpillError> {
        out.clear();
        match self.records.get(&key) {
            Some(record) => {
                out.extend_from_slice(record);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn remove(&mut self, key: Key) -> Result<(), SpillError> {
        self.records.remove(&key);
        Ok(())
    }

    fn contains(&self, key: Key) -> bool {
        self.records.contains_key(&key)
    }

    fn len(&self) -> u64 {
        self.records.len() as u64
    }

    fn keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self.records.keys().copied().collect();
        keys.sort_unstable();
        keys
    }
}

impl Node {
    /// Gives the node the spill its dynamic policies with `spill` keep evicted rows in
    /// (replacing the in-memory default). Call before the node serves or restores anything:
    /// records in the previous spill are dropped.
    pub fn set_spill(&mut self, spill: Box<dyn Spill>) {
        self.dynamic.spill = Some(spill);
    }

    /// The node's spill, if a policy asks for one.
    pub fn spill(&self) -> Option<&dyn Spill> {
        self.dynamic.spill.as_deref()
    }

    /// The node's spill, for a shell that writes or restores it (checkpoints).
    pub fn spill_mut(&mut self) -> Option<&mut (dyn Spill + 'static)> {
        self.dynamic.spill.as_deref_mut()
    }

    /// Whether `key`'s policy keeps evicted rows.
    fn spills(&self, key: Key) -> bool {
        self.cfg
            .space
            .dynamic_for(key)
            .is_some_and(|p: &DynamicPolicy| p.spill)
    }

    /// Whether `key` has a spilled record here (it was admitted once: see the module docs).
    pub(crate) fn is_spilled(&self, key: Key) -> bool {
        self.dynamic.spill.as_ref().is_some_and(|s| s.contains(key))
    }

    fn spill_failed(&mut self, key: Key, error: &SpillError) {
        add(&self.counters.spill_errors, 1);
        self.warn(Warning::Spill {
            key,
            error: error.to_string(),
        });
    }

    /// An evicted row's record, if its policy spills.
    pub(crate) fn spill_evicted(&mut self, key: Key, record: &[f32]) {
        if !self.spills(key) {
            return;
        }
        let Some(spill) = self.dynamic.spill.as_mut() else {
            return;
        };
        match spill.put(key, record) {
            Ok(()) => add(&self.counters.rows_spilled, 1),
            Err(e) => self.spill_failed(key, &e),
        }
    }

    /// The record a new row of `key` starts from: its spilled record (taken out of the spill),
    /// else the initializer's.
    pub(crate) fn new_record(&mut self, key: Key) -> Vec<f32> {
        let mut record = Vec::new();
        if let Some(spill) = self.dynamic.spill.as_mut().filter(|s| s.contains(key)) {
            match spill.take(key, &mut record) {
                Ok(true) if record.len() == self.cfg.space.record_len(key) => {
                    add(&self.counters.rows_unspilled, 1);
                    return record;
                }
                Ok(_) => {}
                Err(e) => self.spill_failed(key, &e),
            }
        }
        self.cfg.space.initial_record(key)
    }

    /// The visible values an access refused a row reads: the spilled record's, else the
    /// initializer's (`out` has the key's visible length).
    pub(crate) fn refused_value(&mut self, key: Key, out: &mut [f32]) {
        if let Some(spill) = self.dynamic.spill.as_ref().filter(|s| s.contains(key)) {
            let mut record = Vec::new();
            match spill.get(key, &mut record) {
                Ok(true) if record.len() >= out.len() => {
                    out.copy_from_slice(&record[..out.len()]);
                    return;
                }
                Ok(_) => {}
                Err(e) => self.spill_failed(key, &e),
            }
        }
        self.cfg.space.initializer_for(key).fill(key, out);
    }

    /// At the old home of a move that carries `bucket`'s keys (static allocation; the creator
    /// changes): the bucket's spilled rows become held rows again, so that they go with the
    /// bucket's held keys to the new creator (which may then hold more than its budget by
    /// them, as by any relocation in). A walk of the spilled keys per move, under the node
    /// lock, like the walk of the store that finds the bucket's held keys.
    pub(crate) fn unspill_bucket(&mut self, bucket: u32) {
        let Some(spill) = self.dynamic.spill.as_ref() else {
            return;
        };
        let keys: Vec<Key> = spill
            .keys()
            .into_iter()
            .filter(|&k| self.dir.bucket(k) == bucket)
            .collect();
        let mut record = Vec::new();
        for key in keys {
            let Some(spill) = self.dynamic.spill.as_mut() else {
                return;
            };
            match spill.take(key, &mut record) {
                Ok(true) if record.len() == self.cfg.space.record_len(key) => {
                    if self.store.insert(key, &record) {
                        add(&self.counters.keys_created, 1);
                        add(&self.counters.rows_unspilled, 1);
                        self.dynamic.may_evict_again();
                    }
                }
                Ok(_) => {}
                Err(e) => self.spill_failed(key, &e),
            }
        }
    }

    /// Restore, before the node serves anything: `key`'s spilled record from a checkpoint. It
    /// goes back into this node's spill if its policy spills (so the budget holds), else it is
    /// restored as held ([`Node::restore_record`]). False, changing nothing, if the record
    /// does not fit `key` or the spill fails.
    pub fn restore_spilled(&mut self, key: Key, record: &[f32]) -> Result<bool, SpillError> {
        let space = &self.cfg.space;
        if !space.contains(key) || record.len() != space.record_len(key) {
            return Ok(false);
        }
        if self.spills(key)
            && let Some(spill) = self.dynamic.spill.as_mut()
        {
            spill.put(key, record)?;
            return Ok(true);
        }
        Ok(self.restore_record(key, record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::Partitioning;
    use crate::id::{NodeId, WorkerId};
    use crate::keyspace::KeySpace;
    use crate::node::{NodeConfig, Time};
    use crate::store::UpdateMode;
    use std::sync::atomic::Ordering;

    /// A spill whose file is damaged where key 1's record is: it fails to read it.
    struct Damaged;

    impl Spill for Damaged {
        fn put(&mut self, _: Key, _: &[f32]) -> Result<(), SpillError> {
            Ok(())
        }
        fn get(&self, _: Key, _: &mut Vec<f32>) -> Result<bool, SpillError> {
            Err(SpillError::Damaged {
                path: "/spill/node-0.bin".into(),
                offset: 8,
                reason: "bad checksum".into(),
            })
        }
        fn remove(&mut self, _: Key) -> Result<(), SpillError> {
            Ok(())
        }
        fn contains(&self, key: Key) -> bool {
            key == 1
        }
        fn len(&self) -> u64 {
            0
        }
        fn keys(&self) -> Vec<Key> {
            Vec::new()
        }
    }

    /// One node, a budget of one row, spill on: an evicted row comes back with its pushes; a
    /// spill that fails is a warning naming the file and offset, and the row starts afresh.
    #[test]
    fn an_evicted_row_comes_back_and_a_failing_spill_is_named() {
        let policy = DynamicPolicy {
            max_rows: Some(1),
            spill: true,
            ..DynamicPolicy::default()
        };
        let space = KeySpace::sparse(2).unwrap().with_dynamic(policy).unwrap();
        let cfg = NodeConfig::new(NodeId(0), 1, 1, space, Partitioning::Hash);
        let mut node = Node::new(cfg);
        let push = |node: &mut Node, key: Key| {
            node.issue_push(
                Time(0),
                WorkerId(0),
                &[key],
                &[1.0, 2.0],
                &[0],
                UpdateMode::Add,
            );
        };
        push(&mut node, 1);
        push(&mut node, 2);
        assert!(node.spill().unwrap().contains(1), "1 made room for 2");
        node.issue_pull(Time(0), WorkerId(0), &[1], &[0]);
        let mut out = [0.0; 2];
        assert!(node.store().pull_local(1, &mut out));
        assert_eq!(
            out,
            [1.0, 2.0],
            "taken back from the spill, pushes included"
        );
        assert!(node.spill().unwrap().contains(2) && !node.spill().unwrap().contains(1));
        let counters = node.counters().clone();
        assert_eq!(counters.rows_unspilled.load(Ordering::Relaxed), 1);
        node.set_spill(Box::new(Damaged));
        push(&mut node, 3);
        node.issue_pull(Time(0), WorkerId(0), &[1], &[0]);
        assert!(node.store().pull_local(1, &mut out));
        assert_eq!(out, [0.0, 0.0], "the initializer's row");
        assert_eq!(counters.spill_errors.load(Ordering::Relaxed), 1);
        let warning = std::iter::from_fn(|| node.poll_warning())
            .find(|w| matches!(w, Warning::Spill { .. }))
            .unwrap();
        assert!(!warning.is_anomaly());
        assert_eq!(
            warning.to_string(),
            "spill of key 1: spill file /spill/node-0.bin is damaged at offset 8: bad checksum"
        );
    }

    #[test]
    fn memory_spill_keeps_takes_and_lists_sorted() {
        let mut spill = MemorySpill::default();
        spill.put(9, &[1.0, 2.0]).unwrap();
        spill.put(3, &[3.0]).unwrap();
        spill.put(9, &[4.0, 5.0]).unwrap();
        assert_eq!((spill.len(), spill.keys()), (2, vec![3, 9]));
        let mut out = vec![7.0];
        assert!(spill.take(9, &mut out).unwrap());
        assert_eq!(out, [4.0, 5.0]);
        assert!(!spill.contains(9) && !spill.get(9, &mut out).unwrap());
        assert!(out.is_empty());
    }
}
