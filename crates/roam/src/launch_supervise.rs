//! The supervision half of `roam launch` (`launch.rs` starts the children): relaying each
//! child's output with its `[node R] ` prefix, waiting for the children and stopping them,
//! turning their fate into one exit code, and the process-wide SIGINT/SIGTERM handling.
//!
//! Invariants:
//! - Output: each relayed line is written to the sink with a single `write_all` under the sink's
//!   lock, so lines from different nodes never interleave mid-line; a final line without a newline
//!   gets one, and a line longer than [`MAX_LINE`] is split rather than buffered without bound.
//!   A failing sink (e.g. a closed pipe) does not stop the draining, so children never block on a
//!   full pipe.
//! - Exit code: 0 only if every child exits 0. Otherwise the first failure observed: the child's
//!   exit code, or 128 + signal if it died from a signal; if the launcher itself was interrupted
//!   first, 128 + that signal. When one poll finds several nodes ended, a node killed by a
//!   signal is reported as the failure before nodes that exited with an error (they are
//!   usually its peers, failing because of it).
//! - Shutdown: on the first failure (or a SIGINT/SIGTERM to the launcher, which is forwarded) every
//!   remaining child gets that signal (SIGTERM for a failure), then SIGKILL after [`GRACE`]; a
//!   second SIGINT/SIGTERM sends SIGKILL at once. Each child runs in its own process group and
//!   signals go to the whole group, so helpers a child forked (e.g. the commands of an `sh -c`
//!   script) go with it. Only children not yet reaped are signalled, so a reused pid is never hit.
//!   The separate groups also mean a terminal's Ctrl-C reaches only the launcher, which forwards
//!   it once; children get no stdin (`/dev/null`), so they never contend for the terminal.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::launch_restart;

/// How long children get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);
/// Longest relayed line; longer output is split into lines of this size.
pub const MAX_LINE: usize = 1 << 20;
/// How long to wait, after every child is gone, for output still held by their leftovers.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long a node's error exit waits for the launcher to see a node killed by a signal before
/// it is named as the failure: the peers of a killed node fail (naming it) as soon as its
/// sockets close, which on a loaded machine can come before the killed process is reaped.
const BLAME_SETTLE: Duration = Duration::from_millis(300);

/// One child and, once reaped, how it ended.
pub(super) struct Node {
    /// `node R`, or `joiner K` for the K-th node started by `--join-at`.
    pub(super) name: String,
    pub(super) child: Child,
    pub(super) status: Option<ExitStatus>,
}

impl Node {
    /// Signals the child's process group, or the child alone if it left its group.
    pub(super) fn signal(&self, sig: libc::c_int) {
        if self.status.is_some() {
            // Reaped: the pid may already belong to an unrelated process.
            return;
        }
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child, so
        // it (and the group it leads) cannot have been recycled.
        unsafe {
            if libc::kill(-pid, sig) != 0 {
                libc::kill(pid, sig);
            }
        }
    }
}

/// The shell convention for an exit status: the code, or 128 + the terminating signal.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

pub(super) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended".to_owned(),
    }
}

pub(super) fn notice<E: Write>(err: &Mutex<E>, msg: &str) {
    let line = format!("[launch] {msg}\n");
    let mut e = err.lock();
    // A broken stderr must not abort supervision.
    let _ = e.write_all(line.as_bytes()).and_then(|()| e.flush());
}

/// Waits for every child, stopping the rest on the first failure or a signal; returns the code
/// and what ended the run. `tick` runs once per poll, while any child runs, and may add
/// children (joiners); it is told whether the run is stopping (after a failure or a signal).
pub(super) fn supervise<E: Write>(
    nodes: &mut Vec<Node>,
    signals: &signals::Guard,
    err: &Mutex<E>,
    tick: &mut dyn FnMut(&mut Vec<Node>, bool),
) -> launch_restart::Attempt {
    let mut failure: Option<(String, ExitStatus)> = None;
    let mut interrupted: Option<i32> = None;
    let mut signals_seen = 0;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    // The failure to name, and until when an error exit may still give way to a signalled node.
    let mut blame: Option<(String, ExitStatus, Instant)> = None;

    loop {
        tick(nodes, kill_at.is_some());
        let (count, sig) = signals.received();
        if count > signals_seen {
            signals_seen = count;
            if interrupted.is_none() && failure.is_none() {
                interrupted = Some(sig);
                notice(
                    err,
                    &format!("received signal {sig}; forwarding it to the nodes"),
                );
                nodes.iter().for_each(|n| n.signal(sig));
                kill_at = Some(Instant::now() + GRACE);
            } else {
                // Asked again: the user does not want to wait out the grace period.
                kill_at = Some(Instant::now());
            }
        }

        // The failure to report: a node killed by a signal before one that exited with an error,
        // since the peers of a killed node fail (naming it) moments after it.
        let signalled = |s: &ExitStatus| s.signal().is_some();
        for n in nodes.iter_mut().filter(|n| n.status.is_none()) {
            let status = match n.child.try_wait() {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    // Cannot happen for our own unreaped child; treat it as lost, not as a hang.
                    notice(err, &format!("cannot wait for {}: {e}", n.name));
                    ExitStatus::from_raw(libc::SIGKILL)
                }
            };
            n.status = Some(status);
            if !status.success()
                && blame
                    .as_ref()
                    .is_none_or(|(_, f, _)| !signalled(f) && signalled(&status))
            {
                blame = Some((n.name.clone(), status, Instant::now() + BLAME_SETTLE));
            }
        }
        let all_ended = nodes.iter().all(|n| n.status.is_some());
        let settled = blame.as_ref().is_some_and(|(_, status, until)| {
            signalled(status) || all_ended || Instant::now() >= *until
        });
        if let Some((name, status, _)) = blame
            .take_if(|_| settled)
            .filter(|_| failure.is_none() && kill_at.is_none())
        {
            notice(
                err,
                &format!("{name} {}; stopping the other nodes", describe(status)),
            );
            failure = Some((name, status));
            kill_at = Some(Instant::now() + GRACE);
            nodes.iter().for_each(|n| n.signal(libc::SIGTERM));
        }
        if nodes.iter().all(|n| n.status.is_some()) {
            break;
        }
        if !killed && kill_at.is_some_and(|t| Instant::now() >= t) {
            killed = true;
            notice(err, "grace period over; killing the remaining nodes");
            nodes.iter().for_each(|n| n.signal(libc::SIGKILL));
        }
        thread::sleep(POLL_INTERVAL);
    }
    launch_restart::Attempt {
        code: failure
            .as_ref()
            .map(|(_, s)| exit_code(*s))
            .or(interrupted.map(|s| 128 + s))
            .unwrap_or(0),
        interrupted: interrupted.is_some(),
        failed: failure,
    }
}

/// Waits (briefly) until the pumps have relayed everything the children wrote.
pub(super) fn wait_for_output<E: Write>(done: &mpsc::Receiver<()>, pumps: usize, err: &Mutex<E>) {
    let deadline = Instant::now() + DRAIN_GRACE;
    for _ in 0..pumps {
        let left = deadline.saturating_duration_since(Instant::now());
        if done.recv_timeout(left).is_err() {
            // A background process a node left behind still holds the pipe; stop waiting for it.
            notice(
                err,
                "some node output is still open after every node exited; not waiting for it",
            );
            return;
        }
    }
}

/// Relays `pipe` on its own thread; returns whether the thread (and so its `done` message)
/// exists. Without a thread the pipe is dropped, so the child sees a closed pipe, not a full one.
pub(super) fn spawn_pump<R, W, E>(
    pipe: R,
    prefix: Vec<u8>,
    sink: &Arc<Mutex<W>>,
    err: &Mutex<E>,
    done: &mpsc::Sender<()>,
) -> bool
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
    E: Write,
{
    let (sink, done) = (Arc::clone(sink), done.clone());
    let spawned = thread::Builder::new()
        .name("roam-launch-output".into())
        .spawn(move || {
            pump(pipe, &prefix, &sink);
            let _ = done.send(());
        });
    if let Err(e) = spawned {
        notice(
            err,
            &format!("cannot start a thread to relay node output: {e}"),
        );
        return false;
    }
    true
}

/// Relays `pipe` to `sink` line by line, each line prefixed, until end of file.
fn pump<R: Read, W: Write>(pipe: R, prefix: &[u8], sink: &Mutex<W>) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::with_capacity(prefix.len() + 256);
    let mut sink_ok = true;
    loop {
        line.clear();
        line.extend_from_slice(prefix);
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        if sink_ok {
            let mut w = sink.lock();
            sink_ok = w.write_all(&line).and_then(|()| w.flush()).is_ok();
        }
    }
}

/// Process-wide SIGINT/SIGTERM handling shared by concurrent launches.
pub(super) mod signals {
    use std::io;
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

    use parking_lot::Mutex;

    const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

    static COUNT: AtomicUsize = AtomicUsize::new(0);
    static LAST: AtomicI32 = AtomicI32::new(0);
    /// Number of live guards, and the dispositions to restore when it drops to zero.
    static STATE: Mutex<(usize, Vec<libc::sigaction>)> = Mutex::new((0, Vec::new()));

    extern "C" fn on_signal(sig: libc::c_int) {
        // Only lock-free atomics: anything else is not async-signal-safe.
        LAST.store(sig, Ordering::SeqCst);
        COUNT.fetch_add(1, Ordering::SeqCst);
    }

    /// Keeps the handlers installed; the previous dispositions return when the last guard drops.
    pub(crate) struct Guard {
        base: usize,
    }

    impl Guard {
        pub(crate) fn install() -> io::Result<Self> {
            let mut state = STATE.lock();
            if state.0 == 0 {
                let mut saved = Vec::with_capacity(SIGNALS.len());
                for sig in SIGNALS {
                    // SAFETY: sigaction is plain data, valid when zeroed; the handler only
                    // touches atomics, which is async-signal-safe.
                    let old = unsafe {
                        let mut act: libc::sigaction = std::mem::zeroed();
                        act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                        act.sa_flags = libc::SA_RESTART;
                        libc::sigemptyset(&mut act.sa_mask);
                        let mut old: libc::sigaction = std::mem::zeroed();
                        if libc::sigaction(sig, &act, &mut old) != 0 {
                            let e = io::Error::last_os_error();
                            restore(&saved);
                            return Err(e);
                        }
                        old
                    };
                    saved.push(old);
                }
                state.1 = saved;
            }
            state.0 += 1;
            Ok(Self {
                base: COUNT.load(Ordering::SeqCst),
            })
        }

        /// Signals received since this guard was installed, and the latest one.
        pub(crate) fn received(&self) -> (usize, libc::c_int) {
            let count = COUNT.load(Ordering::SeqCst) - self.base;
            (count, LAST.load(Ordering::SeqCst))
        }
    }

    fn restore(saved: &[libc::sigaction]) {
        for (sig, old) in SIGNALS.iter().zip(saved) {
            // SAFETY: `old` was filled in by a successful sigaction call for this signal.
            unsafe {
                libc::sigaction(*sig, old, std::ptr::null_mut());
            }
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            let mut state = STATE.lock();
            state.0 -= 1;
            if state.0 == 0 {
                restore(&state.1);
                state.1.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pump_prefixes_splits_and_terminates_lines() {
        let sink = Mutex::new(Vec::new());
        let input: &[u8] = b"one\ntwo\n\nlast without newline";
        pump(input, b"[node 4] ", &sink);
        assert_eq!(
            String::from_utf8(sink.into_inner()).unwrap(),
            "[node 4] one\n[node 4] two\n[node 4] \n[node 4] last without newline\n"
        );

        let sink = Mutex::new(Vec::new());
        let long = vec![b'x'; MAX_LINE + 10];
        pump(&long[..], b"> ", &sink);
        let out = sink.into_inner();
        let lines: Vec<&[u8]> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), 2 + MAX_LINE);
        assert_eq!(lines[1], b"> xxxxxxxxxx");
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 128 + 9);
    }
}
