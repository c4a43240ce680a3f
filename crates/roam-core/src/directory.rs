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
//! barriers and serialises home moves), so that neither is a hard-wired rank. Members join and
//! leave at run time (`membership.rs`); a member that joined is a *server*: it hosts no
//! workers, so barriers do not wait for it. A member change has an epoch like a home move.
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

/// Marks a member that hosts no workers in [`Directory::to_words`].
const SERVER_FLAG: u64 = 1 << 32;

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
    /// Members that host no workers (joined servers), in increasing order.
    servers: Vec<NodeId>,
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
            servers: Vec::new(),
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

    /// Whether member `node` hosts no workers (it joined as a server).
    pub fn is_server_only(&self, node: NodeId) -> bool {
        self.servers.binary_search(&node).is_ok()
    }

    /// The members that host workers: the ones barriers wait for.
    pub fn worker_members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members
            .iter()
            .copied()
            .filter(|&m| !self.is_server_only(m))
    }

    /// The node count the epoch-0 homes were spread over (the cluster's size at start).
    pub fn initial_nodes(&self) -> u32 {
        self.num_nodes as u32
    }

    /// Records that `node` joined as a server at `epoch`. Returns false if it already is a
    /// member.
    pub(crate) fn add_server(&mut self, node: NodeId, epoch: u32) -> bool {
        let Err(at) = self.members.binary_search(&node) else {
            return false;
        };
        self.members.insert(at, node);
        if let Err(at) = self.servers.binary_search(&node) {
            self.servers.insert(at, node);
        }
        self.epoch = self.epoch.max(epoch);
        true
    }

    /// Records that `node` left at `epoch` (it is home of no bucket any more). Returns false if
    /// it was no member.
    pub(crate) fn remove_member(&mut self, node: NodeId, epoch: u32) -> bool {
        let Ok(at) = self.members.binary_search(&node) else {
            return false;
        };
        self.members.remove(at);
        if let Ok(at) = self.servers.binary_search(&node) {
            self.servers.remove(at);
        }
        self.epoch = self.epoch.max(epoch);
        true
    }

    /// The table as words, for a joining node: the member count, each member (with
    /// [`SERVER_FLAG`] if it hosts no workers), then per bucket `home | creator << 32` and the
    /// bucket's epoch.
    pub(crate) fn to_words(&self) -> Vec<u64> {
        let mut words = Vec::with_capacity(1 + self.members.len() + 2 * self.homes.len());
        words.push(self.members.len() as u64);
        for &m in &self.members {
            let flag = if self.is_server_only(m) {
                SERVER_FLAG
            } else {
                0
            };
            words.push(u64::from(m.0) | flag);
        }
        for b in 0..self.homes.len() {
            words.push(u64::from(self.homes[b].0) | u64::from(self.creators[b].0) << 32);
            words.push(u64::from(self.bucket_epochs[b]));
        }
        words
    }

    /// Replaces members, homes, creators and bucket epochs by those of `words` (see
    /// [`Directory::to_words`]) at `epoch`, after checking all of it: the bucket count must be
    /// this table's, members increasing, and every home and creator a member. On error nothing
    /// changes. A joining node applies the coordinator's `Welcome` table with it.
    pub(crate) fn restore_words(&mut self, epoch: u32, words: &[u64]) -> Result<(), &'static str> {
        let (&count, rest) = words.split_first().ok_or("no member count")?;
        let count = usize::try_from(count).map_err(|_| "member count too large")?;
        if count == 0 || count > rest.len() {
            return Err("member count does not fit the table");
        }
        let (raw_members, buckets) = rest.split_at(count);
        if buckets.len() != 2 * self.homes.len() {
            return Err("bucket count differs from this node's key space");
        }
        let mut members = Vec::with_capacity(count);
        let mut servers = Vec::new();
        for &word in raw_members {
            let id = u32::try_from(word & !SERVER_FLAG).map_err(|_| "member is no node id")?;
            if members.last().is_some_and(|&last: &NodeId| last.0 >= id) {
                return Err("members not in increasing order");
            }
            members.push(NodeId(id));
            if word & SERVER_FLAG != 0 {
                servers.push(NodeId(id));
            }
        }
        let mut homes = Vec::with_capacity(self.homes.len());
        let mut creators = Vec::with_capacity(self.homes.len());
        let mut epochs = Vec::with_capacity(self.homes.len());
        for pair in buckets.chunks_exact(2) {
            let home = NodeId(pair[0] as u32);
            let creator = NodeId((pair[0] >> 32) as u32);
            if members.binary_search(&home).is_err() {
                return Err("a bucket's home is no member");
            }
            homes.push(home);
            creators.push(creator);
            epochs.push(u32::try_from(pair[1]).map_err(|_| "bucket epoch too large")?);
        }
        self.members = members;
        self.servers = servers;
        self.homes = homes.into();
        self.creators = creators.into();
        self.bucket_epochs = epochs.into();
        self.epoch = self.epoch.max(epoch);
        Ok(())
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
    fn a_joiner_restores_the_table_exactly_and_bad_tables_change_nothing() {
        let mut table = Directory::new(100, 3, Partitioning::Hash);
        assert!(table.add_server(NodeId(3), 1));
        assert!(table.apply(5, NodeId(3), 2, true));
        let words = table.to_words();
        let mut joiner = Directory::new(100, 3, Partitioning::Hash);
        joiner.restore_words(2, &words).unwrap();
        assert_eq!(joiner, table);
        assert!(joiner.is_server_only(NodeId(3)));
        assert_eq!(
            joiner.worker_members().collect::<Vec<_>>(),
            [0, 1, 2].map(NodeId)
        );
        let before = joiner.clone();
        let mut short = words.clone();
        short.pop();
        assert!(joiner.restore_words(3, &short).is_err());
        let mut stranger = words.clone();
        stranger[5 + 2 * 7] = 9; // bucket 7's home: no member
        assert!(joiner.restore_words(3, &stranger).is_err());
        assert_eq!(joiner, before);
        assert!(table.remove_member(NodeId(1), 3));
        assert!(!table.is_member(NodeId(1)));
        assert!(!table.remove_member(NodeId(1), 4));
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
