//! The state behind a `roam.Worker`: [`WorkerCell`] holds the Rust worker inside a mutex,
//! with the registry of its pending operations ([`PendingOp`]); `worker.rs` puts the Python
//! API on top.
//!
//! A [`roam::Worker`] is `Send` but not `Sync`, and Python objects may be used from any thread.
//! Operations go through the worker's own API — the same access front end as Rust callers and
//! the simulator — as owned pending operations, which borrow neither the worker nor a buffer:
//! a pull is a [`roam::PendingPull`] that owns the export of its output array ([`PinnedOut`]),
//! and a push, set or localize is a `roam::Ticket<'static>`.
//!
//! Invariants:
//! - Every use of the worker — issuing an operation, `wait_all`, `barrier`, `pull_if_local` —
//!   happens while the cell's mutex is held, so one Python thread per worker, as intended,
//!   never contends for it. The mutex is only ever taken with the GIL released (or with
//!   `try_lock`), and the GIL is never taken while it is held, so the two cannot deadlock:
//!   exports are therefore released (`Released`) only after the mutex is.
//! - A pending operation is shared by its Python ticket and its worker's registry, so it is
//!   completed by `wait_all`/`barrier` (or when the cell is dropped) even if Python dropped
//!   its ticket. It is waited only with the mutex held, which keeps the one waiter per
//!   operation.
//! - An operation that completed at issue (all keys local) is finished on the spot and holds
//!   nothing; its `wait` returns at once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use pyo3::prelude::*;
use roam::{AccessError, OpError};

use crate::buffers::PinnedOut;
use crate::errors;
use crate::node::NodeShared;

/// A worker and what its Python thread issued and has not yet seen completed.
pub(crate) struct Registry {
    /// Operations issued by this worker whose ticket is not yet finished, in issue order.
    pub(crate) pending: Vec<Arc<PendingOp>>,
    /// The first error of an operation whose Python ticket was dropped without being waited;
    /// reported by the next `wait_all` or `barrier`.
    pub(crate) orphan_error: Option<(OpError, bool)>,
    /// Declared last, so that it is retired only after the pending operations were finished.
    /// `None` once closed (`worker.close()`): the Rust worker was dropped, which retired it.
    pub(crate) worker: Option<roam::Worker>,
}

impl Registry {
    /// The worker, unless it was closed.
    pub(crate) fn worker(&self) -> Result<&roam::Worker, Closed> {
        self.worker.as_ref().ok_or(Closed)
    }
}

/// The worker was closed (retired) by `worker.close()` or the end of its `with` block.
#[derive(Debug)]
pub(crate) struct Closed;

impl From<Closed> for PyErr {
    fn from(_: Closed) -> Self {
        errors::op_error_msg(
            "this worker was closed (worker.close() or the end of its with block); a closed \
             worker accepts no more operations"
                .to_owned(),
        )
    }
}

/// Output exports whose operations are over, to be dropped (released, unpinned) once the
/// worker's lock is no longer held.
pub(crate) type Released = Vec<PinnedOut>;

/// Completes what is still pending when the cell goes away, as a dropped Rust ticket would: a
/// pull's output is filled before its export is released.
impl Drop for Registry {
    fn drop(&mut self) {
        for op in std::mem::take(&mut self.pending) {
            if op.result_if_done().is_some() {
                continue;
            }
            let (result, out) = op.finish(self);
            if let Err(err) = result {
                tracing::warn!("an operation of a dropped worker failed: {err}");
            }
            drop(out);
        }
    }
}

/// One worker handle and its pending operations.
pub(crate) struct WorkerCell {
    /// The worker and the registry; holding this lock is what entitles a thread to use them.
    pub(crate) lock: Mutex<Registry>,
    pub(crate) node: Arc<NodeShared>,
    pub(crate) id: u32,
    pub(crate) global_id: u32,
}

/// An operation handed to the node, owning everything it needs.
pub(crate) enum Issued {
    Pull(roam::PendingPull<PinnedOut>),
    Other(roam::Ticket<'static>),
}

impl Issued {
    fn is_finished(&self) -> bool {
        match self {
            Self::Pull(pull) => pull.is_finished(),
            Self::Other(ticket) => ticket.is_finished(),
        }
    }

    /// Blocks until the operation completes (a pull's remote values then land in its output);
    /// returns its result and the output export, if any.
    fn wait(self) -> (Result<(), OpError>, Option<PinnedOut>) {
        match self {
            Self::Pull(pull) => {
                let (out, result) = pull.finish();
                (result, Some(out))
            }
            Self::Other(ticket) => (ticket.wait(), None),
        }
    }
}

/// The state of one issued operation.
enum OpState {
    /// Not yet waited.
    Pending(Issued),
    /// Being waited by a thread that holds the worker's lock.
    Finishing,
    /// Waited: the operation's result.
    Done(Result<(), OpError>),
}

/// An issued operation, shared by its Python ticket and its worker's registry.
pub(crate) struct PendingOp {
    state: Mutex<OpState>,
    /// Whether the keys were given as signed integers (for error messages).
    pub(crate) signed_keys: bool,
}

impl PendingOp {
    fn done(result: Result<(), OpError>, signed_keys: bool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(OpState::Done(result)),
            signed_keys,
        })
    }

    /// The result if the operation was already waited (never blocks).
    pub(crate) fn result_if_done(&self) -> Option<Result<(), OpError>> {
        match &*self.state.try_lock()? {
            OpState::Done(result) => Some(result.clone()),
            _ => None,
        }
    }

    /// Waits for the operation (if not yet done) and returns its result, plus the output
    /// export to be released by the caller once the worker's lock is released. `_held` proves
    /// that the caller holds that lock, so no other thread is waiting for the same operation.
    fn finish(&self, _held: &mut Registry) -> (Result<(), OpError>, Option<PinnedOut>) {
        let issued = {
            let mut state = self.state.lock();
            match std::mem::replace(&mut *state, OpState::Finishing) {
                OpState::Pending(issued) => issued,
                OpState::Done(result) => {
                    *state = OpState::Done(result.clone());
                    return (result, None);
                }
                OpState::Finishing => unreachable!("finishing is only seen under the lock"),
            }
        };
        let (result, out) = issued.wait();
        *self.state.lock() = OpState::Done(result.clone());
        (result, out)
    }

    /// Finishes the operation if that does not block; `Some` with its result if it is done.
    fn try_finish(&self, held: &mut Registry) -> Option<(Result<(), OpError>, Option<PinnedOut>)> {
        let finished = match &*self.state.lock() {
            OpState::Pending(issued) => issued.is_finished(),
            OpState::Done(result) => return Some((result.clone(), None)),
            OpState::Finishing => false,
        };
        finished.then(|| self.finish(held))
    }

    pub(crate) fn is_finished(&self, _held: &mut Registry) -> bool {
        match &*self.state.lock() {
            OpState::Pending(issued) => issued.is_finished(),
            OpState::Done(_) => true,
            OpState::Finishing => false,
        }
    }
}

impl WorkerCell {
    pub(crate) fn new(worker: roam::Worker, node: Arc<NodeShared>) -> Self {
        Self {
            id: worker.id(),
            global_id: worker.global_id(),
            lock: Mutex::new(Registry {
                pending: Vec::new(),
                orphan_error: None,
                worker: Some(worker),
            }),
            node,
        }
    }

    /// The worker's index on its node.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The node the worker belongs to.
    pub(crate) fn node(&self) -> &NodeShared {
        &self.node
    }

    /// Runs `f` on the worker with the GIL released and the worker's lock held (for calls
    /// that create no pending operation: sampling); an error if the worker was closed.
    pub(crate) fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&roam::Worker) -> R + Send,
    ) -> PyResult<R> {
        Ok(py.detach(|| self.lock.lock().worker().map(f))?)
    }

    /// Runs `f` on the worker if its lock is free right now and it is not closed; `None`
    /// otherwise. Never blocks.
    pub(crate) fn try_run<R>(&self, f: impl FnOnce(&roam::Worker) -> R) -> Option<R> {
        self.lock
            .try_lock()
            .and_then(|reg| reg.worker().ok().map(f))
    }

    pub(crate) fn check_open(&self) -> PyResult<()> {
        if self.node.closed.load(Ordering::Acquire) {
            return Err(errors::op_error_msg(
                "the node has been shut down; its workers accept no more operations".to_owned(),
            ));
        }
        Ok(())
    }

    /// Runs `f` on the worker of an open node with the GIL released and the worker's lock held,
    /// for calls that may send messages but leave nothing for the binding to track (intents
    /// and clock ticks: the relocations they start are completed by the worker's `wait_all`).
    pub(crate) fn signal<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&roam::Worker) -> R + Send,
    ) -> PyResult<R> {
        self.check_open()?;
        Ok(py.detach(|| self.lock.lock().worker().map(f))?)
    }

    /// Runs `f` with the lock held: taken at once if free, else waited for with the GIL
    /// released (never while holding the GIL).
    pub(crate) fn with_lock<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Registry) -> R + Send,
    ) -> R {
        if let Some(mut reg) = self.lock.try_lock() {
            return f(&mut reg);
        }
        py.detach(|| f(&mut self.lock.lock()))
    }

    /// Completes, without blocking, the operations whose Python ticket is gone, and forgets
    /// the ones that are done. Keeps the registry (and the node's result table) small.
    fn reap(reg: &mut Registry, released: &mut Released) {
        let mut pending = std::mem::take(&mut reg.pending);
        pending.retain(|op| {
            if op.result_if_done().is_some() {
                return false;
            }
            let orphan = Arc::strong_count(op) == 1;
            if !orphan {
                return true;
            }
            match op.try_finish(reg) {
                Some((result, out)) => {
                    if let Err(err) = result {
                        reg.orphan_error.get_or_insert((err, op.signed_keys));
                    }
                    released.extend(out);
                    false
                }
                None => true,
            }
        });
        reg.pending = pending;
    }

    /// Issues an operation with the GIL released. `op` issues it on the worker; a pull refused
    /// at issue puts its output export into the `Released` it is given.
    pub(crate) fn issue<F>(
        &self,
        py: Python<'_>,
        signed_keys: bool,
        op: F,
    ) -> PyResult<Arc<PendingOp>>
    where
        F: FnOnce(&roam::Worker, &mut Released) -> Result<Issued, AccessError> + Send,
    {
        self.check_open()?;
        let (result, released) = py.detach(|| {
            let mut released = Released::new();
            let mut reg = self.lock.lock();
            Self::reap(&mut reg, &mut released);
            let Ok(worker) = reg.worker() else {
                return (Err(None), released);
            };
            let issued = match op(worker, &mut released) {
                Ok(issued) => issued,
                Err(err) => return (Err(Some(err)), released),
            };
            if issued.is_finished() {
                // All keys were local (or the answers are already in): nothing to keep.
                let (result, out) = issued.wait();
                released.extend(out);
                return (Ok(PendingOp::done(result, signed_keys)), released);
            }
            let op = Arc::new(PendingOp {
                state: Mutex::new(OpState::Pending(issued)),
                signed_keys,
            });
            reg.pending.push(op.clone());
            (Ok(op), released)
        });
        drop(released);
        result.map_err(|err| match err {
            Some(err) => errors::access_error(&err, signed_keys),
            None => Closed.into(),
        })
    }

    /// Waits for `op` with the GIL released (unless it is already done).
    pub(crate) fn wait_op(&self, py: Python<'_>, op: &PendingOp) -> PyResult<()> {
        let result = match op.result_if_done() {
            Some(result) => result,
            None => {
                let (result, released) = py.detach(|| {
                    let mut reg = self.lock.lock();
                    op.finish(&mut reg)
                });
                drop(released);
                result
            }
        };
        result.map_err(|err| errors::op_error(&err, op.signed_keys))
    }

    /// Finishes every pending operation (in issue order); the first error, including that of
    /// an operation whose ticket was dropped. Must be called with the GIL released.
    pub(crate) fn finish_all(
        reg: &mut Registry,
        released: &mut Released,
    ) -> Result<(), (OpError, bool)> {
        let mut first_error = reg.orphan_error.take();
        for op in std::mem::take(&mut reg.pending) {
            let (result, out) = op.finish(reg);
            released.extend(out);
            if let Err(err) = result {
                first_error.get_or_insert((err, op.signed_keys));
            }
        }
        if let Ok(worker) = reg.worker()
            && let Err(err) = worker.wait_all()
        {
            first_error.get_or_insert((err, false));
        }
        first_error.map_or(Ok(()), Err)
    }

    /// `wait_all` for the node's shutdown: completes everything, ignoring (logging) errors.
    pub(crate) fn drain(&self) {
        let mut released = Released::new();
        let mut reg = self.lock.lock();
        if let Err((err, _)) = Self::finish_all(&mut reg, &mut released) {
            tracing::warn!("an operation of worker {} failed: {err}", self.id);
        }
        drop(reg);
        // Released without the GIL: `PyBuffer`'s drop attaches to the interpreter itself. The
        // lock is no longer held, so this cannot deadlock.
        drop(released);
    }
}
