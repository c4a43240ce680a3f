//! The apps' checkpoint options: `--checkpoint-dir D --checkpoint-every EPOCHS` writes a
//! checkpoint (`roam::Worker::checkpoint_with`) after every that many epochs, with the app's
//! schedule state (e.g. the learning rate) in its manifest; `--resume D` starts the nodes from
//! the checkpoint in `D` (`roam::Config::restore_from`, any node count) and continues at the
//! epoch after the one it was taken at, with the schedule state it recorded. A checkpoint that
//! already covers every epoch asked for (taken after the last one: a node died while the job
//! shut down, and `roam launch --max-restarts` or the cluster manager restarted it) leaves
//! nothing to train: the resumed run trains no epoch and reports the last epoch's figures as
//! the checkpoint recorded them (`last_epoch` in its application state, marked
//! `"from_checkpoint": true`), and exits successfully.
//!
//! Invariant: a resumed run never re-initialises its parameters (they come from the
//! checkpoint), and its epoch numbers continue the interrupted run's, so the data order of
//! each epoch (seeded by epoch) is the one the uninterrupted run would have used; its sampling
//! seed is mixed with the checkpoint's epoch, so its samplers do not repeat the interrupted
//! run's first draws.

use std::path::PathBuf;

use anyhow::{Context, ensure};
use roam::{Config, Worker};

/// Checkpoint options shared by the apps.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Options {
    /// Write a checkpoint into this directory (shared by every node) every
    /// `--checkpoint-every` epochs.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Epochs between checkpoints (with `--checkpoint-dir`).
    #[arg(long, default_value_t = 1)]
    pub checkpoint_every: u32,
    /// Start from the checkpoint in this directory and continue at its next epoch.
    #[arg(long)]
    pub resume: Option<PathBuf>,
}

/// Where a run starts.
#[derive(Clone, Debug, Default)]
pub struct Start {
    /// Whether the parameters come from a checkpoint (then they are not initialised).
    pub resumed: bool,
    /// Epochs already done (the first epoch to run is this one, 0-based).
    pub epoch: u32,
    /// The app's state recorded with the checkpoint (`null` for a fresh run).
    pub app: serde_json::Value,
    /// The checkpoint covers every epoch asked for: nothing is left to train.
    pub complete: bool,
}

impl Start {
    /// The epoch rows a run that trained no epoch reports: if the checkpoint covers every
    /// epoch, the last epoch's row as recorded with it ([`with_last_epoch`]), marked
    /// `"from_checkpoint": true`; else (or for a checkpoint of an earlier roam, which recorded
    /// none) nothing.
    pub fn recorded_epochs(&self) -> Vec<serde_json::Value> {
        let row = &self.app["last_epoch"];
        if !self.complete || !row.is_object() {
            return Vec::new();
        }
        let mut row = row.clone();
        row["from_checkpoint"] = true.into();
        vec![row]
    }

    /// The `f32` recorded under `name` by [`bits_f32`], if any.
    pub fn f32(&self, name: &str) -> Option<f32> {
        self.app[name].as_u64().map(|b| f32::from_bits(b as u32))
    }

    /// The `f64` recorded under `name` by [`bits_f64`], if any.
    pub fn f64(&self, name: &str) -> Option<f64> {
        self.app[name].as_u64().map(f64::from_bits)
    }
}

/// `state` (an object, or `null`) with `row`, the epoch's report row, recorded as its
/// `last_epoch`: what a resume that finds nothing left to train reports
/// ([`Start::recorded_epochs`]).
pub fn with_last_epoch(state: serde_json::Value, row: &serde_json::Value) -> serde_json::Value {
    let mut state = match state {
        serde_json::Value::Null => serde_json::json!({}),
        other => other,
    };
    state["last_epoch"] = row.clone();
    state
}

/// `v` as JSON exactly (its bits: decimal text need not round-trip), for [`Start::f32`].
pub fn bits_f32(v: f32) -> serde_json::Value {
    u64::from(v.to_bits()).into()
}

/// `v` as JSON exactly (its bits), for [`Start::f64`].
pub fn bits_f64(v: f64) -> serde_json::Value {
    v.to_bits().into()
}

impl Options {
    /// Checks the options.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            self.checkpoint_every >= 1,
            "--checkpoint-every must be at least 1"
        );
        Ok(())
    }

    /// Sets up a resume in `cfg` (if asked) and returns where a run of `epochs` epochs starts.
    /// A checkpoint taken after epoch `epochs` or later leaves nothing to train: that is not an
    /// error (a job restarted after its final checkpoint must succeed), it is said on stderr
    /// and [`Start::complete`] is set.
    pub fn configure(&self, cfg: &mut Config, epochs: u32) -> anyhow::Result<Start> {
        let Some(dir) = &self.resume else {
            return Ok(Start::default());
        };
        let manifest = roam::checkpoint::manifest_of(dir)
            .with_context(|| format!("--resume {}", dir.display()))?;
        cfg.restore_from = Some(dir.clone());
        // The samplers' streams (negatives) start from the seed on every start: a resumed run
        // would draw again the negatives of the interrupted run's first epochs. Another seed
        // per resume point gives fresh ones.
        cfg.sampling_seed = crate::kge::params::mix(cfg.sampling_seed, manifest.epoch);
        let epoch = u32::try_from(manifest.epoch).context("checkpoint epoch")?;
        let complete = epoch >= epochs;
        if complete {
            eprintln!(
                "--resume {}: the checkpoint covers all {epochs} epochs; nothing left to train \
                 (it was taken after epoch {epoch})",
                dir.display()
            );
        }
        Ok(Start {
            resumed: true,
            epoch,
            app: manifest.app,
            complete,
        })
    }

    /// After epoch `done` (1-based count of epochs done): writes a checkpoint if one is due,
    /// with `app` as the schedule state. Every worker of every node calls it.
    pub fn after_epoch(
        &self,
        worker: &Worker,
        done: u32,
        app: serde_json::Value,
    ) -> anyhow::Result<()> {
        let Some(dir) = &self.checkpoint_dir else {
            return Ok(());
        };
        if done.is_multiple_of(self.checkpoint_every) {
            worker
                .checkpoint_with(dir, u64::from(done), app)
                .with_context(|| format!("checkpoint after epoch {done} into {}", dir.display()))?;
        }
        Ok(())
    }
}
