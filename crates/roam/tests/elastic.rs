//! Elastic membership with real processes: a 3-node cluster (2 workers each) pushes +1 to every
//! key of a set in rounds while a 4th node joins as a server and node 1 (whose workers finish
//! first) is drained through the coordinator's service; the survivors then barrier and rank 0
//! checks that every key holds exactly the number of rounds pushed (tallied in an extra key).
//!
//! The test binary runs itself as each node (`elastic_child`, selected by `ROAM_ELASTIC_ROLE`);
//! the parent synchronises on the lines the nodes print (`EV ...`) and tells nodes 0 and 2 when
//! to stop pushing on their stdin: no sleeps.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use roam::{Allocation, Config, NodeHandle, Partitioning};

const ROLE: &str = "ROAM_ELASTIC_ROLE";
const MODE: &str = "ROAM_ELASTIC_MODE";
const TOKEN: &str = "elastic-test-token";
/// Keys pushed in every round; key `KEYS` is the tally of rounds.
const KEYS: u64 = 256;
/// Keys per push.
const CHUNK: usize = 16;
/// Rounds of each of node 1's workers (it finishes first).
const NODE1_ROUNDS: u64 = 150;
/// Least rounds of each worker of nodes 0 and 2; they go on until told to stop.
const MIN_ROUNDS: u64 = 200;
const MAX_ROUNDS: u64 = 100_000;
const WORKERS: u32 = 2;

fn config(mode: &str) -> Config {
    let mut cfg = Config::new(KEYS + 1, 1);
    match mode {
        "classic" => cfg.allocation = Allocation::StaticHash,
        "lapse" => {
            cfg.allocation = Allocation::Dynamic;
            cfg.home = Partitioning::Range;
        }
        other => panic!("unknown mode {other}"),
    }
    cfg.rendezvous_timeout = Duration::from_secs(20);
    cfg
}

/// One round of a worker: +1 on every key, in chunks, each push waited for.
fn round(worker: &roam::Worker, first: u64) {
    let keys: Vec<u64> = (0..KEYS).map(|k| (k + first) % KEYS).collect();
    for chunk in keys.chunks(CHUNK) {
        let ones = vec![1.0f32; chunk.len()];
        worker
            .push(chunk, &ones)
            .expect("push issues")
            .wait()
            .expect("push completes");
    }
}

/// Runs one node when the test binary was started as a node; a no-op otherwise.
#[test]
fn elastic_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let mode = std::env::var(MODE).expect("mode");
    let cfg = config(&mode);
    if role == "joiner" {
        // Joins through ROAM_JOIN=1 and ROAM_COORDINATOR, as `ROAM_JOIN=1 roam train` does.
        let node = NodeHandle::start(cfg).expect("joiner starts");
        assert!(node.is_joined());
        assert!(node.workers().expect("no workers").is_empty());
        println!("EV JOINED {}", node.rank());
        node.shutdown().expect("joiner finishes cleanly");
        println!("EV EXIT joiner");
        return;
    }
    let node = NodeHandle::start(cfg).expect("member starts");
    let rank = node.rank();
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    std::thread::scope(|scope| {
        if rank != 1 {
            scope.spawn(|| {
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line).expect("stdin");
                stop.store(true, Ordering::Release);
            });
        }
        for worker in node.workers().expect("workers") {
            let (stop, rounds) = (&stop, &rounds);
            scope.spawn(move || {
                let mut done = 0;
                loop {
                    let enough = if rank == 1 {
                        done >= NODE1_ROUNDS
                    } else {
                        done >= MIN_ROUNDS && stop.load(Ordering::Acquire)
                    };
                    if enough || done >= MAX_ROUNDS {
                        break;
                    }
                    round(&worker, done * 7 + u64::from(worker.global_id()));
                    done += 1;
                    if done == 1 && worker.id() == 0 {
                        println!("EV PUSHING {rank}");
                    }
                }
                worker
                    .push(&[KEYS], &[done as f32])
                    .unwrap()
                    .wait()
                    .unwrap();
                rounds.fetch_add(done, Ordering::Relaxed);
                if rank != 1 {
                    worker.barrier().expect("survivors' barrier");
                    if rank == 0 && worker.id() == 0 {
                        let keys: Vec<u64> = (0..=KEYS).collect();
                        let mut out = vec![0.0f32; keys.len()];
                        worker.pull(&keys, &mut out).unwrap().wait().unwrap();
                        let tally = out[KEYS as usize];
                        let wrong: Vec<(u64, f32)> = (0..KEYS)
                            .filter(|&k| out[k as usize] != tally)
                            .map(|k| (k, out[k as usize]))
                            .take(10)
                            .collect();
                        assert!(
                            wrong.is_empty(),
                            "keys differ from the tally {tally}: {wrong:?}"
                        );
                        // The joined server holds buckets; the drained node none.
                        let dir = worker.directory();
                        let members: Vec<u32> = dir.members().iter().map(|n| n.0).collect();
                        assert_eq!(members, [0, 2, 3]);
                        assert_eq!(dir.buckets_of(roam::NodeId(1)).count(), 0);
                        let joined = dir.buckets_of(roam::NodeId(3)).count();
                        assert!(joined > 0, "the joined node got no bucket");
                        println!("EV BUCKETS {joined} of {}", dir.num_buckets());
                        println!("EV TALLY {tally}");
                    }
                }
            });
        }
    });
    println!("EV ROUNDS {rank} {}", rounds.load(Ordering::Relaxed));
    if rank == 1 {
        println!("EV WORKERS_DONE 1");
        node.wait_until_done().expect("drained");
        assert!(!node.is_member());
    }
    node.shutdown().expect("clean shutdown");
    println!("EV EXIT {rank}");
}

/// A node process; killed if the test fails.
struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(name: &str, envs: &[(&str, String)], events: &mpsc::Sender<(String, String)>) -> Proc {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "elastic_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    for var in [
        "ROAM_RANK",
        "ROAM_NUM_NODES",
        "ROAM_JOIN",
        "ROAM_WORKERS_PER_NODE",
    ] {
        if !envs.iter().any(|(k, _)| *k == var) {
            cmd.env_remove(var);
        }
    }
    let mut child = cmd.spawn().expect("spawn node");
    let stdout = child.stdout.take().unwrap();
    let (tx, who) = (events.clone(), name.to_owned());
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may print the test's name first on the same line.
            if let Some(at) = line.find("EV ") {
                let _ = tx.send((who.clone(), line[at + 3..].to_owned()));
            }
        }
        let _ = tx.send((who, "EOF".into()));
    });
    Proc {
        name: name.to_owned(),
        stdin: child.stdin.take(),
        child,
    }
}

/// Collected events, and a wait for one.
struct Events {
    rx: mpsc::Receiver<(String, String)>,
    seen: Vec<(String, String)>,
    deadline: Instant,
}

impl Events {
    fn wait(&mut self, who: &str, prefix: &str) -> String {
        loop {
            if let Some((_, ev)) = self
                .seen
                .iter()
                .find(|(w, e)| w == who && e.starts_with(prefix))
            {
                return ev.clone();
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((w, ev)) => {
                    assert!(
                        !(ev == "EOF" && w == who),
                        "{who} ended before printing {prefix:?}; seen {:?}",
                        self.seen
                    );
                    self.seen.push((w, ev));
                }
                Err(_) => panic!(
                    "timed out waiting for {who}: {prefix}; seen {:?}",
                    self.seen
                ),
            }
        }
    }
}

fn exit_ok(proc: &mut Proc) {
    let status = proc.child.wait().expect("wait");
    assert!(status.success(), "{} exited with {status}", proc.name);
}

fn join_and_drain(mode: &str) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let coordinator = format!("127.0.0.1:{port}");
    let (tx, rx) = mpsc::channel();
    let common = |extra: Vec<(&'static str, String)>| {
        let mut env = vec![
            (ROLE, "member".to_owned()),
            (MODE, mode.to_owned()),
            ("ROAM_COORDINATOR", coordinator.clone()),
            ("ROAM_CLUSTER_TOKEN", TOKEN.to_owned()),
        ];
        env.extend(extra);
        env
    };
    let mut members: Vec<Proc> = (0..3)
        .map(|r| {
            let env = common(vec![
                ("ROAM_RANK", r.to_string()),
                ("ROAM_NUM_NODES", "3".into()),
                ("ROAM_WORKERS_PER_NODE", WORKERS.to_string()),
            ]);
            spawn(&format!("node{r}"), &env, &tx)
        })
        .collect();
    let mut events = Events {
        rx,
        seen: Vec::new(),
        deadline: Instant::now() + Duration::from_secs(60),
    };
    let started = Instant::now();
    // Join while the members push.
    events.wait("node0", "PUSHING");
    let mut env = common(vec![("ROAM_JOIN", "1".into())]);
    env[0].1 = "joiner".into();
    let mut joiner = spawn("joiner", &env, &tx);
    let joined = events.wait("joiner", "JOINED");
    assert_eq!(joined, "JOINED 3", "the first joiner gets rank 3");
    // Drain node 1 once its workers are done, while nodes 0 and 2 still push.
    events.wait("node1", "WORKERS_DONE");
    let message =
        roam::elastic::request_drain(&coordinator, TOKEN.as_bytes(), 1, Duration::from_secs(30))
            .expect("node 1 drains");
    assert!(message.contains('1'), "{message}");
    events.wait("node1", "EXIT");
    exit_ok(&mut members[1]);
    // Draining the coordinator is refused with its reason.
    let refused =
        roam::elastic::request_drain(&coordinator, TOKEN.as_bytes(), 0, Duration::from_secs(30))
            .expect_err("the coordinator cannot be drained");
    assert!(refused.to_string().contains("coordinator"), "{refused}");
    for r in [0, 2] {
        let stdin = members[r].stdin.as_mut().unwrap();
        stdin.write_all(b"stop\n").unwrap();
        stdin.flush().unwrap();
    }
    let tally: f32 = events.wait("node0", "TALLY")["TALLY ".len()..]
        .parse()
        .unwrap();
    let mut rounds = 0.0;
    for r in 0..3 {
        let ev = events.wait(&format!("node{r}"), "ROUNDS");
        rounds += ev.rsplit(' ').next().unwrap().parse::<f32>().unwrap();
    }
    assert_eq!(tally, rounds, "the tally key holds every round");
    assert!(tally >= (2 * 2 * MIN_ROUNDS + 2 * NODE1_ROUNDS) as f32);
    for r in [0, 2] {
        events.wait(&format!("node{r}"), "EXIT");
        exit_ok(&mut members[r]);
    }
    events.wait("joiner", "EXIT");
    exit_ok(&mut joiner);
    let buckets = events.wait("node0", "BUCKETS");
    eprintln!(
        "{mode}: {tally} rounds per key in {:?}; the joined node holds {}",
        started.elapsed(),
        &buckets["BUCKETS ".len()..]
    );
}

#[test]
fn a_server_joins_and_a_node_drains_under_classic_allocation() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    join_and_drain("classic");
}

#[test]
fn a_server_joins_and_a_node_drains_under_lapse() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    join_and_drain("lapse");
}

/// In one process: a joiner with another key space is refused with the reason, garbage on the
/// join service and a wrong token leave the cluster serving, ranks are never reused, and a
/// joined node drained on a member's request (not the coordinator's) exits cleanly with every
/// update kept.
#[test]
fn a_mismatched_joiner_is_refused_and_a_joined_node_drains() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let coordinator = format!("127.0.0.1:{port}");
    let make = |num_keys: u64, rank: Option<u32>| {
        let mut cfg = Config::new(num_keys, 2);
        cfg.allocation = Allocation::StaticHash;
        cfg.cluster = roam::cluster_env::ClusterOverrides {
            rank,
            num_nodes: rank.map(|_| 2),
            coordinator: Some(coordinator.clone()),
        };
        cfg.token = Some(TOKEN.into());
        cfg.workers_per_node = Some(1);
        cfg.rendezvous_timeout = Duration::from_secs(10);
        cfg.join = rank.is_none();
        cfg
    };
    let nodes: Vec<NodeHandle> = std::thread::scope(|s| {
        let started: Vec<_> = (0..2)
            .map(|r| s.spawn(move || NodeHandle::start(make(100, Some(r))).expect("member")))
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Garbage after an authenticated join hello: the service drops it.
    let mut stream = std::net::TcpStream::connect(&coordinator).unwrap();
    roam::auth::connect_handshake(
        &mut stream,
        TOKEN.as_bytes(),
        u32::MAX,
        roam::auth::Purpose::Join,
    )
    .unwrap();
    stream.write_all(&[9u8; 19]).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 16];
    let read = std::io::Read::read(&mut stream, &mut buf);
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // A wrong token never gets a rank.
    let mut wrong = make(100, None);
    wrong.token = Some("not the token".into());
    let err = NodeHandle::start(wrong).err().expect("wrong token");
    assert!(matches!(err, roam::StartError::JoinService { .. }), "{err}");
    // Another key space: refused, and its rank (2) is not given again.
    let err = NodeHandle::start(make(200, None)).err().expect("refused");
    assert!(
        matches!(
            err,
            roam::StartError::JoinRefused {
                rank: 2,
                reason: roam_core::JoinRefusal::ConfigMismatch
            }
        ),
        "{err}"
    );
    let joined = NodeHandle::start(make(100, None)).expect("joins");
    assert_eq!(joined.rank(), 3);
    assert!(joined.workers().unwrap().is_empty());
    let serving = std::thread::spawn(move || joined.shutdown().map(drop));
    let w0 = nodes[0].worker(0).unwrap();
    let keys: Vec<u64> = (0..100).collect();
    for _ in 0..20 {
        w0.push(&keys, &[1.0; 200]).unwrap().wait().unwrap();
    }
    nodes[1]
        .drain(3)
        .expect("a member asks to drain the joined node");
    serving
        .join()
        .unwrap()
        .expect("the drained node exits cleanly");
    let err = nodes[1].drain(0).expect_err("the coordinator stays");
    assert!(err.to_string().contains("coordinator"), "{err}");
    let mut out = vec![0.0f32; 200];
    w0.pull(&keys, &mut out).unwrap().wait().unwrap();
    assert!(out.iter().all(|&v| v == 20.0), "{out:?}");
    drop(w0);
    let members: Vec<u32> = nodes[0].directory().members().iter().map(|n| n.0).collect();
    assert_eq!(members, [0, 1]);
    std::thread::scope(|s| {
        for node in nodes {
            s.spawn(move || node.shutdown().expect("clean shutdown"));
        }
    });
}
