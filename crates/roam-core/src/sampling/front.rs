//! The sampling operations of a worker's access front end: `prepare_sample`, `pull_sample` and
//! `finish_sample` on [`Front`], for every shell.
//!
//! Like the front end's pulls, a sampling call serves what is local from the store under the
//! keys' latches and hands the rest to the node: a pull of the sampled keys that are not here,
//! or (at prepare, for `preloc` and `pool`) a localize of the keys drawn ahead. Bad input is
//! refused before anything is drawn, so a refused call changes neither the handle nor any
//! random state.

use rustc_hash::FxHashSet as HashSet;

use rand::Rng;

use super::{
    Distribution, LOCAL_SCAN, LOCAL_TRIES, MAX_PREPARED, NodeSampler, SampleError, SampleHandle,
    SamplerId, Scheme, Support,
};
use crate::access::{Front, Handoff};
use crate::id::Key;
use crate::node::Time;
use crate::stats::bump;

/// `local`'s draw: the first of up to [`LOCAL_TRIES`] draws, starting at position `first`,
/// that `accept` takes.
#[inline(always)]
fn first_accepted_draw(
    dist: &Distribution,
    support: &Support,
    rng: &mut impl Rng,
    first: u64,
    mut accept: impl FnMut(Key) -> bool,
) -> Option<Key> {
    let mut position = first;
    for _ in 0..LOCAL_TRIES {
        let key = support.key(position);
        if accept(key) {
            return Some(key);
        }
        position = dist.draw_position(rng);
    }
    None
}

/// Draws from `sampler` until `accept` takes a key (with replacement it takes the first).
#[inline]
fn draw_accepted(
    sampler: &NodeSampler,
    rng: &mut impl Rng,
    drawn: &mut Option<HashSet<Key>>,
) -> Key {
    loop {
        let key = sampler.spec.distribution.draw(rng);
        if drawn.as_mut().is_none_or(|set| set.insert(key)) {
            return key;
        }
    }
}

impl Front {
    /// Starts drawing `n` samples from sampler `id`. `preloc` draws them now and `pool` takes
    /// them from the node's pool; the keys of those that are not here (and of pool groups this
    /// take created) come back as a localize hand-off, to be issued (and not necessarily
    /// waited: the samples are exact wherever their keys are).
    pub fn prepare_sample(
        &mut self,
        now: Time,
        id: SamplerId,
        n: usize,
    ) -> Result<(SampleHandle, Option<Handoff<'_>>), SampleError> {
        // Field by field, so the sampler borrowed from the shared samplers and this worker's
        // random numbers and scratch can be used together (no `Arc` clone per call: its count
        // is a cache line every worker of the node would write).
        let Self {
            store,
            keys_move,
            samplers,
            rng,
            misses,
            ..
        } = self;
        let sampler = samplers.get(id)?;
        let spec = &sampler.spec;
        if n > MAX_PREPARED {
            return Err(SampleError::TooManyPrepared {
                requested: n,
                max: MAX_PREPARED,
            });
        }
        if !spec.with_replacement {
            let reachable = spec.distribution.reachable();
            if n as u64 > reachable {
                return Err(SampleError::NotEnoughKeys {
                    requested: n,
                    reachable,
                });
            }
        }
        let mut handle = SampleHandle {
            sampler: id,
            remaining: n,
            ahead: Vec::new(),
            next: 0,
            drawn: (!spec.with_replacement).then(HashSet::default),
        };
        // The keys to localize are collected where a localize hand-off keeps them.
        let store = &**store;
        let wanted = &mut misses.keys;
        wanted.clear();
        misses.offsets.clear();
        match spec.scheme {
            Scheme::Naive | Scheme::Local { .. } => return Ok((handle, None)),
            Scheme::Preloc => {
                handle.ahead.reserve(n);
                for _ in 0..n {
                    let key = draw_accepted(sampler, rng, &mut handle.drawn);
                    handle.ahead.push(key);
                }
                wanted.extend_from_slice(&handle.ahead);
            }
            Scheme::Pool { .. } => {
                let pool = sampler.pool.as_ref().expect("pool samplers have a pool");
                let drawn = &mut handle.drawn;
                pool.lock().take(
                    now,
                    n,
                    &spec.distribution,
                    |key| store.is_held(key),
                    |key| drawn.as_mut().is_none_or(|set| set.insert(key)),
                    &mut handle.ahead,
                    wanted,
                );
                // Samples whose key moved away since its group was fetched are asked back.
                wanted.extend_from_slice(&handle.ahead);
            }
        }
        if !*keys_move {
            return Ok((handle, None));
        }
        wanted.retain(|&key| !store.is_held(key));
        if wanted.is_empty() {
            return Ok((handle, None));
        }
        Ok((handle, Some(Handoff::Localize { keys: wanted })))
    }

    /// [`Front::prepare_sample`] for samples to be used while this worker's clock is in
    /// `start..end` (AdaPM): under `preloc` the samples are drawn now and their keys signalled
    /// as an intent ([`Front::intent`]) instead of moved at once, so they arrive shortly before
    /// `start`; other schemes behave as `prepare_sample` (`pool` fetches its groups itself).
    pub fn prepare_sample_intent(
        &mut self,
        now: Time,
        id: SamplerId,
        n: usize,
        (start, end): (u64, u64),
    ) -> Result<(SampleHandle, Option<Handoff<'_>>), SampleError> {
        if end <= start {
            return Err(SampleError::EmptyIntentRange { start, end });
        }
        if !matches!(self.samplers.get(id)?.spec.scheme, Scheme::Preloc) {
            return self.prepare_sample(now, id, n);
        }
        // Drawn now; what `preloc` would move at once becomes an intent instead (only counted
        // where keys never move, like any intent).
        let (handle, _moved_at_once) = self.prepare_sample(now, id, n)?;
        self.actions.clear();
        if self.keys_move {
            self.intents
                .signal(&self.store, &handle.ahead, start, end, &mut self.actions);
        } else {
            self.intents.count(&handle.ahead);
        }
        Ok((handle, self.due_handoff()))
    }

    /// Draws `keys_out.len()` samples of `handle` into `keys_out` and reads their values into
    /// `vals_out` (`keys_out.len() × value length` values). What is local is read now; `None`
    /// if that was all, else the pull of the rest for the node.
    pub fn pull_sample(
        &mut self,
        handle: &mut SampleHandle,
        keys_out: &mut [Key],
        vals_out: &mut [f32],
    ) -> Result<Option<Handoff<'_>>, SampleError> {
        let sampler = self.samplers.get(handle.sampler)?;
        let (k, len, scheme) = (keys_out.len(), sampler.value_len, sampler.spec.scheme);
        if k > handle.remaining {
            return Err(too_many(handle, k));
        }
        if vals_out.len() != k * len {
            return Err(SampleError::LengthMismatch {
                keys: k,
                value_len: len,
                expected: k * len,
                actual: vals_out.len(),
            });
        }
        if let Scheme::Local { .. } = scheme {
            // The draw reads each sample's values as it finds it held here.
            return self.draw(handle, keys_out, Some(vals_out));
        }
        self.draw(handle, keys_out, None)?;
        // Sampled keys were validated with the sampler: a pull of them cannot be refused.
        Ok(self
            .pull(keys_out, vals_out)
            .expect("sampled keys are in the key space and the buffer was checked"))
    }

    /// Draws `keys_out.len()` of `handle`'s samples into `keys_out` without reading their
    /// values, for a caller that reads them itself with its other keys (one batched pull,
    /// duplicates read once). The samples are those [`Front::pull_sample`] would give: `local`
    /// only takes keys held here at the draw (a key may move away before the caller's pull,
    /// which then reads it remotely, exactly).
    pub fn sample_keys(
        &mut self,
        handle: &mut SampleHandle,
        keys_out: &mut [Key],
    ) -> Result<(), SampleError> {
        let none = self.draw(handle, keys_out, None)?;
        debug_assert!(none.is_none(), "drawing keys alone hands nothing off");
        Ok(())
    }

    /// Ends a sampling: returns how many of its samples were never pulled.
    pub fn finish_sample(&mut self, handle: SampleHandle) -> usize {
        handle.remaining
    }

    /// Draws `keys_out.len()` of `handle`'s samples into `keys_out`. Only the `local` schemes
    /// read values here (into `vals`, when given: `vals.len()` was checked): each sample is a
    /// key held here, read from the store as it is found; a sample that found none within the
    /// bounds is its first draw, left for the node (the returned pull).
    fn draw(
        &mut self,
        handle: &mut SampleHandle,
        keys_out: &mut [Key],
        mut vals: Option<&mut [f32]>,
    ) -> Result<Option<Handoff<'_>>, SampleError> {
        let Self {
            store,
            fast_local_access,
            counters,
            misses,
            samplers,
            rng,
            ..
        } = self;
        let sampler = samplers.get(handle.sampler)?;
        let k = keys_out.len();
        if k > handle.remaining {
            return Err(too_many(handle, k));
        }
        handle.remaining -= k;
        bump(&counters.sampled_keys, k as u64);
        let scan = match sampler.spec.scheme {
            Scheme::Naive => {
                for slot in keys_out.iter_mut() {
                    *slot = draw_accepted(sampler, rng, &mut handle.drawn);
                }
                return Ok(None);
            }
            Scheme::Preloc | Scheme::Pool { .. } => {
                keys_out.copy_from_slice(&handle.ahead[handle.next..handle.next + k]);
                handle.next += k;
                return Ok(None);
            }
            Scheme::Local { next } => next,
        };
        let (store, fast, read) = (&**store, *fast_local_access, vals.is_some());
        let dist = &sampler.spec.distribution;
        let support = *dist.support();
        let len = sampler.value_len;
        misses.keys.clear();
        misses.offsets.clear();
        // Every sample's first draw, made up front so that the state words of the keys a few
        // samples ahead are fetched while this one is checked: a check is a cache miss on a
        // word of the node's whole table, and it is most of a local draw's cost.
        let mut firsts = std::mem::take(&mut misses.positions);
        firsts.clear();
        firsts.extend((0..k).map(|_| dist.draw_position(rng)));
        const AHEAD: usize = 8;
        for &position in firsts.iter().take(AHEAD) {
            store.prefetch_word(support.key(position));
        }
        if !scan && !read && handle.drawn.is_none() {
            // Keys alone, with replacement (word vectors' negatives): the loop below with its
            // per-sample closures and `Option` branches folded away, which took more
            // instructions than the draws themselves (docs/benchmarks.md, "Local sampling of
            // keys alone").
            for (i, slot) in keys_out.iter_mut().enumerate() {
                if let Some(&ahead) = firsts.get(i + AHEAD) {
                    store.prefetch_word(support.key(ahead));
                }
                let chosen =
                    first_accepted_draw(dist, &support, rng, firsts[i], |key| store.is_held(key));
                *slot = chosen.unwrap_or_else(|| {
                    bump(&counters.sample_fallbacks, 1);
                    support.key(firsts[i])
                });
            }
            misses.positions = firsts;
            return Ok(None);
        }
        let mut hits = 0u64;
        for (i, slot) in keys_out.iter_mut().enumerate() {
            if let Some(&ahead) = firsts.get(i + AHEAD) {
                store.prefetch_word(support.key(ahead));
            }
            let mut out = vals.as_deref_mut().map(|v| &mut v[i * len..(i + 1) * len]);
            let fresh = |key: Key| handle.drawn.as_ref().is_none_or(|set| !set.contains(&key));
            // Reads `key` if it is held here (with fast local access: straight from the
            // store; without, the classic ablation, by a message to this node); only checks
            // that it is when the caller reads the values itself.
            let mut take = |key: Key, misses: &mut crate::access::Misses| match out.as_deref_mut() {
                None => store.is_held(key),
                Some(out) if fast => store.pull_local(key, out),
                Some(_) if store.is_held(key) => {
                    misses.push(key, i * len);
                    true
                }
                Some(_) => false,
            };
            let first = firsts[i];
            let mut chosen = None;
            if scan {
                for step in 0..support.len.min(LOCAL_SCAN) {
                    let position = (first + step) % support.len;
                    let key = support.key(position);
                    // A key the target never draws is not a sample, held or not.
                    if dist.can_draw(position) && fresh(key) && take(key, misses) {
                        chosen = Some(key);
                        break;
                    }
                }
            } else {
                chosen = first_accepted_draw(dist, &support, rng, first, |key| {
                    fresh(key) && take(key, misses)
                });
            }
            let key = match chosen {
                Some(key) => {
                    hits += 1;
                    key
                }
                None => {
                    // Nothing held here within reach: an exact draw, read remotely.
                    let mut key = support.key(first);
                    while !fresh(key) {
                        key = dist.draw(rng);
                    }
                    if read {
                        misses.push(key, i * len);
                    }
                    bump(&counters.sample_fallbacks, 1);
                    key
                }
            };
            if let Some(set) = &mut handle.drawn {
                set.insert(key);
            }
            *slot = key;
        }
        misses.positions = firsts;
        if !read {
            return Ok(None);
        }
        if fast {
            bump(&counters.local_pull_keys, hits);
        }
        if misses.keys.is_empty() {
            bump(&counters.local_pull_ops, 1);
            return Ok(None);
        }
        Ok(Some(Handoff::Pull {
            keys: &misses.keys,
            offsets: &misses.offsets,
        }))
    }
}

fn too_many(handle: &SampleHandle, requested: usize) -> SampleError {
    SampleError::TooMany {
        requested,
        remaining: handle.remaining,
    }
}
