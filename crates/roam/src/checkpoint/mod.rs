//! Checkpoints on disk: the format, the manifest, and the errors of writing and restoring
//! (the consistent cut itself is the core's collective, `roam_core::checkpoint`).
//!
//! A checkpoint is a directory shared by every node (a local disk for one machine, a network
//! file system otherwise) holding, per checkpoint *id*:
//! - one shard per node, `ckpt-<id>-shard-<rank>-of-<nodes>.safetensors`: the records the
//!   node held at the cut (owned keys; for static replicated keys, their hub's primary),
//!   keys ascending, in the safetensors format (8-byte little-endian header length, a JSON
//!   header, then the tensors' bytes):
//!   - `keys`: `U64 [n]`, the keys;
//!   - uniform record length `r`: `values`: `F32 [n, r]`, one record per row;
//!   - per-key lengths: `offsets`: `U64 [n + 1]` and `values`: `F32 [total]`, key `keys[i]`'s
//!     record being `values[offsets[i]..offsets[i + 1]]`;
//!   - named tables (layout `tables`, instead of the three above): per table, in the space's
//!     order, `<name>.ids`: `U64 [n_t]`, the ids of its rows (no table bits), then, after every
//!     table's ids, per table `<name>.values`: `F32 [n_t, r_t]`, `r_t` being the table's record
//!     length; so each table opens as a tensor of its own. (Checkpoints of tables written
//!     before this layout used the per-key one, which a restore still reads.)
//!   - a record is the key's visible values, then its hidden state (`RecordLayout`:
//!     `hidden_per_value` per value, then `hidden_per_key`); replicated keys have zero hidden
//!     state.
//! - `manifest.json` (see [`Manifest`]): node count, key space, value layout (visible and
//!   hidden lengths), the server-side optimizer whose state the hidden part is, the caller's
//!   epoch, and each shard's size, CRC-32 (of the whole file) and chunk CRC-32s (of each
//!   `chunk_bytes` piece, see `chunks.rs`: what a restore verifies). It is written last, by rank
//!   0, to a temporary file that is fsynced and renamed over the previous manifest: a
//!   checkpoint without its manifest does not exist, and a crash while writing leaves the
//!   previous checkpoint (its manifest and its shards, which have another id) intact. Shards
//!   of older ids are deleted once the new manifest is in place.
//! - with spilled rows, one spill file per node, `spill-<id>-<rank>-of-<nodes>.bin`
//!   (`spill.rs`), which the manifest lists with size and CRC-32 (`spill_files`; empty when no
//!   node spills): a restore refuses a listed file that is missing, of another size or fails
//!   its CRC-32, naming it.
//!
//! Invariants: no shard holds a key twice and every key of the cut is in exactly one shard
//! (the core's cut); a shard's bytes depend only on the records it holds (no time, no id),
//! so the same records give the same file; every length read from a file is bounded by the
//! file's size before anything is allocated.

use std::io;
use std::path::{Path, PathBuf};

use roam_core::{KeySpace, Optimizer, TableKind, ValueLengths};
use serde::{Deserialize, Serialize};

mod chunks;
mod read;
pub mod spill;
mod write;

pub use read::{RestoreStats, read_manifest, restore_into};
pub(crate) use write::{finish_manifest, next_id, write_shard};

/// The manifest of the checkpoint in `dir`, for a program that resumes (its epoch and
/// application state); the restore itself checks the rest.
pub fn manifest_of(dir: &Path) -> Result<Manifest, RestoreError> {
    let path = dir.join(MANIFEST);
    let bytes =
        std::fs::read(&path).map_err(|_| RestoreError::MissingManifest { path: path.clone() })?;
    serde_json::from_slice::<Manifest>(&bytes).map_err(|e| RestoreError::Manifest {
        path,
        reason: e.to_string(),
    })
}

/// `format` of manifests and shard headers.
pub const FORMAT: &str = "roam-checkpoint";
/// Version of the format.
pub const VERSION: u32 = 1;
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// Largest shard header or manifest read (bounded before allocating).
pub(crate) const MAX_HEADER: u64 = 1 << 26;

/// The manifest of a checkpoint (`manifest.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The checkpoint's id (in its shards' file names; one more than the previous one's).
    pub id: u64,
    /// The caller's epoch (training epochs completed; 0 if none was given).
    pub epoch: u64,
    /// When rank 0 wrote the manifest (milliseconds since the Unix epoch; informative).
    pub created_unix_ms: u64,
    /// Nodes that wrote it (one shard each).
    pub num_nodes: u32,
    /// The key space it was taken in (with the row layout: visible and hidden lengths).
    pub key_space: SpaceInfo,
    /// The server-side optimizer it was taken with: the meaning of the records' hidden part.
    /// Absent in manifests written before it was recorded (then only the layout is checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<OptimizerInfo>,
    /// The named tables it was taken with, in key order (a table's index is in its keys' top
    /// bits); empty for a one-space node. A restore needs the same tables, in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<TableInfo>,
    /// The shards, by rank.
    pub shards: Vec<ShardInfo>,
    /// Every spill file of the checkpoint (`spill.rs`), by rank: empty when no node spilled;
    /// absent (`None`) in manifests written before the list, whose spill files a restore
    /// reads unverified (with a warning: a missing or truncated file of such a checkpoint
    /// cannot be told from "no spill").
    #[serde(default)]
    pub spill_files: Option<Vec<SpillFileInfo>>,
    /// The application's own state at the checkpoint (e.g. a learning-rate schedule's), as
    /// the caller gave it; `null` if none.
    #[serde(default)]
    pub app: serde_json::Value,
}

/// What a checkpoint says about its key space (a restore needs the same).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceInfo {
    /// Keys `0..num_keys` (dense) or every `u64` (sparse: then 0).
    pub num_keys: u64,
    /// Whether every `u64` is a key.
    pub sparse: bool,
    /// The uniform value length, if keys have one.
    pub value_len: Option<u32>,
    /// Per-key lengths: their CRC-32 (as little-endian `u32`s, key order).
    pub lengths_crc32: Option<u32>,
    /// Hidden values per visible value.
    pub hidden_per_value: u32,
    /// Hidden values per key.
    pub hidden_per_key: u32,
}

impl SpaceInfo {
    /// The description of `space`.
    pub fn of(space: &KeySpace) -> Self {
        let (value_len, lengths_crc32) = match space.lengths() {
            ValueLengths::Uniform(len) => (Some(*len), None),
            ValueLengths::PerTable(_) => (None, None),
            ValueLengths::PerKey(lengths) => {
                let mut h = crc32fast::Hasher::new();
                for len in lengths.iter() {
                    h.update(&len.to_le_bytes());
                }
                (None, Some(h.finalize()))
            }
        };
        let layout = space.layout();
        Self {
            num_keys: if space.is_sparse() {
                0
            } else {
                space.num_keys()
            },
            sparse: space.is_sparse(),
            value_len,
            lengths_crc32,
            hidden_per_value: layout.hidden_per_value,
            hidden_per_key: layout.hidden_per_key,
        }
    }
}

/// One named table of a checkpoint ([`Manifest::tables`]): what its records mean.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableInfo {
    /// Its name.
    pub name: String,
    /// Visible values per row.
    pub dim: u32,
    /// `dense` or `dynamic`.
    pub kind: String,
    /// A dense table's id count (0 for a dynamic one).
    pub num_ids: u64,
    /// Hidden values per visible value (its optimizer's state).
    pub hidden_per_value: u32,
    /// Hidden values per row.
    pub hidden_per_key: u32,
    /// Its optimizer (only the kind must match on restore).
    pub optimizer: OptimizerInfo,
}

impl TableInfo {
    /// The tables of `space` (none for a one-space node).
    pub fn of(space: &KeySpace) -> Vec<Self> {
        let tables = space.named_tables().map_or(&[][..], |t| t.all());
        tables
            .iter()
            .map(|t| {
                let (kind, num_ids) = match t.spec().kind {
                    TableKind::Dense { num_ids } => ("dense", num_ids),
                    TableKind::Dynamic(_) => ("dynamic", 0),
                };
                Self {
                    name: t.name().to_owned(),
                    dim: t.dim() as u32,
                    kind: kind.to_owned(),
                    num_ids,
                    hidden_per_value: t.layout().hidden_per_value,
                    hidden_per_key: t.layout().hidden_per_key,
                    optimizer: OptimizerInfo::of(t.optimizer()),
                }
            })
            .collect()
    }

    /// Whether a checkpoint of table `self` restores into table `other` (the same rows; the
    /// optimizer's hyper-parameters may change, not its kind).
    pub fn fits(&self, other: &Self) -> bool {
        (
            self.dim,
            self.num_ids,
            self.hidden_per_value,
            self.hidden_per_key,
        ) == (
            other.dim,
            other.num_ids,
            other.hidden_per_value,
            other.hidden_per_key,
        ) && (&self.name, &self.kind, &self.optimizer.kind)
            == (&other.name, &other.kind, &other.optimizer.kind)
    }

    /// The table, for errors.
    pub fn describe(&self) -> String {
        let ids = if self.kind == "dense" {
            format!("dense, {} ids", self.num_ids)
        } else {
            "dynamic".to_owned()
        };
        format!("dim {}, {ids}, optimizer {}", self.dim, self.optimizer)
    }
}

/// The server-side optimizer of a checkpoint ([`Manifest::optimizer`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptimizerInfo {
    /// `none` (no optimizer: `push_gradients` refused), `sgd`, `adagrad`, `adam` or `ftrl`.
    pub kind: String,
    /// Its hyper-parameters by name (informative: a resume may change them, e.g. the learning
    /// rate; only the kind must match, as it fixes what the hidden state means).
    pub params: serde_json::Map<String, serde_json::Value>,
}

impl OptimizerInfo {
    /// The description of `optimizer` (`None`: no optimizer).
    pub fn of(optimizer: Option<&Optimizer>) -> Self {
        let params: &[(&str, f32)] = match optimizer {
            None => &[],
            Some(&Optimizer::Sgd { lr }) => &[("lr", lr)],
            Some(&Optimizer::Adagrad { lr, eps }) => &[("lr", lr), ("eps", eps)],
            Some(&Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
            }) => &[("lr", lr), ("beta1", beta1), ("beta2", beta2), ("eps", eps)],
            Some(&Optimizer::Ftrl {
                alpha,
                beta,
                l1,
                l2,
            }) => &[("alpha", alpha), ("beta", beta), ("l1", l1), ("l2", l2)],
        };
        Self {
            kind: optimizer.map_or("none", Optimizer::name).to_owned(),
            params: params
                .iter()
                // The `f32`'s shortest decimal (0.9, not 0.8999999761581421): it reads back
                // as the same `f32`.
                .map(|&(name, v)| {
                    let shortest: f64 = v.to_string().parse().unwrap_or(f64::NAN);
                    (name.to_owned(), shortest.into())
                })
                .collect(),
        }
    }
}

impl std::fmt::Display for OptimizerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.kind)?;
        if !self.params.is_empty() {
            let params: Vec<String> = self
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            write!(f, " ({})", params.join(", "))?;
        }
        Ok(())
    }
}

impl SpaceInfo {
    /// The row layout, for errors: visible length and hidden values.
    pub fn describe_rows(&self) -> String {
        let visible = match self.value_len {
            Some(len) => format!("{len} visible values"),
            None => "per-key visible lengths".to_owned(),
        };
        format!(
            "{visible}, then {} hidden per value and {} hidden per key",
            self.hidden_per_value, self.hidden_per_key
        )
    }
}

/// One shard as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// File name, in the checkpoint directory.
    pub file: String,
    /// The rank that wrote it.
    pub rank: u32,
    /// Keys in it.
    pub keys: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// Bytes per chunk of `chunk_crc32` (a power of two).
    #[serde(default)]
    pub chunk_bytes: u64,
    /// CRC-32 of each `chunk_bytes` piece of the file, in order (the last piece may be
    /// shorter): a restoring node verifies the chunks it reads and skips the rest.
    #[serde(default)]
    pub chunk_crc32: Vec<u32>,
    /// The rank's spill file, in its report only (rank 0 moves it to
    /// [`Manifest::spill_files`], so that the report of a shard and of its spill file is one
    /// atomic write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill: Option<SpillFileInfo>,
}

/// One spill file as the manifest lists it ([`Manifest::spill_files`]); a restore refuses the
/// checkpoint unless the file is there with exactly this size and CRC-32.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpillFileInfo {
    /// File name, in the checkpoint directory (`spill-<id>-<rank>-of-<nodes>.bin`).
    pub file: String,
    /// The rank that wrote it.
    pub rank: u32,
    /// Spilled records in it.
    pub records: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// CRC-32 of the whole file (as for shards).
    pub crc32: u32,
}

/// The name of rank `rank`'s shard of checkpoint `id` of `nodes` nodes.
pub(crate) fn shard_name(id: u64, rank: u32, nodes: u32) -> String {
    format!("ckpt-{id:06}-shard-{rank:05}-of-{nodes:05}.safetensors")
}

/// Writing a checkpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The cut or a barrier around it failed (a peer was lost). (Causes are in the messages
    /// and not exposed as `source()`, so that a binary's `Caused by:` does not repeat them: the
    /// convention of `crate::error`.)
    #[error("checkpoint collective: {0}")]
    Collective(roam_core::OpError),
    /// A file could not be written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// A node's shard is missing or unreadable when rank 0 writes the manifest.
    #[error("{path}: shard report missing or unreadable ({reason}); no manifest written")]
    Shard {
        /// The shard's report file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

crate::error::embedded_from!(CheckpointError {
    Collective(roam_core::OpError),
});

pub(crate) fn io_at(path: &Path) -> impl FnOnce(io::Error) -> CheckpointError + '_ {
    move |error| CheckpointError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// A restore refused a checkpoint; nothing of it is used (the node does not start).
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// No manifest: no complete checkpoint in the directory.
    #[error("{path}: no manifest, so no complete checkpoint here")]
    MissingManifest {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The manifest is unreadable or not a roam checkpoint of this version.
    #[error("{path}: bad manifest: {reason}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The checkpoint was taken in another key space.
    #[error("{path}: checkpoint of another key space: it has {found}, this node {expected}")]
    KeySpace {
        /// The manifest.
        path: PathBuf,
        /// The checkpoint's key space.
        found: String,
        /// This node's.
        expected: String,
    },
    /// The checkpoint was taken with another server-side optimizer than this node's: its
    /// records' hidden state is that optimizer's.
    #[error(
        "{path}: checkpoint taken with optimizer {found}, this node's is {expected}; restore \
         it with the same optimizer kind (its hyper-parameters may change)"
    )]
    Optimizer {
        /// The manifest.
        path: PathBuf,
        /// The checkpoint's optimizer.
        found: String,
        /// This node's.
        expected: String,
    },
    /// The checkpoint's rows have another layout (visible or hidden lengths) than this
    /// node's, e.g. another optimizer's state.
    #[error(
        "{path}: checkpoint rows of {found} (optimizer {found_optimizer}), this node's are \
         {expected} (optimizer {expected_optimizer})"
    )]
    Layout {
        /// The manifest.
        path: PathBuf,
        /// The checkpoint's row layout.
        found: String,
        /// Its optimizer (`unrecorded` in a manifest of an earlier roam).
        found_optimizer: String,
        /// This node's row layout.
        expected: String,
        /// This node's optimizer.
        expected_optimizer: String,
    },
    /// The checkpoint's named tables differ from this node's (named in `reason`).
    #[error("{path}: {reason}")]
    Tables {
        /// The manifest.
        path: PathBuf,
        /// Which table differs, and how.
        reason: String,
    },
    /// A shard is missing, truncated, corrupt or inconsistent with the manifest.
    #[error("{path}: {reason}")]
    Shard {
        /// The shard.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A spill file the manifest lists is missing, has another size, or fails its CRC-32.
    #[error("{path}: {reason}")]
    SpillFile {
        /// The spill file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint's spilled rows could not be read or restored (a damaged record of a
    /// spill file of a manifest without the list, or a record that does not fit).
    #[error("spilled rows: {0}")]
    Spilled(roam_core::SpillError),
}

crate::error::embedded_from!(RestoreError {
    Spilled(roam_core::SpillError),
});
