//! Integration tests of `roam launch --slow-node` with small shell programs as nodes.
//!
//! They need root and a writable cpu cgroup; without them each test prints why it is skipped
//! and passes. Whether a node was slowed is read from the kernel's own accounting: the group's
//! `cpu.stat` counters, which the launcher prints at exit, and the node's `/proc/self/cgroup`.
//! The tests run one at a time so that their burners do not compete with each other.

mod common;

use common::Capture;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use roam::cgroup::Groups;
use roam::launch::{LaunchArgs, run_with_output};

/// Serializes the tests of this file and checks that a cpu cgroup can be created (and removes
/// the probe); `None` (after printing the reason) means skip.
fn setup(test: &str) -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping {test}: cpu cgroups need root");
        return None;
    }
    match Groups::create(&[0]) {
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
        network: Default::default(),
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
    let Some(_serial) = setup("a_slowed_node_is_throttled_and_the_others_are_not") else {
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
    let Some(_serial) = setup("a_scheduled_straggler_appears_and_recovers") else {
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
    let Some(_serial) = setup("cgroups_are_removed_when_a_node_fails") else {
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
