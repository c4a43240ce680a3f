//! Access to record values: plain (vectorised, under the latch in stores without optimistic
//! readers) or atomic (relaxed loads and stores, so that an optimistic reader's overlapping copy
//! is a discarded read, not a data race). Which one a store uses is fixed per store (`plain`);
//! see the module docs of `store` for the protocol that makes each safe.

use super::*;

/// Record values as plain floats.
///
/// # Safety
/// The caller holds the record's latch in a store without optimistic readers (`plain`), so no
/// other thread accesses these values meanwhile.
#[inline(always)]
#[allow(clippy::mut_from_ref)]
pub(super) unsafe fn as_plain(values: &[AtomicU32]) -> &mut [f32] {
    // SAFETY: `AtomicU32` and `f32` have the same layout, the atomics' interior mutability
    // permits writes through this pointer, and the contract gives us exclusive access.
    unsafe { std::slice::from_raw_parts_mut(values.as_ptr() as *mut f32, values.len()) }
}

/// Copies record values out: with plain (vectorised) loads under the latch when `plain`,
/// else with atomic loads (an optimistic read), unrolled when the length `L` is known (> 0).
#[inline(always)]
pub(super) fn load_values<const L: usize>(out: &mut [f32], values: &[AtomicU32], plain: bool) {
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
pub(super) fn store_values(values: &[AtomicU32], new: &[f32], plain: bool) {
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
pub(super) fn add_values<const L: usize>(values: &[AtomicU32], update: &[f32], plain: bool) {
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
pub(super) fn apply_to_record(record: &[AtomicU32], update: &[f32], mode: UpdateMode, plain: bool) {
    let values = &record[..update.len()];
    match mode {
        UpdateMode::Add => add_values::<0>(values, update, plain),
        UpdateMode::Set => store_values(values, update, plain),
        UpdateMode::Gradient | UpdateMode::GradientSums => {
            unreachable!("gradients go through step_record")
        }
    }
}

/// Combines `update` into a whole record (visible values then hidden state) held outside the
/// store (a record in transit): `optimizer` is the key space's, used by gradients only.
#[inline]
pub fn apply(record: &mut [f32], update: &[f32], mode: UpdateMode, optimizer: Option<&Optimizer>) {
    if mode == UpdateMode::GradientSums {
        if let Some(opt) = optimizer {
            let (sums, squares) = update.split_at(update.len() / 2);
            let (w, state) = record.split_at_mut(sums.len());
            opt.step_sums(w, state, sums, squares);
        }
        return;
    }
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
        UpdateMode::GradientSums => unreachable!("applied above"),
    }
}
