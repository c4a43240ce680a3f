//! `Node(optimizer=...)`: the server-side optimizer from Python values.
//!
//! Accepted forms: a name (`"sgd"`, `"adagrad"`, `"adam"`, `"ftrl"`, hyper-parameters at their
//! defaults) or a dict with `"kind"` and any of the kind's hyper-parameters (`lr`, `eps`,
//! `beta1`, `beta2`, `alpha`, `beta`, `l1`, `l2`). Everything is validated here, before the node
//! starts: a bad name, parameter or value raises `ValueError` naming it.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use roam::Optimizer;

/// The optimizer `obj` describes (see the module docs).
pub(crate) fn optimizer_config(obj: &Bound<'_, PyAny>) -> PyResult<Optimizer> {
    let invalid = |err: roam::OptimizerError| PyValueError::new_err(err.to_string());
    if let Ok(name) = obj.cast::<PyString>() {
        return Optimizer::from_parts(&name.to_cow()?, &[]).map_err(invalid);
    }
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Err(PyTypeError::new_err(
            "optimizer must be a name (\"adagrad\") or a dict ({\"kind\": \"adam\", \"lr\": 0.01})",
        ));
    };
    let kind: String = dict
        .get_item("kind")?
        .ok_or_else(|| PyValueError::new_err("the optimizer dict needs a \"kind\""))?
        .extract()
        .map_err(|_| PyTypeError::new_err("optimizer \"kind\" must be a string"))?;
    let mut params: Vec<(String, f32)> = Vec::new();
    for (name, value) in dict.iter() {
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("optimizer parameter names must be strings"))?;
        if name == "kind" {
            continue;
        }
        let value: f32 = value.extract().map_err(|_| {
            PyTypeError::new_err(format!("optimizer parameter {name:?} must be a number"))
        })?;
        params.push((name, value));
    }
    let named: Vec<(&str, f32)> = params.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    if let Some((name, _)) = named
        .iter()
        .find(|(n, _)| !["lr", "eps", "beta1", "beta2", "alpha", "beta", "l1", "l2"].contains(n))
    {
        return Err(PyValueError::new_err(format!(
            "unknown optimizer parameter {name:?}: expected lr, eps, beta1, beta2, alpha, beta, l1 \
             or l2"
        )));
    }
    Optimizer::from_parts(&kind, &named).map_err(invalid)
}
