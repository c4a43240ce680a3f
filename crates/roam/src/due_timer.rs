//! The clock of a link's sender thread under latency emulation (`transport.rs`): a one-shot
//! timer the sender sleeps on and that any thread can arm *without waking the sender*.
//!
//! A sender waiting on a condition variable for a frame's due time has to be woken by the
//! thread that queues a frame into an empty queue, only to go back to sleep until the frame is
//! due: two wake-ups (and context switches) per frame where a real wire costs none. Arming a
//! timerfd instead is one system call and no wake-up, so the sender wakes once, when the frame
//! is due.
//!
//! Invariants: [`DueTimer::arm`] always leaves the timer armed (a due time that has passed
//! fires at once: an expiry of zero would disarm it); [`DueTimer::wait`] returns after at most
//! its `limit` whatever happens to the timer, so a failed arming delays frames, never strands
//! them.

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};

/// A one-shot monotonic timer (Linux timerfd).
pub(crate) struct DueTimer {
    fd: OwnedFd,
}

/// `d` as a timespec (saturating: a limit of centuries is as good as forever).
fn timespec(d: Duration) -> Timespec {
    Timespec::try_from(d).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    })
}

impl DueTimer {
    pub(crate) fn new() -> io::Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )?;
        Ok(Self { fd })
    }

    /// Makes the timer fire at `due` (at once if `due` has passed), replacing any earlier due
    /// time.
    pub(crate) fn arm(&self, due: Instant) -> io::Result<()> {
        let left = due
            .saturating_duration_since(Instant::now())
            .max(Duration::from_nanos(1));
        let spec = Itimerspec {
            it_interval: timespec(Duration::ZERO),
            it_value: timespec(left),
        };
        timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec)?;
        Ok(())
    }

    /// Sleeps until the timer fires (returning at once if it fired since the last wait) or
    /// `limit` passes, and clears the firing.
    pub(crate) fn wait(&self, limit: Duration) -> io::Result<()> {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        match poll(&mut fds, Some(&timespec(limit))) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let mut expirations = [0u8; 8];
        match rustix::io::read(&self.fd, &mut expirations) {
            Ok(_) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender's contract: a wait returns once the armed time has come (never before it),
    /// an arming in the past fires at once (a wait with an hour's limit returns), and a
    /// disarmed timer still lets the wait end at its limit, not before.
    #[test]
    fn a_wait_ends_at_the_armed_time_and_no_earlier() {
        let timer = DueTimer::new().unwrap();
        let due = Instant::now() + Duration::from_millis(20);
        timer.arm(due).unwrap();
        timer.wait(Duration::from_secs(3600)).unwrap();
        assert!(Instant::now() >= due, "woke before the due time");

        timer.arm(Instant::now() - Duration::from_secs(1)).unwrap();
        timer.wait(Duration::from_secs(3600)).unwrap();

        // Disarmed (the firing above was consumed): the limit ends the wait.
        let limit = Duration::from_millis(10);
        let started = Instant::now();
        timer.wait(limit).unwrap();
        assert!(started.elapsed() >= limit);
    }
}
