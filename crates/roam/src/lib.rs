//! roam: a parameter server whose parameters move to the node that uses them.
//!
//! One OS process per node; worker threads inside it access local parameters directly and reach
//! remote ones through the node's protocol core (`roam-core`), driven here over TCP.
//!
//! # Layout
//! - `cluster_env`: rank, node count and coordinator address from config or the environment
//!   (roam, torchrun, Slurm, Open MPI conventions).
//! - `auth`: HMAC challenge–response proving knowledge of the cluster token.
//! - `rendezvous`: the coordinator collects every node's data address and hands out the table.
//! - `launch`: `roam launch`, a local multi-process launcher; `netns` its emulated network,
//!   `slow_node` and `cgroup` its straggler injection (a CPU quota per node on a schedule).
//! - `config`: the node's configuration; `error`: start-up errors.
//! - `runtime`: the running node — core, links, threads; `NodeHandle` is its API; `peers` its
//!   connections (dialling, accepting, reading, adding a peer at run time).
//! - `elastic`: elastic membership — the coordinator's join/drain service, joining a running
//!   cluster as a server-only node, draining (`roam drain`, SIGUSR1).
//! - `transport`: framed TCP links, vectored writes, bounded reads, latency emulation.
//! - `worker`: the per-thread API (pull, push, set, wait, barrier) on the core's access front
//!   end (`roam_core::access`); tickets, and owned pending pulls.
//! - `slot`: each worker's results and outstanding operations, for tickets and `wait_all`.
//! - `stats`: counters as a JSON-serialisable snapshot.
//! - `events`: debug events for relocations and forwarding (`RUST_LOG=roam::protocol=debug`).
//! - `metrics`: the node's Prometheus `/metrics` endpoint (`--metrics-addr`).
//! - `bench`, `check`: the `roam bench ops` benchmark and the end-to-end self-checks.
//!
//! # Example
//! ```no_run
//! let node = roam::NodeHandle::start(roam::Config::new(1000, 4))?;
//! let worker = node.worker(0)?;
//! worker.push(&[1, 2], &[1.0; 8])?.wait()?;
//! let mut out = [0.0; 8];
//! worker.pull(&[1, 2], &mut out)?.wait()?;
//! drop(worker);
//! node.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod alloc_trace;
pub mod auth;
pub mod bench;
pub mod bench_replicas;
pub mod cgroup;
pub mod check;
pub mod checkpoint;
pub mod choose;
pub mod cluster_env;
pub mod config;
mod due_timer;
pub mod elastic;
pub mod error;
mod events;
#[doc(hidden)]
pub mod fuzzing;
mod huge_pages;
pub mod launch;
pub mod metrics;
pub mod netns;
mod peers;
pub mod rendezvous;
mod runtime;
mod slot;
pub mod slow_node;
pub mod slowing;
pub mod spill;
pub mod stats;
mod table;
mod timers;
mod transport;
mod worker;

pub use config::{Allocation, ClusterInfo, Config};
pub use error::{PullRefused, StartError, WorkerError};
pub use roam_core::wire::Limits;
pub use roam_core::{
    AccessError, Directory, IntentError, IntentTechniques, IntentTiming, Key, OpError, ValueLengths,
};
pub use roam_core::{
    Admission, DynamicError, DynamicPolicy, Initializer, InitializerError, KeySpace, NodeId,
    Optimizer, OptimizerError, Partitioning, RecordLayout, Table, TableError, TableKind, TableSpec,
    Tables,
};
pub use roam_core::{
    Distribution, SampleError, SampleHandle, SamplerId, SamplerSpec, Scheme, Support,
};
pub use runtime::NodeHandle;
pub use stats::NodeStats;
pub use table::{TableAccessError, TableHandle};
pub use worker::{PendingPull, Ticket, Worker};
