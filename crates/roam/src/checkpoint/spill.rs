//! Spilled rows in checkpoints (issue #17): a node whose dynamic policies spill evicted rows
//! (`crate::spill`) writes, beside its shard, `spill-<id>-<rank>-of-<nodes>.bin`: its spilled
//! records at the cut, keys ascending, in the spill file's format (magic, then per record a
//! header with key, length and CRC-32, then the values). The shard format is unchanged; the
//! manifest lists every spill file with its size and the CRC-32 of the whole file
//! ([`super::Manifest::spill_files`], gathered from the shards' reports): a checkpoint's rows
//! are its shards' plus these files' (none when no node spills).
//!
//! Restore ([`restore_spilled`], after the shards): first every listed file is checked against
//! the manifest (present, the listed size, the listed CRC-32), so that a missing or truncated
//! file is an error naming it and never restores as "no spill"; then every node reads every
//! rank's file and takes the records of the keys it is home of. Under a policy that spills,
//! they go back into the node's spill (not held, so the budget holds, and the first access
//! takes each back); under one that does not, they are restored as held. Then rows restored
//! from the shards above a spilling policy's budget are evicted into the spill
//! ([`roam_core::Node::trim_to_budgets`]), so a restore never leaves such a node above its
//! budget.
//!
//! A manifest written before the list (`spill_files` absent) is accepted as before, with a
//! warning: its spill files are found by name, either none or one per rank (a missing one is
//! an error naming it), and only their records' own CRC-32s are checked, so if every file of
//! such a checkpoint is lost it restores without its spilled rows. Refusing those checkpoints
//! would strand every checkpoint taken before the list for no gain on the ones that are fine.
//!
//! Invariants: the file is complete and fsynced under a temporary name before it is renamed and
//! before the node's shard and its report (so before the manifest that makes the checkpoint
//! exist); a file of checkpoint `id` is deleted only when `id + 2` is written (the manifest
//! then names `id + 1`); a listed file's name is the one its rank and the manifest's id give
//! (so a manifest never points outside the checkpoint directory); no record is loaded before
//! every listed file matched its size and CRC-32; every length read is bounded before
//! allocating; a damaged file is an error naming the file (and the record's offset).

use std::io::Read;
use std::path::{Path, PathBuf};

use roam_core::{Node, SpillError};

use super::{CheckpointError, Manifest, RestoreError, SpillFileInfo, manifest_of};
use crate::spill::{max_record_len, read_file, write_file_summed};

/// The spill file of rank `rank` in checkpoint `id` of `nodes` nodes.
pub fn spill_name(id: u64, rank: u32, nodes: u32) -> String {
    format!("spill-{id}-{rank}-of-{nodes}.bin")
}

/// Writes `node`'s spilled records into checkpoint `id` in `dir` (nothing without a spill), and
/// deletes this rank's spill files of checkpoints older than `id - 1`. Called at the cut,
/// under the node lock, before the shard. Returns the file as the manifest lists it.
pub(crate) fn write_spilled(
    dir: &Path,
    id: u64,
    rank: u32,
    nodes: u32,
    node: &Node,
) -> Result<Option<SpillFileInfo>, CheckpointError> {
    let Some(spill) = node.spill() else {
        return Ok(None);
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
    let (bytes, crc32) = write_file_summed(&tmp, records).map_err(failed)?;
    std::fs::rename(&tmp, &path).map_err(super::io_at(&path))?;
    remove_older(dir, id, rank);
    Ok(Some(SpillFileInfo {
        file: name,
        rank,
        records: n,
        bytes,
        crc32,
    }))
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

/// The spill files of the checkpoint in `dir`, each checked against the manifest's list (or,
/// for a manifest without the list, found by name: one per rank of its manifest, or none).
fn files(dir: &Path, spilling: bool) -> Result<Vec<PathBuf>, RestoreError> {
    let manifest = manifest_of(dir)?;
    match &manifest.spill_files {
        Some(listed) => listed
            .iter()
            .enumerate()
            .map(|(i, info)| listed_file(dir, &manifest, i, info))
            .collect(),
        None => unlisted_files(dir, &manifest, spilling),
    }
}

/// Entry `i` of the manifest's spill-file list, checked: its name, then the file's size, then
/// its CRC-32.
fn listed_file(
    dir: &Path,
    manifest: &Manifest,
    i: usize,
    info: &SpillFileInfo,
) -> Result<PathBuf, RestoreError> {
    let nodes = manifest.num_nodes;
    let expected = spill_name(manifest.id, info.rank, nodes);
    // Ranks ascending, one file each, named by rank and id: also keeps every path in `dir`.
    let previous = i
        .checked_sub(1)
        .and_then(|j| manifest.spill_files.as_ref()?.get(j));
    if info.rank >= nodes || info.file != expected || previous.is_some_and(|p| p.rank >= info.rank)
    {
        return Err(RestoreError::Manifest {
            path: dir.join(super::MANIFEST),
            reason: format!(
                "spill file entry {i} ({:?} of rank {}) is not a spill file of this checkpoint \
                 ({nodes} nodes, id {}), in rank order",
                info.file, info.rank, manifest.id
            ),
        });
    }
    let path = dir.join(&info.file);
    let bad = |reason: String| RestoreError::SpillFile {
        path: path.clone(),
        reason,
    };
    let listed = format!(
        "the manifest lists it with {} bytes ({} records)",
        info.bytes, info.records
    );
    let mut file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad(format!("spill file missing: {listed}")));
        }
        Err(e) => return Err(bad(format!("spill file unreadable ({e}): {listed}"))),
    };
    let len = file
        .metadata()
        .map_err(|e| bad(format!("spill file unreadable ({e}): {listed}")))?
        .len();
    if len != info.bytes {
        let what = if len < info.bytes {
            "truncated"
        } else {
            "too long"
        };
        return Err(bad(format!(
            "spill file of wrong length ({what}): {len} bytes, but {listed}"
        )));
    }
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => crc.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(bad(format!("spill file unreadable ({e}): {listed}"))),
        }
    }
    let crc = crc.finalize();
    if crc != info.crc32 {
        return Err(bad(format!(
            "spill file checksum mismatch: CRC-32 {crc:08x}, the manifest lists {:08x}",
            info.crc32
        )));
    }
    Ok(path)
}

/// A manifest without the spill-file list (written before it): its files by name, one per rank
/// or none, with a warning that a checkpoint that lost all of them cannot be told apart.
fn unlisted_files(
    dir: &Path,
    manifest: &Manifest,
    spilling: bool,
) -> Result<Vec<PathBuf>, RestoreError> {
    let nodes = manifest.num_nodes;
    let paths: Vec<PathBuf> = (0..nodes)
        .map(|rank| dir.join(spill_name(manifest.id, rank, nodes)))
        .collect();
    let present = paths.iter().filter(|p| p.exists()).count();
    if present > 0 || spilling {
        tracing::warn!(
            "{}: the manifest predates its list of spill files: {present} spill files found by \
             name, restored with only their records' checksums checked (a checkpoint that lost \
             every spill file restores without its spilled rows); take a new checkpoint to get \
             the list",
            dir.display()
        );
    }
    if present == 0 {
        return Ok(Vec::new());
    }
    match paths.iter().find(|p| !p.exists()) {
        Some(missing) => Err(RestoreError::SpillFile {
            path: missing.clone(),
            reason: format!(
                "spill file missing: the checkpoint has spill files for {present} of its {nodes} \
                 nodes"
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
pub fn restore_spilled(node: &mut Node, dir: &Path) -> Result<SpillRestore, RestoreError> {
    let mut stats = SpillRestore::default();
    let max_len = max_record_len(node.store().space());
    let me = node.config().id;
    for path in files(dir, node.spill().is_some())? {
        let n = read_file::<RestoreError>(&path, max_len, |key, record, offset| {
            let refused = |reason: &str| SpillError::Damaged {
                path: path.clone(),
                offset,
                reason: format!("key {key}: {reason}"),
            };
            if node.directory().home(key) != me {
                return Ok(());
            }
            if !node.restore_spilled(key, record)? {
                return Err(refused("the record does not fit the key space").into());
            }
            stats.loaded += 1;
            Ok(())
        })?;
        stats.read += n;
    }
    node.trim_to_budgets(true);
    Ok(stats)
}
