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

/// The tests of this file each run 4 nodes on a machine that may have 2 cores: one at a time,
/// or a node held back by another test's nodes would look like a straggler.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_node_held_to_a_quarter_of_a_cpu_is_named_by_every_node() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: cpu cgroups need root");
        return;
    }
    // Detection alone: the balancer would move node 2's load away, and with it the evidence,
    // before every node had named it.
    let out = launch_mf(
        &["--slow-node", "2:4", "--balancer", "off"],
        "rows=10000,cols=5000,rank=10,nnz=2e6,zipf=0.5,noise=0.1,test=0.1,seed=1",
        "4",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("--slow-node needs a writable cpu cgroup") {
        eprintln!("skipping: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let stats = node_stats(&String::from_utf8_lossy(&out.stdout), &stderr);
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

/// Server-side statistics on real processes: node 2 serves peers' pulls and pushes four times
/// slower (`--slow-scope service`: a delay in its transport, no cgroup, no root). Every node
/// hears every member's serving, and node 2's capacity — keys served per busy second — is the
/// lowest in every node's view. (A CPU quota does not show here: it delays when a node reads
/// its requests, not how long serving a key takes once read; response times find it, above.)
#[test]
fn a_node_serving_slowly_has_the_lowest_capacity_in_every_view() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = launch_mf(
        &[
            "--slow-node",
            "2:4",
            "--slow-scope",
            "service",
            "--balancer",
            "off",
        ],
        "rows=10000,cols=5000,rank=10,nnz=2e6,zipf=0.5,noise=0.1,test=0.1,seed=1",
        "3",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for s in node_stats(&String::from_utf8_lossy(&out.stdout), &stderr) {
        let service = s["service"].as_array().expect("service");
        let capacity = |node: u64| {
            let m = service.iter().find(|m| m["node"] == node);
            m.and_then(|m| m["capacity_keys_per_s"].as_f64())
                .unwrap_or_else(|| panic!("node {}: no capacity of {node}: {s}", s["rank"]))
        };
        for other in [0, 1, 3] {
            assert!(
                capacity(2) < capacity(other),
                "node {}: {service:?}",
                s["rank"]
            );
        }
        assert!(s["service_busy_ns"].as_u64().unwrap() > 0, "{s}");
    }
}

/// A 4-node MF run in `classic` mode under `roam launch` with `launch` options.
fn launch_mf(launch: &[&str], synthetic: &str, epochs: &str) -> std::process::Output {
    Command::new(roam())
        .args(["launch", "--nodes", "4"])
        .args(launch)
        .args(["--", roam()])
        .args(["train", "mf", "--mode", "classic", "--synthetic", synthetic])
        .args(["--epochs", epochs, "--json"])
        .output()
        .expect("running roam launch")
}

/// Every node's stats of [`launch_mf`] on a 1 M-rating matrix, which must succeed.
fn run_mf(launch: &[&str], epochs: &str) -> (Vec<Value>, String) {
    let synthetic = "rows=10000,cols=5000,rank=10,nnz=1e6,noise=0.1,test=0.1,seed=1";
    let out = launch_mf(launch, synthetic, epochs);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (
        node_stats(&String::from_utf8_lossy(&out.stdout), &stderr),
        stderr,
    )
}

/// The stats line of each of the 4 nodes in a run's output, by rank.
fn node_stats(stdout: &str, stderr: &str) -> Vec<Value> {
    let mut stats: Vec<Value> = stdout
        .lines()
        .filter_map(|line| {
            let body = line.split_once("] ").map_or(line, |(_, b)| b);
            serde_json::from_str::<Value>(body)
                .ok()?
                .get("roam_node_stats")
                .cloned()
        })
        .collect();
    stats.sort_by_key(|s| s["rank"].as_u64());
    assert_eq!(stats.len(), 4, "{stdout}\n{stderr}");
    stats
}

/// The load balancer in real processes: node 2 serves its peers 40× slower (a service delay in
/// its transport, no root needed; it answered in 1.2 ms against 0.46 ms under the 10gbe profile
/// when this was written, far beyond the balancer's 1.5×), so the coordinator shrinks its share
/// and, in `classic` mode, its keys move to the other nodes. With `--balancer off` nothing
/// moves.
#[test]
fn the_balancer_moves_keys_away_from_a_slow_server_and_off_means_off() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let slow = ["--slow-node", "2:40", "--slow-scope", "service"];
    let (stats, stderr) = run_mf(&slow, "8");
    let coordinator = &stats[0];
    let decisions = coordinator["balance_decisions"]
        .as_array()
        .expect("decisions");
    assert!(
        decisions
            .iter()
            .any(|d| d["kind"] == "Shrink" && d["node"] == 2),
        "{decisions:?}\n{stderr}"
    );
    assert!(coordinator["balancer_moves"].as_u64().unwrap() > 0);
    let held: Vec<u64> = stats
        .iter()
        .map(|s| s["keys_held"].as_u64().unwrap())
        .collect();
    for n in [0, 1, 3] {
        assert!(
            held[2] * 2 < held[n],
            "node 2 still holds {} keys against node {n}'s {}: {held:?}",
            held[2],
            held[n]
        );
    }
    let (stats, _) = run_mf(&[&slow[..], &["--balancer", "off"]].concat(), "3");
    for s in &stats {
        assert_eq!(s["balancer_moves"], 0, "{s}");
        assert!(s["balance_decisions"].as_array().unwrap().is_empty(), "{s}");
    }
}
