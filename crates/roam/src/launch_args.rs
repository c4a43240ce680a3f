//! The command line of `roam launch`: [`LaunchArgs`] and its network options
//! ([`NetworkArgs`]), parsed by clap. What the options mean together, and the checks that
//! refuse a bad combination before anything starts, are in `launch.rs` and the modules it
//! names (`netns`, `slow_node`, `launch_elastic`, `launch_restart`).

use std::ffi::OsString;

use crate::cgroup::Scope;
use crate::netns::{NodeRate, Profile, Rate};
use crate::rendezvous::MAX_NODES;
use crate::slow_node::SlowNode;

use super::{MembershipArgs, RestartArgs};

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
}
