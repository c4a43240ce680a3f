//! `roam launch --join-at` and `--drain-at`: membership changes during a launched run.
//!
//! This module (a child of [`crate::launch`], whose supervision loop drives it) owns:
//! - the **options** and their checks, made before anything is created: times are finite and
//!   non-negative; a drained rank is neither the coordinator (0) nor beyond the ranks the run can
//!   have (the initial nodes plus one per join), nor named twice; joins need at least two nodes
//!   (a single node serves no joins).
//! - **joiners**: at each `--join-at` time one extra process runs the nodes' program with
//!   `ROAM_JOIN=1` and the same coordinator, token and settings, but no `ROAM_RANK` or
//!   `ROAM_NUM_NODES` (the coordinator assigns its rank: the initial node count, then one more
//!   per join, in the order the joins reach it). Its output is prefixed `[joiner K] ` (K counts
//!   the joins from 1, in start order) and it is supervised like the nodes: the launcher waits
//!   for it, and its failure stops the run. Under namespaces each joiner gets a namespace of its
//!   own, created with the nodes' before anything starts (slot `nodes + K - 1`, shaped like the
//!   nodes without a `--node-bandwidth` override).
//! - **drains**: at each `--drain-at` time a thread asks the coordinator's service to drain the
//!   rank ([`crate::elastic::request_drain`], as `roam drain` does; from inside node 0's
//!   namespace under `--netns`), and the outcome is printed as a `[launch]` line. A drain of a
//!   joiner's rank that finds the rank no member yet (its join still under way) is asked again
//!   every [`RETRY_EVERY`] for up to [`RETRY_FOR`].
//!
//! Invariants: nothing starts once the run is stopping (a failure or a signal); a join or a
//! drain not made (not yet due when the job ended, failed to start, refused or failed) makes a
//! run that would have exited 0 exit 1, as a missed quota change does; every drain thread is
//! joined before the launcher returns (each ends when its request is answered or the
//! coordinator is gone).

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use parking_lot::Mutex;

use super::{LaunchArgs, Node, notice, spawn_pump};
use crate::cgroup::ROAM_SLOW_TASKS;
use crate::cluster_env::{
    ROAM_BALANCER, ROAM_CLUSTER_TOKEN, ROAM_COORDINATOR, ROAM_EMULATE_LATENCY_US, ROAM_JOIN,
    ROAM_NUM_NODES, ROAM_RANK, ROAM_WORKERS_PER_NODE,
};
use crate::elastic::{DrainRequestError, request_drain};
use crate::netns::{Cluster, Network, ROAM_NETNS, ROAM_NETWORK_BANDWIDTH, ROAM_NETWORK_PROFILE};
use crate::slowing::ROAM_SLOW_SERVICE;

/// How long one drain request may take (moving a node's keys away).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a drain of a joiner's rank is retried while that rank is no member yet.
pub const RETRY_FOR: Duration = Duration::from_secs(60);
/// How often it is retried.
pub const RETRY_EVERY: Duration = Duration::from_millis(200);
/// Latest time accepted, in seconds.
const MAX_SECS: f64 = 1e6;
/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/run/netns";

/// A time in seconds after the nodes start (`2`, `0.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Secs(pub Duration);

impl FromStr for Secs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is no number of seconds"))?;
        if !(0.0..=MAX_SECS).contains(&v) {
            return Err(format!("{s:?}: seconds must be in 0..={MAX_SECS}"));
        }
        Ok(Self(Duration::from_secs_f64(v)))
    }
}

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.as_secs_f64())
    }
}

/// `RANK@SECS`: drain node `rank` at `at` seconds after the nodes start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainAt {
    /// The node to drain.
    pub rank: u32,
    /// When.
    pub at: Secs,
}

impl FromStr for DrainAt {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (rank, at) = s
            .split_once('@')
            .ok_or_else(|| format!("{s:?} is not RANK@SECS"))?;
        let rank = rank
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {rank:?} is no rank"))?;
        Ok(Self {
            rank,
            at: at.parse()?,
        })
    }
}

impl fmt::Display for DrainAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.rank, self.at)
    }
}

/// The membership options of `roam launch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct MembershipArgs {
    /// Start one extra server-only node per listed time, that many seconds after the nodes
    /// start: the same program and arguments with ROAM_JOIN=1 (it joins the running job and
    /// takes the next free rank: --nodes, then one more per join). Its output is prefixed
    /// `[joiner K] `; the launcher waits for it and fails if it fails. Under --netns it runs in
    /// a namespace of its own, shaped like the nodes. Needs --nodes 2 or more.
    #[arg(long, value_name = "SECS[,SECS...]", value_delimiter = ',')]
    pub join_at: Vec<Secs>,
    /// Drain node RANK that many seconds after the nodes start, as `roam drain RANK` does: its
    /// keys move to the other members and it exits 0. Rank 0 cannot be drained; a joiner's rank
    /// whose join is still under way is asked again until it is a member (up to 60 s). A drain
    /// that fails, or is not due before the job ends, makes the launcher exit 1.
    #[arg(long, value_name = "RANK@SECS[,...]", value_delimiter = ',')]
    pub drain_at: Vec<DrainAt>,
}

impl MembershipArgs {
    /// Whether any membership change is asked for.
    pub fn is_empty(&self) -> bool {
        self.join_at.is_empty() && self.drain_at.is_empty()
    }

    /// Number of joiners (and so of extra namespaces under `--netns`).
    pub fn joiners(&self) -> u32 {
        self.join_at.len() as u32
    }

    /// Refuses what cannot work with `nodes` initial nodes, before anything is created.
    pub fn check(&self, nodes: u32) -> anyhow::Result<()> {
        ensure!(
            self.join_at.is_empty() || nodes >= 2,
            "--join-at needs --nodes 2 or more: a single node serves no joins"
        );
        let ranks = u64::from(nodes) + self.join_at.len() as u64;
        let mut seen = Vec::new();
        for d in &self.drain_at {
            if d.rank == 0 {
                bail!("--drain-at {d}: node 0 is the coordinator and cannot be drained");
            }
            if u64::from(d.rank) >= ranks {
                bail!(
                    "--drain-at {d}: rank {} is out of range: {nodes} nodes and {} joiners have \
                     ranks 0..={}",
                    d.rank,
                    self.join_at.len(),
                    ranks - 1
                );
            }
            if seen.contains(&d.rank) {
                bail!("--drain-at names rank {} twice", d.rank);
            }
            seen.push(d.rank);
        }
        Ok(())
    }
}

/// What a drain thread reports.
struct DrainDone {
    spec: DrainAt,
    started: Duration,
    ended: Duration,
    retries: u32,
    outcome: Result<String, String>,
}

/// The joins and drains of one run, driven by the supervision loop's ticks.
pub(super) struct Membership<'a, O, E> {
    args: &'a LaunchArgs,
    net: &'a Network,
    cluster: Option<&'a Cluster>,
    program: &'a OsString,
    program_args: &'a [OsString],
    coordinator: &'a str,
    token: &'a str,
    out: &'a Arc<Mutex<O>>,
    err: &'a Arc<Mutex<E>>,
    done_tx: mpsc::Sender<()>,
    started: Instant,
    /// Join times, earliest first, and how many were started (or failed to start).
    joins: Vec<Duration>,
    next_join: usize,
    /// Drains, earliest first, and how many were issued.
    drains: Vec<DrainAt>,
    next_drain: usize,
    threads: Vec<JoinHandle<()>>,
    results_tx: mpsc::Sender<DrainDone>,
    results: mpsc::Receiver<DrainDone>,
    /// Output relays started for joiners.
    pub(super) pumps: usize,
    ok: bool,
}

impl<'a, O, E> Membership<'a, O, E>
where
    O: Write + Send + 'static,
    E: Write + Send + 'static,
{
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        args: &'a LaunchArgs,
        net: &'a Network,
        cluster: Option<&'a Cluster>,
        coordinator: &'a str,
        token: &'a str,
        out: &'a Arc<Mutex<O>>,
        err: &'a Arc<Mutex<E>>,
        done_tx: mpsc::Sender<()>,
        started: Instant,
    ) -> Self {
        let (program, program_args) = args.program.split_first().expect("checked: a program");
        let mut joins: Vec<Duration> = args.membership.join_at.iter().map(|s| s.0).collect();
        joins.sort();
        let mut drains = args.membership.drain_at.clone();
        drains.sort_by_key(|d| d.at);
        let (results_tx, results) = mpsc::channel();
        Self {
            args,
            net,
            cluster,
            program,
            program_args,
            coordinator,
            token,
            out,
            err,
            done_tx,
            started,
            joins,
            next_join: 0,
            drains,
            next_drain: 0,
            threads: Vec::new(),
            results_tx,
            results,
            pumps: 0,
            ok: true,
        }
    }

    /// One poll of the supervision loop: starts the joins and drains now due (unless the run is
    /// `stopping`) and prints the drains' outcomes.
    pub(super) fn tick(&mut self, nodes: &mut Vec<Node>, stopping: bool) {
        self.collect();
        if stopping {
            return;
        }
        let t = self.started.elapsed();
        while self.next_join < self.joins.len() && self.joins[self.next_join] <= t {
            self.next_join += 1;
            self.start_joiner(self.next_join as u32, nodes);
        }
        while self.next_drain < self.drains.len() && self.drains[self.next_drain].at.0 <= t {
            let spec = self.drains[self.next_drain];
            self.next_drain += 1;
            self.start_drain(spec);
        }
    }

    /// After the last child was reaped: waits for the drain threads, reports what was not done;
    /// returns whether every asked-for change was made.
    pub(super) fn finish(mut self) -> bool {
        let t = self.started.elapsed().as_secs_f64();
        for &at in &self.joins[self.next_join..] {
            notice(
                self.err,
                &format!(
                    "join at {:.1} s not started: the job ended at {t:.1} s",
                    at.as_secs_f64()
                ),
            );
            self.ok = false;
        }
        for d in &self.drains[self.next_drain..] {
            notice(
                self.err,
                &format!(
                    "drain of node {} at {:.1} s not made: the job ended at {t:.1} s",
                    d.rank,
                    d.at.0.as_secs_f64()
                ),
            );
            self.ok = false;
        }
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
        self.collect();
        self.ok
    }

    fn collect(&mut self) {
        while let Ok(done) = self.results.try_recv() {
            let retried = if done.retries == 0 {
                String::new()
            } else {
                format!(", asked {} times", done.retries + 1)
            };
            let when = format!(
                "at {:.1} s (asked at {:.1} s{retried})",
                done.ended.as_secs_f64(),
                done.started.as_secs_f64()
            );
            match done.outcome {
                Ok(message) => notice(
                    self.err,
                    &format!("node {} drained {when}: {message}", done.spec.rank),
                ),
                Err(reason) => {
                    notice(
                        self.err,
                        &format!("drain of node {} failed {when}: {reason}", done.spec.rank),
                    );
                    self.ok = false;
                }
            }
        }
    }

    fn start_joiner(&mut self, k: u32, nodes: &mut Vec<Node>) {
        let t = self.started.elapsed().as_secs_f64();
        let slot = self.args.nodes + k - 1;
        let mut cmd = match self.cluster {
            Some(c) => {
                let mut cmd = c.command(slot, self.program);
                cmd.env(ROAM_NETNS, c.node_namespace(slot));
                cmd
            }
            None => Command::new(self.program),
        };
        cmd.args(self.program_args)
            .env(ROAM_JOIN, "1")
            .env_remove(ROAM_RANK)
            .env_remove(ROAM_NUM_NODES)
            .env(ROAM_COORDINATOR, self.coordinator)
            .env(ROAM_CLUSTER_TOKEN, self.token)
            .env(ROAM_NETWORK_PROFILE, self.net.profile.name())
            .env_remove(ROAM_SLOW_TASKS)
            .env_remove(ROAM_SLOW_SERVICE)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(w) = self.args.workers_per_node {
            cmd.env(ROAM_WORKERS_PER_NODE, w.to_string());
        }
        if let Some(l) = self.net.latency_us {
            cmd.env(ROAM_EMULATE_LATENCY_US, l.to_string());
        }
        if let Some(b) = &self.args.balancer {
            cmd.env(ROAM_BALANCER, b);
        }
        if let Some(b) = self.net.rate(slot) {
            cmd.env(ROAM_NETWORK_BANDWIDTH, b.to_string());
        }
        if let Ok(Some(addr)) = crate::metrics::launch_addr(self.args.metrics_addr.as_deref(), slot)
        {
            cmd.env(crate::metrics::ROAM_METRICS_ADDR, addr);
        }
        let name = format!("joiner {k}");
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                notice(
                    self.err,
                    &format!(
                        "starting {name} at {t:.1} s: {}: {e}",
                        self.program.to_string_lossy()
                    ),
                );
                self.ok = false;
                return;
            }
        };
        let place = self.cluster.map_or_else(String::new, |c| {
            format!(" in namespace {}", c.node_namespace(slot))
        });
        notice(
            self.err,
            &format!(
                "{name} started at {t:.1} s{place} (pid {}, ROAM_JOIN=1)",
                child.id()
            ),
        );
        let prefix = format!("[{name}] ").into_bytes();
        if let Some(pipe) = child.stdout.take() {
            self.pumps += usize::from(spawn_pump(
                pipe,
                prefix.clone(),
                self.out,
                self.err,
                &self.done_tx,
            ));
        }
        if let Some(pipe) = child.stderr.take() {
            self.pumps += usize::from(spawn_pump(pipe, prefix, self.err, self.err, &self.done_tx));
        }
        nodes.push(Node {
            name,
            child,
            status: None,
        });
    }

    fn start_drain(&mut self, spec: DrainAt) {
        let started = self.started;
        let asked = started.elapsed();
        notice(
            self.err,
            &format!(
                "draining node {} at {:.1} s (roam drain {} --coordinator {})",
                spec.rank,
                asked.as_secs_f64(),
                spec.rank,
                self.coordinator
            ),
        );
        let namespace = self
            .cluster
            .map(|c| Path::new(NETNS_DIR).join(c.node_namespace(0)));
        let (coordinator, token) = (self.coordinator.to_owned(), self.token.to_owned());
        let joiner = spec.rank >= self.args.nodes;
        let tx = self.results_tx.clone();
        let spawned = thread::Builder::new()
            .name("roam-launch-drain".into())
            .spawn(move || {
                let (retries, outcome) = drain(
                    &coordinator,
                    &token,
                    spec.rank,
                    joiner,
                    namespace.as_deref(),
                );
                let _ = tx.send(DrainDone {
                    spec,
                    started: asked,
                    ended: started.elapsed(),
                    retries,
                    outcome,
                });
            });
        match spawned {
            Ok(thread) => self.threads.push(thread),
            Err(e) => {
                notice(
                    self.err,
                    &format!("drain of node {}: no thread: {e}", spec.rank),
                );
                self.ok = false;
            }
        }
    }
}

/// Asks the coordinator to drain `rank` (from inside `namespace`, if given), again while a
/// `joiner`'s rank is no member yet; returns the number of retries and the outcome.
fn drain(
    coordinator: &str,
    token: &str,
    rank: u32,
    joiner: bool,
    namespace: Option<&Path>,
) -> (u32, Result<String, String>) {
    if let Some(ns) = namespace
        && let Err(e) = enter_namespace(ns)
    {
        return (0, Err(format!("entering {}: {e}", ns.display())));
    }
    let until = Instant::now() + RETRY_FOR;
    let mut retries = 0;
    loop {
        match request_drain(coordinator, token.as_bytes(), rank, DRAIN_TIMEOUT) {
            Ok(message) => return (retries, Ok(message)),
            Err(DrainRequestError::Failed { reason, .. })
                if joiner && reason.contains("no member") && Instant::now() < until =>
            {
                retries += 1;
                thread::sleep(RETRY_EVERY);
            }
            Err(e) => return (retries, Err(e.to_string())),
        }
    }
}

/// Moves the calling thread (only) into the network namespace at `path`.
fn enter_namespace(path: &Path) -> io::Result<()> {
    let file = File::open(path)?;
    // SAFETY: setns takes a descriptor we own for the call's duration; it changes only the
    // calling thread's network namespace, and this thread does nothing else afterwards.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Where a joiner runs, for the launcher's notice about the namespaces.
pub(super) fn describe_slots(cluster: &Cluster, nodes: u32, joiners: u32) -> Option<String> {
    (joiners > 0).then(|| {
        let last = nodes + joiners - 1;
        let slots = if joiners == 1 {
            format!("n{nodes}")
        } else {
            format!("n{nodes}..n{last}")
        };
        format!(
            "namespaces {}-{slots} are for the {joiners} joiner(s) of --join-at",
            cluster.prefix()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks_the_options() {
        let s: Secs = "1.5".parse().unwrap();
        assert_eq!(s.0, Duration::from_millis(1500));
        for bad in ["-1", "x", "nan", "inf", "1e9", ""] {
            assert!(bad.parse::<Secs>().is_err(), "{bad:?}");
        }
        let d: DrainAt = "3@2.5".parse().unwrap();
        assert_eq!((d.rank, d.at.0), (3, Duration::from_millis(2500)));
        for bad in ["3", "@2", "x@2", "3@", "3@-1", "-1@2"] {
            assert!(bad.parse::<DrainAt>().is_err(), "{bad:?}");
        }

        let m = |joins: &[u64], drains: &[&str]| MembershipArgs {
            join_at: joins
                .iter()
                .map(|&s| Secs(Duration::from_secs(s)))
                .collect(),
            drain_at: drains.iter().map(|d| d.parse().unwrap()).collect(),
        };
        assert!(m(&[], &[]).is_empty());
        m(&[1, 1], &["4@5", "5@6", "2@3"]).check(4).unwrap();
        let err = |a: MembershipArgs, nodes| a.check(nodes).unwrap_err().to_string();
        assert!(err(m(&[1], &["0@2"]), 3).contains("coordinator"));
        assert!(err(m(&[1], &["4@2"]), 3).contains("out of range"));
        assert!(err(m(&[], &["3@2"]), 3).contains("out of range"));
        assert!(err(m(&[1], &["3@2", "3@4"]), 3).contains("twice"));
        assert!(err(m(&[1], &[]), 1).contains("--nodes 2"));

        // Comma lists and repeated options add up.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            m: MembershipArgs,
        }
        let a = <Cli as clap::Parser>::try_parse_from([
            "roam",
            "--join-at",
            "2,2",
            "--join-at=0.5",
            "--drain-at",
            "4@9,5@10",
        ])
        .unwrap()
        .m;
        assert_eq!(a.joiners(), 3);
        assert_eq!(a.drain_at.len(), 2);
        assert!(<Cli as clap::Parser>::try_parse_from(["roam", "--drain-at", "4"]).is_err());
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        for words in [
            "--join-at <SECS[,SECS...]>",
            "--drain-at <RANK@SECS[,...]>",
            "ROAM_JOIN=1",
        ] {
            assert!(help.contains(words), "{words:?} missing from:\n{help}");
        }
    }
}
