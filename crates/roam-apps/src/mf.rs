//! The `mf` workload (being written).

/// Options of `roam train mf`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Allocation mode.
    #[arg(long, value_enum)]
    pub mode: crate::common::Mode,
}

/// Trains on this node (rank 0 prints the report).
pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("roam train mf is not implemented yet")
}
