//! Straggler detection in real processes (issue #14): four nodes train MF in `classic` mode while
//! `roam launch --slow-node 2:4` holds node 2 to a quarter of a CPU through its cpu cgroup;
//! every node's stats must name node 2 — and only node 2 — a straggler, with the evidence.
//!
//! Needs root and a writable cpu cgroup; without them the test prints why it is skipped and
//! passes. The throttled node answered in 0.5–0.6 ms against 0.18 ms for the others when this
//! was written (docs/elasticity.md), far beyond the detector's 2× and 0.1 ms.

mod common;

use std::process::Command;

use common::roam;
use serde_json::Value;

#[test]
fn a_node_held_to_a_quarter_of_a_cpu_is_named_by_every_node() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: cpu cgroups need root");
        return;
    }
    let out = Command::new(roam())
        .args(["launch", "--nodes", "4", "--slow-node", "2:4", "--", roam()])
        .args([
            "train",
            "mf",
            "--mode",
            "classic",
            "--synthetic",
            "rows=10000,cols=5000,rank=10,nnz=2e6,zipf=0.5,noise=0.1,test=0.1,seed=1",
            "--epochs",
            "4",
        ])
        .output()
        .expect("running roam launch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("--slow-node needs a writable cpu cgroup") {
        eprintln!("skipping: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stats: Vec<Value> = stdout
        .lines()
        .filter_map(|line| {
            let body = line.split_once("] ").map_or(line, |(_, b)| b);
            serde_json::from_str::<Value>(body)
                .ok()?
                .get("roam_node_stats")
                .cloned()
        })
        .collect();
    assert_eq!(stats.len(), 4, "{stdout}\n{stderr}");
    for s in &stats {
        let found = s["stragglers"].as_array().expect("stragglers");
        assert!(
            !found.is_empty(),
            "node {} found no straggler: {s}",
            s["rank"]
        );
        for e in found {
            assert_eq!(e["node"], 2, "node {} named another node: {e}", s["rank"]);
            assert_eq!(e["slow"], true, "{e}");
        }
    }
    // Operators see it as it happens too.
    assert!(stderr.contains("2 is a straggler"), "{stderr}");
}
