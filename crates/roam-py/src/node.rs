//! `roam.Node`: one node per Python process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use roam::{
    Allocation, Config, IntentTechniques, IntentTiming, NodeHandle, NodeStats, SamplerSpec,
    StartError, ValueLengths,
};
use roam_core::{KeySpace, Partitioning};

use crate::buffers::Keys;
use crate::errors;
use crate::sampling::PySampler;
use crate::worker::{PyWorker, WorkerCell, seconds};

/// What the node's workers share with it.
pub(crate) struct NodeShared {
    /// The running node; `None` once shut down or closed.
    handle: Mutex<Option<NodeHandle>>,
    /// Set when shutdown begins: workers then refuse new operations.
    pub(crate) closed: AtomicBool,
    /// The counters at shutdown.
    final_stats: Mutex<Option<NodeStats>>,
    pub(crate) space: KeySpace,
    pub(crate) rank: u32,
    pub(crate) num_nodes: u32,
    pub(crate) workers_per_node: u32,
    allocation: &'static str,
    /// The registered samplers, in id order.
    pub(crate) samplers: Vec<SamplerSpec>,
    sampling_seed: u64,
}

impl NodeShared {
    /// The keys of `ids` in table `table` and its dimension (`table` `None`: the ids are the
    /// keys). An unknown table or an id out of its range raises `AccessError` by name.
    pub(crate) fn table_keys(
        &self,
        table: Option<&str>,
        ids: crate::buffers::Keys,
    ) -> PyResult<(crate::buffers::Keys, Option<roam::Table>)> {
        let Some(name) = table else {
            return Ok((ids, None));
        };
        let table = self
            .space
            .named_tables()
            .ok_or(roam::TableError::NoTables)
            .and_then(|t| t.by_name(name).cloned())
            .map_err(|err| errors::access_error_msg(err.to_string()))?;
        let keys = ids
            .as_slice()
            .iter()
            .map(|&id| table.key(id))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| errors::access_error_msg(err.to_string()))?;
        let signed = ids.signed();
        Ok((crate::buffers::Keys::Owned { keys, signed }, Some(table)))
    }

    /// The named tables and their dimensions, in key order.
    pub(crate) fn table_dims(&self) -> Vec<(String, usize)> {
        self.space.named_tables().map_or(Vec::new(), |t| {
            t.all()
                .iter()
                .map(|t| (t.name().to_owned(), t.dim()))
                .collect()
        })
    }

    pub(crate) fn value_len(&self, key: u64) -> PyResult<usize> {
        self.space
            .check_key(key)
            .map_err(|err| errors::access_error(&err, false))?;
        Ok(self.space.len(key))
    }

    fn current_stats(&self) -> Option<NodeStats> {
        if let Some(handle) = self.handle.lock().as_ref() {
            return Some(handle.stats());
        }
        self.final_stats.lock().clone()
    }

    /// The counters as a dict: live while running, the final ones after shutdown.
    pub(crate) fn stats(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let stats = py.detach(|| self.current_stats()).unwrap_or_default();
        stats_dict(py, &stats)
    }
}

fn stats_dict(py: Python<'_>, stats: &NodeStats) -> PyResult<Py<PyDict>> {
    let dict = PyDict::new(py);
    let value = serde_json::to_value(stats)
        .map_err(|e| PyValueError::new_err(format!("stats could not be serialised: {e}")))?;
    if let serde_json::Value::Object(fields) = value {
        for (name, v) in fields {
            match v {
                serde_json::Value::Bool(b) => dict.set_item(name, b)?,
                serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => dict.set_item(name, u)?,
                    (None, Some(i), _) => dict.set_item(name, i)?,
                    (None, None, f) => dict.set_item(name, f.unwrap_or(f64::NAN))?,
                },
                serde_json::Value::String(s) => dict.set_item(name, s)?,
                other => dict.set_item(name, other.to_string())?,
            }
        }
    }
    Ok(dict.unbind())
}

/// A roam node: this process's member of the cluster.
///
/// Creating it joins the cluster (rank, node count and coordinator come from the arguments, else
/// from the environment as in Rust: `ROAM_*`, torchrun's `RANK`/`WORLD_SIZE`/`MASTER_ADDR`/
/// `MASTER_PORT`, Slurm, Open MPI; a single node needs nothing). Use it as a context manager:
/// leaving the `with` block shuts the node down cleanly (waiting for every node to leave), or,
/// if the block raised, closes it at once. Take one `Worker` per Python thread with
/// `node.worker(i)`.
#[pyclass(frozen, module = "roam", name = "Node")]
pub(crate) struct PyNode {
    shared: Arc<NodeShared>,
    workers: Mutex<Vec<Option<Py<PyWorker>>>>,
}

/// The configuration of a sparse key space: one value length, no key count.
fn sparse_config(
    num_keys: Option<u64>,
    value_lengths: Option<&Bound<'_, PyAny>>,
) -> PyResult<Config> {
    if let Some(num_keys) = num_keys {
        return Err(PyValueError::new_err(format!(
            "num_keys ({num_keys}) must be omitted with sparse_keys: every uint64 is a key"
        )));
    }
    let len = value_lengths
        .and_then(|v| v.extract::<i64>().ok())
        .ok_or_else(|| {
            PyTypeError::new_err("sparse_keys needs value_lengths as one int (values per key)")
        })?;
    let len = u32::try_from(len).map_err(|_| {
        PyValueError::new_err(format!("value_lengths must be in 0..2**32, not {len}"))
    })?;
    Ok(Config::sparse(len))
}

fn value_lengths(
    num_keys: Option<u64>,
    value_lengths: Option<&Bound<'_, PyAny>>,
) -> PyResult<(u64, ValueLengths)> {
    let Some(lengths) = value_lengths else {
        return Err(PyTypeError::new_err(
            "value_lengths is required: an int (values per key) or one length per key",
        ));
    };
    if let Ok(len) = lengths.extract::<i64>() {
        let len = u32::try_from(len).map_err(|_| {
            PyValueError::new_err(format!("value_lengths must be in 0..2**32, not {len}"))
        })?;
        let Some(num_keys) = num_keys else {
            return Err(PyTypeError::new_err(
                "num_keys is required when value_lengths is a single int",
            ));
        };
        return Ok((num_keys, ValueLengths::Uniform(len)));
    }
    let keys = Keys::get(lengths).map_err(|_| {
        PyTypeError::new_err("value_lengths must be an int or a sequence/array of ints")
    })?;
    let per_key = keys
        .as_slice()
        .iter()
        .map(|&len| {
            u32::try_from(len).map_err(|_| {
                let shown = if keys.signed() {
                    (len as i64).to_string()
                } else {
                    len.to_string()
                };
                PyValueError::new_err(format!("value lengths must be in 0..2**32, not {shown}"))
            })
        })
        .collect::<PyResult<Vec<u32>>>()?;
    let n = per_key.len() as u64;
    if let Some(num_keys) = num_keys.filter(|&k| k != n) {
        return Err(PyValueError::new_err(format!(
            "num_keys is {num_keys} but value_lengths has {n} entries"
        )));
    }
    Ok((n, ValueLengths::PerKey(per_key.into())))
}

/// The samplers of `Node(samplers=...)`: a sequence of `roam.Sampler`.
fn sampler_specs(samplers: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<SamplerSpec>> {
    let Some(samplers) = samplers.filter(|s| !s.is_none()) else {
        return Ok(Vec::new());
    };
    if samplers.is_instance_of::<PySampler>() {
        return Err(PyTypeError::new_err(
            "samplers must be a list of roam.Sampler (wrap a single one in a list)",
        ));
    }
    let iter = samplers
        .try_iter()
        .map_err(|_| PyTypeError::new_err("samplers must be a list of roam.Sampler"))?;
    iter.enumerate()
        .map(|(i, item)| {
            let item = item?;
            let sampler = item.cast::<PySampler>().map_err(|_| {
                let ty = item
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string());
                PyTypeError::new_err(format!("samplers[{i}] must be a roam.Sampler, not {ty}"))
            })?;
            Ok(sampler.get().spec.clone())
        })
        .collect()
}

/// A start error as a Python exception: a sampler that does not fit the key space is a bad
/// argument (`ValueError` naming it), the rest `roam.StartError`.
fn start_error(err: &StartError, specs: &[SamplerSpec]) -> PyErr {
    match err {
        StartError::Sampler { sampler, reason } => {
            let named = specs
                .get(*sampler as usize)
                .map_or_else(String::new, |s| format!(" = {}", PySampler::describe(s)));
            PyValueError::new_err(format!("samplers[{sampler}]{named}: {reason}"))
        }
        _ => errors::start_error(err),
    }
}

impl PyNode {
    fn leave(&self, py: Python<'_>, clean: bool) -> PyResult<Option<Py<PyDict>>> {
        let shared = &self.shared;
        shared.closed.store(true, Ordering::Release);
        let cells: Vec<Arc<WorkerCell>> = self
            .workers
            .lock()
            .iter()
            .flatten()
            .map(|w| w.get().cell().clone())
            .collect();
        let result = py.detach(|| {
            let handle = shared.handle.lock().take();
            let handle = handle?;
            if !clean {
                drop(handle);
                return None;
            }
            // Complete what the workers left pending: their output buffers get filled and the
            // node's result table is emptied before it leaves.
            for cell in &cells {
                cell.drain();
            }
            let result = handle.shutdown();
            if let Ok(stats) = &result {
                *shared.final_stats.lock() = Some(stats.clone());
            }
            Some(result)
        });
        match result {
            None => Ok(None),
            Some(Ok(stats)) => stats_dict(py, &stats).map(Some),
            Some(Err(err)) => Err(errors::op_error(&err, false)),
        }
    }
}

#[pymethods]
impl PyNode {
    /// Starts this process's node and joins the cluster (the GIL is released meanwhile).
    #[new]
    #[pyo3(signature = (
        num_keys = None,
        value_lengths = None,
        *,
        workers = None,
        allocation = None,
        home = None,
        sparse_keys = false,
        location_caches = false,
        fast_local_access = true,
        rank = None,
        num_nodes = None,
        coordinator = None,
        token = None,
        emulate_latency_us = None,
        peer_timeout = 5.0,
        barrier_warning = Some(30.0),
        rendezvous_timeout = 60.0,
        replicated_keys = None,
        replica_sync_every = 0.01,
        replica_min_delta_norm = 0.0,
        replica_sync_after_updates = 0,
        samplers = None,
        sampling_seed = 0,
        balancer = true,
        intent_timing = "timed",
        intent_techniques = "all",
        share_sync_every = None,
        share_sync_updates_per_key = None,
        restore_from = None,
        optimizer = None,
        metrics_addr = None,
        metrics_hold_scrapes = None,
        initializer = None,
        dynamic = None,
        tables = None,
        spill_dir = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        num_keys: Option<u64>,
        value_lengths: Option<&Bound<'_, PyAny>>,
        workers: Option<u32>,
        allocation: Option<&str>,
        home: Option<&str>,
        sparse_keys: bool,
        location_caches: bool,
        fast_local_access: bool,
        rank: Option<u32>,
        num_nodes: Option<u32>,
        coordinator: Option<String>,
        token: Option<String>,
        emulate_latency_us: Option<u64>,
        peer_timeout: f64,
        barrier_warning: Option<f64>,
        rendezvous_timeout: f64,
        replicated_keys: Option<Vec<u64>>,
        replica_sync_every: f64,
        replica_min_delta_norm: f32,
        replica_sync_after_updates: u64,
        samplers: Option<&Bound<'_, PyAny>>,
        sampling_seed: u64,
        balancer: bool,
        intent_timing: &str,
        intent_techniques: &str,
        share_sync_every: Option<f64>,
        share_sync_updates_per_key: Option<u64>,
        restore_from: Option<std::path::PathBuf>,
        optimizer: Option<&Bound<'_, PyAny>>,
        metrics_addr: Option<String>,
        metrics_hold_scrapes: Option<u64>,
        initializer: Option<&Bound<'_, PyAny>>,
        dynamic: Option<&Bound<'_, PyAny>>,
        tables: Option<&Bound<'_, PyAny>>,
        spill_dir: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let tables = tables.filter(|t| !t.is_none());
        if tables.is_some() {
            let node_wide = [
                ("num_keys", num_keys.is_some()),
                ("value_lengths", value_lengths.is_some_and(|v| !v.is_none())),
                ("sparse_keys", sparse_keys),
                ("optimizer", optimizer.is_some_and(|v| !v.is_none())),
                ("initializer", initializer.is_some_and(|v| !v.is_none())),
                ("dynamic", dynamic.is_some_and(|v| !v.is_none())),
            ];
            if let Some((what, _)) = node_wide.iter().find(|(_, set)| *set) {
                return Err(PyValueError::new_err(format!(
                    "with tables, each table takes its own settings: leave out {what}"
                )));
            }
        }
        // A dynamic key space is a sparse one (any u64 id); so are named tables.
        let sparse_keys = sparse_keys || dynamic.is_some_and(|d| !d.is_none());
        let mut cfg = if let Some(tables) = tables {
            Config::tables(crate::tables::tables_config(tables)?)
        } else if sparse_keys {
            sparse_config(num_keys, value_lengths)?
        } else {
            match self::value_lengths(num_keys, value_lengths)? {
                (num_keys, ValueLengths::Uniform(len)) => Config::new(num_keys, len),
                (_, ValueLengths::PerKey(lens)) => Config::per_key(lens.to_vec()),
                (_, ValueLengths::PerTable(tables)) => {
                    Config::tables(tables.all().iter().map(|t| t.spec().clone()).collect())
                }
            }
        };
        // Sparse ids are rarely uniform over their range: hash homes unless asked otherwise.
        let (default_allocation, default_home) = if sparse_keys || tables.is_some() {
            ("static-hash", "hash")
        } else {
            ("static-range", "range")
        };
        cfg.workers_per_node = workers;
        cfg.allocation = allocation
            .unwrap_or(default_allocation)
            .parse::<Allocation>()
            .map_err(PyValueError::new_err)?;
        cfg.home = match home.unwrap_or(default_home) {
            "range" => Partitioning::Range,
            "hash" => Partitioning::Hash,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown home partitioning {other:?}: expected range or hash"
                )));
            }
        };
        cfg.location_caches = location_caches;
        cfg.fast_local_access = fast_local_access;
        cfg.cluster.rank = rank;
        cfg.cluster.num_nodes = num_nodes;
        cfg.cluster.coordinator = coordinator;
        cfg.token = token;
        cfg.emulate_latency_us = emulate_latency_us;
        cfg.peer_timeout = seconds("peer_timeout", peer_timeout)?;
        cfg.barrier_warning = match barrier_warning {
            None => None,
            Some(s) if s > 0.0 => Some(seconds("barrier_warning", s)?),
            Some(s) => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "barrier_warning must be a positive number of seconds (or None), not {s}"
                )));
            }
        };
        cfg.rendezvous_timeout = seconds("rendezvous_timeout", rendezvous_timeout)?;
        cfg.replicated_keys = replicated_keys.unwrap_or_default();
        cfg.replica_sync_every = seconds("replica_sync_every", replica_sync_every)?;
        cfg.replica_min_delta_norm = replica_min_delta_norm;
        cfg.replica_sync_after_updates = replica_sync_after_updates;
        for spec in sampler_specs(samplers)? {
            cfg.add_sampler(spec);
        }
        cfg.sampling_seed = sampling_seed;
        if !balancer {
            cfg.balancer = None;
        }
        cfg.intent_timing = match intent_timing {
            "timed" => IntentTiming::Timed,
            "immediate" => IntentTiming::Immediate,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown intent_timing {other:?}: expected \"timed\" or \"immediate\""
                )));
            }
        };
        cfg.intent_techniques = match intent_techniques {
            "all" => IntentTechniques::All,
            "relocate-only" => IntentTechniques::RelocateOnly,
            "replicate-only" => IntentTechniques::ReplicateOnly,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown intent_techniques {other:?}: expected \"all\", \"relocate-only\" \
                     or \"replicate-only\""
                )));
            }
        };
        if let Some(every) = share_sync_every {
            cfg.share_sync_every = seconds("share_sync_every", every)?;
        }
        if let Some(per_key) = share_sync_updates_per_key {
            cfg.share_sync_updates_per_key = per_key;
        }
        cfg.restore_from = restore_from;
        cfg.spill_dir = spill_dir;
        cfg.optimizer = optimizer
            .map(crate::optimizer::optimizer_config)
            .transpose()?;
        crate::metrics::configure(&mut cfg, metrics_addr, metrics_hold_scrapes);
        if let Some(init) = initializer.filter(|i| !i.is_none()) {
            cfg.initializer = crate::tables::initializer_config(init)?;
        }
        cfg.dynamic = dynamic
            .filter(|d| !d.is_none())
            .map(crate::tables::dynamic_config)
            .transpose()?;
        let samplers = cfg.samplers.clone();
        let allocation = cfg.allocation.name();
        let handle = py
            .detach(|| NodeHandle::start(cfg))
            .map_err(|err| start_error(&err, &samplers))?;
        let shared = NodeShared {
            space: handle.key_space().clone(),
            rank: handle.rank(),
            num_nodes: handle.num_nodes(),
            workers_per_node: handle.workers_per_node(),
            allocation,
            samplers,
            sampling_seed,
            handle: Mutex::new(Some(handle)),
            closed: AtomicBool::new(false),
            final_stats: Mutex::new(None),
        };
        let workers = (0..shared.workers_per_node).map(|_| None).collect();
        Ok(Self {
            shared: Arc::new(shared),
            workers: Mutex::new(workers),
        })
    }

    /// This node's rank (`0..num_nodes`).
    #[getter]
    fn rank(&self) -> u32 {
        self.shared.rank
    }

    /// Number of nodes in the cluster.
    #[getter]
    fn num_nodes(&self) -> u32 {
        self.shared.num_nodes
    }

    /// Worker threads per node.
    #[getter]
    fn workers_per_node(&self) -> u32 {
        self.shared.workers_per_node
    }

    /// Number of keys (keys are `0..num_keys`); `None` with sparse keys (every `u64` is a key).
    #[getter]
    fn num_keys(&self) -> Option<u64> {
        (!self.shared.space.is_sparse()).then(|| self.shared.space.num_keys())
    }

    /// Whether every `u64` is a key (created on first use).
    #[getter]
    fn sparse_keys(&self) -> bool {
        self.shared.space.is_sparse()
    }

    /// The value length shared by all keys, or `None` if lengths are per key.
    #[getter]
    fn value_length(&self) -> Option<usize> {
        self.shared.space.uniform_len()
    }

    /// The named tables (`Node(tables=...)`) and their dimensions, in key order; empty
    /// without tables.
    #[getter]
    fn tables(&self) -> Vec<(String, usize)> {
        self.shared.table_dims()
    }

    /// The allocation mode: `"static-range"`, `"static-hash"` or `"dynamic"`.
    #[getter]
    fn allocation(&self) -> &'static str {
        self.shared.allocation
    }

    /// The registered samplers (`Node(samplers=...)`); a sampler's id is its index.
    #[getter]
    fn samplers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let all = self
            .shared
            .samplers
            .iter()
            .map(|spec| PySampler { spec: spec.clone() });
        PyList::new(py, all)
    }

    /// The seed of the samplers' random numbers.
    #[getter]
    fn sampling_seed(&self) -> u64 {
        self.shared.sampling_seed
    }

    /// Whether this node is a member of the cluster: false once it was drained (or shut down).
    #[getter]
    fn is_member(&self) -> bool {
        self.shared
            .handle
            .lock()
            .as_ref()
            .is_some_and(NodeHandle::is_member)
    }

    /// Drains node `rank`: its buckets and keys move to the other members, then it leaves the
    /// cluster. Blocks (GIL released) until it left; raises `OpError` with the coordinator's
    /// reason if it cannot be drained (the coordinator, not a member, ...). The drained node's
    /// workers must have finished; it calls `wait_until_done()` and then `shutdown()`.
    fn drain(&self, py: Python<'_>, rank: u32) -> PyResult<()> {
        let shared = &self.shared;
        let result = py.detach(|| shared.handle.lock().as_ref().map(|h| h.drain(rank)));
        match result {
            None => Err(errors::op_error_msg("the node is shut down".to_string())),
            Some(Ok(())) => Ok(()),
            Some(Err(err)) => Err(errors::op_error(&err, false)),
        }
    }

    /// Blocks (GIL released) until this node was drained or every other member left cleanly;
    /// for a node whose workers are done and that waits to be drained. Raises
    /// `PeerGoneError` if a member was lost instead.
    fn wait_until_done(&self, py: Python<'_>) -> PyResult<()> {
        let shared = &self.shared;
        let result = py.detach(|| {
            shared
                .handle
                .lock()
                .as_ref()
                .map(NodeHandle::wait_until_done)
        });
        match result {
            None => Err(errors::op_error_msg("the node is shut down".to_string())),
            Some(Ok(())) => Ok(()),
            Some(Err(err)) => Err(errors::op_error(&err, false)),
        }
    }

    /// Whether the node was shut down or closed.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// The address this node accepts peer connections on (`None` for a single node or once
    /// closed).
    #[getter]
    fn data_addr(&self) -> Option<String> {
        self.shared
            .handle
            .lock()
            .as_ref()
            .and_then(NodeHandle::data_addr)
            .map(|a| a.to_string())
    }

    /// Where this node serves Prometheus metrics (`HOST:PORT`), or `None`.
    #[getter]
    fn metrics_addr(&self) -> Option<String> {
        crate::metrics::bound_addr(self.shared.handle.lock().as_ref())
    }

    /// The value length of `key`.
    fn value_len(&self, key: u64) -> PyResult<usize> {
        self.shared.value_len(key)
    }

    /// The `Worker` of index `index` (`0..workers_per_node`), for one Python thread. Asking
    /// twice returns the same object.
    fn worker(&self, py: Python<'_>, index: i64) -> PyResult<Py<PyWorker>> {
        let workers = self.shared.workers_per_node;
        let Some(slot) = usize::try_from(index)
            .ok()
            .filter(|&i| i < workers as usize)
        else {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            return Err(errors::worker_error(&roam::WorkerError::NoSuchWorker {
                index,
                workers,
            }));
        };
        if let Some(w) = &self.workers.lock()[slot] {
            return Ok(w.clone_ref(py));
        }
        if self.closed() {
            return Err(errors::op_error_msg(
                "the node has been shut down; its workers accept no more operations".to_owned(),
            ));
        }
        let worker = {
            let handle = self.shared.handle.lock();
            let handle = handle
                .as_ref()
                .ok_or_else(|| errors::op_error_msg("the node has been shut down".to_owned()))?;
            handle
                .worker(slot as u32)
                .map_err(|err| errors::worker_error(&err))?
        };
        let worker = Py::new(
            py,
            PyWorker::new(WorkerCell::new(worker, self.shared.clone())),
        )?;
        self.workers.lock()[slot] = Some(worker.clone_ref(py));
        Ok(worker)
    }

    /// All workers, in index order.
    fn workers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let all = (0..self.shared.workers_per_node)
            .map(|i| self.worker(py, i64::from(i)))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, all)
    }

    /// This node's counters (a dict: local and remote accesses, messages, bytes, relocations,
    /// `local_fraction`, ...). After shutdown, the final ones.
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        self.shared.stats(py)
    }

    /// Leaves the cluster cleanly: completes the workers' pending operations, waits until
    /// every node has called `shutdown`, then closes the links. Prints the counters as one JSON
    /// line and returns them as a dict (`None` if already shut down). The GIL is released.
    fn shutdown(&self, py: Python<'_>) -> PyResult<Option<Py<PyDict>>> {
        self.leave(py, true)
    }

    /// Leaves the cluster at once, without waiting for the others (they see this node as
    /// departed: their operations that need it fail). For error paths.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.leave(py, false).map(drop)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Shuts down cleanly, or closes at once if the block raised.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.close(py)?;
        } else {
            self.shutdown(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<roam.Node rank {} of {} ({} workers, {} keys, {}{})>",
            self.shared.rank,
            self.shared.num_nodes,
            self.shared.workers_per_node,
            match self.num_keys() {
                Some(n) => n.to_string(),
                None => "sparse".to_string(),
            },
            self.shared.allocation,
            if self.closed() { ", closed" } else { "" }
        )
    }
}
