//! Helpers shared by the multi-process tests: run `roam` (or `roam launch -- roam ...`) and read
//! the JSON lines it prints (training jobs are run with `--json`, which prints the report and
//! every node's counters on stdout).
#![allow(dead_code, unreachable_pub)]

pub mod http;

use std::process::{Command, Output};

/// Path of the `roam` binary under test.
pub fn roam() -> &'static str {
    env!("CARGO_BIN_EXE_roam")
}

/// `args` with `--json` added when they run a training job (`train APP ...`).
pub fn with_json<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut args = args.to_vec();
    if args.first() == Some(&"train") {
        args.push("--json");
    }
    args
}

/// Runs `roam launch --nodes N --workers-per-node T -- roam ARGS...` (with `--json` for a
/// training job), asserting success; returns stdout.
pub fn launch(nodes: u32, workers: u32, args: &[&str]) -> String {
    let args = &with_json(args)[..];
    let out: Output = Command::new(roam())
        .args([
            "launch",
            "--nodes",
            &nodes.to_string(),
            "--workers-per-node",
            &workers.to_string(),
            "--",
            roam(),
        ])
        .args(args)
        .output()
        .expect("running roam launch");
    check(out, args)
}

/// Runs `roam ARGS...` directly (one process, with `--json` for a training job), asserting
/// success; returns stdout.
pub fn run(args: &[&str]) -> String {
    let args = &with_json(args)[..];
    let out = Command::new(roam())
        .args(args)
        .output()
        .expect("running roam");
    check(out, args)
}

fn check(out: Output, args: &[&str]) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "roam {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// Every JSON object printed on a line (with or without a `[node R] ` prefix).
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| {
            if l.starts_with("[node ") {
                l.split_once("] ").map_or(l, |(_, rest)| rest)
            } else {
                l
            }
        })
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect()
}

/// The first JSON line that has `field` equal to `value`.
pub fn json_with(stdout: &str, field: &str, value: &str) -> serde_json::Value {
    json_lines(stdout)
        .into_iter()
        .find(|v| v[field].as_str() == Some(value))
        .unwrap_or_else(|| panic!("no JSON line with {field} = {value} in:\n{stdout}"))
}

/// The per-node stats lines printed at shutdown.
pub fn node_stats(stdout: &str) -> Vec<serde_json::Value> {
    json_lines(stdout)
        .into_iter()
        .filter_map(|v| v.get("roam_node_stats").cloned())
        .collect()
}

/// Sum of an integer field over the per-node stats.
pub fn sum(stats: &[serde_json::Value], field: &str) -> u64 {
    stats
        .iter()
        .map(|s| {
            s[field]
                .as_u64()
                .unwrap_or_else(|| panic!("no {field} in {s}"))
        })
        .sum()
}

/// The `epochs` list of a training report.
pub fn epochs(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["epochs"].as_array().expect("epochs list")
}

/// Field `field` of a training report's last epoch.
pub fn last_epoch(report: &serde_json::Value, field: &str) -> f64 {
    epochs(report)
        .last()
        .and_then(|e| e[field].as_f64())
        .unwrap_or_else(|| panic!("no {field} in the last epoch of {report}"))
}

/// The loss of every epoch of a training report.
pub fn losses(report: &serde_json::Value) -> Vec<f64> {
    epochs(report)
        .iter()
        .map(|e| e["loss"].as_f64().expect("loss"))
        .collect()
}

/// A fresh scratch directory for one test of `suite` (unique per process and name).
pub fn scratch(suite: &str, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("roam-{suite}-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a scratch directory");
    dir
}

/// Runs `roam ARGS` expecting failure without a panic; returns stderr.
pub fn fails(args: &[&str]) -> String {
    let out = Command::new(roam())
        .args(args)
        .output()
        .expect("running roam");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "roam {args:?} should fail:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "errors are reported, not panics: {stderr}"
    );
    stderr
}
