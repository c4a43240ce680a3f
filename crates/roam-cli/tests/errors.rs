//! The `roam` binary prints each cause of an error once: a library error whose message shows
//! its inner error does not also expose it as its `source()`, which anyhow's `Caused by:` list
//! would print a second time (see `crates/roam/src/error.rs`).

mod common;

use std::process::Command;

#[test]
fn a_start_error_prints_its_cause_once() {
    // Rank 1 of a 2-node run without a cluster token: the node refuses to start.
    let out = Command::new(common::roam())
        .args(["train", "mf", "--mode", "lapse"])
        .env("ROAM_RANK", "1")
        .env("ROAM_NUM_NODES", "2")
        .env("ROAM_COORDINATOR", "127.0.0.1:1")
        .env_remove("ROAM_CLUSTER_TOKEN")
        .env_remove("ROAM_METRICS_ADDR")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running roam");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("starting the roam node"), "{stderr}");
    assert_eq!(
        stderr.matches("ROAM_CLUSTER_TOKEN is not set").count(),
        1,
        "the cause should be printed once:\n{stderr}"
    );
}
