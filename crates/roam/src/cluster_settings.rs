//! The node's optional settings from the environment, beside its place in the cluster
//! (`cluster_env.rs`): the cluster token (`ROAM_CLUSTER_TOKEN`), worker threads, emulated
//! latency, the load balancer switch, the peer timeout and `ROAM_JOIN`.
//!
//! Invariants: as in `cluster_env.rs`, each reader is a pure function of a lookup closure (the
//! `*_from_process_env` helpers are the thin I/O wrappers), blank values count as unset, and a
//! value that is set but unusable is an error naming the variable and the value, never a
//! silent default. A multi-node run without a token is refused.

use super::{
    ROAM_BALANCER, ROAM_CLUSTER_TOKEN, ROAM_EMULATE_LATENCY_US, ROAM_JOIN, ROAM_PEER_TIMEOUT,
    ROAM_WORKERS_PER_NODE, process_lookup,
};

/// Whether `ROAM_JOIN` asks this process to join a running cluster (`1`, `on`, `true`; `0`,
/// `off`, `false` or unset: no).
pub fn join(lookup: impl Fn(&str) -> Option<String>) -> Result<bool, SettingError> {
    let Some(value) = lookup(ROAM_JOIN).filter(|v| !v.trim().is_empty()) else {
        return Ok(false);
    };
    match value.trim() {
        "1" | "on" | "true" => Ok(true),
        "0" | "off" | "false" => Ok(false),
        _ => Err(SettingError::InvalidNumber {
            var: ROAM_JOIN,
            value,
            expected: "switch (1 or 0)",
        }),
    }
}

/// Why the cluster token could not be read.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// A multi-node run without a token.
    #[error(
        "ROAM_CLUSTER_TOKEN is not set but this is a {num_nodes}-node run: set it to the same \
         secret on every node (e.g. `openssl rand -hex 32`); `roam launch` sets it for you"
    )]
    Missing {
        /// The node count.
        num_nodes: u32,
    },
}

/// The cluster token from `ROAM_CLUSTER_TOKEN`, as the bytes used as the HMAC key.
///
/// Required (non-blank) when `num_nodes > 1`; a single node returns whatever is set, possibly
/// `None`, since it authenticates nobody.
pub fn cluster_token(
    num_nodes: u32,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<Vec<u8>>, TokenError> {
    match lookup(ROAM_CLUSTER_TOKEN).filter(|v| !v.trim().is_empty()) {
        Some(token) => Ok(Some(token.into_bytes())),
        None if num_nodes > 1 => Err(TokenError::Missing { num_nodes }),
        None => Ok(None),
    }
}

/// [`cluster_token`] against the process environment.
pub fn cluster_token_from_process_env(num_nodes: u32) -> Result<Option<Vec<u8>>, TokenError> {
    cluster_token(num_nodes, process_lookup)
}

/// Why an optional numeric setting could not be read.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingError {
    /// The value is not a number (or switch) of the expected type.
    #[error("{var}={value:?} is not a valid {expected}")]
    InvalidNumber {
        /// The variable.
        var: &'static str,
        /// Its value as found.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// The value is zero where zero makes no sense.
    #[error("{var}=0 is invalid: it must be at least 1 (unset it to use the default)")]
    Zero {
        /// The variable.
        var: &'static str,
    },
}

/// Worker threads per node from `ROAM_WORKERS_PER_NODE`; `None` if unset or blank.
pub fn workers_per_node(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<u32>, SettingError> {
    let Some(value) = lookup(ROAM_WORKERS_PER_NODE).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match value.trim().parse::<u32>() {
        Ok(0) => Err(SettingError::Zero {
            var: ROAM_WORKERS_PER_NODE,
        }),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(SettingError::InvalidNumber {
            var: ROAM_WORKERS_PER_NODE,
            value,
            expected: "unsigned 32-bit integer",
        }),
    }
}

/// [`workers_per_node`] against the process environment.
pub fn workers_per_node_from_process_env() -> Result<Option<u32>, SettingError> {
    workers_per_node(process_lookup)
}

/// Emulated latency in microseconds from `ROAM_EMULATE_LATENCY_US`; `None` if unset or blank.
/// Zero is allowed and means no added latency.
pub fn emulate_latency_us(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<u64>, SettingError> {
    let Some(value) = lookup(ROAM_EMULATE_LATENCY_US).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    value
        .trim()
        .parse::<u64>()
        .map(Some)
        .map_err(|_| SettingError::InvalidNumber {
            var: ROAM_EMULATE_LATENCY_US,
            value,
            expected: "unsigned 64-bit integer (microseconds)",
        })
}

/// Whether the load balancer runs, from `ROAM_BALANCER` (`on` or `off`); `None` if unset or
/// blank.
pub fn balancer(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<bool>, SettingError> {
    let Some(value) = lookup(ROAM_BALANCER).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match value.trim() {
        "on" => Ok(Some(true)),
        "off" => Ok(Some(false)),
        _ => Err(SettingError::InvalidNumber {
            var: ROAM_BALANCER,
            value,
            expected: "switch (on or off)",
        }),
    }
}

/// The peer silence timeout from `ROAM_PEER_TIMEOUT` (seconds, e.g. `5` or `0.5`; overrides
/// `Config::peer_timeout`); `None` if unset or blank.
pub fn peer_timeout(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<std::time::Duration>, SettingError> {
    let Some(value) = lookup(ROAM_PEER_TIMEOUT).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match value.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() && s < 1e9 => {
            Ok(Some(std::time::Duration::from_secs_f64(s)))
        }
        _ => Err(SettingError::InvalidNumber {
            var: ROAM_PEER_TIMEOUT,
            value,
            expected: "positive number of seconds",
        }),
    }
}

/// [`emulate_latency_us`] against the process environment.
pub fn emulate_latency_us_from_process_env() -> Result<Option<u64>, SettingError> {
    emulate_latency_us(process_lookup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_env::tests::env;

    #[test]
    fn token_required_only_for_multi_node() {
        assert_eq!(
            cluster_token(2, env(&[])),
            Err(TokenError::Missing { num_nodes: 2 })
        );
        assert_eq!(
            cluster_token(2, env(&[("ROAM_CLUSTER_TOKEN", " ")])),
            Err(TokenError::Missing { num_nodes: 2 })
        );
        assert_eq!(cluster_token(1, env(&[])), Ok(None));
        assert_eq!(
            cluster_token(3, env(&[("ROAM_CLUSTER_TOKEN", "s3cret")])),
            Ok(Some(b"s3cret".to_vec()))
        );
        assert!(
            TokenError::Missing { num_nodes: 2 }
                .to_string()
                .contains("ROAM_CLUSTER_TOKEN")
        );
    }

    #[test]
    fn optional_settings() {
        assert_eq!(workers_per_node(env(&[])), Ok(None));
        assert_eq!(
            workers_per_node(env(&[("ROAM_WORKERS_PER_NODE", "8")])),
            Ok(Some(8))
        );
        assert_eq!(
            workers_per_node(env(&[("ROAM_WORKERS_PER_NODE", "0")])),
            Err(SettingError::Zero {
                var: "ROAM_WORKERS_PER_NODE"
            })
        );
        let err = workers_per_node(env(&[("ROAM_WORKERS_PER_NODE", "many")])).unwrap_err();
        assert!(
            err.to_string().contains("ROAM_WORKERS_PER_NODE=\"many\""),
            "{err}"
        );

        assert_eq!(balancer(env(&[])), Ok(None));
        assert_eq!(balancer(env(&[("ROAM_BALANCER", "off")])), Ok(Some(false)));
        assert_eq!(balancer(env(&[("ROAM_BALANCER", " on ")])), Ok(Some(true)));
        let err = balancer(env(&[("ROAM_BALANCER", "no")])).unwrap_err();
        assert!(err.to_string().contains("ROAM_BALANCER=\"no\""), "{err}");
        assert_eq!(peer_timeout(env(&[])), Ok(None));
        assert_eq!(
            peer_timeout(env(&[("ROAM_PEER_TIMEOUT", " 0.5 ")])),
            Ok(Some(std::time::Duration::from_millis(500)))
        );
        for bad in ["0", "-1", "soon", "inf"] {
            let err = peer_timeout(env(&[("ROAM_PEER_TIMEOUT", bad)])).unwrap_err();
            assert!(err.to_string().contains("ROAM_PEER_TIMEOUT="), "{err}");
        }
        assert_eq!(emulate_latency_us(env(&[])), Ok(None));
        assert_eq!(
            emulate_latency_us(env(&[("ROAM_EMULATE_LATENCY_US", "0")])),
            Ok(Some(0))
        );
        assert_eq!(
            emulate_latency_us(env(&[("ROAM_EMULATE_LATENCY_US", "250")])),
            Ok(Some(250))
        );
        let err = emulate_latency_us(env(&[("ROAM_EMULATE_LATENCY_US", "1.5")])).unwrap_err();
        assert!(
            err.to_string().contains("ROAM_EMULATE_LATENCY_US=\"1.5\""),
            "{err}"
        );
    }
}
