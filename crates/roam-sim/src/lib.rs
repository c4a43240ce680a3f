//! Deterministic multi-node simulator over the sans-IO core [`roam_core::Node`], for tests.
//!
//! A [`Sim`] owns `nodes` protocol state machines, a simulated network between them and a set of
//! simulated worker threads that run scripts of [`Op`]s. Everything is driven by one seeded
//! `ChaCha8Rng` and a virtual clock, so a run is a pure function of its [`SimConfig`] (seed
//! included) and the calls made on the `Sim`: replaying a seed replays the run bit for bit.
//!
//! # Layout
//! - [`config`]: [`SimConfig`], the cluster shape, network model and limits.
//! - [`net`]: per-link FIFO queues of in-flight frames and connection state.
//! - [`worker`]: scripts ([`Op`]) and simulated workers, issuing operations like the real shell.
//! - [`sim`]: the simulated cluster — `sim/mod.rs` the types and inspection, `run.rs` the event
//!   loop ([`Sim::step`], [`Sim::run_until_idle`], nodes' timers), `deliver.rs` the network side
//!   of the shell, `issue.rs` the workers' operations, `sample.rs` their sampling operations,
//!   `faults.rs` scripts and fault injection.
//! - [`history`]: what every operation did and returned, for consistency checkers.
//! - [`check`]: consistency checkers, one file each: complete per-key linearizability
//!   (optionally with per-worker program order), final-value accounting, and the cheaper
//!   read-by-read check, over shared subset-sum tests.
//! - [`explore`]: exhaustive exploration of every interleaving of a small scenario.
//! - [`trace`]: the trace hashes that make determinism testable.
//! - [`seed`]: seed selection from `ROAM_SIM_SEED` / `ROAM_SIM_SEEDS` for randomized tests.
//!
//! # Guarantees the tests establish (dynamic allocation)
//! - Every op, synchronous or not, takes effect on each of its keys at one instant between its
//!   invocation and its return: histories are linearizable per key
//!   ([`check_linearizable`]), so synchronous ops are sequentially consistent, with or without
//!   location caches or fast local access. No update is lost or applied twice
//!   ([`final_sums`]); after a loss only pushes that failed with `PeerGone` may be missing.
//! - Without location caches *and with fast local access*, one worker's ops on one key take
//!   effect in issue order, asynchronous ones included (per-worker FIFO per key, "PRAM"):
//!   `tests/async_order.rs`, and every interleaving of the scenarios of `tests/exhaustive.rs`.
//! - Home moves (`Op::MoveHome`) keep per-key linearizability and exact sums
//!   (`tests/home_moves.rs`, and the home-move scenarios of `tests/exhaustive.rs`), but not
//!   always the issue order of a worker's asynchronous ops.
//! - Sampled reads ([`Op::Sample`], [`Op::PullSample`]: every scheme of `roam_core::sampling`)
//!   are recorded as pulls of the keys drawn and pass the same checks as pulls, with pushes to
//!   the sampled keys summing exactly, relocations racing, on replicated keys and under faults;
//!   `preloc` and `pool` leave what they drew on the sampling node, `naive` and `local` move
//!   nothing, and `local` reads held keys without a message (`tests/sampling.rs`).
//! - With location caches, or without fast local access, a worker's asynchronous ops on one
//!   key can take effect out of issue order (scripted in `tests/async_order.rs`): an op can take
//!   a shorter path (a cache hit straight to the owner; a direct send after the key left this
//!   node) than an earlier one still in flight (via the home; on the node's link to itself).
//!
//! # Replicated keys
//! With [`SimConfig::with_replication`] every node holds a replica of each replicated key;
//! pushes to it are local and reach the other replicas through the key's hub in sync rounds
//! that run on the nodes' timers, in virtual time; [`Op::SyncReplicas`] makes every earlier push
//! visible everywhere. Replicated keys are only eventually consistent, so every checker skips
//! them ([`History::is_replicated`]); `tests/replication.rs` checks them by value instead: exact
//! sums after a sync, every read explained by some of the pushes with the reader's own node's
//! pushes and every push older than two sync periods plus two deliveries included, and no hang
//! when peers are lost.
//!
//! # Contract with the core
//! The simulator plays the shell exactly as the TCP shell will: after every input to a node it
//! drains `poll_transmit` into the links, then `poll_completion` to the workers, then
//! `poll_warning` into [`Sim::warnings`]. Every frame crosses the real codec
//! (`Frame::to_bytes` then `wire::decode`) on delivery.

pub mod check;
pub mod config;
pub mod explore;
pub mod history;
pub mod net;
pub mod seed;
pub mod sim;
pub mod trace;
pub mod worker;

pub use check::{
    Consistency, FinalVerdict, KeyFinal, LinearizableReport, NotLinearizable, Violation,
    check_final_sums_exact, check_linearizable, check_per_key_linearizable, final_sums,
};
pub use config::SimConfig;
pub use history::{Fault, FaultRecord, History, OpKind, OpRecord, Outcome, Stamp};
pub use net::LinkStats;
pub use seed::{for_each_seed, seeds};
pub use sim::{Choice, Sim, SimError, Snapshot, Warning};
pub use worker::{Op, SampleStats, WorkerRef};
