//! Framed TCP links between nodes: one outgoing connection per ordered node pair.
//!
//! A [`Link`] is the sending half towards one peer. Frames are queued while the node lock is held,
//! which fixes their order, and written after it is released by whichever thread gets the
//! link's writer first ("flat combining"): it drains the queue and writes everything with
//! vectored writes, header and body slices straight from the frames, no copy. Receiving is
//! [`read_frame`]: a fixed header, validated and bounded before the body is allocated, then the
//! body read into an aligned buffer that the core views in place.
//!
//! Sockets are written without blocking. What the kernel does not take at once stays in the
//! link's backlog and is finished by the link's own sender thread, so that no thread that
//! *reads* (a peer reader, the loopback server) ever blocks on a full socket: two nodes whose
//! readers both waited to write to each other would otherwise deadlock.
//!
//! Invariants:
//! - Frames leave a link in the order they were enqueued (per-link FIFO, which the protocol
//!   relies on): the backlog is always written before anything queued after it.
//! - A frame enqueued is written by some thread without further calls: a flusher re-checks the
//!   queue after releasing the writer, and the sender thread drains the queue after a backlog.
//! - With latency emulation, a frame is written no earlier than its enqueue time plus the
//!   latency, by the link's sender thread. The sender sleeps on a timer that the thread queueing
//!   a frame into the empty queue arms (`due_timer.rs`), so the emulation wakes it once per
//!   burst of frames, when they are due, as a wire would cost nothing at all.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use roam_core::NodeId;
use roam_core::stats::{NodeCounters, add};
use roam_core::wire::{DecodeError, Frame, HEADER_LEN, Header, Kind, Limits};

use crate::due_timer::DueTimer;
use crate::metrics::PeerTraffic;

/// Where a link's frames go.
pub(crate) enum Sink {
    /// A TCP connection to a peer (set to non-blocking by [`Link::new`]).
    Tcp(TcpStream),
    /// This node itself (without fast local access): frames are handed to the node's own
    /// server thread, as a classic parameter server would.
    Loopback(std::sync::mpsc::Sender<Frame>),
}

struct Outgoing {
    due: Instant,
    frame: Frame,
}

/// The sink and the frames it has started but not finished writing.
struct Writer {
    sink: Sink,
    backlog: VecDeque<Frame>,
    /// Bytes of the first backlog frame already written.
    written: usize,
}

/// The longest a sender thread sleeps without looking at its queue and flags.
const IDLE_WAIT: Duration = Duration::from_millis(200);

/// How long a closing link keeps trying to deliver its last frames to a peer that reads
/// nothing.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The sending half towards one node.
pub(crate) struct Link {
    pub(crate) peer: NodeId,
    queue: Mutex<VecDeque<Outgoing>>,
    writer: Mutex<Writer>,
    latency: Duration,
    /// Signalled (with `queue` held) when the sender thread has work (links without latency
    /// emulation: backlogs and closing).
    wake: Condvar,
    /// With latency emulation, the sender thread's clock: armed for the first queued frame's
    /// due time, by the thread that queues it (see `due_timer.rs`).
    timer: Option<DueTimer>,
    has_backlog: AtomicBool,
    broken: AtomicBool,
    closed: AtomicBool,
    counters: Arc<NodeCounters>,
    /// Frames and bytes exchanged with this peer (the reader adds what it receives).
    pub(crate) traffic: PeerTraffic,
}

impl Link {
    pub(crate) fn new(
        peer: NodeId,
        sink: Sink,
        latency: Duration,
        counters: Arc<NodeCounters>,
    ) -> io::Result<Self> {
        if let Sink::Tcp(stream) = &sink {
            stream.set_nonblocking(true)?;
        }
        let timer = if latency.is_zero() {
            None
        } else {
            Some(DueTimer::new()?)
        };
        Ok(Self {
            peer,
            queue: Mutex::new(VecDeque::new()),
            writer: Mutex::new(Writer {
                sink,
                backlog: VecDeque::new(),
                written: 0,
            }),
            latency,
            wake: Condvar::new(),
            timer,
            has_backlog: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            counters,
            traffic: PeerTraffic::default(),
        })
    }

    /// Whether frames are held back by the sender thread (latency emulation) rather than
    /// written by the enqueuing thread.
    pub(crate) fn delayed(&self) -> bool {
        !self.latency.is_zero()
    }

    /// Frames queued or partly written and not yet out (for the metrics; takes the link's
    /// locks briefly, skipping the backlog while a writer holds it).
    pub(crate) fn queued(&self) -> usize {
        let backlog = self.writer.try_lock().map_or(0, |w| w.backlog.len());
        self.queue.lock().len() + backlog
    }

    /// Queues a frame; call with the node lock held so that queue order is protocol order.
    pub(crate) fn enqueue(&self, frame: Frame) {
        let due = Instant::now() + self.latency;
        let mut queue = self.queue.lock();
        let was_empty = queue.is_empty();
        queue.push_back(Outgoing { due, frame });
        // With a frame queued before this one, the sender thread is already due to wake (at
        // that frame's time, no later than this one's: the latency is constant) or busy, and
        // looks at the queue again before it waits. Into an empty queue, the frame arms the
        // sender's timer: no wake-up now, one when the frame is due.
        if let (Some(timer), true) = (&self.timer, was_empty)
            && let Err(err) = timer.arm(due)
        {
            // The sender still looks at the queue within its idle limit.
            tracing::warn!(peer = self.peer.0, "arming the latency timer failed: {err}");
        }
    }

    /// Writes out what is queued, as far as the socket takes it without blocking; the sender
    /// thread finishes the rest. An error means the link is broken and the peer is lost.
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.flush_pausing_after_drain(|| {})
    }

    /// [`Link::flush`], calling `after_drain` while it holds the writer and has just drained the
    /// queue: the window in which another thread's frame is left to this flusher (tests stop a
    /// flusher there to make that interleaving happen every time).
    fn flush_pausing_after_drain(&self, after_drain: impl Fn()) -> io::Result<()> {
        if self.delayed() {
            return Ok(());
        }
        // Whoever holds the writer must look at the queue again *after* releasing it: a frame
        // queued while it held the writer was left to it by a flusher whose `try_lock` failed.
        loop {
            let Some(mut writer) = self.writer.try_lock() else {
                // The holder re-checks the queue after releasing, so our frames go out.
                return Ok(());
            };
            if !writer.backlog.is_empty() {
                // A backlog is only left with `has_backlog` set: the sender thread is finishing
                // it and drains the queue (and flushes) after it.
                return Ok(());
            }
            writer
                .backlog
                .extend(self.queue.lock().drain(..).map(|o| o.frame));
            after_drain();
            if !writer.backlog.is_empty() && !self.write_backlog(&mut writer)? {
                self.has_backlog.store(true, Ordering::Release);
                drop(writer);
                let _queue = self.queue.lock();
                self.wake.notify_one();
                return Ok(());
            }
            drop(writer);
            if self.queue.lock().is_empty() {
                return Ok(());
            }
        }
    }

    /// The sender thread: finishes backlogs the socket would not take at once, and with
    /// latency emulation writes every frame once it is due. Returns when the link is closed and
    /// everything is written (or the peer stopped reading for [`CLOSE_GRACE`]).
    pub(crate) fn run_sender(&self) -> io::Result<()> {
        let mut closing_since: Option<Instant> = None;
        loop {
            {
                let mut queue = self.queue.lock();
                loop {
                    let backlog = self.has_backlog.load(Ordering::Acquire);
                    if self.closed.load(Ordering::Acquire)
                        && !backlog
                        && (queue.is_empty() || !self.delayed())
                    {
                        return Ok(());
                    }
                    if backlog {
                        break;
                    }
                    match (queue.front(), &self.timer) {
                        (Some(first), Some(_)) if first.due <= Instant::now() => break,
                        (first, Some(timer)) => {
                            let due = first.map(|f| f.due);
                            Self::sleep_on(timer, &mut queue, due);
                        }
                        (_, None) => {
                            self.wake.wait_for(&mut queue, IDLE_WAIT);
                        }
                    }
                }
            }
            let mut writer = self.writer.lock();
            loop {
                if writer.backlog.is_empty() {
                    let now = Instant::now();
                    let mut queue = self.queue.lock();
                    while queue.front().is_some_and(|o| o.due <= now) {
                        writer
                            .backlog
                            .push_back(queue.pop_front().expect("checked").frame);
                    }
                }
                if writer.backlog.is_empty() {
                    break;
                }
                if !self.write_backlog(&mut writer)? {
                    if self.closed.load(Ordering::Acquire) {
                        let since = *closing_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > CLOSE_GRACE {
                            writer.backlog.clear();
                            break;
                        }
                    }
                    wait_writable(&writer.sink, Duration::from_millis(50));
                }
            }
            self.has_backlog.store(false, Ordering::Release);
            drop(writer);
            // A flusher that found the writer taken relied on us to write its frames.
            if !self.delayed() {
                self.flush()?;
            }
        }
    }

    /// A delayed link's sender sleeps, with the queue unlocked, until `due` (with no frame
    /// queued: until a frame queued into the empty queue arms the timer), or [`IDLE_WAIT`] at
    /// most. A timer that cannot be armed or waited on degrades to sleeping until `due`.
    fn sleep_on(
        timer: &DueTimer,
        queue: &mut MutexGuard<'_, VecDeque<Outgoing>>,
        due: Option<Instant>,
    ) {
        let armed = due.is_none_or(|due| timer.arm(due).is_ok());
        let waited = armed && MutexGuard::unlocked(queue, || timer.wait(IDLE_WAIT)).is_ok();
        if !waited {
            let until = due.unwrap_or_else(|| Instant::now() + IDLE_WAIT);
            MutexGuard::unlocked(queue, || {
                std::thread::sleep(until.saturating_duration_since(Instant::now()))
            });
        }
    }

    /// Stops the sender thread once everything queued is written.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _queue = self.queue.lock();
        self.wake.notify_all();
        if let Some(timer) = &self.timer {
            // Fires at once: the sender looks at `closed`. On failure it does within its idle
            // limit.
            let _ = timer.arm(Instant::now());
        }
    }

    /// Writes as much of the backlog as the sink takes without blocking; true when all of it
    /// went out.
    fn write_backlog(&self, writer: &mut Writer) -> io::Result<bool> {
        if self.broken.load(Ordering::Relaxed) {
            writer.backlog.clear();
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("link to {} is broken", self.peer),
            ));
        }
        let Writer {
            sink,
            backlog,
            written,
        } = writer;
        let sent = |frame: &Frame| {
            add(&self.counters.messages_sent, 1);
            add(&self.counters.bytes_sent, frame.wire_len() as u64);
            self.traffic.sent(frame.header.kind, frame.wire_len());
        };
        let result = match sink {
            Sink::Tcp(stream) => write_some(stream, backlog, written, sent),
            Sink::Loopback(tx) => backlog
                .drain(..)
                .try_for_each(|f| {
                    sent(&f);
                    tx.send(f)
                })
                .map(|()| true)
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "loopback server stopped")),
        };
        if result.is_err() {
            self.broken.store(true, Ordering::Relaxed);
            writer.backlog.clear();
        }
        result
    }

    /// Shuts the TCP connection down (both directions), waking a peer's reader with EOF.
    pub(crate) fn shutdown_socket(&self) {
        if let Sink::Tcp(stream) = &self.writer.lock().sink {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Writes frames from the front of `backlog` until done or the socket would block; fully
/// written frames are removed, `written` tracks the partial one. True when all went out.
fn write_some(
    stream: &mut TcpStream,
    backlog: &mut VecDeque<Frame>,
    written: &mut usize,
    sent: impl Fn(&Frame),
) -> io::Result<bool> {
    // Bound the number of slices per call (IOV_MAX is 1024 on Linux).
    const FRAMES_PER_CALL: usize = 256;
    while !backlog.is_empty() {
        let group = backlog.len().min(FRAMES_PER_CALL);
        let headers: Vec<[u8; HEADER_LEN]> = backlog
            .iter()
            .take(group)
            .map(|f| f.header.encode())
            .collect();
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(group * 2);
        let mut skip = *written;
        for (header, frame) in headers.iter().zip(backlog.iter()) {
            for part in [&header[..], frame.body_bytes()] {
                if skip >= part.len() {
                    skip -= part.len();
                } else {
                    slices.push(IoSlice::new(&part[skip..]));
                    skip = 0;
                }
            }
        }
        let n = match stream.write_vectored(&slices) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "connection closed while writing",
                ));
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        drop(slices);
        let mut advanced = *written + n;
        while let Some(front) = backlog.front() {
            if advanced < front.wire_len() {
                break;
            }
            advanced -= front.wire_len();
            sent(front);
            backlog.pop_front();
        }
        *written = advanced;
    }
    Ok(true)
}

/// Waits until the socket can take more bytes (or `timeout` passes).
fn wait_writable(sink: &Sink, timeout: Duration) {
    if let Sink::Tcp(stream) = sink {
        let mut fd = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as libc::c_int) };
    }
}

/// Writes frames with vectored writes to a blocking writer (tests: a byte-stream round trip).
#[cfg(test)]
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

/// Bodies up to this many bytes are allocated at once (every ordinary frame); larger ones grow
/// as their bytes arrive (doubling from 64 KiB), so a peer that announces a large body and
/// sends less makes us allocate no more than about twice what it sent.
const EAGER_BODY_BYTES: usize = 1 << 20;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The peer closed the connection at a frame boundary.
    #[error("connection closed")]
    Closed,
    /// The bytes are not a valid frame.
    #[error("invalid frame: {0}")]
    Decode(DecodeError),
    /// The connection failed (reset, timeout).
    #[error("{0}")]
    Io(io::Error),
}

// Shown in the messages, so not also exposed as `source()` (see `crate::error`).
crate::error::embedded_from!(ReadError {
    Decode(DecodeError),
    Io(io::Error),
});

/// The kind of the frame that `buffered` (bytes a reader holds but has not parsed) starts with,
/// if the whole frame is there, so that [`read_frame`] would return it without touching the
/// socket. A header that does not decode answers `None`: the next [`read_frame`] reports it.
pub(crate) fn buffered_frame(buffered: &[u8], limits: &Limits) -> Option<Kind> {
    let header = Header::decode(buffered.first_chunk::<HEADER_LEN>()?, limits).ok()?;
    (buffered.len() - HEADER_LEN >= header.body_words() * 8).then_some(header.kind)
}

/// Reads one frame from a peer's byte stream: header first, validated and bounded by `limits`,
/// then an aligned body, allocated as its bytes arrive once it is larger than
/// [`EAGER_BODY_BYTES`].
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
    let words = header.body_words();
    let mut body;
    if words * 8 <= EAGER_BODY_BYTES {
        body = Frame::body_buffer(&header);
        reader.read_exact(bytemuck::cast_slice_mut(&mut body))?;
    } else {
        body = Vec::new();
        while body.len() < words {
            let at = body.len();
            // Doubling from 64 KiB: a few copies of what arrived, never more than it.
            let step = (words - at).min(at.max(8 << 10));
            body.resize(at + step, 0);
            reader.read_exact(bytemuck::cast_slice_mut(&mut body[at..]))?;
        }
    }
    Ok(Frame::from_parts(header, body).expect("body sized from the header"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use roam_core::ReqId;
    use roam_core::wire::Kind;

    /// Threads that queue and flush concurrently (workers, readers and the server all answer
    /// through the same link) must never leave a frame in the queue once every flush has
    /// returned: a flusher whose `try_lock` fails relies on the writer's holder to take its
    /// frame. A frame stranded that way once hung a classic-nolocal training run forever. Each
    /// round ends all flushes together, so a stranded frame cannot be rescued by a later one.
    /// The window is a few instructions wide, so this rarely hits it; the next test forces it.
    #[test]
    fn concurrent_flushes_never_strand_a_frame() {
        const THREADS: usize = 3;
        const ROUNDS: u64 = 20_000;
        let (tx, rx) = std::sync::mpsc::channel();
        let counters = Arc::new(NodeCounters::default());
        let link = Link::new(NodeId(0), Sink::Loopback(tx), Duration::ZERO, counters).unwrap();
        let barrier = std::sync::Barrier::new(THREADS);
        let stranded = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (link, barrier, stranded) = (&link, &barrier, &stranded);
                scope.spawn(move || {
                    for round in 0..ROUNDS {
                        barrier.wait();
                        let frame = Frame::control(Kind::Heartbeat, NodeId(0), ReqId(t as u64), 0);
                        link.enqueue(frame);
                        link.flush().unwrap();
                        if barrier.wait().is_leader() && !link.queue.lock().is_empty() {
                            stranded.fetch_add(1, Ordering::Relaxed);
                            // Take it out so that later rounds test afresh.
                            link.flush().unwrap();
                        }
                        let _ = round;
                    }
                });
            }
        });
        assert_eq!(
            stranded.load(Ordering::Relaxed),
            0,
            "rounds that stranded a frame"
        );
        assert_eq!(rx.try_iter().count() as u64, THREADS as u64 * ROUNDS);
    }

    /// The interleaving behind the stranded frame, made to happen every time: flusher A holds
    /// the writer and has drained an empty queue; B queues a frame and flushes, and B's
    /// `try_lock` fails, so B returns and leaves the frame to A. A must take it before its own
    /// flush returns. (Before the fix A returned straight after draining nothing.)
    #[test]
    fn a_frame_queued_while_another_flusher_holds_the_writer_leaves_with_that_flush() {
        let (tx, rx) = std::sync::mpsc::channel();
        let counters = Arc::new(NodeCounters::default());
        let link = Link::new(NodeId(0), Sink::Loopback(tx), Duration::ZERO, counters).unwrap();
        let (drained_tx, drained_rx) = std::sync::mpsc::sync_channel(0);
        let (resume_tx, resume_rx) = std::sync::mpsc::sync_channel(0);
        let paused = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let (link, paused) = (&link, &paused);
            let a = scope.spawn(move || {
                link.flush_pausing_after_drain(|| {
                    if !paused.swap(true, Ordering::Relaxed) {
                        drained_tx.send(()).unwrap();
                        resume_rx.recv().unwrap();
                    }
                })
            });
            drained_rx.recv().unwrap();
            link.enqueue(Frame::control(Kind::Heartbeat, NodeId(0), ReqId(7), 0));
            link.flush().unwrap();
            assert_eq!(rx.try_iter().count(), 0, "A still holds the writer");
            assert_eq!(link.queue.lock().len(), 1, "B left its frame queued for A");
            resume_tx.send(()).unwrap();
            a.join().unwrap().unwrap();
        });
        assert!(link.queue.lock().is_empty(), "frame stranded in the queue");
        let written: Vec<Frame> = rx.try_iter().collect();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].header.req, ReqId(7));
    }

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

    /// A reader batches only frames it can return without the socket: every prefix of two
    /// frames' bytes is answered with the kind of the first frame exactly when it holds all of
    /// that frame, and bytes that are no header never count as a frame.
    #[test]
    fn a_frame_counts_as_buffered_only_when_all_of_it_is() {
        let mut first = Frame::new(Kind::Push, NodeId(1), ReqId(7), 0, &[3, 4], 5);
        first
            .values_mut()
            .copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let second = Frame::control(Kind::Goodbye, NodeId(1), ReqId(8), 0);
        let mut wire = Vec::new();
        write_frames(&mut wire, &[first.clone(), second]).unwrap();
        let limits = Limits::default();
        let first_len = first.wire_len();
        for end in 0..=wire.len() {
            let expected = (end >= first_len).then_some(Kind::Push);
            assert_eq!(
                buffered_frame(&wire[..end], &limits),
                expected,
                "{end} bytes"
            );
        }
        assert_eq!(
            buffered_frame(&wire[first_len..], &limits),
            Some(Kind::Goodbye)
        );
        let mut garbage = wire.clone();
        garbage[2] ^= 0xff;
        assert_eq!(buffered_frame(&garbage, &limits), None);
        // What it answers for is what `read_frame` returns.
        let mut reader = &wire[..];
        assert_eq!(read_frame(&mut reader, &limits).unwrap(), first);
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

    /// A reader that sends `sent` bytes then ends, recording the largest buffer it was asked
    /// to fill: the body buffer the frame reader allocated for what was still to come.
    struct Short {
        sent: Vec<u8>,
        at: usize,
        largest_ask: usize,
    }

    impl Read for Short {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.largest_ask = self.largest_ask.max(buf.len());
            let n = buf.len().min(self.sent.len() - self.at);
            buf[..n].copy_from_slice(&self.sent[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// Fuzzing finding (docs/reliability.md): a 40-byte header announcing the largest body the
    /// limits allow (16 Mi keys, 256 Mi values) made the reader allocate 1.1 GiB before a
    /// single body byte arrived. Now the allocation follows the bytes received.
    #[test]
    fn a_huge_announced_body_is_allocated_as_it_arrives() {
        let limits = Limits::default();
        let mut header = Frame::new(Kind::Push, NodeId(0), ReqId(0), 0, &[], 0).header;
        header.n_keys = limits.max_keys;
        header.n_vals = limits.max_values;
        header.flags = roam_core::wire::FLAG_POSITIONS;
        let mut sent = header.encode().to_vec();
        sent.extend(std::iter::repeat_n(7u8, 3 << 20));
        let mut reader = Short {
            sent,
            at: 0,
            largest_ask: 0,
        };
        let err = read_frame(&mut reader, &limits).unwrap_err();
        assert!(
            matches!(&err, ReadError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof),
            "{err}"
        );
        assert!(
            header.body_len() > 1 << 30,
            "the header announces over 1 GiB"
        );
        assert!(
            reader.largest_ask <= 4 << 20,
            "asked to fill {} bytes after 3 MiB were sent",
            reader.largest_ask
        );
    }

    #[test]
    fn a_large_body_read_in_steps_is_the_frame_sent() {
        let keys: Vec<u64> = (0..300_000).collect();
        let mut frame = Frame::new(Kind::Transfer, NodeId(1), ReqId(2), 0, &keys, 300_001);
        for (i, v) in frame.values_mut().iter_mut().enumerate() {
            *v = i as f32;
        }
        let bytes = frame.to_bytes();
        assert!(bytes.len() > 2 * EAGER_BODY_BYTES);
        let back = read_frame(&mut &bytes[..], &Limits::default()).unwrap();
        assert_eq!(back, frame);
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
