//! Sans-IO core of the roam parameter server.
//!
//! This crate holds everything about roam that does not need an operating system: the key space,
//! the concurrent parameter store that worker threads access directly, the wire format, the
//! home-node directory and the node state machine. It opens no sockets, spawns no threads, reads
//! no clock and draws no unseeded random numbers (`clippy.toml` forbids them); shells drive it —
//! TCP for real runs (`roam`), a deterministic simulator for tests (`roam-sim`).
//!
//! # Layout
//! - [`id`]: node, worker and request identifiers.
//! - [`keyspace`]: the dense key range and per-key value lengths; input validation.
//! - [`init`]: row initializers, a pure function of (seed, key).
//! - [`dynamic`]: admission and eviction of rows in dynamic (sparse) key spaces.
//! - [`directory`]: the epoch-numbered key → bucket → home table, members and coordinator.
//! - [`placement`]: placement records at a key's home (who holds it).
//! - [`policy`]: placement policies (static, Lapse) behind one interface.
//! - [`store`]: slab-backed values with a latch and residency flags per key (the hot path).
//! - [`access`]: the access front end every shell runs for a worker's operation: validation,
//!   the local fast path on the store, and the hand-off of the other keys to the node.
//! - [`sampling`]: sampling distributions and the schemes that serve draws (NuPS): the
//!   front end's `prepare_sample`/`pull_sample`/`finish_sample` and the node-level pool.
//! - [`wire`]: the 40-byte header and zero-copy frame bodies; bounded, panic-free decoding.
//! - [`msg`]: typed messages decoded from frames in place, and their encoders.
//! - [`node`]: the protocol state machine (`issue_*`/`handle_*` in, `poll_*` out); its parts
//!   `serve`, `relocate`, `home_move` and `barrier` each own one protocol.
//! - [`liveness`]: heartbeats and silence timeouts, the core's timers (`poll_timeout`).
//! - [`warning`]: typed diagnostics.
//! - [`stats`]: per-node and per-worker counters.
//! - [`error`]: per-operation error enums.
//!
//! # Contract of the state machine
//! Worker threads first try every key in the [`store::Store`] without any lock but the key's
//! latch (through their [`access::Front`]). Keys that are not local are handed to [`node::Node`] under the node lock, which the
//! shell holds only for the duration of one input and the draining of its outputs.

pub mod access;
pub mod balance;
mod barrier;
mod batch;
mod checkpoint;
pub mod directory;
mod dispatch;
mod drain;
pub mod dynamic;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
mod home_move;
pub mod id;
pub mod init;
pub mod intent;
pub mod interest;
mod issue;
pub mod keyspace;
pub mod latency;
pub mod liveness;
pub mod load;
pub mod load_service;
mod loss_flush;
pub mod membership;
pub mod msg;
pub mod node;
pub mod optim;
mod peer_loss;
pub mod placement;
pub mod policy;
mod relocate;
pub mod replica;
pub mod sampling;
mod serve;
pub mod share;
pub mod spill;
pub mod stats;
pub mod store;
pub mod tables;
pub mod trace;
pub mod warning;
pub mod wire;
mod work_clock;

pub use access::{Front, Handoff};
pub use balance::{BalanceDecision, Balancer, DecisionKind};
pub use directory::{Directory, Partitioning};
pub use drain::DrainRefusal;
pub use dynamic::{Admission, DynamicError, DynamicPolicy};
pub use error::{AccessError, IntentError, OpError};
pub use id::{Key, NodeId, ReqId, WorkerId};
pub use init::{Initializer, InitializerError};
pub use intent::{IntentTiming, Need};
pub use keyspace::{KeySpace, KeySpaceError, RecordLayout, ValueLengths};
pub use liveness::Liveness;
pub use load::{LoadWatch, StragglerEvent};
pub use load_service::{ServiceReport, ServiceStats};
pub use membership::{JoinRefusal, MembershipEvent};
pub use msg::Msg;
pub use node::{Completion, Node, NodeConfig, Output, PullPart, Time};
pub use optim::{Optimizer, OptimizerError};
pub use policy::{Policy, PolicyKind};
pub use replica::Replication;
pub use sampling::{
    Distribution, SampleError, SampleHandle, SamplerId, SamplerSpec, Scheme, Support,
};
pub use share::{IntentTechniques, ShareSync};
pub use spill::{MemorySpill, Spill, SpillError};
pub use store::{Holding, Residency, ReturnVisit, Store, Sweep, UpdateMode, Visit};
pub use tables::{Table, TableError, TableKind, TableSpec, Tables};
pub use warning::Warning;
