//! Spilled rows in checkpoints (issue #17): a node whose dynamic policies spill evicted rows
//! (`crate::spill`) writes, beside its shard, `spill-<id>-<rank>-of-<nodes>.bin`: its spilled
//! records at the cut, keys ascending, in the spill file's format (magic, then per record a
//! header with key, length and CRC-32, then the values). The shard format and the manifest are
//! unchanged: a checkpoint's rows are its shards' plus these files' (none when no node spills).
//!
//! Restore ([`restore_spilled`], after the shards): every node reads every rank's file and takes
//! the records of the keys it is home of. Under a policy that spills, they go back into the
//! node's spill (not held, so the budget holds, and the first access takes each back); under
//! one that does not, they are restored as held. Then rows restored from the shards above a
//! spilling policy's budget are evicted into the spill ([`roam_core::Node::trim_to_budgets`]),
//! so a restore never leaves such a node above its budget.
//!
//! Invariants: the file is complete and fsynced under a temporary name before it is renamed and
//! before the node's shard (so before the manifest that makes the checkpoint exist); a file of
//! checkpoint `id` is deleted only when `id + 2` is written (the manifest then names `id + 1`);
//! a restore finds either no spill file of the manifest's id or one per rank (a missing one is
//! an error naming it), and every length it reads is bounded before allocating; a damaged file
//! is an error naming the file and the record's offset.

use std::path::{Path, PathBuf};

use roam_core::{Node, SpillError};

use super::{CheckpointError, manifest_of};
use crate::spill::{max_record_len, read_file, write_file};

/// The spill file of rank `rank` in checkpoint `id` of `nodes` nodes.
pub fn spill_name(id: u64, rank: u32, nodes: u32) -> String {
    format!("spill-{id}-{rank}-of-{nodes}.bin")
}

/// Writes `node`'s spilled records into checkpoint `id` in `dir` (nothing without a spill), and
/// deletes this rank's spill files of checkpoints older than `id - 1`. Called at the cut,
/// under the node lock, before the shard. Returns the records written.
pub(crate) fn write_spilled(
    dir: &Path,
    id: u64,
    rank: u32,
    nodes: u32,
    node: &Node,
) -> Result<u64, CheckpointError> {
    let Some(spill) = node.spill() else {
        return Ok(0);
    };
    let name = spill_name(id, rank, nodes);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}.tmp"));
    let keys = spill.keys();
    let n = keys.len() as u64;
    let records = keys.into_iter().map(|key| {
        let mut record = Vec::new();
        match spill.get(key, &mut record) {
            Ok(true) => Ok((key, record)),
            Ok(false) => Err(SpillError::Damaged {
                path: tmp.clone(),
                offset: 0,
                reason: format!("key {key} left the spill while the checkpoint was written"),
            }),
            Err(e) => Err(e),
        }
    });
    let failed = |error: SpillError| CheckpointError::Io {
        path: path.clone(),
        error: std::io::Error::other(error.to_string()),
    };
    write_file(&tmp, records).map_err(failed)?;
    std::fs::rename(&tmp, &path).map_err(super::io_at(&path))?;
    remove_older(dir, id, rank);
    Ok(n)
}

/// Best effort: this rank's spill files of checkpoints before `id - 1`.
fn remove_older(dir: &Path, id: u64, rank: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("spill-") else {
            continue;
        };
        let mut parts = rest.split('-');
        let (Some(old), Some(r)) = (parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(old), Ok(r)) = (old.parse::<u64>(), r.parse::<u32>()) else {
            continue;
        };
        if r == rank && old + 1 < id {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The spill files of the checkpoint in `dir`: one per rank of its manifest, or none.
fn files(dir: &Path) -> Result<Vec<PathBuf>, SpillError> {
    let manifest = manifest_of(dir).map_err(|e| SpillError::Damaged {
        path: dir.to_path_buf(),
        offset: 0,
        reason: e.to_string(),
    })?;
    let nodes = manifest.num_nodes;
    let paths: Vec<PathBuf> = (0..nodes)
        .map(|rank| dir.join(spill_name(manifest.id, rank, nodes)))
        .collect();
    let present = paths.iter().filter(|p| p.exists()).count();
    if present == 0 {
        return Ok(Vec::new());
    }
    match paths.iter().find(|p| !p.exists()) {
        Some(missing) => Err(SpillError::Damaged {
            path: missing.clone(),
            offset: 0,
            reason: format!(
                "missing: the checkpoint has spill files for {present} of its {nodes} nodes"
            ),
        }),
        None => Ok(paths),
    }
}

/// What [`restore_spilled`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillRestore {
    /// Records read from the checkpoint's spill files.
    pub read: u64,
    /// Records of keys this node is home of (put back into its spill, or held).
    pub loaded: u64,
}

/// Restores the spilled rows of the checkpoint in `dir` into `node` (after
/// [`super::restore_into`], before the node serves; see the module docs). On error the node
/// must be dropped.
pub fn restore_spilled(node: &mut Node, dir: &Path) -> Result<SpillRestore, SpillError> {
    let mut stats = SpillRestore::default();
    let max_len = max_record_len(node.store().space());
    let me = node.config().id;
    for path in files(dir)? {
        let n = read_file::<SpillError>(&path, max_len, |key, record, offset| {
            let refused = |reason: &str| SpillError::Damaged {
                path: path.clone(),
                offset,
                reason: format!("key {key}: {reason}"),
            };
            if node.directory().home(key) != me {
                return Ok(());
            }
            if !node.restore_spilled(key, record)? {
                return Err(refused("the record does not fit the key space"));
            }
            stats.loaded += 1;
            Ok(())
        })?;
        stats.read += n;
    }
    node.trim_to_budgets(true);
    Ok(stats)
}
