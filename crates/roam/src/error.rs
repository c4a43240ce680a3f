//! Errors of the node's life cycle (start and shutdown), and of an owned pull refused at issue.
//! Access errors come from `roam-core`.
//!
//! Invariant: an error prints each cause once, also through a chain printer (anyhow's `{:#}`
//! and `Caused by:` in the `roam` binary). A variant that shows the inner error in its message
//! does not also expose it as [`std::error::Error::source`]: its `From` conversion is written
//! out ([`embedded_from!`]) instead of thiserror's `#[from]`, which would expose it. A variant
//! that only forwards the inner error is `#[error(transparent)]`.

use roam_core::KeySpaceError;
use roam_core::sampling::SamplerSetupError;

use crate::cluster_env::{ClusterEnvError, SettingError, TokenError};
use crate::rendezvous::RendezvousError;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The key space is invalid.
    #[error("invalid key space: {0}")]
    KeySpace(KeySpaceError),
    /// A replicated key is not in the key space.
    #[error("replicated key {key} is outside the key space ({num_keys} keys)")]
    ReplicatedKeyOutOfRange {
        /// The key.
        key: u64,
        /// Keys in the key space.
        num_keys: u64,
    },
    /// The replica sync period is zero.
    #[error("replica_sync_every must be positive")]
    ZeroSyncPeriod,
    /// The replica delta threshold is negative or not finite.
    #[error("replica_min_delta_norm must be a finite number >= 0, not {0}")]
    BadDeltaNorm(f32),
    /// A sampler cannot be served on this key space.
    #[error("sampler {sampler}: {reason}")]
    Sampler {
        /// Its id (registration order).
        sampler: u32,
        /// Why.
        reason: SamplerSetupError,
    },
    /// `load_watch` settings that cannot work.
    #[error("load_watch: {0}")]
    LoadWatch(roam_core::load::LoadWatchError),
    /// `balancer` settings that cannot work (or a balancer without load watching).
    #[error("balancer: {0}")]
    Balancer(roam_core::balance::BalancerError),
    /// Rank, size, coordinator or another environment setting is missing or malformed.
    #[error("cluster configuration: {0}")]
    ClusterEnv(ClusterEnvError),
    /// The cluster token is missing.
    #[error("{0}")]
    Token(TokenError),
    /// A numeric setting from the environment is malformed.
    #[error("{0}")]
    Setting(SettingError),
    /// `ROAM_SLOW_SERVICE` (`roam launch --slow-scope service`) is malformed.
    #[error("{0}")]
    SlowService(String),
    /// The nodes could not find each other.
    #[error("rendezvous failed: {0}")]
    Rendezvous(RendezvousError),
    /// A data connection to a peer could not be established in time.
    #[error("could not connect to {peer} at {addr}: {reason}")]
    Connect {
        /// The peer's rank.
        peer: u32,
        /// The peer's data address.
        addr: std::net::SocketAddr,
        /// What went wrong.
        reason: String,
    },
    /// Some peers never connected to this node.
    #[error("peers {missing:?} did not connect to this node within {secs} s")]
    PeersMissing {
        /// Ranks that never connected.
        missing: Vec<u32>,
        /// The timeout.
        secs: u64,
    },
    /// `workers_per_node` was zero.
    #[error("workers_per_node must be at least 1")]
    NoWorkers,
    /// The coordinator's join service could not be used (elastic membership).
    #[error("joining through the coordinator {coordinator} failed: {reason}")]
    JoinService {
        /// The coordinator address.
        coordinator: String,
        /// What went wrong.
        reason: String,
    },
    /// The coordinator refused this joining node.
    #[error("the coordinator refused this node (rank {rank}) because {reason}")]
    JoinRefused {
        /// The rank it was given.
        rank: u32,
        /// The coordinator's reason.
        reason: roam_core::JoinRefusal,
    },
    /// The joining node was neither admitted nor refused in time.
    #[error("this node (rank {rank}) was not admitted within {secs} s")]
    NotAdmitted {
        /// The rank it was given.
        rank: u32,
        /// The timeout.
        secs: u64,
    },
    /// An OS resource (thread, socket) could not be created.
    #[error("I/O error during start: {0}")]
    Io(std::io::Error),
    /// The metrics endpoint could not be set up (`metrics_addr`, `ROAM_METRICS_ADDR`).
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// The checkpoint named by `restore_from` was refused.
    #[error("restore: {0}")]
    Restore(crate::checkpoint::RestoreError),
    /// A dynamic policy keeps evicted rows (`spill`) but no directory was given for the file.
    #[error(
        "a dynamic policy sets spill, but no spill directory is given (Config::spill_dir, \
         --spill-dir, spill_dir=)"
    )]
    SpillDirMissing,
    /// The spill file could not be created, or a checkpoint's spilled rows not restored.
    #[error("spill: {0}")]
    Spill(roam_core::SpillError),
}

/// `From` conversions, for `?`, into variants of `$enum` that show the inner error in their
/// message and therefore do not expose it as their `source()` (see the file comment).
macro_rules! embedded_from {
    ($enum:ty { $($variant:ident($inner:ty)),+ $(,)? }) => {
        $(
            impl From<$inner> for $enum {
                fn from(inner: $inner) -> Self {
                    Self::$variant(inner)
                }
            }
        )+
    };
}
pub(crate) use embedded_from;

embedded_from!(StartError {
    KeySpace(KeySpaceError),
    LoadWatch(roam_core::load::LoadWatchError),
    Balancer(roam_core::balance::BalancerError),
    ClusterEnv(ClusterEnvError),
    Token(TokenError),
    Setting(SettingError),
    Rendezvous(RendezvousError),
    Io(std::io::Error),
    Restore(crate::checkpoint::RestoreError),
    Spill(roam_core::SpillError),
});

/// Why a worker handle could not be taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WorkerError {
    /// The index is not below `workers_per_node`.
    #[error("worker {index} does not exist: this node has {workers} workers")]
    NoSuchWorker {
        /// Requested index.
        index: u32,
        /// Workers per node.
        workers: u32,
    },
    /// The handle was already taken.
    #[error("worker {index} was already taken; each worker handle exists once")]
    AlreadyTaken {
        /// Requested index.
        index: u32,
    },
}

/// A pull refused at issue because of bad input (see [`crate::AccessError`]); it hands the output
/// buffer back, since [`crate::Worker::pull_owned`] took it. Nothing was read from the node, and
/// the buffer's contents are unspecified (a pull checks its keys as it copies).
#[derive(thiserror::Error)]
#[error("{error}")]
pub struct PullRefused<B> {
    /// What was wrong.
    pub error: roam_core::AccessError,
    /// The output buffer given to the pull.
    pub out: B,
}

impl<B> std::fmt::Debug for PullRefused<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The buffer may be large; the error is what matters.
        f.debug_struct("PullRefused")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<B> From<PullRefused<B>> for roam_core::AccessError {
    fn from(refused: PullRefused<B>) -> Self {
        refused.error
    }
}

impl<B> From<PullRefused<B>> for roam_core::OpError {
    fn from(refused: PullRefused<B>) -> Self {
        Self::Access(refused.error)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;
    use crate::auth::AuthError;
    use crate::cgroup::CgroupError;
    use crate::transport::ReadError;

    /// Renders `err` as the `roam` binary does (a context on top, then `Error: ...` and
    /// `Caused by:` from `main`'s `Debug`, or `{:#}` on one line) and asserts that `inner`,
    /// the innermost message, appears exactly once in each rendering, and that no error of
    /// the chain shows its own `source()` in its message.
    fn printed_once(err: impl Error + Send + Sync + 'static, inner: &str) {
        let mut link: Option<&(dyn Error + 'static)> = Some(&err);
        while let Some(e) = link {
            if let Some(source) = e.source() {
                assert!(
                    !e.to_string().contains(&source.to_string()),
                    "{e:?} shows its source in its message and exposes it as source()"
                );
            }
            link = e.source();
        }
        let err = anyhow::Error::new(err).context("starting the roam node");
        for text in [format!("{err:?}"), format!("{err:#}")] {
            assert_eq!(text.matches(inner).count(), 1, "{inner:?} in:\n{text}");
        }
    }

    #[test]
    fn errors_print_their_cause_once_through_anyhow() {
        let token = TokenError::Missing { num_nodes: 2 };
        printed_once(StartError::from(token), "ROAM_CLUSTER_TOKEN is not set");
        printed_once(
            StartError::from(KeySpaceError::Empty),
            "the key space must hold at least one key",
        );
        printed_once(StartError::from(std::io::Error::other("boom")), "boom");
        let auth = RendezvousError::Auth {
            coordinator: "10.0.0.1:7000".into(),
            error: AuthError::EmptyToken {
                peer: "10.0.0.1:7000".into(),
            },
        };
        printed_once(StartError::from(auth), "the cluster token is empty");
        printed_once(ReadError::from(std::io::Error::other("reset")), "reset");
        printed_once(
            CgroupError::Write {
                path: "/sys/fs/cgroup/x/cpu.max".into(),
                value: "1000 100000".into(),
                error: std::io::Error::other("read-only file system"),
            },
            "read-only file system",
        );
        printed_once(
            crate::checkpoint::CheckpointError::Io {
                path: "/ckpt/shard-0.safetensors".into(),
                error: std::io::Error::other("no space left on device"),
            },
            "no space left on device",
        );
        printed_once(
            crate::checkpoint::CheckpointError::from(roam_core::OpError::PeerGone {
                peer: roam_core::NodeId(3),
            }),
            "is gone",
        );
    }
}
