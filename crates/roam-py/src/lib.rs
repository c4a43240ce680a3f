//! Python bindings of roam: the extension module `roam._roam`, re-exported by the `roam` Python
//! package (`python/roam`). Built with maturin (`python/pyproject.toml`); see `docs/python.md`.
//!
//! # Layout
//! - `node`: `roam.Node` — one node per process; configuration, rendezvous, shutdown, stats.
//! - `worker`: `roam.Worker` and `roam.Ticket` — pull/push/set/localize, waits, barrier, on
//!   `roam::Worker`'s owned pending operations (a pull owns its output's export).
//! - `buffers`: zero-copy views of NumPy arrays, buffer-protocol and `__dlpack__` objects.
//!
//! The crate's only `unsafe` is raw slices of buffer exports (made in `buffers`, used by
//! `worker`), each with its SAFETY argument.
//! - `errors`: the exception classes and the mapping of every Rust error onto them.
//!
//! Every blocking call (start, issue, wait, barrier, shutdown) releases the GIL.

mod buffers;
mod errors;
mod node;
mod worker;

use pyo3::prelude::*;

/// Sends roam's log events (warnings by default; `RUST_LOG` overrides) to stderr, once.
fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// roam: a parameter server whose parameters move to the node that uses them.
#[pymodule]
fn _roam(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    errors::register(m)?;
    m.add_class::<node::PyNode>()?;
    m.add_class::<worker::PyWorker>()?;
    m.add_class::<worker::PyTicket>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
