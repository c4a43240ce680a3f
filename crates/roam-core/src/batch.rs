//! Keys gathered per destination before they become one frame, and the node's spare batches.
//!
//! A request, answer or transfer is gathered key by key into a [`Batch`] (keys, positions,
//! values) and then copied into its frame. The batches of one message grow to the size of a
//! frame; grown from empty every time, each one reallocated its vectors a dozen times, copying
//! every value again per doubling, and returned its memory to the allocator right after (in a
//! 4-node w2v `nups` run the growth copies were a quarter of every byte the node copied). A
//! node therefore keeps the emptied batches of sent frames ([`SpareBatches`]) and gathers the
//! next ones into them.
//!
//! Invariants: a spare batch is empty (its keys, positions and values cleared; only capacity
//! kept); at most [`SPARE_BATCHES`] are kept, together of at most [`SPARE_BYTES_MAX`] bytes of
//! capacity (a batch that would exceed it is dropped), so the pool holds at most 16 MiB per
//! node. Whether a batch is new or spare never changes a frame's bytes.

use std::collections::BTreeMap;

use crate::id::{Key, NodeId, ReqId};
use crate::msg::{Request, encode};
use crate::store::UpdateMode;
use crate::wire::{Frame, Kind};

/// Spare batches kept at most: a message rarely has more than one batch per peer.
pub(crate) const SPARE_BATCHES: usize = 32;
/// Bytes of capacity the spare batches may hold together (keys, positions and values).
pub(crate) const SPARE_BYTES_MAX: usize = 16 << 20;

/// Keys (and their positions and values) gathered for one destination.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) keys: Vec<Key>,
    pub(crate) positions: Vec<u32>,
    pub(crate) values: Vec<f32>,
}

impl Batch {
    pub(crate) fn push(&mut self, key: Key, position: u32, values: &[f32]) {
        self.keys.push(key);
        self.positions.push(position);
        self.values.extend_from_slice(values);
    }

    /// An answer frame (pull reply with values, push reply without) for `req` from `from`.
    pub(crate) fn reply_frame(&self, kind: Kind, from: NodeId, req: ReqId) -> Frame {
        encode::reply(kind, from, req, &self.keys, &self.positions, &self.values)
    }

    /// A request frame (pull, or push with this batch's values).
    pub(crate) fn request_frame(
        &self,
        kind: Kind,
        origin: NodeId,
        req: ReqId,
        hops: u32,
        mode: UpdateMode,
    ) -> Frame {
        let request = Request {
            origin,
            req,
            hops,
            keys: &self.keys,
            positions: &self.positions,
            values: &self.values,
        };
        encode::request(kind, &request, mode)
    }
}

/// One batch per destination node, in node order (so that outputs depend only on inputs).
pub(crate) type Batches = BTreeMap<NodeId, Batch>;

/// Emptied batches whose buffers the next messages reuse (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SpareBatches {
    kept: Vec<Batch>,
    /// Bytes of capacity of the kept batches.
    bytes: usize,
}

impl Batch {
    /// Bytes of capacity of its three vectors.
    fn capacity_bytes(&self) -> usize {
        self.keys.capacity() * size_of::<Key>()
            + self.positions.capacity() * size_of::<u32>()
            + self.values.capacity() * size_of::<f32>()
    }
}

impl SpareBatches {
    /// An empty batch: a spare one if there is one.
    pub(crate) fn take(&mut self) -> Batch {
        match self.kept.pop() {
            Some(batch) => {
                self.bytes -= batch.capacity_bytes();
                batch
            }
            None => Batch::default(),
        }
    }

    /// The batch for `dest` in `batches`, a spare one if it has none yet.
    pub(crate) fn entry<'a>(&mut self, batches: &'a mut Batches, dest: NodeId) -> &'a mut Batch {
        batches.entry(dest).or_insert_with(|| self.take())
    }

    /// The batch for `k` in a short list of batches by key (answers by requester, transfers
    /// by next owner), a spare one appended if it has none yet.
    pub(crate) fn entry_by<'a, K: PartialEq>(
        &mut self,
        batches: &'a mut Vec<(K, Batch)>,
        k: K,
    ) -> &'a mut Batch {
        let at = match batches.iter().position(|(key, _)| *key == k) {
            Some(at) => at,
            None => {
                batches.push((k, self.take()));
                batches.len() - 1
            }
        };
        &mut batches[at].1
    }

    /// Keeps `batch`'s buffers for a later message (or drops it: the pool is full, or would
    /// hold more than [`SPARE_BYTES_MAX`] with it).
    pub(crate) fn keep(&mut self, mut batch: Batch) {
        let bytes = batch.capacity_bytes();
        if self.kept.len() < SPARE_BATCHES && self.bytes + bytes <= SPARE_BYTES_MAX {
            batch.keys.clear();
            batch.positions.clear();
            batch.values.clear();
            self.bytes += bytes;
            self.kept.push(batch);
        }
    }

    /// How many are kept (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_batch_comes_back_empty_with_its_capacity() {
        let mut spare = SpareBatches::default();
        let mut batch = spare.take();
        for k in 0..100 {
            batch.push(k, k as u32, &[1.0; 8]);
        }
        let capacity = batch.values.capacity();
        spare.keep(batch);
        assert_eq!(spare.len(), 1);
        let again = spare.take();
        assert!(again.keys.is_empty() && again.positions.is_empty() && again.values.is_empty());
        assert_eq!(again.values.capacity(), capacity);
        assert_eq!(spare.len(), 0);
    }

    #[test]
    fn the_pool_is_bounded_in_count_and_size() {
        let mut spare = SpareBatches::default();
        for _ in 0..SPARE_BATCHES + 5 {
            spare.keep(Batch::default());
        }
        assert_eq!(spare.len(), SPARE_BATCHES);
        // Bytes: values, or keys alone (pull requests and push answers carry no values).
        let mut spare = SpareBatches::default();
        let values = Batch {
            values: Vec::with_capacity(SPARE_BYTES_MAX / 4 + 1),
            ..Batch::default()
        };
        spare.keep(values);
        assert_eq!(spare.len(), 0);
        let half_in_keys = || Batch {
            keys: Vec::with_capacity(SPARE_BYTES_MAX / 32),
            positions: Vec::with_capacity(SPARE_BYTES_MAX / 16),
            ..Batch::default()
        };
        spare.keep(half_in_keys());
        spare.keep(half_in_keys());
        spare.keep(half_in_keys());
        assert_eq!(spare.len(), 2, "the third would pass the byte bound");
        assert!(spare.bytes <= SPARE_BYTES_MAX);
        let taken = spare.take();
        assert_eq!(spare.bytes, taken.capacity_bytes());
        spare.keep(half_in_keys());
        assert_eq!(spare.len(), 2, "room again once one was taken");
    }

    #[test]
    fn a_frame_is_the_same_from_a_spare_batch() {
        let fill = |b: &mut Batch| {
            b.push(7, 0, &[1.0, 2.0]);
            b.push(9, 1, &[3.0, 4.0]);
        };
        let mut fresh = Batch::default();
        fill(&mut fresh);
        let mut spare = SpareBatches::default();
        let mut used = spare.take();
        used.push(1, 5, &[9.0; 40]);
        spare.keep(used);
        let mut reused = spare.take();
        fill(&mut reused);
        let a = fresh.request_frame(Kind::Push, NodeId(1), ReqId(3), 0, UpdateMode::Add);
        let b = reused.request_frame(Kind::Push, NodeId(1), ReqId(3), 0, UpdateMode::Add);
        assert_eq!(a, b);
        let a = fresh.reply_frame(Kind::PullReply, NodeId(2), ReqId(4));
        let b = reused.reply_frame(Kind::PullReply, NodeId(2), ReqId(4));
        assert_eq!(a, b);
    }
}
