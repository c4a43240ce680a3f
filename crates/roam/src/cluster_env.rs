//! Where this node sits in the cluster: its rank, the node count and the coordinator address.
//!
//! This module owns the translation from the launchers people already use (roam's own
//! `roam launch`, torchrun, Slurm, Open MPI) into one [`ClusterEnv`]. Each field is resolved on its
//! own, first source wins: explicit config ([`ClusterOverrides`]), then `ROAM_*` variables, then
//! torchrun's, then Slurm's, then Open MPI's. Empty or all-blank variables count as unset, because
//! shells and job scripts routinely export `VAR=` to mean "nothing".
//!
//! Under torchrun (`TORCHELASTIC_RUN_ID` set) the coordinator from `MASTER_ADDR`/`MASTER_PORT` is
//! `MASTER_PORT + 1`: torchrun's agent already listens on `MASTER_PORT` (its store, which
//! `torch.distributed` shares), so rank 0 could not bind it; `ROAM_COORDINATOR` still wins.
//!
//! Invariants of a returned [`ClusterEnv`]: `num_nodes >= 1`, `rank < num_nodes`, and
//! `coordinator` is a syntactically valid `host:port` whose port is non-zero whenever
//! `num_nodes > 1`. When no source names a rank or a node count, the result is a single node
//! (rank 0 of 1) with coordinator [`SINGLE_NODE_COORDINATOR`], which means "no network".
//!
//! Resolution is a pure function of the overrides and a lookup closure ([`resolve`]), so every
//! source and the precedence between them are testable without touching the process environment;
//! [`resolve_from_process_env`] and the `*_from_process_env` helpers are the thin I/O wrappers.

use std::fmt;

/// Rank of this node, set by `roam launch` (highest-precedence environment variable).
pub const ROAM_RANK: &str = "ROAM_RANK";
/// Number of nodes, set by `roam launch`.
pub const ROAM_NUM_NODES: &str = "ROAM_NUM_NODES";
/// Coordinator address `host:port`, set by `roam launch`.
pub const ROAM_COORDINATOR: &str = "ROAM_COORDINATOR";
/// Shared secret that every node proves it knows before any frame is accepted.
pub const ROAM_CLUSTER_TOKEN: &str = "ROAM_CLUSTER_TOKEN";
/// Worker threads per node (optional).
pub const ROAM_WORKERS_PER_NODE: &str = "ROAM_WORKERS_PER_NODE";
/// Emulated one-way network latency in microseconds (optional).
pub const ROAM_EMULATE_LATENCY_US: &str = "ROAM_EMULATE_LATENCY_US";
/// `on` or `off`: overrides whether the node runs the load balancer (`roam launch --balancer`).
pub const ROAM_BALANCER: &str = "ROAM_BALANCER";

/// `1` (or `on`, `true`): this process joins a running cluster as a server-only node instead of
/// taking part in the start-up rendezvous (elastic membership; see `elastic`). It needs only the
/// coordinator address and the cluster token: the coordinator assigns its rank.
pub const ROAM_JOIN: &str = "ROAM_JOIN";
/// Seconds of silence after which a peer is declared lost (overrides `Config::peer_timeout`).
pub const ROAM_PEER_TIMEOUT: &str = "ROAM_PEER_TIMEOUT";

/// Coordinator value of a single-node run: port 0 means no socket is ever opened to it.
pub const SINGLE_NODE_COORDINATOR: &str = "127.0.0.1:0";

/// Rank variables in precedence order (roam, torchrun, Slurm, Open MPI).
const RANK_VARS: [&str; 4] = [ROAM_RANK, "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"];
/// Node-count variables in precedence order (roam, torchrun, Slurm, Open MPI).
const SIZE_VARS: [&str; 4] = [
    ROAM_NUM_NODES,
    "WORLD_SIZE",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
];
const MASTER_ADDR: &str = "MASTER_ADDR";
const MASTER_PORT: &str = "MASTER_PORT";
/// Set by torchrun in every process it starts (the elastic run's id).
const TORCHELASTIC_RUN_ID: &str = "TORCHELASTIC_RUN_ID";

#[path = "cluster_settings.rs"]
mod settings;
pub use settings::{
    SettingError, TokenError, balancer, cluster_token, cluster_token_from_process_env,
    emulate_latency_us, emulate_latency_us_from_process_env, join, peer_timeout, workers_per_node,
    workers_per_node_from_process_env,
};

/// This node's place in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterEnv {
    /// This node's rank, in `0..num_nodes`; rank 0 is the coordinator.
    pub rank: u32,
    /// Number of nodes (processes) in the cluster, at least 1.
    pub num_nodes: u32,
    /// Coordinator address as `host:port` (IPv6 hosts in brackets).
    pub coordinator: String,
}

impl ClusterEnv {
    /// A single node that opens no network connection.
    pub fn single_node() -> Self {
        Self {
            rank: 0,
            num_nodes: 1,
            coordinator: SINGLE_NODE_COORDINATOR.to_owned(),
        }
    }
}

/// Values given explicitly (command line or config file); they beat every environment variable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterOverrides {
    /// Explicit rank.
    pub rank: Option<u32>,
    /// Explicit node count.
    pub num_nodes: Option<u32>,
    /// Explicit coordinator `host:port`.
    pub coordinator: Option<String>,
}

/// Where a resolved value came from, so errors can point at the thing to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// [`ClusterOverrides`] (command line or config file).
    Config,
    /// One environment variable.
    Var(&'static str),
    /// `MASTER_ADDR` and `MASTER_PORT` together.
    MasterAddrPort,
    /// `MASTER_ADDR` and `MASTER_PORT + 1` under torchrun, whose agent holds `MASTER_PORT`.
    TorchrunMasterAddrPort,
    /// Nothing set it; the single-node default applies.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config => f.write_str("explicit config"),
            Self::Var(var) => write!(f, "environment variable {var}"),
            Self::MasterAddrPort => f.write_str("MASTER_ADDR/MASTER_PORT"),
            Self::TorchrunMasterAddrPort => {
                f.write_str("MASTER_ADDR and MASTER_PORT + 1 (torchrun's agent holds MASTER_PORT)")
            }
            Self::Default => f.write_str("the single-node default"),
        }
    }
}

/// Why [`resolve`] could not determine this node's place in the cluster.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClusterEnvError {
    /// A variable that must hold an unsigned integer does not.
    #[error("{var}={value:?} is not a valid {expected}")]
    InvalidNumber {
        /// The variable.
        var: &'static str,
        /// Its value as found.
        value: String,
        /// What was expected, e.g. "unsigned 32-bit integer".
        expected: &'static str,
    },
    /// The node count is zero.
    #[error("the node count from {origin} is 0; a cluster needs at least one node")]
    ZeroNodes {
        /// Where the zero came from.
        origin: Origin,
    },
    /// The rank is not below the node count.
    #[error(
        "rank {rank} (from {rank_source}) is out of range for {num_nodes} nodes \
         (from {size_source}); ranks are 0..{num_nodes}"
    )]
    RankOutOfRange {
        /// The rank found.
        rank: u32,
        /// Where it came from.
        rank_source: Origin,
        /// The node count found.
        num_nodes: u32,
        /// Where it came from.
        size_source: Origin,
    },
    /// A rank was given but no node count.
    #[error(
        "rank {rank} is set (by {rank_source}) but no node count is: set ROAM_NUM_NODES \
         (or WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE)"
    )]
    MissingNumNodes {
        /// The rank found.
        rank: u32,
        /// Where it came from.
        rank_source: Origin,
    },
    /// A multi-node count was given but no rank.
    #[error(
        "{num_nodes} nodes are configured (by {size_source}) but this node's rank is not: \
         set ROAM_RANK (or RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK)"
    )]
    MissingRank {
        /// The node count found.
        num_nodes: u32,
        /// Where it came from.
        size_source: Origin,
    },
    /// A multi-node run without any coordinator address.
    #[error(
        "a {num_nodes}-node run (node count from {size_source}) needs a coordinator address: \
         set ROAM_COORDINATOR=host:port, or MASTER_ADDR and MASTER_PORT, to the address rank 0 \
         listens on (under Slurm or MPI, e.g. the first host of the allocation)"
    )]
    MissingCoordinator {
        /// The node count found.
        num_nodes: u32,
        /// Where it came from.
        size_source: Origin,
    },
    /// A joining node (`ROAM_JOIN=1`) was given no coordinator address.
    #[error(
        "this node joins a running cluster but no coordinator is set: set ROAM_COORDINATOR=host:port \
         (or MASTER_ADDR and MASTER_PORT) to the address rank 0 listens on"
    )]
    JoinWithoutCoordinator,
    /// One half of `MASTER_ADDR`/`MASTER_PORT` is set without the other.
    #[error("{present} is set but {missing} is not; torchrun-style coordinates need both")]
    IncompleteMaster {
        /// The variable that is set.
        present: &'static str,
        /// The variable that is missing.
        missing: &'static str,
    },
    /// The coordinator address is not a usable `host:port`.
    #[error("coordinator address {value:?} (from {origin}) is invalid: {reason}")]
    InvalidCoordinator {
        /// The address as found.
        value: String,
        /// Where it came from.
        origin: Origin,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Resolves rank, node count and coordinator from `overrides` and the variables `lookup` returns.
///
/// `lookup(name)` returns the value of an environment variable, `None` if unset; blank values are
/// treated as unset. See the module documentation for the precedence.
pub fn resolve(
    overrides: &ClusterOverrides,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<ClusterEnv, ClusterEnvError> {
    let get = |var: &str| lookup(var).filter(|v| !v.trim().is_empty());
    let rank = first_u32(overrides.rank, &RANK_VARS, &get)?;
    let size = first_u32(overrides.num_nodes, &SIZE_VARS, &get)?;

    let (num_nodes, size_source, rank, rank_source) = match (size, rank) {
        (None, None) => return Ok(ClusterEnv::single_node()),
        (None, Some((rank, rank_source))) => {
            return Err(ClusterEnvError::MissingNumNodes { rank, rank_source });
        }
        (Some((0, size_source)), _) => {
            return Err(ClusterEnvError::ZeroNodes {
                origin: size_source,
            });
        }
        // A lone node has only one possible rank, so not naming it is harmless.
        (Some((1, size_source)), None) => (1, size_source, 0, Origin::Default),
        (Some((num_nodes, size_source)), None) => {
            return Err(ClusterEnvError::MissingRank {
                num_nodes,
                size_source,
            });
        }
        (Some((num_nodes, size_source)), Some((rank, rank_source))) => {
            (num_nodes, size_source, rank, rank_source)
        }
    };
    if rank >= num_nodes {
        return Err(ClusterEnvError::RankOutOfRange {
            rank,
            rank_source,
            num_nodes,
            size_source,
        });
    }

    let coordinator = match coordinator_from(overrides, &get)? {
        Some((value, origin)) => {
            let port =
                parse_host_port(&value).map_err(|reason| ClusterEnvError::InvalidCoordinator {
                    value: value.clone(),
                    origin: origin.clone(),
                    reason,
                })?;
            if port == 0 && num_nodes > 1 {
                return Err(ClusterEnvError::InvalidCoordinator {
                    value,
                    origin,
                    reason: "port 0 can only be used by a single node; other nodes must \
                             connect to a fixed port",
                });
            }
            value
        }
        None if num_nodes == 1 => SINGLE_NODE_COORDINATOR.to_owned(),
        None => {
            return Err(ClusterEnvError::MissingCoordinator {
                num_nodes,
                size_source,
            });
        }
    };
    Ok(ClusterEnv {
        rank,
        num_nodes,
        coordinator,
    })
}

/// The coordinator address of a joining node: from `overrides`, then `ROAM_COORDINATOR`, then
/// `MASTER_ADDR`/`MASTER_PORT`; it must name a non-zero port. Rank and node count are ignored
/// (the coordinator assigns them).
pub fn join_coordinator(
    overrides: &ClusterOverrides,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, ClusterEnvError> {
    let get = |var: &str| lookup(var).filter(|v| !v.trim().is_empty());
    let Some((value, origin)) = coordinator_from(overrides, &get)? else {
        return Err(ClusterEnvError::JoinWithoutCoordinator);
    };
    let port = parse_host_port(&value).map_err(|reason| ClusterEnvError::InvalidCoordinator {
        value: value.clone(),
        origin: origin.clone(),
        reason,
    })?;
    if port == 0 {
        return Err(ClusterEnvError::InvalidCoordinator {
            value,
            origin,
            reason: "a joining node must connect to a fixed port",
        });
    }
    Ok(value)
}

/// [`resolve`] against the process environment.
pub fn resolve_from_process_env(
    overrides: &ClusterOverrides,
) -> Result<ClusterEnv, ClusterEnvError> {
    resolve(overrides, process_lookup)
}

/// Reads one process environment variable for the `lookup` parameters of this module.
///
/// Non-UTF-8 values are converted lossily rather than treated as unset, so that a garbled value
/// is reported as unparsable instead of being silently skipped in favour of a lower source.
pub fn process_lookup(var: &str) -> Option<String> {
    std::env::var_os(var).map(|v| v.to_string_lossy().into_owned())
}

/// The first set value among the override and `vars`, parsed, with where it came from.
fn first_u32(
    explicit: Option<u32>,
    vars: &[&'static str],
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<(u32, Origin)>, ClusterEnvError> {
    if let Some(v) = explicit {
        return Ok(Some((v, Origin::Config)));
    }
    for &var in vars {
        if let Some(value) = get(var) {
            let n = value
                .trim()
                .parse::<u32>()
                .map_err(|_| ClusterEnvError::InvalidNumber {
                    var,
                    value,
                    expected: "unsigned 32-bit integer",
                })?;
            return Ok(Some((n, Origin::Var(var))));
        }
    }
    Ok(None)
}

/// The coordinator string from the first source that gives one; validated by the caller.
fn coordinator_from(
    overrides: &ClusterOverrides,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<(String, Origin)>, ClusterEnvError> {
    if let Some(c) = &overrides.coordinator {
        return Ok(Some((c.trim().to_owned(), Origin::Config)));
    }
    if let Some(c) = get(ROAM_COORDINATOR) {
        return Ok(Some((c.trim().to_owned(), Origin::Var(ROAM_COORDINATOR))));
    }
    match (get(MASTER_ADDR), get(MASTER_PORT)) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(ClusterEnvError::IncompleteMaster {
            present: MASTER_ADDR,
            missing: MASTER_PORT,
        }),
        (None, Some(_)) => Err(ClusterEnvError::IncompleteMaster {
            present: MASTER_PORT,
            missing: MASTER_ADDR,
        }),
        (Some(addr), Some(port)) => {
            let port_num =
                port.trim()
                    .parse::<u16>()
                    .map_err(|_| ClusterEnvError::InvalidNumber {
                        var: MASTER_PORT,
                        value: port.clone(),
                        expected: "TCP port (0..=65535)",
                    })?;
            // Under torchrun, MASTER_PORT is its agent's store: roam's coordinator takes the next.
            let (port_num, origin) = if get(TORCHELASTIC_RUN_ID).is_some() {
                let next = port_num.checked_add(1).filter(|&p| p != 0).ok_or(
                    ClusterEnvError::InvalidNumber {
                        var: MASTER_PORT,
                        value: port.clone(),
                        expected: "TCP port below 65535 (under torchrun roam's coordinator \
                                   listens on MASTER_PORT + 1; set ROAM_COORDINATOR to choose)",
                    },
                )?;
                (next, Origin::TorchrunMasterAddrPort)
            } else {
                (port_num, Origin::MasterAddrPort)
            };
            let addr = addr.trim();
            // torchrun allows a bare IPv6 address in MASTER_ADDR; host:port needs brackets.
            let host = if addr.contains(':') && !addr.starts_with('[') {
                format!("[{addr}]")
            } else {
                addr.to_owned()
            };
            Ok(Some((format!("{host}:{port_num}"), origin)))
        }
    }
}

/// Checks that `value` is `host:port` or `[ipv6]:port` and returns the port.
fn parse_host_port(value: &str) -> Result<u16, &'static str> {
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address opened with '[' is never closed with ']'")?;
        let port = after
            .strip_prefix(':')
            .ok_or("expected ':port' after the bracketed IPv6 address")?;
        (host, port)
    } else {
        let (host, port) = value
            .rsplit_once(':')
            .ok_or("expected host:port, found no ':port'")?;
        if host.contains(':') {
            return Err("an IPv6 address must be written in brackets, as [addr]:port");
        }
        (host, port)
    };
    if host.is_empty() {
        return Err("the host part is empty");
    }
    port.parse::<u16>()
        .map_err(|_| "the port is not a number in 0..=65535")
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A lookup over `pairs` (also used by the settings' tests).
    pub(super) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn none() -> ClusterOverrides {
        ClusterOverrides::default()
    }

    fn cluster(rank: u32, num_nodes: u32, coordinator: &str) -> ClusterEnv {
        ClusterEnv {
            rank,
            num_nodes,
            coordinator: coordinator.to_owned(),
        }
    }

    #[test]
    fn nothing_set_is_a_single_node() {
        assert_eq!(resolve(&none(), env(&[])), Ok(ClusterEnv::single_node()));
        assert_eq!(ClusterEnv::single_node().coordinator, "127.0.0.1:0");
    }

    #[test]
    fn blank_variables_count_as_unset() {
        let e = env(&[("ROAM_RANK", ""), ("ROAM_NUM_NODES", "  ")]);
        assert_eq!(resolve(&none(), e), Ok(ClusterEnv::single_node()));
    }

    #[test]
    fn explicit_config_only() {
        let o = ClusterOverrides {
            rank: Some(2),
            num_nodes: Some(4),
            coordinator: Some("10.0.0.1:29500".into()),
        };
        assert_eq!(resolve(&o, env(&[])), Ok(cluster(2, 4, "10.0.0.1:29500")));
    }

    #[test]
    fn roam_variables() {
        let e = env(&[
            ("ROAM_RANK", "1"),
            ("ROAM_NUM_NODES", "3"),
            ("ROAM_COORDINATOR", "127.0.0.1:4000"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(1, 3, "127.0.0.1:4000")));
    }

    #[test]
    fn torchrun_variables() {
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "node17"),
            ("MASTER_PORT", "29500"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(3, 8, "node17:29500")));
    }

    #[test]
    fn under_torchrun_the_coordinator_is_the_port_after_its_agents() {
        let e = env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(1, 2, "127.0.0.1:29501")));
        // ROAM_COORDINATOR is taken as it is.
        let e = env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("ROAM_COORDINATOR", "127.0.0.1:7000"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(1, 2, "127.0.0.1:7000")));
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "65535"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ]);
        let err = resolve(&none(), e).unwrap_err().to_string();
        assert!(err.contains("MASTER_PORT + 1"), "{err}");
    }

    #[test]
    fn torchrun_ipv6_master_addr_gets_brackets() {
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "fd00::1"),
            ("MASTER_PORT", "29500"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(0, 2, "[fd00::1]:29500")));
    }

    #[test]
    fn slurm_variables_with_roam_coordinator() {
        let e = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "6"),
            ("ROAM_COORDINATOR", "head:7000"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(5, 6, "head:7000")));
    }

    #[test]
    fn open_mpi_variables_with_master_addr() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.1.1.1"),
            ("MASTER_PORT", "1234"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(1, 2, "10.1.1.1:1234")));
    }

    #[test]
    fn slurm_without_coordinator_names_the_variables_to_set() {
        let e = env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")]);
        let err = resolve(&none(), e).unwrap_err();
        assert_eq!(
            err,
            ClusterEnvError::MissingCoordinator {
                num_nodes: 4,
                size_source: Origin::Var("SLURM_NTASKS"),
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("ROAM_COORDINATOR") && msg.contains("MASTER_ADDR"),
            "{msg}"
        );
    }

    #[test]
    fn precedence_config_beats_roam_beats_torchrun_beats_slurm_beats_mpi() {
        let all = [
            ("ROAM_RANK", "1"),
            ("ROAM_NUM_NODES", "10"),
            ("ROAM_COORDINATOR", "roam:1"),
            ("RANK", "2"),
            ("WORLD_SIZE", "20"),
            ("MASTER_ADDR", "torch"),
            ("MASTER_PORT", "2"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "30"),
            ("OMPI_COMM_WORLD_RANK", "4"),
            ("OMPI_COMM_WORLD_SIZE", "40"),
        ];
        let config = ClusterOverrides {
            rank: Some(0),
            num_nodes: Some(5),
            coordinator: Some("cfg:9".into()),
        };
        assert_eq!(resolve(&config, env(&all)), Ok(cluster(0, 5, "cfg:9")));
        assert_eq!(resolve(&none(), env(&all)), Ok(cluster(1, 10, "roam:1")));
        assert_eq!(
            resolve(&none(), env(&all[3..])),
            Ok(cluster(2, 20, "torch:2"))
        );
        let slurm_mpi_coord = [all[7], all[8], all[9], all[10], ("ROAM_COORDINATOR", "c:1")];
        assert_eq!(
            resolve(&none(), env(&slurm_mpi_coord)),
            Ok(cluster(3, 30, "c:1"))
        );
        assert_eq!(
            resolve(&none(), env(&slurm_mpi_coord[2..])),
            Ok(cluster(4, 40, "c:1"))
        );
    }

    #[test]
    fn precedence_is_per_field() {
        // Rank from config, size from Slurm, coordinator from torchrun.
        let o = ClusterOverrides {
            rank: Some(1),
            ..Default::default()
        };
        let e = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "5"),
        ]);
        assert_eq!(resolve(&o, e), Ok(cluster(1, 2, "h:5")));
    }

    #[test]
    fn unparsable_number_names_variable_and_value() {
        let e = env(&[("ROAM_RANK", "one"), ("ROAM_NUM_NODES", "2")]);
        let err = resolve(&none(), e).unwrap_err();
        assert!(matches!(
            &err,
            ClusterEnvError::InvalidNumber { var: "ROAM_RANK", value, .. } if value == "one"
        ));
        assert!(err.to_string().contains("ROAM_RANK=\"one\""), "{err}");

        let e = env(&[("WORLD_SIZE", "-3"), ("RANK", "0")]);
        let err = resolve(&none(), e).unwrap_err();
        assert!(err.to_string().contains("WORLD_SIZE=\"-3\""), "{err}");
    }

    #[test]
    fn bad_master_port_is_named() {
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "70000"),
        ]);
        let err = resolve(&none(), e).unwrap_err();
        assert!(err.to_string().contains("MASTER_PORT=\"70000\""), "{err}");
    }

    #[test]
    fn rank_out_of_range() {
        let e = env(&[
            ("ROAM_RANK", "3"),
            ("ROAM_NUM_NODES", "3"),
            ("ROAM_COORDINATOR", "h:1"),
        ]);
        let err = resolve(&none(), e).unwrap_err();
        assert!(matches!(
            err,
            ClusterEnvError::RankOutOfRange {
                rank: 3,
                num_nodes: 3,
                ..
            }
        ));
        assert!(err.to_string().contains("ROAM_RANK"), "{err}");
    }

    #[test]
    fn zero_nodes() {
        let e = env(&[("ROAM_RANK", "0"), ("ROAM_NUM_NODES", "0")]);
        assert_eq!(
            resolve(&none(), e),
            Err(ClusterEnvError::ZeroNodes {
                origin: Origin::Var("ROAM_NUM_NODES"),
            })
        );
    }

    #[test]
    fn rank_without_size_and_size_without_rank() {
        let e = env(&[("ROAM_RANK", "1")]);
        assert!(matches!(
            resolve(&none(), e),
            Err(ClusterEnvError::MissingNumNodes { rank: 1, .. })
        ));
        let e = env(&[
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ]);
        assert!(matches!(
            resolve(&none(), e),
            Err(ClusterEnvError::MissingRank { num_nodes: 4, .. })
        ));
        // One node has one possible rank.
        let e = env(&[("WORLD_SIZE", "1")]);
        assert_eq!(resolve(&none(), e), Ok(ClusterEnv::single_node()));
    }

    #[test]
    fn incomplete_master_is_reported() {
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")]);
        assert_eq!(
            resolve(&none(), e),
            Err(ClusterEnvError::IncompleteMaster {
                present: "MASTER_ADDR",
                missing: "MASTER_PORT",
            })
        );
    }

    #[test]
    fn invalid_coordinators() {
        for bad in ["nohost", ":1", "h:x", "fd00::1:5", "[fd00::1", "h:0"] {
            let e = env(&[
                ("ROAM_RANK", "0"),
                ("ROAM_NUM_NODES", "2"),
                ("ROAM_COORDINATOR", bad),
            ]);
            let err = resolve(&none(), e).unwrap_err();
            assert!(
                matches!(&err, ClusterEnvError::InvalidCoordinator { value, .. } if value == bad),
                "{bad}: {err}"
            );
        }
        let e = env(&[
            ("ROAM_RANK", "0"),
            ("ROAM_NUM_NODES", "2"),
            ("ROAM_COORDINATOR", "[::1]:80"),
        ]);
        assert_eq!(resolve(&none(), e), Ok(cluster(0, 2, "[::1]:80")));
    }
}
