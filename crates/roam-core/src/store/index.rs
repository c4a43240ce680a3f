//! The key → state-word index of the store.
//!
//! - Dense key spaces index an array by key: no lookup at all on the hot path. The array is
//!   requested as zeroed memory, which for any sizeable key space is a fresh anonymous mapping:
//!   the kernel backs a 4 KiB page (512 keys) only once a word in it is written, so a node pays
//!   resident memory for the words of keys it holds or routes, not for the whole space.
//! - Sparse key spaces map each key that this node has seen to an entry of an append-only
//!   arena (`dashmap` for the map, sharded so that workers' lookups do not contend with each
//!   other or with the protocol's inserts). Entries are never removed or moved, so a state word
//!   found once stays valid, and "no entry" reliably means "this node never held the key".
//!
//! Entries are only added by the protocol (one thread at a time, under the node lock). Entry
//! numbers are a stable iteration order: a cursor into them lets background work visit the
//! store's keys in bounded chunks.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::id::Key;

/// Entries in arena chunk 0; chunk `c` holds `ENTRY_BASE << c`.
const ENTRY_BASE_SHIFT: u32 = 12;
/// Chunks 0..=20 hold more than 2^32 entries.
const ENTRY_CHUNKS: usize = 21;

/// A sparse key's entry: the key (for iteration) and its state word.
#[derive(Default)]
struct Entry {
    key: Key,
    state: AtomicU64,
}

pub(super) struct Index {
    /// The words of a dense space (empty for a sparse one, so that the dense case is one
    /// bounds check on the hot path).
    dense: Box<[AtomicU64]>,
    sparse: Option<SparseIndex>,
}

pub(super) struct SparseIndex {
    /// Fx hashing: with dashmap's default SipHash one epoch of `roam train ctr --mode single`
    /// ran 5.7 % more instructions (callgrind). Keys come from the cluster's own apps and
    /// peers, which are trusted, so a hash built to resist chosen collisions buys nothing.
    map: DashMap<Key, u32, FxBuildHasher>,
    chunks: [AtomicPtr<Entry>; ENTRY_CHUNKS],
    /// Entries handed out; protocol-only writes.
    len: UnsafeCell<u64>,
}

impl Index {
    /// A dense index of `num_keys` words, all zero.
    pub(super) fn dense(num_keys: usize) -> Self {
        let states = Box::<[AtomicU64]>::new_zeroed_slice(num_keys);
        Self {
            // SAFETY: the all-zero bit pattern is a valid `AtomicU64` (it is `u64` 0).
            dense: unsafe { states.assume_init() },
            sparse: None,
        }
    }

    /// An empty sparse index.
    pub(super) fn sparse() -> Self {
        Self {
            dense: Box::new([]),
            sparse: Some(SparseIndex {
                map: DashMap::with_hasher(FxBuildHasher),
                chunks: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
                len: UnsafeCell::new(0),
            }),
        }
    }

    /// `key`'s state word, if the key has one (dense: in range; sparse: seen here).
    #[inline(always)]
    pub(super) fn get(&self, key: Key) -> Option<&AtomicU64> {
        if let Some(state) = self.dense.get(key as usize) {
            return Some(state);
        }
        let sparse = self.sparse.as_ref()?;
        let entry = *sparse.map.get(&key)?;
        Some(&sparse.entry(entry).state)
    }

    /// Protocol only: `key`'s state word, created (zero) if the key has none. `None` only for a
    /// dense key out of range.
    pub(super) fn get_or_insert(&self, key: Key) -> Option<&AtomicU64> {
        match &self.sparse {
            None => self.dense.get(key as usize),
            Some(sparse) => {
                let entry = *sparse.map.entry(key).or_insert_with(|| sparse.push(key));
                Some(&sparse.entry(entry).state)
            }
        }
    }

    /// The dense words (empty for a sparse space), for prefetching by key.
    #[inline(always)]
    pub(super) fn dense_words(&self) -> &[AtomicU64] {
        &self.dense
    }

    /// Number of entries (dense: the key count); iteration cursors run below it.
    pub(super) fn len(&self) -> u64 {
        match &self.sparse {
            None => self.dense.len() as u64,
            // SAFETY: `len` is written by the protocol only, which is also the only iterator.
            Some(sparse) => unsafe { *sparse.len.get() },
        }
    }

    /// Entry `i` (below [`Index::len`]): its key and state word.
    pub(super) fn at(&self, i: u64) -> (Key, &AtomicU64) {
        match &self.sparse {
            None => (i, &self.dense[i as usize]),
            Some(sparse) => {
                let entry = sparse.entry(i as u32);
                (entry.key, &entry.state)
            }
        }
    }
}

impl SparseIndex {
    fn position(entry: u32) -> (usize, usize) {
        let q = (u64::from(entry) >> ENTRY_BASE_SHIFT) + 1;
        let chunk = 63 - q.leading_zeros();
        let first = ((1u64 << chunk) - 1) << ENTRY_BASE_SHIFT;
        (chunk as usize, (u64::from(entry) - first) as usize)
    }

    #[inline(always)]
    fn entry(&self, entry: u32) -> &Entry {
        let (chunk, within) = Self::position(entry);
        let base = self.chunks[chunk].load(Ordering::Acquire);
        // SAFETY: `entry` was handed out by `push`, which allocated its chunk (published with
        // `Release` before the entry number was inserted into the map); chunks are never freed
        // while the index lives.
        unsafe { &*base.add(within) }
    }

    /// Protocol only: a new entry for `key`.
    fn push(&self, key: Key) -> u32 {
        // SAFETY: protocol-only (module docs).
        let len = unsafe { &mut *self.len.get() };
        assert!(
            *len <= u64::from(u32::MAX),
            "a node indexes at most 2^32 sparse keys"
        );
        let entry = *len as u32;
        let (chunk, within) = Self::position(entry);
        let mut base = self.chunks[chunk].load(Ordering::Acquire);
        if base.is_null() {
            let size = 1usize << (ENTRY_BASE_SHIFT as usize + chunk);
            // Zeroed (a valid `Entry`), so that the kernel backs the pages only as entries are
            // used, instead of this thread writing the whole chunk under the map's shard lock.
            let entries = Box::<[Entry]>::new_zeroed_slice(size);
            // SAFETY: the all-zero bit pattern is a valid `Entry` (key 0, state 0).
            let entries = unsafe { entries.assume_init() };
            base = Box::into_raw(entries).cast::<Entry>();
            self.chunks[chunk].store(base, Ordering::Release);
        }
        // SAFETY: the slot is inside the chunk and not yet reachable by any other thread (its
        // number is published through the map only after this returns).
        unsafe { (*base.add(within)).key = key };
        *len += 1;
        entry
    }
}

impl Drop for SparseIndex {
    fn drop(&mut self) {
        for (chunk, ptr) in self.chunks.iter().enumerate() {
            let ptr = ptr.load(Ordering::Relaxed);
            if !ptr.is_null() {
                let size = 1usize << (ENTRY_BASE_SHIFT as usize + chunk);
                // SAFETY: allocated in `push` as a boxed slice of exactly `size` entries.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, size)) });
            }
        }
    }
}
