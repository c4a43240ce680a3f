//! Value areas: where the store's records live, addressed by slot.
//!
//! An area hands out fixed addresses for records and never moves or frees them while the store
//! lives, so a pointer computed under a key's latch stays valid for as long as the latch is held.
//! Two shapes:
//!
//! - *uniform*: records of one length (`stride`), slots from a free list. Chunks of about
//!   4 MiB (at least one record); a fixed table of chunk pointers covers 2^32 slots or 1 TiB of
//!   records, whichever is less, and locating a slot is a shift, a mask and a multiply — the
//!   hot path's cost.
//! - *by key*: per-key lengths in a dense key space, where a key's slot is the key itself and
//!   its record sits at a fixed offset (a scaled prefix sum of the lengths); chunks cover fixed
//!   key ranges.
//!
//! Chunks are allocated zeroed on first use: the allocator maps large zeroed blocks fresh, and
//! the kernel backs their pages only when written, so a chunk larger than what it holds costs
//! address space, not memory. Allocation and freeing of slots are protocol-only (one thread at a
//! time, under the node lock); reads of chunk pointers by workers are `Acquire` loads of
//! pointers published with `Release`.
//!
//! The shell may install a *chunk hint* ([`set_chunk_hint`]), called once on every new chunk of
//! at least [`HINT_MIN_BYTES`] before it is published: `roam` uses it to ask the kernel for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)`), which halves the cost of first touching
//! a large table's memory (a restore writes all of it; docs/benchmarks.md, issue #16). The core
//! stays sans-IO: the hint is a plain function pointer, and it runs only where a chunk is
//! allocated (protocol-only, once per ~4 MiB), never on the hot path.

use std::cell::UnsafeCell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::id::Key;
use crate::keyspace::KeySpace;

/// Target chunk size in values (4 MiB of `f32`).
const CHUNK_VALUES: u64 = 1 << 20;

/// The most record bytes a uniform area addresses (its chunk table is sized for this).
const MAX_AREA_BYTES: u64 = 1 << 40;

/// Chunks smaller than this get no hint (a huge page is 2 MiB on x86-64 and most arm64).
pub const HINT_MIN_BYTES: usize = 2 << 20;

/// The shell's hint for new chunks: `(start, bytes)` of a zeroed, not yet published chunk.
pub type ChunkHint = fn(*mut u8, usize);

static CHUNK_HINT: OnceLock<ChunkHint> = OnceLock::new();

/// Installs `hint` for every chunk allocated from now on, in every store of the process (the
/// first call wins: it is a property of the process, such as its allocator).
pub fn set_chunk_hint(hint: ChunkHint) {
    let _ = CHUNK_HINT.set(hint);
}

/// Slot bookkeeping, touched only by the protocol.
#[derive(Default)]
pub(super) struct SlotAlloc {
    next_slot: u64,
    free_slots: Vec<u32>,
    /// Every chunk's allocation (start, values), which `Drop` frees: with a hint, a chunk's
    /// records start at the first 2 MiB boundary inside a larger allocation (below).
    allocations: Vec<(*mut f32, usize)>,
}

/// Per-key record placement: record of key `k` is `scale_value × len(k) + scale_key` values at
/// `scale_value × offset(k) + scale_key × k`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scale {
    pub(super) value: u64,
    pub(super) key: u64,
}

pub(super) struct Area {
    /// The uniform record length; 0 for an area addressed by key.
    stride: usize,
    /// Slots a uniform area can hand out (the chunk table's reach).
    max_slots: u64,
    /// log2 of the slots (uniform) or keys (by key) per chunk.
    chunk_shift: u32,
    chunks: Box<[AtomicPtr<f32>]>,
    alloc: UnsafeCell<SlotAlloc>,
    /// The key space and scale of an area addressed by key.
    by_key: Option<(KeySpace, Scale)>,
}

impl Area {
    /// An area of records of `stride` values each.
    pub(super) fn uniform(stride: usize) -> Self {
        let stride_bytes = 4 * stride.max(1) as u64;
        let chunk_shift = (CHUNK_VALUES * 4 / stride_bytes).max(1).ilog2();
        let max_slots_log2 = (MAX_AREA_BYTES / stride_bytes).max(1).ilog2().min(32);
        let table_log2 = max_slots_log2.saturating_sub(chunk_shift);
        Self {
            stride,
            max_slots: 1 << (chunk_shift + table_log2),
            chunk_shift,
            chunks: null_chunks(1 << table_log2),
            alloc: UnsafeCell::new(SlotAlloc::default()),
            by_key: None,
        }
    }

    /// An area addressed by key in the dense, per-key-length `space`.
    pub(super) fn by_key(space: &KeySpace, scale: Scale) -> Self {
        let num_keys = space.num_keys();
        let avg = (space.total_len() * scale.value).div_ceil(num_keys) + scale.key;
        let chunk_shift = (CHUNK_VALUES / avg.max(1)).max(1).ilog2();
        Self {
            stride: 0,
            max_slots: num_keys,
            chunk_shift,
            chunks: null_chunks(num_keys.div_ceil(1 << chunk_shift) as usize),
            alloc: UnsafeCell::new(SlotAlloc::default()),
            by_key: Some((space.clone(), scale)),
        }
    }

    /// Length in values of chunk `chunk`.
    fn chunk_len(&self, chunk: usize) -> usize {
        match &self.by_key {
            None => self.stride << self.chunk_shift,
            Some((space, scale)) => {
                let first = (chunk as u64) << self.chunk_shift;
                let end = ((chunk as u64 + 1) << self.chunk_shift).min(space.num_keys());
                (scaled_offset(space, *scale, end) - scaled_offset(space, *scale, first)) as usize
            }
        }
    }

    /// Protocol only: a slot for `key`'s record, its memory allocated.
    pub(super) fn allocate(&self, key: Key) -> u32 {
        let slot = if self.by_key.is_some() {
            key as u32
        } else {
            // SAFETY: protocol-only (module docs), so nothing else touches `alloc` now.
            let alloc = unsafe { &mut *self.alloc.get() };
            alloc.free_slots.pop().unwrap_or_else(|| {
                let slot = alloc.next_slot;
                assert!(
                    slot < self.max_slots,
                    "a node holds at most {} records of {} values",
                    self.max_slots,
                    self.stride
                );
                alloc.next_slot += 1;
                slot as u32
            })
        };
        self.ensure(slot);
        slot
    }

    /// Protocol only: allocates the memory of the records at `slot` (a key, in an area
    /// addressed by key) if it does not exist yet. An area whose slots another one hands out
    /// (the replicas' gradient accumulators follow the replicas' slots) calls only this.
    pub(super) fn ensure(&self, slot: u32) {
        let chunk = (slot >> self.chunk_shift) as usize;
        assert!(
            chunk < self.chunks.len(),
            "slot {slot} is past this area's reach"
        );
        if self.chunks[chunk].load(Ordering::Acquire).is_null() {
            let len = self.chunk_len(chunk);
            let bytes = len * 4;
            let hint = CHUNK_HINT.get().filter(|_| bytes >= HINT_MIN_BYTES);
            // With a hint, the records start at a 2 MiB boundary: huge pages cover only
            // aligned 2 MiB ranges, and the allocator's mapping of a 4 MiB chunk (with its
            // header) starts anywhere, so without this only about half of the chunk could get
            // them. The padding is address space only (its pages are never touched).
            let pad = if hint.is_some() {
                HINT_MIN_BYTES / 4
            } else {
                0
            };
            let values = vec![0f32; len + pad].into_boxed_slice();
            let start = Box::into_raw(values).cast::<f32>();
            // SAFETY: protocol-only (module docs).
            unsafe { &mut *self.alloc.get() }
                .allocations
                .push((start, len + pad));
            let ptr = start.wrapping_add(start.align_offset(HINT_MIN_BYTES).min(pad));
            if let Some(hint) = hint {
                hint(ptr.cast(), bytes);
            }
            self.chunks[chunk].store(ptr, Ordering::Release);
        }
    }

    /// Protocol only: `slot` may be handed out again.
    pub(super) fn free(&self, slot: u32) {
        if self.by_key.is_none() {
            // SAFETY: protocol-only (module docs).
            unsafe { &mut *self.alloc.get() }.free_slots.push(slot);
        }
    }

    /// The record of `key` at `slot`, as the bits of its `f32` values. Records are accessed
    /// through atomics because optimistic readers (see the store's module docs) may read a
    /// record while its latch holder writes it.
    ///
    /// # Safety
    /// `slot` was allocated for `key` in this area (at some time: memory is never freed, so a
    /// stale slot still addresses valid memory, but its values may belong to another key).
    #[inline(always)]
    pub(super) unsafe fn record(&self, key: Key, slot: u32) -> &[AtomicU32] {
        let (base, offset, len) = self.locate(key, slot);
        // SAFETY: per the contract the chunk exists and holds the record; `f32` and `AtomicU32`
        // have the same size and alignment, and all concurrent accesses are atomic.
        unsafe { std::slice::from_raw_parts(base.add(offset).cast::<AtomicU32>(), len) }
    }

    /// Chunk base (null while the chunk does not exist) and offset of uniform `slot`.
    #[inline(always)]
    pub(super) fn uniform_locate(&self, slot: u32) -> (*mut f32, usize) {
        self.uniform_view().locate(slot)
    }

    /// The addressing fields of a uniform area, copied out so that a batch loop keeps them in
    /// registers (loads through `&self` cannot be hoisted across the loop's atomics).
    #[inline(always)]
    pub(super) fn uniform_view(&self) -> UniformView<'_> {
        debug_assert!(self.by_key.is_none());
        UniformView {
            chunks: &self.chunks,
            chunk_shift: self.chunk_shift,
            stride: self.stride,
        }
    }

    /// Chunk base (null while the chunk does not exist), offset and length of `key`'s record
    /// at `slot`.
    #[inline(always)]
    fn locate(&self, key: Key, slot: u32) -> (*mut f32, usize, usize) {
        match &self.by_key {
            None => {
                let (base, offset) = self.uniform_locate(slot);
                (base, offset, self.stride)
            }
            Some((space, scale)) => {
                let chunk = (key >> self.chunk_shift) as usize;
                let first = (chunk as u64) << self.chunk_shift;
                let offset =
                    scaled_offset(space, *scale, key) - scaled_offset(space, *scale, first);
                let len = space.len(key) as u64 * scale.value + scale.key;
                let base = self.chunks[chunk].load(Ordering::Acquire);
                (base, offset as usize, len as usize)
            }
        }
    }

    /// Bytes of values held in allocated chunks.
    pub(super) fn allocated_bytes(&self) -> usize {
        (0..self.chunks.len())
            .filter(|&c| !self.chunks[c].load(Ordering::Relaxed).is_null())
            .map(|c| self.chunk_len(c) * 4)
            .sum()
    }
}

/// See [`Area::uniform_view`].
#[derive(Clone, Copy)]
pub(super) struct UniformView<'a> {
    chunks: &'a [AtomicPtr<f32>],
    chunk_shift: u32,
    stride: usize,
}

impl<'a> UniformView<'a> {
    /// Values per record: a uniform area's whole record length.
    #[inline(always)]
    pub(super) fn stride(self) -> usize {
        self.stride
    }

    /// Chunk base (null while the chunk does not exist) and offset of `slot`.
    #[inline(always)]
    pub(super) fn locate(self, slot: u32) -> (*mut f32, usize) {
        let chunk = (slot >> self.chunk_shift) as usize;
        let within = (slot & ((1 << self.chunk_shift) - 1)) as usize;
        debug_assert!(chunk < self.chunks.len());
        // SAFETY: slots come from `allocate`, which hands out fewer than `max_slots`, the
        // table's length shifted by `chunk_shift`.
        let chunk = unsafe { self.chunks.get_unchecked(chunk) };
        // Relaxed: a chunk pointer is stored once, before any slot in it is handed out, and the
        // slot reached the caller through a state word read with `Acquire` (or a latch), which
        // orders the pointer's store before this load.
        (chunk.load(Ordering::Relaxed), within * self.stride)
    }

    /// The first `len` values of the record at `slot` (no bounds check on the hot path).
    ///
    /// # Safety
    /// As for [`Area::record`], and `len` is at most the stride.
    #[inline(always)]
    pub(super) unsafe fn prefix(self, slot: u32, len: usize) -> &'a [AtomicU32] {
        debug_assert!(len <= self.stride);
        let (base, offset) = self.locate(slot);
        // SAFETY: as for `Area::record`; the prefix lies within the record.
        unsafe { std::slice::from_raw_parts(base.add(offset).cast::<AtomicU32>(), len) }
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        for &(start, len) in &self.alloc.get_mut().allocations {
            // SAFETY: allocated in `allocate` as a boxed slice of exactly `len` values, and
            // nothing uses it once the store is dropped.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(start, len)) });
        }
    }
}

fn null_chunks(n: usize) -> Box<[AtomicPtr<f32>]> {
    let chunks = Box::<[AtomicPtr<f32>]>::new_zeroed_slice(n);
    // SAFETY: the all-zero bit pattern is a valid `AtomicPtr` (the null pointer).
    unsafe { chunks.assume_init() }
}

fn scaled_offset(space: &KeySpace, scale: Scale, key: Key) -> u64 {
    space.global_offset(key) * scale.value + key * scale.key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_slots_of_every_chunk_get_their_own_records() {
        let area = Area::uniform(3);
        let slots: Vec<u32> = (0..5).map(|_| area.allocate(0)).collect();
        assert_eq!(slots, [0, 1, 2, 3, 4]);
        let bits = |slot| {
            // SAFETY: slots just allocated.
            unsafe { area.record(0, slot) }
                .iter()
                .map(|v| v.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        };
        // SAFETY: slot just allocated.
        let record = unsafe { area.record(0, 1) };
        record[2].store(7, Ordering::Relaxed);
        assert_eq!(bits(1), [0, 0, 7]);
        assert_eq!(bits(2), [0, 0, 0], "records do not overlap");
        area.free(1);
        assert_eq!(area.allocate(0), 1, "freed slots are reused");
        // Short records: the table reaches every u32 slot; long ones: 1 TiB of records, in
        // chunks of one record at the least.
        assert_eq!(area.chunks.len() << area.chunk_shift, 1 << 32);
        let huge = Area::uniform(1 << 22);
        assert_eq!(huge.chunk_shift, 0);
        assert_eq!(huge.max_slots, 1 << 16);
        assert_eq!(huge.chunks.len(), 1 << 16);
    }
}
