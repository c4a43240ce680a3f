//! Framed TCP links between nodes: one outgoing connection per ordered node pair.
//!
//! A [`Link`] is the sending half towards one peer. Frames are queued while the node lock is held,
//! which fixes their order, and written after it is released by whichever thread gets the
//! link's writer first ("flat combining"): it drains the queue and writes everything with
//! vectored writes, header and body slices straight from the frames, no copy. Receiving is
//! [`read_frame`]: a fixed header, validated and bounded before the body is allocated, then the
//! body read into an aligned buffer that the core views in place.
//!
//! Invariants:
//! - Frames leave a link in the order they were enqueued (per-link FIFO, which the protocol
//!   relies on).
//! - A frame enqueued is written by some thread without further calls: a flusher re-checks the
//!   queue after releasing the writer.
//! - With latency emulation, a frame is written no earlier than its enqueue time plus the
//!   latency, by the link's own sender thread.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use roam_core::NodeId;
use roam_core::stats::{NodeCounters, add};
use roam_core::wire::{DecodeError, Frame, HEADER_LEN, Header, Limits};

/// Where a link's frames go.
pub(crate) enum Sink {
    /// A TCP connection to a peer.
    Tcp(TcpStream),
    /// This node itself (without fast local access): frames are handed to the node's own
    /// server thread, as a classic parameter server would.
    Loopback(std::sync::mpsc::Sender<Frame>),
}

struct Outgoing {
    due: Instant,
    frame: Frame,
}

/// The sending half towards one node.
pub(crate) struct Link {
    pub(crate) peer: NodeId,
    queue: Mutex<VecDeque<Outgoing>>,
    sink: Mutex<Sink>,
    latency: Duration,
    wake: Condvar,
    broken: AtomicBool,
    closed: AtomicBool,
    counters: Arc<NodeCounters>,
}

impl Link {
    pub(crate) fn new(
        peer: NodeId,
        sink: Sink,
        latency: Duration,
        counters: Arc<NodeCounters>,
    ) -> Self {
        Self {
            peer,
            queue: Mutex::new(VecDeque::new()),
            sink: Mutex::new(sink),
            latency,
            wake: Condvar::new(),
            broken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            counters,
        }
    }

    /// Whether frames are held back by a sender thread (latency emulation) rather than written
    /// by the enqueuing thread.
    pub(crate) fn delayed(&self) -> bool {
        !self.latency.is_zero()
    }

    /// Queues a frame; call with the node lock held so that queue order is protocol order.
    pub(crate) fn enqueue(&self, frame: Frame) {
        let due = Instant::now() + self.latency;
        self.queue.lock().push_back(Outgoing { due, frame });
        if self.delayed() {
            self.wake.notify_one();
        }
    }

    /// Writes out everything queued (no-op with latency emulation: the sender thread does it).
    /// An error means the link is broken and the peer must be considered lost.
    pub(crate) fn flush(&self) -> io::Result<()> {
        if self.delayed() {
            return Ok(());
        }
        let mut batch = Vec::new();
        loop {
            let Some(mut sink) = self.sink.try_lock() else {
                // The holder re-checks the queue after releasing, so our frames go out.
                return Ok(());
            };
            batch.extend(self.queue.lock().drain(..).map(|o| o.frame));
            if batch.is_empty() {
                return Ok(());
            }
            let result = self.write_batch(&mut sink, &mut batch);
            drop(sink);
            result?;
            if self.queue.lock().is_empty() {
                return Ok(());
            }
        }
    }

    /// Sender-thread body for latency emulation: writes each frame once it is due.
    pub(crate) fn run_delayed_sender(&self) -> io::Result<()> {
        let mut batch = Vec::new();
        loop {
            {
                let mut queue = self.queue.lock();
                loop {
                    if self.closed.load(Ordering::Acquire) && queue.is_empty() {
                        return Ok(());
                    }
                    match queue.front() {
                        Some(first) if first.due <= Instant::now() => break,
                        Some(first) => {
                            let due = first.due;
                            self.wake.wait_until(&mut queue, due);
                        }
                        None => self.wake.wait(&mut queue),
                    }
                }
                let now = Instant::now();
                while queue.front().is_some_and(|o| o.due <= now) {
                    batch.push(queue.pop_front().expect("checked").frame);
                }
            }
            let mut sink = self.sink.lock();
            self.write_batch(&mut sink, &mut batch)?;
        }
    }

    /// Stops the delayed sender once its queue is empty.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_all();
    }

    fn write_batch(&self, sink: &mut Sink, batch: &mut Vec<Frame>) -> io::Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            batch.clear();
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("link to {} is broken", self.peer),
            ));
        }
        let bytes: usize = batch.iter().map(Frame::wire_len).sum();
        add(&self.counters.messages_sent, batch.len() as u64);
        add(&self.counters.bytes_sent, bytes as u64);
        let result = match sink {
            Sink::Tcp(stream) => write_frames(stream, batch),
            Sink::Loopback(tx) => batch
                .drain(..)
                .try_for_each(|f| tx.send(f))
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "loopback server stopped")),
        };
        batch.clear();
        if result.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
        result
    }

    /// Shuts the TCP connection down (both directions), waking a peer's reader with EOF.
    pub(crate) fn shutdown_socket(&self) {
        if let Sink::Tcp(stream) = &*self.sink.lock() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Writes frames with vectored writes: header and body of each frame as separate slices.
pub(crate) fn write_frames(stream: &mut impl Write, frames: &[Frame]) -> io::Result<()> {
    // Bound the number of slices per call (IOV_MAX is 1024 on Linux).
    const FRAMES_PER_CALL: usize = 256;
    for group in frames.chunks(FRAMES_PER_CALL) {
        let headers: Vec<[u8; HEADER_LEN]> = group.iter().map(|f| f.header.encode()).collect();
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(group.len() * 2);
        for (header, frame) in headers.iter().zip(group) {
            slices.push(IoSlice::new(header));
            if !frame.body_bytes().is_empty() {
                slices.push(IoSlice::new(frame.body_bytes()));
            }
        }
        let mut remaining: &mut [IoSlice<'_>] = &mut slices;
        while !remaining.is_empty() {
            let n = stream.write_vectored(remaining)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "connection closed while writing",
                ));
            }
            IoSlice::advance_slices(&mut remaining, n);
        }
    }
    Ok(())
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The peer closed the connection at a frame boundary.
    #[error("connection closed")]
    Closed,
    /// The bytes are not a valid frame.
    #[error("invalid frame: {0}")]
    Decode(#[from] DecodeError),
    /// The connection failed (reset, timeout).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads one frame: header first, validated and bounded, then an aligned body.
pub(crate) fn read_frame(reader: &mut impl Read, limits: &Limits) -> Result<Frame, ReadError> {
    let mut head = [0u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        match reader.read(&mut head[filled..]) {
            Ok(0) if filled == 0 => return Err(ReadError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let header = Header::decode(&head, limits)?;
    let mut body = Frame::body_buffer(&header);
    reader.read_exact(bytemuck::cast_slice_mut(&mut body))?;
    Ok(Frame::from_parts(header, body).expect("body sized from the header"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use roam_core::ReqId;
    use roam_core::wire::Kind;

    #[test]
    fn frames_survive_a_byte_stream_in_order() {
        let mut frames = Vec::new();
        for i in 0..300u64 {
            let mut f = Frame::new(Kind::Push, NodeId(1), ReqId(i), 0, &[i, i + 1], 3);
            f.values_mut().copy_from_slice(&[i as f32, 1.0, 2.0]);
            frames.push(f);
        }
        let mut wire = Vec::new();
        write_frames(&mut wire, &frames).unwrap();
        let mut reader = &wire[..];
        for expected in &frames {
            assert_eq!(
                &read_frame(&mut reader, &Limits::default()).unwrap(),
                expected
            );
        }
        assert!(matches!(
            read_frame(&mut reader, &Limits::default()),
            Err(ReadError::Closed)
        ));
    }

    #[test]
    fn oversized_announcements_fail_before_reading_the_body() {
        let frame = Frame::new(Kind::Pull, NodeId(0), ReqId(0), 0, &[1, 2, 3], 0);
        let bytes = frame.to_bytes();
        let limits = Limits {
            max_keys: 2,
            max_values: 2,
        };
        let err = read_frame(&mut &bytes[..], &limits).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::Decode(DecodeError::TooLarge { what: "keys", .. })
            ),
            "{err}"
        );
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics_on_random_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut reader = &bytes[..];
            let limits = Limits { max_keys: 1024, max_values: 1024 };
            while read_frame(&mut reader, &limits).is_ok() {}
        }
    }
}
