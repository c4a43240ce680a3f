//! The node-local parameter store that worker threads access directly.
//!
//! Records live in value areas (`area.rs`) addressed by slot; a key's slot is found through its
//! 64-bit state word (`index.rs` maps keys to words: an array for dense key spaces, a table
//! read without locks for sparse ones), which also carries the key's latch and how this node holds the key:
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
//!  bit 34     GONE      the key's row was evicted here (`evict.rs`): at its creator, "not
//!                       created" again (a state word without a record and without GONE, at
//!                       the creator, means the row lives elsewhere)
//!  bit 33     AGED      a TTL sweep found the row unreferenced once (the next one evicts it)
//!  bit 32     REFERENCED  accessed since the clock hand last cleared it: set by the release
//!                       store of every latched worker access (free: the store happens
//!                       anyway), and, in stores an eviction clock sweeps (`clocked`), by a
//!                       pull that finds it clear (one extra atomic per row per sweep); other
//!                       stores' pulls never test it
//!  bits 0-31  slot      where the record is, meaningful only while LOCAL or REPLICA
//! ```
//!
//! A space of named tables (`tables.rs`) has one pair of areas (owned, replicas) per table, of
//! that table's record length; a key's table (its top bits) picks the pair on the per-key
//! paths, which such a space uses (its lengths are not uniform), except for a batch of one
//! table's keys (a pull, push, set or gradient step), which runs the uniform stores' per-key
//! loop over that table's pair (`batch.rs`).
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
//! - In a store of short values (uniform, or named tables whose dims are all at most 16 floats),
//!   pulls read without the latch, as a
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
//! protocol lock, no allocation. Batches of short values in dense spaces run these steps a
//! block of keys at a time, pass by pass (`batch.rs`), with the same per-key guarantees. Background work visits the store's keys in
//! bounded chunks through [`Store::scan`].
//!
//! Files: this one holds the state word and the per-key and protocol paths; `latch.rs` the
//! latch and the optimistic (sequence-lock) read;
//! `batch.rs` the workers' batch paths; `grad.rs` the optimizer steps; `replica_ops.rs` the
//! replica operations; `replica_grad.rs` the replicas' gradient accumulators;
//! `evict.rs` the eviction clock; `values.rs` plain and atomic value access; `area.rs` and
//! `index.rs` where records and state words live.

mod area;
mod index;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use crate::dynamic::DynamicPolicy;
use crate::id::Key;
use crate::keyspace::{KeySpace, ValueLengths};
use crate::optim::Optimizer;
use crate::stats::WorkerCounters;
use area::{Area, Scale, UniformView};
use index::Index;

pub use area::{ChunkHint, HINT_MIN_BYTES, set_chunk_hint};
pub use evict::{ReturnVisit, Sweep, Visit};

const LATCH: u64 = 1 << 63;
const LOCAL: u64 = 1 << 62;
const TRANSIT: u64 = 1 << 61;
const REPLICA: u64 = 1 << 60;
const HELD: u64 = LOCAL | REPLICA;
const VERSION_ONE: u64 = 1 << 36;
const VERSION_MASK: u64 = ((1 << 24) - 1) << 36;
const DIRTY: u64 = 1 << 35;
const CLOCK_MASK: u64 = 0x7 << 32;
const REFERENCED: u64 = 1 << 32;
const AGED: u64 = 1 << 33;
const GONE: u64 = 1 << 34;
/// Longest value (uniform, or every named table's dim) that pulls read optimistically. Optimistic
/// readers need every value access to be atomic, and atomic accesses are not vectorised: longer
/// values are copied and added faster under the latch with plain vector loads and stores (measured:
/// the quick suite's KGE and MF epochs, docs/benchmarks.md).
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
mod batch;
mod evict;
mod grad;
mod latch;
mod replica_grad;
mod replica_ops;
mod values;

use latch::{bumped, dirtied, latched, latched_as, read_consistent, read_consistent_as};
pub use values::apply;
use values::{add_values, apply_to_record, as_plain, load_values, store_values};

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
    /// Like `Gradient`, for an aggregate of gradients: each key's update is twice its length,
    /// the sum of its gradients then the sum of their squares, applied as one step that
    /// stands for all of them ([`Optimizer::step_sums`]).
    GradientSums,
}

impl UpdateMode {
    /// Update values per visible value of a key (2 for [`UpdateMode::GradientSums`]).
    #[inline(always)]
    pub fn width(self) -> usize {
        if self == Self::GradientSums { 2 } else { 1 }
    }

    /// Whether the key space's optimizer applies the update.
    #[inline(always)]
    pub fn is_gradient(self) -> bool {
        matches!(self, Self::Gradient | Self::GradientSums)
    }
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
    /// The owned records' area, then the replicas' (a space of named tables: unused).
    areas: [Area; 2],
    /// A space of named tables: each table's owned-record and replica areas, by table index
    /// (records of one table share a length); empty otherwise. The per-key paths and the batch
    /// loops of one table's keys use them; the block paths serve dense uniform spaces, whose
    /// records are all in `areas`.
    by_table: Box<[[Area; 2]]>,
    /// A space of named tables: the keys of each table owned here (the row budgets').
    owned_by_table: Box<[AtomicU64]>,
    /// The uniform visible length, or 0 with per-key lengths.
    uniform_len: usize,
    /// Whether pulls read without the latch (a sequence lock; see the module docs). Chosen
    /// once per store, so that readers and writers of one store never mix protocols.
    optimistic: bool,
    /// Whether an eviction clock sweeps this store (a dynamic space with a row budget or a
    /// TTL): only then do pulls mark rows REFERENCED.
    clocked: bool,
    /// Keys owned here, kept by the protocol's inserts and removes (read by stats from any
    /// thread, so never computed by walking the index).
    owned: AtomicU64,
    /// The local-access counters of the workers that use this store (registered by their
    /// fronts), so that the protocol can measure training progress without touching the hot
    /// path: each worker only bumps its own counters.
    workers: parking_lot::Mutex<Vec<Arc<WorkerCounters>>>,
    /// Gradient accumulators of the replicas (`replica_grad.rs`), under a stateful optimizer.
    grads: Option<replica_grad::GradAreas>,
}

// SAFETY: records are only accessed under the per-key latch (see module invariants); the areas'
// and index's protocol-only parts (the index's retired tables, its inserts) are only touched by
// protocol methods, which the node lock serialises; workers only load the index (`index.rs`).
unsafe impl Sync for Store {}
// SAFETY: the areas own their chunk allocations, and the sparse index its arena chunks and
// lookup tables (raw pointers, freed only when it drops); moving the store moves their
// ownership.
unsafe impl Send for Store {}

impl Store {
    /// An empty store for `space` (no key local).
    pub fn new(space: KeySpace) -> Self {
        let layout = space.layout();
        let clocked = space.dynamic_policies().any(DynamicPolicy::evicts);
        let mut by_table = Vec::new();
        let (values, replicas) = match space.lengths() {
            ValueLengths::PerTable(tables) => {
                for table in tables.all() {
                    by_table.push([
                        Area::uniform(table.record_len()),
                        Area::uniform(2 * table.dim()),
                    ]);
                }
                (Area::uniform(1), Area::uniform(1))
            }
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
        let grads = replica_grad::GradAreas::new(&space);
        Self {
            index: if space.is_sparse() {
                Index::sparse()
            } else {
                Index::dense(space.num_keys() as usize)
            },
            areas: [values, replicas],
            owned_by_table: by_table.iter().map(|_| AtomicU64::new(0)).collect(),
            by_table: by_table.into(),
            uniform_len: space.uniform_len().unwrap_or(0),
            clocked,
            // Named tables read optimistically only if every table's rows are short: whether
            // values are accessed atomically is one choice per store (`plain`).
            optimistic: match space.named_tables() {
                Some(tables) => tables.all().iter().all(|t| t.dim() <= MAX_OPTIMISTIC_LEN),
                None => space
                    .uniform_len()
                    .is_some_and(|len| len <= MAX_OPTIMISTIC_LEN),
            },
            space,
            owned: AtomicU64::new(0),
            workers: parking_lot::Mutex::default(),
            grads,
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

    /// Whether `key` is held here, owned or as a replica (what sampling counts as local), at
    /// this instant: one load of its state word.
    #[inline]
    pub fn is_held(&self, key: Key) -> bool {
        self.word(key) & HELD != 0
    }

    /// Whether `key` has a state word here: always for a key of a dense space; for a sparse
    /// space, once this node has held or routed the key (it is never forgotten).
    pub fn is_known(&self, key: Key) -> bool {
        self.index.get(key).is_some()
    }

    #[inline]
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
        let copy = |s| {
            // SAFETY: held when observed, so the slot was allocated for this key.
            let record = unsafe { self.record(key, s) };
            load_values::<0>(out, &record[..out.len()], self.plain());
        };
        if self.clocked {
            self.read::<true>(state, copy)
        } else {
            self.read::<false>(state, copy)
        }
    }

    /// [`Store::pull_local`] of an owned record only (not a replica): a server's answer to a
    /// request in one lookup of the key (owned is what [`Store::residency`] calls local).
    #[inline]
    pub fn pull_owned(&self, key: Key, out: &mut [f32]) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        let mut copy = |s| {
            // SAFETY: owned when observed, so the slot was allocated for this key.
            let record = unsafe { self.record(key, s) };
            load_values::<0>(out, &record[..out.len()], self.plain());
        };
        match (self.optimistic, self.clocked) {
            (true, true) => read_consistent_as::<true>(state, LOCAL, copy),
            (true, false) => read_consistent_as::<false>(state, LOCAL, copy),
            (false, clocked) => latched_as(state, LOCAL, |s| {
                copy(s);
                if clocked { s | REFERENCED } else { s }
            }),
        }
    }

    /// [`Store::push_local`] to an owned record only (not a replica), in one lookup.
    #[inline]
    pub fn push_owned(&self, key: Key, update: &[f32], mode: UpdateMode) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        if mode.is_gradient() {
            return self.step_owned(key, state, update, mode);
        }
        latched_as(state, LOCAL, |s| {
            // SAFETY: latched and owned.
            let record = unsafe { self.record(key, s) };
            apply_to_record(record, update, mode, self.plain());
            dirtied(s)
        })
    }

    /// Applies `update` to `key`'s visible values if the key is held here; a `Set` applies only
    /// to an owned key (what overwriting a replica means is the protocol's decision).
    /// `update.len()` must equal the key's length times the mode's [`UpdateMode::width`].
    #[inline]
    pub fn push_local(&self, key: Key, update: &[f32], mode: UpdateMode) -> bool {
        let Some(state) = self.index.get(key) else {
            return false;
        };
        if mode.is_gradient() {
            return self.step_local(key, state, update, mode);
        }
        let accept = if mode == UpdateMode::Add { HELD } else { LOCAL };
        latched_as(state, accept, |s| {
            // SAFETY: latched and held.
            let record = unsafe { self.record(key, s) };
            apply_to_record(record, update, mode, self.plain());
            dirtied(s)
        })
    }

    /// Runs `read` on the record held under `state` consistently: optimistically (see
    /// [`read_consistent`]) or under the latch, as this store reads.
    #[inline(always)]
    fn read<const TOUCH: bool>(&self, state: &AtomicU64, mut read: impl FnMut(u64)) -> bool {
        if self.optimistic {
            read_consistent::<TOUCH>(state, read)
        } else {
            latched_as(state, HELD, |s| {
                read(s);
                if TOUCH { s | REFERENCED } else { s }
            })
        }
    }

    /// Whether values are accessed with plain loads and stores (only ever under the latch).
    #[inline(always)]
    fn plain(&self) -> bool {
        !self.optimistic
    }

    /// The area that holds `key`'s record under word (or flag) `s`.
    #[inline(always)]
    fn area(&self, key: Key, s: u64) -> &Area {
        let areas = if self.by_table.is_empty() {
            &self.areas
        } else {
            &self.by_table[crate::tables::Tables::index_of(key)]
        };
        if s & REPLICA == 0 {
            &areas[0]
        } else {
            &areas[1]
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
        unsafe { self.area(key, s).record(key, (s & SLOT_MASK) as u32) }
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
        let held = self.read::<false>(state, |s| {
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

    /// Latches `key`; unless it is held here already, allocates a slot in the area of `flag`,
    /// lets `fill` write the record and publishes it with `flag`.
    fn insert_held(&self, key: Key, flag: u64, fill: impl FnOnce(&[AtomicU32])) -> bool {
        let state = self.state_for_protocol(key);
        let s = Self::latch(state);
        if s & HELD != 0 {
            state.store(s, Ordering::Release);
            return false;
        }
        let area = self.area(key, flag);
        let slot = area.allocate(key);
        // SAFETY: latched; the slot was just allocated for this key and its chunk exists.
        fill(unsafe { area.record(key, slot) });
        if flag == REPLICA
            && let Some(grads) = &self.grads
        {
            grads.create(key, slot);
        }
        // A new row counts as referenced (the clock passes it over once), and is no longer gone.
        let kept = (s & KEPT & !(GONE | AGED)) | REFERENCED;
        state.store(bumped(kept) | flag | u64::from(slot), Ordering::Release);
        if flag == LOCAL {
            self.count_owned(key, 1);
        }
        true
    }

    /// Protocol only: removes `key`'s owned record, appending it (visible values then hidden
    /// state) to `out`. Returns false if the key was not owned here. The key becomes
    /// [`Residency::Remote`].
    pub fn remove(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.remove_held(key, LOCAL, out)
    }

    fn remove_held(&self, key: Key, flag: u64, out: &mut Vec<f32>) -> bool {
        self.remove_held_with(key, flag, out, None)
    }

    /// [`Store::remove_held`]; a replica's pending accumulated gradient goes to `grad` (if
    /// given; else it is dropped with the replica).
    fn remove_held_with(
        &self,
        key: Key,
        flag: u64,
        out: &mut Vec<f32>,
        grad: Option<&mut Vec<f32>>,
    ) -> bool {
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
        if flag == REPLICA
            && let Some(grads) = &self.grads
        {
            let mut dropped = Vec::new();
            grads.take(key, (s & SLOT_MASK) as u32, grad.unwrap_or(&mut dropped));
        }
        self.area(key, s).free((s & SLOT_MASK) as u32);
        // A key on its way here stays so (a replica dropped while its owned copy comes).
        state.store(bumped(s & (KEPT | TRANSIT)), Ordering::Release);
        if flag == LOCAL {
            self.count_owned(key, -1);
        }
        true
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

    /// Number of keys of table `table` owned here (a space of named tables; else 0).
    pub fn count_local_in_table(&self, table: usize) -> u64 {
        self.owned_by_table
            .get(table)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// Protocol only: counts a key `key` owned here more (`by` 1) or less (-1).
    fn count_owned(&self, key: Key, by: i64) {
        let update = |n: &AtomicU64| {
            if by > 0 {
                n.fetch_add(1, Ordering::Relaxed)
            } else {
                n.fetch_sub(1, Ordering::Relaxed)
            }
        };
        update(&self.owned);
        if let Some(n) = self
            .owned_by_table
            .get(crate::tables::Tables::index_of(key))
        {
            update(n);
        }
    }

    /// Bytes of records held in allocated chunks.
    pub fn allocated_bytes(&self) -> usize {
        let tables = self.by_table.iter().flatten();
        self.areas
            .iter()
            .chain(tables)
            .map(Area::allocated_bytes)
            .sum()
    }
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

/// Prefetches the `len` values at `record`: its first cache line and, when the record runs
/// into the next one (a 40-byte record does in 3 of 8 slots), that line too, so that the copy
/// does not wait for it.
#[inline(always)]
fn prefetch_record(record: *const AtomicU32, len: usize) {
    let first = record.cast::<i8>();
    let last = first.wrapping_add(4 * len - 1);
    // Both unconditionally: a test of the lines costs a mispredicted branch in 3 of 8 keys,
    // more than a redundant prefetch of a line already asked for.
    prefetch(first);
    prefetch(last);
}

#[cfg(test)]
mod table_tests;
#[cfg(test)]
mod tests;
