//! `roam.Worker` and `roam.Ticket`: the per-thread access API.
//!
//! # Design
//!
//! Each `roam.Worker` wraps a [`WorkerCell`] (`worker_cell.rs`): the Rust worker behind a
//! mutex, with the registry of its pending operations, and the rules that keep the mutex and
//! the GIL from deadlocking. A `roam.Ticket` shares its [`PendingOp`] with that registry, so an
//! operation whose ticket Python dropped is still completed by `wait_all`/`barrier`.
//!
//! The GIL is released while an operation is issued (it may write to sockets) and during every
//! wait that can block. Intents and clock ticks (`intent`, `advance_clock`) may hand off a
//! relocation too, so they also release it; the relocations they start are not tickets of the
//! binding but the Rust worker's own detached operations, which its `wait_all` completes.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use roam::{AccessError, OpError};
use roam_core::UpdateMode;

use crate::buffers::{F32Buffer, Keys, PinnedOut, numpy};
use crate::errors;
use crate::node::NodeShared;
pub(crate) use crate::worker_cell::WorkerCell;
use crate::worker_cell::{Closed, Issued, PendingOp, Released};

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
        table: Option<&str>,
    ) -> PyResult<PyTicket> {
        let (keys, table) = self.cell.node.table_keys(table, Keys::get(keys)?)?;
        let (what, name) = match mode {
            UpdateMode::Add => ("push", "vals"),
            UpdateMode::Set => ("set", "vals"),
            UpdateMode::Gradient => ("push_gradients", "grads"),
            UpdateMode::GradientSums => ("push_gradient_sums", "aggregates"),
        };
        if mode.is_gradient()
            && let Some(table) = table.as_ref().filter(|t| t.optimizer().is_none())
        {
            return Err(errors::access_error_msg(format!(
                "table {:?} has no optimizer; {what} needs one",
                table.name()
            )));
        }
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
                UpdateMode::GradientSums => worker.push_gradient_sums(keys.as_slice(), vals),
            };
            ticket.map(Issued::Other)
        })?;
        Ok(self.ticket(op, None, what))
    }
}

fn allocate_out<'py>(
    py: Python<'py>,
    node: &NodeShared,
    keys: &Keys,
    table: Option<&roam::Table>,
) -> PyResult<Bound<'py, PyAny>> {
    let space = &node.space;
    let slice = keys.as_slice();
    let np = numpy(py)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", np.getattr("float32")?)?;
    if let Some(table) = table {
        // The ids were mapped and checked (`NodeShared::table_keys`).
        let shape = PyTuple::new(py, [slice.len(), table.dim()])?;
        return np.call_method("empty", (shape,), Some(&kwargs));
    }
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

    /// The named tables and their dimensions, in key order (see `Node.tables`).
    #[getter]
    fn tables(&self) -> Vec<(String, usize)> {
        self.cell.node.table_dims()
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
    /// With `table`, `keys` are ids of that named table (`Node(tables=...)`) and a new array
    /// has shape `(len(keys), dim)`.
    #[pyo3(signature = (keys, out=None, *, table=None))]
    fn pull(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        out: Option<&Bound<'_, PyAny>>,
        table: Option<&str>,
    ) -> PyResult<PyTicket> {
        let (keys, table) = self.cell.node.table_keys(table, Keys::get(keys)?)?;
        let out_obj = match out {
            Some(out) => out.clone(),
            None => allocate_out(py, &self.cell.node, &keys, table.as_ref())?,
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
    /// a `Ticket`. `vals` may be reused as soon as this returns. With `table`, `keys` are ids
    /// of that named table.
    #[pyo3(signature = (keys, vals, *, table=None))]
    fn push(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
        table: Option<&str>,
    ) -> PyResult<PyTicket> {
        self.update(py, keys, vals, UpdateMode::Add, table)
    }

    /// Applies `grads` (a float32 buffer, the keys' gradients concatenated) to `keys` with the
    /// node's optimizer (`Node(optimizer=...)`), where each key's row lives; returns a
    /// `Ticket`. The optimizer's state stays hidden in the rows: pulls never return it.
    /// Raises `roam.AccessError` (a `ValueError`) without an optimizer. `grads` may be reused
    /// as soon as this returns. With `table`, `keys` are ids of that named table, stepped by
    /// its optimizer.
    #[pyo3(signature = (keys, grads, *, table=None))]
    fn push_gradients(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        grads: &Bound<'_, PyAny>,
        table: Option<&str>,
    ) -> PyResult<PyTicket> {
        self.update(py, keys, grads, UpdateMode::Gradient, table)
    }

    /// Applies aggregates of gradients to `keys`, one optimizer step per key standing for all
    /// of them; returns a `Ticket`. `aggregates` (float32) holds, per key, the sum of its
    /// gradients then the sum of their squares (twice the key's length): for gradients a
    /// worker gathers before sending them (copies of rows held elsewhere), so that the
    /// optimizer's state grows as if each had been pushed (Adagrad's accumulator by the
    /// squares, not by the square of the sum). Raises `roam.AccessError` without an optimizer
    /// or on a length mismatch. With `table`, `keys` are ids of that named table.
    #[pyo3(signature = (keys, aggregates, *, table=None))]
    fn push_gradient_sums(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        aggregates: &Bound<'_, PyAny>,
        table: Option<&str>,
    ) -> PyResult<PyTicket> {
        self.update(py, keys, aggregates, UpdateMode::GradientSums, table)
    }

    /// Overwrites the values of `keys` with `vals`; returns a `Ticket`. `vals` may be reused as
    /// soon as this returns. With `table`, `keys` are ids of that named table.
    #[pyo3(signature = (keys, vals, *, table=None))]
    fn set(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vals: &Bound<'_, PyAny>,
        table: Option<&str>,
    ) -> PyResult<PyTicket> {
        self.update(py, keys, vals, UpdateMode::Set, table)
    }

    /// Moves `keys` to this node (dynamic allocation; a no-op otherwise); returns a `Ticket`
    /// that completes once all of them have arrived. Accesses stay correct while they move.
    /// With `table`, `keys` are ids of that named table.
    #[pyo3(signature = (keys, *, table=None))]
    fn localize(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        table: Option<&str>,
    ) -> PyResult<PyTicket> {
        let (keys, _) = self.cell.node.table_keys(table, Keys::get(keys)?)?;
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
    /// `values`; per-key lengths add `offsets`; named tables: `<name>.ids`, `<name>.values`
    /// per table), rank 0 the manifest last; restore with
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
