//! The `pool` scheme's node-level pool: groups of drawn keys, each draw reused up to `U` times,
//! localized ahead of use, refilled early enough that a group is usually local when it is
//! reached.
//!
//! A group is `group_draws` independent draws from the distribution, copied `reuse` times and
//! shuffled. Its distinct keys are localized (by the worker whose take created it) the moment it
//! is created, so the pool prefetches: after every take it keeps at least
//! `2 × fetch time × consumption rate` samples in its groups (NuPS's safety factor of 2), where
//! the fetch time is measured — the time from a group's creation until every key of it was
//! seen local — and the rate is an exponential average of samples taken per nanosecond.
//!
//! Postponing: a sample whose key is not local when taken is swapped with a later sample of the
//! same group whose key is (a bounded scan); it stays in the group and is taken later.
//!
//! Invariants:
//! - Every draw is handed out exactly `reuse` times unless the pool is dropped first: samples
//!   left in a group that a take cannot use (sampling without replacement) move on to the next
//!   group rather than being lost. So the marginal distribution of the samples is the target
//!   distribution; samples are correlated (the same draw recurs up to `reuse` times).
//! - The pool holds at most [`MAX_GROUPS`] groups.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use super::dist::Distribution;
use crate::id::Key;
use crate::node::Time;

/// Groups a pool keeps at most (prefetching stops there).
pub const MAX_GROUPS: usize = 256;
/// How far a postponing take looks ahead in a group for a local sample.
const POSTPONE_SCAN: usize = 64;
/// Weight of the newest window in the rate estimate.
const SMOOTHING: f64 = 0.1;
/// A rate window closes after this long.
const RATE_WINDOW_NS: u64 = 1_000_000;

/// One group of samples.
#[derive(Debug)]
struct Group {
    /// The draws (each once), in draw order: what is localized and checked for readiness.
    draws: Vec<Key>,
    /// `reuse` shuffled copies of `draws`; `samples[taken..]` are still to be handed out.
    samples: Vec<Key>,
    taken: usize,
    created: Time,
    /// `draws[..ready_scan]` were each seen local at some take.
    ready_scan: usize,
    fetched: bool,
}

/// Counters of a pool (for benchmarks and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Groups created.
    pub groups: u64,
    /// Groups reached by a take before all their keys had been seen local.
    pub late_groups: u64,
    /// Samples taken whose key was not local at the take (postponing could not avoid them).
    pub remote_samples: u64,
    /// Samples swapped forward because their key was not local.
    pub postponed: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct Pool {
    groups: VecDeque<Group>,
    group_draws: usize,
    reuse: usize,
    postpone: bool,
    rng: SmallRng,
    /// Samples in all groups not handed out yet.
    ahead: usize,
    /// Measured fetch time (ns), `None` until the first group was fetched.
    fetch_ns: Option<f64>,
    /// Samples per ns.
    rate: Option<f64>,
    window_start: Option<Time>,
    window_samples: usize,
    counters: PoolCounters,
}

impl Pool {
    /// An empty pool of groups of `group_draws` draws, each handed out `reuse` times.
    pub fn new(group_draws: usize, reuse: usize, postpone: bool, rng: SmallRng) -> Self {
        Self {
            groups: VecDeque::new(),
            group_draws: group_draws.max(1),
            reuse: reuse.max(1),
            postpone,
            rng,
            ahead: 0,
            fetch_ns: None,
            rate: None,
            window_start: None,
            window_samples: 0,
            counters: PoolCounters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> PoolCounters {
        self.counters
    }

    /// The measured fetch time in nanoseconds, once a group was fetched.
    pub fn fetch_ns(&self) -> Option<f64> {
        self.fetch_ns
    }

    /// Samples not handed out yet.
    pub fn ahead(&self) -> usize {
        self.ahead
    }

    /// Takes `n` samples into `out`. `accept(key)` may refuse a sample (sampling without
    /// replacement); a refused sample stays in the pool. `is_local(key)` tells whether a key is
    /// on this node. Keys of groups created by this take (to be localized by the caller) are
    /// appended to `fetch`, deduplicated within each group.
    #[allow(clippy::too_many_arguments)]
    pub fn take(
        &mut self,
        now: Time,
        n: usize,
        dist: &Distribution,
        is_local: impl Fn(Key) -> bool,
        mut accept: impl FnMut(Key) -> bool,
        out: &mut Vec<Key>,
        fetch: &mut Vec<Key>,
    ) {
        self.observe_fetches(now, &is_local);
        self.count_rate(now, n);
        let want = out.len() + n;
        // Without replacement a take can refuse every sample left in a group; they then move
        // on to the next group. The front end never asks for more distinct keys than the
        // distribution can draw, so fresh groups eventually supply them and this ends.
        while out.len() < want {
            if self.groups.is_empty() {
                self.add_group(now, dist, fetch);
            }
            let postpone = self.postpone;
            let group = self.groups.front_mut().expect("a group was just ensured");
            if !group.fetched {
                // Reached before it was seen local: the fetch took at least this long.
                group.fetched = true;
                self.counters.late_groups += 1;
                let took = now.0.saturating_sub(group.created.0) as f64;
                self.fetch_ns = Some(self.fetch_ns.map_or(took, |f| f.max(took)));
            }
            // `accept` is asked only about the sample about to be taken (true commits it).
            // Postponing prefers a local sample within the scan window; otherwise (and past
            // the window) the first acceptable sample is taken, local or not.
            let (taken, end) = (group.taken, group.samples.len());
            let scan_end = if postpone {
                end.min(taken + POSTPONE_SCAN)
            } else {
                taken
            };
            let samples = &group.samples;
            let found = (taken..scan_end)
                .find(|&j| is_local(samples[j]) && accept(samples[j]))
                .map(|j| (j, true))
                .or_else(|| {
                    (taken..end)
                        .find(|&j| accept(samples[j]))
                        .map(|j| (j, false))
                });
            match found {
                Some((j, local)) => {
                    if j != group.taken {
                        group.samples.swap(j, group.taken);
                        if postpone {
                            self.counters.postponed += 1;
                        }
                    }
                    let key = group.samples[group.taken];
                    group.taken += 1;
                    self.ahead -= 1;
                    if !local && !is_local(key) {
                        self.counters.remote_samples += 1;
                    }
                    out.push(key);
                    if group.taken == group.samples.len() {
                        self.groups.pop_front();
                    }
                }
                None => {
                    // Nothing acceptable left here: the rest goes on to the next group.
                    let rest = group.samples.split_off(group.taken);
                    self.groups.pop_front();
                    if self.groups.is_empty() {
                        self.add_group(now, dist, fetch);
                    }
                    let next = self.groups.front_mut().expect("a group was just ensured");
                    next.samples.extend(rest);
                }
            }
        }
        self.prefetch(now, dist, fetch);
    }

    /// Creates groups until the pool holds enough samples to cover the measured fetch time at
    /// the measured rate, twice over (at least one group).
    fn prefetch(&mut self, now: Time, dist: &Distribution, fetch: &mut Vec<Key>) {
        let cover = match (self.fetch_ns, self.rate) {
            (Some(f), Some(r)) => (2.0 * f * r).ceil() as usize,
            // Nothing measured yet: two groups.
            _ => 2 * self.group_draws * self.reuse,
        };
        let target = cover.max(self.group_draws * self.reuse);
        while self.ahead < target && self.groups.len() < MAX_GROUPS {
            self.add_group(now, dist, fetch);
        }
    }

    fn add_group(&mut self, now: Time, dist: &Distribution, fetch: &mut Vec<Key>) {
        let draws: Vec<Key> = (0..self.group_draws)
            .map(|_| dist.draw(&mut self.rng))
            .collect();
        let mut samples = draws.repeat(self.reuse);
        samples.shuffle(&mut self.rng);
        let mut distinct = draws.clone();
        distinct.sort_unstable();
        distinct.dedup();
        fetch.extend(distinct);
        self.ahead += samples.len();
        self.counters.groups += 1;
        self.groups.push_back(Group {
            draws,
            samples,
            taken: 0,
            created: now,
            ready_scan: 0,
            fetched: false,
        });
    }

    /// Marks groups whose keys have all been seen local as fetched, measuring their fetch time.
    fn observe_fetches(&mut self, now: Time, is_local: &impl Fn(Key) -> bool) {
        for group in self.groups.iter_mut().filter(|g| !g.fetched) {
            while group.ready_scan < group.draws.len() && is_local(group.draws[group.ready_scan]) {
                group.ready_scan += 1;
            }
            if group.ready_scan < group.draws.len() {
                // Later groups were created later: they are unlikely to be ready first.
                break;
            }
            group.fetched = true;
            let took = now.0.saturating_sub(group.created.0) as f64;
            self.fetch_ns = Some(match self.fetch_ns {
                None => took,
                Some(f) => (1.0 - SMOOTHING) * f + SMOOTHING * took,
            });
        }
    }

    fn count_rate(&mut self, now: Time, n: usize) {
        let start = *self.window_start.get_or_insert(now);
        self.window_samples += n;
        let elapsed = now.0.saturating_sub(start.0);
        // A window closes after a while, or after a group's worth of samples (so that the
        // first estimate comes early).
        let group = self.group_draws * self.reuse;
        if elapsed >= RATE_WINDOW_NS || (elapsed > 0 && self.window_samples >= group) {
            let rate = self.window_samples as f64 / elapsed as f64;
            self.rate = Some(match self.rate {
                None => rate,
                Some(r) => (1.0 - SMOOTHING) * r + SMOOTHING * rate,
            });
            self.window_start = Some(now);
            self.window_samples = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use rand::SeedableRng;

    use super::*;
    use crate::sampling::dist::Support;

    fn dist(len: u64) -> Distribution {
        Distribution::uniform(Support::range(0..len)).unwrap()
    }

    #[test]
    fn every_draw_is_handed_out_exactly_reuse_times() {
        let d = dist(1000);
        let mut pool = Pool::new(50, 4, true, SmallRng::seed_from_u64(3));
        let (mut out, mut fetch) = (Vec::new(), Vec::new());
        // Odd keys are "local": postponing reorders, but hands every copy out.
        for t in 0..100 {
            pool.take(
                Time(t * 1000),
                37,
                &d,
                |k| k % 2 == 1,
                |_| true,
                &mut out,
                &mut fetch,
            );
        }
        let drained = pool.ahead();
        pool.take(
            Time(1 << 40),
            drained,
            &d,
            |_| true,
            |_| true,
            &mut out,
            &mut fetch,
        );
        let mut uses: HashMap<Key, usize> = HashMap::new();
        for &k in &out {
            *uses.entry(k).or_default() += 1;
        }
        // Each draw came out exactly 4 times, and every key handed out was fetched.
        let fetched: HashSet<Key> = fetch.iter().copied().collect();
        // (The draining take prefetched fresh groups, untouched.)
        assert_eq!(
            out.len() + pool.ahead(),
            pool.counters().groups as usize * 50 * 4
        );
        for (k, n) in &uses {
            assert_eq!(n % 4, 0, "key {k} handed out {n} times");
            assert!(fetched.contains(k), "key {k} never fetched");
        }
        assert!(pool.counters().postponed > 0);
    }

    #[test]
    fn postponing_prefers_local_samples_and_refusals_stay_in_the_pool() {
        let d = dist(100);
        let mut pool = Pool::new(40, 2, true, SmallRng::seed_from_u64(9));
        let (mut out, mut fetch) = (Vec::new(), Vec::new());
        pool.take(Time(0), 10, &d, |k| k < 50, |_| true, &mut out, &mut fetch);
        assert!(out.iter().all(|&k| k < 50), "{out:?}");
        assert!(!fetch.is_empty());
        // Without replacement: ten distinct keys from a pool full of repeats.
        let mut seen = HashSet::new();
        let mut distinct = Vec::new();
        pool.take(
            Time(1),
            10,
            &d,
            |_| true,
            |k| seen.insert(k),
            &mut distinct,
            &mut fetch,
        );
        assert_eq!(distinct.len(), 10);
        assert_eq!(distinct.iter().collect::<HashSet<_>>().len(), 10);
    }

    #[test]
    fn prefetching_follows_the_measured_fetch_time_and_rate() {
        let d = dist(10_000);
        let mut pool = Pool::new(10, 1, false, SmallRng::seed_from_u64(5));
        let (mut out, mut fetch) = (Vec::new(), Vec::new());
        let local: std::cell::RefCell<HashSet<Key>> = Default::default();
        // One sample per µs; a fetch completes 100 µs after the group is created.
        let mut created: Vec<(u64, Vec<Key>)> = Vec::new();
        for t in 0..20_000u64 {
            let now = t * 1000;
            for (at, keys) in &created {
                if *at + 100_000 == now {
                    local.borrow_mut().extend(keys.iter().copied());
                }
            }
            fetch.clear();
            pool.take(
                Time(now),
                1,
                &d,
                |k| local.borrow().contains(&k),
                |_| true,
                &mut out,
                &mut fetch,
            );
            if !fetch.is_empty() {
                created.push((now, fetch.clone()));
            }
        }
        let f = pool.fetch_ns().expect("groups were fetched");
        // (A key drawn again is local before its new group's fetch completes: a little less.)
        assert!((85_000.0..=110_000.0).contains(&f), "fetch estimate {f}");
        // 2 × 100 µs × 1 sample/µs = 200 samples kept ahead: the late groups are the first
        // ones only (while the estimate grows from the first groups' lower bounds).
        assert!(pool.ahead() >= 200, "{} ahead", pool.ahead());
        assert!(pool.ahead() <= 220, "{} ahead", pool.ahead());
        assert!(pool.counters().late_groups <= 40, "{:?}", pool.counters());
    }
}
