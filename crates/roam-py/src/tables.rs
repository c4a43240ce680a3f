//! `Node(initializer=..., dynamic=...)`: row initializers and dynamic key spaces (admission
//! and eviction) from Python values (issue #17; `docs/embeddings.md`).
//!
//! Accepted forms:
//! - `initializer`: `"zeros"`, or a dict `{"kind": "uniform", "low": a, "high": b, "seed": s}`
//!   or `{"kind": "normal", "mean": m, "std": s, "seed": s}` (`seed` defaults to 0; uniform
//!   bounds default to `[-0.05, 0.05)`, normal to mean 0 and std 0.01).
//! - `dynamic`: a dict with any of `"admission"` (`"all"`, `{"kind": "count", "min_count": K,
//!   "sketch_width": W}` or `{"kind": "probability", "p": p, "seed": s}`), `"max_rows"` (rows
//!   per node), `"max_bytes"` (bytes of records per node), `"ttl"` (seconds) or `"ttl_steps"`
//!   (ticks of the node's clock, `Worker.advance_clock`), and `"spill"` (a bool: keep evicted
//!   rows in the spill file under `Node(spill_dir=...)`). It implies sparse keys.
//!
//! - `tables`: a dict of named tables, `{name: {"dim": D, "num_ids": N, "optimizer": ...,
//!   "initializer": ..., "dynamic": ...}}` in key order (a checkpoint restores only into the
//!   same tables in the same order). A table with `"dynamic"` (a policy dict as above, or
//!   `True` for the default: every id admitted, nothing evicted) takes any id below 2^56;
//!   otherwise `"num_ids"` is required and ids are `0..num_ids`. `"optimizer"` takes the
//!   forms of `Node(optimizer=...)`.
//!
//! Everything is validated before the node starts: a bad name, key or value raises `ValueError`
//! (or `TypeError` for a wrong type) naming it.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use roam::{Admission, DynamicPolicy, Initializer, TableKind, TableSpec};

/// A dict's entries, refusing keys outside `allowed` (named in the error with `what`).
fn entries<'py>(
    dict: &Bound<'py, PyDict>,
    what: &str,
    allowed: &[&str],
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let mut out = Vec::new();
    for (name, value) in dict.iter() {
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("{what} keys must be strings")))?;
        if !allowed.contains(&name.as_str()) {
            return Err(PyValueError::new_err(format!(
                "unknown {what} key {name:?}: expected one of {}",
                allowed.join(", ")
            )));
        }
        out.push((name, value));
    }
    Ok(out)
}

fn number<'py, T>(what: &str, value: &Bound<'py, PyAny>) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py>,
{
    value
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a number")))
}

fn kind_of(dict: &Bound<'_, PyDict>, what: &str) -> PyResult<String> {
    dict.get_item("kind")?
        .ok_or_else(|| PyValueError::new_err(format!("the {what} dict needs a \"kind\"")))?
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("{what} \"kind\" must be a string")))
}

/// The initializer `obj` describes (see the module docs).
pub(crate) fn initializer_config(obj: &Bound<'_, PyAny>) -> PyResult<Initializer> {
    let init = if let Ok(name) = obj.cast::<PyString>() {
        match &*name.to_cow()? {
            "zeros" => Initializer::Zeros,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown initializer {other:?}: a name must be \"zeros\"; uniform and normal \
                     take a dict ({{\"kind\": \"normal\", \"std\": 0.01}})"
                )));
            }
        }
    } else {
        let Ok(dict) = obj.cast::<PyDict>() else {
            return Err(PyTypeError::new_err(
                "initializer must be \"zeros\" or a dict ({\"kind\": \"normal\", \"std\": 0.01})",
            ));
        };
        let kind = kind_of(dict, "initializer")?;
        let allowed: &[&str] = match kind.as_str() {
            "zeros" => &["kind"],
            "uniform" => &["kind", "low", "high", "seed"],
            "normal" => &["kind", "mean", "std", "seed"],
            other => {
                return Err(PyValueError::new_err(
                    roam::InitializerError::Unknown(other.into()).to_string(),
                ));
            }
        };
        let (mut a, mut b, mut seed) = match kind.as_str() {
            "uniform" => (-0.05f32, 0.05f32, 0u64),
            _ => (0.0, 0.01, 0),
        };
        for (name, value) in entries(dict, "initializer", allowed)? {
            let what = format!("initializer {name:?}");
            match name.as_str() {
                "low" | "mean" => a = number(&what, &value)?,
                "high" | "std" => b = number(&what, &value)?,
                "seed" => seed = number(&what, &value)?,
                _ => {}
            }
        }
        match kind.as_str() {
            "uniform" => Initializer::Uniform {
                low: a,
                high: b,
                seed,
            },
            "normal" => Initializer::Normal {
                mean: a,
                std: b,
                seed,
            },
            _ => Initializer::Zeros,
        }
    };
    init.validate()
        .map_err(|err| PyValueError::new_err(err.to_string()))?;
    Ok(init)
}

/// The dynamic policy `obj` describes (see the module docs).
pub(crate) fn dynamic_config(obj: &Bound<'_, PyAny>) -> PyResult<DynamicPolicy> {
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Err(PyTypeError::new_err(
            "dynamic must be a dict ({\"admission\": ..., \"max_rows\": N, \"ttl\": seconds})",
        ));
    };
    let mut policy = DynamicPolicy::default();
    let keys = [
        "admission",
        "max_rows",
        "max_bytes",
        "ttl",
        "ttl_steps",
        "spill",
    ];
    for (name, value) in entries(dict, "dynamic", &keys)? {
        match name.as_str() {
            "admission" => policy.admission = admission_config(&value)?,
            "max_rows" if !value.is_none() => {
                policy.max_rows = Some(number("dynamic \"max_rows\"", &value)?)
            }
            "max_bytes" if !value.is_none() => {
                policy.max_bytes = Some(number("dynamic \"max_bytes\"", &value)?)
            }
            "spill" => {
                policy.spill = value
                    .extract::<bool>()
                    .map_err(|_| PyTypeError::new_err("dynamic \"spill\" must be True or False"))?
            }
            "ttl" if !value.is_none() => {
                let secs: f64 = number("dynamic \"ttl\"", &value)?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err(PyValueError::new_err(format!(
                        "dynamic \"ttl\" must be a positive number of seconds, not {secs}"
                    )));
                }
                policy.ttl_ns = Some((secs * 1e9) as u64);
            }
            "ttl_steps" if !value.is_none() => {
                policy.ttl_steps = Some(number("dynamic \"ttl_steps\"", &value)?)
            }
            _ => {}
        }
    }
    policy
        .validate()
        .map_err(|err| PyValueError::new_err(err.to_string()))?;
    Ok(policy)
}

fn admission_config(obj: &Bound<'_, PyAny>) -> PyResult<Admission> {
    if let Ok(name) = obj.cast::<PyString>() {
        return match &*name.to_cow()? {
            "all" => Ok(Admission::All),
            other => Err(PyValueError::new_err(format!(
                "unknown admission {other:?}: a name must be \"all\"; count and probability take \
                 a dict ({{\"kind\": \"count\", \"min_count\": 2}})"
            ))),
        };
    }
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Err(PyTypeError::new_err(
            "admission must be \"all\" or a dict ({\"kind\": \"count\", \"min_count\": 2})",
        ));
    };
    match kind_of(dict, "admission")?.as_str() {
        "all" => Ok(Admission::All),
        "count" => {
            let (mut min_count, mut sketch_width) = (2u32, 1u32 << 20);
            for (name, value) in entries(dict, "admission", &["kind", "min_count", "sketch_width"])?
            {
                let what = format!("admission {name:?}");
                match name.as_str() {
                    "min_count" => min_count = number(&what, &value)?,
                    "sketch_width" => sketch_width = number(&what, &value)?,
                    _ => {}
                }
            }
            Ok(Admission::Count {
                min_count,
                sketch_width,
            })
        }
        "probability" => {
            let (mut p, mut seed) = (1.0f64, 0u64);
            for (name, value) in entries(dict, "admission", &["kind", "p", "seed"])? {
                let what = format!("admission {name:?}");
                match name.as_str() {
                    "p" => p = number(&what, &value)?,
                    "seed" => seed = number(&what, &value)?,
                    _ => {}
                }
            }
            Ok(Admission::Probability { p, seed })
        }
        other => Err(PyValueError::new_err(format!(
            "unknown admission kind {other:?}: expected all, count or probability"
        ))),
    }
}

/// The named tables `obj` describes (see the module docs), in the dict's order.
pub(crate) fn tables_config(obj: &Bound<'_, PyAny>) -> PyResult<Vec<TableSpec>> {
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Err(PyTypeError::new_err(
            "tables must be a dict of table name to a dict ({\"user\": {\"dim\": 16, \
             \"num_ids\": 1000}})",
        ));
    };
    let mut specs = Vec::new();
    for (name, table) in dict.iter() {
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("table names must be strings"))?;
        let Ok(table) = table.cast::<PyDict>() else {
            return Err(PyTypeError::new_err(format!(
                "table {name:?} must be a dict ({{\"dim\": 16, \"num_ids\": 1000}})"
            )));
        };
        let what = format!("table {name:?}");
        let allowed = ["dim", "num_ids", "optimizer", "initializer", "dynamic"];
        let mut spec = TableSpec::dense(name.clone(), 0, 0);
        let (mut dim, mut num_ids, mut dynamic) = (None, None, None);
        for (key, value) in entries(table, &what, &allowed)? {
            let at = |e: PyErr| {
                let py = obj.py();
                let msg = format!("{what}: {}", e.value(py));
                if e.is_instance_of::<PyTypeError>(py) {
                    PyTypeError::new_err(msg)
                } else {
                    PyValueError::new_err(msg)
                }
            };
            match key.as_str() {
                "dim" => dim = Some(number::<u32>(&format!("{what} \"dim\""), &value)?),
                "num_ids" => num_ids = Some(number::<u64>(&format!("{what} \"num_ids\""), &value)?),
                "optimizer" if !value.is_none() => {
                    spec.optimizer = Some(crate::optimizer::optimizer_config(&value).map_err(at)?)
                }
                "initializer" if !value.is_none() => {
                    spec.initializer = initializer_config(&value).map_err(at)?
                }
                "dynamic" if !value.is_none() => {
                    dynamic = if value.extract::<bool>().ok() == Some(true) {
                        Some(DynamicPolicy::default())
                    } else if value.extract::<bool>().ok() == Some(false) {
                        None
                    } else {
                        Some(dynamic_config(&value).map_err(at)?)
                    }
                }
                _ => {}
            }
        }
        spec.dim = dim.ok_or_else(|| PyValueError::new_err(format!("{what} needs a \"dim\"")))?;
        spec.kind = match (dynamic, num_ids) {
            (Some(policy), None) => TableKind::Dynamic(policy),
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(format!(
                    "{what}: a dynamic table takes any id; leave out \"num_ids\""
                )));
            }
            (None, Some(num_ids)) => TableKind::Dense { num_ids },
            (None, None) => {
                return Err(PyValueError::new_err(format!(
                    "{what} needs \"num_ids\" (ids 0..num_ids), or \"dynamic\" for any id"
                )));
            }
        };
        specs.push(spec);
    }
    // Names, dimensions and the rest are checked here, by name, before the node starts.
    roam::Tables::new(specs.clone()).map_err(|err| PyValueError::new_err(err.to_string()))?;
    Ok(specs)
}
