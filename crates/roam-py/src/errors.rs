//! The exception classes of the `roam` package and the mapping of every Rust error onto them.
//!
//! Each Rust error becomes a Python exception whose message is the Rust error's `Display` text.
//! The classes are created at module initialisation with `type(name, bases, dict)` so that they
//! can have two bases (e.g. `AccessError` is both a `RoamError` and a `ValueError`):
//!
//! ```text
//! RoamError(Exception)
//! ├── StartError(RoamError, RuntimeError)     the node could not start or join
//! ├── WorkerError(RoamError, IndexError)      no such worker index
//! ├── AccessError(RoamError, ValueError)      bad keys, buffer length, sampling call or
//! │                                           intent clock range; nothing changed
//! └── OpError(RoamError, RuntimeError)        an operation did not complete
//!     └── PeerGoneError(OpError, ConnectionError)
//! ```

use pyo3::exceptions::{
    PyConnectionError, PyException, PyIndexError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use roam::{AccessError, IntentError, OpError, SampleError, StartError, WorkerError};

static ROAM_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static START_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static WORKER_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static ACCESS_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static OP_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static PEER_GONE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Creates the exception classes and adds them to module `m`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let roam_error = make(
        m,
        &ROAM_ERROR,
        "RoamError",
        &[py.get_type::<PyException>()],
        "Base class of every error raised by roam.",
    )?;
    make(
        m,
        &START_ERROR,
        "StartError",
        &[roam_error.clone(), py.get_type::<PyRuntimeError>()],
        "The node could not start: invalid key space or configuration, rendezvous or \
         connection failure.",
    )?;
    make(
        m,
        &WORKER_ERROR,
        "WorkerError",
        &[roam_error.clone(), py.get_type::<PyIndexError>()],
        "The worker index is not below the node's number of workers.",
    )?;
    make(
        m,
        &ACCESS_ERROR,
        "AccessError",
        &[roam_error.clone(), py.get_type::<PyValueError>()],
        "Bad input to an access: a key out of range, a buffer whose length does not match the \
         keys' value lengths, a refused sampling call (unknown sampler, more samples than the \
         sample has left), or an intent with an empty clock range. Nothing was changed.",
    )?;
    let op_error = make(
        m,
        &OP_ERROR,
        "OpError",
        &[roam_error, py.get_type::<PyRuntimeError>()],
        "An operation could not be issued or did not complete (a peer refused it, the node is \
         shutting down, ...).",
    )?;
    make(
        m,
        &PEER_GONE_ERROR,
        "PeerGoneError",
        &[op_error, py.get_type::<PyConnectionError>()],
        "A node the operation depended on disconnected or stopped answering; the operation did \
         not complete.",
    )?;
    Ok(())
}

fn make<'py>(
    m: &Bound<'py, PyModule>,
    cell: &PyOnceLock<Py<PyType>>,
    name: &str,
    bases: &[Bound<'py, PyType>],
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let py = m.py();
    let dict = PyDict::new(py);
    dict.set_item("__module__", "roam")?;
    dict.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases)?;
    let ty = py
        .get_type::<PyType>()
        .call1((name, bases, dict))?
        .cast_into::<PyType>()?;
    // A second initialisation of the module (e.g. in a subinterpreter) keeps the first classes.
    let _ = cell.set(py, ty.clone().unbind());
    m.add(name, cell.get(py).map_or(&ty, |t| t.bind(py)))?;
    Ok(ty)
}

fn raise(cell: &PyOnceLock<Py<PyType>>, msg: String) -> PyErr {
    Python::attach(|py| match cell.get(py) {
        Some(ty) => PyErr::from_type(ty.bind(py).clone(), msg),
        None => PyRuntimeError::new_err(msg),
    })
}

/// `roam.StartError` with `msg`.
pub(crate) fn start_error(err: &StartError) -> PyErr {
    raise(&START_ERROR, err.to_string())
}

/// `roam.WorkerError` with the Rust error's message.
pub(crate) fn worker_error(err: &WorkerError) -> PyErr {
    raise(&WORKER_ERROR, err.to_string())
}

/// `roam.AccessError` with `msg`.
pub(crate) fn access_error_msg(msg: String) -> PyErr {
    raise(&ACCESS_ERROR, msg)
}

/// `roam.OpError` with `msg`.
pub(crate) fn op_error_msg(msg: String) -> PyErr {
    raise(&OP_ERROR, msg)
}

/// An [`AccessError`] as `roam.AccessError`. `signed_keys` says that the caller gave signed
/// integer keys, which were reinterpreted as `u64`: a negative key then shows as itself.
pub(crate) fn access_error(err: &AccessError, signed_keys: bool) -> PyErr {
    match *err {
        AccessError::KeyOutOfRange { key, num_keys } if signed_keys && key > i64::MAX as u64 => {
            access_error_msg(format!(
                "key {} is out of range: the key space holds keys 0..{num_keys}",
                key as i64
            ))
        }
        _ => access_error_msg(err.to_string()),
    }
}

/// A refused sampling call ([`SampleError`]: unknown sampler, too many samples, ...) as
/// `roam.AccessError`: nothing was drawn.
pub(crate) fn sample_error(err: &SampleError) -> PyErr {
    access_error_msg(err.to_string())
}

/// Bad input to `intent` ([`IntentError`]: a key out of range, an empty clock range) as
/// `roam.AccessError`: nothing was recorded. `signed_keys` as for [`access_error`].
pub(crate) fn intent_error(err: &IntentError, signed_keys: bool) -> PyErr {
    match err {
        IntentError::Access(access) => access_error(access, signed_keys),
        IntentError::EmptyRange { .. } => access_error_msg(err.to_string()),
    }
}

/// An [`OpError`] as the matching Python exception.
pub(crate) fn op_error(err: &OpError, signed_keys: bool) -> PyErr {
    match err {
        OpError::Access(access) => access_error(access, signed_keys),
        OpError::PeerGone { .. } => raise(&PEER_GONE_ERROR, err.to_string()),
        _ => op_error_msg(err.to_string()),
    }
}
