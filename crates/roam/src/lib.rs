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
//! - `launch`: `roam launch`, a local multi-process launcher.

pub mod auth;
pub mod cluster_env;
pub mod launch;
pub mod rendezvous;
