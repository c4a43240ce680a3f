//! Where keys live at start and who serialises their moves: the epoch-numbered directory.
//!
//! Keys map to *buckets* by a fixed function (dense key spaces under range partitioning: by
//! contiguous key range, `key >> shift`; hash partitioning: a fixed mixing hash of the key into
//! [`HASH_BUCKETS`] buckets), and buckets map to *home nodes* through a table that changes at
//! run time: moving a bucket's home is a protocol operation (`home_move.rs`). Each change has an
//! epoch; every frame carries its sender's epoch, and the table keeps, per bucket, the epoch of
//! its last change, so that changes learnt out of order (from different nodes) are applied
//! once and never undone.
//!
//! The directory also names the cluster's members and its coordinator (the node that runs
//! barriers and serialises home moves), so that neither is a hard-wired rank.
//!
//! Invariants: the bucket function never changes during a run, so every node agrees on each
//! key's bucket; a bucket entry only moves forward in epoch. A bucket's *creator* starts as
//! its first home and changes with it when a move carries the bucket's keys along (under
//! static allocation every move does, so there creator and home are the same node, except at
//! the new home between the records' and the keys' arrival).

use crate::id::{Key, NodeId};
use std::ops::Range;

/// How keys are assigned to home nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partitioning {
    /// Node `i` is home of a contiguous range of about `num_keys / num_nodes` keys (rounded to
    /// whole buckets).
    Range,
    /// Keys are spread pseudo-randomly (by a fixed mixing hash of the key).
    Hash,
}

/// Buckets of a hashed key space (a fixed count, so any `u64` key has a bucket).
pub const HASH_BUCKETS: u32 = 4096;

/// Most buckets of a range-partitioned key space.
pub const MAX_RANGE_BUCKETS: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bucketing {
    /// Bucket `key >> shift`.
    Range { shift: u32 },
    /// Bucket `mix64(key) % HASH_BUCKETS`.
    Hash,
}

/// The key → bucket → home mapping at one epoch, plus membership. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directory {
    epoch: u32,
    num_keys: u64,
    bucketing: Bucketing,
    homes: Box<[NodeId]>,
    /// Each bucket's creator (see [`Directory::creator`]).
    creators: Box<[NodeId]>,
    bucket_epochs: Box<[u32]>,
    members: Vec<NodeId>,
    coordinator: NodeId,
    /// The node count the initial homes were spread over.
    num_nodes: u64,
}

impl Directory {
    /// The initial directory (epoch 0) of a cluster of nodes `0..num_nodes` over keys
    /// `0..num_keys`. Node 0 coordinates.
    pub fn new(num_keys: u64, num_nodes: u32, partitioning: Partitioning) -> Self {
        assert!(num_nodes > 0, "a cluster has at least one node");
        let n = u64::from(num_nodes);
        let (bucketing, homes): (Bucketing, Vec<NodeId>) = match partitioning {
            Partitioning::Range => {
                let mut shift = 0;
                while num_keys.div_ceil(1 << shift) > MAX_RANGE_BUCKETS {
                    shift += 1;
                }
                let buckets = num_keys.div_ceil(1 << shift).max(1);
                let homes = (0..buckets)
                    .map(|b| initial_home(partitioning, b, buckets, n))
                    .collect();
                (Bucketing::Range { shift }, homes)
            }
            Partitioning::Hash => {
                let buckets = u64::from(HASH_BUCKETS);
                let homes = (0..buckets)
                    .map(|b| initial_home(partitioning, b, buckets, n))
                    .collect();
                (Bucketing::Hash, homes)
            }
        };
        Self {
            epoch: 0,
            num_keys,
            bucketing,
            bucket_epochs: vec![0; homes.len()].into(),
            creators: homes.clone().into(),
            homes: homes.into(),
            members: (0..num_nodes).map(NodeId).collect(),
            coordinator: NodeId(0),
            num_nodes: n,
        }
    }

    /// The newest epoch this table has seen.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The cluster's members, in increasing order.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// Whether `node` is a member.
    pub fn is_member(&self, node: NodeId) -> bool {
        self.members.binary_search(&node).is_ok()
    }

    /// The node that runs barriers and serialises home moves.
    pub fn coordinator(&self) -> NodeId {
        self.coordinator
    }

    /// Number of buckets.
    pub fn num_buckets(&self) -> u32 {
        self.homes.len() as u32
    }

    /// The bucket of `key`.
    #[inline]
    pub fn bucket(&self, key: Key) -> u32 {
        match self.bucketing {
            Bucketing::Range { shift } => {
                // Keys past the range (rejected elsewhere) fold into the last bucket.
                ((key >> shift) as usize).min(self.homes.len() - 1) as u32
            }
            Bucketing::Hash => (mix64(key) % u64::from(HASH_BUCKETS)) as u32,
        }
    }

    /// The home node of `key`.
    #[inline]
    pub fn home(&self, key: Key) -> NodeId {
        self.homes[self.bucket(key) as usize]
    }

    /// `bucket`'s home at epoch 0, before any move.
    pub fn first_home(&self, bucket: u32) -> NodeId {
        let partitioning = match self.bucketing {
            Bucketing::Range { .. } => Partitioning::Range,
            Bucketing::Hash => Partitioning::Hash,
        };
        let buckets = self.homes.len() as u64;
        initial_home(partitioning, u64::from(bucket), buckets, self.num_nodes)
    }

    /// The home node of `bucket`.
    pub fn bucket_home(&self, bucket: u32) -> NodeId {
        self.homes[bucket as usize]
    }

    /// The node that creates the keys of `bucket`: its home at epoch 0, or the home a move
    /// carried the bucket's keys to (static allocation). It holds every key of the bucket that never moved (it is the
    /// bucket's default owner); in a sparse key space it creates a key on first use.
    pub fn creator(&self, bucket: u32) -> NodeId {
        self.creators[bucket as usize]
    }

    /// Records that this node's `node` creates (and by default holds) `bucket`'s keys from now
    /// on: at the new home of a move that carried them, once they landed.
    pub(crate) fn set_creator(&mut self, bucket: u32, node: NodeId) {
        if let Some(creator) = self.creators.get_mut(bucket as usize) {
            *creator = node;
        }
    }

    /// The epoch of `bucket`'s last change.
    pub fn bucket_epoch(&self, bucket: u32) -> u32 {
        self.bucket_epochs[bucket as usize]
    }

    /// The buckets whose home is `node`, in increasing order.
    pub fn buckets_of(&self, node: NodeId) -> impl Iterator<Item = u32> + '_ {
        (0..self.num_buckets()).filter(move |&b| self.bucket_home(b) == node)
    }

    /// The keys of `bucket` in a range-partitioned key space (`None` under hashing, where a
    /// bucket's keys are not a range).
    pub fn bucket_range(&self, bucket: u32) -> Option<Range<Key>> {
        match self.bucketing {
            Bucketing::Range { shift } => {
                let start = u64::from(bucket) << shift;
                let end = (u64::from(bucket) + 1)
                    .checked_shl(shift)
                    .filter(|&end| end > start)
                    .unwrap_or(u64::MAX);
                Some(start.min(self.num_keys)..end.min(self.num_keys))
            }
            Bucketing::Hash => None,
        }
    }

    /// The keys of `0..num_keys` whose home is `node`, in increasing order. Under hashing this
    /// walks the whole key range: for start-up and tests, not for a running protocol.
    pub fn keys_of(&self, node: NodeId) -> Box<dyn Iterator<Item = Key> + '_> {
        match self.bucketing {
            Bucketing::Range { .. } => Box::new(
                self.buckets_of(node)
                    .flat_map(move |b| self.bucket_range(b).expect("range bucketing")),
            ),
            Bucketing::Hash => Box::new((0..self.num_keys).filter(move |&k| self.home(k) == node)),
        }
    }

    /// Records that `bucket`'s home is `home` from `epoch` on, and with `carries_keys` that the
    /// move took the bucket's keys along (the new home creates and holds them). Returns false,
    /// changing nothing, if the table already knows this change or a later one of the bucket.
    pub fn apply(&mut self, bucket: u32, home: NodeId, epoch: u32, carries_keys: bool) -> bool {
        let Some(current) = self.bucket_epochs.get_mut(bucket as usize) else {
            return false;
        };
        if epoch <= *current {
            return false;
        }
        *current = epoch;
        self.homes[bucket as usize] = home;
        if carries_keys {
            self.creators[bucket as usize] = home;
        }
        self.epoch = self.epoch.max(epoch);
        true
    }
}

/// The epoch-0 home of bucket `b` of `buckets` over `nodes` nodes: contiguous runs of buckets
/// under range partitioning, round robin under hashing.
fn initial_home(partitioning: Partitioning, b: u64, buckets: u64, nodes: u64) -> NodeId {
    match partitioning {
        Partitioning::Range => NodeId((b * nodes / buckets) as u32),
        Partitioning::Hash => NodeId((b % nodes) as u32),
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
        let table = Directory::new(10, 3, Partitioning::Range);
        let homes: Vec<u32> = (0..10).map(|k| table.home(k).0).collect();
        assert_eq!(homes, [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]);
        let total: usize = (0..3).map(|n| table.keys_of(NodeId(n)).count()).sum();
        assert_eq!(total, 10);
    }

    #[test]
    fn large_ranges_use_at_most_the_bucket_limit() {
        let table = Directory::new(1_000_000, 4, Partitioning::Range);
        assert!(u64::from(table.num_buckets()) <= MAX_RANGE_BUCKETS);
        let mut total = 0;
        for n in 0..4 {
            let mine: Vec<_> = table.keys_of(NodeId(n)).collect();
            assert!(mine.windows(2).all(|w| w[0] + 1 == w[1]), "contiguous");
            assert!(mine.iter().all(|&k| table.home(k) == NodeId(n)));
            total += mine.len();
        }
        assert_eq!(total, 1_000_000);
    }

    #[test]
    fn range_partition_tolerates_more_nodes_than_keys() {
        let table = Directory::new(2, 4, Partitioning::Range);
        assert_eq!(table.home(0), NodeId(0));
        assert_eq!(table.home(1), NodeId(2));
        assert_eq!(table.keys_of(NodeId(3)).count(), 0);
    }

    #[test]
    fn hash_partition_is_balanced_and_consistent_with_keys_of() {
        let table = Directory::new(10_000, 4, Partitioning::Hash);
        for n in 0..4 {
            let mine: Vec<_> = table.keys_of(NodeId(n)).collect();
            assert!(
                mine.len() > 2_000 && mine.len() < 3_000,
                "node {n}: {}",
                mine.len()
            );
            assert!(mine.iter().all(|&k| table.home(k) == NodeId(n)));
        }
        // Any u64 key has a bucket.
        assert!(table.bucket(u64::MAX) < HASH_BUCKETS);
    }

    #[test]
    fn changes_apply_once_and_never_go_back() {
        let mut table = Directory::new(100, 2, Partitioning::Range);
        let b = table.bucket(3);
        assert!(table.apply(b, NodeId(1), 2, false));
        assert_eq!(table.home(3), NodeId(1));
        assert_eq!(table.epoch(), 2);
        // An older change learnt late is ignored.
        assert!(!table.apply(b, NodeId(0), 1, false));
        assert_eq!(table.home(3), NodeId(1));
        assert!(!table.apply(b, NodeId(1), 2, false));
        assert!(table.apply(b, NodeId(0), 3, false));
        assert_eq!(table.home(3), NodeId(0));
        assert_eq!(table.creator(b), NodeId(0));
        // A move that carries the keys makes the new home their creator.
        assert!(table.apply(b, NodeId(1), 4, true));
        assert_eq!(table.creator(b), NodeId(1));
        assert_eq!(table.first_home(b), NodeId(0), "first homes never move");
    }
}
