//! The `roam` command: launcher, benchmarks and the embedded demo job.

use clap::{Parser, Subcommand};
use roam::{bench, check, demo, launch};

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
    /// The embedded default job: a short distributed matrix factorisation on planted data.
    Demo(demo::DemoArgs),
    /// Train a model: matrix factorisation, knowledge-graph embeddings or word vectors.
    #[command(subcommand)]
    Train(TrainCommand),
    /// End-to-end self-checks with exact expected results (run under `roam launch`).
    #[command(subcommand)]
    Check(check::CheckCommand),
}

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
    /// The physical reference: one thread copying random 400-byte rows of a 1M-row array.
    RowCopy,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Launch(args) => launch::run(&args)?,
        Command::Bench(BenchCommand::Ops(args)) => bench::run_ops(&args).map(|()| 0)?,
        Command::Bench(BenchCommand::RowCopy) => {
            println!(
                "{}",
                serde_json::json!({ "reference_row_copy_rows_per_s": bench::row_copy_reference() })
            );
            0
        }
        Command::Demo(args) => demo::run(&args)?,
        Command::Train(TrainCommand::Mf(args)) => roam_apps::mf::run(&args).map(|()| 0)?,
        Command::Train(TrainCommand::Kge(args)) => roam_apps::kge::run(&args).map(|()| 0)?,
        Command::Train(TrainCommand::W2v(args)) => roam_apps::w2v::run(&args).map(|()| 0)?,
        Command::Check(command) => check::run(&command).map(|()| 0)?,
    };
    std::process::exit(code);
}
