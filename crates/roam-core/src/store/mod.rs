//! The node-local parameter store that worker threads access directly.
//!
//! Records live in value areas (`area.rs`) addressed by slot; a key's slot is found through its
//! 64-bit state word (`index.rs` maps keys to words: an array for dense key spaces, a sharded map
//! for sparse ones), which also carries the key's latch and how this node holds the key:
//!
//! ```text
//!  bit 63     LATCH     held while one thread reads or writes the key's record (or moves it)
//!  bit 62     LOCAL     this node owns the key: its record is in the value area
//!  bit 61     TRANSIT   the key is on its way here; operations must queue in the protocol
//!  bit 60     REPLICA   this node holds a replica: value and synced base in the replica area
//!  bits 36-59 VERSION   bumped by every latch release: optimistic reads validate against it
//!  bit 35     DIRTY     a push reached the record since the protocol last looked (set by
//!                       pushes; cleared by `take_delta` on replicas, `take_dirty` on owned
//!                       records): sync rounds skip the others unlatched
//!  bits 32-34 CLOCK     an access clock for eviction policies (kept across latching)
//!  bits 0-31  slot      where the record is, meaningful only while LOCAL or REPLICA
//! ```
//!
//! A record is the key's visible values followed by its hidden state (`RecordLayout`): pulls copy
//! the visible part, pushes combine into it, relocation moves the whole record. A replica's
//! record is its value followed by its *synced base*, the value as of the last synchronisation:
//! a push to a replica adds into the value only (exactly as into an owned record), and the
//! pending *delta* — this node's pushes not yet sent to the other replicas — is `value − base`,
//! computed when the protocol takes it (`take_delta`, once per sync round, instead of once per
//! push). As in NuPS, the delta then carries the rounding of the additions into the value.
//!
//! Invariants:
//! - A record is only written by the thread holding its key's latch, and only while LOCAL or
//!   REPLICA is set; acquiring the latch is a compare-and-swap on the exact word observed, so
//!   "is held here" and "latched" are checked atomically and a stale slot is never written.
//!   LOCAL and REPLICA are never both set.
//! - In a store of short uniform values (at most 16 floats), pulls read without the latch, as a
//!   sequence lock: read the word (unlatched, held), copy the
//!   values, read the word again; the copy counts only if the word did not change, and every
//!   latch release bumps VERSION, so a copy that overlapped any write (or a move of the key, or
//!   a reuse of its slot) is retried. Record values are accessed through atomics (relaxed; plain
//!   moves on x86), so such an overlapping copy is a benign, discarded read rather than a data
//!   race. A copy is wrongly accepted only if exactly a multiple of 2^24 (16.7 million) writes
//!   of the key completed while it was in flight — a reader preempted mid-copy for that long,
//!   and an exact multiple. Other stores (longer or per-key values) read under the latch, with
//!   plain vectorised copies: atomic accesses are not vectorised, which cost long values more
//!   than the saved lock (quick suite, docs/benchmarks.md).
//! - Only the protocol (one thread at a time, under the node lock) creates state words, inserts
//!   or removes records and allocates slots, so none of that needs synchronisation with workers.
//! - Areas never free or move memory while the store lives, so a pointer read under the latch
//!   stays valid.
//!
//! The hot path is therefore, for a push, one CAS, an add and a release store, and for a pull
//! two loads around a copy (short values) or the push's latch around a copy: no message, no
//! protocol lock, no allocation. Background work visits the store's keys in
//! bounded chunks through [`Store::scan`].

mod area;
mod index;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use crate::id::Key;
use crate::keyspace::{KeySpace, ValueLengths};
use crate::optim::Optimizer;
use crate::stats::WorkerCounters;
use area::{Area, Scale, UniformView};
use index::Index;

const LATCH: u64 = 1 << 63;
const LOCAL: u64 = 1 << 62;
const TRANSIT: u64 = 1 << 61;
const REPLICA: u64 = 1 << 60;
const HELD: u64 = LOCAL | REPLICA;
const VERSION_ONE: u64 = 1 << 36;
const VERSION_MASK: u64 = ((1 << 24) - 1) << 36;
const DIRTY: u64 = 1 << 35;
const CLOCK_MASK: u64 = 0x7 << 32;
/// Longest uniform value that pulls read optimistically. Optimistic readers need every value
/// access to be atomic, and atomic accesses are not vectorised: longer values are copied and
/// added faster under the latch with plain vector loads and stores (measured: the quick suite's
/// KGE and MF epochs, docs/benchmarks.md).
const MAX_OPTIMISTIC_LEN: usize = 16;
/// What a change of a key's flags or slot keeps from its previous word.
const KEPT: u64 = CLOCK_MASK | VERSION_MASK;
const SLOT_MASK: u64 = u32::MAX as u64;

/// Calls a batch method (`$recv.$method::<..>(..)`) with its length parameter `L` set to `len`
/// at compile time for the optimistic lengths `1..=MAX_OPTIMISTIC_LEN`, else to 0 (the length
/// known only at run time; such stores read under the latch).
macro_rules! by_len {
    ($len:expr, $recv:ident . $method:ident $(::<$($g:tt),*>)? ($($arg:expr),* $(,)?)) => {
        match $len {
            1 => $recv.$method::<$($($g,)*)? 1>($($arg),*),
            2 => $recv.$method::<$($($g,)*)? 2>($($arg),*),
            3 => $recv.$method::<$($($g,)*)? 3>($($arg),*),
            4 => $recv.$method::<$($($g,)*)? 4>($($arg),*),
            5 => $recv.$method::<$($($g,)*)? 5>($($arg),*),
            6 => $recv.$method::<$($($g,)*)? 6>($($arg),*),
            7 => $recv.$method::<$($($g,)*)? 7>($($arg),*),
            8 => $recv.$method::<$($($g,)*)? 8>($($arg),*),
            9 => $recv.$method::<$($($g,)*)? 9>($($arg),*),
            10 => $recv.$method::<$($($g,)*)? 10>($($arg),*),
            11 => $recv.$method::<$($($g,)*)? 11>($($arg),*),
            12 => $recv.$method::<$($($g,)*)? 12>($($arg),*),
            13 => $recv.$method::<$($($g,)*)? 13>($($arg),*),
            14 => $recv.$method::<$($($g,)*)? 14>($($arg),*),
            15 => $recv.$method::<$($($g,)*)? 15>($($arg),*),
            16 => $recv.$method::<$($($g,)*)? 16>($($arg),*),
            _ => $recv.$method::<$($($g,)*)? 0>($($arg),*),
        }
    };
}
const _: () = assert!(
    MAX_OPTIMISTIC_LEN == 16,
    "by_len! lists the optimistic lengths"
);
// After `by_len!`, which it uses.
mod grad;

/// How an update combines with the stored value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateMode {
    /// `value += update` (a gradient push).
    Add,
    /// `value = update` (an overwrite).
    Set,
    /// The key space's optimizer applies `update` as a gradient to the whole record (visible
    /// values and the optimizer's hidden state; `optim.rs`).
    Gradient,
}

/// Residency of a key's owned copy in this store. (A replica held here is reported by
/// [`Store::has_replica`]: for ownership, a replicated key is held elsewhere.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// The value is here.
    Local,
    /// The key is being moved here; operations queue until it lands.
    InTransit,
    /// The value is elsewhere.
    Remote,
}

/// How a record visited by [`Store::scan`] is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    /// The owned record: visible values then hidden state.
    Owned,
    /// A replica: value then pending delta.
    Replica,
}

/// A node's parameter store. See the module docs for the invariants.
pub struct Store {
    space: KeySpace,
    index: Index,
    /// The owned records' area, then the replicas'.
    areas: [Area; 2],
    /// The uniform visible length, or 0 with per-key lengths.
    uniform_len: usize,
    /// Whether pulls read without the latch (a sequence lock; see the module docs). Chosen
    /// once per store, so that readers and writers of one store never mix protocols.
    optimistic: bool,
    /// Keys owned here, kept by the protocol's inserts and removes (read by stats from any
    /// thread, so never computed by walking the index).
    owned: AtomicU64,
    /// The local-access counters of the workers that use this store (registered by their
    /// fronts), so that the protocol can measure training progress without touching the hot
    /// path: each worker only bumps its own counters.
    workers: parking_lot::Mutex<Vec<Arc<WorkerCounters>>>,
}

// SAFETY: records are only accessed under the per-key latch (see module invariants); the areas'
// and index's protocol-only parts are only touched by protocol methods, which the node lock
// serialises.
unsafe impl Sync for Store {}
// SAFETY: the areas own their chunk allocations; moving the store moves their ownership.
unsafe impl Send for Store {}

impl Store {
    /// An empty store for `space` (no key local).
    pub fn new(space: KeySpace) -> Self {
        let layout = space.layout();
        let (values, replicas) = match space.lengths() {
            ValueLengths::Uniform(len) => {
                let len = *len as usize;
                (
                    Area::uniform(layout.record_len(len)),
                    Area::uniform(2 * len),
                )
            }
            ValueLengths::PerKey(_) => {
                let values = Scale {
                    value: 1 + u64::from(layout.hidden_per_value),
                    key: u64::from(layout.hidden_per_key),
                };
                let replicas = Scale { value: 2, key: 0 };
                (Area::by_key(&space, values), Area::by_key(&space, replicas))
            }
        };
        Self {
            index: if space.is_sparse() {
                Index::sparse()
            } else {
                Index::dense(space.num_keys() as usize)
            },
            areas: [values, replicas],
            uniform_len: space.uniform_len().unwrap_or(0),
            optimistic: space
                .uniform_len()
                .is_some_and(|len| len <= MAX_OPTIMISTIC_LEN),
            space,
            owned: AtomicU64::new(0),
            workers: parking_lot::Mutex::default(),
        }
    }

    /// Registers a worker's local-access counters (its fronts do; the same counters twice
    /// count once).
    pub fn register_worker(&self, counters: Arc<WorkerCounters>) {
        let mut workers = self.workers.lock();
        if !workers.iter().any(|c| Arc::ptr_eq(c, &counters)) {
            workers.push(counters);
        }
    }

    /// Keys pushed or set straight into this store by its registered workers so far: the
    /// node's training progress, as the replica sync's work clock counts it.
    pub fn local_updates(&self) -> u64 {
        let workers = self.workers.lock();
        workers
            .iter()
            .map(|c| c.local_push_keys.load(Ordering::Relaxed))
            .sum()
    }

    /// The key space this store serves.
    pub fn space(&self) -> &KeySpace {
        &self.space
    }

    /// Residency of `key`'s owned copy at this instant (it may change right after).
    pub fn residency(&self, key: Key) -> Residency {
        let s = self.word(key);
        if s & LOCAL != 0 {
            Residency::Local
        } else if s & TRANSIT != 0 {
            Residency::InTransit
        } else {
            Residency::Remote
        }
    }

    /// Hints the CPU to fetch `key`'s state word (dense spaces; a sparse lookup is a hash
    /// probe that a prefetch of the word cannot hide), ahead of a check of where `key` is.
    #[inline]
    pub fn prefetch_word(&self, key: Key) {
        if let Some(state) = self.index.dense_words().get(key as usize) {
            prefetch(state.as_ptr().cast());
        }
    }

    /// Whether this node holds a replica of `key`.
    pub fn has_replica(&self, key: Key) -> bool {
        self.word(key) & REPLICA != 0
    }

    /// Whether `key` has a state word here: always for a key of a dense space; for a sparse
    /// space, once this node has held or routed the key (it is never forgotten).
    pub fn is_known(&self, key: Key) -> bool {
        self.index.get(key).is_some()
    }

    fn word(&self, key: Key) -> u64 {
        self.index
            .get(key)
            .map_or(0, |state| state.load(Ordering::Acquire))
    }

    /// Reads `key`'s visible values into `out` if the key is held here (owned or replica).
    /// `out.len()` must equal the key's length.
    #[inline]
    pub fn pull_local(&self, key: Key, out: &mut [f32]) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        self.read(state, |s| {
            // SAFETY: held when observed, so the slot was allocated for this key.
            let record = unsafe { self.record(key, s) };
            load_values::<0>(out, &record[..out.len()], self.plain());
        })
    }

    /// Applies `update` to `key`'s visible values if the key is held here; a `Set` applies only
    /// to an owned key (what overwriting a replica means is the protocol's decision).
    /// `update.len()` must equal the key's length.
    #[inline]
    pub fn push_local(&self, key: Key, update: &[f32], mode: UpdateMode) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        if mode == UpdateMode::Gradient {
            return self.step_local(key, state, update);
        }
        let accept = if mode == UpdateMode::Add { HELD } else { LOCAL };
        latched_as(state, accept, |s| {
            // SAFETY: latched and held.
            let record = unsafe { self.record(key, s) };
            apply_to_record(record, update, mode, self.plain());
            dirtied(s)
        })
    }

    /// Pulls a batch of keys of the uniform length `len` into `out` (`keys.len() * len` values),
    /// calling `miss(i)` for each key `i` that is not held here. Prefetches a few keys ahead, so
    /// that the cache misses of a random batch overlap instead of queuing behind each latch.
    /// Stops at the first key outside the key space and returns it (reads change nothing, so
    /// checking while copying saves the caller a separate pass over the batch).
    #[inline]
    pub fn pull_batch_local(
        &self,
        keys: &[Key],
        out: &mut [f32],
        len: usize,
        miss: impl FnMut(usize),
    ) -> Result<(), Key> {
        self.assert_uniform(len);
        debug_assert_eq!(out.len(), keys.len() * len);
        by_len!(len, self.pull_batch(keys, out, len, miss))
    }

    /// [`Store::pull_batch_local`] with the length `L` known at compile time (0: only at run
    /// time), so that the copy of a short value is a few unrolled moves.
    #[inline(always)]
    fn pull_batch<const L: usize>(
        &self,
        keys: &[Key],
        out: &mut [f32],
        len: usize,
        mut miss: impl FnMut(usize),
    ) -> Result<(), Key> {
        // Compile-time lengths are exactly the optimistic ones (see `by_len!`).
        debug_assert_eq!(L > 0, self.optimistic);
        let len = if L > 0 { L } else { len };
        let (values, replicas) = (self.values().uniform_view(), self.replicas().uniform_view());
        for (i, (&key, here)) in keys.iter().zip(out.chunks_exact_mut(len)).enumerate() {
            self.prefetch_ahead(values, replicas, keys, i);
            let Some(state) = self.index.get(key) else {
                if !self.space.contains(key) {
                    return Err(key);
                }
                miss(i);
                continue;
            };
            let copy = |s: u64| {
                let area = if s & REPLICA == 0 { values } else { replicas };
                // SAFETY: held when observed, so the slot was allocated in this area; uniform
                // records start with `len` visible values.
                let visible = unsafe { area.prefix((s & SLOT_MASK) as u32, len) };
                load_values::<L>(here, visible, L == 0);
            };
            let hit = if L > 0 {
                read_consistent(state, copy)
            } else {
                latched(state, HELD, copy)
            };
            if !hit {
                miss(i);
            }
        }
        Ok(())
    }

    /// Applies a batch of updates of the uniform length `len`; like [`Store::pull_batch_local`].
    #[inline]
    pub fn push_batch_local(
        &self,
        keys: &[Key],
        update: &[f32],
        len: usize,
        mode: UpdateMode,
        miss: impl FnMut(usize),
    ) {
        self.assert_uniform(len);
        debug_assert_eq!(update.len(), keys.len() * len);
        // One loop per mode and short length, so that neither the mode nor the accepted flags
        // are tested per key, and short values are added with unrolled moves.
        match mode {
            UpdateMode::Add => by_len!(len, self.push_batch::<false>(keys, update, len, miss)),
            UpdateMode::Set => by_len!(len, self.push_batch::<true>(keys, update, len, miss)),
            UpdateMode::Gradient => self.push_gradients_local(keys, update, len, miss),
        }
    }

    #[inline(always)]
    fn push_batch<const SET: bool, const L: usize>(
        &self,
        keys: &[Key],
        update: &[f32],
        len: usize,
        mut miss: impl FnMut(usize),
    ) {
        debug_assert_eq!(L > 0, self.optimistic);
        let (len, plain) = if L > 0 {
            (L, false)
        } else {
            (len, self.plain())
        };
        let accept = if SET { LOCAL } else { HELD };
        let (values, replicas) = (self.values().uniform_view(), self.replicas().uniform_view());
        for (i, (&key, vals)) in keys.iter().zip(update.chunks_exact(len)).enumerate() {
            self.prefetch_ahead(values, replicas, keys, i);
            let hit = self.index.get(key).is_some_and(|state| {
                latched_as(state, accept, |s| {
                    let slot = (s & SLOT_MASK) as u32;
                    if s & REPLICA == 0 {
                        // SAFETY: latched and owned: the slot is in the value area, and
                        // records start with `len` visible values.
                        let visible = unsafe { values.prefix(slot, len) };
                        if SET {
                            store_values(visible, vals, plain);
                        } else {
                            add_values::<L>(visible, vals, plain);
                        }
                        s | DIRTY
                    } else {
                        // SAFETY: latched and a replica: the slot is in the replica area, and
                        // replica records start with the `len` values of the replica.
                        let value = unsafe { replicas.prefix(slot, len) };
                        add_values::<L>(value, vals, plain);
                        s | DIRTY
                    }
                })
            });
            if !hit {
                miss(i);
            }
        }
    }

    /// The batch paths address slots by the uniform length: any other length would address
    /// the wrong values, so it is refused outright (once per batch).
    #[inline(always)]
    fn assert_uniform(&self, len: usize) {
        assert!(
            len != 0 && len == self.uniform_len,
            "batch of length {len} on a store of uniform length {}",
            self.uniform_len
        );
    }

    /// Prefetches the state word of key `i + 2 * D` and the record of key `i + D` (dense
    /// spaces; a sparse lookup is a hash probe that a prefetch of the word cannot hide).
    #[inline(always)]
    fn prefetch_ahead(
        &self,
        values: UniformView<'_>,
        replicas: UniformView<'_>,
        keys: &[Key],
        i: usize,
    ) {
        const D: usize = 8;
        let words = self.index.dense_words();
        if let Some(&far) = keys.get(i + 2 * D)
            && let Some(state) = words.get(far as usize)
        {
            prefetch(state.as_ptr().cast());
        }
        if let Some(&near) = keys.get(i + D)
            && let Some(state) = words.get(near as usize)
        {
            let s = state.load(Ordering::Relaxed);
            // Owned records and replicas (the hot keys of NuPS runs); other keys are not here.
            let area = if s & LOCAL != 0 {
                Some(values)
            } else if s & REPLICA != 0 {
                Some(replicas)
            } else {
                None
            };
            if let Some(area) = area {
                let (base, offset) = area.locate((s & SLOT_MASK) as u32);
                if !base.is_null() {
                    // Only an address for the prefetch hint: never dereferenced here.
                    prefetch(base.wrapping_add(offset).cast());
                }
            }
        }
    }

    /// Runs `read` on the record held under `state` consistently: optimistically (see
    /// [`read_consistent`]) or under the latch, as this store reads.
    #[inline(always)]
    fn read(&self, state: &AtomicU64, read: impl FnMut(u64)) -> bool {
        if self.optimistic {
            read_consistent(state, read)
        } else {
            latched(state, HELD, read)
        }
    }

    /// Whether values are accessed with plain loads and stores (only ever under the latch).
    #[inline(always)]
    fn plain(&self) -> bool {
        !self.optimistic
    }

    #[inline(always)]
    fn area(&self, s: u64) -> &Area {
        if s & REPLICA == 0 {
            &self.areas[0]
        } else {
            &self.areas[1]
        }
    }

    fn values(&self) -> &Area {
        &self.areas[0]
    }

    fn replicas(&self) -> &Area {
        &self.areas[1]
    }

    /// The record of `key` whose word (observed before latching) is `s`.
    ///
    /// # Safety
    /// `s` was observed as `key`'s word with LOCAL or REPLICA set (writers must also hold the
    /// latch).
    #[inline(always)]
    unsafe fn record(&self, key: Key, s: u64) -> &[AtomicU32] {
        // SAFETY: held, so the slot was allocated for this key in this area.
        unsafe { self.area(s).record(key, (s & SLOT_MASK) as u32) }
    }

    /// Latches `state` whatever its flags; returns the word observed before latching.
    fn latch(state: &AtomicU64) -> u64 {
        let mut spins = 0u32;
        loop {
            let s = state.load(Ordering::Relaxed);
            if s & LATCH == 0
                && state
                    .compare_exchange_weak(s, s | LATCH, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Writes to the record must not become visible before the latch (see
                // `read_consistent`).
                fence(Ordering::Release);
                return s;
            }
            spins = backoff(spins);
        }
    }

    /// Protocol only: the state word of `key`, created if the key is new here (sparse).
    fn state_for_protocol(&self, key: Key) -> &AtomicU64 {
        self.index
            .get_or_insert(key)
            .unwrap_or_else(|| panic!("key {key} is outside the key space; callers validate"))
    }

    /// Protocol only: makes `key` owned here with `record` (its whole record: visible values
    /// then hidden state; the length must match). Returns false, changing nothing, if the key
    /// was already held here (owned or as a replica).
    pub fn insert(&self, key: Key, record: &[f32]) -> bool {
        assert_eq!(
            record.len(),
            self.space.record_len(key),
            "record of key {key}"
        );
        self.insert_held(key, LOCAL, |values| {
            store_values(values, record, self.plain())
        })
    }

    /// Protocol only (a checkpoint of a sparse store, which is not in key order): copies the
    /// whole record of `key`, owned here, into `out` (resized to it). Returns false if the key
    /// is not owned here.
    pub fn read_record(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.index
            .get(key)
            .and_then(|state| self.copy_record(key, state, out))
            == Some(Holding::Owned)
    }

    /// A consistent copy of the whole record of `key` (index entry `state`) into `out`, and
    /// whether it is owned or a replica (`None`: not held here).
    fn copy_record(&self, key: Key, state: &AtomicU64, out: &mut Vec<f32>) -> Option<Holding> {
        let mut holding = Holding::Owned;
        let held = self.read(state, |s| {
            // SAFETY: held when observed (a torn copy is retried by `read`).
            let record = unsafe { self.record(key, s) };
            out.resize(record.len(), 0.0);
            load_values::<0>(out, record, self.plain());
            holding = if s & REPLICA != 0 {
                Holding::Replica
            } else {
                Holding::Owned
            };
        });
        held.then_some(holding)
    }

    /// Protocol only (a restore): overwrites the whole record of `key`, owned here, with
    /// `record` (visible values then hidden state). Returns false, changing nothing, if the
    /// key is not owned here.
    pub fn overwrite(&self, key: Key, record: &[f32]) -> bool {
        assert_eq!(
            record.len(),
            self.space.record_len(key),
            "record of key {key}"
        );
        let Some(state) = self.index.get(key) else {
            return false;
        };
        latched(state, LOCAL, |s| {
            // SAFETY: latched, and owned when observed.
            let values = unsafe { self.record(key, s) };
            store_values(values, record, self.plain());
        })
    }

    /// Protocol only: makes this node hold a replica of `key` with `value` (visible values) and
    /// an empty delta. Returns false, changing nothing, if the key was already held here.
    pub fn insert_replica(&self, key: Key, value: &[f32]) -> bool {
        self.insert_replica_with(key, value, value)
    }

    /// Protocol only: as [`Store::insert_replica`], with the synced base `base` and the value
    /// `value` (their difference is the pending delta: pushes applied before it was inserted).
    pub fn insert_replica_with(&self, key: Key, value: &[f32], base: &[f32]) -> bool {
        assert_eq!(value.len(), self.space.len(key), "replica of key {key}");
        assert_eq!(base.len(), value.len(), "replica base of key {key}");
        let inserted = self.insert_held(key, REPLICA, |record| {
            let (stored, synced) = record.split_at(value.len());
            store_values(stored, value, self.plain());
            store_values(synced, base, self.plain());
        });
        if inserted && value != base {
            // The delta is pending: the next sync round must take it.
            if let Some(state) = self.index.get(key) {
                latched_as(state, REPLICA, |s| s | DIRTY);
            }
        }
        inserted
    }

    /// Latches `key`; unless it is held here already, allocates a slot in the area of `flag`,
    /// lets `fill` write the record and publishes it with `flag`.
    fn insert_held(&self, key: Key, flag: u64, fill: impl FnOnce(&[AtomicU32])) -> bool {
        let state = self.state_for_protocol(key);
        let s = Self::latch(state);
        if s & HELD != 0 {
            state.store(s, Ordering::Release);
            return false;
        }
        let area = self.area(flag);
        let slot = area.allocate(key);
        // SAFETY: latched; the slot was just allocated for this key and its chunk exists.
        fill(unsafe { area.record(key, slot) });
        state.store(bumped(s & KEPT) | flag | u64::from(slot), Ordering::Release);
        if flag == LOCAL {
            self.owned.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Protocol only: removes `key`'s owned record, appending it (visible values then hidden
    /// state) to `out`. Returns false if the key was not owned here. The key becomes
    /// [`Residency::Remote`].
    pub fn remove(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.remove_held(key, LOCAL, out)
    }

    /// Protocol only: drops this node's replica of `key`, appending its value and then its
    /// synced base to `out`. Returns false if there was no replica here.
    pub fn remove_replica(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.remove_held(key, REPLICA, out)
    }

    fn remove_held(&self, key: Key, flag: u64, out: &mut Vec<f32>) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        let s = Self::latch(state);
        if s & flag == 0 {
            state.store(s, Ordering::Release);
            return false;
        }
        // SAFETY: latched and held.
        let record = unsafe { self.record(key, s) };
        let start = out.len();
        out.resize(start + record.len(), 0.0);
        // Plain (vectorised) copies where the store allows them: a relocation's sender spent
        // more time in this copy, element by element, than in anything else of the protocol.
        load_values::<0>(&mut out[start..], record, self.plain());
        self.area(s).free((s & SLOT_MASK) as u32);
        // A key on its way here stays so (a replica dropped while its owned copy comes).
        state.store(bumped(s & (KEPT | TRANSIT)), Ordering::Release);
        if flag == LOCAL {
            self.owned.fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Protocol only: appends the replica's pending delta of `key` to `out` and clears it.
    /// Returns false, appending nothing, if there is no replica here or no push reached it
    /// since the delta was last taken (checked without the latch: a push still under way is
    /// taken next time).
    pub fn take_delta(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.take_delta_above(key, out, 0.0)
    }

    /// [`Store::take_delta`], but a delta whose L2 norm is below `min_norm` stays pending (and
    /// the replica marked) for a later round: nothing is appended and false is returned.
    pub fn take_delta_above(&self, key: Key, out: &mut Vec<f32>, min_norm: f32) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        if state.load(Ordering::Relaxed) & DIRTY == 0 {
            return false;
        }
        let start = out.len();
        let mut taken = false;
        latched_as(state, REPLICA, |s| {
            // SAFETY: latched and held as a replica.
            let record = unsafe { self.record(key, s) };
            let (value, base) = record.split_at(record.len() / 2);
            let plain = self.plain();
            if plain {
                // SAFETY: the latch holder in a store without optimistic readers.
                let (value, base) = unsafe { (as_plain(value), as_plain(base)) };
                out.extend(value.iter().zip(base.iter()).map(|(v, b)| v - b));
            } else {
                let read = |v: &AtomicU32| {
                    // SAFETY: a valid, aligned `u32` that no other thread writes while we hold
                    // the latch (optimistic readers only read).
                    f32::from_bits(unsafe { v.as_ptr().read() })
                };
                out.extend(value.iter().zip(base).map(|(v, b)| read(v) - read(b)));
            }
            if min_norm > 0.0 {
                let squared: f32 = out[start..].iter().map(|d| d * d).sum();
                if squared < min_norm * min_norm {
                    out.truncate(start);
                    return s;
                }
            }
            if plain {
                // SAFETY: as above.
                unsafe { as_plain(base) }.copy_from_slice(unsafe { as_plain(value) });
            } else {
                for (v, b) in value.iter().zip(base) {
                    b.store(v.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
            taken = true;
            s & !DIRTY
        });
        taken
    }

    /// Protocol only: whether a push reached `key`'s owned record since the last call
    /// (checked without the latch, cleared under it; a push still under way shows next time).
    pub fn take_dirty(&self, key: Key) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        if state.load(Ordering::Relaxed) & DIRTY == 0 {
            return false;
        }
        let mut was = false;
        latched_as(state, LOCAL, |s| {
            was = s & DIRTY != 0;
            s & !DIRTY
        });
        was
    }

    /// Protocol only: sets the replica's value of `key` to `base` plus its pending delta (the
    /// pushes made here since the protocol last took it), atomically with respect to pushes.
    /// Returns false if there is no replica here.
    pub fn rebase_replica(&self, key: Key, base: &[f32]) -> bool {
        self.rebase_replica_with(key, base, &[])
    }

    /// Protocol only: as [`Store::rebase_replica`], on the base `base` plus the deltas `extra`
    /// (added in order), without copying them into one buffer first.
    pub fn rebase_replica_with(&self, key: Key, base: &[f32], extra: &[&[f32]]) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        let plain = self.plain();
        latched(state, REPLICA, |s| {
            // SAFETY: latched and held as a replica.
            let record = unsafe { self.record(key, s) };
            let (value, old) = record.split_at(record.len() / 2);
            if plain {
                // SAFETY: the latch holder in a store without optimistic readers.
                let (value, old) = unsafe { (as_plain(value), as_plain(old)) };
                rebase_plain(value, old, base, extra);
                return;
            }
            for (i, ((v, o), &b)) in value.iter().zip(old).zip(base).enumerate() {
                let b = extra.iter().fold(b, |sum, delta| sum + delta[i]);
                // SAFETY: valid, aligned `u32`s that no other thread writes while we hold the
                // latch (optimistic readers only read).
                let pending = unsafe {
                    f32::from_bits(v.as_ptr().read()) - f32::from_bits(o.as_ptr().read())
                };
                v.store((b + pending).to_bits(), Ordering::Relaxed);
                o.store(b.to_bits(), Ordering::Relaxed);
            }
        })
    }

    /// Protocol only: marks a key not owned here as in transit (or clears the mark).
    pub fn set_in_transit(&self, key: Key, in_transit: bool) {
        let state = self.state_for_protocol(key);
        let s = Self::latch(state);
        let next = match (in_transit, s & LOCAL != 0) {
            (true, false) => s | TRANSIT,
            (true, true) => s,
            (false, _) => s & !TRANSIT,
        };
        state.store(bumped(next), Ordering::Release);
    }

    /// Protocol only: visits the records held here (owned and replicas) among the next `max`
    /// index entries from `cursor`: `f(key, holding, record)` gets a consistent copy of the
    /// whole record (see [`Holding`]). Returns the cursor to continue from, or `None` once
    /// every entry was visited. Bounded, so that background work (checkpoints, sampling,
    /// eviction) never walks the whole store at once.
    pub fn scan(
        &self,
        cursor: u64,
        max: usize,
        mut f: impl FnMut(Key, Holding, &[f32]),
    ) -> Option<u64> {
        let end = self.index.len().min(cursor.saturating_add(max as u64));
        let mut copy = Vec::new();
        for i in cursor..end {
            let (key, state) = self.index.at(i);
            if let Some(holding) = self.copy_record(key, state, &mut copy) {
                f(key, holding, &copy);
            }
        }
        (end < self.index.len()).then_some(end)
    }

    /// Number of keys currently owned here.
    pub fn count_local(&self) -> u64 {
        self.owned.load(Ordering::Relaxed)
    }

    /// Bytes of records held in allocated chunks.
    pub fn allocated_bytes(&self) -> usize {
        self.values().allocated_bytes() + self.replicas().allocated_bytes()
    }
}

/// `s` with its version bumped (and nothing else changed).
#[inline(always)]
fn bumped(s: u64) -> u64 {
    (s & !VERSION_MASK) | (s.wrapping_add(VERSION_ONE) & VERSION_MASK)
}

/// Latches `state` if its word has a flag of `accept`, runs `f` with the word observed, and
/// releases with the version bumped. Returns false, running nothing, if no flag of `accept` is
/// set.
#[inline(always)]
fn latched(state: &AtomicU64, accept: u64, f: impl FnOnce(u64)) -> bool {
    latched_as(state, accept, |s| {
        f(s);
        s
    })
}

/// `s` with DIRTY set: a push reached the record (a replica's delta, or an owned value).
#[inline(always)]
fn dirtied(s: u64) -> u64 {
    s | DIRTY
}

/// [`latched`] where `f` returns the word to release (before the version bump): the word
/// observed with flags of its own changed (DIRTY only: the latch holder never changes what
/// the word says about where the record is).
#[inline(always)]
fn latched_as(state: &AtomicU64, accept: u64, f: impl FnOnce(u64) -> u64) -> bool {
    let mut spins = 0u32;
    loop {
        let s = state.load(Ordering::Relaxed);
        if s & accept == 0 {
            return false;
        }
        if s & LATCH == 0
            && state
                .compare_exchange_weak(s, s | LATCH, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // Writes to the record must not become visible before the latch (see
            // `read_consistent`).
            fence(Ordering::Release);
            // We hold the latch and the record is here, so the slot is valid and no other
            // thread writes the record until we release.
            let release = f(s);
            debug_assert_eq!(release & !DIRTY, s & !DIRTY, "only DIRTY may change");
            state.store(bumped(release), Ordering::Release);
            return true;
        }
        spins = backoff(spins);
    }
}

/// Runs `read` with the word observed while it shows the record held here and unlatched, until
/// the word is unchanged after the read (a sequence lock: see the module docs). Returns false,
/// running nothing more, once the record is not held here.
///
/// Why it is exact: a writer latches (`Acquire` CAS, then a `Release` fence) before its first
/// value store. If `read` saw any of those stores, the fences synchronise, so the reload after
/// the `Acquire` fence sees the latch or a later word, which differs from the first one (every
/// release bumps the version) and the read is retried. If it saw none, it copied the values as
/// of the word, which were published by that word's `Release` store.
#[inline(always)]
fn read_consistent(state: &AtomicU64, mut read: impl FnMut(u64)) -> bool {
    let mut spins = 0u32;
    loop {
        let s = state.load(Ordering::Acquire);
        if s & HELD == 0 {
            return false;
        }
        if s & LATCH == 0 {
            read(s);
            fence(Ordering::Acquire);
            if state.load(Ordering::Relaxed) == s {
                return true;
            }
        }
        spins = backoff(spins);
    }
}

/// Record values as plain floats.
///
/// # Safety
/// The caller holds the record's latch in a store without optimistic readers (`plain`), so no
/// other thread accesses these values meanwhile.
#[inline(always)]
#[allow(clippy::mut_from_ref)]
unsafe fn as_plain(values: &[AtomicU32]) -> &mut [f32] {
    // SAFETY: `AtomicU32` and `f32` have the same layout, the atomics' interior mutability
    // permits writes through this pointer, and the contract gives us exclusive access.
    unsafe { std::slice::from_raw_parts_mut(values.as_ptr() as *mut f32, values.len()) }
}

/// Copies record values out: with plain (vectorised) loads under the latch when `plain`,
/// else with atomic loads (an optimistic read), unrolled when the length `L` is known (> 0).
#[inline(always)]
fn load_values<const L: usize>(out: &mut [f32], values: &[AtomicU32], plain: bool) {
    if plain {
        // SAFETY: `plain` reads happen under the latch in stores without optimistic readers.
        out.copy_from_slice(unsafe { as_plain(values) });
        return;
    }
    if L > 0 {
        let (out, values) = (&mut out[..L], &values[..L]);
        for j in 0..L {
            out[j] = f32::from_bits(values[j].load(Ordering::Relaxed));
        }
        return;
    }
    for (o, v) in out.iter_mut().zip(values) {
        *o = f32::from_bits(v.load(Ordering::Relaxed));
    }
}

/// Overwrites record values (the caller holds the latch or owns the slot).
#[inline(always)]
fn store_values(values: &[AtomicU32], new: &[f32], plain: bool) {
    if plain {
        // SAFETY: the latch holder in a store without optimistic readers.
        unsafe { as_plain(values) }.copy_from_slice(new);
        return;
    }
    for (v, n) in values.iter().zip(new) {
        v.store(n.to_bits(), Ordering::Relaxed);
    }
}

/// Adds into record values (the caller holds the latch), unrolled when the length `L` is known
/// (> 0). With optimistic readers the values are still read with plain loads: only the latch
/// holder writes them, so those reads race with no write (optimistic readers only read), and
/// only the stores need to be atomic.
#[inline(always)]
fn add_values<const L: usize>(values: &[AtomicU32], update: &[f32], plain: bool) {
    if plain {
        // SAFETY: the latch holder in a store without optimistic readers.
        let values = unsafe { as_plain(values) };
        values.iter_mut().zip(update).for_each(|(v, u)| *v += u);
        return;
    }
    let add = |v: &AtomicU32, u: f32| {
        // SAFETY: a valid, aligned `u32` that no other thread writes while we hold the latch.
        let sum = f32::from_bits(unsafe { v.as_ptr().read() }) + u;
        v.store(sum.to_bits(), Ordering::Relaxed);
    };
    if L > 0 {
        let (values, update) = (&values[..L], &update[..L]);
        for j in 0..L {
            add(&values[j], update[j]);
        }
        return;
    }
    for (v, &u) in values.iter().zip(update) {
        add(v, u);
    }
}

/// Combines `update` into the visible values of a held record (owned, or a replica's value);
/// never a gradient (the store's gradient paths call [`step_record`]).
#[inline(always)]
fn apply_to_record(record: &[AtomicU32], update: &[f32], mode: UpdateMode, plain: bool) {
    let values = &record[..update.len()];
    match mode {
        UpdateMode::Add => add_values::<0>(values, update, plain),
        UpdateMode::Set => store_values(values, update, plain),
        UpdateMode::Gradient => unreachable!("gradients go through step_record"),
    }
}

/// Combines `update` into a whole record (visible values then hidden state) held outside the
/// store (a record in transit): `optimizer` is the key space's, used by gradients only.
#[inline]
pub fn apply(record: &mut [f32], update: &[f32], mode: UpdateMode, optimizer: Option<&Optimizer>) {
    let vals = &mut record[..update.len()];
    match mode {
        UpdateMode::Add => vals.iter_mut().zip(update).for_each(|(v, u)| *v += u),
        UpdateMode::Set => vals.copy_from_slice(update),
        UpdateMode::Gradient => {
            if let Some(opt) = optimizer {
                let (w, state) = record.split_at_mut(update.len());
                opt.step(w, state, update);
            }
        }
    }
}

/// A replica's `value` and `old` halves rebased on `base` plus the deltas `extra`: the pending
/// delta `value - old` is kept on top of the new base. Every step is a whole-slice pass, so it
/// vectorises; the sums are the same, bit for bit, as the element-wise atomic path's
/// (`(base + extra...) + pending`, and float addition commutes).
#[inline]
fn rebase_plain(value: &mut [f32], old: &mut [f32], base: &[f32], extra: &[&[f32]]) {
    debug_assert!(base.len() == value.len() && extra.iter().all(|d| d.len() == base.len()));
    let (value, old) = (&mut value[..base.len()], &mut old[..base.len()]);
    value.iter_mut().zip(old.iter()).for_each(|(v, o)| *v -= o);
    old.copy_from_slice(base);
    for delta in extra {
        old.iter_mut()
            .zip(&delta[..base.len()])
            .for_each(|(o, d)| *o += d);
    }
    value.iter_mut().zip(old.iter()).for_each(|(v, o)| *v += o);
}

/// A cache prefetch hint (no effect on other targets).
#[inline(always)]
fn prefetch(ptr: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(ptr, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

#[inline]
fn backoff(spins: u32) -> u32 {
    if spins < 64 {
        std::hint::spin_loop();
    } else {
        // A latch is held for a copy of one value; if it is still taken, its holder was
        // descheduled, so give up the core.
        std::thread::yield_now();
    }
    spins.saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::RecordLayout;

    #[test]
    fn insert_pull_push_remove_roundtrip() {
        let store = Store::new(KeySpace::uniform(4, 2).unwrap());
        let mut out = [0.0; 2];
        assert!(!store.pull_local(1, &mut out));
        assert!(store.insert(1, &[1.0, 2.0]));
        assert!(
            !store.insert(1, &[9.0, 9.0]),
            "second insert must not overwrite"
        );
        assert!(store.push_local(1, &[0.5, 0.5], UpdateMode::Add));
        assert!(store.pull_local(1, &mut out));
        assert_eq!(out, [1.5, 2.5]);
        assert!(store.push_local(1, &[7.0, 8.0], UpdateMode::Set));
        let mut moved = Vec::new();
        assert!(store.remove(1, &mut moved));
        assert_eq!(moved, [7.0, 8.0]);
        assert_eq!(store.residency(1), Residency::Remote);
        assert!(!store.push_local(1, &[1.0, 1.0], UpdateMode::Add));
    }

    #[test]
    fn freed_slots_are_reused_without_mixing_values() {
        let store = Store::new(KeySpace::uniform(3, 1).unwrap());
        store.insert(0, &[1.0]);
        store.insert(1, &[2.0]);
        let mut moved = Vec::new();
        store.remove(0, &mut moved);
        store.insert(2, &[3.0]);
        let mut out = [0.0];
        assert!(store.pull_local(1, &mut out));
        assert_eq!(out, [2.0]);
        assert!(store.pull_local(2, &mut out));
        assert_eq!(out, [3.0]);
    }

    /// The batch paths are compiled once per short length (`by_len!`): every one of them, and
    /// the run-time-length path above them, adds, sets and reads exactly, for owned records and
    /// replicas, and reports misses in batch order.
    #[test]
    fn batch_paths_are_exact_for_every_short_length() {
        for len in 1..=MAX_OPTIMISTIC_LEN + 2 {
            let store = Store::new(KeySpace::uniform(8, len as u32).unwrap());
            let zeros = vec![0f32; len];
            for key in [0, 2, 4, 6] {
                store.insert(key, &zeros);
            }
            store.insert_replica(5, &zeros);
            let keys = [0, 1, 2, 5, 6, 0];
            let update: Vec<f32> = (0..keys.len() * len).map(|v| v as f32).collect();
            let mut missed = Vec::new();
            store.push_batch_local(&keys, &update, len, UpdateMode::Add, |i| missed.push(i));
            assert_eq!(missed, [1], "len {len}");
            let mut out = vec![-1f32; keys.len() * len];
            missed.clear();
            store
                .pull_batch_local(&keys, &mut out, len, |i| missed.push(i))
                .unwrap();
            assert_eq!(missed, [1], "len {len}");
            let row = |i: usize| &update[i * len..(i + 1) * len];
            let twice: Vec<f32> = row(0).iter().zip(row(5)).map(|(a, b)| a + b).collect();
            for (i, expected) in [(0, &twice[..]), (2, row(2)), (3, row(3)), (4, row(4))] {
                assert_eq!(
                    &out[i * len..(i + 1) * len],
                    expected,
                    "len {len}, key {}",
                    keys[i]
                );
            }
            let mut delta = Vec::new();
            assert!(store.take_delta(5, &mut delta));
            assert_eq!(
                delta,
                row(3),
                "len {len}: a replica push lands in its delta too"
            );
            missed.clear();
            store.push_batch_local(&keys[..3], &update[..3 * len], len, UpdateMode::Set, |i| {
                missed.push(i)
            });
            assert_eq!(missed, [1], "len {len}");
            store
                .pull_batch_local(&[0], &mut out[..len], len, |_| unreachable!())
                .unwrap();
            assert_eq!(&out[..len], row(0), "len {len}");
        }
    }

    #[test]
    fn per_key_lengths_are_stored_apart() {
        let store = Store::new(KeySpace::per_key(vec![1, 3, 2]).unwrap());
        store.insert(2, &[5.0, 6.0]);
        store.insert(1, &[1.0, 2.0, 3.0]);
        let mut out = [0.0; 2];
        assert!(store.pull_local(2, &mut out));
        assert_eq!(out, [5.0, 6.0]);
        assert_eq!(store.count_local(), 2);
    }

    #[test]
    fn transit_mark_is_visible_and_cleared_by_insert() {
        let store = Store::new(KeySpace::uniform(2, 1).unwrap());
        store.set_in_transit(0, true);
        assert_eq!(store.residency(0), Residency::InTransit);
        store.insert(0, &[1.0]);
        assert_eq!(store.residency(0), Residency::Local);
    }

    #[test]
    fn concurrent_pushes_are_never_lost() {
        let store = std::sync::Arc::new(Store::new(KeySpace::uniform(8, 4).unwrap()));
        for k in 0..8 {
            store.insert(k, &[0.0; 4]);
        }
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let store = store.clone();
                std::thread::Builder::new()
                    .spawn(move || {
                        for i in 0..20_000u64 {
                            let key = (i + t) % 8;
                            assert!(store.push_local(key, &[1.0, 2.0, 3.0, 4.0], UpdateMode::Add));
                        }
                    })
                    .unwrap()
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let mut out = [0.0; 4];
        for k in 0..8 {
            store.pull_local(k, &mut out);
            assert_eq!(out, [10_000.0, 20_000.0, 30_000.0, 40_000.0]);
        }
    }

    #[test]
    fn replicas_are_read_and_pushed_on_the_fast_path_with_a_separate_delta() {
        let store = Store::new(KeySpace::uniform(4, 2).unwrap());
        assert!(store.insert_replica(3, &[1.0, 2.0]));
        assert!(
            !store.insert(3, &[0.0, 0.0]),
            "a key is owned or replicated, not both"
        );
        assert_eq!(store.residency(3), Residency::Remote);
        assert!(store.has_replica(3));
        let mut out = [0.0; 2];
        assert!(store.pull_local(3, &mut out));
        assert_eq!(out, [1.0, 2.0]);
        let mut misses = Vec::new();
        store.push_batch_local(&[3, 3, 1], &[1.0; 6], 2, UpdateMode::Add, |i| {
            misses.push(i)
        });
        assert_eq!(misses, [2], "only the key held nowhere here misses");
        assert!(
            !store.push_local(3, &[9.0, 9.0], UpdateMode::Set),
            "overwriting a replica is the protocol's decision"
        );
        // Others' updates arrive as a new base (the hub's primary, without this node's pending
        // pushes): the value becomes base + pending.
        assert!(store.rebase_replica(3, &[11.0, 12.0]));
        assert!(store.pull_local(3, &mut out));
        assert_eq!(
            out,
            [13.0, 14.0],
            "the new base plus this node's two pushes"
        );
        let mut delta = Vec::new();
        assert!(store.take_delta(3, &mut delta));
        assert_eq!(delta, [2.0, 2.0], "the delta holds this node's pushes only");
        delta.clear();
        assert!(
            !store.take_delta(3, &mut delta) && delta.is_empty(),
            "taking the delta clears it, and a round skips the replica until the next push"
        );
        store.push_local(3, &[0.5, 0.5], UpdateMode::Add);
        assert!(store.take_delta(3, &mut delta));
        assert_eq!(
            delta,
            [0.5, 0.5],
            "a push marks the replica for the next round again"
        );
        assert!(
            store.rebase_replica(3, &[13.0, 14.0]),
            "nothing pending: the value is the base"
        );
        // A threshold on the delta's L2 norm leaves small deltas pending, still marked.
        delta.clear();
        store.push_local(3, &[3.0, 4.0], UpdateMode::Add);
        assert!(!store.take_delta_above(3, &mut delta, 6.0) && delta.is_empty());
        store.push_local(3, &[3.0, 4.0], UpdateMode::Add);
        assert!(store.take_delta_above(3, &mut delta, 6.0), "norm 10 now");
        assert_eq!(delta, [6.0, 8.0]);
        delta.clear();
        store.rebase_replica(3, &[13.0, 14.0]);
        let mut batch = [0.0; 2];
        store
            .pull_batch_local(&[3], &mut batch, 2, |_| panic!("replica misses"))
            .unwrap();
        assert_eq!(batch, [13.0, 14.0]);
        let mut removed = Vec::new();
        assert!(store.remove_replica(3, &mut removed));
        assert_eq!(
            removed,
            [13.0, 14.0, 13.0, 14.0],
            "value, then the synced base"
        );
        assert!(!store.has_replica(3));
        assert!(!store.pull_local(3, &mut out));
    }

    /// The replica operations compute the same floats, bit for bit, on both paths: atomic
    /// element-wise (short values, optimistic readers) and plain vectorised (long values).
    #[test]
    fn replica_sync_arithmetic_is_identical_on_the_atomic_and_the_plain_path() {
        use rand::{Rng, SeedableRng};
        let seed = 0x5eed_0fba;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        for len in [3, MAX_OPTIMISTIC_LEN, MAX_OPTIMISTIC_LEN + 1, 40] {
            let store = Store::new(KeySpace::uniform(2, len as u32).unwrap());
            assert_eq!(store.plain(), len > MAX_OPTIMISTIC_LEN, "len {len}");
            // Magnitudes spread over 2^±12, so that the order of additions shows in the bits.
            let mut draw = || -> Vec<f32> {
                (0..len)
                    .map(|_| (rng.random::<f32>() - 0.5) * 2f32.powi(rng.random_range(-12..12)))
                    .collect()
            };
            let (init, push, base, e1, e2, push2) =
                (draw(), draw(), draw(), draw(), draw(), draw());
            assert!(store.insert_replica(1, &init));
            store.push_local(1, &push, UpdateMode::Add);
            let value: Vec<f32> = init.iter().zip(&push).map(|(i, p)| i + p).collect();
            let mut delta = Vec::new();
            assert!(store.take_delta(1, &mut delta));
            let want: Vec<f32> = value.iter().zip(&init).map(|(v, i)| v - i).collect();
            assert_eq!(delta, want, "delta, len {len}, seed {seed:#x}");
            store.push_local(1, &push2, UpdateMode::Add);
            let value: Vec<f32> = value.iter().zip(&push2).map(|(v, p)| v + p).collect();
            assert!(store.rebase_replica_with(1, &base, &[&e1, &e2]));
            let new_base: Vec<f32> = (0..len).map(|i| base[i] + e1[i] + e2[i]).collect();
            let mut out = vec![0.0; len];
            assert!(store.pull_local(1, &mut out));
            // The pending delta is `value - synced base`, where the synced base is the value at
            // the last take (init + push).
            let pending: Vec<f32> = (0..len).map(|i| value[i] - (init[i] + push[i])).collect();
            let want: Vec<f32> = (0..len).map(|i| new_base[i] + pending[i]).collect();
            assert_eq!(out, want, "rebased value, len {len}, seed {seed:#x}");
            let mut removed = Vec::new();
            assert!(store.remove_replica(1, &mut removed));
            assert_eq!(removed[len..], new_base[..], "synced base, len {len}");
        }
    }

    #[test]
    fn local_updates_sum_the_registered_workers_once_each() {
        let store = Store::new(KeySpace::uniform(2, 1).unwrap());
        let (a, b) = (
            Arc::new(WorkerCounters::default()),
            Arc::new(WorkerCounters::default()),
        );
        store.register_worker(a.clone());
        store.register_worker(b.clone());
        store.register_worker(a.clone());
        a.local_push_keys.store(3, Ordering::Relaxed);
        b.local_push_keys.store(4, Ordering::Relaxed);
        a.local_pull_keys.store(100, Ordering::Relaxed);
        assert_eq!(store.local_updates(), 7, "pushes only, each worker once");
    }

    #[test]
    fn hidden_state_moves_with_the_record_but_is_never_pulled() {
        let layout = RecordLayout {
            hidden_per_value: 2,
            hidden_per_key: 1,
        };
        for space in [
            KeySpace::uniform(4, 2).unwrap().with_layout(layout),
            KeySpace::per_key(vec![1, 2, 3, 2])
                .unwrap()
                .with_layout(layout),
        ] {
            let store = Store::new(space);
            assert_eq!(store.space().record_len(3), 7);
            let record = [1.0, 2.0, 10.0, 20.0, 30.0, 40.0, 99.0];
            assert!(store.insert(3, &record));
            assert!(store.insert(1, &[5.0; 7]), "a neighbour must not overlap");
            assert!(store.push_local(3, &[1.0, 1.0], UpdateMode::Add));
            let mut out = [0.0; 2];
            assert!(store.pull_local(3, &mut out));
            assert_eq!(out, [2.0, 3.0]);
            let mut moved = Vec::new();
            assert!(store.remove(3, &mut moved));
            assert_eq!(moved, [2.0, 3.0, 10.0, 20.0, 30.0, 40.0, 99.0]);
            assert!(store.pull_local(1, &mut out));
            assert_eq!(out, [5.0, 5.0]);
        }
    }

    #[test]
    fn sparse_keys_anywhere_in_u64_get_state_only_when_the_protocol_creates_it() {
        let store = Store::new(KeySpace::sparse(2).unwrap());
        let keys = [u64::MAX, 0, 1 << 63, 0x9e37_79b9_7f4a_7c15];
        let mut out = [0.0; 8];
        let mut misses = Vec::new();
        store
            .pull_batch_local(&keys, &mut out, 2, |i| misses.push(i))
            .expect("every u64 is a key");
        assert_eq!(misses, [0, 1, 2, 3]);
        assert!(!store.is_known(u64::MAX));
        for (i, &key) in keys.iter().enumerate() {
            assert!(store.insert(key, &[i as f32, 1.0]));
        }
        store.push_batch_local(&keys, &[1.0; 8], 2, UpdateMode::Add, |_| panic!("miss"));
        store
            .pull_batch_local(&keys, &mut out, 2, |_| panic!("miss"))
            .unwrap();
        assert_eq!(out, [1.0, 2.0, 2.0, 2.0, 3.0, 2.0, 4.0, 2.0]);
        let mut moved = Vec::new();
        assert!(store.remove(1 << 63, &mut moved));
        assert!(store.is_known(1 << 63), "a key's word outlives its record");
        assert_eq!(store.residency(1 << 63), Residency::Remote);
        assert_eq!(store.count_local(), 3);
    }

    #[test]
    fn scan_visits_every_held_record_once_in_bounded_steps() {
        for space in [
            KeySpace::uniform(1000, 1).unwrap(),
            KeySpace::sparse(1).unwrap(),
        ] {
            let store = Store::new(space);
            for key in (0..1000u64).step_by(7) {
                let key = key * 1_000_003;
                if store.space().contains(key) {
                    store.insert(key, &[key as f32]);
                }
            }
            store.insert_replica(999, &[5.0]);
            store.set_in_transit(998, true);
            let mut seen = Vec::new();
            let mut cursor = Some(0);
            let mut steps = 0;
            while let Some(at) = cursor {
                cursor = store.scan(at, 64, |key, holding, record| {
                    seen.push((key, holding, record[0]));
                });
                steps += 1;
            }
            seen.sort_by_key(|&(k, _, _)| k);
            let mut expected: Vec<_> = (0..1000u64)
                .step_by(7)
                .map(|k| k * 1_000_003)
                .filter(|&k| store.space().contains(k))
                .map(|k| (k, Holding::Owned, k as f32))
                .collect();
            expected.push((999, Holding::Replica, 5.0));
            expected.sort_by_key(|&(k, _, _)| k);
            assert_eq!(seen, expected);
            assert!(steps > 1, "a scan is bounded per step");
        }
    }

    fn spawn<T: Send + 'static>(
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        std::thread::Builder::new()
            .spawn(f)
            .expect("spawning a test thread")
    }

    /// Optimistic reads never return a torn value: every write keeps all components of a key
    /// equal, and readers check that whatever they read is uniform, while the protocol thread
    /// also removes and re-inserts the keys (moving their slots) underneath them.
    #[test]
    fn optimistic_reads_never_see_a_torn_or_moved_record() {
        reads_never_see_a_torn_or_moved_record::<16>();
    }

    /// Long values are read under the latch, with plain copies: the same guarantee.
    #[test]
    fn latched_reads_of_long_values_never_see_a_torn_or_moved_record() {
        reads_never_see_a_torn_or_moved_record::<64>();
    }

    fn reads_never_see_a_torn_or_moved_record<const LEN: usize>() {
        let store = std::sync::Arc::new(Store::new(KeySpace::uniform(4, LEN as u32).unwrap()));
        assert_eq!(store.optimistic, LEN <= MAX_OPTIMISTIC_LEN);
        for k in 0..4 {
            store.insert(k, &[0.0; LEN]);
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, stop) = (store.clone(), stop.clone());
                spawn(move || {
                    let mut out = vec![0.0; 4 * LEN];
                    let mut seen = 0u64;
                    // At least 1,000 reads each, and on until the writers are done.
                    while seen < 1_000 || !stop.load(Ordering::Relaxed) {
                        store
                            .pull_batch_local(&[0, 1, 2, 3], &mut out, LEN, |_| {})
                            .unwrap();
                        for value in out.chunks(LEN) {
                            assert!(value.iter().all(|&v| v == value[0]), "torn: {value:?}");
                        }
                        seen += 1;
                    }
                    seen
                })
            })
            .collect();
        let writer = {
            let store = store.clone();
            spawn(move || {
                for i in 0..20_000u32 {
                    let key = u64::from(i % 4);
                    store.push_local(key, &[1.0; LEN], UpdateMode::Add);
                    store.push_local(key, &[i as f32; LEN], UpdateMode::Set);
                }
            })
        };
        // The protocol's moves: out and back in, into whatever slot is free.
        let mut moved = Vec::new();
        for round in 0..5_000u64 {
            let key = round % 4;
            moved.clear();
            if store.remove(key, &mut moved) {
                assert!(moved.iter().all(|&v| v == moved[0]));
                store.insert(key, &moved);
            }
        }
        writer.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            assert!(reader.join().unwrap() >= 1_000);
        }
    }
}
