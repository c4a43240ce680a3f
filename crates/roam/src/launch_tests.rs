//! Tests of `roam launch` that need no child process: every refusal (namespaces, bandwidth,
//! straggler specs and scopes, metrics ports) comes before anything is created.

use super::*;
use crate::netns::{NodeRate, Profile};
use crate::slow_node::SlowNode;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    launch: LaunchArgs,
}

/// `roam launch --nodes 2 -- PROGRAM`: everything else at its default.
fn two_nodes(program: &str) -> LaunchArgs {
    LaunchArgs {
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
        program: vec![program.into()],
    }
}

/// `args` (with `--slow-node 2:4` on two nodes) is refused for the rank out of range, and so
/// is `args` with two overlapping windows of node 1; `args` is left with the latter.
fn refuses_bad_slow_specs(args: &mut LaunchArgs) {
    let e = run_with_output(args, io::sink(), io::sink()).unwrap_err();
    assert!(e.to_string().contains("rank 2 is out of range"), "{e}");
    args.slow_node = ["1:4@0-10", "1:2@5"].map(|s| s.parse().unwrap()).into();
    let e = run_with_output(args, io::sink(), io::sink()).unwrap_err();
    assert!(e.to_string().contains("overlap"), "{e}");
}

#[test]
fn netns_refusals_come_before_any_child_starts() {
    let args = two_nodes("true");
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
    let args = two_nodes("/nonexistent/roam-test-program");
    let with = |specs: &[&str], profile: Option<Profile>| NetworkArgs {
        profile,
        node_bandwidth: specs.iter().map(|s| s.parse().unwrap()).collect(),
        ..NetworkArgs::default()
    };
    let e = run_with_network(&args, &with(&["2:1gbit"], None), io::sink(), io::sink()).unwrap_err();
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
    let e = run_with_network(&args, &with(&["1:1gbit"], None), io::sink(), io::sink()).unwrap_err();
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
        slow_node: vec!["2:4".parse().unwrap()],
        ..two_nodes("/nonexistent/roam-test-program")
    };
    refuses_bad_slow_specs(&mut args);
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
        slow_node: vec!["2:4".parse().unwrap()],
        slow_scope: Scope::Protocol,
        ..two_nodes("/nonexistent/roam-test-program")
    };
    refuses_bad_slow_specs(&mut args);
    // Without --slow-node the scope has nothing to apply to: no cgroup, no refusal.
    args.slow_node.clear();
    args.program = vec!["true".into()];
    assert_eq!(run_with_output(&args, io::sink(), io::sink()).unwrap(), 0);
}

#[test]
fn metrics_ports_are_checked_for_every_node_and_joiner() {
    // Two consecutive free ports; the second is then held, as another process would.
    let (base, taken) = loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        drop(first);
        if port < u16::MAX
            && let Ok(next) = std::net::TcpListener::bind(("127.0.0.1", port + 1))
        {
            break (port, next);
        }
    };
    let addr = format!("127.0.0.1:{base}");
    assert!(check_metrics_ports(Some(&addr), 1, 0, false).is_ok());
    let err = check_metrics_ports(Some(&addr), 2, 0, false).unwrap_err();
    let held = format!("127.0.0.1:{}", base + 1);
    assert!(
        err.to_string()
            .starts_with(&format!("node 1: metrics address {held} ")),
        "{err}"
    );
    let err = check_metrics_ports(Some(&addr), 1, 1, false).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("joiner 0 (slot 1): metrics address {held} ")),
        "{err}"
    );
    // In namespaces every node binds in its own: nothing to try from the launcher's.
    assert!(check_metrics_ports(Some(&addr), 2, 0, true).is_ok());
    // A bad base is refused either way, naming it.
    let err = check_metrics_ports(Some("127.0.0.1:0"), 2, 0, true).unwrap_err();
    assert!(err.to_string().contains("port 0"), "{err}");
    drop(taken);
}
