//! `roam launch --metrics-addr HOST:PORT`: one flag gives every node its `/metrics` endpoint,
//! node r on PORT + r, and bad or taken ports fail the launch before any node starts, naming
//! the rank and the address.
//!
//! Nothing waits on luck: the nodes hold at shutdown (`ROAM_METRICS_HOLD=1`) until scraped
//! once with the header Prometheus sends, so each node is read while it holds (links closed,
//! counters final, `roam_peers_up` 0) and released by this test's scrape. Every wait polls with
//! a deadline and fails naming what was missing and the last answer.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::http::{PROMETHEUS_HEADER, free_ports, get, get_with, sample};

const POLL: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_secs(120);

/// A small two-node MF job in lapse mode (keys relocate, so both nodes do remote work).
const JOB: &[&str] = &[
    "train",
    "mf",
    "--mode",
    "lapse",
    "--epochs",
    "2",
    "--dim",
    "8",
    "--synthetic",
    "rows=200,cols=150,rank=4,nnz=5000,noise=0.1,test=0.1,seed=1",
];

/// Kills (and reaps) the launcher when the test ends, passed or not.
struct Reaped(Option<Child>);

impl Reaped {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the job is running")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `roam launch --nodes 2 --metrics-addr ADDR -- roam train mf ...`, with `env` added.
fn launch(addr: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(common::roam());
    cmd.args(["launch", "--nodes", "2", "--metrics-addr", addr, "--"])
        .arg(common::roam())
        .args(JOB)
        .env_remove("ROAM_METRICS_ADDR")
        .env_remove("ROAM_METRICS_HOLD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

#[test]
fn launch_metrics_addr_serves_every_node_on_its_own_port() {
    let base = free_ports(2);
    let dir = common::scratch("launch-metrics", "serves");
    let log_path = dir.join("job.log");
    let log = std::fs::File::create(&log_path).unwrap();
    // The flag wins over the launcher's environment (which would be refused: port 0).
    let job = launch(
        &format!("127.0.0.1:{base}"),
        &[
            ("ROAM_METRICS_ADDR", "127.0.0.1:0"),
            ("ROAM_METRICS_HOLD", "1"),
        ],
    )
    // To a file, not a pipe: nobody reads a pipe while the test polls, and a full one would
    // block the launcher.
    .stdout(log.try_clone().unwrap())
    .stderr(log)
    .spawn()
    .expect("roam launch starts");
    let mut job = Reaped(Some(job));

    for rank in 0..2u16 {
        let node: SocketAddr = format!("127.0.0.1:{}", base + rank).parse().unwrap();
        let ops = format!("roam_ops_total{{rank=\"{rank}\",op=\"pull\",path=\"local\"}}");
        let peers = format!("roam_peers_up{{rank=\"{rank}\"}}");
        // Held: the node has done its work and left the cluster, and waits for a scrape.
        let deadline = Instant::now() + DEADLINE;
        let held = loop {
            let last = match get(node, "/metrics") {
                Ok((200, body)) => {
                    if sample(&body, &peers) == Some(0.0)
                        && sample(&body, &ops).is_some_and(|n| n > 0.0)
                    {
                        break body;
                    }
                    format!("not held yet: {peers} = {:?}", sample(&body, &peers))
                }
                Ok((status, body)) => format!("HTTP {status}: {body}"),
                Err(e) => e,
            };
            if let Ok(Some(status)) = job.child().try_wait() {
                panic!("the job ended ({status}) before node {rank} at {node} was held");
            }
            assert!(
                Instant::now() < deadline,
                "node {rank}: /metrics on {node} not held within {DEADLINE:?}; last: {last}"
            );
            std::thread::sleep(POLL);
        };
        assert!(
            held.contains(&format!("roam_nodes{{rank=\"{rank}\"}}")),
            "{held}"
        );
        assert!(
            !held.contains(&format!("rank=\"{}\"", 1 - rank)),
            "node {rank} at {node} answered with the other rank's label:\n{held}"
        );
        // The scrape Prometheus would send releases the node.
        let (status, _) = get_with(node, "/metrics", &[PROMETHEUS_HEADER]).unwrap();
        assert_eq!(status, 200);
    }

    // Both released: the job ends, successfully, within the deadline.
    let deadline = Instant::now() + DEADLINE;
    while job.child().try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the job did not end within {DEADLINE:?} after both nodes were scraped"
        );
        std::thread::sleep(POLL);
    }
    let status = job.0.take().unwrap().wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "the job failed: {status}\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs a launch that must fail before any node starts; returns its stderr.
fn refused(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "{what}: the launch succeeded:\n{stderr}"
    );
    assert!(
        !stdout.contains("[node ") && !stderr.contains("[node "),
        "{what}: a node started:\n{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    stderr
}

#[test]
fn a_taken_metrics_port_fails_the_launch_naming_the_rank_and_address() {
    let base = free_ports(2);
    // Another process holds node 1's port.
    let _taken = TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let out = launch(&format!("127.0.0.1:{base}"), &[]).output().unwrap();
    let stderr = refused(out, "port collision");
    let addr = format!("127.0.0.1:{}", base + 1);
    assert!(
        stderr.contains("node 1") && stderr.contains(&addr) && stderr.contains("cannot be bound"),
        "the error should name node 1 and {addr}:\n{stderr}"
    );
}

#[test]
fn port_zero_and_ports_past_65535_are_refused_before_any_node_starts() {
    let out = launch("127.0.0.1:0", &[]).output().unwrap();
    let stderr = refused(out, "port 0");
    assert!(stderr.contains("port 0 is not allowed"), "{stderr}");

    let out = launch("127.0.0.1:65535", &[]).output().unwrap();
    let stderr = refused(out, "port 65535");
    assert!(stderr.contains("65535 + rank 1 is above 65535"), "{stderr}");
}
