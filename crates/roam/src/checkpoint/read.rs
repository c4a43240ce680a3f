//! Restoring a checkpoint into a node that has not started serving: every node reads every
//! shard's key index and keeps the records of the keys its directory homes at it (and every
//! replicated key, as a replica), so a checkpoint of N nodes restores into any M. Of the
//! values (nearly all of a shard's bytes) a node reads only the chunks that hold records it
//! keeps, in file order: under range partitioning each of M nodes reads about 1/M of them. A
//! first pass over the key index lists those chunks, and a prefetcher thread reads and
//! verifies them while the node loads the records (`chunks.rs`).
//!
//! Invariants: everything checkable without reading the data (manifest, key space, each
//! shard's size, header and chunk list against the manifest) is checked for every shard
//! before any record is loaded; every length from a file is bounded by the file's size before
//! it is allocated; no byte is used before the CRC-32 of its chunk matched (`chunks.rs`), and
//! a shard's records are loaded only after all its keys and lengths were checked. A damaged
//! chunk fails the restore of every node that reads it (a node reads every chunk holding a
//! record it keeps, so every damaged chunk fails some node); the node is then dropped
//! unstarted (`NodeHandle::start` returns the error), so no half-loaded node serves.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use roam_core::tables::{ID_BITS, MAX_ID};
use roam_core::{Key, KeySpace, Node};
use serde_json::Value;

use super::chunks::{ChunkReader, MAX_CHUNK, MIN_CHUNK, ShardFile, prefetch};
use super::{
    FORMAT, MANIFEST, MAX_HEADER, Manifest, OptimizerInfo, RestoreError, ShardInfo, SpaceInfo,
    TableInfo, VERSION,
};

/// What a restore loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Records loaded into this node (owned records and replicas).
    pub loaded: u64,
    /// Records read in every shard.
    pub read: u64,
    /// The checkpoint's epoch.
    pub epoch: u64,
    /// Bytes read from shard files (whole chunks; a chunk two regions share counts twice).
    pub bytes_read: u64,
}

/// A shard whose size and header were checked.
struct Plan {
    path: PathBuf,
    info: ShardInfo,
    head: Vec<u8>,
    /// Record length of every key, or `None` for per-key lengths (an `offsets` tensor) or
    /// named tables.
    uniform: Option<u64>,
    /// Named tables' layout (`<name>.ids` and `<name>.values` per table): each table's row
    /// count, in the space's order.
    tables: Option<Vec<u64>>,
    /// Record values in the shard.
    total: u64,
}

fn shard_err(path: &Path, reason: impl Into<String>) -> RestoreError {
    RestoreError::Shard {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads and checks `dir`'s manifest against `space` (a node's key space, with its optimizer):
/// the optimizer's kind (if the manifest records it), then the row layout's hidden lengths,
/// then the rest of the key space (key count, visible lengths) must match. A manifest of an earlier roam, without
/// the optimizer, is accepted when the layout matches: every optimizer's state has its own
/// layout (SGD and none have no state), so the layout is what decides whether the records fit.
pub fn read_manifest(dir: &Path, space: &KeySpace) -> Result<Manifest, RestoreError> {
    let optimizer = OptimizerInfo::of(space.optimizer());
    let tables = TableInfo::of(space);
    let space = &SpaceInfo::of(space);
    let path = dir.join(MANIFEST);
    let bad = |reason: String| RestoreError::Manifest {
        path: path.clone(),
        reason,
    };
    let size = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(_) => return Err(RestoreError::MissingManifest { path }),
    };
    if size > MAX_HEADER {
        return Err(bad(format!("{size} bytes, more than any manifest")));
    }
    let bytes = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if m.format != FORMAT || m.version != VERSION {
        return Err(bad(format!(
            "format {:?} version {}, expected {FORMAT:?} version {VERSION}",
            m.format, m.version
        )));
    }
    let ranks: Vec<u32> = m.shards.iter().map(|s| s.rank).collect();
    if ranks != (0..m.num_nodes).collect::<Vec<_>>() {
        return Err(bad(format!(
            "{} nodes but shards of ranks {ranks:?}",
            m.num_nodes
        )));
    }
    if let Some(reason) = tables_mismatch(&m.tables, &tables) {
        return Err(RestoreError::Tables { path, reason });
    }
    if let Some(found) = m.optimizer.as_ref().filter(|o| o.kind != optimizer.kind) {
        return Err(RestoreError::Optimizer {
            path,
            found: found.to_string(),
            expected: optimizer.to_string(),
        });
    }
    let k = &m.key_space;
    // Hidden lengths here (the optimizer's state); visible ones are the key space's (below).
    if (k.hidden_per_value, k.hidden_per_key) != (space.hidden_per_value, space.hidden_per_key) {
        return Err(RestoreError::Layout {
            path,
            found: k.describe_rows(),
            found_optimizer: m
                .optimizer
                .as_ref()
                .map_or("unrecorded".to_owned(), ToString::to_string),
            expected: space.describe_rows(),
            expected_optimizer: optimizer.to_string(),
        });
    }
    if &m.key_space != space {
        return Err(RestoreError::KeySpace {
            path,
            found: format!("{:?}", m.key_space),
            expected: format!("{space:?}"),
        });
    }
    Ok(m)
}

/// Why a checkpoint of tables `found` does not restore into tables `expected`, naming the
/// first table that differs; `None` if it does.
fn tables_mismatch(found: &[TableInfo], expected: &[TableInfo]) -> Option<String> {
    for (i, e) in expected.iter().enumerate() {
        let Some(at) = found.iter().position(|f| f.name == e.name) else {
            return Some(format!(
                "table {:?} is not in the checkpoint (it has {})",
                e.name,
                names(found)
            ));
        };
        let f = &found[at];
        if !f.fits(e) {
            return Some(format!(
                "table {:?}: the checkpoint's is {}, this node's is {}",
                e.name,
                f.describe(),
                e.describe()
            ));
        }
        if at != i {
            return Some(format!(
                "table {:?} is table {at} in the checkpoint and table {i} here; declare the \
                 tables in the checkpoint's order ({})",
                e.name,
                names(found)
            ));
        }
    }
    found
        .iter()
        .find(|f| !expected.iter().any(|e| e.name == f.name))
        .map(|f| {
            format!(
                "the checkpoint has table {:?}, which this node does not (it has {})",
                f.name,
                names(expected)
            )
        })
}

fn names(tables: &[TableInfo]) -> String {
    if tables.is_empty() {
        return "no named tables".to_owned();
    }
    let names: Vec<String> = tables.iter().map(|t| format!("{:?}", t.name)).collect();
    names.join(", ")
}

/// Checks one shard's size and header against the manifest (no data read).
fn plan(dir: &Path, info: &ShardInfo, space: &KeySpace) -> Result<Plan, RestoreError> {
    if info.file.contains('/') || info.file.starts_with('.') {
        return Err(shard_err(
            &dir.join(MANIFEST),
            format!("bad shard name {:?}", info.file),
        ));
    }
    let path = dir.join(&info.file);
    let size = std::fs::metadata(&path)
        .map_err(|e| shard_err(&path, format!("missing: {e}")))?
        .len();
    if size != info.bytes {
        return Err(shard_err(
            &path,
            format!(
                "{size} bytes, the manifest says {} (truncated or replaced)",
                info.bytes
            ),
        ));
    }
    let chunk = info.chunk_bytes;
    if !(chunk.is_power_of_two() && (MIN_CHUNK..=MAX_CHUNK).contains(&chunk))
        || info.chunk_crc32.len() as u64 != size.div_ceil(chunk)
    {
        return Err(shard_err(
            &path,
            format!(
                "the manifest lists {} chunk checksums of {chunk} bytes for its {size} bytes \
                 (a checkpoint of an earlier roam, or a damaged manifest)",
                info.chunk_crc32.len()
            ),
        ));
    }
    let mut f = File::open(&path).map_err(|e| shard_err(&path, e.to_string()))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|e| shard_err(&path, format!("header: {e}")))?;
    let hlen = u64::from_le_bytes(len);
    if hlen > MAX_HEADER || 8 + hlen > size {
        return Err(shard_err(
            &path,
            format!("header length {hlen} does not fit the file"),
        ));
    }
    let mut head = vec![0u8; hlen as usize];
    f.read_exact(&mut head)
        .map_err(|e| shard_err(&path, format!("header: {e}")))?;
    let json: Value = serde_json::from_slice(&head)
        .map_err(|e| shard_err(&path, format!("header is not JSON: {e}")))?;
    let tensor = |name: &str, dtype: &str| -> Result<(Vec<u64>, [u64; 2]), RestoreError> {
        let t = &json[name];
        if t["dtype"] != dtype {
            return Err(shard_err(&path, format!("tensor {name:?}: not {dtype}")));
        }
        let dims = |v: &Value| -> Option<Vec<u64>> {
            v.as_array()?
                .iter()
                .map(Value::as_u64)
                .collect::<Option<Vec<_>>>()
        };
        let shape =
            dims(&t["shape"]).ok_or_else(|| shard_err(&path, format!("tensor {name:?}: shape")))?;
        let offs = dims(&t["data_offsets"])
            .filter(|o| o.len() == 2)
            .ok_or_else(|| shard_err(&path, format!("tensor {name:?}: data_offsets")))?;
        Ok((shape, [offs[0], offs[1]]))
    };
    let n = info.keys;
    // Every key takes 8 bytes of the file: a larger count is a damaged manifest (and bounds
    // the arithmetic below).
    if n > size / 8 {
        return Err(shard_err(
            &path,
            format!("the manifest says {n} keys, more than its {size} bytes hold"),
        ));
    }
    let (expect, uniform, tables, total) = match json["__metadata__"]["layout"].as_str() {
        Some("tables") => {
            let (expect, rows, total) = tables_tensors(&path, space, n, &tensor)?;
            (expect, None, Some(rows), total)
        }
        // Absent in no shard roam wrote; read as the keys layouts, which the tensors tell.
        Some("uniform" | "per-key") | None => {
            let (expect, uniform, total) = key_tensors(&path, n, &tensor)?;
            (expect, uniform, None, total)
        }
        Some(other) => {
            return Err(shard_err(
                &path,
                format!("layout {other:?} is not one this roam reads (uniform, per-key, tables)"),
            ));
        }
    };
    // The tensors lie back to back, in this order, and end where the file does.
    let mut at = 0u64;
    for ([start, end], bytes) in expect {
        if start != at || end.checked_sub(start) != Some(bytes) {
            return Err(shard_err(&path, "tensor offsets do not match their shapes"));
        }
        at = end;
    }
    if 8 + hlen + at != size {
        return Err(shard_err(&path, "tensors do not end where the file does"));
    }
    let mut full = len.to_vec();
    full.extend_from_slice(&head);
    Ok(Plan {
        path,
        info: info.clone(),
        head: full,
        uniform,
        tables,
        total,
    })
}

/// A tensor's shape and byte offsets, by name and dtype, from a shard's header.
type TensorOf<'a> = dyn Fn(&str, &str) -> Result<(Vec<u64>, [u64; 2]), RestoreError> + 'a;

/// Tensors' byte offsets and sizes in file order, and the record values' total.
type Expected = Vec<([u64; 2], u64)>;

/// The tensors of a named tables' shard (`<name>.ids`, then `<name>.values`, per table of the
/// node's space, whose tables the manifest matched): their offsets and sizes in file order,
/// each table's row count, and the values' total.
fn tables_tensors(
    path: &Path,
    space: &KeySpace,
    n: u64,
    tensor: &TensorOf<'_>,
) -> Result<(Expected, Vec<u64>, u64), RestoreError> {
    let Some(tables) = space.named_tables() else {
        return Err(shard_err(
            path,
            "a shard of named tables, and this node's key space has none",
        ));
    };
    let (mut ids, mut values, mut rows) = (Vec::new(), Vec::new(), Vec::new());
    let mut total = 0u64;
    for table in tables.all() {
        let name = table.name();
        let (shape, offs) = tensor(&format!("{name}.ids"), "U64")?;
        let [count] = shape[..] else {
            return Err(shard_err(
                path,
                format!("table {name:?}: ids shape {shape:?}"),
            ));
        };
        let record = table.record_len() as u64;
        let (vshape, voffs) = tensor(&format!("{name}.values"), "F32")?;
        if vshape != [count, record] {
            return Err(shard_err(
                path,
                format!(
                    "table {name:?}: values shape {vshape:?}, expected [{count}, {record}] \
                     ({count} ids, {record} floats a record)"
                ),
            ));
        }
        let floats = count.saturating_mul(record);
        ids.push((offs, count.saturating_mul(8)));
        values.push((voffs, floats.saturating_mul(4)));
        rows.push(count);
        total = total.saturating_add(floats);
    }
    let keys = rows.iter().fold(0u64, |a, &r| a.saturating_add(r));
    if keys != n {
        return Err(shard_err(
            path,
            format!("{keys} ids in its tables, the manifest says {n} keys"),
        ));
    }
    ids.extend(values);
    Ok((ids, rows, total))
}

/// The tensors of a shard of one key space (`keys`, `values`, and with per-key lengths
/// `offsets`): their offsets and sizes in file order, the uniform record length if there is
/// one, and the values' total.
fn key_tensors(
    path: &Path,
    n: u64,
    tensor: &TensorOf<'_>,
) -> Result<(Expected, Option<u64>, u64), RestoreError> {
    let path = path.to_path_buf();
    let (kshape, koffs) = tensor("keys", "U64")?;
    let (vshape, voffs) = tensor("values", "F32")?;
    let mut expect = vec![(koffs, 8 * n)];
    if kshape != [n] {
        return Err(shard_err(
            &path,
            format!("keys shape {kshape:?}, the manifest says {n} keys"),
        ));
    }
    let (uniform, total) = match vshape.as_slice() {
        [rows, r] if *rows == n => (Some(*r), n.saturating_mul(*r)),
        [total] => {
            let (oshape, ooffs) = tensor("offsets", "U64")?;
            if oshape != [n + 1] {
                return Err(shard_err(&path, format!("offsets shape {oshape:?}")));
            }
            expect.push((ooffs, 8 * (n + 1)));
            (None, *total)
        }
        other => return Err(shard_err(&path, format!("values shape {other:?}"))),
    };
    expect.push((voffs, total.saturating_mul(4)));
    Ok((expect, uniform, total))
}

/// Loads one checked shard's records for this node, in two passes over its key index (and
/// offsets): the first checks every key and length and lists the value chunks holding records
/// this node loads; the second loads those records from the listed chunks, which a prefetcher
/// thread reads and verifies meanwhile ([`prefetch`]). Returns (records read, records loaded,
/// bytes read; the index counts twice).
fn load(node: &mut Node, p: &Plan) -> Result<(u64, u64, u64), RestoreError> {
    let me = node.config().id;
    let file = File::open(&p.path).map_err(|e| shard_err(&p.path, format!("open: {e}")))?;
    let shard = ShardFile {
        file: &file,
        path: &p.path,
        size: p.info.bytes,
        chunk: p.info.chunk_bytes,
        crcs: &p.info.chunk_crc32,
    };
    let reader = || ChunkReader::new(shard);
    let mut index = Index {
        plan: p,
        keys: reader(),
        lengths: reader(),
    };
    // `plan` checked the header unverified; these are the bytes the chunk CRCs cover.
    let mut head = vec![0u8; p.head.len()];
    index.keys.read_at(0, &mut head)?;
    if head != p.head {
        return Err(shard_err(&p.path, "header changed while being read"));
    }
    let values_at = index.values_at();
    let chunk = p.info.chunk_bytes;
    let keeps =
        |node: &Node, key: Key| node.store().has_replica(key) || node.directory().home(key) == me;
    let mut needed: Vec<u64> = Vec::new();
    index.visit(node.store().space(), |key, start, len| {
        if len > 0 && keeps(node, key) {
            let (first, last) = (values_at + 4 * start, values_at + 4 * (start + len) - 1);
            for c in first / chunk..=last / chunk {
                if needed.last() != Some(&c) {
                    needed.push(c);
                }
            }
        }
        Ok(())
    })?;
    let space = node.store().space().clone();
    let mut loaded = 0u64;
    let values_read = std::thread::scope(|scope| {
        let mut values = reader();
        if !needed.is_empty() {
            let feed = prefetch(scope, shard, needed);
            values = values.fed(feed);
        }
        let mut scratch: Vec<f32> = Vec::new();
        index.visit(&space, |key, start, len| {
            if keeps(node, key) {
                let record = values.floats(values_at + 4 * start, len as usize, &mut scratch)?;
                if !node.restore_record(key, record) {
                    return Err(shard_err(&p.path, format!("key {key}: record refused")));
                }
                loaded += 1;
            }
            Ok(())
        })?;
        let bytes_read = values.bytes_read;
        values.finish()?;
        Ok::<_, RestoreError>(bytes_read)
    })?;
    let bytes = index.keys.bytes_read + index.lengths.bytes_read + values_read;
    Ok((p.info.keys, loaded, bytes))
}

/// Cursors over a shard's key index and (for per-key lengths) its offsets.
struct Index<'a> {
    plan: &'a Plan,
    keys: ChunkReader<'a>,
    lengths: ChunkReader<'a>,
}

impl Index<'_> {
    fn keys_at(&self) -> u64 {
        self.plan.head.len() as u64
    }

    fn offsets_at(&self) -> u64 {
        self.keys_at() + 8 * self.plan.info.keys
    }

    fn values_at(&self) -> u64 {
        let offsets = match (self.plan.uniform, &self.plan.tables) {
            (None, None) => 8 * (self.plan.info.keys + 1),
            _ => 0,
        };
        self.offsets_at() + offsets
    }

    /// Calls `f(key, start, len)` for every record of the shard in file order (`start`: its
    /// first value's index in the values tensor), after checking that the key lies in `space`
    /// and follows the previous one, and that its length is the key space's and lies in the
    /// tensor.
    fn visit(
        &mut self,
        space: &KeySpace,
        mut f: impl FnMut(Key, u64, u64) -> Result<(), RestoreError>,
    ) -> Result<(), RestoreError> {
        let p = self.plan;
        let n = p.info.keys;
        let (keys_at, offsets_at) = (self.keys_at(), self.offsets_at());
        // Keys and offsets are copied out in batches (one bounds check and copy per batch,
        // not per key); records are used in place in their chunk.
        const BATCH: usize = 1024;
        let (mut keys, mut ends) = ([0u64; BATCH], [0u64; BATCH]);
        let per_key = p.uniform.is_none() && p.tables.is_none();
        // Named tables: the table of the ids being read (one past its index), and the ids
        // left in it.
        let (mut table, mut left) = (0usize, 0u64);
        let mut start = match per_key {
            false => 0,
            true => {
                self.lengths
                    .read_at(offsets_at, bytemuck::bytes_of_mut(&mut ends[0]))?;
                u64::from_le(ends[0])
            }
        };
        if start != 0 {
            return Err(shard_err(&p.path, "offsets do not start at 0"));
        }
        let mut last = None::<Key>;
        let mut i = 0u64;
        while i < n {
            let m = (n - i).min(BATCH as u64) as usize;
            self.keys
                .read_at(keys_at + 8 * i, bytemuck::cast_slice_mut(&mut keys[..m]))?;
            if per_key {
                self.lengths.read_at(
                    offsets_at + 8 * (i + 1),
                    bytemuck::cast_slice_mut(&mut ends[..m]),
                )?;
            }
            for j in 0..m {
                // Little-endian on disk (and in memory: the wire format requires such a
                // target).
                let mut key = u64::from_le(keys[j]);
                if let Some(rows) = &p.tables {
                    while left == 0 {
                        // The tables' ids sum to `n` (checked in `plan`): one remains.
                        left = rows[table];
                        table += 1;
                    }
                    left -= 1;
                    if key > MAX_ID {
                        let name = space
                            .named_tables()
                            .map_or("?", |t| t.all()[table - 1].name());
                        return Err(shard_err(
                            &p.path,
                            format!("id {key} of table {name:?} out of range"),
                        ));
                    }
                    key |= ((table - 1) as u64) << ID_BITS;
                }
                let len = match p.uniform {
                    Some(r) => r,
                    None if !per_key => space.record_len(key) as u64,
                    None => {
                        let end = u64::from_le(ends[j]);
                        if end < start || end > p.total {
                            return Err(shard_err(
                                &p.path,
                                format!("offset {end} of key {key} out of bounds"),
                            ));
                        }
                        end - start
                    }
                };
                if !space.contains(key) || last.is_some_and(|l| l >= key) {
                    return Err(shard_err(
                        &p.path,
                        format!("key {key} out of range or out of order"),
                    ));
                }
                last = Some(key);
                if len != space.record_len(key) as u64 {
                    return Err(shard_err(
                        &p.path,
                        format!(
                            "key {key}: record of {len} values, the key space says {}",
                            space.record_len(key)
                        ),
                    ));
                }
                f(key, start, len)?;
                start += len;
            }
            i += m as u64;
        }
        Ok(())
    }
}

/// Restores the checkpoint in `dir` into `node`, which must not have started serving (see
/// the module docs). On error the node must be dropped.
pub fn restore_into(node: &mut Node, dir: &Path) -> Result<RestoreStats, RestoreError> {
    let space = node.store().space().clone();
    let manifest = read_manifest(dir, &space)?;
    let plans = manifest
        .shards
        .iter()
        .map(|info| plan(dir, info, &space))
        .collect::<Result<Vec<_>, _>>()?;
    let mut stats = RestoreStats {
        epoch: manifest.epoch,
        ..RestoreStats::default()
    };
    for p in &plans {
        let (read, loaded, bytes) = load(node, p)?;
        stats.read += read;
        stats.loaded += loaded;
        stats.bytes_read += bytes;
    }
    node.finish_restore();
    Ok(stats)
}
