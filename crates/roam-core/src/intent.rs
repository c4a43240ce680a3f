//! Intent signaling (AdaPM, issue #15): one worker's clock, the intents it signalled, and when
//! to act on them.
//!
//! A worker ticks its clock once per data point (or batch) and signals ahead of time which keys
//! it will access in which clock range: `intent(keys, start, end)`. It never says *when* the
//! parameter server should prepare them. [`Intents`] decides: an intent is acted on once the
//! worker's clock is within the *action window* of its start, the number of clocks an action
//! will take with high probability. Acting means asking for the keys to come here (a localize
//! hand-off) — the relocation technique; replicating keys that several nodes want at once is
//! not built yet (issue #15 lists it).
//!
//! The window is measured, not configured. AdaPM's rule — the 0.9999 quantile of a Poisson
//! variable with twice the mean — is applied to the clocks one action takes: the node's mean
//! time from a localize request to the key's arrival (its relocation counters, over spans of at
//! least [`SPAN_NS`]) times this worker's clock rate (ticks per nanosecond over the same spans),
//! each smoothed exponentially (α = 0.1), the product never below the latest span's. Both are
//! measured on the shell's clock (`now`, virtual in the simulator), so the window follows the
//! worker's speed and the network's. [`IntentTiming::Immediate`] acts on every intent when it
//! is signalled (the ablation).
//!
//! Invariants:
//! - No intent is lost: every signalled intent is acted on exactly once, at the latest when
//!   the clock reaches its start. More than [`MAX_PENDING_KEYS`] keys waiting is back-pressure:
//!   the earliest intents are acted on at once, early rather than dropped.
//! - An intent is *late* if, when the clock reaches its start, one of its keys is neither here
//!   nor replicated here. Each acted intent is checked once (at most [`MAX_TRACKED_KEYS`] keys
//!   of acted intents are tracked; beyond that those with the earliest start are counted as
//!   unchecked). One key away makes the whole intent late; the check runs at the tick, so it
//!   says whether the keys were ready when the worker reached the start, not where each access
//!   was served.
//! - Nothing here touches the node: acting produces keys for a hand-off, which the shell issues.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::id::Key;
use crate::node::Time;
use crate::stats::NodeCounters;
use crate::store::{Residency, Store};

/// Keys of signalled intents not yet acted on, per worker, beyond which the earliest are acted
/// on at once.
pub const MAX_PENDING_KEYS: usize = 1 << 20;

/// Keys of acted intents kept for the late check, per worker.
pub const MAX_TRACKED_KEYS: usize = 1 << 20;

/// The shortest span over which the clock rate and the action time are measured (1 ms).
pub const SPAN_NS: u64 = 1_000_000;

/// The action window's first estimate of the clocks an action takes (AdaPM's default).
const INITIAL_ESTIMATE: f64 = 10.0;

/// Weight of a new sample in the smoothed estimate.
const SMOOTHING: f64 = 0.1;

/// The quantile of the action time that the window covers.
const WINDOW_QUANTILE: f64 = 0.9999;

/// The standard normal's 0.9999 quantile, for the normal approximation of large means.
const Z_9999: f64 = 3.719;

/// When a worker acts on its intents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IntentTiming {
    /// Shortly before the start clock, by the measured clocks an action takes (the default).
    #[default]
    Timed,
    /// As soon as the intent is signalled (ablation).
    Immediate,
}

/// A signalled intent waiting for its action.
struct Pending {
    start: u64,
    keys: Vec<Key>,
}

/// An intent acted on, waiting for its start clock (the late check).
struct Acted {
    keys: Vec<Key>,
}

/// Counts for the report (the worker adds them to its counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntentTally {
    /// Intents signalled.
    pub intents: u64,
    /// Keys named in them.
    pub keys: u64,
    /// Intents acted on (each exactly once; the rest are pending).
    pub acted: u64,
    /// Intents whose start clock came before all their keys were here.
    pub late: u64,
    /// Acted intents not checked for lateness (beyond [`MAX_TRACKED_KEYS`]).
    pub unchecked: u64,
}

/// One worker's clock and intents. See the module docs.
pub struct Intents {
    timing: IntentTiming,
    clock: u64,
    /// Signalled intents by start clock (ties by slot), pointing into `pending_slab`.
    pending: BinaryHeap<Reverse<(u64, usize)>>,
    pending_slab: Vec<Option<Pending>>,
    pending_free: Vec<usize>,
    pending_keys: usize,
    /// Acted intents by start clock, pointing into `acted_slab`.
    by_start: BinaryHeap<Reverse<(u64, usize)>>,
    acted_slab: Vec<Option<Acted>>,
    acted_free: Vec<usize>,
    tracked_keys: usize,
    /// The node's relocation counters: the time keys take to arrive after a localize.
    node_counters: Arc<NodeCounters>,
    rate: Rate,
    window: u64,
    /// Recycled key vectors (no allocation per intent once warm).
    spare: Vec<Vec<Key>>,
    tally: IntentTally,
}

/// The measurements behind the action window.
#[derive(Debug, Default)]
struct Rate {
    /// Start of the current span: time, clock, and the node's relocation counters.
    span_start: Option<(Time, u64, u64, u64)>,
    /// Smoothed ticks per nanosecond.
    ticks_per_ns: Option<f64>,
    /// Smoothed nanoseconds from a localize request to the key's arrival.
    action_ns: Option<f64>,
    /// The latest span's clocks per action.
    latest: Option<f64>,
}

impl Intents {
    /// A worker at clock 0 with no intents, on a node with the relocation counters
    /// `node_counters`.
    pub fn new(timing: IntentTiming, node_counters: Arc<NodeCounters>) -> Self {
        Self {
            timing,
            clock: 0,
            pending: BinaryHeap::new(),
            pending_slab: Vec::new(),
            pending_free: Vec::new(),
            pending_keys: 0,
            by_start: BinaryHeap::new(),
            acted_slab: Vec::new(),
            acted_free: Vec::new(),
            tracked_keys: 0,
            node_counters,
            rate: Rate::default(),
            window: poisson_quantile(2.0 * INITIAL_ESTIMATE, WINDOW_QUANTILE),
            spare: Vec::new(),
            tally: IntentTally::default(),
        }
    }

    /// The worker's clock.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// How many clocks before an intent's start it is acted on now.
    pub fn window(&self) -> u64 {
        match self.timing {
            IntentTiming::Timed => self.window,
            IntentTiming::Immediate => u64::MAX,
        }
    }

    /// The estimated clocks one action takes.
    pub fn estimate(&self) -> f64 {
        self.rate.estimate()
    }

    /// The counts so far.
    pub fn tally(&self) -> IntentTally {
        self.tally
    }

    /// Keys of intents signalled and not acted on yet.
    pub fn pending_keys(&self) -> usize {
        self.pending_keys
    }

    /// Records the intent to access `keys` (already validated) from clock `start` on, and
    /// appends to `due` the keys of every intent to act on now (this one, if its start is
    /// within the window, and earlier ones pushed out by back-pressure).
    pub fn signal(&mut self, store: &Store, keys: &[Key], start: u64, due: &mut Vec<Key>) {
        self.tally.intents += 1;
        self.tally.keys += keys.len() as u64;
        let mut owned = self.spare.pop().unwrap_or_default();
        owned.clear();
        owned.extend_from_slice(keys);
        if start <= self.clock.saturating_add(self.window()) {
            self.act(store, start, owned, due);
        } else {
            let slot = self.pending_free.pop().unwrap_or_else(|| {
                self.pending_slab.push(None);
                self.pending_slab.len() - 1
            });
            self.pending_keys += keys.len();
            self.pending_slab[slot] = Some(Pending { start, keys: owned });
            self.pending.push(Reverse((start, slot)));
        }
        while self.pending_keys > MAX_PENDING_KEYS {
            self.act_on_earliest(store, due);
        }
    }

    /// Counts an intent that needs no action (keys never move under the node's policy).
    pub fn count(&mut self, keys: &[Key]) {
        self.tally.intents += 1;
        self.tally.keys += keys.len() as u64;
    }

    /// Ticks the clock at time `now`: checks the intents that start now, updates the window,
    /// and appends to `due` the keys of the intents whose start came within it.
    pub fn advance(&mut self, now: Time, store: &Store, due: &mut Vec<Key>) {
        self.clock += 1;
        if self.rate.observe(now, self.clock, &self.node_counters) {
            // At least one clock: a window of 0 would act only at the start, always late.
            self.window = poisson_quantile(2.0 * self.rate.estimate(), WINDOW_QUANTILE).max(1);
        }
        self.check_started(store);
        let horizon = self.clock.saturating_add(self.window());
        while let Some(&Reverse((start, _))) = self.pending.peek() {
            if start > horizon {
                break;
            }
            self.act_on_earliest(store, due);
        }
    }

    fn act_on_earliest(&mut self, store: &Store, due: &mut Vec<Key>) {
        let Some(Reverse((_, slot))) = self.pending.pop() else {
            return;
        };
        let pending = self.pending_slab[slot]
            .take()
            .expect("a queued intent is in the slab");
        self.pending_free.push(slot);
        self.pending_keys -= pending.keys.len();
        self.act(store, pending.start, pending.keys, due);
    }

    /// Hands the keys not here to `due`, and tracks the intent until its start.
    fn act(&mut self, store: &Store, start: u64, keys: Vec<Key>, due: &mut Vec<Key>) {
        let before = due.len();
        due.extend(keys.iter().copied().filter(|&k| !is_here(store, k)));
        self.tally.acted += 1;
        if start <= self.clock {
            // Due now: late if a key is away, and checked either way: nothing to track.
            if due.len() != before {
                self.tally.late += 1;
            }
            self.spare.push(keys);
            return;
        }
        while self.tracked_keys + keys.len() > MAX_TRACKED_KEYS && self.untrack_earliest() {}
        let slot = self.acted_free.pop().unwrap_or_else(|| {
            self.acted_slab.push(None);
            self.acted_slab.len() - 1
        });
        self.tracked_keys += keys.len();
        self.acted_slab[slot] = Some(Acted { keys });
        self.by_start.push(Reverse((start, slot)));
    }

    /// Stops tracking the acted intent with the earliest start (false if none is tracked).
    fn untrack_earliest(&mut self) -> bool {
        let Some(Reverse((_, slot))) = self.by_start.pop() else {
            return false;
        };
        self.tally.unchecked += 1;
        self.release(slot);
        true
    }

    fn release(&mut self, slot: usize) {
        let acted = self.acted_slab[slot]
            .take()
            .expect("a tracked intent is in the slab");
        self.tracked_keys -= acted.keys.len();
        self.acted_free.push(slot);
        self.spare.push(acted.keys);
    }

    /// Checks every tracked intent that starts by now: late if a key is not here.
    fn check_started(&mut self, store: &Store) {
        while let Some(&Reverse((start, slot))) = self.by_start.peek() {
            if start > self.clock {
                break;
            }
            self.by_start.pop();
            let acted = self.acted_slab[slot]
                .as_ref()
                .expect("a tracked intent is in the slab");
            if !acted.keys.iter().all(|&k| is_here(store, k)) {
                self.tally.late += 1;
            }
            self.release(slot);
        }
    }
}

impl Rate {
    /// Clocks one action takes: the smoothed estimate, never below the latest span's.
    fn estimate(&self) -> f64 {
        match (self.ticks_per_ns, self.action_ns) {
            (Some(rate), Some(ns)) => (rate * ns).max(self.latest.unwrap_or(0.0)),
            _ => INITIAL_ESTIMATE,
        }
    }

    /// Closes the current span if it lasted [`SPAN_NS`]; true if the estimate changed.
    fn observe(&mut self, now: Time, clock: u64, counters: &NodeCounters) -> bool {
        let wait = counters.relocation_wait_ns.load(Ordering::Relaxed);
        let arrivals = counters.relocations_in.load(Ordering::Relaxed);
        let Some((since, clock0, wait0, arrivals0)) = self.span_start else {
            self.span_start = Some((now, clock, wait, arrivals));
            return false;
        };
        let span = now.0.saturating_sub(since.0);
        if span < SPAN_NS {
            return false;
        }
        self.span_start = Some((now, clock, wait, arrivals));
        let ticks = (clock - clock0) as f64 / span as f64;
        self.ticks_per_ns = Some(smooth(self.ticks_per_ns, ticks));
        let arrived = arrivals.saturating_sub(arrivals0);
        let mut latest_ns = None;
        if arrived > 0 {
            let ns = wait.saturating_sub(wait0) as f64 / arrived as f64;
            self.action_ns = Some(smooth(self.action_ns, ns));
            latest_ns = Some(ns);
        }
        self.latest = latest_ns.or(self.action_ns).map(|ns| ns * ticks);
        true
    }
}

fn smooth(old: Option<f64>, sample: f64) -> f64 {
    match old {
        Some(old) => SMOOTHING * sample + (1.0 - SMOOTHING) * old,
        None => sample,
    }
}

/// Whether `key` can be accessed here without a message: owned here, or replicated here.
fn is_here(store: &Store, key: Key) -> bool {
    store.residency(key) == Residency::Local || store.has_replica(key)
}

/// The smallest `k` with `P(X ≤ k) ≥ q` for `X ~ Poisson(mean)`; for large means the normal
/// approximation (rounded up), where summing the mass function would underflow.
pub fn poisson_quantile(mean: f64, q: f64) -> u64 {
    if mean <= 0.0 {
        return 0;
    }
    if mean > 500.0 {
        return (mean + Z_9999 * mean.sqrt()).ceil() as u64;
    }
    let mut p = (-mean).exp();
    let mut cdf = p;
    let mut k = 0u64;
    while cdf < q {
        k += 1;
        p *= mean / k as f64;
        cdf += p;
        if p == 0.0 && cdf < q {
            // Rounding left the tail short of q: the mean plus the normal margin is enough.
            return (mean + Z_9999 * mean.sqrt()).ceil() as u64;
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::KeySpace;

    fn setup() -> (Store, Intents, Arc<NodeCounters>) {
        let counters = Arc::new(NodeCounters::default());
        let intents = Intents::new(IntentTiming::Timed, counters.clone());
        (
            Store::new(KeySpace::uniform(1 << 21, 1).unwrap()),
            intents,
            counters,
        )
    }

    /// Ticks `n` times, `ns_per_tick` apart from `*now`, collecting what falls due.
    fn tick(
        intents: &mut Intents,
        store: &Store,
        now: &mut u64,
        ns_per_tick: u64,
        n: u64,
    ) -> Vec<Key> {
        let mut due = Vec::new();
        for _ in 0..n {
            *now += ns_per_tick;
            intents.advance(Time(*now), store, &mut due);
        }
        due
    }

    #[test]
    fn intents_are_acted_on_once_their_start_is_within_the_window() {
        let (store, mut intents, _) = setup();
        let window = intents.window();
        assert_eq!(window, 39, "the first estimate: 10 clocks");
        let mut due = Vec::new();
        intents.signal(&store, &[1, 2], window, &mut due);
        assert_eq!(due, [1, 2], "within the window: acted on at once");
        due.clear();
        intents.signal(&store, &[3], window + 5, &mut due);
        assert!(due.is_empty());
        assert_eq!(intents.pending_keys(), 1);
        let mut now = 0;
        assert!(tick(&mut intents, &store, &mut now, 1_000, 4).is_empty());
        assert_eq!(tick(&mut intents, &store, &mut now, 1_000, 1), [3]);
        assert_eq!(intents.pending_keys(), 0);
    }

    #[test]
    fn keys_here_are_not_moved_and_absent_keys_at_the_start_are_late() {
        let (store, mut intents, _) = setup();
        store.insert(5, &[0.0]);
        let mut due = Vec::new();
        intents.signal(&store, &[5, 6], 3, &mut due);
        assert_eq!(due, [6], "key 5 is here already");
        let mut now = 0;
        tick(&mut intents, &store, &mut now, 1_000, 2);
        assert_eq!(intents.tally().late, 0, "not at the start yet");
        store.insert(6, &[0.0]);
        tick(&mut intents, &store, &mut now, 1_000, 1);
        assert_eq!(intents.tally().late, 0, "key 6 arrived before clock 3");
        intents.signal(&store, &[7], 5, &mut due);
        tick(&mut intents, &store, &mut now, 1_000, 2);
        assert_eq!(intents.tally().late, 1, "key 7 never arrived");
        // Signalled at its start with the key away: late at once.
        intents.signal(&store, &[8], 5, &mut due);
        assert_eq!(intents.tally().late, 2);
        // And at its start with every key here: on time, nothing moved.
        due.clear();
        intents.signal(&store, &[5], 5, &mut due);
        assert!(due.is_empty());
        assert_eq!(intents.tally().late, 2);
        assert_eq!(intents.tally().intents, 4);
    }

    #[test]
    fn back_pressure_acts_on_the_earliest_intents_early_and_loses_none() {
        let (store, mut intents, _) = setup();
        let half = MAX_PENDING_KEYS / 2;
        let keys: Vec<Key> = (0..half as Key - 1).collect();
        let mut due = Vec::new();
        intents.signal(&store, &keys, 1_000_000, &mut due);
        assert!(due.is_empty());
        intents.signal(&store, &keys, 500_000, &mut due);
        assert!(due.is_empty());
        assert_eq!(intents.pending_keys(), 2 * keys.len());
        // Over the bound: the earliest (start 500,000) goes now, the other stays.
        intents.signal(&store, &[0, 1, 2], 2_000_000, &mut due);
        assert_eq!(due, keys);
        assert_eq!(intents.pending_keys(), keys.len() + 3);
    }

    #[test]
    fn the_window_follows_the_measured_relocation_time_in_clocks() {
        let (store, mut intents, counters) = setup();
        let mut now = 0;
        // 1 µs per tick; keys take 50 µs to arrive: 50 clocks per action.
        for _ in 0..20 {
            add_arrivals(&counters, 10, 50_000);
            tick(&mut intents, &store, &mut now, 1_000, 1_000);
        }
        assert!(
            (intents.estimate() - 50.0).abs() < 1.0,
            "{}",
            intents.estimate()
        );
        assert_eq!(intents.window(), poisson_quantile(100.0, WINDOW_QUANTILE));
        // The worker slows down to 10 µs per tick: 5 clocks per action, the window shrinks.
        for _ in 0..100 {
            add_arrivals(&counters, 10, 50_000);
            tick(&mut intents, &store, &mut now, 10_000, 100);
        }
        assert!(
            (intents.estimate() - 5.0).abs() < 0.5,
            "{}",
            intents.estimate()
        );
        let immediate = Intents::new(IntentTiming::Immediate, counters);
        assert_eq!(immediate.window(), u64::MAX);
    }

    fn add_arrivals(counters: &NodeCounters, keys: u64, ns_each: u64) {
        crate::stats::add(&counters.relocations_in, keys);
        crate::stats::add(&counters.relocation_wait_ns, keys * ns_each);
    }

    #[test]
    fn poisson_quantiles_match_known_values() {
        assert_eq!(poisson_quantile(0.0, WINDOW_QUANTILE), 0);
        // P(X ≤ k) for Poisson(1): 0.3679, 0.7358, 0.9197, 0.9810, 0.9963, 0.9994, 0.99992.
        assert_eq!(poisson_quantile(1.0, 0.99), 4);
        assert_eq!(poisson_quantile(1.0, WINDOW_QUANTILE), 6);
        // Poisson(20): the 0.9999 quantile is 39 (the normal approximation would say 37).
        assert_eq!(poisson_quantile(20.0, WINDOW_QUANTILE), 39);
        let big = poisson_quantile(10_000.0, WINDOW_QUANTILE);
        assert!((10_371..=10_373).contains(&big), "{big}");
    }
}
