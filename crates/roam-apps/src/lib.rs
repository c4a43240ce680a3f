//! Training workloads on roam: the three applications of the Lapse paper, each runnable in every
//! allocation mode (see [`common::Mode`]).
//!
//! # Layout
//! - [`common`]: modes, exact cluster-wide sums, the report.
//! - [`output`]: what a job shows (progress bars, per-epoch lines, summary) and writes
//!   (`--json`, `--report`), and reading reports back.
//! - [`intents`]: the `adapm` mode's intent signaling: how far ahead, and its report.
//! - `mf`: matrix factorisation by DSGD with parameter blocking.
//! - `kge`: knowledge-graph embeddings (ComplEx, RESCAL) with AdaGrad and filtered ranking.
//! - [`sampling`]: negatives through roam's sampling API: `--sampling` and its defaults.
//! - [`sightings`]: which keys to `localize` (`--localize exclusive|repeats|all`; the filter of
//!   keys seen before, for `repeats`).
//! - `w2v`: skip-gram word vectors with negative sampling.
//! - `ctr`: click-through-rate prediction (sparse id fields, embeddings, an MLP) with
//!   server-side optimizers.
//!
//! `anyhow` is used here because these are applications (their errors end up printed by the
//! `roam` binary), not library code.

pub mod checkpointing;
pub mod common;
pub mod ctr;
pub mod intents;
pub mod kge;
pub mod mf;
pub mod output;
pub mod replication;
pub mod sampling;
pub mod sightings;
pub mod w2v;
