//! Chaos: MF and KGE training on 3 nodes under `roam launch --max-restarts`, with a checkpoint
//! every epoch, while nodes are killed (`kill -9`), frozen (`SIGSTOP` for longer than the peer
//! timeout) or cut off (their network namespace's link set down). Every run must complete all
//! its epochs, restart exactly once per fault (the launcher's `[launch] restart` and
//! `[launch] restarts: N` lines), name the node at fault, and (after kills) lose no more
//! quality than the issue-4 bounds allow against the range of uninterrupted runs (MF test RMSE
//! at most 2 % above the worst, KGE filtered MRR at most 0.02 below the worst).
//!
//! Faults are injected at states, not after sleeps: a fault waits until the checkpoint of a
//! (seeded) random epoch is complete on disk; then every node is stopped (`SIGSTOP`), the state
//! is checked (every node alive, epochs left to run), the victim is killed and the others
//! continued, so how fast the job runs meanwhile cannot move the kill past the end of the job.
//! The victims and epochs come from one seed, printed first; replay with `ROAM_CHAOS_SEED=S`.
//! Size: `ROAM_CHAOS_KILLS` kills per run (default 1), `ROAM_CHAOS_EPOCHS` (default 6),
//! `ROAM_CHAOS_RUNS` runs of each test (default 1), `ROAM_CHAOS_REFS` uninterrupted runs to
//! compare with (default 3). `scripts/chaos.sh` runs it larger and summarises the
//! `chaos-detect KIND MS` line each fault prints: the time from the fault to the launcher's
//! notice of the first node that ended (printed, never asserted).

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{epochs, json_with, last_epoch, launch, roam};
use serde_json::Value;

const NODES: u32 = 3;
/// MF: epochs of ~0.15 s on 3 nodes here, so a fault lands mid-run.
const MF_DATA: &str = "rows=4000,cols=3000,rank=4,nnz=1000000,zipf=0.8,noise=0.1,test=0.1,seed=5";
/// KGE: a tiny graph with many test triples, so that the MRR of uninterrupted runs varies by
/// ~0.01 (with the 200 of the KGE tests' graph: 0.409-0.451 over 8 runs).
const KGE_DATA: &str =
    "entities=300,relations=12,triples=8000,clusters=15,test=1500,valid=10,seed=3";
/// Silence timeout for the SIGSTOP and partition runs (the default is 5 s); overridden by
/// `ROAM_CHAOS_PEER_TIMEOUT` (seconds, or `default`: the nodes' own default), which
/// `scripts/chaos.sh` passes on to measure detection at other timeouts.
const PEER_TIMEOUT_S: &str = "1";
/// Bound on any wait of the harness: far beyond any run here; reaching it is a hang.
const HANG: Duration = Duration::from_secs(300);

/// Runs the tests of this file one at a time: parallel 3-node jobs on a small machine could
/// starve a live node past the 1 s peer timeout of the SIGSTOP and partition tests.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A small seeded generator (splitmix64): the same seed gives the same faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        })
        .unwrap_or(default)
}

/// The seed of one test, printed so that a failure can be replayed.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("ROAM_CHAOS_SEED").map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                .into()
        },
        |s| s.parse().expect("ROAM_CHAOS_SEED"),
    );
    println!("{test}: seed {seed} (replay: ROAM_CHAOS_SEED={seed})");
    seed
}

/// A running `roam launch`, its stderr lines as they come (with their arrival time) and its
/// stdout collected.
struct Job {
    child: Child,
    lines: Receiver<(Instant, String)>,
    log: Arc<Mutex<String>>,
    stdout: Option<JoinHandle<String>>,
    dir: PathBuf,
}

impl Job {
    fn start(launch_args: &[&str], env: &[(&str, &str)], job: &[String], dir: &Path) -> Self {
        let mut cmd = Command::new(roam());
        cmd.arg("launch")
            .args(["--nodes", &NODES.to_string(), "--workers-per-node", "1"])
            .args(launch_args)
            .arg("--")
            .arg(roam())
            .args(job)
            .args(["--json", "--checkpoint-dir"])
            .arg(dir)
            .args(["--checkpoint-every", "1"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starting roam launch");
        let mut out = child.stdout.take().unwrap();
        let stdout = thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let keep = Arc::clone(&log);
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let now = Instant::now();
                keep.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send((now, line));
            }
        });
        Self {
            child,
            lines,
            log,
            stdout: Some(stdout),
            dir: dir.to_path_buf(),
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Fails the test (with the launcher's output so far) if the launcher has exited.
    fn assert_running(&mut self, waiting_for: &str) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "roam launch ended ({status}) while waiting for {waiting_for}:\n{}",
                self.log()
            );
        }
    }

    /// The next launcher line satisfying `pred`, with when it arrived.
    fn wait_line(&self, what: &str, pred: impl Fn(&str) -> bool) -> (Instant, String) {
        let deadline = Instant::now() + HANG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((t, l)) if pred(&l) => return (t, l),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("no {what} in {HANG:?}:\n{}", self.log()),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("roam launch ended before {what}:\n{}", self.log())
                }
            }
        }
    }

    /// Waits until the checkpoint of epoch `epoch` (or a later one) is complete on disk.
    fn wait_checkpoint(&mut self, epoch: u64) {
        let deadline = Instant::now() + HANG;
        while manifest_epoch(&self.dir).is_none_or(|e| e < epoch) {
            self.assert_running(&format!("the checkpoint of epoch {epoch}"));
            assert!(Instant::now() < deadline, "no checkpoint of epoch {epoch}");
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// The launcher's current node processes, by rank, once all of them run.
    fn nodes(&mut self) -> BTreeMap<u32, i32> {
        let deadline = Instant::now() + HANG;
        loop {
            let nodes = children(self.child.id() as i32);
            if nodes.len() == NODES as usize {
                return nodes;
            }
            self.assert_running("the node processes");
            assert!(Instant::now() < deadline, "the nodes never all ran");
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for the launcher to exit; returns its stdout, stderr, and whether it succeeded.
    fn finish(mut self) -> (String, String, bool) {
        let status = self.child.wait().unwrap();
        let stdout = self.stdout.take().unwrap().join().unwrap();
        // The stderr reader ends with the pipe.
        while self.lines.recv().is_ok() {}
        (stdout, self.log(), status.success())
    }
}

/// The epoch of the complete checkpoint in `dir`, if there is one.
fn manifest_epoch(dir: &Path) -> Option<u64> {
    let bytes = fs::read(dir.join("manifest.json")).ok()?;
    serde_json::from_slice::<Value>(&bytes).ok()?["epoch"].as_u64()
}

/// Live (not zombie) children of `parent` that are roam nodes, by their `ROAM_RANK`.
fn children(parent: i32) -> BTreeMap<u32, i32> {
    let mut found = BTreeMap::new();
    for entry in fs::read_dir("/proc").unwrap().map_while(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Some((state, ppid)) = stat(pid) else {
            continue;
        };
        if ppid != parent || state == 'Z' {
            continue;
        }
        let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let rank = environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(b"ROAM_RANK="))
            .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok());
        if let Some(rank) = rank {
            found.insert(rank, pid);
        }
    }
    found
}

/// A process's state letter and parent pid, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = s.get(s.rfind(')')? + 2..)?.split(' ');
    let state = rest.next()?.chars().next()?;
    Some((state, rest.next()?.parse().ok()?))
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; `pid` is a live child of the launcher
    // (checked just before), which cannot be reaped while stopped or before the launcher sees it.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Stops every node, checks that the job is mid-run (all nodes alive, the checkpoint of the last
/// epoch not written), applies `fault` to the victim, and continues the others; returns when
/// the fault happened.
fn freeze_and(job: &mut Job, victim: u32, epochs: u64, fault: impl FnOnce(i32)) -> Instant {
    let nodes = job.nodes();
    nodes.values().for_each(|&pid| signal(pid, libc::SIGSTOP));
    for (rank, &pid) in &nodes {
        assert!(
            stat(pid).is_some_and(|(s, _)| s != 'Z'),
            "node {rank} ended before the fault:\n{}",
            job.log()
        );
    }
    let done = manifest_epoch(&job.dir);
    assert!(
        done.is_some_and(|e| e < epochs),
        "the job reached its last checkpoint ({done:?}) before the fault: use more epochs"
    );
    let pid = nodes[&victim];
    fault(pid);
    let at = Instant::now();
    for (&rank, &p) in &nodes {
        if rank != victim {
            signal(p, libc::SIGCONT);
        }
    }
    at
}

/// The training command of `app` (without the checkpoint options).
fn job_args(app: &str, epochs: u64) -> Vec<String> {
    let mut a: Vec<String> = [
        "train",
        app,
        "--mode",
        "lapse",
        "--epochs",
        &epochs.to_string(),
    ]
    .map(String::from)
    .into();
    match app {
        "mf" => a.extend(["--synthetic", MF_DATA].map(String::from)),
        _ => a.extend(["--seed", "5", "--synthetic", KGE_DATA].map(String::from)),
    }
    a
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roam-chaos-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// The run's report and its quality figure: MF test RMSE or KGE filtered MRR.
fn quality(app: &str, stdout: &str) -> (Value, f64) {
    let report = json_with(stdout, "app", app);
    let q = last_epoch(&report, if app == "mf" { "test_rmse" } else { "mrr" });
    (report, q)
}

/// Checks the launcher's restart lines: exactly `expected` restarts, each resuming from a
/// checkpoint, and the final count.
fn assert_restarts(log: &str, expected: usize) {
    let restarts: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("[launch] restart "))
        .collect();
    assert_eq!(restarts.len(), expected, "{log}");
    for r in &restarts {
        assert!(r.contains("resuming from checkpoint"), "{r}");
    }
    assert!(
        log.lines()
            .any(|l| l == format!("[launch] restarts: {expected}")),
        "{log}"
    );
}

/// `kill -9` of a random node at a random epoch, `ROAM_CHAOS_KILLS` times per run: the run
/// completes every epoch with one restart per kill and the quality of an uninterrupted run.
fn kills(app: &str) {
    let _serial = one_at_a_time();
    let seed = seed(&format!("chaos kill -9 {app}"));
    let mut rng = Rng(seed);
    let epochs = env_or("ROAM_CHAOS_EPOCHS", 6);
    let kills = env_or("ROAM_CHAOS_KILLS", 1);
    assert!(
        epochs >= kills + 2,
        "ROAM_CHAOS_EPOCHS must leave room for the kills"
    );
    let args = job_args(app, epochs);
    let args_str: Vec<&str> = args.iter().map(String::as_str).collect();
    // Uninterrupted runs of 3 asynchronous nodes differ among themselves, so the bound applies
    // to the range of a few.
    let refs: Vec<f64> = (0..env_or("ROAM_CHAOS_REFS", 3))
        .map(|_| quality(app, &launch(NODES, 1, &args_str)).1)
        .collect();
    let (lo, hi) = refs
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &q| (lo.min(q), hi.max(q)));
    // Issue 4: MF test RMSE within 2 %, KGE filtered MRR within 0.02 absolute, on the side
    // where quality is lost. A restart may end better: a resumed run draws other negatives
    // and samples (its seed is mixed with the epoch), and KGE's MRR moves by ±0.03 between
    // streams (docs/workloads-kge.md); a CI run resumed to 0.447 against uninterrupted
    // 0.416-0.426, which a two-sided bound refused.
    let (lo, hi) = if app == "mf" {
        (0.0, hi * 1.02)
    } else {
        (lo - 0.02, 1.0)
    };
    for run in 0..env_or("ROAM_CHAOS_RUNS", 1) {
        // Kill epochs: distinct, ascending, each leaving at least one epoch after it.
        let mut at: Vec<u64> = Vec::new();
        while at.len() < kills as usize {
            let e = rng.range(1, epochs - 2);
            if !at.contains(&e) {
                at.push(e);
            }
        }
        at.sort_unstable();
        let dir = scratch(app);
        let max = kills.to_string();
        let mut job = Job::start(&["--max-restarts", &max], &[], &args, &dir);
        for (i, &epoch) in at.iter().enumerate() {
            let victim = rng.range(0, u64::from(NODES) - 1) as u32;
            println!("{app} run {run}: kill {i}: node {victim} after checkpoint {epoch}");
            job.wait_checkpoint(epoch);
            let killed = freeze_and(&mut job, victim, epochs, |pid| signal(pid, libc::SIGKILL));
            let (t, line) = job.wait_line("the launcher's notice of the kill", |l| {
                l.starts_with("[launch] node ") && l.contains("; stopping the other nodes")
            });
            assert_eq!(
                line,
                format!("[launch] node {victim} was killed by signal 9; stopping the other nodes"),
            );
            println!("chaos-detect kill {}", (t - killed).as_millis());
            job.wait_line("a restart", |l| l.starts_with("[launch] restart "));
        }
        let (stdout, log, ok) = job.finish();
        assert!(ok, "{app} run {run} failed:\n{log}");
        assert_restarts(&log, at.len());
        let (report, got) = quality(app, &stdout);
        let last = epochs_of(&report).last().copied();
        assert_eq!(last, Some(epochs), "every epoch ran: {report}");
        println!("{app} run {run}: quality {got} (uninterrupted {refs:?})");
        assert!(
            (lo..=hi).contains(&got),
            "{app}: quality {got} outside [{lo}, {hi}], the issue-4 bound on quality lost against the \
             uninterrupted runs' {refs:?}"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}

fn epochs_of(report: &Value) -> Vec<u64> {
    epochs(report)
        .iter()
        .filter_map(|e| e["epoch"].as_u64())
        .collect()
}

#[test]
fn mf_survives_kill_9_of_random_nodes() {
    kills("mf");
}

#[test]
fn kge_survives_kill_9_of_random_nodes() {
    kills("kge");
}

/// A node that falls silent without its connections breaking (`fault`) is declared lost by
/// the others after the peer timeout, they fail naming it, and the launcher restarts the job,
/// which completes.
fn silent_node(kind: &str, launch_args: &[&str], fault: &dyn Fn(i32)) {
    let _serial = one_at_a_time();
    let seed = seed(&format!("chaos {kind}"));
    let mut rng = Rng(seed);
    let epochs = env_or("ROAM_CHAOS_EPOCHS", 6);
    let args = job_args("mf", epochs);
    for run in 0..env_or("ROAM_CHAOS_RUNS", 1) {
        let dir = scratch(kind);
        let mut launch = vec!["--max-restarts", "1"];
        launch.extend_from_slice(launch_args);
        let timeout =
            std::env::var("ROAM_CHAOS_PEER_TIMEOUT").unwrap_or_else(|_| PEER_TIMEOUT_S.into());
        let env: Vec<(&str, &str)> = match timeout.as_str() {
            "default" => Vec::new(),
            t => vec![("ROAM_PEER_TIMEOUT", t)],
        };
        let mut job = Job::start(&launch, &env, &args, &dir);
        let victim = rng.range(0, u64::from(NODES) - 1) as u32;
        let epoch = rng.range(1, epochs - 2);
        println!("{kind} run {run}: node {victim} after checkpoint {epoch}");
        job.wait_checkpoint(epoch);
        let at = freeze_and(&mut job, victim, epochs, fault);
        let (t, line) = job.wait_line("the first node to end", |l| {
            l.starts_with("[launch] node ") && l.contains("; stopping the other nodes")
        });
        println!("chaos-detect {kind} {}", (t - at).as_millis());
        assert!(
            !line.starts_with(&format!("[launch] node {victim} ")) || kind == "partition",
            "the frozen node cannot end by itself: {line}"
        );
        job.wait_line("a restart", |l| l.starts_with("[launch] restart "));
        let (stdout, log, ok) = job.finish();
        assert!(ok, "{kind} run {run} failed:\n{log}");
        assert_restarts(&log, 1);
        // A peer of the victim failed, naming it.
        let named = format!("node {victim} is gone");
        assert!(
            log.lines()
                .any(|l| l.starts_with("[node ") && l.contains(&named)),
            "no node names node {victim}:\n{log}"
        );
        let (report, _) = quality("mf", &stdout);
        assert_eq!(epochs_of(&report).last().copied(), Some(epochs), "{report}");
        let _ = fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_sigstopped_node_is_detected_and_the_job_restarts() {
    // Left stopped: the launcher's SIGKILL after its grace period ends it.
    silent_node("sigstop", &[], &|_| {});
}

#[test]
fn a_partitioned_node_is_detected_and_the_job_restarts() {
    if let Err(e) = roam::netns::preflight(false).and_then(|tools| tools.probe()) {
        eprintln!("skipping the partition test: {e:#}");
        return;
    }
    silent_node("partition", &["--netns"], &|pid| {
        let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
        let ns = environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(b"ROAM_NETNS="))
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .expect("a --netns node has ROAM_NETNS");
        let status = Command::new("ip")
            .args([
                "-n",
                &ns,
                "link",
                "set",
                roam::netns::NODE_INTERFACE,
                "down",
            ])
            .status()
            .unwrap();
        assert!(status.success(), "cutting off {ns}");
        // Its link is down: it runs on, cut off from the others.
        signal(pid, libc::SIGCONT);
    });
}
