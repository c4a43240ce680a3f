//! End-to-end runs of the real `roam` binary under `roam launch --netns`: every node in its own
//! network namespace behind a bridge, links shaped with `tc tbf`.
//!
//! They need root and working network namespaces; without them each test prints why it is
//! skipped and passes. Timings are printed (run with `--nocapture`), never asserted.

use std::fs;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

fn roam() -> &'static str {
    env!("CARGO_BIN_EXE_roam")
}

/// Serializes the tests (the benchmark should not share the CPUs with the other run) and
/// checks that namespaces are usable; `None` (after printing the reason) means skip.
fn setup(test: &str) -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // Refuses (with the reason) unless root with `ip`, `tc` and working namespaces.
    match roam::netns::preflight(true).and_then(|tools| tools.probe()) {
        Ok(()) => Some(guard),
        Err(e) => {
            eprintln!("skipping {test}: {e:#}");
            None
        }
    }
}

/// Runs `roam launch LAUNCH_ARGS -- roam NODE_ARGS`, asserting success and that the launcher
/// left no namespace behind; returns stdout and stderr.
fn launch(launch_args: &[&str], node_args: &[&str]) -> (String, String) {
    let child = Command::new(roam())
        .arg("launch")
        .args(launch_args)
        .arg("--")
        .arg(roam())
        .args(node_args)
        // Training jobs print their report and node counters on stdout only with --json.
        .args(
            node_args
                .first()
                .filter(|a| **a == "train")
                .map(|_| "--json"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running roam launch");
    let launcher = child.id();
    let out: Output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "roam launch {launch_args:?} -- roam {node_args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let prefix = format!("roam-{launcher}-");
    let left: Vec<String> = fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    (stdout, stderr)
}

/// Every JSON object printed on a line (with or without a `[node R] ` prefix).
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| l.split_once("] ").map_or(l, |(_, rest)| rest))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect()
}

#[test]
fn check_increments_passes_under_the_10gbe_profile() {
    let Some(_serial) = setup("check_increments_passes_under_the_10gbe_profile") else {
        return;
    };
    let (out, err) = launch(
        &["--netns", "--profile", "10gbe", "--nodes", "2"],
        &["check", "increments", "--keys", "4", "--ops", "2000"],
    );
    assert!(out.contains("verified exactly"), "{out}");
    assert!(
        err.contains("[launch] profile 10gbe: 10gbit per link and direction, 50 µs"),
        "{err}"
    );
    let stats: Vec<serde_json::Value> = json_lines(&out)
        .into_iter()
        .filter_map(|v| v.get("roam_node_stats").cloned())
        .collect();
    assert_eq!(stats.len(), 2, "{out}");
    for s in &stats {
        assert_eq!(s["emulated_latency_us"], 50, "{s}");
        assert!(s["bytes_received"].as_u64().unwrap() > 0, "{s}");
    }
}

#[test]
fn bench_ops_remote_pull_latency_loopback_vs_1gbe() {
    let Some(_serial) = setup("bench_ops_remote_pull_latency_loopback_vs_1gbe") else {
        return;
    };
    let bench = [
        "bench",
        "ops",
        "--keys",
        "100000",
        "--value-len",
        "10",
        "--batch",
        "1",
        "--seconds",
        "0.5",
        "--relocations",
        "200",
        "--path-samples",
        "500",
    ];
    let mut p50 = Vec::new();
    for (name, network) in [("loopback", &[][..]), ("1gbe", &["--profile", "1gbe"][..])] {
        let mut launch_args = vec!["--nodes", "2", "--workers-per-node", "1"];
        launch_args.extend_from_slice(network);
        let (out, _) = launch(&launch_args, &bench);
        let line = json_lines(&out)
            .into_iter()
            .find(|v| v["bench"] == "ops")
            .unwrap_or_else(|| panic!("no bench line in:\n{out}"));
        let expected_latency = if name == "1gbe" { 100 } else { 0 };
        assert_eq!(line["emulated_latency_us"], expected_latency, "{line}");
        let remote = line["remote_pull_p50_us"]
            .as_f64()
            .expect("remote pull p50");
        let owner = line["pull_latency_p50_us"]["owner"]
            .as_f64()
            .expect("owner path p50");
        println!(
            "{name}: remote pull p50 {remote:.1} µs (batch 1), single-key pull from the owner \
             p50 {owner:.1} µs, remote pulls {:.0} keys/s",
            line["remote_pull_keys_per_s"].as_f64().unwrap_or(0.0)
        );
        p50.push(remote);
    }
    println!(
        "1gbe - loopback remote pull p50: {:.1} µs (emulated: 2 x 100 µs = 200 µs)",
        p50[1] - p50[0]
    );
}
