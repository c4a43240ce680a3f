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

use roam::Key;
use serde_json::json;

use super::data::Ratings;

pub use crate::replication::Options;

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

pub use crate::replication::{COUNTERS, node_counters};

/// The `replication` object of the report's settings, from the plan and the cluster sums of
/// [`node_counters`] over `nodes` nodes. Rounds are per node; bytes per round are per node
/// and round (both directions of the sync: deltas to hubs, values from them); staleness is the
/// mean over the nodes that measured any of each node's percentile.
pub fn report(plan: &Plan, opts: &Options, sums: &[u64], nodes: u32) -> serde_json::Value {
    let fields = json!({
        "replicated_keys": plan.keys.len(),
        "access_fraction": plan.access_fraction,
    });
    opts.report(fields, sums, nodes)
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
            sync_updates_per_key: None,
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
}
