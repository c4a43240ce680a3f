//! DSGD parameter blocking: which rows and columns form each block, and which block each
//! worker processes in each sub-epoch.
//!
//! With `P` workers, rows and columns are each split into `P` blocks by a seeded random
//! permutation (block sizes differ by at most one). An epoch has `P` sub-epochs; in sub-epoch
//! `s` worker `p` processes data block `(p, (p + s) mod P)`. For a fixed `s` the map
//! `p -> (p + s) mod P` is a bijection, so no two workers share a row block or a column block;
//! over the `P` values of `s` every worker meets every column block once. The order of the
//! sub-epochs is a seeded permutation per epoch (the same on every worker), like the
//! "without replacement" strata order of DSGD.
//!
//! Invariant: worker `p` owns row block `p` for the whole run, and column block `q` only
//! during the sub-epoch that assigns it `q`, so between two barriers every parameter is
//! written by at most one worker.

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

/// The split of one dimension (rows or columns) into blocks.
#[derive(Clone, Debug)]
pub struct Split {
    /// Block of each index.
    pub block: Vec<u32>,
    /// Position of each index inside its block.
    pub local: Vec<u32>,
    /// Indices of each block, in local order.
    pub members: Vec<Vec<u32>>,
}

impl Split {
    /// Splits `0..n` into `parts` balanced blocks by a permutation seeded with `seed`.
    pub fn new(n: u32, parts: u32, seed: u64) -> Self {
        let mut order: Vec<u32> = (0..n).collect();
        order.shuffle(&mut SmallRng::seed_from_u64(seed));
        let mut block = vec![0; n as usize];
        let mut local = vec![0; n as usize];
        let members: Vec<Vec<u32>> = (0..parts as usize)
            .map(|b| {
                let range = bounds(n as usize, parts as usize, b);
                let mut ids: Vec<u32> = order[range].to_vec();
                // Ascending ids inside a block keep batched key lists sorted, which helps
                // the store's locality and makes messages deterministic.
                ids.sort_unstable();
                for (pos, &id) in ids.iter().enumerate() {
                    block[id as usize] = b as u32;
                    local[id as usize] = pos as u32;
                }
                ids
            })
            .collect();
        Self {
            block,
            local,
            members,
        }
    }

    /// Largest block size.
    pub fn max_block(&self) -> usize {
        self.members.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// Index range of block `b` of `parts` over `0..n`.
fn bounds(n: usize, parts: usize, b: usize) -> std::ops::Range<usize> {
    (b * n / parts)..((b + 1) * n / parts)
}

/// The column block worker `p` processes in sub-epoch `s` (of `parts`).
pub fn column_block(p: u32, s: u32, parts: u32) -> u32 {
    (p + s) % parts
}

/// The order of the sub-epochs of `epoch` (a permutation of `0..parts`, same on all workers).
pub fn stratum_order(seed: u64, epoch: u32, parts: u32) -> Vec<u32> {
    let mut order: Vec<u32> = (0..parts).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(
        seed ^ 0x05ee_d0f5_7a7a ^ (u64::from(epoch) << 20),
    ));
    order
}

/// The column block worker `p` processes after step `t` of `epoch` (the first of the next
/// epoch after the last step), for prefetching.
pub fn next_column_block(seed: u64, epoch: u32, t: u32, p: u32, parts: u32) -> u32 {
    if t + 1 < parts {
        column_block(p, stratum_order(seed, epoch, parts)[t as usize + 1], parts)
    } else {
        column_block(p, stratum_order(seed, epoch + 1, parts)[0], parts)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn splits_are_balanced_partitions() {
        for (n, parts) in [(6, 2), (4, 2), (10, 3), (1000, 7), (3, 4)] {
            let split = Split::new(n, parts, 11);
            let mut seen = HashSet::new();
            for (b, ids) in split.members.iter().enumerate() {
                assert!(
                    ids.len() == n as usize / parts as usize
                        || ids.len() == (n as usize).div_ceil(parts as usize)
                );
                for (pos, &id) in ids.iter().enumerate() {
                    assert!(seen.insert(id), "{id} in two blocks");
                    assert_eq!(split.block[id as usize], b as u32);
                    assert_eq!(split.local[id as usize], pos as u32);
                }
            }
            assert_eq!(seen.len(), n as usize);
        }
    }

    #[test]
    fn sub_epochs_never_share_rows_or_columns_and_cover_every_block_once() {
        for parts in 1..=9 {
            let rows = Split::new(50, parts, 1);
            let cols = Split::new(40, parts, 2);
            let mut processed = HashSet::new();
            for epoch in 0..3 {
                processed.clear();
                let order = stratum_order(5, epoch, parts);
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..parts).collect::<Vec<_>>());
                for (t, &s) in order.iter().enumerate() {
                    let mut row_owner = HashSet::new();
                    let mut col_owner = HashSet::new();
                    for p in 0..parts {
                        let q = column_block(p, s, parts);
                        for &r in &rows.members[p as usize] {
                            assert!(row_owner.insert(r), "row {r} shared in sub-epoch {s}");
                        }
                        for &c in &cols.members[q as usize] {
                            assert!(col_owner.insert(c), "column {c} shared in sub-epoch {s}");
                        }
                        assert!(
                            processed.insert((p, q)),
                            "block ({p}, {q}) twice in epoch {epoch}"
                        );
                        let next = next_column_block(5, epoch, t as u32, p, parts);
                        let expected = match order.get(t + 1) {
                            Some(&s2) => column_block(p, s2, parts),
                            None => column_block(p, stratum_order(5, epoch + 1, parts)[0], parts),
                        };
                        assert_eq!(next, expected);
                    }
                }
                assert_eq!(
                    processed.len(),
                    (parts * parts) as usize,
                    "every block once per epoch"
                );
            }
        }
    }
}
