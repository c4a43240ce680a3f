//! Socket reads and writes bounded by one overall deadline, and [`Guarded`], the stream a
//! handshake runs on.
//!
//! Invariants: a deadline bounds the whole exchange, not each call (a peer trickling one byte
//! at a time cannot extend it); `Guarded` puts the stream's previous read and write timeouts
//! back on every exit path, success or error.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::{AuthError, Step};

/// The peer address as text for error messages; a stream whose peer is unknown is still usable.
pub(crate) fn peer_name(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map_or_else(|_| "unknown peer".to_owned(), |a| a.to_string())
}

/// Reads exactly `buf.len()` bytes unless `deadline` passes first (`TimedOut`) or the peer
/// closes (`UnexpectedEof`). Leaves the read timeout set; callers restore it.
pub(crate) fn read_exact_until(
    stream: &mut TcpStream,
    mut buf: &mut [u8],
    deadline: Instant,
) -> io::Result<()> {
    while !buf.is_empty() {
        stream.set_read_timeout(Some(remaining(deadline)?))?;
        match stream.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Err(io::ErrorKind::TimedOut.into()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` unless `deadline` passes first (`TimedOut`). Leaves the write timeout
/// set; callers restore it.
pub(crate) fn write_all_until(
    stream: &mut TcpStream,
    mut buf: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    while !buf.is_empty() {
        stream.set_write_timeout(Some(remaining(deadline)?))?;
        match stream.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Err(io::ErrorKind::TimedOut.into()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    // A zero timeout means "block forever" to the OS and is rejected by std, so stop before it.
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(io::ErrorKind::TimedOut.into()),
    }
}

fn is_timeout(e: &io::Error) -> bool {
    // Unix reports an expired socket timeout as WouldBlock, Windows as TimedOut.
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Whether an I/O error means the peer went away rather than something local going wrong.
pub(crate) fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// A stream under one handshake deadline that puts the previous timeouts back when dropped.
pub(super) struct Guarded<'a> {
    stream: &'a mut TcpStream,
    pub(super) peer: String,
    deadline: Instant,
    timeout: Duration,
    saved: (Option<Duration>, Option<Duration>),
    restored: bool,
}

impl<'a> Guarded<'a> {
    pub(super) fn new(stream: &'a mut TcpStream, timeout: Duration) -> Result<Self, AuthError> {
        let peer = peer_name(stream);
        let saved = stream
            .read_timeout()
            .and_then(|r| Ok((r, stream.write_timeout()?)))
            .map_err(|error| AuthError::Io {
                peer: peer.clone(),
                step: Step::SocketOptions,
                error,
            })?;
        Ok(Self {
            stream,
            peer,
            deadline: Instant::now() + timeout,
            timeout,
            saved,
            restored: false,
        })
    }

    pub(super) fn read(&mut self, buf: &mut [u8], step: Step) -> Result<(), AuthError> {
        read_exact_until(self.stream, buf, self.deadline).map_err(|e| self.classify(e, step))
    }

    pub(super) fn write(&mut self, buf: &[u8], step: Step) -> Result<(), AuthError> {
        write_all_until(self.stream, buf, self.deadline).map_err(|e| self.classify(e, step))
    }

    fn classify(&self, error: io::Error, step: Step) -> AuthError {
        let peer = self.peer.clone();
        if error.kind() == io::ErrorKind::TimedOut {
            AuthError::TimedOut {
                peer,
                step,
                timeout: self.timeout,
            }
        } else if is_closed(&error) {
            AuthError::Closed { peer, step }
        } else {
            AuthError::Io { peer, step, error }
        }
    }

    /// Restores the timeouts, reporting failure (the drop path can only ignore it).
    pub(super) fn finish(mut self) -> Result<(), AuthError> {
        self.restored = true;
        self.restore().map_err(|error| AuthError::Io {
            peer: self.peer.clone(),
            step: Step::SocketOptions,
            error,
        })
    }

    fn restore(&self) -> io::Result<()> {
        self.stream.set_read_timeout(self.saved.0)?;
        self.stream.set_write_timeout(self.saved.1)
    }
}

impl Drop for Guarded<'_> {
    fn drop(&mut self) {
        if !self.restored {
            // On an error path the connection is about to be dropped anyway.
            let _ = self.restore();
        }
    }
}
