//! Logs through `tracing` with `RUST_LOG` filtering: with `RUST_LOG=roam=debug`, two node
//! processes of an MF job in lapse mode log their rendezvous steps, their data links and their
//! relocations with node, peer and key count; when node 1 is killed, node 0 logs the peer
//! loss naming the peer. Without `RUST_LOG` (the default filter, warnings) none of the debug
//! steps appear.
//!
//! The job runs far more epochs than the test waits for, so node 1 is killed mid-run (after
//! node 0 logged a relocation); every wait reads lines with a deadline.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts node `rank` of 2 with `rust_log` (unset if `None`); its stderr lines go to the
/// returned channel.
fn node(rank: u32, coordinator: &str, rust_log: Option<&str>) -> (Reaped, mpsc::Receiver<String>) {
    let mut cmd = Command::new(common::roam());
    cmd.args([
        "train", "mf", "--mode", "lapse", "--epochs", "1000000", "--dim", "8",
    ])
    .args([
        "--synthetic",
        "rows=400,cols=300,rank=4,nnz=20000,noise=0.1,test=0.1,seed=1",
    ])
    .env("ROAM_RANK", rank.to_string())
    .env("ROAM_NUM_NODES", "2")
    .env("ROAM_COORDINATOR", coordinator)
    .env("ROAM_CLUSTER_TOKEN", "logs-test-token")
    .env_remove("ROAM_METRICS_ADDR")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    match rust_log {
        Some(filter) => cmd.env("RUST_LOG", filter),
        None => cmd.env_remove("RUST_LOG"),
    };
    let mut child = cmd.spawn().expect("roam starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (Reaped(child), rx)
}

/// Reads lines until one contains every one of `parts`; returns it (with the lines before it
/// appended to `seen`), failing with what was seen at the deadline or at the end of output.
fn wait_for(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, parts: &[&str]) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if parts.iter().all(|p| line.contains(p)) => return line,
            Ok(line) => seen.push(line),
            Err(e) => panic!(
                "no line with {parts:?} ({e:?}); the output was:\n{}",
                seen.join("\n")
            ),
        }
    }
}

fn coordinator() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

#[test]
fn debug_logs_show_rendezvous_relocations_and_peer_loss_with_their_fields() {
    let coord = coordinator();
    let (_n0, rx0) = node(0, &coord, Some("roam=debug"));
    let (mut n1, rx1) = node(1, &coord, Some("roam=debug"));
    let (mut seen0, mut seen1) = (Vec::new(), Vec::new());

    wait_for(
        &rx0,
        &mut seen0,
        &["rendezvous: coordinator listening", "node=0", "nodes=2"],
    );
    wait_for(
        &rx1,
        &mut seen1,
        &["rendezvous: registered with the coordinator", "node=1"],
    );
    wait_for(
        &rx0,
        &mut seen0,
        &[
            "rendezvous: node registered",
            "node=0",
            "peer=1",
            "registered=2",
        ],
    );
    wait_for(
        &rx1,
        &mut seen1,
        &["rendezvous: received the node table", "node=1", "nodes=2"],
    );
    wait_for(
        &rx0,
        &mut seen0,
        &["every peer connected", "node=0", "peers=1"],
    );
    let moved = wait_for(
        &rx0,
        &mut seen0,
        &["roam::protocol", "relocation: keys", "node=0"],
    );
    assert!(
        moved.contains("peer=1") && moved.contains("keys="),
        "{moved}"
    );

    // Node 1 dies mid-run: node 0 sees its connection end and says which peer it lost.
    n1.0.kill().unwrap();
    let _ = n1.0.wait();
    let lost = wait_for(&rx0, &mut seen0, &["WARN", "lost", "node=0", "peer=1"]);
    assert!(lost.contains("reason="), "{lost}");
}

#[test]
fn without_rust_log_no_debug_steps_are_logged() {
    let out = Command::new(common::roam())
        .args(["launch", "--nodes", "2", "--", common::roam()])
        .args([
            "train", "mf", "--mode", "lapse", "--epochs", "2", "--dim", "8",
        ])
        .args([
            "--synthetic",
            "rows=400,cols=300,rank=4,nnz=20000,noise=0.1,test=0.1,seed=1",
        ])
        .env_remove("RUST_LOG")
        .env_remove("ROAM_METRICS_ADDR")
        .output()
        .expect("roam launch runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for step in ["DEBUG", "INFO", "rendezvous:", "relocation:"] {
        assert!(
            !stderr.contains(step),
            "{step} under the default filter:\n{stderr}"
        );
    }
    // The same run with the filter set does log them (the test above has the fields).
    let out = Command::new(common::roam())
        .args(["launch", "--nodes", "2", "--", common::roam()])
        .args([
            "train", "mf", "--mode", "lapse", "--epochs", "2", "--dim", "8",
        ])
        .args([
            "--synthetic",
            "rows=400,cols=300,rank=4,nnz=20000,noise=0.1,test=0.1,seed=1",
        ])
        .env("RUST_LOG", "roam::rendezvous=info")
        .env_remove("ROAM_METRICS_ADDR")
        .output()
        .expect("roam launch runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("rendezvous: received the node table"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("DEBUG"),
        "a debug line through an info filter:\n{stderr}"
    );
}
