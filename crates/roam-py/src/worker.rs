//! `roam.Worker` and `roam.Ticket`: the per-thread access API.
//!
//! # Design
//!
//! A [`roam::Worker`] is `Send` but not `Sync`, and Python objects may be used from any thread.
//! Operations go through the worker's own API — the same access front end as Rust callers and
//! the simulator — as owned pending operations, which borrow neither the worker nor a buffer:
//! a pull is a [`roam::PendingPull`] that owns the export of its output array ([`PinnedOut`]),
//! and a push, set or localize is a `roam::Ticket<'static>`. So:
//!
//! - [`WorkerCell`] holds the Rust worker inside a mutex, with the registry of pending
//!   operations. Every use of the worker — issuing an operation, `wait_all`, `barrier`,
//!   `pull_if_local` — happens while that mutex is held, so one Python thread per worker, as
//!   intended, never contends for it. The mutex is only ever taken with the GIL released (or
//!   with `try_lock`), and the GIL is never taken while it is held, so the two cannot deadlock:
//!   exports are therefore released (`Released`) only after the mutex is.
//! - A pending operation ([`PendingOp`]) is shared by its Python ticket and its worker's
//!   registry, so it is completed by `wait_all`/`barrier` (or when the cell is dropped) even if
//!   Python dropped its ticket. It is waited only with the mutex held, which keeps the one
//!   waiter per operation.
//! - An operation that completed at issue (all keys local) is finished on the spot and holds
//!   nothing; its `wait` returns at once.
//!
//! The GIL is released while an operation is issued (it may write to sockets) and during every
//! wait that can block. Intents and clock ticks (`intent`, `advance_clock`) may hand off a
//! relocation too, so they also release it; the relocations they start are not tickets of the
//! binding but the Rust worker's own detached operations, which its `wait_all` completes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use roam::{AccessError, OpError};
use roam_core::UpdateMode;

use crate::buffers::{F32Buffer, Keys, PinnedOut, numpy};
use crate::errors;
use crate::node::NodeShared;

/// A worker and what its Python thread issued and has not yet seen completed.
struct Registry {
    /// Operations issued by this worker whose ticket is not yet finished, in issue order.
    pending: Vec<Arc<PendingOp>>,
    /// The first error of an operation whose Python ticket was dropped without being waited;
    /// reported by the next `wait_all` or `barrier`.
    orphan_error: Option<(OpError, bool)>,
    /// Declared last, so that it is retired only after the pending operations were finished.
    /// `None` once closed (`worker.close()`): the Rust worker was dropped, which retired it.
    worker: Option<roam::Worker>,
}

impl Registry {
    /// The worker, unless it was closed.
    fn worker(&self) -> Result<&roam::Worker, Closed> {
        self.worker.as_ref().ok_or(Closed)
    }
}

/// The worker was closed (retired) by `worker.close()` or the end of its `with` block.
#[derive(Debug)]
struct Closed;

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
type Released = Vec<PinnedOut>;

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
    lock: Mutex<Registry>,
    node: Arc<NodeShared>,
    id: u32,
    global_id: u32,
}

/// An operation handed to the node, owning everything it needs.
enum Issued {
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
    signed_keys: bool,
}

impl PendingOp {
    fn done(result: Result<(), OpError>, signed_keys: bool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(OpState::Done(result)),
            signed_keys,
        })
    }

    /// The result if the operation was already waited (never blocks).
    fn result_if_done(&self) -> Option<Result<(), OpError>> {
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

    fn is_finished(&self, _held: &mut Registry) -> bool {
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
    fn signal<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&roam::Worker) -> R + Send,
    ) -> PyResult<R> {
        self.check_open()?;
        Ok(py.detach(|| self.lock.lock().worker().map(f))?)
    }

    /// Runs `f` with the lock held: taken at once if free, else waited for with the GIL
    /// released (never while holding the GIL).
    fn with_lock<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut Registry) -> R + Send) -> R {
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
    fn issue<F>(&self, py: Python<'_>, signed_keys: bool, op: F) -> PyResult<Arc<PendingOp>>
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
    fn wait_op(&self, py: Python<'_>, op: &PendingOp) -> PyResult<()> {
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
    fn finish_all(reg: &mut Registry, released: &mut Released) -> Result<(), (OpError, bool)> {
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

/// The handle of one worker, for one Python thread: `node.worker(i)`.
///
/// Every operation takes keys as a `uint64` NumPy array (or `int64`, or any sequence of `int`)
/// and values as a C-contiguous `float32` array of any shape holding the keys' values
/// concatenated in key order; arrays are used in place, never copied. Operations return a
/// `Ticket`; `wait(ticket)` blocks (with the GIL released) until the operation is complete.
#[pyclass(frozen, module = "roam", name = "Worker")]
pub(crate) struct PyWorker {
    cell: Arc<WorkerCell>,
}

/// An issued operation: wait for it with `ticket.wait()` or `worker.wait(ticket)`.
///
/// For a pull, the output array is complete once the ticket is waited (local keys are copied at
/// issue, remote ones when the ticket is waited). A ticket dropped without being waited is
/// completed later: by the next `wait_all()` or `barrier()` of its worker (which then raise its
/// error, if any), or at the node's shutdown.
#[pyclass(frozen, module = "roam", name = "Ticket")]
pub(crate) struct PyTicket {
    op: Arc<PendingOp>,
    cell: Arc<WorkerCell>,
    /// What `wait` returns: a pull's output array.
    result: Option<Py<PyAny>>,
    kind: &'static str,
}

/// Why a collective failed.
enum Failed<E> {
    /// One of the worker's own operations, completed first.
    Op(OpError, bool),
    /// The worker was closed.
    Closed,
    /// The collective itself.
    Own(E),
}

impl PyWorker {
    pub(crate) fn new(cell: WorkerCell) -> Self {
        Self {
            cell: Arc::new(cell),
        }
    }

    /// Runs a collective (`barrier`, `sync_replicas`, `checkpoint`) after this worker's
    /// operations, with the GIL released; its own error becomes a Python exception through
    /// `to_py` once the GIL is held again.
    fn collective<E: Send>(
        &self,
        py: Python<'_>,
        arrive: impl FnOnce(&roam::Worker) -> Result<(), E> + Send,
        to_py: impl FnOnce(E) -> PyErr,
    ) -> PyResult<()> {
        self.cell.check_open()?;
        let cell = &self.cell;
        let (result, released) = py.detach(|| {
            let mut released = Released::new();
            let mut reg = cell.lock.lock();
            let result = WorkerCell::finish_all(&mut reg, &mut released)
                .map_err(|(err, signed)| Failed::Op(err, signed))
                .and_then(|()| reg.worker().map_err(|Closed| Failed::Closed))
                .and_then(|worker| arrive(worker).map_err(Failed::Own));
            drop(reg);
            (result, released)
        });
        drop(released);
        result.map_err(|err| match err {
            Failed::Op(err, signed) => errors::op_error(&err, signed),
            Failed::Closed => Closed.into(),
            Failed::Own(err) => to_py(err),
        })
    }

    pub(crate) fn cell(&self) -> &Arc<WorkerCell> {
        &self.cell
    }

    fn ticket(
        &self,
        op: Arc<PendingOp>,
        result: Option<Py<PyAny>>,
        kind: &'static str,
    ) -> PyTicket {
        PyTicket {
            op,
            cell: self.cell.clone(),
            result,
            kind,
        }
    }

    fn update(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
        mode: UpdateMode,
    ) -> PyResult<PyTicket> {
        let keys = Keys::get(keys)?;
        let name = if mode == UpdateMode::Gradient {
            "grads"
        } else {
            "vals"
        };
        let vals = F32Buffer::get(vals, name, false)?;
        keys.check_unpinned()?;
        vals.check_unpinned(name)?;
        let (keys, vals) = (&keys, &vals);
        let op = self.cell.issue(py, keys.signed(), move |worker, _| {
            // SAFETY: `vals` outlives this call, which only reads the slice (a push copies the
            // values before returning); no mutable slice of it exists (it does not overlap the
            // output of a pending pull, checked above).
            let vals = unsafe { vals.as_slice() };
            let ticket = match mode {
                UpdateMode::Add => worker.push(keys.as_slice(), vals),
                UpdateMode::Set => worker.set(keys.as_slice(), vals),
                UpdateMode::Gradient => worker.push_gradients(keys.as_slice(), vals),
            };
            ticket.map(Issued::Other)
        })?;
        let what = match mode {
            UpdateMode::Add => "push",
            UpdateMode::Set => "set",
            UpdateMode::Gradient => "push_gradients",
        };
        Ok(self.ticket(op, None, what))
    }
}

fn allocate_out<'py>(
    py: Python<'py>,
    node: &NodeShared,
    keys: &Keys,
) -> PyResult<Bound<'py, PyAny>> {
    let space = &node.space;
    let slice = keys.as_slice();
    if let Some(&key) = slice.iter().find(|&&k| !space.contains(k)) {
        let err = AccessError::KeyOutOfRange {
            key,
            num_keys: space.num_keys(),
        };
        return Err(errors::access_error(&err, keys.signed()));
    }
    let shape = match space.uniform_len() {
        Some(len) => PyTuple::new(py, [slice.len(), len])?,
        None => PyTuple::new(py, [slice.iter().map(|&k| space.len(k)).sum::<usize>()])?,
    };
    let np = numpy(py)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", np.getattr("float32")?)?;
    np.call_method("empty", (shape,), Some(&kwargs))
}

#[pymethods]
impl PyWorker {
    /// This worker's index on its node (`0..workers_per_node`).
    #[getter]
    fn id(&self) -> u32 {
        self.cell.id
    }

    /// This worker's node rank.
    #[getter]
    fn rank(&self) -> u32 {
        self.cell.node.rank
    }

    /// Nodes in the cluster.
    #[getter]
    fn num_nodes(&self) -> u32 {
        self.cell.node.num_nodes
    }

    /// Worker threads per node.
    #[getter]
    fn workers_per_node(&self) -> u32 {
        self.cell.node.workers_per_node
    }

    /// This worker's index among all workers of all nodes.
    #[getter]
    fn global_id(&self) -> u32 {
        self.cell.global_id
    }

    /// Number of keys (keys are `0..num_keys`); `None` with sparse keys.
    #[getter]
    fn num_keys(&self) -> Option<u64> {
        let space = &self.cell.node.space;
        (!space.is_sparse()).then(|| space.num_keys())
    }

    /// The value length shared by all keys, or `None` if lengths are per key.
    #[getter]
    fn value_length(&self) -> Option<usize> {
        self.cell.node.space.uniform_len()
    }

    /// The value length of `key`.
    fn value_len(&self, key: u64) -> PyResult<usize> {
        self.cell.node.value_len(key)
    }

    /// Reads the values of `keys` into `out` (or a new array) and returns a `Ticket`.
    ///
    /// `out` must be a writable, C-contiguous float32 array holding exactly the keys' values
    /// (any shape). Without `out`, a new array of shape `(len(keys), value_length)` (per-key
    /// lengths: `(total,)`) is allocated. Local keys are copied before this returns, remote
    /// ones when the ticket is waited: `out` is complete once `wait(ticket)` returns it. Until
    /// then no other pull, push or set may use memory overlapping `out` (`ValueError`).
    #[pyo3(signature = (keys, out=None))]
    fn pull(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        out: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTicket> {
        let keys = Keys::get(keys)?;
        let out_obj = match out {
            Some(out) => out.clone(),
            None => allocate_out(py, &self.cell.node, &keys)?,
        };
        keys.check_unpinned()?;
        let buf = PinnedOut::new(F32Buffer::get(&out_obj, "out", true)?, &keys)?;
        let keys = &keys;
        let op = self
            .cell
            .issue(py, keys.signed(), move |worker, released| {
                match worker.pull_owned(keys.as_slice(), buf) {
                    Ok(pull) => Ok(Issued::Pull(pull)),
                    Err(refused) => {
                        released.push(refused.out);
                        Err(refused.error)
                    }
                }
            })?;
        Ok(self.ticket(op, Some(out_obj.unbind()), "pull"))
    }

    /// Adds `vals` to the values of `keys` (an additive update, e.g. a gradient step); returns
    /// a `Ticket`. `vals` may be reused as soon as this returns.
    fn push(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
    ) -> PyResult<PyTicket> {
        self.update(py, keys, vals, UpdateMode::Add)
    }

    /// Applies `grads` (a float32 buffer, the keys' gradients concatenated) to `keys` with the
    /// node's optimizer (`Node(optimizer=...)`), where each key's row lives; returns a
    /// `Ticket`. The optimizer's state stays hidden in the rows: pulls never return it.
    /// Raises `roam.AccessError` (a `ValueError`) without an optimizer. `grads` may be reused
    /// as soon as this returns.
    fn push_gradients(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        grads: &Bound<'_, PyAny>,
    ) -> PyResult<PyTicket> {
        self.update(py, keys, grads, UpdateMode::Gradient)
    }

    /// Overwrites the values of `keys` with `vals`; returns a `Ticket`. `vals` may be reused as
    /// soon as this returns.
    fn set(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
    ) -> PyResult<PyTicket> {
        self.update(py, keys, vals, UpdateMode::Set)
    }

    /// Moves `keys` to this node (dynamic allocation; a no-op otherwise); returns a `Ticket`
    /// that completes once all of them have arrived. Accesses stay correct while they move.
    fn localize(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<PyTicket> {
        let keys = Keys::get(keys)?;
        keys.check_unpinned()?;
        let keys = &keys;
        let op = self.cell.issue(py, keys.signed(), move |worker, _| {
            worker.localize(keys.as_slice()).map(Issued::Other)
        })?;
        Ok(self.ticket(op, None, "localize"))
    }

    /// Blocks (GIL released) until `ticket`'s operation is complete. Returns the output array
    /// for a pull (`out` itself when it was given), `None` otherwise; raises the operation's
    /// error. Waiting again returns (or raises) the same.
    fn wait(&self, py: Python<'_>, ticket: &PyTicket) -> PyResult<Option<Py<PyAny>>> {
        ticket.wait(py)
    }

    /// Whether `ticket`'s operation has completed (a following `wait` does not block).
    fn is_finished(&self, py: Python<'_>, ticket: &PyTicket) -> bool {
        ticket.is_finished(py)
    }

    /// Blocks (GIL released) until every operation this worker issued has completed and the
    /// outputs of all its pulls are filled. Raises the first error among them (also of
    /// operations whose ticket was dropped without being waited).
    fn wait_all(&self, py: Python<'_>) -> PyResult<()> {
        let cell = &self.cell;
        let (result, released) = py.detach(|| {
            let mut released = Released::new();
            let result = WorkerCell::finish_all(&mut cell.lock.lock(), &mut released);
            (result, released)
        });
        drop(released);
        result.map_err(|(err, signed)| errors::op_error(&err, signed))
    }

    /// Copies `key`'s values into `out` if the key is on this node right now and returns
    /// `True`; returns `False` (leaving `out` untouched) otherwise. Never sends a message.
    fn pull_if_local(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let key = match key.extract::<i64>() {
            Ok(k) => k as u64,
            Err(_) => key.extract::<u64>()?,
        };
        self.cell.check_open()?;
        let buf = F32Buffer::get(out, "out", true)?;
        buf.check_unpinned("out")?;
        let result = self.cell.with_lock(py, |reg| {
            // SAFETY: `buf` outlives this call and no other Rust slice of it exists (it does not
            // overlap a pending pull's output).
            reg.worker()
                .map(|w| w.pull_if_local(key, unsafe { buf.as_mut_slice() }))
        });
        drop(buf);
        result?.map_err(|err| errors::access_error(&err, true))
    }

    /// Signals that this worker will access `keys` while its clock (`advance_clock`) is in
    /// `start..end` (AdaPM's intent; `end` defaults to `start + 1`). roam decides when to act:
    /// under dynamic allocation the keys not on this node are moved here shortly before
    /// `start`, how long before being measured from this worker's clock rate and the time keys
    /// take to arrive; under static allocation intents are only counted. Returns at once (the
    /// GIL is released meanwhile); relocations it starts are completed by `wait_all`/`barrier`.
    /// Raises `AccessError` (nothing recorded) if a key is out of range or `end <= start`.
    #[pyo3(signature = (keys, start, end = None))]
    fn intent(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        start: u64,
        end: Option<u64>,
    ) -> PyResult<()> {
        let end = intent_end(start, end)?;
        let keys = Keys::get(keys)?;
        keys.check_unpinned()?;
        let keys = &keys;
        self.cell
            .signal(py, move |worker| worker.intent(keys.as_slice(), start, end))?
            .map_err(|err| errors::intent_error(&err, keys.signed()))
    }

    /// Ticks this worker's clock (once per data point or batch) and returns the new clock;
    /// intents whose start is now within the action window are acted on (GIL released).
    fn advance_clock(&self, py: Python<'_>) -> PyResult<u64> {
        self.cell.signal(py, roam::Worker::advance_clock)
    }

    /// This worker's clock: how many times it called `advance_clock`.
    fn current_clock(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self
            .cell
            .with_lock(py, |reg| reg.worker().map(roam::Worker::current_clock))?)
    }

    /// How many clocks before their start intents are acted on now (measured from this
    /// worker's clock rate and the node's relocation times).
    fn intent_window(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self
            .cell
            .with_lock(py, |reg| reg.worker().map(roam::Worker::intent_window))?)
    }

    /// Retires this worker, as a Rust `Worker` that is dropped: completes its operations (as
    /// `wait_all`, raising the first error among them after retiring it), then counts it as
    /// arrived at every later barrier of its node, so that its sibling workers do not wait for
    /// it. Call it when the worker's thread is done (or use the worker as a context manager:
    /// `with node.worker(i) as w:`). Later operations on it raise `OpError`; closing again does
    /// nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let cell = &self.cell;
        let (result, released) = py.detach(|| {
            let mut released = Released::new();
            let mut reg = cell.lock.lock();
            let result = WorkerCell::finish_all(&mut reg, &mut released);
            let worker = reg.worker.take();
            drop(reg);
            // Retired here, without the worker's lock: the drop tells the node.
            drop(worker);
            (result, released)
        });
        drop(released);
        result.map_err(|(err, signed)| errors::op_error(&err, signed))
    }

    /// Whether the worker was closed.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.cell.with_lock(py, |reg| reg.worker.is_none())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the worker at the end of a `with` block, also when the block raised (then an
    /// error of the close itself is logged, not raised over the block's).
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        match self.close(py) {
            Err(err) if exc_type.is_some() => {
                tracing::warn!("closing worker {} after an error: {err}", self.cell.id);
                Ok(false)
            }
            other => other.map(|()| false),
        }
    }

    /// Waits for this worker's operations (as `wait_all`), then for every worker of every node
    /// to reach the barrier; everything issued before it by any worker has then been applied.
    /// Blocks with the GIL released.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.collective(py, roam::Worker::barrier, |err| {
            errors::op_error(&err, false)
        })
    }

    /// A collective like `barrier`: when it returns, every push issued before it by any worker
    /// of any node is in every replica of the replicated keys (`Node(replicated_keys=...)`).
    /// Between calls, replicas are eventually consistent. Blocks with the GIL released.
    fn sync_replicas(&self, py: Python<'_>) -> PyResult<()> {
        self.collective(py, roam::Worker::sync_replicas, |err| {
            errors::op_error(&err, false)
        })
    }

    /// Writes a checkpoint of every node into directory `path` (shared by every node), noting
    /// `epoch` in its manifest: a collective like `barrier` that holds every push issued before
    /// it by any worker and none issued after. Each node writes a safetensors shard (`keys`,
    /// `values`; per-key lengths add `offsets`), rank 0 the manifest last; restore with
    /// `Node(restore_from=path)` on any number of nodes. Blocks with the GIL released.
    #[pyo3(signature = (path, epoch = 0))]
    fn checkpoint(&self, py: Python<'_>, path: std::path::PathBuf, epoch: u64) -> PyResult<()> {
        self.collective(
            py,
            |worker| {
                worker
                    .checkpoint_with(&path, epoch, serde_json::Value::Null)
                    .map_err(|err| err.to_string())
            },
            errors::op_error_msg,
        )
    }

    /// Starts drawing `n` samples from sampler `sampler` (its index in
    /// `Node(samplers=[...])`) and returns the `Sample` to draw them from with `pull_sample`.
    /// Under `preloc` the keys are drawn now and under `pool` taken from the node's pool; the
    /// ones not here start moving here (dynamic allocation). With `start` (and `end`, default
    /// `start + 1`), the samples are for this worker's clocks `start..end`: under `preloc`
    /// they are drawn now and signalled as an intent (`Worker.intent`), so they move shortly
    /// before `start` instead of at once. The GIL is released.
    #[pyo3(signature = (sampler, n, start = None, end = None))]
    fn prepare_sample(
        &self,
        py: Python<'_>,
        sampler: i64,
        n: i64,
        start: Option<u64>,
        end: Option<u64>,
    ) -> PyResult<crate::sampling::PySample> {
        let clocks = match (start, end) {
            (None, None) => None,
            (None, Some(end)) => {
                return Err(PyValueError::new_err(format!(
                    "prepare_sample: end={end} given without start"
                )));
            }
            (Some(start), end) => Some((start, intent_end(start, end)?)),
        };
        crate::sampling::prepare(py, &self.cell, sampler, n, clocks)
    }

    /// Draws `n` of `sample`'s samples (default: all that are left) and returns
    /// `(keys, vals)`: a `uint64` array of `n` keys and a `float32` array of shape
    /// `(n, value_len)` holding their values, complete (remote values are waited for with the
    /// GIL released). Pushes to sampled keys are ordinary pushes.
    #[pyo3(signature = (sample, n = None))]
    fn pull_sample(
        &self,
        py: Python<'_>,
        sample: &crate::sampling::PySample,
        n: Option<i64>,
    ) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        crate::sampling::pull(py, &self.cell, sample, n)
    }

    /// Ends `sample`; returns how many of its samples were never pulled.
    fn finish_sample(&self, py: Python<'_>, sample: &crate::sampling::PySample) -> PyResult<usize> {
        crate::sampling::finish(py, &self.cell, sample)
    }

    /// The node's counters (as `Node.stats()`).
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        self.cell.node.stats(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "<roam.Worker {} of node {} ({} nodes x {} workers)>",
            self.cell.id,
            self.cell.node.rank,
            self.cell.node.num_nodes,
            self.cell.node.workers_per_node
        )
    }
}

impl PyTicket {
    fn wait(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.cell.wait_op(py, &self.op)?;
        Ok(self.result.as_ref().map(|r| r.clone_ref(py)))
    }

    fn is_finished(&self, py: Python<'_>) -> bool {
        if self.op.result_if_done().is_some() {
            return true;
        }
        self.cell.with_lock(py, |reg| self.op.is_finished(reg))
    }
}

#[pymethods]
impl PyTicket {
    /// Blocks (GIL released) until the operation is complete; returns the output array for a
    /// pull, `None` otherwise (same as `worker.wait(ticket)`).
    #[pyo3(name = "wait")]
    fn py_wait(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.wait(py)
    }

    /// Whether the operation has completed (a following `wait` does not block).
    #[pyo3(name = "is_finished")]
    fn py_is_finished(&self, py: Python<'_>) -> bool {
        self.is_finished(py)
    }

    /// The operation: `"pull"`, `"push"`, `"set"` or `"localize"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if self.is_finished(py) {
            "finished"
        } else {
            "pending"
        };
        format!("<roam.Ticket {} ({state})>", self.kind)
    }
}

/// Rejects a negative timeout or duration given in seconds.
pub(crate) fn seconds(what: &str, secs: f64) -> PyResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(secs).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite, non-negative number of seconds, not {secs}"
        ))
    })
}

/// An intent's end clock: as given, else the clock after `start`.
fn intent_end(start: u64, end: Option<u64>) -> PyResult<u64> {
    match end {
        Some(end) => Ok(end),
        None => start.checked_add(1).ok_or_else(|| {
            PyValueError::new_err(format!(
                "intent start clock {start} has no next clock: give end explicitly"
            ))
        }),
    }
}
