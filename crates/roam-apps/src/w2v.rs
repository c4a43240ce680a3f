//! The `w2v` workload (being written).

/// Options of `roam train w2v`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Allocation mode.
    #[arg(long, value_enum)]
    pub mode: crate::common::Mode,
}

/// Trains on this node (rank 0 prints the report).
pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("roam train w2v is not implemented yet")
}
