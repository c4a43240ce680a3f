//! The NuPS modes of `mf` (`nups`, `nups-replicate-only`): which columns are replicated on
//! every node, and the replication figures of the report.
//!
//! As in NuPS's MF app, the hot keys are columns (H factors) ranked by their number of training
//! cells (NuPS reads them from `train.mmc.bin.colfreqs.csv`): the columns with at least
//! `--replicate-alpha` (default 100) times the mean column's cells
//! ([`roam::choose::above_mean`]), or the `--replicate-top N` columns with the most cells
//! ([`roam::choose::top_n`]). Rows are never replicated: in DSGD a row block belongs to one
//! worker for the whole epoch.
//!
//! Why 100: NuPS's untuned heuristic replicated 755 columns of its 1 M-column Zipf(1.1)
//! matrix (10 M Zipf(1.1) rows, 1 B distinct cells). In that matrix about 760 columns have at
//! least 100× the mean count and about 107,000 at least 1× (docs/workloads-mf.md).
//!
//! Every node loads or generates the whole matrix before it keeps its own share, so all nodes
//! count the same cells and choose the same set; [`fingerprint`] lets the job check that.

use anyhow::ensure;
use roam::{Key, NodeStats};
use serde_json::json;

use super::data::Ratings;

/// NuPS's untuned threshold: replicate keys accessed at least this many times as often as the
/// mean key.
pub const NUPS_ALPHA: f64 = 100.0;

/// Options of the NuPS modes (ignored in the other modes).
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// nups modes: replicate the columns with at least F times the mean column's number of
    /// training cells.
    #[arg(long, default_value_t = NUPS_ALPHA)]
    pub replicate_alpha: f64,
    /// nups modes: replicate the N columns with the most training cells instead.
    #[arg(long, conflicts_with = "replicate_alpha")]
    pub replicate_top: Option<usize>,
    /// nups modes: time between background replica syncs, in milliseconds (default: roam's,
    /// 10 ms).
    #[arg(long)]
    pub sync_every_ms: Option<f64>,
}

impl Options {
    /// Checks the values.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            self.replicate_alpha.is_finite() && self.replicate_alpha >= 0.0,
            "--replicate-alpha must be a finite number >= 0, got {}",
            self.replicate_alpha
        );
        if let Some(ms) = self.sync_every_ms {
            ensure!(
                ms.is_finite() && ms > 0.0 && ms <= 3.6e6,
                "--sync-every-ms must be in (0, 3600000], got {ms}"
            );
        }
        Ok(())
    }

    /// The sync period to configure, if not roam's default.
    pub fn sync_every(&self) -> Option<std::time::Duration> {
        self.sync_every_ms
            .map(|ms| std::time::Duration::from_secs_f64(ms / 1e3))
    }
}

/// The replicated columns of a job (none outside the NuPS modes).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Replicated keys (`rows + column`), sorted.
    pub keys: Vec<Key>,
    /// Share of the training accesses (a row and a column per cell and epoch) that go to
    /// replicated keys.
    pub access_fraction: f64,
}

impl Plan {
    /// The columns to replicate for `ratings` under `opts`.
    pub fn choose(ratings: &Ratings, opts: &Options) -> Self {
        let counts = column_counts(ratings);
        let indexed = counts.iter().enumerate().map(|(j, &c)| (j as Key, c));
        let columns = match opts.replicate_top {
            Some(n) => roam::choose::top_n(indexed, n),
            None => roam::choose::above_mean(indexed, counts.len() as u64, opts.replicate_alpha),
        };
        let covered: u64 = columns.iter().map(|&j| counts[j as usize]).sum();
        let accesses = 2 * ratings.train.len() as u64;
        Self {
            keys: columns
                .into_iter()
                .map(|j| u64::from(ratings.rows) + j)
                .collect(),
            access_fraction: covered as f64 / accesses.max(1) as f64,
        }
    }
}

/// Training cells of every column.
pub fn column_counts(ratings: &Ratings) -> Vec<u64> {
    let mut counts = vec![0u64; ratings.cols as usize];
    for e in &ratings.train {
        counts[e.col as usize] += 1;
    }
    counts
}

/// A 32-bit digest of a replicated set: the job sums it over the nodes to check that they all
/// replicate the same keys (small enough that the sum over 256 nodes stays exact).
pub fn fingerprint(keys: &[Key]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ keys.len() as u64;
    for &k in keys {
        h = (h ^ k).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h & 0xffff_ffff
}

/// Replication counters each node adds to the cluster sums: sync rounds, replica bytes sent,
/// its staleness median and 99th percentile in µs, and 1 if it measured any staleness (a node
/// that receives no replica values from other hubs has none).
pub const COUNTERS: usize = 5;

/// This node's [`COUNTERS`].
pub fn node_counters(stats: &NodeStats) -> [u64; COUNTERS] {
    [
        stats.replica_rounds,
        stats.replica_bytes_sent,
        stats.replica_staleness_p50_us.round() as u64,
        stats.replica_staleness_p99_us.round() as u64,
        u64::from(stats.replica_keys_received > 0),
    ]
}

/// The `replication` object of the report's settings, from the plan and the cluster sums of
/// [`node_counters`] over `nodes` nodes. Rounds are per node; bytes per round are per node
/// and round (both directions of the sync: deltas to hubs, values from them); staleness is the
/// mean over the nodes that measured any of each node's percentile.
pub fn report(plan: &Plan, opts: &Options, sums: &[u64], nodes: u32) -> serde_json::Value {
    let nodes = f64::from(nodes.max(1));
    let (rounds, bytes) = (sums[0], sums[1]);
    let measured = sums[4].max(1) as f64;
    json!({
        "replicated_keys": plan.keys.len(),
        "access_fraction": plan.access_fraction,
        "chooser": if opts.replicate_top.is_some() { "top_n" } else { "above_mean" },
        "alpha": opts.replicate_top.is_none().then_some(opts.replicate_alpha),
        "top": opts.replicate_top,
        "sync_every_ms": opts
            .sync_every()
            .unwrap_or(roam::config::DEFAULT_REPLICA_SYNC_EVERY)
            .as_secs_f64() * 1e3,
        "rounds_per_node": rounds as f64 / nodes,
        "bytes_sent": bytes,
        "bytes_per_round": if rounds == 0 { 0.0 } else { bytes as f64 / rounds as f64 },
        "staleness_p50_us": sums[2] as f64 / measured,
        "staleness_p99_us": sums[3] as f64 / measured,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mf::data::Entry;

    #[test]
    fn hot_columns_by_cell_count() {
        // Column 0: 6 cells, column 1: 2, column 2: 1, column 3: none (mean 9/4 = 2.25).
        let cols = [0, 0, 0, 0, 0, 0, 1, 1, 2];
        let ratings = Ratings {
            rows: 10,
            cols: 4,
            train: cols
                .iter()
                .enumerate()
                .map(|(i, &col)| Entry {
                    row: i as u32,
                    col,
                    value: 1.0,
                })
                .collect(),
            test: Vec::new(),
            test_dropped: 0,
        };
        assert_eq!(column_counts(&ratings), [6, 2, 1, 0]);
        let opts = |alpha, top| Options {
            replicate_alpha: alpha,
            replicate_top: top,
            sync_every_ms: Some(2.5),
        };
        let p = Plan::choose(&ratings, &opts(1.0, None));
        assert_eq!(p.keys, [10], "column 0 is key rows + 0");
        assert!((p.access_fraction - 6.0 / 18.0).abs() < 1e-12);
        let p = Plan::choose(&ratings, &opts(0.4, None));
        assert_eq!(p.keys, [10, 11, 12], "zero-count columns never");
        let p = Plan::choose(&ratings, &opts(1.0, Some(2)));
        assert_eq!(p.keys, [10, 11]);
        assert!((p.access_fraction - 8.0 / 18.0).abs() < 1e-12);
        assert_eq!(
            opts(1.0, None).sync_every(),
            Some(std::time::Duration::from_micros(2500))
        );
        assert!(opts(f64::NAN, None).validate().is_err());
    }

    #[test]
    fn fingerprints_tell_sets_apart_and_fit_32_bits() {
        let a = fingerprint(&[1, 2, 3]);
        assert_ne!(a, fingerprint(&[1, 2, 4]));
        assert!(a < 1 << 32);
    }
}
