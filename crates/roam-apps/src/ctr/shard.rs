//! Which worker trains which training row (`--shard-by`).
//!
//! By default global worker `p` of `P` trains the rows `r ≡ p (mod P)`. With `--shard-by
//! FIELD` a row goes to the worker its id in that field hashes to, so all examples of one user
//! (say) are one worker's and that user's row is read by one node only, which
//! `--localize exclusive` then moves there once. Every node holds the data and computes the
//! same assignment; it is fixed across epochs (each epoch shuffles a worker's rows only).
//!
//! [`exclusive_rows`] derives from the assignment the rows only one node's workers train on:
//! `--localize exclusive` moves each node's own rows there once, before training.
//!
//! Invariants: every row goes to exactly one worker in `0..parts`; the assignment depends only
//! on the row's data, the field and `parts`, so every node computes the same own rows.

use roam::Key;

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

/// The embedding rows that only one node's workers train on (`--localize exclusive`).
#[derive(Debug, Default)]
pub struct Exclusive {
    /// This node's, ascending.
    pub mine: Vec<Key>,
    /// How many each node has.
    pub per_node: Vec<u64>,
}

/// The rows that only node `rank`'s workers train on, when `shards` says which global worker
/// trains each training row and node `n` of `nodes` runs the workers `n · per_node .. (n + 1) ·
/// per_node` (`roam::Worker::global_id`; `per_node = shards.parts / nodes`); `skip` leaves
/// keys out (the replicated ones). A row several workers of one node use is as exclusive as a
/// row one worker uses: the node holds it for all of them.
pub fn exclusive_rows(
    train: &Examples,
    shards: &Shards,
    nodes: usize,
    rank: usize,
    skip: impl Fn(Key) -> bool,
) -> Exclusive {
    // Key → the one node using it so far, or `SHARED`.
    const SHARED: u32 = u32::MAX;
    let mut user: rustc_hash::FxHashMap<Key, u32> = rustc_hash::FxHashMap::default();
    let nodes = nodes.max(1);
    let per_node = (shards.parts / nodes).max(1);
    for row in 0..train.len() {
        let node = (shards.worker_of(train, row) / per_node) as u32;
        for field in 0..train.fields {
            for &key in train.bag(row, field) {
                let u = user.entry(key).or_insert(node);
                if *u != node {
                    *u = SHARED;
                }
            }
        }
    }
    let mut out = Exclusive {
        mine: Vec::new(),
        per_node: vec![0; nodes],
    };
    for (key, node) in user {
        if node == SHARED || skip(key) {
            continue;
        }
        out.per_node[node as usize] += 1;
        if node == rank as u32 {
            out.mine.push(key);
        }
    }
    out.mine.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_index(parts: usize) -> Shards {
        Shards { parts, by: None }
    }

    #[test]
    fn a_row_is_exclusive_to_the_one_node_whose_workers_train_it() {
        // Rows 0..6; with 2 nodes × 1 worker, even rows are node 0's and odd rows node 1's.
        let train = Examples::two_fields(&[
            [&[1], &[2]],    // node 0
            [&[1], &[3]],    // node 1: key 1 shared
            [&[4, 4], &[2]], // node 0
            [&[3], &[5]],    // node 1
            [&[6], &[]],     // node 0
            [&[5], &[7]],    // node 1
        ]);
        let e0 = exclusive_rows(&train, &by_index(2), 2, 0, |_| false);
        let e1 = exclusive_rows(&train, &by_index(2), 2, 1, |_| false);
        assert_eq!(e0.mine, [2, 4, 6]);
        assert_eq!(e1.mine, [3, 5, 7]);
        assert_eq!(e0.per_node, [3, 3]);
        assert_eq!(
            e1.per_node, e0.per_node,
            "every node derives the same split"
        );
        // Replicated keys are left out.
        let e0 = exclusive_rows(&train, &by_index(2), 2, 0, |k| k == 4);
        assert_eq!(
            (e0.mine.as_slice(), e0.per_node.as_slice()),
            (&[2, 6][..], &[2, 3][..])
        );
        // 1 node × 2 workers: both workers' rows are the node's, so every row is its own.
        assert_eq!(
            exclusive_rows(&train, &by_index(2), 1, 0, |_| false).mine,
            [1, 2, 3, 4, 5, 6, 7]
        );
        // 2 nodes × 2 workers: worker r mod 4 trains row r, node 0 runs workers 0 and 1, so
        // rows 0, 1, 4, 5 are node 0's and rows 2, 3 node 1's.
        let e = exclusive_rows(&train, &by_index(4), 2, 0, |_| false);
        assert_eq!(e.mine, [1, 6, 7]);
        assert_eq!(e.per_node, [3, 1]);
        // Rows dealt by their field-0 id: every key used in field 0 only is one node's (keys
        // 3 and 5 are also used in field 1; the app's keys are per field, `feature_key`).
        let by_field = Shards {
            parts: 2,
            by: Some(0),
        };
        let mine: Vec<Vec<Key>> = (0..2)
            .map(|rank| exclusive_rows(&train, &by_field, 2, rank, |_| false).mine)
            .collect();
        for key in [1, 4, 6] {
            let owners = mine.iter().filter(|m| m.contains(&key)).count();
            assert_eq!(owners, 1, "field-0 key {key} is one node's: {mine:?}");
        }
    }

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
