//! `roam launch --join-at / --drain-at` with the real binary on loopback: a 3-node `train mf
//! --mode classic` job gains two server-only nodes soon after it starts and has rank 3 drained
//! again; the other joiner serves to the end. The job still finishes with every process
//! (both joiners included) exiting 0 and a model that beats the global mean.
//!
//! The drain waits for the join by itself (the launcher asks again while rank 3 is no member
//! yet), and the job is long (20 epochs) against the drain's time, so nothing hangs on a race;
//! the assertions look only at what was printed and at the exit status, never at timings.

mod common;

use std::process::Command;

use common::{json_with, last_epoch, roam};

const SYNTHETIC: &str = "rows=5000,cols=2000,rank=5,nnz=5e5,noise=0.1,test=0.1,seed=1";

#[test]
fn a_node_joins_and_is_drained_during_a_launched_run() {
    let out = Command::new(roam())
        .args([
            "launch",
            "--nodes",
            "3",
            "--workers-per-node",
            "1",
            "--join-at",
            "0.2,0.4",
            "--drain-at",
            "3@1",
            "--",
            roam(),
            "train",
            "mf",
            "--mode",
            "classic",
            "--synthetic",
            SYNTHETIC,
            "--epochs",
            "20",
            "--json",
        ])
        .output()
        .expect("running roam launch");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "roam launch failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for line in [
        "[launch] joiner 1 started at",
        "[launch] joiner 2 started at",
        // Which joiner gets which rank depends on which reaches the coordinator first.
        "roam: joined the running job as rank 3 (a server)",
        "roam: joined the running job as rank 4 (a server)",
        "[launch] draining node 3 at",
        "[launch] node 3 drained at",
        "node 3 was drained and left",
        "roam: rank 3 is done",
        "roam: rank 4 is done",
    ] {
        assert!(stderr.contains(line), "{line:?} missing from:\n{stderr}");
    }
    assert!(!stderr.contains("[launch] drain of node"), "{stderr}");

    let report = json_with(&stdout, "app", "mf");
    assert_eq!(report["epochs"].as_array().map(Vec::len), Some(20));
    let baseline = report["settings"]["baseline_test_rmse"].as_f64().unwrap();
    let rmse = last_epoch(&report, "test_rmse");
    assert!(
        rmse.is_finite() && rmse < baseline,
        "test RMSE {rmse} does not beat the global mean's {baseline}"
    );
}

#[test]
fn membership_options_are_refused_before_anything_starts() {
    for (extra, words) in [
        (&["--drain-at", "0@1"][..], "coordinator"),
        (&["--drain-at", "3@1"][..], "out of range"),
        (&["--join-at", "1", "--drain-at", "3@1,3@2"][..], "twice"),
        (&["--drain-at", "1"][..], "RANK@SECS"),
    ] {
        let out = Command::new(roam())
            .args(["launch", "--nodes", "3"])
            .args(extra)
            .args(["--", "/nonexistent/roam-test-program"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} accepted");
        assert!(
            stderr.contains(words),
            "{extra:?}: {words:?} missing from {stderr}"
        );
        assert!(!stderr.contains("program not found"), "{extra:?}: {stderr}");
    }
}
