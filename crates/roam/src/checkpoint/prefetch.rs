//! A reader thread for a shard's chunks: while a restore copies the records of chunk `i` into
//! the store (the kernel zero-filling the store's fresh pages as it goes), this thread reads
//! the next chunks from the file and computes their CRC-32, so that the disk, the page-cache
//! copy and the checksum overlap with the filling instead of alternating with it (issue #16,
//! docs/reliability.md "Speed").
//!
//! Invariants: the consumer ([`super::chunks::ChunkReader`]) still compares every chunk's CRC
//! with the manifest before handing out a byte of it; a chunk is only ever read ahead (never
//! instead of a read the consumer needs: a chunk not requested, or whose read failed, is read
//! again by the consumer itself, which reports the error); at most `depth` chunks are in
//! flight, so the thread reads at most `depth` chunks the consumer never takes (counted in the
//! restore's `bytes_read`); dropping the prefetcher ends the thread after its current read.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// A chunk to read: file bytes `[start, start + len)` into `buf`.
struct Request {
    index: u64,
    start: u64,
    len: usize,
    buf: Vec<u64>,
}

/// A chunk read ahead: its bytes (the first `len` of `buf`) and their CRC-32, or the read's
/// error.
pub(crate) struct Reply {
    pub(crate) index: u64,
    pub(crate) buf: Vec<u64>,
    pub(crate) len: usize,
    pub(crate) crc: std::io::Result<u32>,
}

/// The reader thread and the chunks asked of it, in file order.
pub(crate) struct Prefetcher {
    requests: Option<mpsc::Sender<Request>>,
    replies: mpsc::Receiver<Reply>,
    in_flight: VecDeque<u64>,
    /// Buffers of chunk size, for the next requests.
    spare: Vec<Vec<u64>>,
    words: usize,
    depth: usize,
    thread: Option<JoinHandle<()>>,
}

impl Prefetcher {
    /// A thread reading chunks of `chunk` bytes of `file` (its own handle of it), at most
    /// `depth` ahead of the consumer. `None` if the thread or the handle cannot be had: the
    /// consumer then reads everything itself.
    pub(crate) fn new(file: &File, chunk: u64, depth: usize) -> Option<Self> {
        let file = file.try_clone().ok()?;
        let (requests, rx) = mpsc::channel::<Request>();
        let (tx, replies) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("roam-restore-read".into())
            .spawn(move || {
                for Request {
                    index,
                    start,
                    len,
                    mut buf,
                } in rx
                {
                    let bytes = &mut bytemuck::cast_slice_mut(&mut buf)[..len];
                    let crc = file
                        .read_exact_at(bytes, start)
                        .map(|()| crc32fast::hash(bytes));
                    if tx
                        .send(Reply {
                            index,
                            buf,
                            len,
                            crc,
                        })
                        .is_err()
                    {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Self {
            requests: Some(requests),
            replies,
            in_flight: VecDeque::new(),
            spare: Vec::new(),
            words: (chunk as usize).div_ceil(8),
            depth,
            thread: Some(thread),
        })
    }

    /// How many chunks it reads ahead at most.
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// Whether chunk `index` was asked for and not yet taken.
    pub(crate) fn has(&self, index: u64) -> bool {
        self.in_flight.contains(&index)
    }

    /// Asks for chunk `index` (file bytes `[start, start + len)`), unless `depth` chunks are in
    /// flight; returns whether it was asked for.
    pub(crate) fn request(&mut self, index: u64, start: u64, len: usize) -> bool {
        if self.in_flight.len() >= self.depth || self.has(index) {
            return false;
        }
        let buf = self.spare.pop().unwrap_or_else(|| vec![0u64; self.words]);
        let Some(requests) = &self.requests else {
            return false;
        };
        if requests
            .send(Request {
                index,
                start,
                len,
                buf,
            })
            .is_err()
        {
            return false;
        }
        self.in_flight.push_back(index);
        true
    }

    /// Chunk `index` if it was asked for (waiting for its read); the chunks asked for before it
    /// were skipped by the consumer and are dropped (their buffers kept). `None` if it was not
    /// asked for or the thread is gone: the consumer reads it itself.
    pub(crate) fn take(&mut self, index: u64) -> Option<Reply> {
        while let Some(&front) = self.in_flight.front() {
            if front > index {
                return None;
            }
            self.in_flight.pop_front();
            let reply = self.replies.recv().ok()?;
            if reply.index == index {
                return Some(reply);
            }
            self.spare.push(reply.buf);
        }
        None
    }

    /// Returns a chunk buffer for later requests.
    pub(crate) fn recycle(&mut self, buf: Vec<u64>) {
        if buf.len() == self.words {
            self.spare.push(buf);
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        // Closing the requests ends the thread's loop after its current read.
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
