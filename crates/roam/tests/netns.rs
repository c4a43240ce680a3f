//! Integration tests of `roam launch --netns` with small shell programs as nodes.
//!
//! They need root and working network namespaces; without them each test prints why it is
//! skipped and passes. Traffic stays inside the namespaces the runs create (10.77.0.0/16 behind
//! their own bridge). The tests run one at a time: one of them signals the whole test process,
//! which every launch in progress would forward to its own children.

mod common;

use common::Capture;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use roam::launch::{LaunchArgs, NetworkArgs, run_with_network};
use roam::netns::{self, Cluster, Profile};

/// Serializes the tests of this file and checks that namespaces are usable; `None` (after
/// printing the reason) means skip.
fn setup(test: &str) -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping {test}: network namespaces need root");
        return None;
    }
    match netns::preflight(true).and_then(|tools| tools.probe()) {
        Ok(()) => Some(guard),
        Err(e) => {
            eprintln!("skipping {test}: {e:#}");
            None
        }
    }
}

fn sh(nodes: u32, script: &str) -> LaunchArgs {
    LaunchArgs {
        nodes,
        workers_per_node: None,
        latency_us: None,
        slow_node: Vec::new(),
        slow_scope: Default::default(),
        balancer: None,
        metrics_addr: None,
        network: NetworkArgs::default(),
        membership: Default::default(),
        restarts: Default::default(),
        program: vec!["sh".into(), "-c".into(), script.into()],
    }
}

fn on(netns: bool, profile: Option<Profile>) -> NetworkArgs {
    NetworkArgs {
        netns,
        profile,
        bandwidth: None,
        node_bandwidth: Vec::new(),
    }
}

/// Runs the launcher, returning (exit code, stdout, stderr).
fn launch(args: &LaunchArgs, network: &NetworkArgs) -> (i32, String, String) {
    let (out, err) = (Capture::default(), Capture::default());
    let code = run_with_network(args, network, out.clone(), err.clone()).unwrap();
    (code, out.text(), err.text())
}

/// The `key=value` fields of every `[node R] ...` line, as (rank, key, value).
fn fields(out: &str) -> Vec<(u32, String, String)> {
    let mut v = Vec::new();
    for line in out.lines() {
        let Some((rank, rest)) = line.strip_prefix("[node ").and_then(|l| l.split_once("] "))
        else {
            continue;
        };
        let rank: u32 = rank.parse().unwrap();
        for word in rest.split_whitespace() {
            if let Some((k, val)) = word.split_once('=') {
                v.push((rank, k.to_owned(), val.to_owned()));
            }
        }
    }
    v
}

fn values(out: &str, key: &str) -> Vec<String> {
    fields(out)
        .into_iter()
        .filter(|(_, k, _)| k == key)
        .map(|(_, _, v)| v)
        .collect()
}

/// The namespaces of a run, from the node namespaces its children reported.
fn run_namespaces(node_namespaces: &[String]) -> BTreeSet<String> {
    let mut all: BTreeSet<String> = node_namespaces.iter().cloned().collect();
    for ns in node_namespaces {
        let (prefix, _) = ns.rsplit_once("-n").unwrap();
        all.insert(format!("{prefix}-sw"));
    }
    all
}

fn assert_gone(namespaces: &BTreeSet<String>) {
    assert!(!namespaces.is_empty());
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for ns in namespaces {
        assert!(
            !Path::new("/run/netns").join(ns).exists(),
            "{ns} still exists"
        );
        assert!(
            !listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns)),
            "{ns} still listed:\n{listed}"
        );
    }
}

#[test]
fn two_nodes_get_distinct_addresses_and_reach_the_coordinator() {
    let Some(_serial) = setup("two_nodes_get_distinct_addresses_and_reach_the_coordinator") else {
        return;
    };
    // A refused connection proves the SYN reached the coordinator's address and its RST came
    // back; an address nobody has on the bridge gives no answer at all.
    let script = r#"
        coord_ip=${ROAM_COORDINATOR%:*}
        addr=$(ip -4 -o addr show dev roam0 | tr -s ' ' | cut -d' ' -f4)
        routes=$(ip -4 route show | tr ' ' '_' | tr '\n' ';')
        links=$(ip -o link show | cut -d: -f2 | tr -d ' ' | sort | tr '\n' ',')
        reach=$(bash -c "exec 3<>/dev/tcp/$coord_ip/1" 2>&1 | grep -q refused && echo yes || echo no)
        echo "ns=$ROAM_NETNS addr=$addr coord=$ROAM_COORDINATOR reach=$reach profile=$ROAM_NETWORK_PROFILE links=$links routes=$routes"
        if [ "$ROAM_RANK" = 1 ]; then
            nobody=$(timeout 2 bash -c "exec 3<>/dev/tcp/10.77.0.99/1" 2>&1 | grep -q refused && echo yes || echo no)
            echo "nobody=$nobody"
        fi
    "#;
    let (code, out, err) = launch(&sh(2, script), &on(true, None));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("[launch] profile custom: unshaped links"),
        "{err}"
    );

    let addrs: BTreeSet<String> = values(&out, "addr").into_iter().collect();
    assert_eq!(
        addrs,
        BTreeSet::from(["10.77.0.1/16".to_owned(), "10.77.0.2/16".to_owned()]),
        "{out}"
    );
    assert_eq!(values(&out, "coord"), ["10.77.0.1:29500"; 2], "{out}");
    assert_eq!(values(&out, "reach"), ["yes", "yes"], "{out}");
    assert_eq!(values(&out, "nobody"), ["no"], "{out}");
    assert_eq!(values(&out, "profile"), ["custom", "custom"], "{out}");
    // Each node sees only its loopback and its link, and routes only the run's subnet.
    for links in values(&out, "links") {
        let names: Vec<&str> = links
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| l.split('@').next().unwrap())
            .collect();
        assert_eq!(names, ["lo", "roam0"], "{out}");
    }
    for routes in values(&out, "routes") {
        assert!(routes.starts_with("10.77.0.0/16_dev_roam0"), "{routes}");
        assert!(!routes.contains("default"), "{routes}");
    }
    let namespaces: Vec<String> = values(&out, "ns");
    assert_eq!(namespaces.len(), 2);
    assert_ne!(namespaces[0], namespaces[1]);
    assert_gone(&run_namespaces(&namespaces));
}

#[test]
fn namespaces_are_gone_after_success_and_after_a_failing_child() {
    let Some(_serial) = setup("namespaces_are_gone_after_success_and_after_a_failing_child") else {
        return;
    };
    let (code, out, err) = launch(&sh(3, r#"echo "ns=$ROAM_NETNS""#), &on(true, None));
    assert_eq!(code, 0, "{err}");
    let ok = run_namespaces(&values(&out, "ns"));
    assert_eq!(ok.len(), 4, "three nodes and the switch: {ok:?}");
    assert_gone(&ok);

    // Node 1 fails; node 0 left a process in its namespace that escaped its process group.
    let script = r#"
        echo "ns=$ROAM_NETNS"
        if [ "$ROAM_RANK" = 0 ]; then
            setsid sleep 60 >/dev/null 2>&1 < /dev/null &
            echo "leftover=$!"
        fi
        if [ "$ROAM_RANK" = 1 ]; then sleep 0.2; exit 3; fi
        sleep 60
    "#;
    let start = Instant::now();
    let (code, out, err) = launch(&sh(2, script), &on(true, None));
    assert_eq!(code, 3, "stdout:\n{out}\nstderr:\n{err}");
    assert!(start.elapsed() < Duration::from_secs(15));
    assert!(err.contains("node 1 exited with code 3"), "{err}");
    let failed = run_namespaces(&values(&out, "ns"));
    assert_eq!(failed.len(), 3, "{out}");
    assert!(failed.is_disjoint(&ok), "each run has its own names");
    assert_gone(&failed);
    let leftover = &values(&out, "leftover")[0];
    let proc_dir = Path::new("/proc").join(leftover);
    let deadline = Instant::now() + Duration::from_secs(5);
    while proc_dir.exists()
        && !fs::read_to_string(proc_dir.join("stat")).is_ok_and(|s| s.contains(") Z "))
    {
        assert!(
            Instant::now() < deadline,
            "process {leftover} left in a deleted namespace still runs"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn profile_1gbe_shapes_both_ends_of_every_link() {
    let Some(_serial) = setup("profile_1gbe_shapes_both_ends_of_every_link") else {
        return;
    };
    let script = r#"
        sw=${ROAM_NETNS%-n*}-sw
        node=$(tc qdisc show dev roam0 | tr ' ' '_')
        port=$(tc -n "$sw" qdisc show dev "n$ROAM_RANK" | tr ' ' '_')
        echo "node=$node port=$port lat=$ROAM_EMULATE_LATENCY_US bw=$ROAM_NETWORK_BANDWIDTH profile=$ROAM_NETWORK_PROFILE ns=$ROAM_NETNS"
    "#;
    let (code, out, err) = launch(&sh(2, script), &on(false, Some(Profile::OneGbe)));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("profile 1gbe: 1gbit per link and direction, 100 µs one-way latency"),
        "{err}"
    );
    for key in ["node", "port"] {
        let qdiscs = values(&out, key);
        assert_eq!(qdiscs.len(), 2, "{out}");
        for q in qdiscs {
            assert!(q.starts_with("qdisc_tbf_"), "{key}: {q}");
            assert!(q.contains("_rate_1Gbit_"), "{key}: {q}");
        }
    }
    assert_eq!(values(&out, "lat"), ["100", "100"], "{out}");
    assert_eq!(values(&out, "bw"), ["1gbit", "1gbit"], "{out}");
    assert_eq!(values(&out, "profile"), ["1gbe", "1gbe"], "{out}");
    assert_gone(&run_namespaces(&values(&out, "ns")));

    // A custom bandwidth and a latency override.
    let network = NetworkArgs {
        bandwidth: Some("250mbit".parse().unwrap()),
        ..on(false, None)
    };
    let mut args = sh(1, script);
    args.latency_us = Some(7);
    let (code, out, err) = launch(&args, &network);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(values(&out, "node")[0].contains("_rate_250Mbit_"), "{out}");
    assert_eq!(values(&out, "lat"), ["7"]);
    assert_eq!(values(&out, "profile"), ["custom"]);
    assert_gone(&run_namespaces(&values(&out, "ns")));
}

#[test]
fn node_bandwidth_shapes_only_that_nodes_link() {
    let Some(_serial) = setup("node_bandwidth_shapes_only_that_nodes_link") else {
        return;
    };
    let script = r#"
        sw=${ROAM_NETNS%-n*}-sw
        node=$(tc qdisc show dev roam0 | tr ' ' '_')
        port=$(tc -n "$sw" qdisc show dev "n$ROAM_RANK" | tr ' ' '_')
        echo "node=$node port=$port bw=${ROAM_NETWORK_BANDWIDTH:-none} ns=$ROAM_NETNS"
    "#;
    // The value of `key` that node `rank` printed.
    let of = |out: &str, rank: u32, key: &str| -> String {
        let v: Vec<String> = fields(out)
            .into_iter()
            .filter(|(r, k, _)| *r == rank && k == key)
            .map(|(_, _, v)| v)
            .collect();
        assert_eq!(v.len(), 1, "{key} of node {rank} in {out}");
        v[0].clone()
    };

    // Alone: only node 1's link is shaped, both ends; node 0's has no token bucket.
    let network = NetworkArgs {
        node_bandwidth: vec!["1:100mbit".parse().unwrap()],
        ..on(false, None)
    };
    let (code, out, err) = launch(&sh(2, script), &network);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("[launch] profile custom: unshaped links except node 1 at 100mbit"),
        "{err}"
    );
    assert!(
        err.contains("tbf each way only on the links of n1 (100mbit)"),
        "{err}"
    );
    for key in ["node", "port"] {
        let shaped = of(&out, 1, key);
        assert!(shaped.starts_with("qdisc_tbf_"), "{key}: {shaped}");
        assert!(shaped.contains("_rate_100Mbit_"), "{key}: {shaped}");
        let plain = of(&out, 0, key);
        assert!(!plain.contains("tbf"), "{key}: {plain}");
    }
    assert_eq!(
        (of(&out, 0, "bw"), of(&out, 1, "bw")),
        ("none".into(), "100mbit".into())
    );
    assert_gone(&run_namespaces(&values(&out, "ns")));

    // Over a common rate: node 0's link gets its own.
    let network = NetworkArgs {
        bandwidth: Some("1gbit".parse().unwrap()),
        node_bandwidth: vec!["0:250mbit".parse().unwrap()],
        ..on(false, None)
    };
    let (code, out, err) = launch(&sh(2, script), &network);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("1gbit per link and direction, node 0 at 250mbit"),
        "{err}"
    );
    for (rank, rate) in [(0, "_rate_250Mbit_"), (1, "_rate_1Gbit_")] {
        for key in ["node", "port"] {
            let q = of(&out, rank, key);
            assert!(
                q.starts_with("qdisc_tbf_") && q.contains(rate),
                "{key}: {q}"
            );
        }
    }
    assert_eq!(
        (of(&out, 0, "bw"), of(&out, 1, "bw")),
        ("250mbit".into(), "1gbit".into())
    );
    assert_gone(&run_namespaces(&values(&out, "ns")));
}

#[test]
fn sigterm_to_the_launcher_stops_the_nodes_and_removes_the_namespaces() {
    let Some(_serial) = setup("sigterm_to_the_launcher_stops_the_nodes_and_removes_the_namespaces")
    else {
        return;
    };
    let script = r#"trap 'echo "stopping $ROAM_RANK"; exit 0' TERM; echo "ns=$ROAM_NETNS ready"; sleep 60 & wait"#;
    let (out, err) = (Capture::default(), Capture::default());
    let runner = {
        let (out, err) = (out.clone(), err.clone());
        thread::spawn(move || run_with_network(&sh(2, script), &on(true, None), out, err).unwrap())
    };
    let start = Instant::now();
    while out.text().matches("ready").count() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "nodes never got ready: {}",
            err.text()
        );
        thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill has no memory-safety preconditions. The launcher's handler is installed
    // (its children are running), so this does not terminate the test process.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
    let code = runner.join().unwrap();
    let (out, err) = (out.text(), err.text());
    assert_eq!(code, 128 + libc::SIGTERM, "stderr: {err}");
    assert!(out.contains("[node 0] stopping 0"), "{out}");
    assert!(out.contains("[node 1] stopping 1"), "{out}");
    assert_gone(&run_namespaces(&values(&out, "ns")));
}

#[test]
fn a_dropped_cluster_removes_its_namespaces_even_when_panicking() {
    let Some(_serial) = setup("a_dropped_cluster_removes_its_namespaces_even_when_panicking")
    else {
        return;
    };
    let tools = netns::preflight(true).unwrap();
    let names = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = Arc::clone(&names);
    let panicked = std::panic::catch_unwind(move || {
        let cluster = Cluster::create(tools, 2, Some("1gbit".parse().unwrap())).unwrap();
        let mut n = seen.lock().unwrap();
        n.insert(cluster.switch_namespace());
        n.insert(cluster.node_namespace(0));
        n.insert(cluster.node_namespace(1));
        for ns in n.iter() {
            assert!(Path::new("/run/netns").join(ns).exists(), "{ns}");
        }
        drop(n);
        panic!("launcher bug");
    });
    assert!(panicked.is_err());
    assert_gone(&names.lock().unwrap());
}

#[test]
fn namespaces_of_a_launcher_that_died_are_removed_by_the_next_run() {
    let Some(_serial) = setup("namespaces_of_a_launcher_that_died_are_removed_by_the_next_run")
    else {
        return;
    };
    // A pid that certainly ran and is gone now (reaped below), standing in for a SIGKILLed
    // launcher.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = [format!("roam-{dead}-0-sw"), format!("roam-{dead}-0-n0")];
    for ns in &stale {
        let status = Command::new("ip")
            .args(["netns", "add", ns])
            .status()
            .unwrap();
        assert!(status.success(), "creating {ns}");
    }
    // One of a live launcher (this process) must survive.
    let live = format!("roam-{}-999999-sw", std::process::id());
    assert!(
        Command::new("ip")
            .args(["netns", "add", &live])
            .status()
            .unwrap()
            .success()
    );

    let (code, out, err) = launch(&sh(1, r#"echo "ns=$ROAM_NETNS""#), &on(true, None));
    let live_survived = Path::new("/run/netns").join(&live).exists();
    let _ = Command::new("ip").args(["netns", "del", &live]).status();
    assert_eq!(code, 0, "{err}");
    let removed = err
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "[launch] removed network namespaces left by launchers that no longer run: ",
            )
        })
        .unwrap_or_else(|| panic!("no removal notice in {err}"));
    for ns in &stale {
        assert!(removed.split(' ').any(|r| r == ns), "{ns} not in {removed}");
    }
    assert!(live_survived && !err.contains(&live), "{err}");
    assert_gone(&stale.iter().cloned().collect());
    assert_gone(&run_namespaces(&values(&out, "ns")));
}
