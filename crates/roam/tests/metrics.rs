//! The Prometheus endpoint of a node (`Config::metrics_addr`): a two-node cluster in this
//! process does known remote and local operations and a checkpoint, and `/metrics` shows
//! exactly those counts, per-peer traffic, peers up and the latency and checkpoint histograms;
//! an address in use, port 0 and a malformed address fail the start with the address named.
//! (The real Prometheus server and promtool: `crates/roam-cli/tests/metrics.rs`.)

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A port nothing listens on now (the pattern `common::cluster` uses for its coordinator).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on `addr`: the status line and the body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("metrics endpoint accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("a whole response");
    let (head, body) = response.split_once("\r\n\r\n").expect("headers end");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the sample named exactly `series` (name and labels as printed).
fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// Starts a two-node cluster whose node `r` serves metrics on `ports[r]`.
fn cluster(ports: [u16; 2]) -> Vec<roam::NodeHandle> {
    let coordinator = format!("127.0.0.1:{}", free_port());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u32)
            .map(|rank| {
                let coordinator = coordinator.clone();
                scope.spawn(move || {
                    // Keys 0..50 live on node 0, 50..100 on node 1 (static range).
                    let mut cfg = roam::Config::new(100, 4);
                    cfg.cluster = roam::cluster_env::ClusterOverrides {
                        rank: Some(rank),
                        num_nodes: Some(2),
                        coordinator: Some(coordinator),
                    };
                    cfg.token = Some("test-token".into());
                    cfg.workers_per_node = Some(1);
                    cfg.print_stats = false;
                    cfg.metrics_addr = Some(format!("127.0.0.1:{}", ports[rank as usize]));
                    roam::NodeHandle::start(cfg).expect("node starts")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_node_serves_the_counts_of_what_it_did() {
    let ports = [free_port(), free_port()];
    let nodes = cluster(ports);
    let dir = std::env::temp_dir().join(format!("roam-metrics-ckpt-{}", std::process::id()));
    let (remote, local) = (7u64, 5u64);
    std::thread::scope(|scope| {
        for node in &nodes {
            let dir = &dir;
            scope.spawn(move || {
                let worker = node.worker(0).unwrap();
                if node.rank() == 0 {
                    let mut out = [0.0f32; 8];
                    for _ in 0..remote {
                        worker.pull(&[60, 61], &mut out).unwrap().wait().unwrap();
                        worker.push(&[60, 61], &[1.0; 8]).unwrap().wait().unwrap();
                    }
                    for _ in 0..local {
                        worker.pull(&[1, 2], &mut out).unwrap().wait().unwrap();
                    }
                }
                worker.checkpoint(dir).unwrap();
            });
        }
    });
    let addr = nodes[0].metrics_addr().expect("node 0 serves metrics");
    assert_eq!(addr.port(), ports[0]);
    let (status, body) = get(addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    let r = |series: &str| value(&body, &format!("roam_{series}"));
    assert_eq!(
        r(r#"ops_total{rank="0",op="pull",path="remote"}"#),
        remote as f64
    );
    assert_eq!(
        r(r#"ops_total{rank="0",op="push",path="remote"}"#),
        remote as f64
    );
    assert_eq!(
        r(r#"ops_total{rank="0",op="pull",path="local"}"#),
        local as f64
    );
    assert_eq!(
        r(r#"keys_total{rank="0",op="pull",path="remote"}"#),
        2.0 * remote as f64
    );
    assert_eq!(
        r(r#"op_latency_seconds_count{rank="0",op="pull",path="owner"}"#),
        remote as f64
    );
    assert_eq!(
        r(r#"op_latency_seconds_count{rank="0",op="push",path="owner"}"#),
        remote as f64
    );
    assert_eq!(
        r(r#"op_latency_seconds_count{rank="0",op="pull",path="forwarded"}"#),
        0.0
    );
    assert_eq!(
        r(r#"op_latency_seconds_bucket{rank="0",le="+Inf",op="pull",path="owner"}"#),
        remote as f64,
        "histogram buckets are cumulative up to the count"
    );
    let fraction = r(r#"local_fraction{rank="0"}"#);
    let expected = (2 * local) as f64 / (2 * local + 4 * remote) as f64;
    assert!(
        (fraction - expected).abs() < 1e-9,
        "{fraction} != {expected}"
    );
    assert!(r(r#"peer_frames_total{rank="0",peer="1",direction="sent"}"#) >= 2.0 * remote as f64);
    assert!(r(r#"peer_bytes_total{rank="0",peer="1",direction="received"}"#) > 0.0);
    // One frame per remote operation (both keys live on node 1), counted by its kind.
    assert_eq!(
        r(r#"frames_sent_by_kind_total{rank="0",kind="Pull"}"#),
        remote as f64
    );
    assert_eq!(
        r(r#"frames_sent_by_kind_total{rank="0",kind="Push"}"#),
        remote as f64
    );
    assert!(r(r#"frame_bytes_sent_by_kind_total{rank="0",kind="Push"}"#) > 32.0 * remote as f64);
    let by_kind = nodes[1].stats().frames_sent_by_kind;
    for reply in ["PullReply", "PushReply"] {
        assert_eq!(
            by_kind[reply][0], remote,
            "node 1's {reply} frames: {by_kind:?}"
        );
    }
    assert_eq!(r(r#"peers_up{rank="0"}"#), 1.0);
    assert_eq!(r(r#"peer_up{rank="0",peer="1"}"#), 1.0);
    assert_eq!(r(r#"link_queue_frames{rank="0",peer="1"}"#), 0.0);
    assert_eq!(r(r#"checkpoint_duration_seconds_count{rank="0"}"#), 1.0);
    // Two nodes give the balancer no third to compare with: it moved nothing.
    assert_eq!(r(r#"balancer_moves_total{rank="0"}"#), 0.0);
    assert_eq!(r(r#"balancer_moved_bytes_total{rank="0"}"#), 0.0);
    // Node 1 served node 0's keys as their owner.
    let (_, body1) = get(nodes[1].metrics_addr().unwrap(), "/metrics");
    assert_eq!(
        value(&body1, r#"roam_served_keys_total{rank="1"}"#),
        4.0 * remote as f64
    );
    let (status, _) = get(addr, "/other");
    assert!(status.contains("404"), "{status}");
    // Shutdown is a barrier over every node: all at once.
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_metrics_addresses_fail_the_start_and_name_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let in_use = taken.local_addr().unwrap().to_string();
    for (addr, says) in [
        (in_use.as_str(), "cannot listen"),
        ("127.0.0.1:0", "port 0 is not allowed"),
        ("127.0.0.1", "HOST:PORT"),
    ] {
        let mut cfg = roam::Config::new(10, 1);
        cfg.metrics_addr = Some(addr.to_string());
        cfg.print_stats = false;
        let err = roam::NodeHandle::start(cfg)
            .err()
            .unwrap_or_else(|| panic!("{addr}: the node started"))
            .to_string();
        assert!(err.contains(addr) && err.contains(says), "{addr}: {err}");
    }
}
