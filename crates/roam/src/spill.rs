//! The spill file: where a node keeps the records of the rows it evicted, for dynamic tables
//! whose policy sets `spill` (`roam_core::spill`; issue #17). One file per node,
//! `roam-spill-node-<rank>.bin` under [`crate::Config::spill_dir`], created empty at start
//! (a spill lives for one run; checkpoints carry spilled rows across runs,
//! `checkpoint/spill.rs`).
//!
//! Format: an 8-byte magic ([`MAGIC`]), then records appended one after the other, each a
//! 16-byte header (key `u64`, record length in floats `u32`, CRC-32 `u32` of the key, length
//! and values bytes; little-endian) and the record's `f32` values. The index (key → offset and
//! length, packed in one `u64`: at most [`MAX_FILE`] bytes, records of at most [`MAX_RECORD`]
//! floats) is in memory only (16 bytes an entry, 17–34 bytes per spilled row with the hash
//! map's load). A record taken back or replaced becomes stale; once stale bytes are more than
//! half of a file past [`COMPACT_MIN`] bytes, the live records are copied into a new file that
//! replaces it (amortised: the copy is at most the live bytes, which are at most the stale
//! bytes freed), and the index is updated in place.
//!
//! Invariants: every length read back is bounded (by the longest record of the key space and by
//! the file's end) before anything is allocated, and checked against the index and the CRC; a
//! damaged or truncated file gives a [`SpillError`] naming the file and the record's offset,
//! never a panic. Appends are buffered ([`BUF`] bytes) and read back from the buffer until
//! written, so the file is written in large pieces; nothing is fsynced (the spill is a cache of
//! this run, not durable state).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use roam_core::{Key, KeySpace, Spill, SpillError};

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"ROAMSPL1";
/// A record's header: key, length, CRC.
const HEADER: u64 = 16;
/// Appended bytes buffered before a write.
const BUF: usize = 1 << 20;
/// Files below this many bytes are never compacted.
pub const COMPACT_MIN: u64 = 4 << 20;

/// Bits of a packed index entry that hold the record's length (floats).
const LEN_BITS: u32 = 24;
/// The longest record a spill file holds (floats).
pub const MAX_RECORD: u32 = (1 << LEN_BITS) - 1;
/// The largest spill file (bytes): what the other 40 bits of an index entry address.
pub const MAX_FILE: u64 = 1 << 40;

/// Where a record is: its offset and length (floats), packed into one `u64` in the index
/// (offset above [`LEN_BITS`]) so that an index entry is 16 bytes with its key.
#[derive(Clone, Copy, Debug)]
struct Slot {
    offset: u64,
    len: u32,
}

impl Slot {
    fn pack(self) -> u64 {
        self.offset << LEN_BITS | u64::from(self.len)
    }

    fn unpack(packed: u64) -> Self {
        Self {
            offset: packed >> LEN_BITS,
            len: (packed & u64::from(MAX_RECORD)) as u32,
        }
    }
}

/// A node's spill file (see the module docs).
pub struct FileSpill {
    path: PathBuf,
    file: File,
    /// Bytes written to the file.
    written: u64,
    /// Appended bytes not yet written (they follow `written`).
    pending: Vec<u8>,
    /// Key → packed [`Slot`].
    index: HashMap<Key, u64>,
    /// Bytes of the records in the index (headers included).
    live: u64,
    /// The longest record the key space has (floats): the bound on lengths read back.
    max_len: u32,
    /// Files compacted so far (for tests and stats).
    compactions: u64,
}

fn io_err(path: &Path, what: &'static str, offset: u64) -> impl FnOnce(io::Error) -> SpillError {
    let path = path.to_path_buf();
    move |error| SpillError::Io {
        path,
        what,
        offset,
        error,
    }
}

fn damaged(path: &Path, offset: u64, reason: impl Into<String>) -> SpillError {
    SpillError::Damaged {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// The bytes of one record (header and values).
fn encode(key: Key, record: &[f32], out: &mut Vec<u8>) {
    let len = record.len() as u32;
    let values: &[u8] = bytemuck::cast_slice(record);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&key.to_le_bytes());
    crc.update(&len.to_le_bytes());
    crc.update(values);
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(values);
}

/// A record header read back: key, length and CRC, the length bounded by `max_len` and by the
/// `end` of the file.
fn check_header(
    path: &Path,
    offset: u64,
    head: &[u8; HEADER as usize],
    max_len: u32,
    end: u64,
) -> Result<(Key, u32, u32), SpillError> {
    let key = u64::from_le_bytes(head[0..8].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    if len > max_len {
        return Err(damaged(
            path,
            offset,
            format!("record length {len} exceeds the longest record of the key space ({max_len})"),
        ));
    }
    let record_end = offset + HEADER + 4 * u64::from(len);
    if record_end > end {
        return Err(damaged(
            path,
            offset,
            format!("truncated: the record of key {key} ends at {record_end}, the file at {end}"),
        ));
    }
    Ok((key, len, crc))
}

/// Checks `values` (the record's bytes) against its header's CRC and decodes them into `out`.
fn check_values(
    path: &Path,
    offset: u64,
    (key, len, crc): (Key, u32, u32),
    values: &[u8],
    out: &mut Vec<f32>,
) -> Result<(), SpillError> {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&key.to_le_bytes());
    hasher.update(&len.to_le_bytes());
    hasher.update(values);
    if hasher.finalize() != crc {
        return Err(damaged(
            path,
            offset,
            format!("bad checksum in the record of key {key}"),
        ));
    }
    out.clear();
    out.extend(
        values
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))),
    );
    Ok(())
}

/// The longest record (floats) of `space`'s keys.
pub fn max_record_len(space: &KeySpace) -> u32 {
    match space.named_tables() {
        Some(tables) => tables.all().iter().map(|t| t.record_len()).max(),
        None => space
            .uniform_len()
            .map(|len| space.layout().record_len(len)),
    }
    .unwrap_or_else(|| space.record_len(0)) as u32
}

/// The spill file of node `rank` under `dir`.
pub fn path_of(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("roam-spill-node-{rank}.bin"))
}

/// Gives `node` its spill file under `dir` when a dynamic policy of its key space spills (start,
/// before a restore); nothing otherwise.
pub(crate) fn install(
    node: &mut roam_core::Node,
    dir: Option<&Path>,
    rank: u32,
) -> Result<(), crate::StartError> {
    let space = node.store().space();
    if !space.dynamic_policies().any(|p| p.spill) {
        return Ok(());
    }
    let dir = dir.ok_or(crate::StartError::SpillDirMissing)?;
    std::fs::create_dir_all(dir).map_err(io_err(dir, "create directory", 0))?;
    let spill = FileSpill::create(&path_of(dir, rank), max_record_len(space))?;
    node.set_spill(Box::new(spill));
    Ok(())
}

impl FileSpill {
    /// Creates (or empties) the spill file at `path` for records of at most `max_len` floats.
    pub fn create(path: &Path, max_len: u32) -> Result<Self, SpillError> {
        if max_len > MAX_RECORD {
            return Err(SpillError::Limit {
                path: path.to_path_buf(),
                reason: format!(
                    "records of {max_len} values are longer than a spill file holds ({MAX_RECORD})"
                ),
            });
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io_err(path, "create", 0))?;
        file.write_all(MAGIC).map_err(io_err(path, "write", 0))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            written: MAGIC.len() as u64,
            pending: Vec::new(),
            index: HashMap::new(),
            live: 0,
            max_len,
            compactions: 0,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length, buffered appends included.
    pub fn bytes(&self) -> u64 {
        self.written + self.pending.len() as u64
    }

    /// How often the file was compacted.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }

    /// Writes the buffered appends.
    fn flush(&mut self) -> Result<(), SpillError> {
        if !self.pending.is_empty() {
            self.file
                .write_all_at(&self.pending, self.written)
                .map_err(io_err(&self.path, "write", self.written))?;
            self.written += self.pending.len() as u64;
            self.pending.clear();
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `offset`, from the file or the buffered appends (errors name
    /// `record`, the offset of the record they are part of).
    fn read_at(&self, offset: u64, out: &mut [u8], record: u64) -> Result<(), SpillError> {
        let mut done = 0;
        if offset < self.written {
            let n = out.len().min((self.written - offset) as usize);
            self.file
                .read_exact_at(&mut out[..n], offset)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::UnexpectedEof => damaged(
                        &self.path,
                        record,
                        "truncated: the file ends within the record",
                    ),
                    _ => io_err(&self.path, "read", record)(e),
                })?;
            done = n;
        }
        if done < out.len() {
            let from = (offset + done as u64 - self.written) as usize;
            let rest = &mut out[done..];
            let Some(bytes) = self.pending.get(from..from + rest.len()) else {
                return Err(damaged(&self.path, record, "record past the end"));
            };
            rest.copy_from_slice(bytes);
        }
        Ok(())
    }

    /// Reads and checks the record at `slot`, which the index says is `key`'s.
    fn read_record(&self, key: Key, slot: Slot, out: &mut Vec<f32>) -> Result<(), SpillError> {
        let mut head = [0u8; HEADER as usize];
        self.read_at(slot.offset, &mut head, slot.offset)?;
        let header = check_header(&self.path, slot.offset, &head, self.max_len, self.bytes())?;
        if header.0 != key || header.1 != slot.len {
            return Err(damaged(
                &self.path,
                slot.offset,
                format!(
                    "the record is of key {} ({} values), the index says key {key} ({} values)",
                    header.0, header.1, slot.len
                ),
            ));
        }
        let mut values = vec![0u8; 4 * slot.len as usize];
        self.read_at(slot.offset + HEADER, &mut values, slot.offset)?;
        check_values(&self.path, slot.offset, header, &values, out)
    }

    fn forget(&mut self, key: Key) {
        if let Some(old) = self.index.remove(&key) {
            self.live -= HEADER + 4 * u64::from(Slot::unpack(old).len);
        }
    }

    /// Copies the live records into a new file that replaces this one, once stale bytes are
    /// most of a large file.
    fn maybe_compact(&mut self) -> Result<(), SpillError> {
        let bytes = self.bytes();
        if bytes < COMPACT_MIN || 2 * self.live > bytes {
            return Ok(());
        }
        self.flush()?;
        let tmp = self.path.with_extension("compact");
        // File order (sequential reads); 16 bytes an entry, and the index is updated in place.
        let mut order: Vec<(u64, Key)> = self.index.iter().map(|(&k, &s)| (s, k)).collect();
        order.sort_unstable();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io_err(&tmp, "create", 0))?;
        let mut out = BufWriter::with_capacity(BUF, file);
        out.write_all(MAGIC).map_err(io_err(&tmp, "write", 0))?;
        let (mut at, mut record, mut bytes) = (MAGIC.len() as u64, Vec::new(), Vec::new());
        let mut moved = Vec::with_capacity(order.len());
        for &(packed, key) in &order {
            let slot = Slot::unpack(packed);
            self.read_record(key, slot, &mut record)?;
            bytes.clear();
            encode(key, &record, &mut bytes);
            out.write_all(&bytes).map_err(io_err(&tmp, "write", at))?;
            moved.push(Slot { offset: at, ..slot }.pack());
            at += bytes.len() as u64;
        }
        let file = out
            .into_inner()
            .map_err(|e| io_err(&tmp, "write", at)(e.into_error()))?;
        std::fs::rename(&tmp, &self.path).map_err(io_err(&self.path, "replace", 0))?;
        self.file = file;
        self.written = at;
        // Only now (the new file is in place): the index points into it.
        for ((_, key), packed) in order.into_iter().zip(moved) {
            self.index.insert(key, packed);
        }
        self.compactions += 1;
        Ok(())
    }
}

impl Spill for FileSpill {
    fn put(&mut self, key: Key, record: &[f32]) -> Result<(), SpillError> {
        let end = self.bytes() + HEADER + 4 * record.len() as u64;
        if record.len() > self.max_len as usize || end > MAX_FILE {
            return Err(SpillError::Limit {
                path: self.path.clone(),
                reason: format!(
                    "a record of {} values does not fit (longest {}, file at most {MAX_FILE} bytes)",
                    record.len(),
                    self.max_len
                ),
            });
        }
        self.forget(key);
        let offset = self.bytes();
        encode(key, record, &mut self.pending);
        let len = record.len() as u32;
        self.index.insert(key, Slot { offset, len }.pack());
        self.live += HEADER + 4 * u64::from(len);
        if self.pending.len() >= BUF {
            self.flush()?;
        }
        self.maybe_compact()
    }

    fn get(&self, key: Key, out: &mut Vec<f32>) -> Result<bool, SpillError> {
        out.clear();
        let Some(&packed) = self.index.get(&key) else {
            return Ok(false);
        };
        self.read_record(key, Slot::unpack(packed), out)?;
        Ok(true)
    }

    fn remove(&mut self, key: Key) -> Result<(), SpillError> {
        self.forget(key);
        self.maybe_compact()
    }

    fn contains(&self, key: Key) -> bool {
        self.index.contains_key(&key)
    }

    fn len(&self) -> u64 {
        self.index.len() as u64
    }

    fn keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self.index.keys().copied().collect();
        keys.sort_unstable();
        keys
    }
}

/// Writes a spill-format file of `records` (keys as given) at `path`: what a checkpoint keeps
/// of a node's spill. Returns the bytes written.
pub fn write_file(
    path: &Path,
    records: impl IntoIterator<Item = Result<(Key, Vec<f32>), SpillError>>,
) -> Result<u64, SpillError> {
    write_file_summed(path, records).map(|(bytes, _)| bytes)
}

/// [`write_file`], also returning the CRC-32 of the whole file (what a checkpoint's manifest
/// lists for it), computed from the bytes as they are written (no second read).
pub(crate) fn write_file_summed(
    path: &Path,
    records: impl IntoIterator<Item = Result<(Key, Vec<f32>), SpillError>>,
) -> Result<(u64, u32), SpillError> {
    let file = File::create(path).map_err(io_err(path, "create", 0))?;
    let mut out = BufWriter::with_capacity(BUF, file);
    let mut crc = crc32fast::Hasher::new();
    out.write_all(MAGIC).map_err(io_err(path, "write", 0))?;
    crc.update(MAGIC);
    let (mut at, mut bytes) = (MAGIC.len() as u64, Vec::new());
    for record in records {
        let (key, record) = record?;
        bytes.clear();
        encode(key, &record, &mut bytes);
        out.write_all(&bytes).map_err(io_err(path, "write", at))?;
        crc.update(&bytes);
        at += bytes.len() as u64;
    }
    let file = out
        .into_inner()
        .map_err(|e| io_err(path, "write", at)(e.into_error()))?;
    file.sync_all().map_err(io_err(path, "sync", at))?;
    Ok((at, crc.finalize()))
}

/// Reads every record of the spill-format file at `path` in order (records of at most `max_len`
/// floats), checking each; `f` gets the key, the record and its offset.
pub fn read_file<E: From<SpillError>>(
    path: &Path,
    max_len: u32,
    mut f: impl FnMut(Key, &[f32], u64) -> Result<(), E>,
) -> Result<u64, E> {
    let file = File::open(path).map_err(io_err(path, "open", 0))?;
    let end = file.metadata().map_err(io_err(path, "stat", 0))?.len();
    let mut input = BufReader::with_capacity(BUF, file);
    let mut magic = [0u8; 8];
    input
        .read_exact(&mut magic)
        .map_err(|_| damaged(path, 0, "too short for a spill file"))?;
    if &magic != MAGIC {
        return Err(damaged(path, 0, "not a roam spill file (bad magic)").into());
    }
    let (mut at, mut values, mut record, mut n) = (MAGIC.len() as u64, Vec::new(), Vec::new(), 0);
    while at < end {
        let mut head = [0u8; HEADER as usize];
        if end - at < HEADER {
            return Err(damaged(path, at, "truncated: a partial record header").into());
        }
        input
            .read_exact(&mut head)
            .map_err(io_err(path, "read", at))?;
        let header = check_header(path, at, &head, max_len, end)?;
        values.resize(4 * header.1 as usize, 0);
        input
            .read_exact(&mut values)
            .map_err(io_err(path, "read", at))?;
        check_values(path, at, header, &values, &mut record)?;
        f(header.0, &record, at)?;
        at += HEADER + values.len() as u64;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("roam-spill-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("s.bin")
    }

    fn all(path: &Path) -> Result<Vec<(Key, Vec<f32>)>, SpillError> {
        let mut out = Vec::new();
        read_file::<SpillError>(path, 8, |k, r, _| {
            out.push((k, r.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn records_round_trip_through_buffer_file_and_compaction() {
        let path = temp("round");
        let mut spill = FileSpill::create(&path, 4).unwrap();
        let mut out = Vec::new();
        // Enough replacements to pass COMPACT_MIN with mostly stale bytes.
        let rows = 64u64;
        let rounds = COMPACT_MIN / (rows * 32) + 2;
        for round in 0..rounds {
            for key in 0..rows {
                let v = (round * rows + key) as f32;
                spill.put(key, &[v, -v, 0.5, 1.0]).unwrap();
            }
        }
        assert!(spill.compactions() > 0, "{} bytes", spill.bytes());
        assert!(spill.bytes() < COMPACT_MIN);
        for key in 0..rows {
            let v = ((rounds - 1) * rows + key) as f32;
            assert!(spill.get(key, &mut out).unwrap());
            assert_eq!(out, [v, -v, 0.5, 1.0]);
        }
        assert!(spill.take(3, &mut out).unwrap() && !spill.contains(3));
        assert_eq!(spill.len(), rows - 1);
        assert!(!spill.get(3, &mut out).unwrap());
        spill.flush().unwrap();
        // The file itself reads back: the live records plus stale ones since compaction.
        assert!(all(&path).unwrap().len() as u64 >= rows - 1);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_truncated_file_is_named_with_the_offset() {
        let path = temp("trunc");
        let mut spill = FileSpill::create(&path, 4).unwrap();
        spill.put(7, &[1.0, 2.0]).unwrap();
        spill.put(8, &[3.0, 4.0]).unwrap();
        spill.flush().unwrap();
        // The second record starts at 8 + 24 = 32; cut it in the middle of its values.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(32 + 18).unwrap();
        let err = spill.get(8, &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(
            err.contains("offset 32") && err.contains("truncated"),
            "{err}"
        );
        let err = all(&path).unwrap_err().to_string();
        assert!(
            err.contains("offset 32") && err.contains("truncated"),
            "{err}"
        );
        // Key 7 is intact.
        let mut out = Vec::new();
        assert!(spill.get(7, &mut out).unwrap());
        assert_eq!(out, [1.0, 2.0]);
        f.set_len(32 + 5).unwrap();
        let err = all(&path).unwrap_err().to_string();
        assert!(err.contains("partial record header"), "{err}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_bad_checksum_or_length_is_an_error_not_a_panic() {
        let path = temp("crc");
        let mut spill = FileSpill::create(&path, 4).unwrap();
        spill.put(5, &[1.0, 2.0, 3.0]).unwrap();
        spill.flush().unwrap();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        // Flip a bit of the values.
        f.write_all_at(&[0xff], 8 + 16 + 5).unwrap();
        let err = spill.get(5, &mut Vec::new()).unwrap_err().to_string();
        assert!(
            err.contains("bad checksum") && err.contains("offset 8"),
            "{err}"
        );
        // A length beyond the key space's longest record.
        f.write_all_at(&1_000_000u32.to_le_bytes(), 8 + 8).unwrap();
        let err = spill.get(5, &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains("record length 1000000 exceeds"), "{err}");
        let err = all(&path).unwrap_err().to_string();
        assert!(err.contains("record length 1000000 exceeds"), "{err}");
        // A length within bounds but past the file's end.
        f.write_all_at(&4u32.to_le_bytes(), 8 + 8).unwrap();
        let err = all(&path).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        // Not a spill file at all.
        f.write_all_at(b"NOTSPILL", 0).unwrap();
        assert!(all(&path).unwrap_err().to_string().contains("bad magic"));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn write_file_and_read_file_agree() {
        let path = temp("ckpt");
        let records = vec![(1u64, vec![1.0f32, 2.0]), (9, vec![3.0, 4.0, 5.0])];
        write_file(&path, records.clone().into_iter().map(Ok)).unwrap();
        assert_eq!(all(&path).unwrap(), records);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
