//! The store's batch paths: a worker's pull or push of many keys of the uniform length, one
//! loop per mode and compile-time short length (`by_len!`), prefetching a few keys ahead so that
//! the cache misses of a random batch overlap. Short values of dense spaces go a block of keys
//! at a time, pass by pass (`pull_blocks`, `push_blocks`): fewer instructions per key and no
//! key waiting on the one before. A batch of one named table's keys runs the same per-key loops
//! over that table's areas (`pull_table_batch_local`, `push_table_batch_local`). Same invariants
//! as the per-key paths (`mod.rs`): a record is written only under its key's latch, short values
//! are read optimistically, and a copy counts only if its key's word is unchanged after it.

use super::*;

impl Store {
    /// For the block paths of uniform stores: where the values of the record a held state
    /// word `s` names start (in the replica area for a replica).
    fn block_locator(&self) -> impl Fn(u64) -> *const AtomicU32 + '_ {
        let (values, replicas) = (self.values().uniform_view(), self.replicas().uniform_view());
        move |s: u64| {
            let area = if s & REPLICA == 0 { values } else { replicas };
            let (base, offset) = area.locate((s & SLOT_MASK) as u32);
            base.wrapping_add(offset).cast::<AtomicU32>().cast_const()
        }
    }

    /// Pulls a batch of keys of the uniform length `len` into `out` (`keys.len() * len` values),
    /// calling `miss(i)` for each key `i` that is not held here. Prefetches a few keys ahead, so
    /// that the cache misses of a random batch overlap instead of queuing behind each latch.
    /// Stops at the first key outside the key space and returns it (reads change nothing, so
    /// checking while copying saves the caller a separate pass over the batch). The values of
    /// a missed key in `out` are unspecified (an optimistic copy may have begun before the key
    /// moved out): the caller fills them from wherever the key is.
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
        // Only stores that an eviction clock sweeps pay for marking pulled rows REFERENCED.
        if self.clocked {
            by_len!(len, self.pull_batch::<true>(keys, out, len, miss))
        } else {
            by_len!(len, self.pull_batch::<false>(keys, out, len, miss))
        }
    }

    /// [`Store::pull_batch_local`] with the length `L` known at compile time (0: only at run
    /// time), so that the copy of a short value is a few unrolled moves; `TOUCH`: mark the rows
    /// read REFERENCED for the eviction clock.
    #[inline(always)]
    fn pull_batch<const TOUCH: bool, const L: usize>(
        &self,
        keys: &[Key],
        out: &mut [f32],
        len: usize,
        miss: impl FnMut(usize),
    ) -> Result<(), Key> {
        // Compile-time lengths are exactly the optimistic ones (see `by_len!`).
        debug_assert_eq!(L > 0, self.optimistic);
        let words = self.index.dense_words();
        if L > 0 && !words.is_empty() {
            return self.pull_blocks::<TOUCH, L>(words, keys, out, miss);
        }
        self.pull_rows::<TOUCH, L>(self.uniform_rows(), keys, out, len, miss)
    }

    /// The per-key loop of a pull from `rows` (the uniform store's areas, or one named
    /// table's), whose records start with `len` visible values (`L` when known at compile time,
    /// which is exactly when the store reads optimistically): each key's word looked up, its
    /// record copied optimistically or under the latch, the next keys' words and records
    /// prefetched.
    #[inline(always)]
    fn pull_rows<const TOUCH: bool, const L: usize>(
        &self,
        rows: Rows<'_>,
        keys: &[Key],
        out: &mut [f32],
        len: usize,
        mut miss: impl FnMut(usize),
    ) -> Result<(), Key> {
        debug_assert_eq!(L > 0, self.optimistic);
        let len = if L > 0 { L } else { len };
        let (values, replicas) = (rows.values, rows.replicas);
        for (i, (&key, here)) in keys.iter().zip(out.chunks_exact_mut(len)).enumerate() {
            self.prefetch_ahead(rows, keys, i);
            let Some(state) = self.index.get(key) else {
                if !self.space.contains(key) {
                    return Err(key);
                }
                miss(i);
                continue;
            };
            let mut copy = |s: u64| {
                let area = if s & REPLICA == 0 { values } else { replicas };
                // SAFETY: held when observed, so the slot was allocated in this area; uniform
                // records start with `len` visible values.
                let visible = unsafe { area.prefix((s & SLOT_MASK) as u32, len) };
                load_values::<L>(here, visible, L == 0);
            };
            let hit = if L > 0 {
                read_consistent::<TOUCH>(state, copy)
            } else {
                latched_as(state, HELD, |s| {
                    copy(s);
                    if TOUCH { s | REFERENCED } else { s }
                })
            };
            if !hit {
                miss(i);
            }
        }
        Ok(())
    }

    /// The optimistic pull of a dense space (short values, `L` > 0), a block of keys at a time
    /// in three passes, so that no pass waits on the one before for each key: (1) read every
    /// key's state word (`Acquire`), locate its record and prefetch it; (2) copy the records
    /// (relaxed atomic loads); (3) after one `Acquire` fence, reload every word and keep a copy
    /// only if its word is unchanged — per key exactly the sequence lock of
    /// [`read_consistent`] (its proof holds key by key: the order between keys is irrelevant).
    /// A key whose word was latched, changed or showed it not held takes the per-key path in
    /// pass 3, in key order, so `miss` is still called in order. Measured against the per-key
    /// loop: docs/benchmarks.md, "Local fast path, sixth session".
    #[inline(always)]
    fn pull_blocks<const TOUCH: bool, const L: usize>(
        &self,
        words: &[AtomicU64],
        keys: &[Key],
        out: &mut [f32],
        mut miss: impl FnMut(usize),
    ) -> Result<(), Key> {
        /// Keys per block: enough prefetches in flight to cover a miss to memory, few enough
        /// that a block's words and records stay in L1 between its passes.
        const B: usize = 16;
        let locate = self.block_locator();
        for (b, (block, outs)) in keys.chunks(B).zip(out.chunks_mut(B * L)).enumerate() {
            // Pass 1. `seen[j] == 0` (never a held word): key j goes to the per-key path.
            let mut seen = [0u64; B];
            let mut at = [std::ptr::null::<AtomicU32>(); B];
            for (j, &key) in block.iter().enumerate() {
                prefetch_next_block_word(words, keys, (b + 1) * B + j);
                let Some(state) = words.get(key as usize) else {
                    if !self.space.contains(key) {
                        return Err(key);
                    }
                    continue;
                };
                let s = state.load(Ordering::Acquire);
                if s & HELD != 0 && s & LATCH == 0 {
                    seen[j] = s;
                    at[j] = locate(s);
                    prefetch(at[j].cast());
                }
            }
            // Pass 2: the copies, from records that were held as of their word.
            for (j, here) in outs.chunks_exact_mut(L).enumerate() {
                if seen[j] != 0 {
                    // SAFETY: `at[j]` is the slot of a record held as of `seen[j]` (read with
                    // `Acquire`, so its chunk pointer was visible), and uniform records start
                    // with `L` visible values; areas never free memory, so if the slot has
                    // been reused meanwhile this reads another record's values, which pass 3
                    // discards (the word changed).
                    let visible = unsafe { std::slice::from_raw_parts(at[j], L) };
                    load_values::<L>(here, visible, false);
                }
            }
            // Pass 3: validate (see `read_consistent` for why the fence makes this exact).
            fence(Ordering::Acquire);
            for (j, (&key, here)) in block.iter().zip(outs.chunks_exact_mut(L)).enumerate() {
                let Some(state) = words.get(key as usize) else {
                    miss(b * B + j);
                    continue;
                };
                let s = seen[j];
                if s != 0 && state.load(Ordering::Relaxed) == s {
                    if TOUCH && s & REFERENCED == 0 {
                        state.fetch_or(REFERENCED, Ordering::Relaxed);
                    }
                    continue;
                }
                let copy = |s: u64| {
                    // SAFETY: as in pass 2, for the word `read_consistent` observed.
                    let visible = unsafe { std::slice::from_raw_parts(locate(s), L) };
                    load_values::<L>(here, visible, false);
                };
                if !read_consistent::<TOUCH>(state, copy) {
                    miss(b * B + j);
                }
            }
        }
        Ok(())
    }

    /// Pulls a batch of keys of one named table (`table`, whose rows have `dim` values; the
    /// caller checked that every key is in it) into `out`, calling `miss(i)` for each key `i`
    /// not held here. The table's records are uniform, so this is the uniform stores' loop over
    /// the table's own areas: no per-key lookup of the key's table or length. Optimistic when
    /// the store reads optimistically (every table's dim short, `Store::new`), else latched.
    pub(crate) fn pull_table_batch_local(
        &self,
        table: usize,
        keys: &[Key],
        out: &mut [f32],
        dim: usize,
        miss: impl FnMut(usize),
    ) -> Result<(), Key> {
        debug_assert_eq!(out.len(), keys.len() * dim);
        self.assert_table(table, dim, keys);
        let rows = self.table_rows(table);
        let l = self.compile_time_len(dim);
        if self.clocked {
            by_len!(l, self.pull_rows::<true>(rows, keys, out, dim, miss))
        } else {
            by_len!(l, self.pull_rows::<false>(rows, keys, out, dim, miss))
        }
    }

    /// Applies a batch of updates to keys of one named table (`table`, rows of `dim` values;
    /// the caller checked that every key is in it), like [`Store::push_batch_local`] over the
    /// table's own areas; gradients step with the table's optimizer.
    pub(crate) fn push_table_batch_local(
        &self,
        table: usize,
        keys: &[Key],
        update: &[f32],
        dim: usize,
        mode: UpdateMode,
        mut miss: impl FnMut(usize),
    ) {
        debug_assert_eq!(update.len(), keys.len() * dim * mode.width());
        self.assert_table(table, dim, keys);
        let rows = self.table_rows(table);
        let l = self.compile_time_len(dim);
        match mode {
            UpdateMode::Add => by_len!(l, self.push_rows::<false>(rows, keys, update, dim, miss)),
            UpdateMode::Set => by_len!(l, self.push_rows::<true>(rows, keys, update, dim, miss)),
            UpdateMode::Gradient => {
                let Some(&first) = keys.first() else { return };
                let Some(opt) = self.space.optimizer_for(first) else {
                    (0..keys.len()).for_each(miss);
                    return;
                };
                self.grad_rows_by_optimizer(rows, keys, update, dim, opt, miss);
            }
            UpdateMode::GradientSums => {
                for (i, (&key, update)) in keys.iter().zip(update.chunks_exact(2 * dim)).enumerate()
                {
                    if !self.push_local(key, update, mode) {
                        miss(i);
                    }
                }
            }
        }
    }

    /// The table loops address slots by the table's dim and areas: another dim would address
    /// the wrong values, so it is refused outright (once per batch); the caller found every key
    /// in `table` (`Tables::common_table`).
    #[inline(always)]
    fn assert_table(&self, table: usize, dim: usize, keys: &[Key]) {
        let tables = self.space.named_tables().map(|t| t.all());
        assert!(
            tables
                .and_then(|t| t.get(table))
                .is_some_and(|t| t.dim() == dim),
            "batch of dim {dim} for table {table}"
        );
        debug_assert!(
            keys.iter()
                .all(|&k| crate::tables::Tables::index_of(k) == table)
        );
    }

    /// The value and replica areas of named table `table`.
    fn table_rows(&self, table: usize) -> Rows<'_> {
        let [values, replicas] = &self.by_table[table];
        self.rows(values.uniform_view(), replicas.uniform_view())
    }

    /// The uniform store's value and replica areas.
    #[inline(always)]
    pub(super) fn uniform_rows(&self) -> Rows<'_> {
        self.rows(self.values().uniform_view(), self.replicas().uniform_view())
    }

    /// The length `L` at which a batch loop over records of `len` visible values runs: `len`
    /// where the store reads optimistically (all its lengths are short), else 0 (known only at
    /// run time; records are accessed under the latch with plain loads and stores).
    #[inline(always)]
    pub(super) fn compile_time_len(&self, len: usize) -> usize {
        if self.optimistic { len } else { 0 }
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
        debug_assert_eq!(update.len(), keys.len() * len * mode.width());
        // One loop per mode and short length, so that neither the mode nor the accepted flags
        // are tested per key, and short values are added with unrolled moves.
        match mode {
            UpdateMode::Add => by_len!(len, self.push_batch::<false>(keys, update, len, miss)),
            UpdateMode::Set => by_len!(len, self.push_batch::<true>(keys, update, len, miss)),
            UpdateMode::Gradient => self.push_gradients_local(keys, update, len, miss),
            UpdateMode::GradientSums => {
                let width = 2 * len;
                let mut miss = miss;
                for (i, (&key, update)) in keys.iter().zip(update.chunks_exact(width)).enumerate() {
                    if !self.push_local(key, update, mode) {
                        miss(i);
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn push_batch<const SET: bool, const L: usize>(
        &self,
        keys: &[Key],
        update: &[f32],
        len: usize,
        miss: impl FnMut(usize),
    ) {
        debug_assert_eq!(L > 0, self.optimistic);
        let words = self.index.dense_words();
        if L > 0 && !words.is_empty() {
            return self.push_blocks::<SET, L>(words, keys, update, miss);
        }
        self.push_rows::<SET, L>(self.uniform_rows(), keys, update, len, miss)
    }

    /// The per-key loop of a push (added, or overwriting with `SET`) into `rows` (the uniform
    /// store's areas, or one named table's), whose records start with `len` visible values
    /// (`L` when known at compile time: the store reads optimistically).
    #[inline(always)]
    fn push_rows<const SET: bool, const L: usize>(
        &self,
        rows: Rows<'_>,
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
        let (values, replicas) = (rows.values, rows.replicas);
        for (i, (&key, vals)) in keys.iter().zip(update.chunks_exact(len)).enumerate() {
            self.prefetch_ahead(rows, keys, i);
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
                        dirtied(s)
                    } else {
                        // SAFETY: latched and a replica: the slot is in the replica area, and
                        // replica records start with the `len` values of the replica.
                        let value = unsafe { replicas.prefix(slot, len) };
                        add_values::<L>(value, vals, plain);
                        dirtied(s)
                    }
                })
            });
            if !hit {
                miss(i);
            }
        }
    }

    /// [`Store::push_batch`] for short values of a dense space, a block of keys at a time in
    /// two passes: (1) read every key's state word, locate its record and prefetch it; (2)
    /// latch, combine and release each key as the per-key loop does. The latch decides: pass
    /// 1's location is used only if the word latched is exactly the word pass 1 read (the same
    /// slot in the same area), else the record is located again from the latched word.
    #[inline(always)]
    fn push_blocks<const SET: bool, const L: usize>(
        &self,
        words: &[AtomicU64],
        keys: &[Key],
        update: &[f32],
        mut miss: impl FnMut(usize),
    ) {
        const B: usize = 16;
        let accept = if SET { LOCAL } else { HELD };
        let locate = self.block_locator();
        for (b, (block, vals)) in keys.chunks(B).zip(update.chunks(B * L)).enumerate() {
            // `seen[j] == 0` (never a held word): no location for key j yet.
            let mut seen = [0u64; B];
            let mut at = [std::ptr::null::<AtomicU32>(); B];
            for (j, &key) in block.iter().enumerate() {
                prefetch_next_block_word(words, keys, (b + 1) * B + j);
                if let Some(state) = words.get(key as usize) {
                    // `Acquire`: the chunk pointer of the slot is visible (as under a latch).
                    let s = state.load(Ordering::Acquire);
                    if s & accept != 0 {
                        seen[j] = s;
                        at[j] = locate(s);
                        prefetch_record(at[j], L);
                    }
                }
            }
            for (j, (&key, vals)) in block.iter().zip(vals.chunks_exact(L)).enumerate() {
                let hit = words.get(key as usize).is_some_and(|state| {
                    latched_as(state, accept, |s| {
                        let record = if s == seen[j] { at[j] } else { locate(s) };
                        // SAFETY: latched and held: `record` is the slot of `s` (pass 1's
                        // location is of the same word), and records start with `L` visible
                        // values (a replica's: the `L` values of its value).
                        let visible = unsafe { std::slice::from_raw_parts(record, L) };
                        if SET {
                            // Only owned records accept a Set (`accept`).
                            store_values(visible, vals, false);
                        } else {
                            add_values::<L>(visible, vals, false);
                        }
                        dirtied(s)
                    })
                });
                if !hit {
                    miss(b * B + j);
                }
            }
        }
    }

    /// The batch paths address slots by the uniform length: any other length would address
    /// the wrong values, so it is refused outright (once per batch).
    #[inline(always)]
    pub(super) fn assert_uniform(&self, len: usize) {
        assert!(
            len != 0 && len == self.uniform_len,
            "batch of length {len} on a store of uniform length {}",
            self.uniform_len
        );
    }

    /// A batch loop's areas `values` and `replicas`, and what it prefetches ahead (decided once
    /// per batch, see [`Rows`]).
    #[inline(always)]
    fn rows<'v>(&self, values: UniformView<'v>, replicas: UniformView<'v>) -> Rows<'v> {
        Rows {
            values,
            replicas,
            probe: self.index.dense_words().is_empty()
                && self.index.len() >= PROBE_PREFETCH_MIN_ENTRIES,
        }
    }

    /// Prefetches the state word of key `i + 2 * D` and the record of key `i + D` (dense
    /// spaces), or the first probe slot of key `i + 4`'s lookup (large sparse spaces).
    #[inline(always)]
    pub(super) fn prefetch_ahead(&self, rows: Rows<'_>, keys: &[Key], i: usize) {
        const D: usize = 8;
        let words = self.index.dense_words();
        if words.is_empty() {
            // A sparse lookup: start its probe's first slot a few keys ahead (the record's
            // place is known only once the probe found the word).
            if rows.probe
                && let Some(&next) = keys.get(i + 4)
            {
                self.index.prefetch(next);
            }
            return;
        }
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
                Some(rows.values)
            } else if s & REPLICA != 0 {
                Some(rows.replicas)
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
}

/// Sparse indexes of fewer entries are taken to be in cache, where a probe's prefetch only
/// costs its hash (measured: docs/embeddings.md, "Cost for one key space").
const PROBE_PREFETCH_MIN_ENTRIES: u64 = 1 << 16;

/// The areas a batch loop reads or writes (owned records, replicas), and whether it
/// prefetches sparse probes: once the index is too large to be in cache (a probe of a random
/// key is then a miss to memory).
#[derive(Clone, Copy)]
pub(super) struct Rows<'v> {
    pub(super) values: UniformView<'v>,
    pub(super) replicas: UniformView<'v>,
    probe: bool,
}

/// Prefetches the state word of `keys[at]` (a key of the next block: its word is then in
/// cache when that block's first pass reads it), if there is such a key in the space.
#[inline(always)]
fn prefetch_next_block_word(words: &[AtomicU64], keys: &[Key], at: usize) {
    if let Some(&next) = keys.get(at)
        && let Some(state) = words.get(next as usize)
    {
        prefetch(state.as_ptr().cast());
    }
}
