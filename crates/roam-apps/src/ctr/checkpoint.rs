//! Checkpoints of `roam train ctr` (`--checkpoint-dir D --checkpoint-every EPOCHS`,
//! `--resume D`), through the apps' shared [`checkpointing`] options.
//!
//! What a checkpoint holds for ctr: every parameter is a roam key — the embeddings, the dense
//! MLP (`RESERVED_BIT + j`) and the server-side optimizer's hidden per-row state (Adagrad
//! sums, Adam moments and step counts) — so the node checkpoint already carries the whole
//! model; nothing is written beside it. The learning rate is constant (ctr has no schedule),
//! and each epoch's example order is seeded by the epoch number, so a resumed run that starts
//! at the checkpoint's next epoch replays the uninterrupted run's order. The per-epoch sum
//! keys are zero at every checkpoint (they are reset after each read, before the checkpoint).
//!
//! Invariant: a resumed run never writes the dense initialisation (that would overwrite the
//! restored MLP), and its epoch numbers continue the interrupted run's.

use serde_json::{Value, json};

use crate::checkpointing::{self, Start};

/// Where a worker's training starts: the first epoch to run (0-based) and whether the dense
/// parameters must be initialised.
pub fn first_epoch(start: &Start) -> (u32, bool) {
    (start.epoch, !start.resumed)
}

/// The application state recorded with the checkpoint after an epoch whose report row is
/// `record`: the learning rate (informative: it is constant) and the row itself, which a
/// resume that finds nothing left to train reports.
pub fn state(lr: f32, record: &Value) -> Value {
    checkpointing::with_last_epoch(
        json!({ "lr": lr, "lr_bits": checkpointing::bits_f32(lr) }),
        record,
    )
}
