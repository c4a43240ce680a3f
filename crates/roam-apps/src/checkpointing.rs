//! The apps' checkpoint options: `--checkpoint-dir D --checkpoint-every EPOCHS` writes a
//! checkpoint (`roam::Worker::checkpoint_with`) after every that many epochs, with the app's
//! schedule state (e.g. the learning rate) in its manifest; `--resume D` starts the nodes from
//! the checkpoint in `D` (`roam::Config::restore_from`, any node count) and continues at the
//! epoch after the one it was taken at, with the schedule state it recorded.
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
}

impl Start {
    /// The `f32` recorded under `name` by [`bits_f32`], if any.
    pub fn f32(&self, name: &str) -> Option<f32> {
        self.app[name].as_u64().map(|b| f32::from_bits(b as u32))
    }

    /// The `f64` recorded under `name` by [`bits_f64`], if any.
    pub fn f64(&self, name: &str) -> Option<f64> {
        self.app[name].as_u64().map(f64::from_bits)
    }
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

    /// Sets up a resume in `cfg` (if asked) and returns where a run of `epochs` epochs starts
    /// (an error if the checkpoint leaves none of them to run).
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
        cfg.sampling_seed = crate::kge::train::mix(cfg.sampling_seed, manifest.epoch);
        let start = Start {
            resumed: true,
            epoch: u32::try_from(manifest.epoch).context("checkpoint epoch")?,
            app: manifest.app,
        };
        anyhow::ensure!(
            start.epoch < epochs,
            "the checkpoint was taken after epoch {}; --epochs {epochs} leaves nothing to run",
            start.epoch,
        );
        Ok(start)
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
