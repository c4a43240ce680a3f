//! `roam.Sampler` and `roam.Sample`: sampling (NuPS) from Python.
//!
//! A `Sampler` is a [`SamplerSpec`] built and validated in Python (distribution, scheme,
//! replacement); the list given to `Node(samplers=[...])` is registered with the node, each
//! sampler's id being its index. `Worker.prepare_sample` returns a `Sample` that owns the Rust
//! [`SampleHandle`] and is bound to the worker that prepared it; `Worker.pull_sample` draws from
//! it into fresh NumPy arrays and waits for the remote values (GIL released);
//! `Worker.finish_sample` ends it.
//!
//! A `Sample`'s handle is taken out of its state for the duration of a call (`InUse`), so the
//! state's mutex is never held while blocking and never waited for with the GIL held.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use roam::{Distribution, SampleError, SampleHandle, SamplerId, SamplerSpec, Scheme, Support};
use roam_core::sampling::{DistributionError, MAX_GROUP_SAMPLES};

use crate::buffers::{F32Buffer, U64Out, numpy_empty};
use crate::errors;
use crate::worker::WorkerCell;

/// A sampler to register with a node: which keys to draw, with which probabilities, and the
/// scheme that serves the draws.
///
/// Build with `Sampler.uniform`, `Sampler.log_uniform` or `Sampler.weighted` and pass a list
/// to `roam.Node(samplers=[...])`; a sampler's id (for `Worker.prepare_sample`) is its index in
/// that list. Every node must register the same samplers.
#[pyclass(frozen, module = "roam", name = "Sampler")]
pub(crate) struct PySampler {
    pub(crate) spec: SamplerSpec,
}

/// A non-negative integer argument as `u64` (a negative one is a `ValueError` naming it).
fn non_negative(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if let Ok(v) = obj.extract::<u64>() {
        return Ok(v);
    }
    match obj.extract::<i64>() {
        Ok(v) => Err(PyValueError::new_err(format!(
            "{what} must be non-negative, not {v}"
        ))),
        Err(_) => obj.extract::<u64>(),
    }
}

fn distribution_error(ctor: &str, err: &DistributionError) -> PyErr {
    PyValueError::new_err(format!("Sampler.{ctor}: {err}"))
}

impl PySampler {
    /// Checks the scheme and options and builds the spec (the pool group bound is the one
    /// `SamplerSpec::value_len` enforces at the node's start, checked here to fail early).
    fn build(
        distribution: Distribution,
        scheme: &str,
        with_replacement: bool,
        group_draws: usize,
    ) -> PyResult<Self> {
        let scheme: Scheme = scheme
            .parse()
            .map_err(|err| PyValueError::new_err(format!("{err}")))?;
        if group_draws == 0 {
            return Err(PyValueError::new_err("group_draws must be at least 1"));
        }
        if let Scheme::Pool { reuse, .. } = scheme
            && group_draws.saturating_mul(reuse as usize) > MAX_GROUP_SAMPLES
        {
            return Err(PyValueError::new_err(format!(
                "scheme \"{scheme}\" with group_draws={group_draws}: a pool group of \
                 group_draws × U = {} samples is too large (at most {MAX_GROUP_SAMPLES})",
                group_draws as u128 * u128::from(reuse),
            )));
        }
        let mut spec = SamplerSpec::new(distribution, scheme);
        spec.with_replacement = with_replacement;
        spec.group_draws = group_draws;
        Ok(Self { spec })
    }

    fn support(&self) -> &Support {
        self.spec.distribution.support()
    }

    /// `Sampler.uniform(...)`-like text naming this sampler (for errors and `repr`).
    pub(crate) fn describe(spec: &SamplerSpec) -> String {
        let s = spec.distribution.support();
        let head = match spec.distribution.shape_name() {
            "weighted" => format!("Sampler.weighted(<{} weights>, first={}", s.len, s.first),
            "log-uniform" => format!("Sampler.log_uniform({}, {}", s.first, s.len),
            _ => format!("Sampler.uniform({}, {}", s.first, s.len),
        };
        format!(
            "{head}, stride={}, scheme={:?}, with_replacement={})",
            s.stride,
            spec.scheme.to_string(),
            if spec.with_replacement {
                "True"
            } else {
                "False"
            }
        )
    }
}

/// The support `first + i * stride`, `i < count`, from Python numbers (each checked).
fn support_of(
    first: &Bound<'_, PyAny>,
    count: &Bound<'_, PyAny>,
    stride: Option<&Bound<'_, PyAny>>,
) -> PyResult<Support> {
    Ok(Support {
        first: non_negative(first, "first")?,
        stride: stride.map_or(Ok(1), |s| non_negative(s, "stride"))?,
        len: non_negative(count, "count")?,
    })
}

#[pymethods]
impl PySampler {
    /// Every key `first + i * stride` (`i` in `0..count`) equally likely.
    #[staticmethod]
    #[pyo3(signature = (
        first,
        count,
        *,
        stride = None,
        scheme = "naive",
        with_replacement = true,
        group_draws = roam_core::sampling::DEFAULT_GROUP_DRAWS,
    ))]
    fn uniform(
        first: &Bound<'_, PyAny>,
        count: &Bound<'_, PyAny>,
        stride: Option<&Bound<'_, PyAny>>,
        scheme: &str,
        with_replacement: bool,
        group_draws: usize,
    ) -> PyResult<Self> {
        let support = support_of(first, count, stride)?;
        let dist = Distribution::uniform(support).map_err(|e| distribution_error("uniform", &e))?;
        Self::build(dist, scheme, with_replacement, group_draws)
    }

    /// Key `first + i * stride` (`i` in `0..count`) with probability
    /// `ln((i + 2) / (i + 1)) / ln(count + 1)`: the first keys are the likeliest (Zipf-like, as
    /// for a vocabulary sorted by frequency).
    #[staticmethod]
    #[pyo3(signature = (
        first,
        count,
        *,
        stride = None,
        scheme = "naive",
        with_replacement = true,
        group_draws = roam_core::sampling::DEFAULT_GROUP_DRAWS,
    ))]
    fn log_uniform(
        first: &Bound<'_, PyAny>,
        count: &Bound<'_, PyAny>,
        stride: Option<&Bound<'_, PyAny>>,
        scheme: &str,
        with_replacement: bool,
        group_draws: usize,
    ) -> PyResult<Self> {
        let support = support_of(first, count, stride)?;
        let dist = Distribution::log_uniform(support)
            .map_err(|e| distribution_error("log_uniform", &e))?;
        Self::build(dist, scheme, with_replacement, group_draws)
    }

    /// Key `first + i * stride` with probability `weights[i] / sum(weights)` (drawn in O(1) by
    /// the alias method). `weights`: a 1-D sequence or array of finite, non-negative numbers,
    /// not all zero.
    #[staticmethod]
    #[pyo3(signature = (
        weights,
        *,
        first = None,
        stride = None,
        scheme = "naive",
        with_replacement = true,
        group_draws = roam_core::sampling::DEFAULT_GROUP_DRAWS,
    ))]
    fn weighted(
        py: Python<'_>,
        weights: &Bound<'_, PyAny>,
        first: Option<&Bound<'_, PyAny>>,
        stride: Option<&Bound<'_, PyAny>>,
        scheme: &str,
        with_replacement: bool,
        group_draws: usize,
    ) -> PyResult<Self> {
        let first = first.map_or(Ok(0), |f| non_negative(f, "first"))?;
        let stride = stride.map_or(Ok(1), |s| non_negative(s, "stride"))?;
        let weights = weights_vec(py, weights)?;
        let dist = Distribution::weighted(first, stride, weights)
            .map_err(|e| distribution_error("weighted", &e))?;
        Self::build(dist, scheme, with_replacement, group_draws)
    }

    /// `"uniform"`, `"log-uniform"` or `"weighted"`.
    #[getter]
    fn distribution(&self) -> &'static str {
        self.spec.distribution.shape_name()
    }

    /// The first key of the support.
    #[getter]
    fn first(&self) -> u64 {
        self.support().first
    }

    /// The distance between consecutive keys of the support.
    #[getter]
    fn stride(&self) -> u64 {
        self.support().stride
    }

    /// Keys in the support.
    #[getter]
    fn count(&self) -> u64 {
        self.support().len
    }

    /// The scheme, in canonical form (`"naive"`, `"preloc"`, `"pool:U"`, `"pool:U:strict"`,
    /// `"local"`, `"local:next"`).
    #[getter]
    fn scheme(&self) -> String {
        self.spec.scheme.to_string()
    }

    /// Whether one sample's keys may repeat.
    #[getter]
    fn with_replacement(&self) -> bool {
        self.spec.with_replacement
    }

    /// Draws per pool group (`pool` schemes only).
    #[getter]
    fn group_draws(&self) -> usize {
        self.spec.group_draws
    }

    /// Whether the samples follow the distribution (all schemes but `local`, which only draws
    /// keys held on the node).
    #[getter]
    fn keeps_distribution(&self) -> bool {
        self.spec.scheme.keeps_distribution()
    }

    /// The probability of drawing `key` (0 outside the support).
    fn probability(&self, key: &Bound<'_, PyAny>) -> f64 {
        let Ok(key) = key.extract::<u64>() else {
            return 0.0;
        };
        self.support()
            .position(key)
            .map_or(0.0, |i| self.spec.distribution.probability(i))
    }

    /// Whether `key` is in the support.
    fn __contains__(&self, key: &Bound<'_, PyAny>) -> bool {
        key.extract::<u64>()
            .is_ok_and(|k| self.support().position(k).is_some())
    }

    fn __repr__(&self) -> String {
        Self::describe(&self.spec)
    }
}

/// `weights` as `f64`s: any 1-D sequence or array of numbers (through `numpy.asarray`).
fn weights_vec(py: Python<'_>, weights: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let bad = |detail: String| {
        PyTypeError::new_err(format!(
            "weights must be a 1-D sequence or array of numbers{detail}"
        ))
    };
    if weights.is_instance_of::<PyString>() {
        return Err(bad(", not str".to_owned()));
    }
    let np = crate::buffers::numpy(py)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", np.getattr("float64")?)?;
    let array = np
        .call_method("ascontiguousarray", (weights,), Some(&kwargs))
        .map_err(|e| bad(format!(": {}", e.value(py))))?;
    let ndim: usize = array.getattr("ndim")?.extract()?;
    if ndim != 1 {
        return Err(bad(format!(", not a {ndim}-D one")));
    }
    let buf = pyo3::buffer::PyBuffer::<f64>::get(&array)?;
    buf.to_vec(py)
}

/// The state of a `Sample`.
enum SampleState {
    /// Ready for the next call.
    Ready(SampleHandle),
    /// Taken by a call in progress (on another thread, or an earlier failed one).
    InUse,
    /// Ended by `finish_sample`.
    Finished(usize),
}

/// One `Worker.prepare_sample` in progress: draw from it with `worker.pull_sample(sample, n)`
/// (in one call or several, `n` in all), end it with `worker.finish_sample(sample)` (or use it
/// as a context manager). Bound to the worker that prepared it.
#[pyclass(frozen, module = "roam", name = "Sample")]
pub(crate) struct PySample {
    cell: Arc<WorkerCell>,
    sampler: u32,
    size: usize,
    /// Values per sampled key.
    value_len: usize,
    state: Mutex<SampleState>,
}

/// A sample's handle, taken out for one call; put back when dropped.
struct Taken<'a> {
    sample: &'a PySample,
    handle: Option<SampleHandle>,
}

impl Taken<'_> {
    fn handle(&mut self) -> &mut SampleHandle {
        self.handle.as_mut().expect("taken until dropped")
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            *self.sample.state.lock() = SampleState::Ready(handle);
        }
    }
}

impl PySample {
    /// Refuses a worker other than the one that prepared the sample.
    fn check_worker(&self, cell: &Arc<WorkerCell>) -> PyResult<()> {
        if Arc::ptr_eq(&self.cell, cell) {
            return Ok(());
        }
        Err(PyValueError::new_err(format!(
            "this sample was prepared by worker {} of node {}; use that worker",
            self.cell.id(),
            self.cell.node().rank
        )))
    }

    fn take(&self) -> PyResult<Taken<'_>> {
        let mut state = self.state.lock();
        match std::mem::replace(&mut *state, SampleState::InUse) {
            SampleState::Ready(handle) => Ok(Taken {
                sample: self,
                handle: Some(handle),
            }),
            other => {
                let msg = match &other {
                    SampleState::Finished(_) => "the sample was already finished",
                    _ => "the sample is in use by another call (one thread per sample)",
                };
                *state = other;
                Err(PyValueError::new_err(msg))
            }
        }
    }

    fn remaining(&self) -> usize {
        match &*self.state.lock() {
            SampleState::Ready(handle) => handle.remaining(),
            SampleState::InUse => 0,
            SampleState::Finished(_) => 0,
        }
    }

    fn finish(&self, py: Python<'_>) -> PyResult<usize> {
        let mut taken = self.take()?;
        let handle = taken.handle.take().expect("just taken");
        let left = self.cell.run(py, |worker| worker.finish_sample(handle))?;
        *self.state.lock() = SampleState::Finished(left);
        Ok(left)
    }
}

/// Ends a sample dropped without `finish_sample` (when its worker is free right away).
impl Drop for PySample {
    fn drop(&mut self) {
        let state = std::mem::replace(self.state.get_mut(), SampleState::InUse);
        if let SampleState::Ready(handle) = state {
            self.cell
                .try_run(move |worker| worker.finish_sample(handle));
        }
    }
}

#[pymethods]
impl PySample {
    /// The id of the sampler it draws from.
    #[getter]
    fn sampler(&self) -> u32 {
        self.sampler
    }

    /// Samples asked for at `prepare_sample`.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// Samples still to be pulled (0 once finished).
    #[getter]
    #[pyo3(name = "remaining")]
    fn py_remaining(&self) -> usize {
        self.remaining()
    }

    /// Whether `finish_sample` ended it.
    #[getter]
    fn finished(&self) -> bool {
        matches!(*self.state.lock(), SampleState::Finished(_))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Finishes the sample if it is not finished yet.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.finished() {
            self.finish(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = match &*self.state.lock() {
            SampleState::Ready(handle) => format!("{} of {} left", handle.remaining(), self.size),
            SampleState::InUse => "in use".to_owned(),
            SampleState::Finished(left) => format!("finished, {left} unused"),
        };
        format!("<roam.Sample of sampler {} ({state})>", self.sampler)
    }
}

/// `Worker.prepare_sample`.
pub(crate) fn prepare(
    py: Python<'_>,
    cell: &Arc<WorkerCell>,
    sampler: i64,
    n: i64,
    clocks: Option<(u64, u64)>,
) -> PyResult<PySample> {
    cell.check_open()?;
    let samplers = &cell.node().samplers;
    let Some(spec) = usize::try_from(sampler).ok().and_then(|i| samplers.get(i)) else {
        return Err(errors::access_error_msg(format!(
            "no sampler {sampler}: {} registered (Node(samplers=[...]); ids are list indices)",
            samplers.len()
        )));
    };
    let n = usize::try_from(n)
        .map_err(|_| PyValueError::new_err(format!("n must be non-negative, not {n}")))?;
    let id = SamplerId(sampler as u32);
    let (handle, value_len) = cell
        .run(py, |worker| {
            let handle = match clocks {
                Some((start, end)) => worker.prepare_sample_intent(id, n, start, end)?,
                None => worker.prepare_sample(id, n)?,
            };
            let value_len = worker
                .sample_value_len(id)
                .expect("a prepared sampler exists");
            Ok((handle, value_len))
        })?
        .map_err(|err| match err {
            // `preloc` and `pool` draw every sample here: say so.
            SampleError::TooManyPrepared { max, .. }
                if matches!(spec.scheme, Scheme::Preloc | Scheme::Pool { .. }) =>
            {
                PyValueError::new_err(format!(
                    "{n} samples asked of sampler {sampler}, whose scheme {} draws them all at \
                     prepare_sample: at most {max} per prepare_sample",
                    spec.scheme
                ))
            }
            err => errors::sample_error(&err),
        })?;
    Ok(PySample {
        cell: cell.clone(),
        sampler: id.0,
        size: n,
        value_len,
        state: Mutex::new(SampleState::Ready(handle)),
    })
}

/// What went wrong in a `pull_sample`.
enum PullFailed {
    Sample(SampleError),
    Op(roam::OpError),
}

/// `Worker.pull_sample`: `(keys, vals)` as new arrays.
pub(crate) fn pull(
    py: Python<'_>,
    cell: &Arc<WorkerCell>,
    sample: &PySample,
    n: Option<i64>,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    sample.check_worker(cell)?;
    cell.check_open()?;
    let mut taken = sample.take()?;
    let remaining = taken.handle().remaining();
    let n = match n {
        None => remaining,
        Some(n) => usize::try_from(n)
            .map_err(|_| PyValueError::new_err(format!("n must be non-negative, not {n}")))?,
    };
    if n > remaining {
        let err = SampleError::TooMany {
            requested: n,
            remaining,
        };
        return Err(errors::sample_error(&err));
    }
    let keys = numpy_empty(py, (n,), "uint64")?;
    let vals = numpy_empty(py, (n, sample.value_len), "float32")?;
    let keys_buf = U64Out::get(&keys)?;
    let vals_buf = F32Buffer::get(&vals, "vals", true)?;
    let handle = taken.handle();
    let result = cell.run(py, |worker| {
        // SAFETY: both arrays were just created here and are not yet visible to Python code;
        // their exports outlive this call, and these are the only slices of them.
        let (keys, vals) = unsafe { (keys_buf.as_mut_slice(), vals_buf.as_mut_slice()) };
        match worker.pull_sample(handle, keys, vals) {
            Ok(ticket) => ticket.wait().map_err(PullFailed::Op),
            Err(err) => Err(PullFailed::Sample(err)),
        }
    });
    drop(taken);
    drop((keys_buf, vals_buf));
    match result? {
        Ok(()) => Ok((keys.unbind(), vals.unbind())),
        Err(PullFailed::Sample(err)) => Err(errors::sample_error(&err)),
        Err(PullFailed::Op(err)) => Err(errors::op_error(&err, false)),
    }
}

/// `Worker.finish_sample`: the samples never pulled.
pub(crate) fn finish(py: Python<'_>, cell: &Arc<WorkerCell>, sample: &PySample) -> PyResult<usize> {
    sample.check_worker(cell)?;
    sample.finish(py)
}
