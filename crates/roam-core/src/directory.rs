//! Where keys live at start: the home-node table.
//!
//! Every key has a *home node*. Under static allocation the home node owns the key for the whole
//! run. The table is versioned rather than a fixed `key % n` formula, because nodes will join and
//! leave during a run: a later version may map a key elsewhere, and messages can carry the version
//! they were routed with.

use crate::id::{Key, NodeId};

/// How keys are assigned to home nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partitioning {
    /// Node `i` is home of a contiguous range of about `num_keys / num_nodes` keys.
    Range,
    /// Keys are spread pseudo-randomly (by a fixed mixing hash of the key).
    Hash,
}

/// A version of the key → home-node mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HomeTable {
    version: u64,
    num_keys: u64,
    partitioning: Partitioning,
    /// `range_starts[i]` is the first key homed at node `i` under [`Partitioning::Range`].
    range_starts: Vec<u64>,
}

impl HomeTable {
    /// The initial table (version 0) for `num_nodes` nodes.
    pub fn new(num_keys: u64, num_nodes: u32, partitioning: Partitioning) -> Self {
        assert!(num_nodes > 0, "a cluster has at least one node");
        let per_node = num_keys.div_ceil(u64::from(num_nodes));
        let range_starts = (0..u64::from(num_nodes))
            .map(|i| (i * per_node).min(num_keys))
            .collect();
        Self {
            version: 0,
            num_keys,
            partitioning,
            range_starts,
        }
    }

    /// The version of this table.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Number of nodes the table maps to.
    pub fn num_nodes(&self) -> u32 {
        self.range_starts.len() as u32
    }

    /// The partitioning scheme.
    pub fn partitioning(&self) -> Partitioning {
        self.partitioning
    }

    /// The home node of `key` (which must be in range).
    #[inline]
    pub fn home(&self, key: Key) -> NodeId {
        debug_assert!(key < self.num_keys);
        match self.partitioning {
            Partitioning::Range => {
                let idx = self.range_starts.partition_point(|&start| start <= key) - 1;
                NodeId(idx as u32)
            }
            Partitioning::Hash => NodeId((mix64(key) % self.range_starts.len() as u64) as u32),
        }
    }

    /// The keys homed at `node`, in increasing order.
    pub fn keys_of(&self, node: NodeId) -> Box<dyn Iterator<Item = Key> + '_> {
        match self.partitioning {
            Partitioning::Range => {
                let start = self.range_starts[node.index()];
                let end = self
                    .range_starts
                    .get(node.index() + 1)
                    .copied()
                    .unwrap_or(self.num_keys);
                Box::new(start..end)
            }
            Partitioning::Hash => {
                Box::new((0..self.num_keys).filter(move |&k| self.home(k) == node))
            }
        }
    }
}

/// SplitMix64's finaliser: a fixed bijective mix, so hash placement is the same on every node.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_partition_covers_every_key_once() {
        let table = HomeTable::new(10, 3, Partitioning::Range);
        let homes: Vec<u32> = (0..10).map(|k| table.home(k).0).collect();
        assert_eq!(homes, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
        let total: usize = (0..3).map(|n| table.keys_of(NodeId(n)).count()).sum();
        assert_eq!(total, 10);
    }

    #[test]
    fn range_partition_tolerates_more_nodes_than_keys() {
        let table = HomeTable::new(2, 4, Partitioning::Range);
        assert_eq!(table.home(0), NodeId(0));
        assert_eq!(table.home(1), NodeId(1));
        assert_eq!(table.keys_of(NodeId(3)).count(), 0);
    }

    #[test]
    fn hash_partition_is_balanced_and_consistent_with_keys_of() {
        let table = HomeTable::new(10_000, 4, Partitioning::Hash);
        for n in 0..4 {
            let mine: Vec<_> = table.keys_of(NodeId(n)).collect();
            assert!(
                mine.len() > 2_000 && mine.len() < 3_000,
                "node {n}: {}",
                mine.len()
            );
            assert!(mine.iter().all(|&k| table.home(k) == NodeId(n)));
        }
    }
}
