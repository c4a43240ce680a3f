//! Which worker trains which training row (`--shard-by`).
//!
//! By default global worker `p` of `P` trains the rows `r ≡ p (mod P)`. With `--shard-by
//! FIELD` a row goes to the worker its id in that field hashes to, so all examples of one user
//! (say) are one worker's and that user's row is read by one node only, which
//! `--localize exclusive` then moves there once. Every node holds the data and computes the
//! same assignment; it is fixed across epochs (each epoch shuffles a worker's rows only).
//!
//! Invariants: every row goes to exactly one worker in `0..parts`; the assignment depends only
//! on the row's data, the field and `parts`.

use super::data::{Examples, mix};

/// How training rows are spread over the `parts` workers of the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Shards {
    /// Workers of the cluster (nodes × workers per node).
    pub parts: usize,
    /// The field whose (first) id decides, if any.
    pub by: Option<usize>,
}

impl Shards {
    /// The global worker that trains row `row` of `train`. A row with no id in the field (an
    /// empty bag) goes by its index.
    pub fn worker_of(&self, train: &Examples, row: usize) -> usize {
        let parts = self.parts.max(1);
        match self.by.and_then(|f| train.bag(row, f).first()) {
            Some(&key) => (mix(key) % parts as u64) as usize,
            None => row % parts,
        }
    }

    /// The rows global worker `gid` trains, ascending.
    pub fn rows_of(&self, train: &Examples, gid: usize) -> Vec<usize> {
        match self.by {
            None => (gid..train.len()).step_by(self.parts.max(1)).collect(),
            Some(_) => (0..train.len())
                .filter(|&r| self.worker_of(train, r) == gid)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_goes_to_one_worker_and_a_fields_id_to_one_worker() {
        // Field 0: a "user" id among 7; field 1: anything.
        let mut train = Examples::new(2);
        for r in 0..200u64 {
            train.keys.push(r % 7);
            train.end_bag().unwrap();
            train.keys.push(1000 + r);
            train.end_bag().unwrap();
            train.labels.push(0);
        }
        for by in [None, Some(0)] {
            let s = Shards { parts: 3, by };
            let mut seen = vec![0; train.len()];
            for gid in 0..3 {
                for r in s.rows_of(&train, gid) {
                    assert_eq!(s.worker_of(&train, r), gid);
                    seen[r] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{by:?}: every row once");
        }
        let s = Shards { parts: 3, by: None };
        assert_eq!(s.rows_of(&train, 1)[..3], [1, 4, 7]);
        // By field 0: all rows of one user id on one worker.
        let s = Shards {
            parts: 3,
            by: Some(0),
        };
        for user in 0..7 {
            let workers: std::collections::BTreeSet<usize> = (0..train.len())
                .filter(|&r| train.bag(r, 0)[0] == user)
                .map(|r| s.worker_of(&train, r))
                .collect();
            assert_eq!(workers.len(), 1, "user {user}: {workers:?}");
        }
    }
}
