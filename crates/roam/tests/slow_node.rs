//! Integration tests of `roam launch --slow-node` with small shell programs as nodes, and of
//! `--slow-scope protocol` with real roam nodes (this test binary itself, running only
//! [`node_reports_its_slowed_threads`]).
//!
//! They need root and a writable cpu cgroup (cgroup v1's for `--slow-scope protocol`); without
//! them each test prints why it is skipped and passes. Whether a node was slowed is read from
//! the kernel's own accounting: the group's `cpu.stat` counters, which the launcher prints at
//! exit, and the node's `/proc/self/cgroup` (per thread: `/proc/self/task/<tid>/cgroup`).
//! The tests run one at a time so that their burners do not compete with each other.

mod common;

use common::Capture;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use roam::cgroup::{Groups, ROAM_CGROUP, ROAM_SLOW_TASKS, Scope};
use roam::launch::{LaunchArgs, run_with_output};

/// Serializes the tests of this file and checks that a cpu cgroup for `scope` can be created
/// (and removes the probe); `None` (after printing the reason) means skip.
fn setup(test: &str, scope: Scope) -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping {test}: cpu cgroups need root");
        return None;
    }
    match Groups::create(&[0], scope) {
        Ok((mut probe, _)) => {
            assert_eq!(probe.destroy(), Vec::<String>::new());
            Some(guard)
        }
        Err(e) => {
            eprintln!("skipping {test}: {e}");
            None
        }
    }
}

fn sh(nodes: u32, slow: &[&str], script: &str) -> LaunchArgs {
    LaunchArgs {
        nodes,
        workers_per_node: None,
        latency_us: None,
        slow_node: slow.iter().map(|s| s.parse().unwrap()).collect(),
        slow_scope: Scope::Process,
        balancer: None,
        metrics_addr: None,
        network: Default::default(),
        membership: Default::default(),
        restarts: Default::default(),
        program: vec!["sh".into(), "-c".into(), script.into()],
    }
}

/// Runs the launcher, returning (exit code, stdout, stderr).
fn launch(args: &LaunchArgs) -> (i32, String, String) {
    let (out, err) = (Capture::default(), Capture::default());
    let code = run_with_output(args, out.clone(), err.clone()).unwrap();
    (code, out.text(), err.text())
}

/// The value of `key=` in the first stderr line that starts with `[launch] <start>`.
fn launch_field(err: &str, start: &str, key: &str) -> Option<u64> {
    let line = err
        .lines()
        .find(|l| l.starts_with(&format!("[launch] {start}")))?;
    let word = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))?;
    Some(word.parse().unwrap())
}

/// The cgroup directory named in the launcher's "node R throttled ..." line.
fn group_dir(err: &str, rank: u32) -> String {
    let line = err
        .lines()
        .find(|l| l.starts_with(&format!("[launch] node {rank} throttled")))
        .unwrap_or_else(|| panic!("no throttle line for node {rank}: {err}"));
    let dir = line.rsplit_once(" in ").unwrap().1.trim_end_matches(')');
    assert!(dir.contains("/roam-"), "{line}");
    dir.to_owned()
}

#[test]
fn a_slowed_node_is_throttled_and_the_others_are_not() {
    let Some(_serial) = setup(
        "a_slowed_node_is_throttled_and_the_others_are_not",
        Scope::Process,
    ) else {
        return;
    };
    // Every node: where it is (also from a child process), then a fixed amount of work on
    // two processes, which the 1/4-CPU quota of rank 1 cannot cover in any full period.
    let script = r#"
        echo "roam-groups=$(grep -c /roam- /proc/self/cgroup) env=${ROAM_CGROUP:-none}"
        if [ -n "$ROAM_CGROUP" ]; then
            echo "self-in-group=$(grep -cx $$ "$ROAM_CGROUP/cgroup.procs")"
        fi
        burn() { i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; }
        burn & burn; wait
        echo "child-groups=$(sh -c 'grep -c /roam- /proc/self/cgroup')"
    "#;
    let (code, out, err) = launch(&sh(2, &["1:4"], script));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");

    let dir = group_dir(&err, 1);
    let name = Path::new(&dir).file_name().unwrap().to_str().unwrap();
    assert!(name.ends_with("-n1"), "{dir}");
    assert!(
        err.contains("[launch] node 1 throttled to 1/4 of a CPU at 0.0 s"),
        "{err}"
    );
    assert!(
        out.contains(&format!("[node 1] roam-groups=1 env={dir}")),
        "{out}"
    );
    assert!(out.contains("[node 1] self-in-group=1"), "{out}");
    assert!(out.contains("[node 1] child-groups=1"), "{out}");
    assert!(out.contains("[node 0] roam-groups=0 env=none"), "{out}");
    assert!(out.contains("[node 0] child-groups=0"), "{out}");

    // The kernel's accounting, read by the launcher before it removed the group.
    let exit = "node 1 cpu cgroup at exit:";
    let throttled = launch_field(&err, exit, "nr_throttled").expect(&err);
    assert!(throttled > 0, "rank 1 was never throttled: {err}");
    assert!(launch_field(&err, exit, "throttled_ms").is_some(), "{err}");
    assert!(
        !err.contains("node 0 cpu cgroup"),
        "rank 0 has no group: {err}"
    );
    assert!(!err.contains("node 0 throttled"), "{err}");
    assert!(!Path::new(&dir).exists(), "{dir} was not removed");
}

#[test]
fn a_scheduled_straggler_appears_and_recovers() {
    let Some(_serial) = setup("a_scheduled_straggler_appears_and_recovers", Scope::Process) else {
        return;
    };
    // Node 1 watches its own quota file and prints each value it sees, until the quota has
    // come and gone (or 60 s passed: a hang guard, not a timing assumption).
    let script = r#"
        [ "$ROAM_RANK" = 1 ] || exit 0
        f="$ROAM_CGROUP/cpu.cfs_quota_us"; [ -e "$f" ] || f="$ROAM_CGROUP/cpu.max"
        last=""; limited=0; n=0
        while [ $n -lt 6000 ]; do
            q=$(cat "$f")
            if [ "$q" != "$last" ]; then echo "quota $q"; last=$q; fi
            case "$q" in
                -1|max*) if [ $limited = 1 ]; then break; fi ;;
                *) limited=1 ;;
            esac
            n=$((n+1)); sleep 0.01
        done
    "#;
    let (code, out, err) = launch(&sh(2, &["1:4@0.3-1.2"], script));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let mut seen: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("[node 1] quota "))
        .collect();
    // Unlimited before the window, unless the node took 0.3 s to look for the first time.
    if seen.len() == 3 && seen[0] == seen[2] {
        seen.remove(0);
    }
    assert!(
        seen == ["25000", "-1"] || seen == ["25000 100000", "max 100000"],
        "node 1 saw its quota as {seen:?}; stderr: {err}"
    );
    let dir = group_dir(&err, 1);
    assert!(
        err.contains("[launch] node 1 throttled to 1/4 of a CPU at "),
        "{err}"
    );
    assert!(err.contains("[launch] node 1 unthrottled at "), "{err}");
    assert!(
        launch_field(&err, "node 1 cpu cgroup at exit:", "nr_periods").is_some(),
        "{err}"
    );
    assert!(!Path::new(&dir).exists(), "{dir} was not removed");
}

#[test]
fn cgroups_are_removed_when_a_node_fails() {
    let Some(_serial) = setup("cgroups_are_removed_when_a_node_fails", Scope::Process) else {
        return;
    };
    let script = r#"if [ "$ROAM_RANK" = 0 ]; then exit 3; fi; sleep 60"#;
    let (code, _, err) = launch(&sh(2, &["0:2", "1:4"], script));
    assert_eq!(code, 3, "stderr: {err}");
    for rank in [0, 1] {
        let dir = group_dir(&err, rank);
        assert!(!Path::new(&dir).exists(), "{dir} was not removed");
    }
}

/// The protocol threads of node `rank` in a 2-node run, by name.
fn protocol_threads(rank: u32) -> BTreeSet<String> {
    let peer = 1 - rank;
    [
        format!("roam-accept-{rank}"),
        // Links nodes that join at run time (elastic membership).
        format!("roam-members-{rank}"),
        format!("roam-read-{peer}"),
        format!("roam-send-{peer}"),
        format!("roam-server-{rank}"),
        format!("roam-timers-{rank}"),
    ]
    .into()
}

/// The names after `[node R] <key>:` in the launcher's stdout, as a set.
fn reported(out: &str, rank: u32, key: &str) -> BTreeSet<String> {
    let start = format!("[node {rank}] {key}:");
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&start))
        .unwrap_or_else(|| panic!("no {start:?} line in: {out}"));
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn protocol_scope_slows_only_the_protocol_threads() {
    let Some(_serial) = setup(
        "protocol_scope_slows_only_the_protocol_threads",
        Scope::Protocol,
    ) else {
        return;
    };
    // Every node runs this test binary's node program, two workers busy on both nodes' keys.
    let exe = std::env::current_exe().unwrap();
    let args = LaunchArgs {
        nodes: 2,
        workers_per_node: Some(2),
        latency_us: None,
        slow_node: vec!["1:4".parse().unwrap()],
        slow_scope: Scope::Protocol,
        balancer: None,
        metrics_addr: None,
        network: Default::default(),
        membership: Default::default(),
        restarts: Default::default(),
        program: [
            exe.as_os_str(),
            "node_reports_its_slowed_threads".as_ref(),
            "--exact".as_ref(),
            "--ignored".as_ref(),
            "--nocapture".as_ref(),
            "--test-threads=1".as_ref(),
        ]
        .map(Into::into)
        .into(),
    };
    let (code, out, err) = launch(&args);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("[launch] --slow-scope protocol: only the protocol threads"),
        "{err}"
    );
    assert!(
        err.contains("[launch] node 1 throttled to 1/4 of a CPU at 0.0 s"),
        "{err}"
    );
    let dir = group_dir(&err, 1);

    // Rank 1: its protocol threads joined, as the kernel sees each thread; nothing else did.
    assert!(
        out.contains("[node 1] condition met"),
        "stdout: {out}\nstderr: {err}"
    );
    assert!(
        // The group's `tasks` file comes as a descriptor opened before exec (a node in a
        // network namespace could not open the group's path itself).
        out.contains(&format!(
            "[node 1] group={dir} tasks=/proc/self/fd/{}",
            roam::cgroup::TASKS_FD
        )),
        "{out}"
    );
    let protocol = protocol_threads(1);
    let slowed = reported(&out, 1, "in-group");
    // Handshake threads start from the acceptor and so share its group (if still running).
    let extra: Vec<&String> = slowed
        .difference(&protocol)
        .filter(|n| *n != "roam-handshake")
        .collect();
    assert!(
        slowed.is_superset(&protocol) && extra.is_empty(),
        "rank 1 threads in its group: {slowed:?}, expected {protocol:?}\n{out}"
    );
    let unslowed = reported(&out, 1, "not-in-group");
    for name in ["main", "test-worker-0", "test-worker-1"] {
        assert!(unslowed.contains(name), "{name} not reported: {out}");
    }
    assert!(
        unslowed.iter().all(|n| !n.starts_with("roam-")),
        "rank 1 protocol threads outside its group: {unslowed:?}\n{out}"
    );
    // The group's own list agrees: the protocol threads, and no main or worker thread.
    let listed = reported(&out, 1, "in-tasks-file");
    assert!(listed.is_superset(&protocol), "{listed:?}\n{out}");
    assert!(
        listed.is_disjoint(&unslowed),
        "{listed:?} against {unslowed:?}\n{out}"
    );

    // Rank 0 is not slowed: no group, every thread outside any roam group.
    assert!(out.contains("[node 0] condition met"), "{out}");
    assert!(out.contains("[node 0] group=none tasks=none"), "{out}");
    assert_eq!(reported(&out, 0, "in-group"), BTreeSet::new(), "{out}");
    assert!(
        reported(&out, 0, "not-in-group").is_superset(&protocol_threads(0)),
        "{out}"
    );

    // The quota was applied to the group, and the group is gone.
    let exit = "node 1 cpu cgroup at exit:";
    assert!(launch_field(&err, exit, "nr_periods").is_some(), "{err}");
    assert!(!err.contains("node 0 cpu cgroup"), "{err}");
    assert!(!Path::new(&dir).exists(), "{dir} was not removed");
}

/// One thread of this process: its id, its name (or `main` for the process's first thread,
/// `starter` for the thread that started the node) and its cpu cgroup path.
struct Thread {
    tid: i32,
    name: String,
    cpu_cgroup: String,
}

/// Every thread of this process as the kernel lists it now (threads that end meanwhile are
/// left out).
fn threads(starter: i32) -> Vec<Thread> {
    let pid = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let read = |file: &str| std::fs::read_to_string(entry.path().join(file));
        let (Ok(comm), Ok(cgroup)) = (read("comm"), read("cgroup")) else {
            continue;
        };
        // "N:cpu,cpuacct:/path" in v1, "0::/path" in v2.
        let cpu_cgroup = cgroup
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "cpu" || c.is_empty())
                    .then(|| path.to_owned())
            })
            .unwrap_or_default();
        let name = match tid {
            t if t == pid => "main".to_owned(),
            t if t == starter => "starter".to_owned(),
            _ => comm.trim_end().to_owned(),
        };
        found.push(Thread {
            tid,
            name,
            cpu_cgroup,
        });
    }
    found
}

/// The node program of [`protocol_scope_slows_only_the_protocol_threads`], started by `roam
/// launch` as every node: a 2-node roam node whose two worker threads push and pull both
/// nodes' keys while it waits (up to a hang guard) until its protocol threads are in its cpu
/// cgroup, if it has one, then reports which threads the kernel has where.
#[test]
#[ignore = "a node program, run by protocol_scope_slows_only_the_protocol_threads"]
fn node_reports_its_slowed_threads() {
    if std::env::var_os("ROAM_RANK").is_none() || std::env::var_os("ROAM_COORDINATOR").is_none() {
        eprintln!("node_reports_its_slowed_threads runs only as a node started by roam launch");
        return;
    }
    let env = |name: &str| std::env::var(name).ok();
    let (group, tasks) = (env(ROAM_CGROUP), env(ROAM_SLOW_TASKS));
    let node = roam::NodeHandle::start(roam::Config::new(1000, 4)).expect("node starts");
    let rank = node.rank();
    // SAFETY: gettid has no preconditions.
    let starter = unsafe { libc::gettid() };
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = node
        .workers()
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("test-worker-{i}"))
                .spawn(move || {
                    // Keys of both nodes: remote accesses are served by the peer's readers.
                    let keys: Vec<u64> = (0..1000).step_by(50).collect();
                    let vals = vec![0.5f32; keys.len() * 4];
                    let mut out = vec![0.0f32; keys.len() * 4];
                    while !stop.load(Ordering::Acquire) {
                        w.push(&keys, &vals).unwrap().wait().unwrap();
                        w.pull(&keys, &mut out).unwrap().wait().unwrap();
                    }
                    w.barrier().unwrap();
                })
                .unwrap()
        })
        .collect();

    // Threads name themselves and join the group as they start: wait for both, a condition
    // polled with a hang guard, not a time assumed enough.
    let group_name = group.as_deref().map(|g| {
        let name = Path::new(g).file_name().unwrap().to_str().unwrap();
        format!("/{name}")
    });
    let in_group = |t: &Thread| match &group_name {
        Some(name) => t.cpu_cgroup.ends_with(name.as_str()),
        None => t.cpu_cgroup.contains("/roam-"),
    };
    let mut wanted = protocol_threads(rank);
    wanted.extend(["test-worker-0".to_owned(), "test-worker-1".to_owned()]);
    let guard = Instant::now() + Duration::from_secs(60);
    let (seen, met) = loop {
        let seen = threads(starter);
        let names: BTreeSet<String> = seen.iter().map(|t| t.name.clone()).collect();
        let joined = group.is_none()
            || seen
                .iter()
                .filter(|t| t.name.starts_with("roam-"))
                .all(&in_group);
        if names.is_superset(&wanted) && joined {
            break (seen, true);
        }
        if Instant::now() >= guard {
            break (seen, false);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let names = |pick: &dyn Fn(&Thread) -> bool| {
        let mut n: Vec<&str> = seen
            .iter()
            .filter(|t| pick(t))
            .map(|t| t.name.as_str())
            .collect();
        n.sort_unstable();
        n.join(" ")
    };
    let listed: BTreeSet<i32> = tasks
        .as_deref()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .unwrap_or_default()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    // A line of its own: libtest has printed "test <name> ... " without a newline.
    println!();
    println!("condition {}", if met { "met" } else { "not met in 60 s" });
    println!(
        "group={} tasks={}",
        group.as_deref().unwrap_or("none"),
        tasks.as_deref().unwrap_or("none")
    );
    println!("in-group: {}", names(&|t| in_group(t)));
    println!("not-in-group: {}", names(&|t| !in_group(t)));
    println!("in-tasks-file: {}", names(&|t| listed.contains(&t.tid)));

    stop.store(true, Ordering::Release);
    for w in workers {
        w.join().unwrap();
    }
    node.shutdown().unwrap();
}
