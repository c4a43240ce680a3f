//! The `roam` command: launcher, training jobs, benchmarks and self-checks.

use std::ffi::OsString;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use roam::{bench, check, launch};

mod plot;
mod suite;
mod timeline;
mod trace_plot;

#[derive(Parser)]
#[command(
    name = "roam",
    version,
    about = "roam: a parameter server whose parameters move to where they are used"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start N local node processes of a program, with the cluster environment set.
    Launch(launch::LaunchArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The embedded default job: `train mf --mode lapse` on the built-in synthetic matrix,
    /// launched on local node processes unless already inside a cluster; prints a line per
    /// epoch, then what ran and what to try next.
    Demo(DemoArgs),
    /// Train a model: matrix factorisation, knowledge-graph embeddings or word vectors.
    ///
    /// Rank 0 shows a progress bar per epoch on a terminal, one line per epoch (seconds,
    /// loss, quality, local accesses) and a summary at the end; off a terminal only the
    /// per-epoch lines. The machine-readable report: `--report FILE`, or `--json` on stdout.
    #[command(subcommand)]
    // Boxed: the apps' options (with the output options) make it the largest variant.
    Train(Box<TrainCommand>),
    /// Draw training reports (`roam train ... --report FILE`): loss, quality and seconds per
    /// epoch, several reports overlaid with a legend, into one PNG; or (`--trace`) an
    /// allocation trace: keys × time coloured by holder, and each node's local share.
    #[command(after_help = "Examples:\n  \
        roam launch --nodes 2 -- target/release/roam train mf --mode lapse --report lapse.json\n  \
        roam launch --nodes 2 -- target/release/roam train mf --mode classic --report classic.json\n  \
        roam plot lapse.json classic.json -o mf.png\n  \
        roam launch --nodes 2 -- target/release/roam train mf --mode lapse --trace-allocation trace.json\n  \
        roam plot --trace trace.json -o where.png")]
    Plot(plot::PlotArgs),
    /// End-to-end self-checks with exact expected results (run under `roam launch`).
    #[command(subcommand)]
    Check(check::CheckCommand),
    /// Add a server-only node to a running job (elastic membership).
    ///
    /// Runs the job's own command (e.g. `train mf --mode classic
    /// ...`, with the same arguments as its nodes) as a node that joins through the
    /// coordinator, hosts no workers, takes its share of the keys and serves until it is
    /// drained or the job ends. Same as running that command with ROAM_JOIN=1.
    #[command(
        after_help = "Example: roam join --coordinator 10.0.0.1:29500 -- train mf --mode classic\n\
        The token comes from --token or ROAM_CLUSTER_TOKEN, as for the job's nodes."
    )]
    Join(JoinArgs),
    /// Drain a node out of a running job: its keys move away, then it exits cleanly.
    ///
    /// Asks the coordinator (rank 0), which cannot itself be drained; a node with
    /// workers can be drained once they finished. Sending SIGUSR1 to a node process of
    /// `roam train`/`roam join` has it ask to drain itself.
    Drain(DrainArgs),
}

/// Where the coordinator's service is, and the cluster token.
#[derive(Args)]
struct ServiceArgs {
    /// The coordinator's address (`host:port`, rank 0's rendezvous address); default
    /// ROAM_COORDINATOR (or MASTER_ADDR/MASTER_PORT).
    #[arg(long)]
    coordinator: Option<String>,
    /// The cluster token; default ROAM_CLUSTER_TOKEN.
    #[arg(long)]
    token: Option<String>,
}

impl ServiceArgs {
    fn resolve(&self) -> anyhow::Result<(String, String)> {
        let overrides = roam::cluster_env::ClusterOverrides {
            coordinator: self.coordinator.clone(),
            ..Default::default()
        };
        let coordinator =
            roam::cluster_env::join_coordinator(&overrides, roam::cluster_env::process_lookup)?;
        let token = match &self.token {
            Some(t) => t.clone(),
            None => std::env::var(roam::cluster_env::ROAM_CLUSTER_TOKEN)
                .ok()
                .filter(|t| !t.trim().is_empty())
                .context("no cluster token: pass --token or set ROAM_CLUSTER_TOKEN")?,
        };
        Ok((coordinator, token))
    }
}

#[derive(Args)]
struct JoinArgs {
    #[command(flatten)]
    service: ServiceArgs,
    /// The job's command and arguments (after `--`), e.g. `train mf --mode classic`.
    #[arg(last = true, required = true, num_args = 1..)]
    job: Vec<OsString>,
}

#[derive(Args)]
struct DrainArgs {
    /// The rank of the node to drain.
    rank: u32,
    #[command(flatten)]
    service: ServiceArgs,
    /// Seconds to wait for the drain to finish.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

#[derive(Args)]
struct DemoArgs {
    /// Nodes to launch when not already inside a cluster.
    #[arg(long, default_value_t = 2)]
    nodes: u32,
    /// Worker threads per node when launching.
    #[arg(long, default_value_t = 2)]
    workers_per_node: u32,
}

/// What `roam demo` runs on every node.
const DEMO_JOB: [&str; 4] = ["train", "mf", "--mode", "lapse"];

#[derive(Subcommand)]
enum TrainCommand {
    /// Matrix factorisation by DSGD with parameter blocking.
    Mf(roam_apps::mf::Args),
    /// Knowledge-graph embeddings (ComplEx, RESCAL).
    Kge(roam_apps::kge::Args),
    /// Skip-gram word vectors with negative sampling.
    W2v(roam_apps::w2v::Args),
    /// Click-through-rate prediction: sparse id fields, embeddings and an MLP.
    Ctr(roam_apps::ctr::Args),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Local and remote pull/push throughput and latency (run under `roam launch`).
    Ops(bench::OpsArgs),
    /// The cost of synchronising replicated keys: bytes per round and sync latency (run under
    /// `roam launch`).
    Replicas(roam::bench_replicas::ReplicasArgs),
    /// The physical reference: one thread copying random 400-byte rows of a 1M-row array.
    RowCopy,
    /// The training workloads in every mode, node count and network profile, repeated:
    /// results.json, summary tables and PNG figures under bench-results/.
    Suite(suite::SuiteArgs),
    /// The load balancer's timeline figure (PNG): seconds per epoch over the training, per
    /// configuration, from the JSON of `scripts/balancer-bench.py --timeline`.
    Timeline(timeline::TimelineArgs),
}

/// Keeps large buffers (frames of replica values and relocations, up to megabytes each) in
/// glibc's heap instead of a fresh `mmap` per allocation: every such mapping costs a page fault
/// and a zeroed page per 4 KiB touched, which was a tenth of a replicated run's CPU.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_large_allocations_in_the_heap() {
    // SAFETY: `mallopt` only changes allocator parameters; called before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_large_allocations_in_the_heap() {}

fn main() -> anyhow::Result<()> {
    keep_large_allocations_in_the_heap();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let command = Cli::parse().command;
    if matches!(command, Command::Train(_) | Command::Join(_)) {
        // SIGUSR1 asks the coordinator to drain this node (elastic membership).
        roam::elastic::drain_on_sigusr1().context("installing the SIGUSR1 handler")?;
    }
    let code = run(command)?;
    std::process::exit(code);
}

fn run(command: Command) -> anyhow::Result<i32> {
    Ok(match command {
        Command::Launch(args) => launch::run(&args)?,
        Command::Bench(BenchCommand::Ops(args)) => bench::run_ops(&args).map(|()| 0)?,
        Command::Bench(BenchCommand::Replicas(args)) => {
            roam::bench_replicas::run_replicas(&args).map(|()| 0)?
        }
        Command::Bench(BenchCommand::RowCopy) => {
            println!(
                "{}",
                serde_json::json!({ "reference_row_copy_rows_per_s": bench::row_copy_reference() })
            );
            0
        }
        Command::Bench(BenchCommand::Suite(args)) => suite::run(&args)?,
        Command::Bench(BenchCommand::Timeline(args)) => timeline::run(&args)?,
        Command::Demo(args) => demo(&args)?,
        Command::Train(train) => match *train {
            TrainCommand::Mf(args) => {
                plot::after_training(&args.output, roam_apps::mf::run(&args)?)?
            }
            TrainCommand::Kge(args) => {
                plot::after_training(&args.output, roam_apps::kge::run(&args)?)?
            }
            TrainCommand::W2v(args) => {
                plot::after_training(&args.output, roam_apps::w2v::run(&args)?)?
            }
            TrainCommand::Ctr(args) => {
                plot::after_training(&args.output, roam_apps::ctr::run(&args)?)?
            }
        },
        Command::Plot(args) => plot::run(&args)?,
        Command::Check(command) => check::run(&command).map(|()| 0)?,
        Command::Join(args) => join(args)?,
        Command::Drain(args) => drain(&args)?,
    })
}

/// `roam join`: runs the job's command here as a joining node.
fn join(args: JoinArgs) -> anyhow::Result<i32> {
    let (coordinator, token) = args.service.resolve()?;
    let job = Cli::try_parse_from(std::iter::once(OsString::from("roam")).chain(args.job))?;
    anyhow::ensure!(
        matches!(job.command, Command::Train(_)),
        "roam join runs a training job (`train mf|kge|w2v|ctr ...`)"
    );
    // SAFETY: no other thread runs yet (the node starts in `run`), and nothing else reads or
    // writes the environment concurrently.
    unsafe {
        std::env::set_var(roam::cluster_env::ROAM_JOIN, "1");
        std::env::set_var(roam::cluster_env::ROAM_COORDINATOR, coordinator);
        std::env::set_var(roam::cluster_env::ROAM_CLUSTER_TOKEN, token);
    }
    run(job.command)
}

/// `roam drain RANK`: asks the coordinator's service to drain a node and prints the outcome.
fn drain(args: &DrainArgs) -> anyhow::Result<i32> {
    let (coordinator, token) = args.service.resolve()?;
    let timeout = std::time::Duration::from_secs(args.timeout);
    let message = roam::elastic::request_drain(&coordinator, token.as_bytes(), args.rank, timeout)?;
    println!("{message}");
    Ok(0)
}

/// Runs [`DEMO_JOB`] here if this process is a node of a cluster, else launches it; then says
/// in two lines what ran and what to try next.
fn demo(args: &DemoArgs) -> anyhow::Result<i32> {
    let exe = std::env::current_exe().context("locating the roam binary")?;
    if std::env::var_os("ROAM_NUM_NODES").is_some() || args.nodes <= 1 {
        let job = Cli::try_parse_from(std::iter::once("roam").chain(DEMO_JOB))?;
        let code = run(job.command)?;
        // Inside a cluster every node runs this: only a single process speaks for the run.
        if std::env::var_os("ROAM_NUM_NODES").is_none() {
            println!("{}", demo_epilogue(&exe, 1, args.workers_per_node));
        }
        return Ok(code);
    }
    let program = std::iter::once(exe.clone().into_os_string())
        .chain(DEMO_JOB.iter().map(OsString::from))
        .collect();
    let code = launch::run(&launch::LaunchArgs {
        nodes: args.nodes,
        workers_per_node: Some(args.workers_per_node),
        latency_us: None,
        slow_node: Vec::new(),
        slow_scope: Default::default(),
        balancer: None,
        metrics_addr: None,
        network: Default::default(),
        membership: Default::default(),
        restarts: Default::default(),
        program,
    })?;
    if code == 0 {
        println!("{}", demo_epilogue(&exe, args.nodes, args.workers_per_node));
    }
    Ok(code)
}

/// The demo's last two lines: what ran (nodes, mode, data) and what to try next.
fn demo_epilogue(exe: &std::path::Path, nodes: u32, workers: u32) -> String {
    let exe = exe.display();
    let data = roam_apps::mf::synthetic::Spec::EMBEDDED;
    format!(
        "ran: matrix factorisation (train mf) in lapse mode (keys move to the node that uses them) \
         on {nodes} local node process(es) × {workers} worker(s), on the embedded synthetic matrix ({data})\n\
         next: compare with a static parameter server: {exe} launch --nodes {nodes} --workers-per-node {workers} \
         -- {exe} train mf --mode classic --report classic.json (and --mode lapse --report lapse.json), \
         then {exe} plot lapse.json classic.json -o mf.png; kge and w2v: {exe} train --help"
    )
}
