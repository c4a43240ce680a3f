//! A real Prometheus server scrapes a two-node `roam launch` run on loopback
//! (`ROAM_METRICS_ADDR`, one port per rank), and its HTTP API (`/api/v1/query`) shows the
//! series of both nodes; `promtool check metrics` accepts a node's `/metrics` output.
//!
//! Nothing waits on luck: the nodes hold at shutdown until Prometheus scraped each of them
//! twice (`ROAM_METRICS_HOLD=2`), and Prometheus is started only after this test read a
//! node's output itself, so the run cannot end before either looked. Every wait polls with a
//! deadline and fails naming what was missing. Needs Debian's `prometheus` package (server and
//! `promtool`), which `scripts/setup-prometheus.sh` installs (run by `scripts/test.sh`).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::http::{free_ports, get};
use serde_json::Value;

const POLL: Duration = Duration::from_millis(200);
const DEADLINE: Duration = Duration::from_secs(120);

/// Kills (and reaps) a child process when the test ends, passed or not.
struct Reaped(Child, &'static str);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn on_path(tool: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(tool))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!("{tool} is not installed: run scripts/setup-prometheus.sh (Debian's prometheus)")
        })
}

/// Percent-encodes a PromQL query for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The ranks (label `rank`) of the series `query` returns from Prometheus at `api`.
fn ranks(api: SocketAddr, query: &str) -> Result<Vec<String>, String> {
    let (status, body) = get(api, &format!("/api/v1/query?query={}", encode(query)))?;
    if status != 200 {
        return Err(format!("query {query}: HTTP {status}: {body}"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    let mut ranks: Vec<String> = v["data"]["result"]
        .as_array()
        .ok_or_else(|| format!("query {query}: no result in {body}"))?
        .iter()
        .filter_map(|r| Some(r["metric"]["rank"].as_str()?.to_string()))
        .collect();
    ranks.sort();
    ranks.dedup();
    Ok(ranks)
}

/// Polls `check` until it gives `Some`, failing with `what` and the last answer at the deadline
/// (or at once if the job ended with an error meanwhile).
fn poll<T>(
    what: &str,
    job: &mut Reaped,
    mut check: impl FnMut() -> Result<Option<T>, String>,
) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let last = match check() {
            Ok(Some(v)) => return v,
            Ok(None) => "not yet".to_string(),
            Err(e) => e,
        };
        if let Ok(Some(status)) = job.0.try_wait() {
            assert!(
                status.success(),
                "the {} failed ({status}) while waiting for {what}",
                job.1
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {DEADLINE:?}; last: {last}"
        );
        std::thread::sleep(POLL);
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

#[test]
fn prometheus_scrapes_both_nodes_of_a_launched_job() {
    let (prometheus, promtool) = (on_path("prometheus"), on_path("promtool"));
    let dir = std::env::temp_dir().join(format!("roam-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = free_ports(2);
    let nodes: Vec<SocketAddr> = (0..2)
        .map(|r| format!("127.0.0.1:{}", base + r).parse().unwrap())
        .collect();

    // A small MF job in lapse mode (keys relocate); the nodes then wait to be scraped.
    let log = std::fs::File::create(dir.join("job.log")).unwrap();
    let job = Command::new(common::roam())
        .args(["launch", "--nodes", "2", "--", common::roam()])
        .args([
            "train", "mf", "--mode", "lapse", "--epochs", "3", "--dim", "8",
        ])
        .args([
            "--synthetic",
            "rows=400,cols=300,rank=4,nnz=20000,noise=0.1,test=0.1,seed=1",
        ])
        .env("ROAM_METRICS_ADDR", nodes[0].to_string())
        .env("ROAM_METRICS_HOLD", "2")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("roam launch starts");
    let mut job = Reaped(job, "roam launch job");

    // Each node's own output first (Prometheus has not started, so the nodes are still up).
    for &node in &nodes {
        let body = poll(&format!("/metrics on {node}"), &mut job, || {
            match get(node, "/metrics") {
                Ok((200, body)) => Ok(Some(body)),
                Ok((status, body)) => Err(format!("HTTP {status}: {body}")),
                Err(e) => Err(e),
            }
        });
        assert!(body.contains("roam_ops_total{"), "{node}: {body}");
        let file = dir.join(format!("metrics-{}.txt", node.port()));
        write(&file, &body);
        let out = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&file).unwrap())
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool check metrics rejected {node}'s output ({}):\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A Prometheus server with a generated scrape config for the two nodes.
    let api: SocketAddr = format!("127.0.0.1:{}", free_ports(2)).parse().unwrap();
    let targets = nodes
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ");
    write(
        &dir.join("prometheus.yml"),
        &format!(
            "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n\
             scrape_configs:\n  - job_name: roam\n    static_configs:\n      - targets: [{targets}]\n"
        ),
    );
    let server_log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let server = Command::new(&prometheus)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={api}"))
        .stdin(Stdio::null())
        .stdout(server_log.try_clone().unwrap())
        .stderr(server_log)
        .spawn()
        .expect("prometheus starts");
    let mut server = Reaped(server, "prometheus server");

    let both = vec!["0".to_string(), "1".to_string()];
    for query in [
        "roam_ops_total{path=\"local\"} > 0",
        "roam_keys_total",
        "roam_op_latency_seconds_bucket",
        "roam_peer_bytes_total{direction=\"sent\"} > 0",
        "roam_peers_up",
        "roam_relocations_total",
        "roam_local_fraction",
    ] {
        poll(
            &format!("Prometheus query {query} for ranks 0 and 1"),
            &mut server,
            || {
                let got = ranks(api, query)?;
                if got == both {
                    Ok(Some(()))
                } else {
                    Err(format!("series from ranks {got:?}"))
                }
            },
        );
    }
    // The nodes exit once Prometheus scraped each of them twice after training.
    let status = poll("the job to finish after its scrapes", &mut server, || {
        job.0.try_wait().map_err(|e| e.to_string())
    });
    let log = std::fs::read_to_string(dir.join("job.log")).unwrap_or_default();
    assert!(status.success(), "the job failed ({status}):\n{log}");
    assert!(
        !log.contains("exiting anyway"),
        "a node was not scraped in time:\n{log}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
