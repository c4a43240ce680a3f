//! The `roam` command: launcher, training jobs, benchmarks and self-checks.

use std::ffi::OsString;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use roam::{bench, check, launch};

mod suite;
mod timeline;

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
    /// launched on local node processes unless already inside a cluster.
    Demo(DemoArgs),
    /// Train a model: matrix factorisation, knowledge-graph embeddings or word vectors.
    #[command(subcommand)]
    Train(TrainCommand),
    /// End-to-end self-checks with exact expected results (run under `roam launch`).
    #[command(subcommand)]
    Check(check::CheckCommand),
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

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let code = run(Cli::parse().command)?;
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
        Command::Train(TrainCommand::Mf(args)) => roam_apps::mf::run(&args).map(|()| 0)?,
        Command::Train(TrainCommand::Kge(args)) => roam_apps::kge::run(&args).map(|()| 0)?,
        Command::Train(TrainCommand::W2v(args)) => roam_apps::w2v::run(&args).map(|()| 0)?,
        Command::Check(command) => check::run(&command).map(|()| 0)?,
    })
}

/// Runs [`DEMO_JOB`] here if this process is a node of a cluster, else launches it.
fn demo(args: &DemoArgs) -> anyhow::Result<i32> {
    if std::env::var_os("ROAM_NUM_NODES").is_some() || args.nodes <= 1 {
        let job = Cli::try_parse_from(std::iter::once("roam").chain(DEMO_JOB))?;
        return run(job.command);
    }
    let exe = std::env::current_exe().context("locating the roam binary")?;
    let program = std::iter::once(exe.into_os_string())
        .chain(DEMO_JOB.iter().map(OsString::from))
        .collect();
    launch::run(&launch::LaunchArgs {
        nodes: args.nodes,
        workers_per_node: Some(args.workers_per_node),
        latency_us: None,
        slow_node: Vec::new(),
        slow_scope: Default::default(),
        balancer: None,
        network: Default::default(),
        program,
    })
}
