//! Python bindings of roam: the extension module `roam._roam`, re-exported by the `roam` Python
//! package (`python/roam`). Built with maturin (`python/pyproject.toml`); see `docs/python.md`.
//!
//! # Layout
//! - `node`: `roam.Node` — one node per process; configuration, rendezvous, shutdown, stats.
//! - `worker`: `roam.Worker` and `roam.Ticket` — pull/push/set/localize, waits, barrier, on
//!   `roam::Worker`'s owned pending operations (a pull owns its output's export).
//! - `worker_cell`: the Rust worker behind its mutex and the registry of its pending
//!   operations (the lock and GIL discipline of `worker`).
//! - `sampling`: `roam.Sampler` (a sampler registered with `Node(samplers=...)`) and
//!   `roam.Sample` (one `Worker.prepare_sample`, owning the Rust `SampleHandle`).
//! - `metrics`: the `/metrics` endpoint's arguments of `roam.Node` and `Node.metrics_addr`.
//! - `tables`: `Node(initializer=..., dynamic=...)`: row initializers, admission and eviction.
//! - `buffers`: zero-copy views of NumPy arrays, buffer-protocol and `__dlpack__` objects.
//!
//! The crate's only `unsafe` is raw slices of buffer exports (made in `buffers`, used by
//! `worker`), each with its SAFETY argument.
//! - `errors`: the exception classes and the mapping of every Rust error onto them.
//!
//! Every blocking call (start, issue, wait, barrier, shutdown) releases the GIL.

mod buffers;
mod errors;
mod metrics;
mod node;
mod optimizer;
mod sampling;
mod tables;
mod worker;
mod worker_cell;

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

/// The `n` keys with the highest counts (ties: smaller key first), sorted: the keys to
/// replicate (`Node(replicated_keys=...)`). `keys` and `counts` are equally long sequences.
#[pyfunction]
fn choose_top_n(keys: Vec<u64>, counts: Vec<u64>, n: usize) -> PyResult<Vec<u64>> {
    pairs(&keys, &counts).map(|p| roam::choose::top_n(p, n))
}

/// NuPS's heuristic: the keys counted at least `alpha` times the mean count over all
/// `num_keys` keys of the space, sorted.
#[pyfunction]
#[pyo3(signature = (keys, counts, num_keys, alpha = 1.0))]
fn choose_above_mean(
    keys: Vec<u64>,
    counts: Vec<u64>,
    num_keys: u64,
    alpha: f64,
) -> PyResult<Vec<u64>> {
    pairs(&keys, &counts).map(|p| roam::choose::above_mean(p, num_keys, alpha))
}

fn pairs<'a>(
    keys: &'a [u64],
    counts: &'a [u64],
) -> PyResult<impl Iterator<Item = (u64, u64)> + 'a> {
    if keys.len() != counts.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{} keys but {} counts",
            keys.len(),
            counts.len()
        )));
    }
    Ok(keys.iter().copied().zip(counts.iter().copied()))
}

/// roam: a parameter server whose parameters move to the node that uses them.
#[pymodule]
fn _roam(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    errors::register(m)?;
    m.add_class::<node::PyNode>()?;
    m.add_class::<worker::PyWorker>()?;
    m.add_class::<worker::PyTicket>()?;
    m.add_class::<sampling::PySampler>()?;
    m.add_class::<sampling::PySample>()?;
    m.add_function(wrap_pyfunction!(choose_top_n, m)?)?;
    m.add_function(wrap_pyfunction!(choose_above_mean, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
