//! `roam launch`: start N node processes of one program on this machine and supervise them.
//!
//! This module owns the local launcher. It picks a free loopback port for the coordinator and a
//! fresh random cluster token, starts one child per rank with the `ROAM_*` variables that
//! [`crate::cluster_env`] reads, relays every child's output line by line with a `[node R] `
//! prefix, and turns the children's fate into one exit code. A metrics address
//! (`--metrics-addr`, else `ROAM_METRICS_ADDR` in the launcher's environment) reaches node (or
//! joiner) `i` with its port plus `i`; every such port is checked before any node starts.
//!
//! Invariants:
//! - Output: each relayed line is written to the sink with a single `write_all` under the sink's
//!   lock, so lines from different nodes never interleave mid-line; a final line without a newline
//!   gets one, and a line longer than [`MAX_LINE`] is split rather than buffered without bound.
//!   A failing sink (e.g. a closed pipe) does not stop the draining, so children never block on a
//!   full pipe.
//! - Exit code: 0 only if every child exits 0. Otherwise the first failure observed: the child's
//!   exit code, or 128 + signal if it died from a signal; if the launcher itself was interrupted
//!   first, 128 + that signal.
//! - Shutdown: on the first failure (or a SIGINT/SIGTERM to the launcher, which is forwarded) every
//!   remaining child gets that signal (SIGTERM for a failure), then SIGKILL after [`GRACE`]; a
//!   second SIGINT/SIGTERM sends SIGKILL at once. Each child runs in its own process group and
//!   signals go to the whole group, so helpers a child forked (e.g. the commands of an `sh -c`
//!   script) go with it. Only children not yet reaped are signalled, so a reused pid is never hit.
//!   The separate groups also mean a terminal's Ctrl-C reaches only the launcher, which forwards
//!   it once; children get no stdin (`/dev/null`), so they never contend for the terminal.
//! - Network: loopback unless asked otherwise. With `--netns` (or a profile or bandwidth that
//!   needs it) every node runs in its own network namespace ([`crate::netns`]), created after the
//!   signal handlers are installed and deleted after every child has been reaped — on success,
//!   on failure, after a forwarded SIGINT/SIGTERM, and (by its drop guard) on an error or a
//!   panic in the launcher. Namespaces left by a launcher that was SIGKILLed are removed by the
//!   next `--netns` run. Every node gets `ROAM_NETWORK_PROFILE`.
//! - Stragglers: with `--slow-node`, the specs are validated ([`crate::slow_node`]) before
//!   anything is created, and each slowed rank gets a cpu cgroup ([`crate::cgroup`]) with the
//!   quota due at time 0 already set. With `--slow-scope process` (the default) the node's
//!   process joins it between fork and exec; with `--slow-scope protocol` only the node's
//!   protocol threads join it, by themselves (`ROAM_SLOW_TASKS`), and where that cannot work
//!   (cgroup v2) the launcher refuses before creating anything. The
//!   supervision loop applies the schedule's later changes (times count from just before the
//!   first node is spawned) and prints a `[launch]` line for each. When every child has been
//!   reaped the launcher prints each group's throttling counters and removes the groups, on
//!   the same paths as the namespaces (and by a drop guard); a group it cannot remove, or a
//!   quota it cannot change, makes a run that would have exited 0 exit 1.
//! - Membership: `--join-at` and `--drain-at` start joining nodes and drain nodes during the
//!   run ([`launch_elastic`]); joiners are supervised like the nodes.
//! - Restarts: with `--max-restarts K` a run is a sequence of attempts, each a whole launch as
//!   above (namespaces and cgroups made and removed per attempt); after a node failure the
//!   next attempt resumes from the latest complete checkpoint ([`launch_restart`]). When one
//!   poll finds several nodes ended, a node killed by a signal is reported as the failure
//!   before nodes that exited with an error (they are usually its peers, failing because of it).

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use parking_lot::Mutex;

use crate::cgroup::{Groups, ROAM_SLOW_TASKS, Scope};
use crate::cluster_env::{
    ROAM_CLUSTER_TOKEN, ROAM_COORDINATOR, ROAM_EMULATE_LATENCY_US, ROAM_NUM_NODES, ROAM_RANK,
    ROAM_WORKERS_PER_NODE,
};
use crate::netns::{
    self, Cluster, Network, NodeRate, Profile, ROAM_NETNS, ROAM_NETWORK_BANDWIDTH,
    ROAM_NETWORK_PROFILE, Rate,
};
use crate::rendezvous::MAX_NODES;
use crate::slow_node::{Schedule, SlowNode, Tracker};
use crate::slowing::{ROAM_SLOW_SERVICE, ServiceSlowdown};

/// How long children get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);
/// Longest relayed line; longer output is split into lines of this size.
pub const MAX_LINE: usize = 1 << 20;
/// How long to wait, after every child is gone, for output still held by their leftovers.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long a node's error exit waits for the launcher to see a node killed by a signal before
/// it is named as the failure: the peers of a killed node fail (naming it) as soon as its
/// sockets close, which on a loaded machine can come before the killed process is reaped.
const BLAME_SETTLE: Duration = Duration::from_millis(300);
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

#[path = "launch_elastic.rs"]
pub mod launch_elastic;
pub use launch_elastic::{DrainAt, MembershipArgs, Secs};
#[path = "launch_restart.rs"]
pub mod launch_restart;
pub use launch_restart::RestartArgs;

/// Arguments of `roam launch`.
#[derive(Clone, Debug, clap::Args)]
pub struct LaunchArgs {
    /// Number of node processes to start on this machine.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_NODES)))]
    pub nodes: u32,
    /// Worker threads per node (exported to every node as ROAM_WORKERS_PER_NODE).
    #[arg(long)]
    pub workers_per_node: Option<u32>,
    /// Emulated one-way network latency in microseconds (exported as ROAM_EMULATE_LATENCY_US);
    /// overrides the latency of a network profile.
    #[arg(long)]
    pub latency_us: Option<u64>,
    /// Slow node RANK down to 1/FACTOR of one CPU (a cpu cgroup quota; needs root), from START
    /// to END seconds after the nodes start, or for the whole run without `@`. Repeatable, also
    /// for one rank with disjoint windows: `--slow-node 1:4`, `--slow-node 2:2.5@10-30`.
    #[arg(long, value_name = "RANK:FACTOR[@START[-END]]")]
    pub slow_node: Vec<SlowNode>,
    /// What every --slow-node slows: `process`, the node's whole process, as if its machine
    /// were slow; `protocol`, only its protocol threads (which serve its peers and read the
    /// replies to its own requests), its worker threads at full speed (needs cgroup v1); or
    /// `service`, only its serving of peers' pulls and pushes, FACTOR times slower by a delay
    /// in its transport (no cgroup, no root).
    #[arg(long, value_enum, value_name = "SCOPE", default_value_t = Scope::Process)]
    pub slow_scope: Scope,
    /// The load balancer on every node (exported as ROAM_BALANCER): `on` or `off`; unset, the
    /// program's own configuration decides (on by default).
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub balancer: Option<String>,
    /// Serve Prometheus metrics from every node: node R at http://HOST:(PORT+R)/metrics,
    /// joiners (--join-at) on the ports after the last rank (default: $ROAM_METRICS_ADDR, else
    /// none). Port 0 is refused; every port is checked free before any node starts.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Network namespaces, bandwidth shaping and profiles (default: plain loopback).
    #[command(flatten)]
    pub network: NetworkArgs,
    /// Nodes joining and drained during the run (default: none).
    #[command(flatten)]
    pub membership: MembershipArgs,
    /// Restarting the job when a node dies (default: no restart).
    #[command(flatten)]
    pub restarts: RestartArgs,
    /// The program every node runs, followed by its arguments (put `--` before it so that its
    /// options are not taken for the launcher's).
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]..."
    )]
    pub program: Vec<OsString>,
}

/// The network options of `roam launch` (see [`Network::resolve`] for how they combine).
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct NetworkArgs {
    /// Run every node in its own network namespace, joined by a bridge (needs root, `ip`).
    #[arg(long)]
    pub netns: bool,
    /// Network profile (default loopback); 10gbe and 1gbe imply --netns.
    #[arg(long, value_enum)]
    pub profile: Option<Profile>,
    /// Per-node link bandwidth in each direction, tc syntax (e.g. 10gbit, 500mbit); implies
    /// --netns and --profile custom; shaped with tc tbf.
    #[arg(long, value_name = "RATE")]
    pub bandwidth: Option<Rate>,
    /// Link bandwidth of node RANK in each direction, tc syntax, overriding --bandwidth (or the
    /// profile's rate) for that node: `--node-bandwidth 1:250mbit`. Repeatable, once per rank;
    /// implies --netns. Without --bandwidth or a shaping profile the other nodes stay unshaped.
    #[arg(long, value_name = "RANK:RATE")]
    pub node_bandwidth: Vec<NodeRate>,
}

/// Runs the cluster with the children's output relayed to this process's stdout and stderr;
/// returns the exit code the launcher should exit with.
pub fn run(args: &LaunchArgs) -> anyhow::Result<i32> {
    run_with_output(args, io::stdout(), io::stderr())
}

/// [`run`] with the children's prefixed stdout and stderr lines written to the given sinks (the
/// launcher's own notices go to `stderr` too).
pub fn run_with_output<O, E>(args: &LaunchArgs, stdout: O, stderr: E) -> anyhow::Result<i32>
where
    O: Write + Send + 'static,
    E: Write + Send + 'static,
{
    run_with_network(args, &args.network, stdout, stderr)
}

/// [`run_with_output`] on the network the options describe.
pub fn run_with_network<O, E>(
    args: &LaunchArgs,
    network: &NetworkArgs,
    stdout: O,
    stderr: E,
) -> anyhow::Result<i32>
where
    O: Write + Send + 'static,
    E: Write + Send + 'static,
{
    args.restarts.check(args)?;
    let out = Arc::new(Mutex::new(stdout));
    let err = Arc::new(Mutex::new(stderr));
    if args.restarts.max_restarts == 0 {
        return run_attempt(args, network, &args.program, &out, &err).map(|a| a.code);
    }
    // Held across the attempts, so that a signal between two of them is seen (each attempt
    // installs its own guard for the signals during it).
    let signals = signals::Guard::install().context("installing SIGINT/SIGTERM handlers")?;
    launch_restart::run(args, &err, &|| signals.received().0 > 0, &mut |program| {
        run_attempt(args, network, program, &out, &err)
    })
}

/// One run of the job, with `program` as the node command: the whole launch, from checking the
/// options to removing the namespaces and cgroups.
fn run_attempt<O, E>(
    args: &LaunchArgs,
    network: &NetworkArgs,
    program: &[OsString],
    out: &Arc<Mutex<O>>,
    err: &Arc<Mutex<E>>,
) -> anyhow::Result<launch_restart::Attempt>
where
    O: Write + Send + 'static,
    E: Write + Send + 'static,
{
    if args.nodes == 0 || args.nodes > MAX_NODES {
        bail!("--nodes must be in 1..={MAX_NODES}, got {}", args.nodes);
    }
    let Some((program, program_args)) = program.split_first() else {
        bail!("no program given: usage is roam launch --nodes N -- PROGRAM [ARGS]...");
    };
    let net = Network::resolve(
        network.netns,
        network.profile,
        network.bandwidth,
        &network.node_bandwidth,
        args.latency_us,
    )?;
    netns::check_node_rates(&net.node_bandwidth, args.nodes)?;
    if net.netns {
        ensure!(
            args.nodes <= netns::MAX_NODES,
            "--netns supports at most {} nodes, got {}",
            netns::MAX_NODES,
            args.nodes
        );
    }
    args.membership.check(args.nodes)?;
    let joiners = args.membership.joiners();
    if net.netns {
        ensure!(
            args.nodes + joiners <= netns::MAX_NODES,
            "--netns supports at most {} nodes, joiners included, got {} and {joiners}",
            netns::MAX_NODES,
            args.nodes
        );
    }
    // Every node's (and joiner's) metrics port must exist, and be free, before any starts.
    check_metrics_ports(args.metrics_addr.as_deref(), args.nodes, joiners, net.netns)?;
    let schedule = Schedule::new(&args.slow_node, args.nodes)?;
    let token: String =
        rand::random::<[u8; 32]>()
            .iter()
            .fold(String::with_capacity(64), |mut hex, b| {
                hex.push(char::from(HEX_DIGITS[usize::from(b >> 4)]));
                hex.push(char::from(HEX_DIGITS[usize::from(b & 15)]));
                hex
            });

    let (out, err) = (Arc::clone(out), Arc::clone(err));
    // Installed before the first child or namespace exists, so no signal can slip between
    // creating them and watching for it.
    let signals = signals::Guard::install().context("installing SIGINT/SIGTERM handlers")?;

    let mut groups = if schedule.is_empty() {
        None
    } else if args.slow_scope == Scope::Service {
        notice(
            &err,
            "--slow-scope service: the slowed nodes serve their peers' pulls and pushes FACTOR \
             times slower (a delay in their transport, ROAM_SLOW_SERVICE); no cpu cgroup",
        );
        None
    } else {
        let (groups, stale) = Groups::create(&schedule.ranks(), args.slow_scope)?;
        if !stale.is_empty() {
            notice(
                &err,
                &format!(
                    "removed cpu cgroups left by launchers that no longer run: {}",
                    stale.join(" ")
                ),
            );
        }
        if args.slow_scope == Scope::Protocol {
            notice(
                &err,
                "--slow-scope protocol: only the protocol threads of the slowed nodes join \
                 their cpu cgroups (through ROAM_SLOW_TASKS); their processes and worker \
                 threads run at full speed",
            );
        }
        Some(groups)
    };
    let mut tracker = Tracker::new(schedule);
    // The quotas due at time 0 are in place before the first node exists.
    if let Some(g) = &groups
        && let Some(e) = apply_schedule(g, &mut tracker, Duration::ZERO, &err)
            .into_iter()
            .next()
    {
        return Err(e);
    }

    let mut cluster = if net.netns {
        // `ip netns exec` reports a missing program only from inside the child; say it here.
        if netns::find_program(program, false).is_none() {
            bail!(
                "starting node 0: {}: program not found",
                program.to_string_lossy()
            );
        }
        let tools = netns::preflight(net.bandwidth.is_some() || !net.node_bandwidth.is_empty())?;
        let (removed, problems) = netns::remove_stale(&tools);
        if !removed.is_empty() {
            notice(
                &err,
                &format!(
                    "removed network namespaces left by launchers that no longer run: {}",
                    removed.join(" ")
                ),
            );
        }
        for p in problems {
            notice(&err, &format!("removing a stale network namespace: {p}"));
        }
        // Joiners' namespaces are made now, with the nodes'; their processes start later.
        let cluster = Cluster::create_shaped(
            tools,
            args.nodes + joiners,
            net.bandwidth,
            &net.node_bandwidth,
        )?;
        notice(&err, &format!("{}; {}", net.describe(), cluster.describe()));
        if let Some(n) = launch_elastic::describe_slots(&cluster, args.nodes, joiners) {
            notice(&err, &n);
        }
        Some(cluster)
    } else {
        None
    };
    let coordinator = match &cluster {
        Some(c) => c.coordinator().to_string(),
        None => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .context("picking a free loopback port for the coordinator")?
                .port();
            // The port is free now but not reserved; rank 0 binds it moments later, and should
            // another process take it meanwhile, rank 0 fails with a bind error naming it.
            format!("127.0.0.1:{port}")
        }
    };
    let (count, sig) = signals.received();
    if count > 0 {
        // Interrupted while the namespaces were set up: start nothing.
        notice(
            &err,
            &format!("received signal {sig} before starting the nodes"),
        );
        finish_network(cluster.as_mut(), &err);
        finish_cgroups(groups.as_mut(), &err, false);
        return Ok(launch_restart::Attempt {
            code: 128 + sig,
            failed: None,
            interrupted: true,
        });
    }

    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut nodes: Vec<Node> = Vec::with_capacity(args.nodes as usize);
    let mut pumps = 0;
    let started = Instant::now();

    for rank in 0..args.nodes {
        let mut cmd = match &cluster {
            Some(c) => {
                let mut cmd = c.command(rank, program);
                cmd.env(ROAM_NETNS, c.node_namespace(rank));
                cmd
            }
            None => Command::new(program),
        };
        cmd.args(program_args)
            .env(ROAM_RANK, rank.to_string())
            .env(ROAM_NUM_NODES, args.nodes.to_string())
            .env(ROAM_COORDINATOR, &coordinator)
            .env(ROAM_CLUSTER_TOKEN, &token)
            .env(ROAM_NETWORK_PROFILE, net.profile.name())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(w) = args.workers_per_node {
            cmd.env(ROAM_WORKERS_PER_NODE, w.to_string());
        }
        if let Some(l) = net.latency_us {
            cmd.env(ROAM_EMULATE_LATENCY_US, l.to_string());
        }
        if let Some(b) = &args.balancer {
            cmd.env(crate::cluster_env::ROAM_BALANCER, b);
        }
        if let Ok(Some(addr)) = crate::metrics::launch_addr(args.metrics_addr.as_deref(), rank) {
            cmd.env(crate::metrics::ROAM_METRICS_ADDR, addr);
        }
        if let Some(b) = net.rate(rank) {
            cmd.env(ROAM_NETWORK_BANDWIDTH, b.to_string());
        }
        // Only this run's protocol scope puts threads in a group: never one inherited.
        cmd.env_remove(ROAM_SLOW_TASKS);
        cmd.env_remove(ROAM_SLOW_SERVICE);
        if args.slow_scope == Scope::Service {
            let windows = ServiceSlowdown::windows_of(&args.slow_node, rank);
            if !windows.is_empty() {
                cmd.env(ROAM_SLOW_SERVICE, windows);
            }
        }
        let group = groups
            .as_ref()
            .and_then(|g| g.enrol(rank, args.slow_scope, &mut cmd));
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for n in &mut nodes {
                    n.signal(libc::SIGKILL);
                    let _ = n.child.wait();
                }
                wait_for_output(&done_rx, pumps, &err);
                finish_network(cluster.as_mut(), &err);
                let joining = group
                    .filter(|_| args.slow_scope == Scope::Process)
                    .map_or_else(String::new, |d| {
                        format!(" (after joining cpu cgroup {})", d.display())
                    });
                finish_cgroups(groups.as_mut(), &err, false);
                return Err(e).with_context(|| {
                    format!(
                        "starting node {rank}: {}{joining}",
                        program.to_string_lossy()
                    )
                });
            }
        };
        let prefix = format!("[node {rank}] ").into_bytes();
        if let Some(pipe) = child.stdout.take() {
            pumps += usize::from(spawn_pump(pipe, prefix.clone(), &out, &err, &done_tx));
        }
        if let Some(pipe) = child.stderr.take() {
            pumps += usize::from(spawn_pump(pipe, prefix, &err, &err, &done_tx));
        }
        nodes.push(Node {
            name: format!("node {rank}"),
            child,
            status: None,
        });
    }
    let mut membership = launch_elastic::Membership::new(
        args,
        &net,
        cluster.as_ref(),
        &coordinator,
        &token,
        &out,
        &err,
        done_tx,
        started,
    );

    let mut schedule_ok = true;
    let mut tick = |nodes: &mut Vec<Node>, stopping: bool| {
        membership.tick(nodes, stopping);
        let Some(g) = &groups else {
            return;
        };
        for e in apply_schedule(g, &mut tracker, started.elapsed(), &err) {
            notice(&err, &format!("{e:#}"));
            schedule_ok = false;
        }
    };
    let ending = supervise(&mut nodes, &signals, &err, &mut tick);
    let code = ending.code;
    pumps += membership.pumps;
    let changed = membership.finish();
    wait_for_output(&done_rx, pumps, &err);
    let cleaned = finish_network(cluster.as_mut(), &err);
    let ungrouped = finish_cgroups(groups.as_mut(), &err, true);
    // A run that leaves namespaces or cgroups behind, or missed a quota change or a membership
    // change, did not succeed, whatever its nodes did.
    Ok(launch_restart::Attempt {
        code: if code == 0 && !(cleaned && ungrouped && schedule_ok && changed) {
            1
        } else {
            code
        },
        ..ending
    })
}

/// The metrics addresses of the `nodes` ranks and `joiners` joiners (`--metrics-addr`, else
/// `ROAM_METRICS_ADDR`; port plus slot), checked before anything starts: each must be a valid
/// address with its port in range, and, on loopback, free: a port taken by another process
/// would fail that one node after its peers started, with only its own output to say why. In
/// namespaces (`netns`) each node binds inside its own, so there is nothing to try from here.
/// The check binds and releases each port; a process that takes one in between still fails
/// its node with a bind error naming the address.
fn check_metrics_ports(
    base: Option<&str>,
    nodes: u32,
    joiners: u32,
    netns: bool,
) -> anyhow::Result<()> {
    for slot in 0..nodes + joiners {
        let Some(addr) = crate::metrics::launch_addr(base, slot)? else {
            return Ok(());
        };
        if netns {
            continue;
        }
        let who = if slot < nodes {
            format!("node {slot}")
        } else {
            format!("joiner {} (slot {slot})", slot - nodes)
        };
        let resolved = crate::metrics::parse_addr(&addr)?;
        if let Err(e) = std::net::TcpListener::bind(resolved) {
            bail!(
                "{who}: metrics address {addr} (the base port + {slot}) cannot be bound: {e}; \
                 node r serves on PORT + r, so ports PORT to PORT + {} must be free",
                nodes + joiners - 1
            );
        }
    }
    Ok(())
}

/// Writes the quota changes due at `t` after the nodes started, with a notice for each;
/// returns the changes that failed (each is tried once).
fn apply_schedule<E: Write>(
    groups: &Groups,
    tracker: &mut Tracker,
    t: Duration,
    err: &Mutex<E>,
) -> Vec<anyhow::Error> {
    let mut failed = Vec::new();
    for (rank, factor) in tracker.due(t) {
        let written = match groups.set(rank, factor) {
            Ok(w) => w,
            Err(e) => {
                failed.push(anyhow::Error::new(e).context(format!(
                    "changing node {rank}'s cpu quota at {:.1} s",
                    t.as_secs_f64()
                )));
                continue;
            }
        };
        let what = factor.map_or_else(
            || "unthrottled".to_owned(),
            |f| format!("throttled to 1/{f} of a CPU"),
        );
        let dir = groups
            .dir(rank)
            .map_or_else(String::new, |d| d.display().to_string());
        notice(
            err,
            &format!(
                "node {rank} {what} at {:.1} s ({written} in {dir})",
                t.as_secs_f64()
            ),
        );
    }
    failed
}

/// Prints each group's throttling counters (if `report`) and removes the run's cpu cgroups,
/// reporting problems; returns whether all are gone.
fn finish_cgroups<E: Write>(groups: Option<&mut Groups>, err: &Mutex<E>, report: bool) -> bool {
    let Some(groups) = groups else {
        return true;
    };
    for rank in groups.ranks().into_iter().filter(|_| report) {
        let Some(s) = groups.stats(rank) else {
            continue;
        };
        notice(
            err,
            &format!(
                "node {rank} cpu cgroup at exit: nr_periods={} nr_throttled={} throttled_ms={}",
                s.nr_periods,
                s.nr_throttled,
                s.throttled.as_millis()
            ),
        );
    }
    let problems = groups.destroy();
    for p in &problems {
        notice(
            err,
            &format!("cleaning up cpu cgroups: {p} (the next --slow-node run removes it)"),
        );
    }
    problems.is_empty()
}

/// Deletes the run's namespaces, if any, reporting problems; returns whether all are gone.
fn finish_network<E: Write>(cluster: Option<&mut Cluster>, err: &Mutex<E>) -> bool {
    let Some(cluster) = cluster else {
        return true;
    };
    let problems = cluster.destroy();
    for p in &problems {
        notice(
            err,
            &format!(
                "cleaning up network namespace {}-*: {p} (the next --netns run removes it)",
                cluster.prefix()
            ),
        );
    }
    problems.is_empty()
}

/// One child and, once reaped, how it ended.
struct Node {
    /// `node R`, or `joiner K` for the K-th node started by `--join-at`.
    name: String,
    child: Child,
    status: Option<ExitStatus>,
}

impl Node {
    /// Signals the child's process group, or the child alone if it left its group.
    fn signal(&self, sig: libc::c_int) {
        if self.status.is_some() {
            // Reaped: the pid may already belong to an unrelated process.
            return;
        }
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child, so
        // it (and the group it leads) cannot have been recycled.
        unsafe {
            if libc::kill(-pid, sig) != 0 {
                libc::kill(pid, sig);
            }
        }
    }
}

/// The shell convention for an exit status: the code, or 128 + the terminating signal.
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended".to_owned(),
    }
}

fn notice<E: Write>(err: &Mutex<E>, msg: &str) {
    let line = format!("[launch] {msg}\n");
    let mut e = err.lock();
    // A broken stderr must not abort supervision.
    let _ = e.write_all(line.as_bytes()).and_then(|()| e.flush());
}

/// Waits for every child, stopping the rest on the first failure or a signal; returns the code
/// and what ended the run. `tick` runs once per poll, while any child runs, and may add
/// children (joiners); it is told whether the run is stopping (after a failure or a signal).
fn supervise<E: Write>(
    nodes: &mut Vec<Node>,
    signals: &signals::Guard,
    err: &Mutex<E>,
    tick: &mut dyn FnMut(&mut Vec<Node>, bool),
) -> launch_restart::Attempt {
    let mut failure: Option<(String, ExitStatus)> = None;
    let mut interrupted: Option<i32> = None;
    let mut signals_seen = 0;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    // The failure to name, and until when an error exit may still give way to a signalled node.
    let mut blame: Option<(String, ExitStatus, Instant)> = None;

    loop {
        tick(nodes, kill_at.is_some());
        let (count, sig) = signals.received();
        if count > signals_seen {
            signals_seen = count;
            if interrupted.is_none() && failure.is_none() {
                interrupted = Some(sig);
                notice(
                    err,
                    &format!("received signal {sig}; forwarding it to the nodes"),
                );
                nodes.iter().for_each(|n| n.signal(sig));
                kill_at = Some(Instant::now() + GRACE);
            } else {
                // Asked again: the user does not want to wait out the grace period.
                kill_at = Some(Instant::now());
            }
        }

        // The failure to report: a node killed by a signal before one that exited with an error,
        // since the peers of a killed node fail (naming it) moments after it.
        let signalled = |s: &ExitStatus| s.signal().is_some();
        for n in nodes.iter_mut().filter(|n| n.status.is_none()) {
            let status = match n.child.try_wait() {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    // Cannot happen for our own unreaped child; treat it as lost, not as a hang.
                    notice(err, &format!("cannot wait for {}: {e}", n.name));
                    ExitStatus::from_raw(libc::SIGKILL)
                }
            };
            n.status = Some(status);
            if !status.success()
                && blame
                    .as_ref()
                    .is_none_or(|(_, f, _)| !signalled(f) && signalled(&status))
            {
                blame = Some((n.name.clone(), status, Instant::now() + BLAME_SETTLE));
            }
        }
        let all_ended = nodes.iter().all(|n| n.status.is_some());
        let settled = blame.as_ref().is_some_and(|(_, status, until)| {
            signalled(status) || all_ended || Instant::now() >= *until
        });
        if let Some((name, status, _)) = blame
            .take_if(|_| settled)
            .filter(|_| failure.is_none() && kill_at.is_none())
        {
            notice(
                err,
                &format!("{name} {}; stopping the other nodes", describe(status)),
            );
            failure = Some((name, status));
            kill_at = Some(Instant::now() + GRACE);
            nodes.iter().for_each(|n| n.signal(libc::SIGTERM));
        }
        if nodes.iter().all(|n| n.status.is_some()) {
            break;
        }
        if !killed && kill_at.is_some_and(|t| Instant::now() >= t) {
            killed = true;
            notice(err, "grace period over; killing the remaining nodes");
            nodes.iter().for_each(|n| n.signal(libc::SIGKILL));
        }
        thread::sleep(POLL_INTERVAL);
    }
    launch_restart::Attempt {
        code: failure
            .as_ref()
            .map(|(_, s)| exit_code(*s))
            .or(interrupted.map(|s| 128 + s))
            .unwrap_or(0),
        interrupted: interrupted.is_some(),
        failed: failure,
    }
}

/// Waits (briefly) until the pumps have relayed everything the children wrote.
fn wait_for_output<E: Write>(done: &mpsc::Receiver<()>, pumps: usize, err: &Mutex<E>) {
    let deadline = Instant::now() + DRAIN_GRACE;
    for _ in 0..pumps {
        let left = deadline.saturating_duration_since(Instant::now());
        if done.recv_timeout(left).is_err() {
            // A background process a node left behind still holds the pipe; stop waiting for it.
            notice(
                err,
                "some node output is still open after every node exited; not waiting for it",
            );
            return;
        }
    }
}

/// Relays `pipe` on its own thread; returns whether the thread (and so its `done` message)
/// exists. Without a thread the pipe is dropped, so the child sees a closed pipe, not a full one.
fn spawn_pump<R, W, E>(
    pipe: R,
    prefix: Vec<u8>,
    sink: &Arc<Mutex<W>>,
    err: &Mutex<E>,
    done: &mpsc::Sender<()>,
) -> bool
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
    E: Write,
{
    let (sink, done) = (Arc::clone(sink), done.clone());
    let spawned = thread::Builder::new()
        .name("roam-launch-output".into())
        .spawn(move || {
            pump(pipe, &prefix, &sink);
            let _ = done.send(());
        });
    if let Err(e) = spawned {
        notice(
            err,
            &format!("cannot start a thread to relay node output: {e}"),
        );
        return false;
    }
    true
}

/// Relays `pipe` to `sink` line by line, each line prefixed, until end of file.
fn pump<R: Read, W: Write>(pipe: R, prefix: &[u8], sink: &Mutex<W>) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::with_capacity(prefix.len() + 256);
    let mut sink_ok = true;
    loop {
        line.clear();
        line.extend_from_slice(prefix);
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        if sink_ok {
            let mut w = sink.lock();
            sink_ok = w.write_all(&line).and_then(|()| w.flush()).is_ok();
        }
    }
}

/// Process-wide SIGINT/SIGTERM handling shared by concurrent launches.
mod signals {
    use std::io;
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

    use parking_lot::Mutex;

    const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

    static COUNT: AtomicUsize = AtomicUsize::new(0);
    static LAST: AtomicI32 = AtomicI32::new(0);
    /// Number of live guards, and the dispositions to restore when it drops to zero.
    static STATE: Mutex<(usize, Vec<libc::sigaction>)> = Mutex::new((0, Vec::new()));

    extern "C" fn on_signal(sig: libc::c_int) {
        // Only lock-free atomics: anything else is not async-signal-safe.
        LAST.store(sig, Ordering::SeqCst);
        COUNT.fetch_add(1, Ordering::SeqCst);
    }

    /// Keeps the handlers installed; the previous dispositions return when the last guard drops.
    pub(super) struct Guard {
        base: usize,
    }

    impl Guard {
        pub(super) fn install() -> io::Result<Self> {
            let mut state = STATE.lock();
            if state.0 == 0 {
                let mut saved = Vec::with_capacity(SIGNALS.len());
                for sig in SIGNALS {
                    // SAFETY: sigaction is plain data, valid when zeroed; the handler only
                    // touches atomics, which is async-signal-safe.
                    let old = unsafe {
                        let mut act: libc::sigaction = std::mem::zeroed();
                        act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                        act.sa_flags = libc::SA_RESTART;
                        libc::sigemptyset(&mut act.sa_mask);
                        let mut old: libc::sigaction = std::mem::zeroed();
                        if libc::sigaction(sig, &act, &mut old) != 0 {
                            let e = io::Error::last_os_error();
                            restore(&saved);
                            return Err(e);
                        }
                        old
                    };
                    saved.push(old);
                }
                state.1 = saved;
            }
            state.0 += 1;
            Ok(Self {
                base: COUNT.load(Ordering::SeqCst),
            })
        }

        /// Signals received since this guard was installed, and the latest one.
        pub(super) fn received(&self) -> (usize, libc::c_int) {
            let count = COUNT.load(Ordering::SeqCst) - self.base;
            (count, LAST.load(Ordering::SeqCst))
        }
    }

    fn restore(saved: &[libc::sigaction]) {
        for (sig, old) in SIGNALS.iter().zip(saved) {
            // SAFETY: `old` was filled in by a successful sigaction call for this signal.
            unsafe {
                libc::sigaction(*sig, old, std::ptr::null_mut());
            }
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            let mut state = STATE.lock();
            state.0 -= 1;
            if state.0 == 0 {
                restore(&state.1);
                state.1.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        launch: LaunchArgs,
    }

    #[test]
    fn parses_the_documented_command_line() {
        let cli = Cli::try_parse_from([
            "roam",
            "--nodes",
            "3",
            "--workers-per-node",
            "4",
            "--latency-us",
            "50",
            "--",
            "sh",
            "-c",
            "echo --nodes",
        ])
        .unwrap();
        let a = cli.launch;
        assert_eq!(
            (a.nodes, a.workers_per_node, a.latency_us),
            (3, Some(4), Some(50))
        );
        assert_eq!(a.program, ["sh", "-c", "echo --nodes"]);

        let a = Cli::try_parse_from(["roam", "--nodes", "2", "prog", "-x", "--y"])
            .unwrap()
            .launch;
        assert_eq!(a.program, ["prog", "-x", "--y"]);

        assert!(Cli::try_parse_from(["roam", "--nodes", "0", "--", "sh"]).is_err());
        assert!(Cli::try_parse_from(["roam", "--nodes", "2"]).is_err());
    }

    #[test]
    fn network_options_are_parsed_with_the_launch_options() {
        let a = Cli::try_parse_from([
            "roam",
            "--nodes",
            "2",
            "--profile",
            "1gbe",
            "--latency-us",
            "20",
            "--",
            "prog",
            "--netns",
        ])
        .unwrap()
        .launch;
        assert_eq!((a.latency_us, a.program.len()), (Some(20), 2));
        assert_eq!(
            a.network,
            NetworkArgs {
                netns: false,
                profile: Some(Profile::OneGbe),
                bandwidth: None,
                node_bandwidth: Vec::new(),
            }
        );
        let n = Cli::try_parse_from([
            "roam",
            "--nodes",
            "2",
            "--netns",
            "--bandwidth",
            "5gbit",
            "p",
        ])
        .unwrap()
        .launch
        .network;
        assert!(n.netns);
        assert_eq!(n.bandwidth, Some("5gbit".parse().unwrap()));
        assert_eq!(n.profile, None);

        for bad in [
            ["roam", "--nodes", "2", "--profile", "100gbe", "p"],
            ["roam", "--nodes", "2", "--bandwidth", "fast", "p"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn netns_refusals_come_before_any_child_starts() {
        let args = LaunchArgs {
            nodes: 2,
            workers_per_node: None,
            latency_us: None,
            slow_node: Vec::new(),
            slow_scope: Scope::Process,
            balancer: None,
            metrics_addr: None,
            network: NetworkArgs::default(),
            membership: MembershipArgs::default(),
            restarts: RestartArgs::default(),
            program: vec!["true".into()],
        };
        let loopback_netns = NetworkArgs {
            netns: true,
            profile: Some(Profile::Loopback),
            bandwidth: None,
            node_bandwidth: Vec::new(),
        };
        let e = run_with_network(&args, &loopback_netns, io::sink(), io::sink()).unwrap_err();
        assert!(
            e.to_string().contains("cannot be combined with --netns"),
            "{e}"
        );

        let mut missing = args.clone();
        missing.program = vec!["/nonexistent/roam-test-program".into()];
        let netns = NetworkArgs {
            netns: true,
            ..NetworkArgs::default()
        };
        let e = run_with_network(&missing, &netns, io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("program not found"), "{e}");
    }

    #[test]
    fn node_bandwidth_is_parsed_and_checked_before_anything_starts() {
        let n = Cli::try_parse_from([
            "roam",
            "--nodes",
            "4",
            "--node-bandwidth",
            "3:250mbit",
            "--bandwidth",
            "1gbit",
            "--node-bandwidth",
            "1:100mbit",
            "--",
            "prog",
            "--node-bandwidth",
        ])
        .unwrap()
        .launch
        .network;
        let specs: Vec<NodeRate> = ["3:250mbit", "1:100mbit"]
            .map(|s| s.parse().unwrap())
            .into();
        assert_eq!(n.node_bandwidth, specs);
        assert_eq!(n.bandwidth, Some("1gbit".parse().unwrap()));
        for bad in ["1", "x:1gbit", "1:fast", "-1:1gbit", "1:1gb"] {
            let e = Cli::try_parse_from(["roam", "--nodes", "2", "--node-bandwidth", bad, "p"])
                .err()
                .unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert!(e.to_string().contains("--node-bandwidth"), "{e}");
        }

        // Refused before a namespace or a child exists (the program would fail differently).
        let args = LaunchArgs {
            nodes: 2,
            workers_per_node: None,
            latency_us: None,
            slow_node: Vec::new(),
            slow_scope: Scope::Process,
            balancer: None,
            metrics_addr: None,
            network: NetworkArgs::default(),
            membership: MembershipArgs::default(),
            restarts: RestartArgs::default(),
            program: vec!["/nonexistent/roam-test-program".into()],
        };
        let with = |specs: &[&str], profile: Option<Profile>| NetworkArgs {
            profile,
            node_bandwidth: specs.iter().map(|s| s.parse().unwrap()).collect(),
            ..NetworkArgs::default()
        };
        let e =
            run_with_network(&args, &with(&["2:1gbit"], None), io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("rank 2 is out of range"), "{e}");
        let twice = with(&["1:1gbit", "0:5mbit", "1:2gbit"], None);
        let e = run_with_network(&args, &twice, io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("names rank 1 twice"), "{e}");
        let loopback = with(&["1:1gbit"], Some(Profile::Loopback));
        let e = run_with_network(&args, &loopback, io::sink(), io::sink()).unwrap_err();
        assert!(
            e.to_string().contains("--node-bandwidth needs network"),
            "{e}"
        );
        // A valid spec gets as far as the program check.
        let e =
            run_with_network(&args, &with(&["1:1gbit"], None), io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("program not found"), "{e}");
    }

    #[test]
    fn slow_node_specs_are_parsed_and_checked_before_anything_starts() {
        let a = Cli::try_parse_from([
            "roam",
            "--nodes",
            "3",
            "--slow-node",
            "1:4",
            "--slow-node",
            "2:2.5@10-30",
            "--",
            "prog",
            "--slow-node",
        ])
        .unwrap()
        .launch;
        let specs: Vec<SlowNode> = ["1:4", "2:2.5@10-30"].map(|s| s.parse().unwrap()).into();
        assert_eq!(a.slow_node, specs);
        assert_eq!(a.program, ["prog", "--slow-node"]);
        let e = Cli::try_parse_from(["roam", "--nodes", "2", "--slow-node", "1:0", "p"])
            .err()
            .unwrap();
        assert!(e.to_string().contains("FACTOR must be in 1..=100"), "{e}");

        // Refused before a cgroup or a child exists (the program would fail differently).
        let mut args = LaunchArgs {
            nodes: 2,
            workers_per_node: None,
            latency_us: None,
            slow_node: vec!["2:4".parse().unwrap()],
            slow_scope: Scope::Process,
            balancer: None,
            metrics_addr: None,
            network: NetworkArgs::default(),
            membership: MembershipArgs::default(),
            restarts: RestartArgs::default(),
            program: vec!["/nonexistent/roam-test-program".into()],
        };
        let e = run_with_output(&args, io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("rank 2 is out of range"), "{e}");
        args.slow_node = ["1:4@0-10", "1:2@5"].map(|s| s.parse().unwrap()).into();
        let e = run_with_output(&args, io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
    }

    #[test]
    fn slow_scope_is_parsed_and_checked_before_anything_starts() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["roam", "--nodes", "3", "--slow-node", "1:4"];
            argv.extend_from_slice(extra);
            argv.extend(["--", "prog", "--slow-scope", "process"]);
            Cli::try_parse_from(argv).map(|c| c.launch)
        };
        // Default: the whole process, today's behaviour.
        let a = parse(&[]).unwrap();
        assert_eq!(a.slow_scope, Scope::Process);
        assert_eq!(a.program, ["prog", "--slow-scope", "process"]);
        // One scope for every spec, wherever the option stands.
        let a = parse(&["--slow-scope", "protocol", "--slow-node", "2:2@1-3"]).unwrap();
        assert_eq!(a.slow_scope, Scope::Protocol);
        assert_eq!(a.slow_node.len(), 2);
        assert_eq!(
            parse(&["--slow-scope=process"]).unwrap().slow_scope,
            Scope::Process
        );
        assert_eq!(
            parse(&["--slow-scope", "service"]).unwrap().slow_scope,
            Scope::Service
        );
        // The balancer switch takes on or off only.
        assert_eq!(
            parse(&["--balancer", "off"]).unwrap().balancer.as_deref(),
            Some("off")
        );
        assert!(parse(&["--balancer", "no"]).is_err());
        for bad in ["thread", "workers", ""] {
            let e = parse(&["--slow-scope", bad])
                .err()
                .unwrap_or_else(|| panic!("{bad:?} parsed"));
            let text = e.to_string();
            assert!(
                text.contains("--slow-scope") && text.contains("process, protocol"),
                "{text}"
            );
        }
        // The help names the scopes and says what each slows.
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        for words in [
            "--slow-scope <SCOPE>",
            "as if its machine were slow",
            "its worker threads at full speed",
            "no cgroup, no root",
            "--balancer <on|off>",
        ] {
            assert!(help.contains(words), "{words:?} missing from:\n{help}");
        }

        // Bad specs are refused before a cgroup or a child exists, whatever the scope.
        let mut args = LaunchArgs {
            nodes: 2,
            workers_per_node: None,
            latency_us: None,
            slow_node: vec!["2:4".parse().unwrap()],
            slow_scope: Scope::Protocol,
            balancer: None,
            metrics_addr: None,
            network: NetworkArgs::default(),
            membership: MembershipArgs::default(),
            restarts: RestartArgs::default(),
            program: vec!["/nonexistent/roam-test-program".into()],
        };
        let e = run_with_output(&args, io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("rank 2 is out of range"), "{e}");
        args.slow_node = ["1:4@0-10", "1:2@5"].map(|s| s.parse().unwrap()).into();
        let e = run_with_output(&args, io::sink(), io::sink()).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        // Without --slow-node the scope has nothing to apply to: no cgroup, no refusal.
        args.slow_node.clear();
        args.program = vec!["true".into()];
        assert_eq!(run_with_output(&args, io::sink(), io::sink()).unwrap(), 0);
    }

    #[test]
    fn pump_prefixes_splits_and_terminates_lines() {
        let sink = Mutex::new(Vec::new());
        let input: &[u8] = b"one\ntwo\n\nlast without newline";
        pump(input, b"[node 4] ", &sink);
        assert_eq!(
            String::from_utf8(sink.into_inner()).unwrap(),
            "[node 4] one\n[node 4] two\n[node 4] \n[node 4] last without newline\n"
        );

        let sink = Mutex::new(Vec::new());
        let long = vec![b'x'; MAX_LINE + 10];
        pump(&long[..], b"> ", &sink);
        let out = sink.into_inner();
        let lines: Vec<&[u8]> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), 2 + MAX_LINE);
        assert_eq!(lines[1], b"> xxxxxxxxxx");
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 128 + 9);
    }
}
