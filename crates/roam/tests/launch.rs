//! Integration tests of `roam launch` with small shell programs as nodes.
//!
//! Output is captured through `run_with_output`; timing assertions are liveness bounds (the
//! launcher must not hang on a sleeping or TERM-ignoring sibling), not speed claims. The tests
//! run one at a time because two of them signal the whole test process, which every launch in
//! progress would forward to its own children.

mod common;

use common::Capture;
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use roam::launch::{LaunchArgs, run_with_output};

fn sh(nodes: u32, script: &str) -> LaunchArgs {
    LaunchArgs {
        nodes,
        workers_per_node: None,
        latency_us: None,
        slow_node: Vec::new(),
        slow_scope: Default::default(),
        balancer: None,
        metrics_addr: None,
        network: Default::default(),
        membership: Default::default(),
        restarts: Default::default(),
        program: vec!["sh".into(), "-c".into(), script.into()],
    }
}

/// Serializes the tests of this file (see the file comment).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs the launcher, returning (exit code, stdout, stderr, elapsed).
fn launch(args: &LaunchArgs) -> (i32, String, String, Duration) {
    let _serial = serial();
    let (out, err) = (Capture::default(), Capture::default());
    let start = Instant::now();
    let code = run_with_output(args, out.clone(), err.clone()).unwrap();
    (code, out.text(), err.text(), start.elapsed())
}

/// Splits `[node R] rest` into (R, rest).
fn split_prefix(line: &str) -> (u32, &str) {
    let rest = line
        .strip_prefix("[node ")
        .unwrap_or_else(|| panic!("unprefixed line {line:?}"));
    let (rank, rest) = rest
        .split_once("] ")
        .unwrap_or_else(|| panic!("malformed prefix in {line:?}"));
    (rank.parse().unwrap(), rest)
}

#[test]
fn all_succeed_and_every_line_is_prefixed() {
    let script = r#"
        echo "out $ROAM_RANK first"
        echo "err $ROAM_RANK" >&2
        i=0; while [ $i -lt 20 ]; do echo "out $ROAM_RANK line $i"; i=$((i+1)); done
        printf "out $ROAM_RANK unterminated"
    "#;
    let (code, out, err, _) = launch(&sh(3, script));
    assert_eq!(code, 0, "stderr: {err}");

    let out_lines: Vec<&str> = out.lines().collect();
    assert_eq!(out_lines.len(), 3 * 22, "{out}");
    for line in &out_lines {
        let (rank, rest) = split_prefix(line);
        assert!(rest.starts_with(&format!("out {rank} ")), "{line:?}");
    }
    let err_lines: Vec<&str> = err.lines().collect();
    assert_eq!(err_lines.len(), 3, "{err}");
    let ranks: BTreeSet<u32> = err_lines
        .iter()
        .map(|l| {
            let (rank, rest) = split_prefix(l);
            assert_eq!(rest, format!("err {rank}"));
            rank
        })
        .collect();
    assert_eq!(ranks, BTreeSet::from([0, 1, 2]));
}

#[test]
fn one_failure_stops_a_sleeping_sibling() {
    let script = r#"if [ "$ROAM_RANK" = 0 ]; then exit 3; fi; sleep 60; echo survived"#;
    let (code, out, err, elapsed) = launch(&sh(3, script));
    assert_eq!(code, 3, "stderr: {err}");
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    assert!(!out.contains("survived"), "{out}");
    assert!(err.contains("node 0 exited with code 3"), "{err}");
}

#[test]
fn a_sibling_ignoring_sigterm_is_killed_after_the_grace_period() {
    let script = r#"
        if [ "$ROAM_RANK" = 0 ]; then sleep 0.3; exit 1; fi
        trap '' TERM
        sleep 60
    "#;
    let (code, _, err, elapsed) = launch(&sh(2, script));
    assert_eq!(code, 1, "stderr: {err}");
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    assert!(err.contains("killing the remaining nodes"), "{err}");
}

#[test]
fn death_by_signal_gives_128_plus_signal() {
    let script = r#"if [ "$ROAM_RANK" = 1 ]; then kill -KILL $$; fi; sleep 60"#;
    let (code, _, err, elapsed) = launch(&sh(2, script));
    assert_eq!(code, 128 + 9, "stderr: {err}");
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
}

#[test]
fn children_see_distinct_ranks_and_one_token() {
    let script = concat!(
        r#"echo "$ROAM_RANK|$ROAM_NUM_NODES|$ROAM_COORDINATOR|$ROAM_CLUSTER_TOKEN|"#,
        r#"$ROAM_WORKERS_PER_NODE|$ROAM_EMULATE_LATENCY_US""#
    );
    let mut args = sh(4, script);
    args.workers_per_node = Some(6);
    args.latency_us = Some(250);
    let (code, out, err, _) = launch(&args);
    assert_eq!(code, 0, "stderr: {err}");

    let mut ranks = BTreeSet::new();
    let mut tokens = BTreeSet::new();
    let mut coordinators = BTreeSet::new();
    for line in out.lines() {
        let (prefix_rank, rest) = split_prefix(line);
        let f: Vec<&str> = rest.split('|').collect();
        assert_eq!(f.len(), 6, "{line}");
        assert_eq!(f[0], prefix_rank.to_string(), "prefix matches ROAM_RANK");
        assert_eq!(f[1], "4");
        assert!(
            f[2].starts_with("127.0.0.1:") && !f[2].ends_with(":0"),
            "{line}"
        );
        assert_eq!(f[3].len(), 64, "{line}");
        assert!(f[3].bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
        assert_eq!((f[4], f[5]), ("6", "250"));
        ranks.insert(prefix_rank);
        tokens.insert(f[3].to_owned());
        coordinators.insert(f[2].to_owned());
    }
    assert_eq!(ranks, BTreeSet::from([0, 1, 2, 3]));
    assert_eq!(tokens.len(), 1, "one token for the whole cluster");
    assert_eq!(coordinators.len(), 1);

    // A fresh launch gets a fresh token.
    let (_, out2, _, _) = launch(&sh(1, r#"echo "$ROAM_CLUSTER_TOKEN""#));
    let (_, token2) = split_prefix(out2.lines().next().unwrap());
    assert!(!tokens.contains(token2));
}

#[test]
fn a_missing_program_is_an_error_not_a_hang() {
    let args = LaunchArgs {
        nodes: 2,
        workers_per_node: None,
        latency_us: None,
        slow_node: Vec::new(),
        slow_scope: Default::default(),
        balancer: None,
        metrics_addr: None,
        network: Default::default(),
        membership: Default::default(),
        restarts: Default::default(),
        program: vec!["/nonexistent/roam-test-program".into()],
    };
    let _serial = serial();
    let err = run_with_output(&args, Capture::default(), Capture::default()).unwrap_err();
    assert!(
        format!("{err:#}").contains("/nonexistent/roam-test-program"),
        "{err:#}"
    );
}

#[test]
fn zero_nodes_or_no_program_is_an_error() {
    let _serial = serial();
    let err = run_with_output(&sh(0, "true"), Capture::default(), Capture::default());
    assert!(err.is_err());
    let mut args = sh(2, "true");
    args.program.clear();
    let err = run_with_output(&args, Capture::default(), Capture::default()).unwrap_err();
    assert!(err.to_string().contains("no program"), "{err}");
}

/// Starts a launch in the background, waits until every node printed "ready", then sends
/// SIGTERM to this test process `signals` times, 200 ms apart. Returns (code, stdout, stderr,
/// time from the first signal to the launcher's return).
fn launch_and_signal(args: LaunchArgs, signals: usize) -> (i32, String, String, Duration) {
    let _serial = serial();
    let (out, err) = (Capture::default(), Capture::default());
    let nodes = args.nodes as usize;
    let runner = {
        let (out, err) = (out.clone(), err.clone());
        thread::spawn(move || run_with_output(&args, out, err).unwrap())
    };
    let start = Instant::now();
    while out.text().matches("ready").count() < nodes {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nodes never got ready"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let first_signal = Instant::now();
    for i in 0..signals {
        if i > 0 {
            thread::sleep(Duration::from_millis(200));
        }
        // SAFETY: kill has no memory-safety preconditions. The launcher's handler is installed
        // (its children are running), so this does not terminate the test process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGTERM);
        }
    }
    let code = runner.join().unwrap();
    (code, out.text(), err.text(), first_signal.elapsed())
}

#[test]
fn sigterm_to_the_launcher_is_forwarded_to_the_nodes() {
    let script = r#"trap 'echo "stopping $ROAM_RANK"; exit 0' TERM; echo ready; sleep 60 & wait"#;
    let (code, out, err, elapsed) = launch_and_signal(sh(2, script), 1);
    assert_eq!(code, 128 + libc::SIGTERM, "stderr: {err}");
    assert!(out.contains("[node 0] stopping 0"), "{out}");
    assert!(out.contains("[node 1] stopping 1"), "{out}");
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
}

#[test]
fn a_second_signal_kills_without_waiting_out_the_grace_period() {
    let script = r#"trap '' TERM; echo ready; sleep 60"#;
    let (code, _, err, elapsed) = launch_and_signal(sh(2, script), 2);
    assert_eq!(code, 128 + libc::SIGTERM, "stderr: {err}");
    assert!(err.contains("killing the remaining nodes"), "{err}");
    assert!(elapsed < roam::launch::GRACE, "took {elapsed:?}");
}
