//! Chunk checksums of a shard file: the CRC-32 of every `chunk_bytes` piece of the file,
//! listed in the manifest, so that a restoring node verifies exactly the parts of a shard it
//! reads and skips the rest (the values of keys homed elsewhere).
//!
//! Invariants: chunk `i` covers the file's bytes `[i * chunk, min((i + 1) * chunk, size))`;
//! the writer hashes each region's bytes at their file offsets and combines a chunk's pieces in
//! file order (the regions are contiguous and in file order), so the list equals what hashing
//! the finished file chunk by chunk gives; the reader hands out no byte of a chunk before the
//! chunk's CRC matched, and reads whole chunks only (large sequential reads).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::RestoreError;

/// Smallest chunk (small shards, as in tests, still get several chunks).
pub(crate) const MIN_CHUNK: u64 = 256;
/// Largest chunk: the unit of a restore's reads.
pub(crate) const MAX_CHUNK: u64 = 4 << 20;

/// The chunk size of a shard of `size` bytes: about 64 chunks, a power of two within
/// [`MIN_CHUNK`]..=[`MAX_CHUNK`].
pub(crate) fn chunk_bytes(size: u64) -> u64 {
    (size / 64)
        .max(1)
        .next_power_of_two()
        .clamp(MIN_CHUNK, MAX_CHUNK)
}

/// The chunk CRCs of one region of a file being written, from its first byte's offset on.
pub(crate) struct ChunkHasher {
    chunk: u64,
    /// File offset of the next byte.
    at: u64,
    /// Index of `crcs[0]`'s chunk.
    first: u64,
    crcs: Vec<crc32fast::Hasher>,
}

impl ChunkHasher {
    /// A region starting at file offset `at`, in chunks of `chunk` bytes.
    pub(crate) fn new(chunk: u64, at: u64) -> Self {
        Self {
            chunk,
            at,
            first: at / chunk,
            crcs: Vec::new(),
        }
    }

    /// Hashes the region's next bytes.
    pub(crate) fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let index = (self.at / self.chunk - self.first) as usize;
            if index == self.crcs.len() {
                self.crcs.push(crc32fast::Hasher::new());
            }
            let room = (self.chunk - self.at % self.chunk) as usize;
            let (piece, rest) = bytes.split_at(room.min(bytes.len()));
            self.crcs[index].update(piece);
            self.at += piece.len() as u64;
            bytes = rest;
        }
    }

    /// The CRCs of a file of `size` bytes made of `regions` (in file order, together covering
    /// it).
    pub(crate) fn combine(regions: &[&Self], size: u64, chunk: u64) -> Vec<u32> {
        (0..size.div_ceil(chunk))
            .map(|i| {
                let mut crc = crc32fast::Hasher::new();
                for r in regions {
                    if let Some(part) = i.checked_sub(r.first).and_then(|j| r.crcs.get(j as usize))
                    {
                        crc.combine(part);
                    }
                }
                crc.finalize()
            })
            .collect()
    }
}

/// How far ahead of the chunk just read a reader asks the kernel to read (at least this many
/// bytes, and at least [`AHEAD_CHUNKS`] chunks): a restore used to advise only the next chunk,
/// so the disk idled while a chunk's records were loaded and the CPU idled while the next one
/// arrived; with a window of several chunks in flight the two overlap.
const AHEAD_BYTES: u64 = 32 << 20;
/// See [`AHEAD_BYTES`].
const AHEAD_CHUNKS: u64 = 4;

/// Reads a shard by verified chunks, keeping the last one read: a forward cursor over the
/// file (each region of a shard gets its own).
pub(crate) struct ChunkReader<'a> {
    file: &'a File,
    path: &'a Path,
    size: u64,
    chunk: u64,
    crcs: &'a [u32],
    /// The chunk in `buf`.
    held: Option<u64>,
    /// The held chunk's bytes (the first `len`), in 8-byte words so that the values in it can
    /// be used in place as `f32`s (a chunk starts at a multiple of 256 in the file, and the
    /// values region at a multiple of 8).
    buf: Vec<u64>,
    len: usize,
    /// The file offset up to which read-ahead was asked for.
    advised: u64,
    /// Bytes read from the file so far.
    pub(crate) bytes_read: u64,
}

impl<'a> ChunkReader<'a> {
    /// A reader of `file` (`size` bytes) whose chunks of `chunk` bytes have the CRCs `crcs`
    /// (checked against each other by the caller).
    pub(crate) fn new(
        file: &'a File,
        path: &'a Path,
        size: u64,
        chunk: u64,
        crcs: &'a [u32],
    ) -> Self {
        Self {
            file,
            path,
            size,
            chunk,
            crcs,
            held: None,
            buf: Vec::new(),
            len: 0,
            advised: 0,
            bytes_read: 0,
        }
    }

    fn held_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.buf)[..self.len]
    }

    /// Copies the file's bytes `[at, at + out.len())` into `out`, reading and verifying the
    /// chunks they lie in (the caller checked that the range lies in the file).
    pub(crate) fn read_at(&mut self, mut at: u64, mut out: &mut [u8]) -> Result<(), RestoreError> {
        while !out.is_empty() {
            let index = at / self.chunk;
            if self.held != Some(index) {
                self.load(index)?;
            }
            let from = (at - index * self.chunk) as usize;
            let n = out.len().min(self.len - from);
            let (now, rest) = out.split_at_mut(n);
            now.copy_from_slice(&self.held_bytes()[from..from + n]);
            out = rest;
            at += n as u64;
        }
        Ok(())
    }

    /// The `count` little-endian `f32`s at file offset `at` (a multiple of 4; the caller
    /// checked that they lie in the file): used in place when they lie in one chunk (nearly
    /// always: records are much shorter than chunks), else copied into `scratch`.
    pub(crate) fn floats<'s>(
        &'s mut self,
        at: u64,
        count: usize,
        scratch: &'s mut Vec<f32>,
    ) -> Result<&'s [f32], RestoreError> {
        if count == 0 {
            return Ok(&[]);
        }
        let index = at / self.chunk;
        let from = (at - index * self.chunk) as usize;
        let bytes = 4 * count;
        if from + bytes <= self.chunk as usize {
            if self.held != Some(index) {
                self.load(index)?;
            }
            if from + bytes <= self.len {
                // Aligned: `buf` is 8-aligned and `from` a multiple of 4.
                return Ok(bytemuck::cast_slice(&self.held_bytes()[from..from + bytes]));
            }
        }
        scratch.resize(count, 0.0);
        self.read_at(at, bytemuck::cast_slice_mut(scratch))?;
        Ok(scratch)
    }

    /// Asks the kernel to start reading the file from `from` to a window ahead (the chunks a
    /// forward reader most likely needs next), so that the disk works while this chunk's
    /// records are loaded. Advice only: its failure changes nothing.
    fn read_ahead(&mut self, from: u64) {
        let window = AHEAD_BYTES.max(AHEAD_CHUNKS * self.chunk);
        let start = from.max(self.advised);
        let end = from.saturating_add(window).min(self.size);
        // Ask in pieces of a quarter window, so that the advice keeps ahead as chunks are read.
        if end <= start || (end - start < window / 4 && end < self.size) {
            return;
        }
        self.advised = end;
        // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open for
        // as long as `self.file` is borrowed.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                start as libc::off_t,
                (end - start) as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }

    fn load(&mut self, index: u64) -> Result<(), RestoreError> {
        let start = index * self.chunk;
        let end = (start + self.chunk).min(self.size);
        let err = |reason: String| RestoreError::Shard {
            path: self.path.to_path_buf(),
            reason,
        };
        let Some(&expected) = self.crcs.get(index as usize).filter(|_| start < end) else {
            return Err(err(format!("byte {start} lies outside the file")));
        };
        self.held = None;
        let len = (end - start) as usize;
        if self.buf.len() * 8 < len {
            // Once per reader (every chunk but the last has the full size); no zeroing after.
            self.buf = vec![0u64; (self.chunk as usize).div_ceil(8)];
        }
        self.len = len;
        let bytes = &mut bytemuck::cast_slice_mut(&mut self.buf)[..len];
        self.file
            .read_exact_at(bytes, start)
            .map_err(|e| err(format!("read at byte {start}: {e}")))?;
        self.bytes_read += end - start;
        self.read_ahead(end);
        let crc = crc32fast::hash(self.held_bytes());
        if crc != expected {
            return Err(err(format!(
                "chunk {index} (bytes {start}..{end}): checksum {crc:08x}, the manifest says \
                 {expected:08x} (file damaged)"
            )));
        }
        self.held = Some(index);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Regions hashed piecewise at their offsets give the CRCs of the whole file's chunks.
        #[test]
        fn region_hashes_combine_into_the_files_chunk_crcs(
            file in proptest::collection::vec(any::<u8>(), 1..3000),
            cuts in proptest::collection::vec(0usize..3000, 0..4),
            pieces in 1usize..50,
            chunk_log in 0u32..10,
        ) {
            let chunk = 1u64 << chunk_log;
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % file.len()).collect();
            bounds.extend([0, file.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let regions: Vec<ChunkHasher> = bounds
                .windows(2)
                .map(|w| {
                    let mut h = ChunkHasher::new(chunk, w[0] as u64);
                    for piece in file[w[0]..w[1]].chunks(pieces) {
                        h.update(piece);
                    }
                    h
                })
                .collect();
            let refs: Vec<&ChunkHasher> = regions.iter().collect();
            let expected: Vec<u32> = file.chunks(chunk as usize).map(crc32fast::hash).collect();
            prop_assert_eq!(ChunkHasher::combine(&refs, file.len() as u64, chunk), expected);
        }
    }

    /// Floats inside one chunk are used in place, floats across a chunk boundary are copied,
    /// and both are the file's; a damaged chunk is refused before any of its floats is used.
    #[test]
    fn floats_within_and_across_chunks_are_the_files() {
        let floats: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let bytes: Vec<u8> = bytemuck::cast_slice(&floats).to_vec();
        let chunk = 256u64;
        let crcs: Vec<u32> = bytes.chunks(chunk as usize).map(crc32fast::hash).collect();
        let path = std::env::temp_dir().join(format!("roam-chunks-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let size = bytes.len() as u64;
        let mut reader = ChunkReader::new(&file, &path, size, chunk, &crcs);
        let mut scratch = Vec::new();
        // Floats 10..20 lie in chunk 0; 60..70 straddle chunks 0 and 1 (64 floats a chunk).
        for (first, count) in [(10usize, 10usize), (60, 10), (63, 1), (64, 64), (990, 10)] {
            let got = reader
                .floats(4 * first as u64, count, &mut scratch)
                .unwrap();
            assert_eq!(
                got,
                &floats[first..first + count],
                "floats {first}..+{count}"
            );
        }
        assert!(reader.floats(0, 0, &mut scratch).unwrap().is_empty());
        let mut damaged = crcs.clone();
        damaged[2] ^= 1;
        let mut reader = ChunkReader::new(&file, &path, size, chunk, &damaged);
        let err = reader.floats(4 * 130, 4, &mut scratch).unwrap_err();
        assert!(err.to_string().contains("chunk 2"), "{err}");
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn chunk_sizes_are_powers_of_two_within_bounds() {
        assert_eq!(chunk_bytes(0), MIN_CHUNK);
        assert_eq!(chunk_bytes(6_000), MIN_CHUNK);
        assert_eq!(chunk_bytes(64 << 10), 1 << 10);
        assert_eq!(chunk_bytes(1 << 30), MAX_CHUNK);
    }
}
