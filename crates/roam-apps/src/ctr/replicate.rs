//! The NuPS modes of `ctr` (`nups`, `nups-replicate-only`): which keys are replicated on every
//! node, and the replication figures of the report.
//!
//! Two kinds of keys are hot in a CTR model. The dense MLP keys are read and pushed by every
//! batch of every worker: they are always replicated (as KGE replicates every relation).
//! Embedding rows are ranked by the training examples that use them (an id twice in one bag
//! counts once: a batch pulls and pushes each distinct row once): the rows used at least
//! `--replicate-alpha` times as often as the mean row ([`roam::choose::above_mean`], the mean
//! over the rows the training data uses: a sparse table has no fixed size), or the
//! `--replicate-top N` most used rows ([`roam::choose::top_n`]). Everything else is relocated
//! as in `lapse` (`nups`) or stays at its home (`nups-replicate-only`).
//!
//! Every node generates or loads the whole data set before it keeps its share, so all nodes
//! count the same examples and choose the same set (the job checks it with the fingerprint).
//!
//! Semantics under the server-side optimizer (docs/embeddings.md, "Where the step runs"): a
//! replicated key takes one optimizer step per sync round at its hub with the sum of the
//! round's gradients from every node, so the rounds' frequency is a batch size (roam's default
//! period, 10 ms, unless `--sync-every-ms` or `--sync-updates-per-key` say otherwise). The
//! initial dense values are set at the hubs and synced to every replica before training, and
//! the replicas are synced again before each evaluation (`train.rs`).

use std::collections::HashMap;

use roam::Key;
use serde_json::json;

use super::data::Examples;

pub use crate::replication::Options;

/// The replicated keys of a job (none outside the NuPS modes).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Replicated keys (the dense keys, then the hot rows), sorted.
    pub keys: Vec<Key>,
    /// How many of them are embedding rows.
    pub rows: usize,
    /// Share of the training row accesses (one per example and distinct row of its bags) that
    /// go to replicated rows.
    pub access_fraction: f64,
}

impl Plan {
    /// The keys to replicate for training on `train` with `dense` keys, under `opts`.
    pub fn choose(train: &Examples, dense: &[Key], opts: &Options) -> Self {
        let counts = row_counts(train);
        let accesses: u64 = counts.values().sum();
        let indexed = counts.iter().map(|(&k, &c)| (k, c));
        let rows = match opts.replicate_top {
            Some(n) => roam::choose::top_n(indexed, n),
            None => roam::choose::above_mean(indexed, counts.len() as u64, opts.replicate_alpha),
        };
        let covered: u64 = rows.iter().map(|k| counts[k]).sum();
        let mut keys: Vec<Key> = dense.iter().copied().chain(rows.iter().copied()).collect();
        keys.sort_unstable();
        keys.dedup();
        Self {
            keys,
            rows: rows.len(),
            access_fraction: covered as f64 / accesses.max(1) as f64,
        }
    }

    /// What the report's `replication` object says about the choice (`Options::report` adds
    /// the chooser and the sync figures).
    pub fn fields(&self) -> serde_json::Value {
        json!({
            "replicated_keys": self.keys.len(),
            "replicated_rows": self.rows,
            "access_fraction": self.access_fraction,
        })
    }
}

/// Training examples that use each row (each distinct row of an example once).
pub fn row_counts(train: &Examples) -> HashMap<Key, u64> {
    let mut counts: HashMap<Key, u64> = HashMap::new();
    let mut seen: Vec<Key> = Vec::new();
    for row in 0..train.len() {
        seen.clear();
        for field in 0..train.fields {
            seen.extend_from_slice(train.bag(row, field));
        }
        seen.sort_unstable();
        seen.dedup();
        for &key in &seen {
            *counts.entry(key).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_counted_once_per_example_and_the_dense_keys_always_replicated() {
        // Key 1 in every row (twice in row 0: counted once), 2 in two rows, 3 and 4 once.
        let train = Examples::two_fields(&[[&[1, 1], &[2]], [&[1], &[2, 3]], [&[1], &[4]]]);
        let counts = row_counts(&train);
        assert_eq!(counts[&1], 3);
        assert_eq!(counts[&2], 2);
        assert_eq!((counts[&3], counts[&4]), (1, 1));
        let dense = [100, 101];
        // Mean over the 4 rows used: 7/4; 1.5× that is 2.625: only key 1.
        let p = Plan::choose(&train, &dense, &Options::choosing(1.5, None));
        assert_eq!(p.keys, [1, 100, 101]);
        assert_eq!(p.rows, 1);
        assert!((p.access_fraction - 3.0 / 7.0).abs() < 1e-12, "{p:?}");
        let p = Plan::choose(&train, &dense, &Options::choosing(100.0, Some(2)));
        assert_eq!(p.keys, [1, 2, 100, 101]);
        assert_eq!(p.rows, 2);
        // Nothing hot enough: the dense keys still.
        let p = Plan::choose(&train, &dense, &Options::choosing(100.0, None));
        assert_eq!((p.keys.as_slice(), p.rows), (&dense[..], 0));
        assert_eq!(p.access_fraction, 0.0);
    }
}
