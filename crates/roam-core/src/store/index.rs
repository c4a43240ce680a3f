//! The key → state-word index of the store.
//!
//! - Dense key spaces index an array by key: no lookup at all on the hot path. The array is
//!   requested as zeroed memory, which for any sizeable key space is a fresh anonymous mapping:
//!   the kernel backs a 4 KiB page (512 keys) only once a word in it is written, so a node pays
//!   resident memory for the words of keys it holds or routes, not for the whole space.
//! - Sparse key spaces map each key that this node has seen to an entry of an append-only
//!   arena, through an open-addressing table of entry numbers (linear probing, at most half
//!   full) that workers read without any lock or atomic read-modify-write: a lookup is a few
//!   loads. Entries are never removed or moved, so a state word found once stays valid, and
//!   "no entry" reliably means "this node never held the key".
//!
//! Entries are only added by the protocol (one thread at a time, under the node lock), so the
//! table has a single writer: it fills an entry's key, then publishes the entry's number into a
//! slot with a release store, which a reader's acquire load of the slot pairs with. Once the
//! table is 3/8 full the writer starts a table twice as large and, at each later insert, copies
//! the next few entries into it (`MIGRATE_PER_INSERT`, in entry order), so that no insert pays
//! for the whole table (at 10^8 keys, rebuilding it at once held the node lock for 6.5 s); when
//! every entry is in it, the larger table is published with a release store of the table
//! pointer, by which time the old one is under 0.43 full (it never is half full). The old one
//! is kept until the index drops (a reader may still be probing it): 4 bytes a slot, so
//! the current table takes 8 to 16 bytes a key and all of them together 16 to 32, besides the
//! arena's 16. A reader probing a replaced table misses only keys inserted after it loaded the
//! pointer, as if its lookup had come first.
//!
//! Why not a concurrent map crate: with `dashmap` (a read-write lock per shard) the lock's
//! two atomic read-modify-writes were most of a sparse lookup's time (a named-table pull of
//! 8,803 rows, one node: 221 µs against a dense space's 32 µs, 70 % of its samples on the
//! shard lock); epoch-based maps (`papaya`, `scc`) pay a comparable fence per guard unless the
//! guard is held across a batch, which every store path would then have to carry. This
//! table needs neither, because it has one writer and never frees an entry.
//!
//! Entry numbers are a stable iteration order: a cursor into them lets background work visit
//! the store's keys in bounded chunks.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crate::id::Key;

/// Entries in arena chunk 0; chunk `c` holds `ENTRY_BASE << c`.
const ENTRY_BASE_SHIFT: u32 = 12;
/// Chunks 0..=20 hold more than 2^32 entries.
const ENTRY_CHUNKS: usize = 21;
/// Slots of a new sparse index's table (a power of two).
const FIRST_SLOTS: usize = 1 << 10;
/// Entries copied into the growing table per insert. It starts when the readers' table is 3/8
/// full, so it holds every entry after 3/56 of the old table's slots more inserts, when that
/// is under 0.43 full: tables run between 0.21 and 0.43 full (0.25 and 0.5 when grown at once).
const MIGRATE_PER_INSERT: u32 = 8;
const _: () = assert!(
    FIRST_SLOTS.is_power_of_two() && FIRST_SLOTS >= 2,
    "`Slots::home` shifts by 64 − log2(slots)"
);

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
    /// The table readers probe: slots of entry numbers plus one (0: empty).
    table: AtomicPtr<Slots>,
    /// Tables replaced by larger ones, freed with the index; protocol-only.
    retired: UnsafeCell<Vec<*mut Slots>>,
    /// The larger table being filled, not yet seen by readers, and how many entries (the first
    /// ones, in entry order) it holds; protocol-only.
    growing: UnsafeCell<Option<(*mut Slots, u32)>>,
    chunks: [AtomicPtr<Entry>; ENTRY_CHUNKS],
    /// Entries handed out: written by the protocol only (after the entry's key), read by
    /// anyone iterating (the checkpoint writer scans from a worker thread).
    len: AtomicU64,
}

/// One table of the sparse index: a power-of-two number of slots.
struct Slots(Box<[AtomicU32]>);

impl Slots {
    fn new(len: usize) -> *mut Self {
        debug_assert!(len.is_power_of_two() && len >= FIRST_SLOTS);
        let slots = Box::<[AtomicU32]>::new_zeroed_slice(len);
        // SAFETY: the all-zero bit pattern is a valid `AtomicU32` (it is `u32` 0: empty).
        Box::into_raw(Box::new(Self(unsafe { slots.assume_init() })))
    }

    /// Where `key`'s probe starts: Fibonacci hashing, the product's top bits (keys are
    /// trusted: they come from the cluster's own apps and peers).
    #[inline(always)]
    fn home(&self, key: Key) -> usize {
        let bits = self.0.len().trailing_zeros();
        let mixed = (key ^ (key >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mixed >> (64 - bits)) as usize
    }

    /// Writer only: puts `number + 1` into the first empty slot of `key`'s probe.
    fn put(&self, key: Key, number: u32, order: Ordering) {
        let mask = self.0.len() - 1;
        let mut at = self.home(key);
        while self.0[at].load(Ordering::Relaxed) != 0 {
            at = (at + 1) & mask;
        }
        self.0[at].store(number + 1, order);
    }
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
                table: AtomicPtr::new(Slots::new(FIRST_SLOTS)),
                retired: UnsafeCell::new(Vec::new()),
                growing: UnsafeCell::new(None),
                chunks: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
                len: AtomicU64::new(0),
            }),
        }
    }

    /// `key`'s state word, if the key has one (dense: in range; sparse: seen here).
    #[inline(always)]
    pub(super) fn get(&self, key: Key) -> Option<&AtomicU64> {
        if let Some(state) = self.dense.get(key as usize) {
            return Some(state);
        }
        Some(&self.sparse.as_ref()?.find(key)?.state)
    }

    /// Protocol only: `key`'s state word, created (zero) if the key has none. `None` only for a
    /// dense key out of range.
    pub(super) fn get_or_insert(&self, key: Key) -> Option<&AtomicU64> {
        match &self.sparse {
            None => self.dense.get(key as usize),
            Some(sparse) => {
                if let Some(entry) = sparse.find(key) {
                    return Some(&entry.state);
                }
                let number = sparse.push(key);
                sparse.publish(key, number);
                Some(&sparse.entry(number).state)
            }
        }
    }

    /// Starts loading where `key`'s lookup begins (its dense word, or its sparse probe's first
    /// slot), so that a batch's later lookups overlap the earlier ones' cache misses.
    #[inline(always)]
    pub(super) fn prefetch(&self, key: Key) {
        let at = match (self.dense.get(key as usize), &self.sparse) {
            (Some(state), _) => state.as_ptr().cast_const(),
            (None, Some(sparse)) => {
                // SAFETY: as in `find`: a published table, never freed while the index lives.
                let table = unsafe { &*sparse.table.load(Ordering::Acquire) };
                table.0[table.home(key)].as_ptr().cast_const().cast()
            }
            (None, None) => return,
        };
        super::prefetch(at.cast());
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
            // Pairs with `push`'s release store: entries below it have their keys.
            Some(sparse) => sparse.len.load(Ordering::Acquire),
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
    /// `key`'s entry, if it has one. Lock-free: loads only.
    #[inline(always)]
    fn find(&self, key: Key) -> Option<&Entry> {
        // SAFETY: the table was published with `Release` after its slots were written, and no
        // table is freed while the index lives.
        let table = unsafe { &*self.table.load(Ordering::Acquire) };
        let mask = table.0.len() - 1;
        let mut at = table.home(key);
        loop {
            let number = table.0[at].load(Ordering::Acquire);
            if number == 0 {
                return None;
            }
            let entry = self.entry(number - 1);
            if entry.key == key {
                return Some(entry);
            }
            at = (at + 1) & mask;
        }
    }

    /// Protocol only: makes entry `number` (of `key`, just pushed) findable, and copies the
    /// next few entries into the growing table (module docs), publishing it once it holds them
    /// all. Returns the slots written: at most `1 + MIGRATE_PER_INSERT`.
    fn publish(&self, key: Key, number: u32) -> usize {
        // SAFETY: protocol-only (module docs): no other thread writes the tables, `growing` or
        // `retired`.
        let table = unsafe { &*self.table.load(Ordering::Relaxed) };
        let growing = unsafe { &mut *self.growing.get() };
        table.put(key, number, Ordering::Release);
        // `len` already counts the new entry.
        let len = self.len.load(Ordering::Relaxed);
        debug_assert!(u64::from(number) + 1 == len && self.entry(number).key == key);
        debug_assert!(
            2 * len <= table.0.len() as u64,
            "the readers' table is at most half full"
        );
        if growing.is_none() && 8 * len > 3 * table.0.len() as u64 {
            *growing = Some((Slots::new(table.0.len() * 2), 0));
        }
        let Some((larger, copied)) = growing else {
            return 1;
        };
        // SAFETY: allocated by `Slots::new`, not yet shared.
        let slots = unsafe { &**larger };
        let upto = (*copied + MIGRATE_PER_INSERT).min(len as u32);
        // In entry order: the arena is read sequentially.
        for n in *copied..upto {
            slots.put(self.entry(n).key, n, Ordering::Relaxed);
        }
        let written = 1 + (upto - *copied) as usize;
        *copied = upto;
        if u64::from(upto) == len {
            // Every entry is in it: readers switch (`Release`: after its slots).
            let old = self.table.swap(*larger, Ordering::Release);
            // SAFETY: protocol-only.
            unsafe { &mut *self.retired.get() }.push(old);
            *growing = None;
        }
        written
    }

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
        // Protocol-only (module docs): no other thread writes `len`.
        let len = self.len.load(Ordering::Relaxed);
        // Below `u32::MAX`: slots hold the number plus one.
        assert!(
            len < u64::from(u32::MAX),
            "a node indexes fewer than 2^32 sparse keys"
        );
        let entry = len as u32;
        let (chunk, within) = Self::position(entry);
        let mut base = self.chunks[chunk].load(Ordering::Acquire);
        if base.is_null() {
            let size = 1usize << (ENTRY_BASE_SHIFT as usize + chunk);
            // Zeroed (a valid `Entry`), so that the kernel backs the pages only as entries are
            // used, instead of this thread writing the whole chunk while holding the node lock.
            let entries = Box::<[Entry]>::new_zeroed_slice(size);
            // SAFETY: the all-zero bit pattern is a valid `Entry` (key 0, state 0).
            let entries = unsafe { entries.assume_init() };
            base = Box::into_raw(entries).cast::<Entry>();
            self.chunks[chunk].store(base, Ordering::Release);
        }
        // SAFETY: the slot is inside the chunk and not yet reachable by any other thread (its
        // number is published through the table only after this returns).
        unsafe { (*base.add(within)).key = key };
        self.len.store(len + 1, Ordering::Release);
        entry
    }
}

impl Drop for SparseIndex {
    fn drop(&mut self) {
        let growing = self.growing.get_mut().take().map(|(table, _)| table);
        let tables = self.retired.get_mut().drain(..);
        for table in tables.chain([*self.table.get_mut()]).chain(growing) {
            // SAFETY: allocated by `Slots::new`, each freed once (the current and the growing
            // table are never in `retired`); no reader remains once the index drops.
            drop(unsafe { Box::from_raw(table) });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::SmallRng};
    use std::sync::atomic::AtomicUsize;

    /// Keys anywhere in `u64` (0, `u64::MAX`, and many that share their probe's start) keep
    /// their state word through every growth of the table, and keys never inserted are absent.
    #[test]
    fn sparse_keys_keep_their_words_through_growth() {
        let seed = 0x51de_u64;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let index = Index::sparse();
        // First 40 keys whose probes all start at the first table's last slot: inserted
        // first, they fill it and wrap around to slot 0 and on.
        let probe = Slots::new(FIRST_SLOTS);
        // SAFETY: just allocated; freed below, and no one else has it.
        let first = unsafe { &*probe };
        let mut keys: Vec<Key> = (1..)
            .filter(|&k| first.home(k) == FIRST_SLOTS - 1)
            .take(40)
            .collect();
        // SAFETY: from `Slots::new`, freed once.
        drop(unsafe { Box::from_raw(probe) });
        keys.extend([0, u64::MAX, 1 << 56, (1 << 56) | 1]);
        keys.extend((0..50_000).map(|_| rng.random::<u64>()));
        let mut seen = std::collections::HashSet::new();
        keys.retain(|&k| seen.insert(k));
        let mut words = Vec::new();
        for (n, &key) in keys.iter().enumerate() {
            let word = index.get_or_insert(key).unwrap();
            word.store(key ^ 0xabcd, Ordering::Relaxed);
            words.push(word as *const AtomicU64);
            // The same word again, and an earlier key still found, at every size.
            assert!(std::ptr::eq(index.get_or_insert(key).unwrap(), word));
            let earlier = keys[n / 2];
            assert_eq!(
                index.get(earlier).unwrap().load(Ordering::Relaxed),
                earlier ^ 0xabcd
            );
        }
        assert_eq!(index.len(), keys.len() as u64);
        for (&key, &word) in keys.iter().zip(&words) {
            let found = index.get(key).unwrap();
            assert!(std::ptr::eq(found, word), "key {key:#x} moved");
            assert_eq!(found.load(Ordering::Relaxed), key ^ 0xabcd);
        }
        for _ in 0..10_000 {
            let key = rng.random::<u64>();
            if !seen.contains(&key) {
                assert!(index.get(key).is_none(), "key {key:#x} never inserted");
            }
        }
        for i in 0..index.len() {
            let (key, word) = index.at(i);
            assert!(std::ptr::eq(index.get(key).unwrap(), word));
        }
    }

    /// No insert pays for a whole table: each writes at most `1 + MIGRATE_PER_INSERT` slots,
    /// the readers' table is never over half full, and it is replaced by larger ones (each
    /// holding every entry so far) as the index grows.
    #[test]
    fn the_table_grows_in_steps_of_a_few_slots() {
        let seed = 0x9_7075_u64;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let index = Index::sparse();
        let sparse = index.sparse.as_ref().unwrap();
        let (mut tables, mut last) = (1, sparse.table.load(Ordering::Relaxed));
        for n in 0..300_000u32 {
            let key = rng.random::<u64>();
            assert!(
                sparse.find(key).is_none(),
                "seed {seed}: key {key:#x} twice"
            );
            let number = sparse.push(key);
            assert_eq!(number, n);
            let written = sparse.publish(key, number);
            assert!(
                written <= 1 + MIGRATE_PER_INSERT as usize,
                "insert {n} wrote {written}"
            );
            let table = sparse.table.load(Ordering::Relaxed);
            // SAFETY: the index's current table, alive while the index is.
            let slots = unsafe { &*table }.0.len() as u64;
            assert!(2 * u64::from(n + 1) <= slots, "insert {n}: {slots} slots");
            if table != last {
                (tables, last) = (tables + 1, table);
                // Every entry so far is in the table readers now probe.
                for m in (0..=n).step_by(97) {
                    assert_eq!(
                        sparse.find(sparse.entry(m).key).map(|e| e.key),
                        Some(sparse.entry(m).key)
                    );
                }
            }
        }
        // 1024 slots, then doubled at least until 300,000 entries fit at a third full.
        assert!(tables >= 10, "{tables} tables");
    }

    /// Readers probing while the writer inserts and grows the table find every key the writer
    /// published before they looked, with the word the writer wrote before publishing it.
    #[test]
    fn readers_find_every_published_key_while_the_table_grows() {
        let seed = 0x7ab1e_u64;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let keys: Vec<Key> = (0..200_000).map(|_| rng.random::<u64>() | 1).collect();
        /// The store's sharing, without the store.
        struct Shared(Index);
        // SAFETY: as for `Store`: only this test's main thread inserts (the one writer).
        unsafe impl Sync for Shared {}
        let shared = Shared(Index::sparse());
        let index = &shared.0;
        let published = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for reader in 0..2u64 {
                let (shared, keys, published) = (&shared, &keys, &published);
                scope.spawn(move || {
                    let index = &shared.0;
                    let mut rng = SmallRng::seed_from_u64(seed + 1 + reader);
                    loop {
                        let upto = published.load(Ordering::Acquire);
                        if upto > 0 {
                            let key = keys[rng.random_range(0..upto)];
                            let word = index
                                .get(key)
                                .unwrap_or_else(|| panic!("key {key:#x} published but not found"));
                            assert_eq!(word.load(Ordering::Relaxed), key);
                        }
                        if upto == keys.len() {
                            break;
                        }
                    }
                });
            }
            for (n, &key) in keys.iter().enumerate() {
                if index.get(key).is_none() {
                    index
                        .get_or_insert(key)
                        .unwrap()
                        .store(key, Ordering::Relaxed);
                }
                published.store(n + 1, Ordering::Release);
            }
        });
    }

    /// Not a test: the longest single insert while a sparse index grows to `ROAM_INDEX_KEYS`
    /// keys (default 10^8; about 3 GB), the pause a node's protocol would see at that insert.
    /// `cargo test --release -p roam-core --lib index_growth_pause -- --ignored --nocapture`
    /// (docs/benchmarks.md, "The sparse index grows in steps").
    #[test]
    #[ignore = "a measurement: minutes and gigabytes"]
    // It reads the wall clock to time the index, not to drive the core.
    #[allow(clippy::disallowed_methods)]
    fn index_growth_pause() {
        let n: u64 = std::env::var("ROAM_INDEX_KEYS").map_or(100_000_000, |v| v.parse().unwrap());
        let index = Index::sparse();
        let mut rng = SmallRng::seed_from_u64(1);
        let (mut worst, mut worst_at) = (std::time::Duration::ZERO, 0);
        let mut over_1ms = 0;
        let start = std::time::Instant::now();
        for i in 0..n {
            let key = rng.random::<u64>();
            let t = std::time::Instant::now();
            index.get_or_insert(key).unwrap();
            let took = t.elapsed();
            over_1ms += u64::from(took.as_micros() > 1_000);
            if took > worst {
                (worst, worst_at) = (took, i);
            }
        }
        println!(
            "{n} inserts in {:.1} s; longest {:.1} ms (insert {worst_at}); {over_1ms} over 1 ms",
            start.elapsed().as_secs_f64(),
            worst.as_secs_f64() * 1e3
        );
    }
}
