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
//! - Supervision (output relaying, the exit code, stopping the children, signals) is
//!   `launch_supervise.rs`'s, with its own invariants.
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
//!   quota it cannot change, makes a run that would have exited 0 exit 1. The schedule's
//!   changes and the removal of groups and namespaces are `launch_resources.rs`'s.
//! - Membership: `--join-at` and `--drain-at` start joining nodes and drain nodes during the
//!   run ([`launch_elastic`]); joiners are supervised like the nodes.
//! - Restarts: with `--max-restarts K` a run is a sequence of attempts, each a whole launch as
//!   above (namespaces and cgroups made and removed per attempt); after a node failure the
//!   next attempt resumes from the latest complete checkpoint ([`launch_restart`]).

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use parking_lot::Mutex;

use crate::cgroup::{Groups, ROAM_SLOW_TASKS, Scope};
use crate::cluster_env::{
    ROAM_CLUSTER_TOKEN, ROAM_COORDINATOR, ROAM_EMULATE_LATENCY_US, ROAM_NUM_NODES, ROAM_RANK,
    ROAM_WORKERS_PER_NODE,
};
use crate::netns::{
    self, Cluster, Network, ROAM_NETNS, ROAM_NETWORK_BANDWIDTH, ROAM_NETWORK_PROFILE,
};
use crate::rendezvous::MAX_NODES;
use crate::slow_node::{Schedule, Tracker};
use crate::slowing::{ROAM_SLOW_SERVICE, ServiceSlowdown};

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

#[path = "launch_args.rs"]
mod args;
pub use args::{LaunchArgs, NetworkArgs};
#[path = "launch_elastic.rs"]
pub mod launch_elastic;
pub use launch_elastic::{DrainAt, MembershipArgs, Secs};
#[path = "launch_restart.rs"]
pub mod launch_restart;
pub use launch_restart::RestartArgs;
#[path = "launch_supervise.rs"]
mod supervise;
pub use supervise::{GRACE, MAX_LINE};
use supervise::{Node, describe, notice, signals, spawn_pump, supervise, wait_for_output};
#[path = "launch_resources.rs"]
mod resources;
use resources::{apply_schedule, finish_cgroups, finish_network};

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

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
