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
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::Scope;

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

/// The CRC-32 of a whole file of `size` bytes from its chunks' CRCs (`crcs`, chunks of
/// `chunk` bytes): the file is hashed once, by chunks, and its whole CRC is combined from
/// theirs rather than hashed a second time.
pub(crate) fn whole_crc(crcs: &[u32], size: u64, chunk: u64) -> u32 {
    let mut whole = crc32fast::Hasher::new();
    for (i, &crc) in crcs.iter().enumerate() {
        let len = chunk.min(size - i as u64 * chunk);
        whole.combine(&crc32fast::Hasher::new_with_initial_len(crc, len));
    }
    whole.finalize()
}

/// How far ahead of the chunk just read a reader asks the kernel to read (at least this many
/// bytes, and at least [`AHEAD_CHUNKS`] chunks): a restore used to advise only the next chunk,
/// so the disk idled while a chunk's records were loaded and the CPU idled while the next one
/// arrived; with a window of several chunks in flight the two overlap.
const AHEAD_BYTES: u64 = 32 << 20;
/// See [`AHEAD_BYTES`].
const AHEAD_CHUNKS: u64 = 4;

/// Chunks a prefetcher may have read and verified, waiting for its reader (a further one may
/// be being read meanwhile).
const PREFETCHED: usize = 3;

/// A chunk read and verified by a prefetcher: its index, its bytes (the first `len` of the
/// buffer) or why it could not be.
type Fetched = Result<(u64, Vec<u64>, usize), RestoreError>;

/// The receiving end of a prefetcher ([`prefetch`]): the chunks it read, in order, and the way
/// back for buffers the reader is done with (so that a restore reuses a few buffers).
pub(crate) struct Feed {
    chunks: Receiver<Fetched>,
    spare: SyncSender<Vec<u64>>,
}

/// Starts a thread in `scope` that reads and verifies the chunks `needed` (ascending) of `shard`
/// and hands them, in that order, to the reader made with the returned feed
/// ([`ChunkReader::fed`]). It copies the page cache into its buffers and checks the CRCs while
/// the reader's thread loads records (the copies and the page faults of filling a store take
/// about as long), so a restore uses both cores of a machine. It stops at the first chunk that
/// fails, after handing over the error, and when the feed is dropped.
pub(crate) fn prefetch<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    shard: ShardFile<'env>,
    needed: Vec<u64>,
) -> Feed {
    let (file, chunk) = (shard.file, shard.chunk);
    let (chunks_tx, chunks) = mpsc::sync_channel(PREFETCHED);
    // A fixed pool of buffers, each allocated at its first use and reused after: those sent,
    // the one being filled, the reader's. (Allocating when none was back yet, and freeing the
    // extras, cost page faults and TLB shootdowns at every chunk and tripled the copy's time.)
    const POOL: usize = PREFETCHED + 2;
    let (spare, spare_rx) = mpsc::sync_channel::<Vec<u64>>(POOL);
    for _ in 0..POOL {
        spare
            .send(Vec::new())
            .expect("the receiver is alive and has room");
    }
    scope.spawn(move || {
        // The kernel reads a window of needed chunks ahead of the one being copied.
        let ahead = AHEAD_BYTES.div_ceil(chunk).max(AHEAD_CHUNKS) as usize;
        for &index in needed.iter().take(ahead) {
            advise(file, index * chunk, chunk);
        }
        for (i, &index) in needed.iter().enumerate() {
            if let Some(&later) = needed.get(i + ahead) {
                advise(file, later * chunk, chunk);
            }
            // A buffer comes back for every chunk the reader takes; none: the reader is gone.
            let Ok(mut buf) = spare_rx.recv() else {
                return;
            };
            let fetched = shard
                .read_chunk(index, &mut buf)
                .map(|len| (index, buf, len));
            let failed = fetched.is_err();
            if chunks_tx.send(fetched).is_err() || failed {
                return;
            }
        }
    });
    Feed { chunks, spare }
}

/// Asks the kernel to start reading `len` bytes of `file` from `at`. Advice only: its failure
/// changes nothing.
fn advise(file: &File, at: u64, len: u64) {
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open for as
    // long as `file` is borrowed.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            at as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        );
    }
}

/// A shard file as its readers see it: `size` bytes in chunks of `chunk` bytes whose CRCs are
/// `crcs` (checked against each other by the caller); `path` names it in errors.
#[derive(Clone, Copy)]
pub(crate) struct ShardFile<'a> {
    pub(crate) file: &'a File,
    pub(crate) path: &'a Path,
    pub(crate) size: u64,
    pub(crate) chunk: u64,
    pub(crate) crcs: &'a [u32],
}

impl ShardFile<'_> {
    /// Reads chunk `index` into `buf` (grown to a chunk once) and verifies it; returns its
    /// length.
    fn read_chunk(self, index: u64, buf: &mut Vec<u64>) -> Result<usize, RestoreError> {
        let ShardFile {
            file,
            path,
            size,
            chunk,
            crcs,
        } = self;
        let start = index * chunk;
        let end = (start + chunk).min(size);
        let err = |reason: String| RestoreError::Shard {
            path: path.to_path_buf(),
            reason,
        };
        let Some(&expected) = crcs.get(index as usize).filter(|_| start < end) else {
            return Err(err(format!("byte {start} lies outside the file")));
        };
        let len = (end - start) as usize;
        if buf.len() * 8 < len {
            // Once per buffer (every chunk but the last has the full size); no zeroing after.
            *buf = vec![0u64; (chunk as usize).div_ceil(8)];
        }
        let bytes = &mut bytemuck::cast_slice_mut(buf)[..len];
        file.read_exact_at(bytes, start)
            .map_err(|e| err(format!("read at byte {start}: {e}")))?;
        let crc = crc32fast::hash(bytes);
        if crc != expected {
            return Err(err(format!(
                "chunk {index} (bytes {start}..{end}): checksum {crc:08x}, the manifest says \
                 {expected:08x} (file damaged)"
            )));
        }
        Ok(len)
    }
}

/// Reads a shard by verified chunks, keeping the last one read: a forward cursor over the
/// file (each region of a shard gets its own).
pub(crate) struct ChunkReader<'a> {
    shard: ShardFile<'a>,
    /// Where the chunks come from when a prefetcher reads them (in the order asked for).
    feed: Option<Feed>,
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
    /// A reader of `shard`.
    pub(crate) fn new(shard: ShardFile<'a>) -> Self {
        Self {
            shard,
            feed: None,
            held: None,
            buf: Vec::new(),
            len: 0,
            advised: 0,
            bytes_read: 0,
        }
    }

    /// This reader, taking its chunks from a prefetcher: it must then ask for exactly the
    /// chunks the prefetcher was given, in their order (another chunk is refused, and
    /// [`ChunkReader::finish`] refuses fewer).
    pub(crate) fn fed(self, feed: Feed) -> Self {
        Self {
            feed: Some(feed),
            ..self
        }
    }

    /// For a fed reader: that it took every chunk its prefetcher was given (a reader that
    /// took fewer read chunks for nothing: its caller listed more than it loads).
    pub(crate) fn finish(self) -> Result<(), RestoreError> {
        match self.feed.map(|feed| feed.chunks.recv()) {
            Some(Ok(Ok((index, ..)))) => Err(RestoreError::Shard {
                path: self.shard.path.to_path_buf(),
                reason: format!("chunk {index} was prefetched but never used"),
            }),
            Some(Ok(Err(err))) => Err(err),
            // Disconnected: the prefetcher handed over everything it was given.
            Some(Err(_)) | None => Ok(()),
        }
    }

    fn held_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.buf)[..self.len]
    }

    /// Copies the file's bytes `[at, at + out.len())` into `out`, reading and verifying the
    /// chunks they lie in (the caller checked that the range lies in the file).
    pub(crate) fn read_at(&mut self, mut at: u64, mut out: &mut [u8]) -> Result<(), RestoreError> {
        while !out.is_empty() {
            let index = at / self.shard.chunk;
            if self.held != Some(index) {
                self.load(index)?;
            }
            let from = (at - index * self.shard.chunk) as usize;
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
        let index = at / self.shard.chunk;
        let from = (at - index * self.shard.chunk) as usize;
        let bytes = 4 * count;
        if from + bytes <= self.shard.chunk as usize {
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
    /// records are loaded.
    fn read_ahead(&mut self, from: u64) {
        let window = AHEAD_BYTES.max(AHEAD_CHUNKS * self.shard.chunk);
        let start = from.max(self.advised);
        let end = from.saturating_add(window).min(self.shard.size);
        // Ask in pieces of a quarter window, so that the advice keeps ahead as chunks are read.
        if end <= start || (end - start < window / 4 && end < self.shard.size) {
            return;
        }
        self.advised = end;
        advise(self.shard.file, start, end - start);
    }

    fn load(&mut self, index: u64) -> Result<(), RestoreError> {
        self.held = None;
        self.len = match &self.feed {
            Some(feed) => {
                let stopped = || RestoreError::Shard {
                    path: self.shard.path.to_path_buf(),
                    reason: format!("chunk {index}: the prefetching reader stopped"),
                };
                let (got, buf, len) = feed.chunks.recv().map_err(|_| stopped())??;
                if got != index {
                    return Err(RestoreError::Shard {
                        path: self.shard.path.to_path_buf(),
                        reason: format!("chunk {index} asked for, chunk {got} prefetched"),
                    });
                }
                let done = std::mem::replace(&mut self.buf, buf);
                // The pool's buffer back (not this reader's own empty one); the way back has
                // room for the whole pool, and fails only when the prefetcher is done.
                if !done.is_empty() {
                    let _ = feed.spare.try_send(done);
                }
                len
            }
            None => {
                let len = self.shard.read_chunk(index, &mut self.buf)?;
                self.read_ahead(index * self.shard.chunk + len as u64);
                len
            }
        };
        self.bytes_read += self.len as u64;
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

    proptest! {
        /// A whole file's CRC combined from its chunks' is the CRC of the file.
        #[test]
        fn whole_crc_of_chunk_crcs_is_the_files(
            file in proptest::collection::vec(any::<u8>(), 0..3000),
            chunk_log in 0u32..10,
        ) {
            let chunk = 1u64 << chunk_log;
            let crcs: Vec<u32> = file.chunks(chunk as usize).map(crc32fast::hash).collect();
            prop_assert_eq!(
                whole_crc(&crcs, file.len() as u64, chunk),
                crc32fast::hash(&file)
            );
        }
    }

    /// Chunk size of [`float_file`]'s files: 64 floats.
    const CHUNK: u64 = 256;

    /// A temporary file of 1,000 floats (`i × step`), its path, the file opened, and its
    /// chunks' CRCs.
    fn float_file(name: &str, step: f32) -> (Vec<f32>, std::path::PathBuf, File, Vec<u32>) {
        let floats: Vec<f32> = (0..1000).map(|i| i as f32 * step).collect();
        let bytes: &[u8] = bytemuck::cast_slice(&floats);
        let crcs = bytes.chunks(CHUNK as usize).map(crc32fast::hash).collect();
        let path = std::env::temp_dir().join(format!("roam-{name}-{}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let file = File::open(&path).unwrap();
        (floats, path, file, crcs)
    }

    /// Floats inside one chunk are used in place, floats across a chunk boundary are copied,
    /// and both are the file's; a damaged chunk is refused before any of its floats is used.
    #[test]
    fn floats_within_and_across_chunks_are_the_files() {
        let (floats, path, file, crcs) = float_file("chunks", 0.5);
        let (chunk, size) = (CHUNK, 4 * floats.len() as u64);
        let mut reader = ChunkReader::new(ShardFile {
            file: &file,
            path: &path,
            size,
            chunk,
            crcs: &crcs,
        });
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
        let mut reader = ChunkReader::new(ShardFile {
            file: &file,
            path: &path,
            size,
            chunk,
            crcs: &damaged,
        });
        let err = reader.floats(4 * 130, 4, &mut scratch).unwrap_err();
        assert!(err.to_string().contains("chunk 2"), "{err}");
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }

    /// A reader fed by a prefetcher gives the file's floats from the listed chunks (records
    /// across a chunk boundary included), refuses a chunk it was not given, and reports a
    /// damaged chunk by its index.
    #[test]
    fn a_prefetched_reader_gives_the_listed_chunks_and_refuses_others() {
        let (floats, path, file, crcs) = float_file("prefetch", 0.25);
        let (chunk, size) = (CHUNK, 4 * floats.len() as u64);
        let read = |crcs: &[u32], needed: Vec<u64>, asks: &[(usize, usize)]| {
            std::thread::scope(|scope| {
                let shard = ShardFile {
                    file: &file,
                    path: &path,
                    size,
                    chunk,
                    crcs,
                };
                let feed = prefetch(scope, shard, needed);
                let mut reader = ChunkReader::new(shard).fed(feed);
                let mut scratch = Vec::new();
                let mut got = Vec::new();
                for &(first, count) in asks {
                    got.extend_from_slice(reader.floats(4 * first as u64, count, &mut scratch)?);
                }
                let bytes_read = reader.bytes_read;
                reader.finish()?;
                Ok::<_, RestoreError>((got, bytes_read))
            })
        };
        // Floats 10..20 in chunk 0, 60..70 across chunks 0 and 1, 680..690 in chunk 10.
        let asks = [(10, 10), (60, 10), (680, 10)];
        let (got, bytes_read) = read(&crcs, vec![0, 1, 10], &asks).unwrap();
        let expected: Vec<f32> = asks
            .iter()
            .flat_map(|&(first, count)| floats[first..first + count].iter().copied())
            .collect();
        assert_eq!(got, expected);
        assert_eq!(bytes_read, 3 * chunk, "only the listed chunks");
        let err = read(&crcs, vec![0, 1, 10, 11], &asks).unwrap_err();
        assert!(
            err.to_string()
                .contains("chunk 11 was prefetched but never used"),
            "{err}"
        );
        let err = read(&crcs, vec![0, 1, 9], &asks).unwrap_err();
        assert!(
            err.to_string().contains("chunk 10 asked for, chunk 9"),
            "{err}"
        );
        let mut damaged = crcs.clone();
        damaged[1] ^= 1;
        let err = read(&damaged, vec![0, 1, 10], &asks).unwrap_err();
        assert!(
            err.to_string().contains("chunk 1 (bytes 256..512)"),
            "{err}"
        );
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
