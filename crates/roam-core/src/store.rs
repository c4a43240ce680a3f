//! The node-local parameter store that worker threads access directly.
//!
//! Values live in large contiguous chunks addressed by slot; a key's slot is found through its
//! 32-bit state word, which also carries the key's latch and residency flags:
//!
//! ```text
//!  bit 31   LATCH     held while one thread reads or writes the key's values (or moves the key)
//!  bit 30   LOCAL     the value is in this store
//!  bit 29   TRANSIT   the key is on its way here; operations must queue in the protocol
//!  bits 0-28 slot     where the value is, meaningful only while LOCAL
//! ```
//!
//! Invariants:
//! - Values of a key are only read or written by the thread holding its latch, and only while
//!   LOCAL is set; acquiring the latch is a compare-and-swap on the exact word observed, so
//!   "is local" and "latched" are checked atomically and a stale slot can never be used.
//! - Only the protocol (one thread at a time, under the node lock) inserts or removes keys and
//!   allocates chunks, so slot allocation needs no synchronisation with workers.
//! - Chunks are never freed or moved while the store lives, so a pointer read under the latch
//!   stays valid.
//!
//! The hot path (a worker's local pull or push) is therefore one CAS, a copy and a release store:
//! no message, no protocol lock, no allocation.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::id::Key;
use crate::keyspace::{KeySpace, ValueLengths};

const LATCH: u32 = 1 << 31;
const LOCAL: u32 = 1 << 30;
const TRANSIT: u32 = 1 << 29;
const SLOT_MASK: u32 = TRANSIT - 1;

/// Target chunk size in values (4 MiB of `f32`).
const CHUNK_VALUES: u64 = 1 << 20;

/// How an update combines with the stored value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateMode {
    /// `value += update` (a gradient push).
    Add,
    /// `value = update` (an overwrite).
    Set,
}

/// Residency of a key in this store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// The value is here.
    Local,
    /// The key is being moved here; operations queue until it lands.
    InTransit,
    /// The value is elsewhere.
    Remote,
}

/// Slot bookkeeping, touched only by the protocol (under the node lock).
struct SlotAlloc {
    next_slot: u32,
    free_slots: Vec<u32>,
}

/// A node's parameter store. See the module docs for the invariants.
pub struct Store {
    space: KeySpace,
    states: Box<[AtomicU32]>,
    /// log2 of the slots per chunk (a power of two, so locating a slot is a shift and a mask).
    /// Uniform lengths: slots per chunk. Per-key lengths: keys per chunk (slot == key).
    chunk_shift: u32,
    /// The uniform value length, or 0 with per-key lengths.
    uniform_len: usize,
    chunks: Box<[AtomicPtr<f32>]>,
    chunk_lens: Box<[usize]>,
    alloc: UnsafeCell<SlotAlloc>,
}

// SAFETY: values are only accessed under the per-key latch (see module invariants); `alloc` is
// only touched through `&mut`-like protocol methods documented as protocol-only, which the node
// lock serialises.
unsafe impl Sync for Store {}
// SAFETY: the raw chunk pointers are owned allocations; moving the store moves their ownership.
unsafe impl Send for Store {}

impl Store {
    /// An empty store for `space` (no key local).
    pub fn new(space: KeySpace) -> Self {
        let num_keys = space.num_keys();
        let avg_len = match space.lengths() {
            ValueLengths::Uniform(len) => u64::from(*len),
            ValueLengths::PerKey(_) => space.total_len().div_ceil(num_keys).max(1),
        };
        let chunk_shift = (CHUNK_VALUES / avg_len).max(1).ilog2();
        let slots_per_chunk = 1u64 << chunk_shift;
        let num_chunks = num_keys.div_ceil(slots_per_chunk) as usize;
        let chunk_lens = (0..num_chunks as u64)
            .map(|c| {
                let first = c * slots_per_chunk;
                let end = ((c + 1) * slots_per_chunk).min(num_keys);
                (space.global_offset(end) - space.global_offset(first)) as usize
            })
            .collect();
        Self {
            states: zeroed_states(num_keys as usize),
            chunks: (0..num_chunks)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            chunk_lens,
            chunk_shift,
            uniform_len: space.uniform_len().unwrap_or(0),
            alloc: UnsafeCell::new(SlotAlloc {
                next_slot: 0,
                free_slots: Vec::new(),
            }),
            space,
        }
    }

    /// The key space this store serves.
    pub fn space(&self) -> &KeySpace {
        &self.space
    }

    /// Residency of `key` at this instant (it may change right after).
    pub fn residency(&self, key: Key) -> Residency {
        let s = self.states[key as usize].load(Ordering::Acquire);
        if s & LOCAL != 0 {
            Residency::Local
        } else if s & TRANSIT != 0 {
            Residency::InTransit
        } else {
            Residency::Remote
        }
    }

    /// Reads `key` into `out` if it is local. `out.len()` must equal the key's length.
    #[inline]
    pub fn pull_local(&self, key: Key, out: &mut [f32]) -> bool {
        self.with_local(key, |vals| out.copy_from_slice(vals))
    }

    /// Applies `update` to `key` if it is local. `update.len()` must equal the key's length.
    #[inline]
    pub fn push_local(&self, key: Key, update: &[f32], mode: UpdateMode) -> bool {
        self.with_local(key, |vals| apply(vals, update, mode))
    }

    /// Pulls a batch of keys of the uniform length `len` into `out` (`keys.len() * len` values),
    /// calling `miss(i)` for each key `i` that is not local. Prefetches a few keys ahead, so
    /// that the cache misses of a random batch overlap instead of queuing behind each latch.
    /// Stops at the first key outside the key space and returns it (reads change nothing, so
    /// checking while copying saves the caller a separate pass over the batch).
    #[inline]
    pub fn pull_batch_local(
        &self,
        keys: &[Key],
        out: &mut [f32],
        len: usize,
        mut miss: impl FnMut(usize),
    ) -> Result<(), Key> {
        self.assert_uniform(len);
        debug_assert_eq!(out.len(), keys.len() * len);
        for (i, (&key, here)) in keys.iter().zip(out.chunks_exact_mut(len)).enumerate() {
            self.prefetch_ahead(keys, i);
            if key >= self.states.len() as u64 {
                return Err(key);
            }
            // SAFETY: `len` is the uniform length (asserted above).
            if !unsafe { self.with_local_uniform(key, len, |vals| here.copy_from_slice(vals)) } {
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
        mut miss: impl FnMut(usize),
    ) {
        self.assert_uniform(len);
        debug_assert_eq!(update.len(), keys.len() * len);
        for (i, (&key, vals)) in keys.iter().zip(update.chunks_exact(len)).enumerate() {
            self.prefetch_ahead(keys, i);
            // SAFETY: `len` is the uniform length (asserted above).
            let done =
                unsafe { self.with_local_uniform(key, len, |stored| apply(stored, vals, mode)) };
            if !done {
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

    /// Prefetches the state word of key `i + 2 * D` and the values of key `i + D`.
    #[inline(always)]
    fn prefetch_ahead(&self, keys: &[Key], i: usize) {
        const D: usize = 8;
        if let Some(&far) = keys.get(i + 2 * D)
            && let Some(state) = self.states.get(far as usize)
        {
            prefetch(state.as_ptr().cast());
        }
        if let Some(&near) = keys.get(i + D)
            && let Some(state) = self.states.get(near as usize)
        {
            let s = state.load(Ordering::Relaxed);
            if s & LOCAL != 0 && self.uniform_len != 0 {
                let (base, offset) = self.uniform_slot(s & SLOT_MASK);
                if !base.is_null() {
                    // Only an address for the prefetch hint: never dereferenced here.
                    prefetch(base.wrapping_add(offset).cast());
                }
            }
        }
    }

    /// Runs `f` on the key's values under its latch if the key is local.
    #[inline]
    fn with_local(&self, key: Key, f: impl FnOnce(&mut [f32])) -> bool {
        // SAFETY: `values_mut`'s contract is what `latched_local` guarantees.
        self.latched_local(key, |slot| unsafe { self.values_mut(key, slot) }, f)
    }

    /// [`Store::with_local`] for a store of uniform length `len`, with the slot's address
    /// computed inline (a shift, a mask and a multiply) instead of by the general lookup.
    ///
    /// # Safety
    /// The key space has the uniform value length `len`.
    #[inline(always)]
    unsafe fn with_local_uniform(&self, key: Key, len: usize, f: impl FnOnce(&mut [f32])) -> bool {
        debug_assert_eq!(self.uniform_len, len);
        let values = |slot: u32| {
            let (base, offset) = self.uniform_slot(slot);
            // SAFETY: latched and local (see `latched_local`), so the slot's chunk exists and
            // holds `len` values at this offset that only we access until the latch is released.
            unsafe { std::slice::from_raw_parts_mut(base.add(offset), len) }
        };
        self.latched_local(key, values, f)
    }

    /// Latches `key` if it is local, runs `f` on the values `locate` finds for its slot, and
    /// releases. Returns false, running nothing, if the key is not local.
    #[inline(always)]
    fn latched_local<'s>(
        &'s self,
        key: Key,
        locate: impl FnOnce(u32) -> &'s mut [f32],
        f: impl FnOnce(&mut [f32]),
    ) -> bool {
        let state = &self.states[key as usize];
        let mut spins = 0u32;
        loop {
            let s = state.load(Ordering::Relaxed);
            if s & LOCAL == 0 {
                return false;
            }
            if s & LATCH == 0
                && state
                    .compare_exchange_weak(s, s | LATCH, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // We hold the latch and LOCAL is set, so the slot is valid and no other thread
                // accesses these values until we release.
                f(locate(s & SLOT_MASK));
                state.store(s, Ordering::Release);
                return true;
            }
            spins = backoff(spins);
        }
    }

    /// Latches `key` whatever its residency; returns the word observed before latching.
    fn latch(&self, key: Key) -> u32 {
        let state = &self.states[key as usize];
        let mut spins = 0u32;
        loop {
            let s = state.load(Ordering::Relaxed);
            if s & LATCH == 0
                && state
                    .compare_exchange_weak(s, s | LATCH, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return s;
            }
            spins = backoff(spins);
        }
    }

    /// Protocol only: makes `key` local with `value` (length must match). Returns false, changing
    /// nothing, if it was already local.
    ///
    /// # Safety contract (not `unsafe` because misuse cannot cause UB, only lost slots)
    /// Must be called by one thread at a time (the node lock holder).
    pub fn insert(&self, key: Key, value: &[f32]) -> bool {
        debug_assert_eq!(value.len(), self.space.len(key));
        let s = self.latch(key);
        if s & LOCAL != 0 {
            self.states[key as usize].store(s, Ordering::Release);
            return false;
        }
        let slot = self.allocate_slot(key);
        // SAFETY: latched; the slot was just allocated for this key and its chunk exists.
        unsafe { self.values_mut(key, slot) }.copy_from_slice(value);
        self.states[key as usize].store(LOCAL | slot, Ordering::Release);
        true
    }

    /// Protocol only: removes `key`, appending its value to `out`. Returns false if it was not
    /// local. The key becomes [`Residency::Remote`].
    pub fn remove(&self, key: Key, out: &mut Vec<f32>) -> bool {
        let s = self.latch(key);
        if s & LOCAL == 0 {
            self.states[key as usize].store(s, Ordering::Release);
            return false;
        }
        let slot = s & SLOT_MASK;
        // SAFETY: latched and local.
        out.extend_from_slice(unsafe { self.values_mut(key, slot) });
        self.free_slot(slot);
        self.states[key as usize].store(0, Ordering::Release);
        true
    }

    /// Protocol only: marks a non-local key as in transit (or clears the mark).
    pub fn set_in_transit(&self, key: Key, in_transit: bool) {
        let s = self.latch(key);
        let next = match (in_transit, s & LOCAL != 0) {
            (true, false) => TRANSIT,
            (true, true) => s,
            (false, _) => s & !TRANSIT,
        };
        self.states[key as usize].store(next, Ordering::Release);
    }

    fn allocate_slot(&self, key: Key) -> u32 {
        // SAFETY: protocol-only (module invariant), so no concurrent access to `alloc`.
        let alloc = unsafe { &mut *self.alloc.get() };
        let slot = match self.space.lengths() {
            ValueLengths::PerKey(_) => key as u32,
            ValueLengths::Uniform(_) => alloc.free_slots.pop().unwrap_or_else(|| {
                alloc.next_slot += 1;
                alloc.next_slot - 1
            }),
        };
        let chunk = (slot >> self.chunk_shift) as usize;
        if self.chunks[chunk].load(Ordering::Acquire).is_null() {
            let values = vec![0f32; self.chunk_lens[chunk]].into_boxed_slice();
            self.chunks[chunk].store(Box::into_raw(values).cast::<f32>(), Ordering::Release);
        }
        slot
    }

    fn free_slot(&self, slot: u32) {
        if let ValueLengths::Uniform(_) = self.space.lengths() {
            // SAFETY: protocol-only (module invariant).
            unsafe { &mut *self.alloc.get() }.free_slots.push(slot);
        }
    }

    /// # Safety
    /// The caller holds `key`'s latch, `slot` is the key's allocated slot, and its chunk exists.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    unsafe fn values_mut(&self, key: Key, slot: u32) -> &mut [f32] {
        let (base, offset, len) = if self.uniform_len != 0 {
            let (base, offset) = self.uniform_slot(slot);
            (base, offset, self.uniform_len)
        } else {
            let chunk = (slot >> self.chunk_shift) as usize;
            let first = (chunk as u64) << self.chunk_shift;
            let offset =
                self.space.global_offset(u64::from(slot)) - self.space.global_offset(first);
            let base = self.chunks[chunk].load(Ordering::Acquire);
            (base, offset as usize, self.space.len(key))
        };
        // SAFETY: per the contract, the chunk is allocated with room for this slot's values,
        // and the latch gives us exclusive access to them.
        unsafe { std::slice::from_raw_parts_mut(base.add(offset), len) }
    }

    /// Where `slot`'s values start in a store of uniform length: its chunk's base (null while
    /// the chunk is not allocated) and the offset in values within the chunk.
    #[inline(always)]
    fn uniform_slot(&self, slot: u32) -> (*mut f32, usize) {
        let chunk = (slot >> self.chunk_shift) as usize;
        let within = (slot & ((1 << self.chunk_shift) - 1)) as usize;
        let base = self.chunks[chunk].load(Ordering::Acquire);
        (base, within * self.uniform_len)
    }

    /// Number of keys currently local (walks the state words; for stats and tests).
    pub fn count_local(&self) -> u64 {
        self.states
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) & LOCAL != 0)
            .count() as u64
    }

    /// Bytes of values held in allocated chunks.
    pub fn allocated_bytes(&self) -> usize {
        self.chunks
            .iter()
            .zip(self.chunk_lens.iter())
            .filter(|(c, _)| !c.load(Ordering::Relaxed).is_null())
            .map(|(_, &len)| len * 4)
            .sum()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        for (chunk, &len) in self.chunks.iter().zip(self.chunk_lens.iter()) {
            let ptr = chunk.load(Ordering::Relaxed);
            if !ptr.is_null() {
                // SAFETY: allocated in `allocate_slot` as a boxed slice of exactly `len` values.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
            }
        }
    }
}

/// One state word per key of the key space, allocated zeroed (`Remote`, unlatched).
///
/// The words are requested from the allocator as zeroed memory, which for any sizeable key
/// space is a fresh anonymous mapping: the kernel backs a 4 KiB page (1,024 keys) only once a
/// word in it is written, i.e. once one of those keys is local or in transit here. A node that
/// holds a contiguous share of the keys (range homes, relocated clusters) thus pays resident
/// memory for its own keys' words only, with no indirection on the hot path; reading a word
/// of an untouched page maps the shared zero page and costs nothing.
fn zeroed_states(num_keys: usize) -> Box<[AtomicU32]> {
    let states = Box::<[AtomicU32]>::new_zeroed_slice(num_keys);
    // SAFETY: the all-zero bit pattern is a valid `AtomicU32` (it is `u32` 0).
    unsafe { states.assume_init() }
}

/// Combines `update` into `vals`.
#[inline]
pub fn apply(vals: &mut [f32], update: &[f32], mode: UpdateMode) {
    match mode {
        UpdateMode::Add => vals.iter_mut().zip(update).for_each(|(v, u)| *v += u),
        UpdateMode::Set => vals.copy_from_slice(update),
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
}
