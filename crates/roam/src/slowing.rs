//! How a node slows itself down for straggler experiments (`roam launch --slow-node` with
//! `--slow-scope protocol` or `service`); the launcher's side is `launch.rs` and `cgroup.rs`.
//!
//! - [`SlowTasks`]: with `ROAM_SLOW_TASKS` set (protocol scope), every protocol thread started by
//!   [`spawn_named`] first writes its own thread id to the cgroup v1 `tasks` file, so that only
//!   those threads run under the node's CPU quota.
//! - [`ServiceSlowdown`]: with `ROAM_SLOW_SERVICE` set (service scope), serving a peer's pull or
//!   push takes FACTOR times as long: after handling such a request a reader owes (FACTOR − 1)
//!   times the time the handling took, and sleeps the debt off once it reaches
//!   [`MIN_SLEEP`] (sleeps shorter than that are not precise). The sleep is outside the node
//!   lock, on the reader of the link the request came on, so it delays that peer's later frames
//!   — a slow server (replies to this node's own requests on that link wait too; they add no
//!   debt) — while its workers and its other links run at full speed. No
//!   cgroup and no root needed; the factors follow the same `@START-END` windows, counted from
//!   the node's start.
//!
//! Invariants: a failure to slow never stops the node (it runs unslowed, with one warning);
//! replies to this node's own requests never accrue a debt.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roam_core::NodeId;
use roam_core::wire::Kind;

use crate::cgroup::ROAM_SLOW_TASKS;
use crate::slow_node::{Schedule, SlowNode};

/// With `--slow-scope service`: the node's `--slow-node` windows, as `FACTOR[@START[-END]]`
/// separated by spaces.
pub const ROAM_SLOW_SERVICE: &str = "ROAM_SLOW_SERVICE";

/// The shortest sleep a reader takes to pay off its debt.
pub const MIN_SLEEP: Duration = Duration::from_micros(200);

/// Starts one of the node's protocol threads (never a worker thread: those are the user's).
/// With `slow`, the thread first joins the slowed node's cpu cgroup.
pub(crate) fn spawn_named(
    name: String,
    slow: Option<&Arc<SlowTasks>>,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    let slow = slow.cloned();
    std::thread::Builder::new().name(name).spawn(move || {
        if let Some(slow) = slow {
            slow.join_this_thread();
        }
        body()
    })
}

/// The cgroup v1 `tasks` file through which a node's protocol threads join its cpu cgroup, one
/// thread at a time (`roam launch --slow-scope protocol` passes it as `ROAM_SLOW_TASKS`).
pub(crate) struct SlowTasks {
    node: u32,
    path: std::path::PathBuf,
    /// Whether a failure to join was logged already (once per node is enough).
    warned: AtomicBool,
}

impl SlowTasks {
    /// From `ROAM_SLOW_TASKS`, if it is set and not empty.
    pub(crate) fn from_env(node: NodeId) -> Option<Arc<Self>> {
        let path = std::env::var_os(ROAM_SLOW_TASKS).filter(|p| !p.is_empty())?;
        let tasks = Self::new(node, path.into());
        tracing::info!(
            node = node.0,
            "protocol threads join the cpu cgroup of {}",
            tasks.path.display()
        );
        Some(Arc::new(tasks))
    }

    fn new(node: NodeId, path: std::path::PathBuf) -> Self {
        Self {
            node: node.0,
            path,
            warned: AtomicBool::new(false),
        }
    }

    /// Moves the calling thread (alone) into the group; on failure it stays where it is,
    /// unslowed, and the first failure of the node is logged.
    fn join_this_thread(&self) {
        if let Err(err) = self.write_own_tid() {
            self.warn_once(&err);
        }
    }

    /// Writes the calling thread's id to the file, in one write as cgroupfs wants it.
    fn write_own_tid(&self) -> std::io::Result<()> {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        // Not created: a path that does not exist is an error, not a new regular file.
        let mut file = std::fs::OpenOptions::new().write(true).open(&self.path)?;
        file.write_all(tid.to_string().as_bytes())
    }

    /// Logs `err` unless a failure was logged before; returns whether it logged.
    fn warn_once(&self, err: &std::io::Error) -> bool {
        if self.warned.swap(true, Ordering::AcqRel) {
            return false;
        }
        let thread = std::thread::current();
        tracing::warn!(
            node = self.node,
            "thread {} cannot join the slowed cpu cgroup: writing its thread id to {}: {err}; \
             protocol threads that cannot join run unslowed (warned once)",
            thread.name().unwrap_or("?"),
            self.path.display()
        );
        true
    }
}

/// The service delay of a node under `--slow-scope service` (see the module docs).
#[derive(Debug)]
pub(crate) struct ServiceSlowdown {
    rank: u32,
    schedule: Schedule,
    started: Instant,
}

impl ServiceSlowdown {
    /// From `ROAM_SLOW_SERVICE`, if it is set and not empty; a malformed value is an error
    /// naming it.
    pub(crate) fn from_env(rank: NodeId) -> Result<Option<Arc<Self>>, String> {
        let Some(value) = std::env::var(ROAM_SLOW_SERVICE)
            .ok()
            .filter(|v| !v.trim().is_empty())
        else {
            return Ok(None);
        };
        let slowdown =
            Self::parse(rank, &value).map_err(|e| format!("{ROAM_SLOW_SERVICE}={value:?}: {e}"))?;
        tracing::info!(
            node = rank.0,
            "serving peers' pulls and pushes is slowed by {value} (service delay)"
        );
        Ok(Some(Arc::new(slowdown)))
    }

    /// Windows `FACTOR[@START[-END]]`, separated by spaces, for node `rank`.
    pub(crate) fn parse(rank: NodeId, windows: &str) -> Result<Self, String> {
        let specs = windows
            .split_whitespace()
            .map(|w| format!("{}:{w}", rank.0).parse::<SlowNode>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let schedule = Schedule::new(&specs, rank.0 + 1).map_err(|e| e.to_string())?;
        Ok(Self {
            rank: rank.0,
            schedule,
            started: Instant::now(),
        })
    }

    /// The windows of node `rank` in `specs`, as [`ROAM_SLOW_SERVICE`] takes them.
    pub(crate) fn windows_of(specs: &[SlowNode], rank: u32) -> String {
        specs
            .iter()
            .filter(|s| s.rank == rank)
            .map(|s| {
                let spec = s.to_string();
                spec.split_once(':')
                    .map_or(spec.clone(), |(_, w)| w.to_owned())
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The factor now (1: not slowed).
    fn factor(&self) -> f64 {
        self.schedule
            .factor_at(self.rank, self.started.elapsed())
            .unwrap_or(1.0)
    }

    /// Whether serving a frame of `kind` is slowed (peers' data requests).
    pub(crate) fn slows(kind: Kind) -> bool {
        matches!(kind, Kind::Pull | Kind::Push)
    }

    /// Adds what handling a request that took `took` owes to `debt`, and returns how long to
    /// sleep now (zero until the debt reaches [`MIN_SLEEP`]), clearing what it returns.
    pub(crate) fn owe(&self, debt: &mut Duration, took: Duration) -> Duration {
        let factor = self.factor();
        if factor > 1.0 {
            *debt += took.mul_f64(factor - 1.0);
        }
        if *debt >= MIN_SLEEP {
            std::mem::take(debt)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn protocol_threads_write_their_own_thread_id_first() {
        // A regular file stands in for cgroupfs's `tasks`: the write is what is checked here
        // (the kernel's side is the `slow_node` integration test's).
        let path = std::env::temp_dir().join(format!("roam-slow-tasks-{}", std::process::id()));
        std::fs::write(&path, "").unwrap();
        let slow = Arc::new(SlowTasks::new(NodeId(1), path.clone()));
        let (tx, rx) = mpsc::channel();
        let thread = spawn_named("roam-test-join".into(), Some(&slow), move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            // By the time the body runs, the thread has joined.
            tx.send((tid, std::fs::read_to_string("/proc/thread-self/comm").ok()))
                .unwrap();
        })
        .unwrap();
        let (tid, comm) = rx.recv().unwrap();
        thread.join().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), tid.to_string());
        assert_eq!(comm.as_deref().map(str::trim_end), Some("roam-test-join"));
        assert!(!slow.warned.load(Ordering::Acquire));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_failed_join_warns_once_and_the_thread_runs_unslowed() {
        let path =
            std::env::temp_dir().join(format!("roam-no-such-dir-{}/tasks", std::process::id()));
        let slow = Arc::new(SlowTasks::new(NodeId(0), path.clone()));
        let (tx, rx) = mpsc::channel();
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let tx = tx.clone();
                spawn_named(format!("roam-test-{i}"), Some(&slow), move || {
                    tx.send(i).unwrap();
                })
                .unwrap()
            })
            .collect();
        let mut ran: Vec<i32> = (0..3).map(|_| rx.recv().unwrap()).collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        ran.sort_unstable();
        assert_eq!(ran, [0, 1, 2], "every body ran despite the failed joins");
        assert!(
            slow.warned.load(Ordering::Acquire),
            "the failure was logged"
        );
        assert!(
            !path.exists(),
            "no file is created where the cgroup should be"
        );
        // Logged once per node: later failures stay quiet.
        let again = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(!slow.warn_once(&again));
        assert!(SlowTasks::new(NodeId(0), path).warn_once(&again));
    }

    #[test]
    fn service_windows_round_trip_and_debts_are_paid_in_sleeps_of_at_least_the_minimum() {
        let specs: Vec<SlowNode> = ["2:4@1-3", "1:2", "2:8@5"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(ServiceSlowdown::windows_of(&specs, 2), "4@1-3 8@5");
        assert_eq!(ServiceSlowdown::windows_of(&specs, 1), "2");
        assert_eq!(ServiceSlowdown::windows_of(&specs, 0), "");
        let whole = ServiceSlowdown::parse(NodeId(1), "4").unwrap();
        let mut debt = Duration::ZERO;
        // 3 × 50 µs owed per request: nothing to sleep until the debt reaches 200 µs.
        assert_eq!(
            whole.owe(&mut debt, Duration::from_micros(50)),
            Duration::ZERO
        );
        assert_eq!(debt, Duration::from_micros(150));
        assert_eq!(
            whole.owe(&mut debt, Duration::from_micros(50)),
            Duration::from_micros(300)
        );
        assert_eq!(debt, Duration::ZERO);
        // Outside its window a node owes nothing.
        let later = ServiceSlowdown::parse(NodeId(0), "4@100").unwrap();
        assert_eq!(
            later.owe(&mut debt, Duration::from_millis(5)),
            Duration::ZERO
        );
        assert_eq!(debt, Duration::ZERO);
        assert!(ServiceSlowdown::slows(Kind::Pull) && !ServiceSlowdown::slows(Kind::PullReply));
        let bad = ServiceSlowdown::parse(NodeId(0), "4@3-1").unwrap_err();
        assert!(bad.contains("4@3-1") || bad.contains("END"), "{bad}");
        assert!(ServiceSlowdown::parse(NodeId(0), "fast").is_err());
    }
}
