//! The store's replica operations (NuPS replicas and replicas made by intents): inserting and
//! dropping a replica, taking its pending delta (`value - base`) and rebasing it on the hub's
//! primary. All are protocol-only and run under the key's latch, so they are atomic with
//! respect to the workers' pushes into the replica's value (see `mod.rs` for the record layout
//! of a replica: its value, then its synced base).

use super::*;

impl Store {
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

    /// Protocol only: drops this node's replica of `key`, appending its value and then its
    /// synced base to `out`. Returns false if there was no replica here.
    pub fn remove_replica(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.remove_held(key, REPLICA, out)
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
