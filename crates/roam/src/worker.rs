//! The worker handle: one per worker thread, the API of pull, push, set, wait and barrier.
//!
//! Every access first validates the whole batch (nothing changes on bad input), then serves
//! local keys straight from the store under their latches — no message, no node lock — and
//! hands only the remaining keys to the protocol, one batched message per destination node.
//!
//! A pull's [`Ticket`] borrows the output buffer until it is waited on (or dropped, which also
//! waits), so remote values can be copied in only when the caller asks for them and the buffer
//! can never be read half-filled.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use roam_core::stats::{WorkerCounters, bump};
use roam_core::{
    AccessError, Directory, Key, KeySpace, Node, OpError, ReqId, Residency, Time, UpdateMode,
    WorkerId,
};

use crate::runtime::Shared;

/// A handle for one worker thread. Not `Sync`: each thread takes its own from the node.
pub struct Worker {
    shared: Arc<Shared>,
    id: WorkerId,
    counters: Arc<WorkerCounters>,
    outstanding: RefCell<HashSet<u64>>,
    /// Operations whose tickets were detached: their results are discarded by `wait_all`.
    detached: RefCell<HashSet<u64>>,
    misses: RefCell<(Vec<Key>, Vec<usize>)>,
    /// The first error of an operation whose ticket was dropped without a wait: reported by the
    /// next `wait_all` or `barrier`, since nobody else will see it.
    dropped_error: RefCell<Option<OpError>>,
}

/// An issued operation. Wait on it with [`Ticket::wait`] (or [`Worker::wait`]); dropping it
/// waits too. For a pull, the output buffer is complete once the ticket is waited.
#[must_use = "an operation is only known to be complete once its ticket is waited"]
pub struct Ticket<'a> {
    worker: &'a Worker,
    req: Option<ReqId>,
    out: Option<&'a mut [f32]>,
}

impl Ticket<'_> {
    /// Whether the operation has completed (a following `wait` returns immediately).
    pub fn is_finished(&self) -> bool {
        self.req
            .is_none_or(|req| self.worker.shared.is_complete(self.worker.id, req))
    }

    /// Lets the operation complete in the background without waiting for it here (dropping a
    /// ticket waits). Its outcome, including any error, is discarded; [`Worker::wait_all`] and
    /// [`Worker::barrier`] still wait for it. Meant for hints such as `localize`; a detached
    /// pull still runs, but its values are not copied into the buffer.
    pub fn detach(mut self) {
        if let Some(req) = self.req.take() {
            self.worker.detached.borrow_mut().insert(req.0);
        }
    }

    /// Blocks until the operation completes; for a pull, the values are then in the buffer.
    pub fn wait(mut self) -> Result<(), OpError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<(), OpError> {
        let Some(req) = self.req.take() else {
            return Ok(());
        };
        let result = self.worker.shared.wait_result(self.worker.id, req);
        self.worker.outstanding.borrow_mut().remove(&req.0);
        let parts = result?;
        if let Some(out) = self.out.as_deref_mut() {
            for part in &parts {
                part.scatter(&self.worker.shared.space, out);
            }
        }
        Ok(())
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Err(err) = self.finish() {
            tracing::warn!("operation dropped without wait failed: {err}");
            self.worker.dropped_error.borrow_mut().get_or_insert(err);
        }
    }
}

/// A worker handle that goes away (its thread finished or failed) is retired: it counts as
/// arrived at its node's later barriers, so its siblings are not left waiting for it.
impl Drop for Worker {
    fn drop(&mut self) {
        self.shared
            .with_node(|node, now| node.retire_worker(now, self.id));
    }
}

impl Worker {
    pub(crate) fn new(shared: Arc<Shared>, id: WorkerId) -> Self {
        let counters = shared.worker_counters[id.index()].clone();
        Self {
            shared,
            id,
            counters,
            outstanding: RefCell::default(),
            detached: RefCell::default(),
            misses: RefCell::default(),
            dropped_error: RefCell::default(),
        }
    }

    /// This worker's index on its node.
    pub fn id(&self) -> u32 {
        self.id.0
    }

    /// This worker's node rank.
    pub fn rank(&self) -> u32 {
        self.shared.rank.0
    }

    /// Nodes in the cluster.
    pub fn num_nodes(&self) -> u32 {
        self.shared.num_nodes
    }

    /// Worker threads per node.
    pub fn workers_per_node(&self) -> u32 {
        self.shared.workers_per_node
    }

    /// This worker's index among all workers of all nodes.
    pub fn global_id(&self) -> u32 {
        self.shared.rank.0 * self.shared.workers_per_node + self.id.0
    }

    /// The key space.
    pub fn key_space(&self) -> &KeySpace {
        &self.shared.space
    }

    /// A snapshot of this node's directory (see [`crate::NodeHandle::directory`]).
    pub fn directory(&self) -> Directory {
        self.shared.with_node(|node, _| node.directory().clone())
    }

    /// Reads the values of `keys` into `out` (their lengths concatenated in key order). Local
    /// keys are copied before this returns; the rest arrive when the ticket is waited. A key
    /// named twice is read twice (its values appear at both places).
    pub fn pull<'a>(&'a self, keys: &[Key], out: &'a mut [f32]) -> Result<Ticket<'a>, AccessError> {
        let space = &self.shared.space;
        let fast = self.shared.fast_local_access;
        match space.uniform_len() {
            // The hot path checks keys while it copies (a pull changes nothing, so failing
            // half-way is harmless: the buffer's contents are then unspecified).
            Some(len) if fast => {
                if keys.len() * len != out.len() {
                    let expected = keys.len() * len;
                    return Err(AccessError::LengthMismatch {
                        keys: keys.len(),
                        expected,
                        actual: out.len(),
                    });
                }
            }
            _ => {
                space.check_batch(keys, out.len())?;
            }
        }
        let mut misses = self.misses.borrow_mut();
        let (miss_keys, miss_offsets) = &mut *misses;
        miss_keys.clear();
        miss_offsets.clear();
        let store = &self.shared.store;
        let fast = self.shared.fast_local_access;
        if let (Some(len), true) = (self.shared.space.uniform_len(), fast) {
            // The common case, kept free of per-key length lookups.
            let checked = store.pull_batch_local(keys, out, len, |i| {
                miss_keys.push(keys[i]);
                miss_offsets.push(i * len);
            });
            if let Err(key) = checked {
                return Err(AccessError::KeyOutOfRange {
                    key,
                    num_keys: space.num_keys(),
                });
            }
        } else {
            let mut offset = 0;
            for &key in keys {
                let len = space.len(key);
                let here = &mut out[offset..offset + len];
                if !(fast && store.pull_local(key, here)) {
                    miss_keys.push(key);
                    miss_offsets.push(offset);
                }
                offset += len;
            }
        }
        let counters = (
            &self.counters.local_pull_keys,
            &self.counters.local_pull_ops,
        );
        let local = keys.len() - miss_keys.len();
        Ok(
            self.issue_rest(counters, local, miss_keys, Some(out), |node, now| {
                node.issue_pull(now, self.id, miss_keys, miss_offsets)
            }),
        )
    }

    /// Adds `vals` to the values of `keys` (additive update, e.g. a gradient step). A key named
    /// twice in one batch is updated twice: both of its updates are added.
    pub fn push(&self, keys: &[Key], vals: &[f32]) -> Result<Ticket<'_>, AccessError> {
        self.update(keys, vals, UpdateMode::Add)
    }

    /// Overwrites the values of `keys` with `vals`. A key named twice is set twice, in batch
    /// order when it is local; do not rely on which write wins for a remote key.
    pub fn set(&self, keys: &[Key], vals: &[f32]) -> Result<Ticket<'_>, AccessError> {
        self.update(keys, vals, UpdateMode::Set)
    }

    // Inlined into `push` and `set` so that each gets a loop specialised to its mode.
    #[inline(always)]
    fn update(
        &self,
        keys: &[Key],
        vals: &[f32],
        mode: UpdateMode,
    ) -> Result<Ticket<'_>, AccessError> {
        self.shared.space.check_batch(keys, vals.len())?;
        let mut misses = self.misses.borrow_mut();
        let (miss_keys, miss_offsets) = &mut *misses;
        miss_keys.clear();
        miss_offsets.clear();
        let store = &self.shared.store;
        let fast = self.shared.fast_local_access;
        if let (Some(len), true) = (self.shared.space.uniform_len(), fast) {
            store.push_batch_local(keys, vals, len, mode, |i| {
                miss_keys.push(keys[i]);
                miss_offsets.push(i * len);
            });
        } else {
            let space = &self.shared.space;
            let mut offset = 0;
            for &key in keys {
                let len = space.len(key);
                if !(fast && store.push_local(key, &vals[offset..offset + len], mode)) {
                    miss_keys.push(key);
                    miss_offsets.push(offset);
                }
                offset += len;
            }
        }
        let counters = (
            &self.counters.local_push_keys,
            &self.counters.local_push_ops,
        );
        let local = keys.len() - miss_keys.len();
        Ok(
            self.issue_rest(counters, local, miss_keys, None, |node, now| {
                node.issue_push(now, self.id, miss_keys, vals, miss_offsets, mode)
            }),
        )
    }

    /// Counts `local` keys served by the fast path and, if any key was missed, hands the rest to
    /// the node (`issue`); the ticket completes at once when nothing was missed.
    fn issue_rest<'a>(
        &'a self,
        (keys_counter, ops_counter): (&AtomicU64, &AtomicU64),
        local: usize,
        missed: &[Key],
        out: Option<&'a mut [f32]>,
        issue: impl FnOnce(&mut Node, Time) -> ReqId,
    ) -> Ticket<'a> {
        bump(keys_counter, local as u64);
        if missed.is_empty() {
            bump(ops_counter, 1);
            return Ticket {
                worker: self,
                req: None,
                out: None,
            };
        }
        let req = self.shared.with_node(issue);
        self.outstanding.borrow_mut().insert(req.0);
        Ticket {
            worker: self,
            req: Some(req),
            out,
        }
    }

    /// Moves ownership of `keys` to this node (dynamic allocation; a no-op otherwise). Keys
    /// already here or on their way are cheap; the ticket completes once all have landed.
    /// Accesses stay correct wherever the keys are while they move.
    pub fn localize(&self, keys: &[Key]) -> Result<Ticket<'_>, AccessError> {
        let space = &self.shared.space;
        if let Some(&key) = keys.iter().find(|&&k| k >= space.num_keys()) {
            return Err(AccessError::KeyOutOfRange {
                key,
                num_keys: space.num_keys(),
            });
        }
        let store = &self.shared.store;
        if !self.shared.dynamic || keys.iter().all(|&k| store.residency(k) == Residency::Local) {
            return Ok(Ticket {
                worker: self,
                req: None,
                out: None,
            });
        }
        let req = self
            .shared
            .with_node(|node, now| node.issue_localize(now, self.id, keys));
        self.outstanding.borrow_mut().insert(req.0);
        Ok(Ticket {
            worker: self,
            req: Some(req),
            out: None,
        })
    }

    /// Blocks until `ticket`'s operation completes (same as [`Ticket::wait`]).
    pub fn wait(&self, ticket: Ticket<'_>) -> Result<(), OpError> {
        ticket.wait()
    }

    /// Whether `ticket`'s operation has completed.
    pub fn is_finished(&self, ticket: &Ticket<'_>) -> bool {
        ticket.is_finished()
    }

    /// Blocks until every operation this worker issued has completed. Results stay with their
    /// tickets (a pull's buffer is filled when its ticket is waited); returns the first error
    /// among them, or else the first error of an operation whose ticket was dropped without a
    /// wait since the last call (detached tickets excepted: their outcome is discarded).
    pub fn wait_all(&self) -> Result<(), OpError> {
        let outstanding: Vec<u64> = self.outstanding.borrow().iter().copied().collect();
        let mut first_error = None;
        for req in outstanding {
            if self.detached.borrow_mut().remove(&req) {
                // Nobody will take this result: take it here, and ignore its outcome.
                let _ = self.shared.wait_result(self.id, ReqId(req));
                self.outstanding.borrow_mut().remove(&req);
            } else if let Err(err) = self.shared.wait_complete(self.id, ReqId(req)) {
                first_error.get_or_insert(err);
            }
        }
        let dropped = self.dropped_error.borrow_mut().take();
        first_error.or(dropped).map_or(Ok(()), Err)
    }

    /// Copies `key`'s values into `out` if the key is local right now; never sends a message.
    pub fn pull_if_local(&self, key: Key, out: &mut [f32]) -> Result<bool, AccessError> {
        self.shared
            .space
            .check_batch(std::slice::from_ref(&key), out.len())?;
        let hit = self.shared.fast_local_access && self.shared.store.pull_local(key, out);
        if hit {
            bump(&self.counters.local_pull_keys, 1);
            bump(&self.counters.local_pull_ops, 1);
        }
        Ok(hit)
    }

    /// Waits for this worker's outstanding operations, then for every worker thread of every
    /// node to reach the barrier (a worker whose handle was dropped counts as arrived).
    /// Operations issued before the barrier by any worker have been applied when it returns.
    pub fn barrier(&self) -> Result<(), OpError> {
        self.wait_all()?;
        let req = self
            .shared
            .with_node(|node, now| node.issue_barrier(now, self.id));
        self.shared.wait_result(self.id, req).map(drop)
    }
}
