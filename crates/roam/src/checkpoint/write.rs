//! Writing a checkpoint: a node's shard, streamed from its store, and rank 0's manifest.
//!
//! A shard is written in two passes over the store (which the cut froze and no worker pushes
//! to until the barrier after it): the first counts the records, so that the safetensors
//! header (which names every tensor's shape) goes first; the second streams the keys and the
//! records into their two regions of the file through bounded buffers (positioned writes), so
//! a node never holds a second copy of its table. Why not the `safetensors` crate: its writer
//! takes every tensor as one in-memory buffer, which is that second copy.
//!
//! Invariants: the shard is complete and fsynced under a temporary name before it is renamed
//! to its own; its report (`<shard>.json`: size and CRC-32) is written after it; rank 0
//! writes the manifest only from every rank's report, atomically (temporary file, fsync,
//! rename, directory fsync), and deletes older shards only after that.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use roam_core::store::{Holding, Store};
use roam_core::{Key, KeySpace, Tables};

use super::chunks::{ChunkHasher, chunk_bytes, whole_crc};
use super::{
    CheckpointError, FORMAT, MANIFEST, Manifest, OptimizerInfo, ShardInfo, SpaceInfo,
    SpillFileInfo, TableInfo, VERSION, io_at, shard_name,
};

/// Bytes buffered per region before a positioned write.
const BUF: usize = 1 << 20;

/// Bytes a region writes between two requests to the kernel to start writing them to disk.
/// Without them the kernel starts only at its dirty-memory threshold (a tenth of memory), so a
/// shard smaller than that went to disk only in the final fsync, after all the CPU work; with
/// them the disk writes while the rest of the shard is produced, and the fsync waits for the
/// tail only.
const WRITEBACK: u64 = 16 << 20;

/// The page size writeback ranges are aligned to (4 KiB; a larger page only means a partly
/// written page is sometimes submitted early).
const PAGE: u64 = 4096;

/// Store entries visited per scan call.
const SCAN: usize = 1 << 16;

/// A region of the file written sequentially from `offset`, with its chunks' CRCs.
struct Region<'f> {
    file: &'f File,
    offset: u64,
    /// The file offset up to which writeback was started.
    written_back: u64,
    buf: Vec<u8>,
    chunks: ChunkHasher,
}

impl<'f> Region<'f> {
    fn new(file: &'f File, offset: u64, chunk: u64) -> Self {
        Self {
            file,
            offset,
            written_back: offset,
            buf: Vec::with_capacity(BUF),
            chunks: ChunkHasher::new(chunk, offset),
        }
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= BUF {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.write_all_at(&self.buf, self.offset)?;
        self.chunks.update(&self.buf);
        self.offset += self.buf.len() as u64;
        self.buf.clear();
        // Whole pages only: the page the next write continues would be written twice.
        let to = self.offset & !(PAGE - 1);
        if to.saturating_sub(self.written_back) >= WRITEBACK {
            start_writeback(self.file, self.written_back, to);
            self.written_back = to;
        }
        Ok(())
    }
}

/// Asks the kernel to start writing the file's bytes `[from, to)` to disk, without waiting
/// for the disk (it may block while the device's queue is full, which paces the writer to the
/// disk; the final fsync is what makes the shard durable). Advice only: its failure changes
/// nothing.
fn start_writeback(file: &File, from: u64, to: u64) {
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is open for as
    // long as `file` is borrowed.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            from as libc::off64_t,
            (to - from) as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// The safetensors header of a shard of `n` keys and `total` record values in `layout`, padded
/// with spaces to a multiple of 8 bytes.
pub(crate) fn header(n: u64, total: u64, layout: &Layout) -> Vec<u8> {
    let uniform = match layout {
        Layout::Uniform(r) => Some(*r),
        Layout::PerKey => None,
        Layout::Tables(tables) => return tables_header(tables),
    };
    let keys_end = 8 * n;
    let mut json = format!(
        "{{\"__metadata__\":{{\"format\":\"{FORMAT}\",\"version\":\"{VERSION}\",\"layout\":\"{}\"}},\
         \"keys\":{{\"dtype\":\"U64\",\"shape\":[{n}],\"data_offsets\":[0,{keys_end}]}},",
        if uniform.is_some() {
            "uniform"
        } else {
            "per-key"
        }
    );
    match uniform {
        Some(r) => json.push_str(&format!(
            "\"values\":{{\"dtype\":\"F32\",\"shape\":[{n},{r}],\"data_offsets\":[{keys_end},{}]}}}}",
            keys_end + 4 * total
        )),
        None => {
            let off_end = keys_end + 8 * (n + 1);
            json.push_str(&format!(
                "\"offsets\":{{\"dtype\":\"U64\",\"shape\":[{}],\"data_offsets\":[{keys_end},{off_end}]}},\
                 \"values\":{{\"dtype\":\"F32\",\"shape\":[{total}],\"data_offsets\":[{off_end},{}]}}}}",
                n + 1,
                off_end + 4 * total
            ))
        }
    }
    padded(json)
}

/// The header of a named tables' shard: every table's `<name>.ids`, then every table's
/// `<name>.values` (built with `serde_json`: table names are the user's and need escaping).
fn tables_header(tables: &[TableRun]) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    map.insert(
        "__metadata__".into(),
        serde_json::json!({"format": FORMAT, "version": VERSION.to_string(), "layout": "tables"}),
    );
    let mut at = 0u64;
    for t in tables {
        let end = at + 8 * t.rows;
        map.insert(
            format!("{}.ids", t.name),
            serde_json::json!({"dtype": "U64", "shape": [t.rows], "data_offsets": [at, end]}),
        );
        at = end;
    }
    for t in tables {
        let end = at + 4 * t.rows * t.record;
        map.insert(
            format!("{}.values", t.name),
            serde_json::json!({
                "dtype": "F32", "shape": [t.rows, t.record], "data_offsets": [at, end]
            }),
        );
        at = end;
    }
    padded(serde_json::Value::Object(map).to_string())
}

/// The header length and the JSON, padded with spaces so that the tensors start 8-aligned.
fn padded(mut json: String) -> Vec<u8> {
    while !json.len().is_multiple_of(8) {
        json.push(' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out
}

/// How a shard lays out its records (see the module docs of `checkpoint`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One record length for every key: `keys`, `values [n, r]`.
    Uniform(u64),
    /// A length per key: `keys`, `offsets [n + 1]`, `values [total]`.
    PerKey,
    /// Named tables, in the space's order: every table's ids, then every table's records.
    Tables(Vec<TableRun>),
}

/// One named table's part of a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableRun {
    pub(crate) name: String,
    /// Rows of the table in the shard.
    pub(crate) rows: u64,
    /// Floats per record (the row and its optimizer state).
    pub(crate) record: u64,
}

impl Layout {
    /// The layout of a shard of `space` whose keys are `table_rows` per table (named tables
    /// only; ignored otherwise).
    fn of(space: &KeySpace, table_rows: &[u64]) -> Self {
        if let Some(tables) = space.named_tables() {
            return Self::Tables(
                tables
                    .all()
                    .iter()
                    .zip(table_rows)
                    .map(|(t, &rows)| TableRun {
                        name: t.name().to_owned(),
                        rows,
                        record: t.record_len() as u64,
                    })
                    .collect(),
            );
        }
        match space.uniform_len() {
            Some(len) => Self::Uniform(space.layout().record_len(len) as u64),
            None => Self::PerKey,
        }
    }
}

/// Visits the records of the cut this node writes, keys ascending: its owned records merged
/// with the primaries of the replicated keys it hubs (visible values, hidden state zero).
fn visit(
    store: &Store,
    space: &KeySpace,
    primaries: &[(Key, Vec<f32>)],
    mut f: impl FnMut(Key, &[f32], usize) -> io::Result<()>,
) -> io::Result<()> {
    if space.is_sparse() {
        return visit_sorted(store, space, primaries, f);
    }
    let mut next = primaries.iter().peekable();
    let mut err = Ok(());
    let mut last: Option<Key> = None;
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        cursor = store.scan(at, SCAN, |key, holding, record| {
            if err.is_err() || holding != Holding::Owned {
                return;
            }
            while let Some((k, v)) = next.next_if(|(k, _)| *k < key) {
                err = f(*k, v, space.record_len(*k));
            }
            if last.is_some_and(|l| l >= key) {
                err = Err(io::Error::other("store not in key order"));
            }
            last = Some(key);
            if err.is_ok() {
                err = f(key, record, record.len());
            }
        });
        std::mem::replace(&mut err, Ok(()))?;
    }
    for (k, v) in next {
        f(*k, v, space.record_len(*k))?;
    }
    Ok(())
}

/// [`visit`] for a sparse store, whose entries are in creation order: sorts the keys it owns
/// first (8 bytes a key, not a copy of the records), then reads each record by key.
fn visit_sorted(
    store: &Store,
    space: &KeySpace,
    primaries: &[(Key, Vec<f32>)],
    mut f: impl FnMut(Key, &[f32], usize) -> io::Result<()>,
) -> io::Result<()> {
    let mut keys = Vec::new();
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        cursor = store.scan(at, SCAN, |key, holding, _| {
            if holding == Holding::Owned {
                keys.push(key);
            }
        });
    }
    keys.sort_unstable();
    let mut next = primaries.iter().peekable();
    let mut record = Vec::new();
    for key in keys {
        while let Some((k, v)) = next.next_if(|(k, _)| *k < key) {
            f(*k, v, space.record_len(*k))?;
        }
        if !store.read_record(key, &mut record) {
            return Err(io::Error::other(format!(
                "key {key} left the store while the checkpoint was written"
            )));
        }
        f(key, &record, record.len())?;
    }
    for (k, v) in next {
        f(*k, v, space.record_len(*k))?;
    }
    Ok(())
}

/// Writes this node's shard of checkpoint `id` into `dir` and its report (which also carries
/// `spill`, the node's spill file of the checkpoint, written before); returns the report.
pub(crate) fn write_shard(
    dir: &Path,
    id: u64,
    rank: u32,
    nodes: u32,
    store: &Store,
    primaries: &[(Key, Vec<f32>)],
    spill: Option<SpillFileInfo>,
) -> Result<ShardInfo, CheckpointError> {
    let space = store.space();
    let name = shard_name(id, rank, nodes);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}.tmp"));
    let (mut n, mut total) = (0u64, 0u64);
    let mut table_rows = vec![0u64; space.named_tables().map_or(0, |t| t.all().len())];
    visit(store, space, primaries, |key, _, len| {
        n += 1;
        total += len as u64;
        if let Some(rows) = table_rows.get_mut(Tables::index_of(key)) {
            *rows += 1;
        }
        Ok(())
    })
    .map_err(io_at(&path))?;
    let layout = Layout::of(space, &table_rows);
    let per_key = layout == Layout::PerKey;
    let head = header(n, total, &layout);
    let file = File::create(&tmp).map_err(io_at(&tmp))?;
    let data = head.len() as u64;
    let values_at = data + 8 * n + if per_key { 8 * (n + 1) } else { 0 };
    let size = values_at + 4 * total;
    let chunk = chunk_bytes(size);
    let mut keys = Region::new(&file, data, chunk);
    let mut offsets = Region::new(&file, data + 8 * n, chunk);
    let mut values = Region::new(&file, values_at, chunk);
    let (mut seen, mut at) = (0u64, 0u64);
    let zeros = vec![0u8; 4096];
    let tables = matches!(layout, Layout::Tables(_));
    // The header's rows per table, counted again: the ids must fill exactly those tensors.
    let mut written_rows = vec![0u64; table_rows.len()];
    visit(store, space, primaries, |key, record, len| {
        seen += 1;
        if let Some(rows) = written_rows.get_mut(Tables::index_of(key)) {
            *rows += 1;
        }
        // A named table's tensor holds its ids; its index in the space is the tensor's.
        let stored = if tables { Tables::id_of(key) } else { key };
        keys.put(&stored.to_le_bytes())?;
        if per_key {
            offsets.put(&at.to_le_bytes())?;
        }
        at += len as u64;
        values.put(bytemuck::cast_slice(record))?;
        // A replicated key's primary has no hidden state: zeros up to its record length.
        let mut pad = 4 * (len - record.len());
        while pad > 0 {
            let step = pad.min(zeros.len());
            values.put(&zeros[..step])?;
            pad -= step;
        }
        Ok(())
    })
    .map_err(io_at(&path))?;
    if seen != n || at != total || written_rows != table_rows {
        return Err(CheckpointError::Io {
            path,
            error: io::Error::other("the store changed while the checkpoint was written"),
        });
    }
    if per_key {
        offsets.put(&at.to_le_bytes()).map_err(io_at(&tmp))?;
    }
    let mut head_chunks = ChunkHasher::new(chunk, 0);
    head_chunks.update(&head);
    file.write_all_at(&head, 0).map_err(io_at(&tmp))?;
    for region in [&mut keys, &mut offsets, &mut values] {
        region.flush().map_err(io_at(&tmp))?;
    }
    let bytes = values.offset;
    debug_assert_eq!(bytes, size);
    let chunk_crc32 = ChunkHasher::combine(
        &[&head_chunks, &keys.chunks, &offsets.chunks, &values.chunks],
        bytes,
        chunk,
    );
    file.sync_all().map_err(io_at(&tmp))?;
    drop(file);
    fs::rename(&tmp, &path).map_err(io_at(&path))?;
    let info = ShardInfo {
        file: name,
        rank,
        keys: n,
        bytes,
        crc32: whole_crc(&chunk_crc32, bytes, chunk),
        chunk_bytes: chunk,
        chunk_crc32,
        spill,
    };
    let report = dir.join(format!("{}.json", info.file));
    write_atomic(&report, &serde_json::to_vec(&info).expect("plain struct"))?;
    Ok(info)
}

/// Writes `bytes` to `path` through a temporary file, fsync and rename, then fsyncs the
/// directory so that the rename itself survives a crash.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io_at(&tmp))?;
    f.write_all(bytes).map_err(io_at(&tmp))?;
    f.sync_all().map_err(io_at(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io_at(path))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_at(dir))?;
    }
    Ok(())
}

/// The id the next checkpoint in `dir` gets: one more than the current manifest's (1 if
/// there is none or it is unreadable). Read by every node before the cut.
pub(crate) fn next_id(dir: &Path) -> u64 {
    fs::read(dir.join(MANIFEST))
        .ok()
        .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok())
        .map_or(1, |m| m.id + 1)
}

/// Rank 0, after every node wrote its shard: gathers the reports (each with the rank's spill
/// file, if any, which goes to the manifest's list), writes the manifest atomically, then
/// removes the reports and the shards of older checkpoints.
pub(crate) fn finish_manifest(
    dir: &Path,
    id: u64,
    epoch: u64,
    app: serde_json::Value,
    nodes: u32,
    space: &KeySpace,
) -> Result<Manifest, CheckpointError> {
    let (mut shards, mut spill_files) = (Vec::new(), Vec::new());
    for rank in 0..nodes {
        let report = dir.join(format!("{}.json", shard_name(id, rank, nodes)));
        let mut info: ShardInfo = fs::read(&report)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|reason| CheckpointError::Shard {
                path: report.clone(),
                reason,
            })?;
        spill_files.extend(info.spill.take());
        shards.push(info);
    }
    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        id,
        epoch,
        created_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        num_nodes: nodes,
        key_space: SpaceInfo::of(space),
        optimizer: Some(OptimizerInfo::of(space.optimizer())),
        tables: TableInfo::of(space),
        shards,
        spill_files: Some(spill_files),
        app,
    };
    let bytes = serde_json::to_vec_pretty(&manifest).expect("plain struct");
    write_atomic(&dir.join(MANIFEST), &bytes)?;
    // The new checkpoint exists: older shards and every report can go (best effort).
    let current: Vec<&str> = manifest.shards.iter().map(|s| s.file.as_str()).collect();
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with("ckpt-");
            let stale = name.ends_with(".json") || !current.contains(&name.as_str());
            if ours && stale {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    Ok(manifest)
}
