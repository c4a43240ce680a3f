//! CPU quotas in cpu cgroups, the mechanism of `roam launch --slow-node` (the schedule of who
//! is slowed when is [`crate::slow_node`]'s).
//!
//! This module owns the run's cgroups ([`Groups`]): one directory `roam-<launcher pid>-<seq>-
//! n<rank>` per slowed rank, in the cgroup v1 `cpu` hierarchy (quota in `cpu.cfs_quota_us`) or,
//! only when v1's cpu controller is not mounted, in cgroup v2 (`cpu.max`). The hierarchies are
//! found through `/proc/self/mountinfo`; a group goes under the launcher's own cgroup if it can,
//! else at the hierarchy's root.
//!
//! Invariants:
//! - A factor F sets a quota of `PERIOD_US / F` per period of [`PERIOD_US`]: 1/F of one CPU for
//!   everything in the group together; no factor, no quota.
//! - What a group holds is the run's [`Scope`]. [`Scope::Process`]: a node joins its group in
//!   the child between fork and exec, so every thread and process it ever creates is inside:
//!   nothing escapes the quota through a race with the spawn. [`Scope::Protocol`]: the process
//!   stays out; the node inherits the group's v1 `tasks` file, open as [`TASKS_FD`] (named by
//!   [`ROAM_SLOW_TASKS`]), and each of its protocol threads writes its own thread id there (`crate::runtime`), so only those threads
//!   (and threads they create) are inside. Only v1 can split one process's threads between
//!   groups: in cgroup v2 [`Groups::create`] refuses that scope before creating anything.
//! - [`Groups`] removes every directory it created when destroyed and when dropped (an error
//!   path, a panic). Processes still inside (leftovers a node forked) are first moved to the
//!   parent group, unthrottled, never killed. Groups of a launcher that was SIGKILLed (its pid
//!   no longer exists) are removed by the next `--slow-node` run.
//! - There is no fallback: where no cgroup is writable, [`Groups::create`] fails naming every
//!   directory tried. (A calibrated service delay in the transport, which the design allows
//!   there, is not implemented.)

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The node's cpu cgroup directory; set only for ranks named by `--slow-node`.
pub const ROAM_CGROUP: &str = "ROAM_CGROUP";
/// With `--slow-scope protocol`, the path of the group's `tasks` file (cgroup v1; as the
/// inherited descriptor [`TASKS_FD`]), to which each of the node's protocol threads writes its
/// own thread id to join the group by itself; set only for ranks named by `--slow-node`, and
/// read once when the node starts.
pub const ROAM_SLOW_TASKS: &str = "ROAM_SLOW_TASKS";

/// The descriptor under which a node with [`Scope::Protocol`] inherits its group's `tasks` file
/// (high, so that it collides with nothing the node opens before its threads start).
pub const TASKS_FD: libc::c_int = 213;
/// The CFS bandwidth period of every group, in microseconds (100 ms).
pub const PERIOD_US: u64 = 100_000;
const NAME_PREFIX: &str = "roam-";
static SEQ: AtomicU64 = AtomicU64::new(0);

/// What can go wrong with the cpu cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cpu cgroup could be created.
    #[error(
        "--slow-node needs a writable cpu cgroup (run as root); tried: {}. A calibrated \
         service delay in the transport, the fallback where no cgroup is writable, is not \
         available",
        tried.join("; ")
    )]
    NoCgroup {
        /// Each directory tried, with why it failed.
        tried: Vec<String>,
    },
    /// `--slow-scope protocol` where the cpu cgroups are cgroup v2's.
    #[error(
        "--slow-scope protocol needs cgroup v1's cpu controller, which is not mounted here; \
         the cpu cgroups here are cgroup v2's ({}), and a v2 domain cgroup holds whole \
         processes, so one process's threads cannot be in different groups (threaded cgroups \
         are not implemented). Use --slow-scope process",
        parent.display()
    )]
    ThreadsNeedV1 {
        /// The v2 directory the groups would have gone under.
        parent: PathBuf,
    },
    /// A cgroup file could not be written.
    #[error("writing {value:?} to {}: {error}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The error (shown in the message, so not also the `source()`: a field named
        /// `source` would be).
        error: io::Error,
    },
}

/// The cgroup interface the groups use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The v1 `cpu` controller: `cpu.cfs_period_us` and `cpu.cfs_quota_us`.
    V1,
    /// The unified hierarchy: `cpu.max`.
    V2,
}

impl Version {
    /// `v1` or `v2`.
    pub fn name(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        }
    }

    /// The file that holds the quota, and what to write there for `factor` (`None`: none).
    pub fn quota(self, factor: Option<f64>) -> (&'static str, String) {
        // Factors are in 1..=100 (`slow_node::MAX_FACTOR`): 1 ms to one period, rounded.
        let quota = factor.map(|f| (PERIOD_US as f64 / f).round() as u64);
        match (self, quota) {
            (Self::V1, Some(q)) => ("cpu.cfs_quota_us", q.to_string()),
            (Self::V1, None) => ("cpu.cfs_quota_us", "-1".into()),
            (Self::V2, Some(q)) => ("cpu.max", format!("{q} {PERIOD_US}")),
            (Self::V2, None) => ("cpu.max", format!("max {PERIOD_US}")),
        }
    }
}

/// Which threads of a slowed node its group holds (`roam launch --slow-scope`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Scope {
    /// Every thread of the node and every process it starts.
    #[default]
    Process,
    /// The readers, senders, acceptor, loopback server and timers; not the worker threads.
    /// Needs cgroup v1.
    Protocol,
    /// No cgroup: serving peers' pulls and pushes takes FACTOR times as long, by a calibrated
    /// delay in the transport (`crate::slowing`); needs no root.
    Service,
}

impl Scope {
    /// The scope's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Protocol => "protocol",
            Self::Service => "service",
        }
    }

    /// Refuses a scope the groups that would be created under `places` (in order, as
    /// [`candidates`] gives them; all of one version) cannot hold.
    fn check(self, places: &[(Version, PathBuf)]) -> Result<(), CgroupError> {
        match (self, places.first()) {
            (Self::Protocol, Some((Version::V2, parent))) => Err(CgroupError::ThreadsNeedV1 {
                parent: parent.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// The throttling counters of a group (`cpu.stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Periods in which the group ran.
    pub nr_periods: u64,
    /// Periods in which it used up its quota and was stopped.
    pub nr_throttled: u64,
    /// Total time its threads were stopped by the quota.
    pub throttled: Duration,
}

impl Stats {
    /// Parses `cpu.stat` (v1 `throttled_time` in ns, v2 `throttled_usec`).
    pub fn parse(text: &str) -> Self {
        let mut s = Self::default();
        for (key, value) in text.lines().filter_map(|l| l.split_once(' ')) {
            let Ok(v) = value.trim().parse::<u64>() else {
                continue;
            };
            match key {
                "nr_periods" => s.nr_periods = v,
                "nr_throttled" => s.nr_throttled = v,
                "throttled_time" => s.throttled = Duration::from_nanos(v),
                "throttled_usec" => s.throttled = Duration::from_micros(v),
                _ => {}
            }
        }
        s
    }
}

/// The cpu cgroups of one run, one per slowed rank; removed on [`Groups::destroy`] or drop.
#[derive(Debug)]
pub struct Groups {
    version: Version,
    parent: PathBuf,
    dirs: Vec<(u32, PathBuf)>,
}

impl Groups {
    /// Creates a group per rank, without a quota, in the first place that works: v1's cpu
    /// hierarchy if it is mounted, else cgroup v2; under the launcher's own group, else at the
    /// root. Also returns the groups of dead launchers it removed there. Refuses, before
    /// creating anything, a `scope` the groups cannot hold ([`CgroupError::ThreadsNeedV1`]).
    pub fn create(ranks: &[u32], scope: Scope) -> Result<(Self, Vec<String>), CgroupError> {
        let prefix = format!(
            "{NAME_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let places = candidates(&read("/proc/self/mountinfo"), &read("/proc/self/cgroup"));
        scope.check(&places)?;
        let mut tried = Vec::new();
        for (version, parent) in places {
            let mut groups = Self {
                version,
                parent,
                dirs: Vec::new(),
            };
            // On failure `groups` drops, removing what it created.
            match groups.build(&prefix, ranks) {
                Ok(()) => {
                    let stale = remove_stale(&groups.parent);
                    return Ok((groups, stale));
                }
                Err(e) => tried.push(format!("{e} (cgroup {})", version.name())),
            }
        }
        if tried.is_empty() {
            tried.push("/proc/self/mountinfo: no cgroup v1 cpu or cgroup2 mount".into());
        }
        Err(CgroupError::NoCgroup { tried })
    }

    fn build(&mut self, prefix: &str, ranks: &[u32]) -> Result<(), String> {
        if self.version == Version::V2 {
            let has_cpu = |file: &str| {
                let list = read(self.parent.join(file));
                list.split_whitespace().any(|c| c == "cpu")
            };
            if !has_cpu("cgroup.controllers") {
                return Err(format!("{}: no cpu controller", self.parent.display()));
            }
            if !has_cpu("cgroup.subtree_control") {
                write(&self.parent.join("cgroup.subtree_control"), "+cpu")
                    .map_err(|e| e.to_string())?;
            }
        }
        for &rank in ranks {
            let dir = self.parent.join(format!("{prefix}-n{rank}"));
            fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            self.dirs.push((rank, dir.clone()));
            if self.version == Version::V1 {
                write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())
                    .map_err(|e| e.to_string())?;
            }
            self.set(rank, None).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The interface in use.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The ranks that have a group, ascending.
    pub fn ranks(&self) -> Vec<u32> {
        let mut ranks: Vec<u32> = self.dirs.iter().map(|(r, _)| *r).collect();
        ranks.sort_unstable();
        ranks
    }

    /// Node `rank`'s group directory, if it has one.
    pub fn dir(&self, rank: u32) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, d)| d.as_path())
    }

    /// Sets node `rank`'s quota to 1/`factor` of a CPU (`None`: unlimited); returns what was
    /// written where, for the user.
    pub fn set(&self, rank: u32, factor: Option<f64>) -> Result<String, CgroupError> {
        let Some(dir) = self.dir(rank) else {
            return Ok(String::new());
        };
        let (file, value) = self.version.quota(factor);
        write(&dir.join(file), &value)?;
        Ok(format!("{file} {value:?}"))
    }

    /// Prepares node `rank`'s command for its group, if it has one, as `scope` says; returns
    /// the group's directory. The node gets [`ROAM_CGROUP`], and with [`Scope::Process`] its
    /// process joins the group between fork and exec ([`Groups::join_before_exec`]); with
    /// [`Scope::Protocol`] it stays out and gets [`ROAM_SLOW_TASKS`], the group's `tasks`
    /// file, for its protocol threads to join by themselves.
    pub fn enrol(&self, rank: u32, scope: Scope, cmd: &mut Command) -> Option<&Path> {
        let dir = self.dir(rank)?;
        cmd.env(ROAM_CGROUP, dir);
        match scope {
            Scope::Process => self.join_before_exec(rank, cmd),
            // v1 only (`Scope::check`): v1's `tasks` takes thread ids, each moving one thread.
            Scope::Protocol => self.pass_tasks_before_exec(dir, cmd),
            // No groups are created for it (`launch.rs`).
            Scope::Service => {}
        }
        Some(dir)
    }

    /// Opens the group's `tasks` file between fork and exec as descriptor [`TASKS_FD`] of the
    /// node, which reaches it through [`ROAM_SLOW_TASKS`] = `/proc/self/fd/`[`TASKS_FD`]: a
    /// node in a network namespace (`ip netns exec` mounts a sysfs of its own, without the
    /// cgroup hierarchy) could not open the group's path itself.
    fn pass_tasks_before_exec(&self, dir: &Path, cmd: &mut Command) {
        cmd.env(ROAM_SLOW_TASKS, format!("/proc/self/fd/{TASKS_FD}"));
        let path = CString::new(dir.join("tasks").as_os_str().as_bytes())
            .expect("cgroup paths from mountinfo have no NUL");
        let open = move || {
            // Only async-signal-safe calls: this runs in the forked child.
            // SAFETY: `path` is a valid C string; the first descriptor is closed exactly once
            // and the duplicate (without close-on-exec) is meant to outlive the exec.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let dup = libc::dup2(fd, TASKS_FD);
                let e = io::Error::last_os_error();
                libc::close(fd);
                if dup == TASKS_FD { Ok(()) } else { Err(e) }
            }
        };
        // SAFETY: the closure makes only async-signal-safe calls and allocates nothing.
        unsafe {
            cmd.pre_exec(open);
        }
    }

    /// Makes `cmd`'s process join node `rank`'s group between fork and exec (if it has one).
    pub fn join_before_exec(&self, rank: u32, cmd: &mut Command) {
        let Some(dir) = self.dir(rank) else {
            return;
        };
        let path = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .expect("cgroup paths from mountinfo have no NUL");
        let join = move || {
            // Only async-signal-safe calls: this runs in the forked child. "0" means itself.
            // SAFETY: `path` is a valid C string; the fd is closed exactly once.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let e = io::Error::last_os_error();
                libc::close(fd);
                if n == 1 { Ok(()) } else { Err(e) }
            }
        };
        // SAFETY: the closure makes only async-signal-safe calls and allocates nothing.
        unsafe {
            cmd.pre_exec(join);
        }
    }

    /// Node `rank`'s throttling counters so far.
    pub fn stats(&self, rank: u32) -> Option<Stats> {
        let dir = self.dir(rank)?;
        fs::read_to_string(dir.join("cpu.stat"))
            .ok()
            .map(|t| Stats::parse(&t))
    }

    /// Removes every group, moving processes still inside to the parent first; returns one
    /// message per problem (empty: all gone). Calling it again does nothing.
    pub fn destroy(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for (_, dir) in self.dirs.drain(..).rev() {
            if let Err(e) = remove_group(&self.parent, &dir) {
                problems.push(e);
            }
        }
        problems
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        // Only reached with groups left on an error path or a panic; the normal path destroys
        // explicitly and reports through the launcher.
        for problem in self.destroy() {
            eprintln!("[launch] cpu cgroup cleanup: {problem}");
        }
    }
}

/// Where groups may go, in order, as (interface, parent directory), from the text of
/// `/proc/self/mountinfo` and `/proc/self/cgroup`: in v1's `cpu` hierarchy if it is mounted,
/// else in the cgroup2 one; in each, the launcher's own group first, then the root.
fn candidates(mountinfo: &str, own: &str) -> Vec<(Version, PathBuf)> {
    let mounts: Vec<(Version, &str, PathBuf)> = mountinfo
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let dash = f.iter().position(|&x| x == "-")?;
            let (root, point) = (*f.get(3)?, unescape(f.get(4)?));
            let (fstype, opts) = (*f.get(dash + 1)?, *f.get(dash + 3)?);
            match fstype {
                "cgroup" if opts.split(',').any(|o| o == "cpu") => Some((Version::V1, root, point)),
                "cgroup2" => Some((Version::V2, root, point)),
                _ => None,
            }
        })
        .collect();
    let version = if mounts.iter().any(|m| m.0 == Version::V1) {
        Version::V1
    } else {
        Version::V2
    };
    let mut out = Vec::new();
    for (_, root, point) in mounts.into_iter().filter(|m| m.0 == version) {
        // /proc/self/cgroup: "N:cpu,cpuacct:/path" (v1) or "0::/path" (v2).
        let path = own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let mine = match version {
                Version::V1 => controllers.split(',').any(|c| c == "cpu"),
                Version::V2 => controllers.is_empty(),
            };
            mine.then_some(path)
        });
        // Component-wise: a mount root `/sys` is not a prefix of `/system`.
        let relative = path.and_then(|p| Path::new(p).strip_prefix(root).ok());
        if let Some(rel) = relative.filter(|r| !r.as_os_str().is_empty()) {
            out.push((version, point.join(rel)));
        }
        out.push((version, point));
    }
    out.dedup();
    out
}

/// Undoes mountinfo's escapes of the characters that would break its format.
fn unescape(s: &str) -> PathBuf {
    let s = s.replace("\\040", " ").replace("\\011", "\t");
    PathBuf::from(s.replace("\\012", "\n").replace("\\134", "\\"))
}

fn read(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|error| CgroupError::Write {
        path: path.to_owned(),
        value: value.to_owned(),
        error,
    })
}

/// Moves what is still in `dir` to `parent`, then removes `dir` (retrying while the kernel
/// still counts exiting tasks in it).
fn remove_group(parent: &Path, dir: &Path) -> Result<(), String> {
    let mut last = None;
    for _ in 0..50 {
        for pid in read(dir.join("cgroup.procs")).split_whitespace() {
            let _ = fs::write(parent.join("cgroup.procs"), pid);
        }
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last = Some(e),
            Err(e) => return Err(format!("removing {}: {e}", dir.display())),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "removing {}: {}",
        dir.display(),
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

/// Removes the groups in `parent` whose launcher pid no longer runs; returns their names.
fn remove_stale(parent: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| launcher_pid(name).is_some_and(|pid| !crate::netns::alive(pid)))
        .filter(|name| remove_group(parent, &parent.join(name)).is_ok())
        .collect();
    removed.sort();
    removed
}

/// The launcher pid in a group name of this module (`roam-<pid>-<seq>-n<rank>`).
/// The launcher pid in a group name of this scheme (`roam-<pid>-<seq>-n<rank>`): the netns
/// scheme's parse, with the rank part checked too.
fn launcher_pid(name: &str) -> Option<libc::pid_t> {
    let rank = name.rsplit('-').next()?.strip_prefix('n')?;
    let digits = !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit());
    crate::netns::launcher_pid(name).filter(|&pid| digits && pid > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_a_fraction_of_one_period() {
        assert_eq!(
            Version::V1.quota(Some(4.0)),
            ("cpu.cfs_quota_us", "25000".into())
        );
        assert_eq!(Version::V1.quota(Some(3.0)).1, "33333");
        assert_eq!(Version::V1.quota(Some(100.0)).1, "1000");
        assert_eq!(Version::V1.quota(None).1, "-1");
        assert_eq!(
            Version::V2.quota(Some(2.5)),
            ("cpu.max", "40000 100000".into())
        );
        assert_eq!(Version::V2.quota(None).1, "max 100000");
    }

    #[test]
    fn stats_parse_both_versions() {
        let v1 = "nr_periods 12\nnr_throttled 9\nthrottled_time 1500000000\nnr_bursts 0\n";
        let v2 = "usage_usec 5\nnr_periods 7\nnr_throttled 3\nthrottled_usec 250000\n";
        let ms = Duration::from_millis;
        assert_eq!(
            (Stats::parse(v1), Stats::parse(v2)),
            (
                Stats {
                    nr_periods: 12,
                    nr_throttled: 9,
                    throttled: ms(1500)
                },
                Stats {
                    nr_periods: 7,
                    nr_throttled: 3,
                    throttled: ms(250)
                },
            )
        );
    }

    #[test]
    fn candidates_come_from_mountinfo_and_the_own_group() {
        let hybrid = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:7 - cgroup cgroup rw,cpu,cpuacct
33 31 0:30 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw";
        let v1 = |p: &str| (Version::V1, PathBuf::from(p));
        let own = "4:memory:/x\n2:cpu,cpuacct:/user/1\n0::/y\n";
        assert_eq!(
            candidates(hybrid, own),
            [
                v1("/sys/fs/cgroup/cpu,cpuacct/user/1"),
                v1("/sys/fs/cgroup/cpu,cpuacct")
            ]
        );
        assert_eq!(
            candidates(hybrid, "1:cpu:/\n"),
            [v1("/sys/fs/cgroup/cpu,cpuacct")]
        );

        // Without v1's cpu controller: cgroup2, also below a mount root and with escapes.
        let v2 = "41 31 0:38 /sys /mnt/cg\\0402 rw - cgroup2 none rw\n";
        assert_eq!(
            candidates(v2, "0::/sys/a.slice\n"),
            [
                (Version::V2, "/mnt/cg 2/a.slice".into()),
                (Version::V2, "/mnt/cg 2".into())
            ]
        );
        assert_eq!(
            candidates(v2, "0::/system\n"),
            [(Version::V2, "/mnt/cg 2".into())]
        );
        assert_eq!(candidates("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n", ""), []);
    }

    #[test]
    fn the_protocol_scope_is_refused_in_cgroup_v2_before_anything_exists() {
        let hybrid = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let v1 = candidates(hybrid, "2:cpu:/\n");
        let v2 = candidates(
            "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            "0::/a\n",
        );
        assert_eq!(v1[0].0, Version::V1);
        assert_eq!(v2[0].0, Version::V2);
        for places in [&v1, &v2] {
            assert!(Scope::Process.check(places).is_ok());
        }
        assert!(Scope::Protocol.check(&v1).is_ok());
        let e = Scope::Protocol.check(&v2).unwrap_err();
        assert!(
            matches!(&e, CgroupError::ThreadsNeedV1 { parent } if parent == Path::new("/sys/fs/cgroup/a")),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("--slow-scope protocol needs cgroup v1")
                && text.contains("/sys/fs/cgroup/a"),
            "{text}"
        );
        // Nowhere to go is the creation's error to report (every place tried), not the scope's.
        assert!(Scope::Protocol.check(&[]).is_ok());
    }

    #[test]
    fn clap_names_match_the_scope_names() {
        use clap::ValueEnum;
        for s in Scope::value_variants() {
            assert_eq!(s.to_possible_value().unwrap().get_name(), s.name());
        }
        assert_eq!(Scope::default(), Scope::Process);
    }

    #[test]
    fn stale_groups_are_recognised_by_their_launcher_pid() {
        assert_eq!(launcher_pid("roam-4242-0-n1"), Some(4242));
        assert_eq!(launcher_pid("roam-4242-17-n10"), Some(4242));
        for other in [
            "roam-4242-0",
            "roam-4242-0-sw",
            "roam-x-0-n1",
            "roam-0-0-n1",
            "user.slice",
        ] {
            assert_eq!(launcher_pid(other), None, "{other}");
        }
        assert!(crate::netns::alive(std::process::id() as libc::pid_t));
    }
}
