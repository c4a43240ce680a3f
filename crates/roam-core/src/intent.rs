//! Intent signaling (AdaPM, issue #15): one worker's clock, the intents it signalled, and when
//! to act on them.
//!
//! A worker ticks its clock once per data point (or batch) and signals ahead of time which keys
//! it will access in which clock range: `intent(keys, start, end)`. It never says *when* the
//! parameter server should prepare them. [`Intents`] decides: an intent is acted on once the
//! worker's clock is within the *action window* of its start, the number of clocks an action
//! will take with high probability. Acting means asking for the keys that are neither here nor
//! replicated here (a hand-off; the node's owner of each key then moves it here or, if another
//! node wants it at the same time, shares a replica: `share/mod.rs`), and holding the node's
//! *interest* in every key of the intent (`interest.rs`) until the clock reaches its end, with
//! the time that end is expected at. The keys asked for carry their *lead*: the time left
//! until the intent's start, by the same measured rate (the owner of a key that is still busy
//! with it moves it then if its own use ends first: `share/defer.rs`). When
//! the last active intent on a key ends and the node holds a replica of it, the key is handed
//! to the protocol as *unwanted* (the replica flushes and is dropped).
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
//!   the clock reaches its start (or dropped unacted when its worker finishes first). More than [`MAX_PENDING_KEYS`] keys waiting is back-pressure:
//!   the earliest intents are acted on at once, early rather than dropped.
//! - An intent is *late* if, when the clock reaches its start, one of its keys is neither here
//!   nor replicated here. Each acted intent is checked once (one released early before its
//!   start is counted as unchecked). One key away makes the whole intent late; the check runs
//!   at the tick, so it says whether the keys were ready when the worker reached the start,
//!   not where each access was served.
//! - Every acted intent releases its interest exactly once: when the clock reaches its end, or
//!   early (beyond [`MAX_TRACKED_KEYS`] active keys, the earliest ending first), or when the
//!   worker finishes ([`Intents::finish`]: a finished worker's clock is infinite; intents never
//!   acted on are dropped then, as no access will come for them).
//! - Nothing here touches the node: acting produces keys for a hand-off, which the shell issues.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::id::Key;
use crate::interest::Interest;
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
    end: u64,
    keys: Vec<Key>,
}

/// An intent acted on: its keys hold this node's interest until the clock reaches `end`, and
/// are checked for lateness when it reaches `start` (unless `checked` already).
struct Acted {
    keys: Vec<Key>,
    checked: bool,
    /// Whether the intent lasts less than a share-sync round (by the clock rate when acted).
    short: bool,
    /// Tells a slot's successive intents apart (heap entries of a released one are skipped).
    serial: u64,
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
    /// Acted intents not checked for lateness (released early, beyond [`MAX_TRACKED_KEYS`]).
    pub unchecked: u64,
}

/// One worker's clock and intents. See the module docs.
pub struct Intents {
    timing: IntentTiming,
    clock: u64,
    /// Signalled intents by start clock (ties by slot), pointing into `pending_slab`.
    pending: Queue<(u64, usize)>,
    pending_slab: Vec<Option<Pending>>,
    pending_free: Vec<usize>,
    pending_keys: usize,
    /// Acted intents by start clock (the late check) and by end clock (the release of their
    /// interest), as `(clock, serial, slot)` into `acted_slab`. Not binary heaps: entries come
    /// nearly sorted (`intent/queue.rs`).
    by_start: Queue<(u64, u64, usize)>,
    by_end: Queue<(u64, u64, usize)>,
    acted_slab: Vec<Option<Acted>>,
    acted_free: Vec<usize>,
    next_serial: u64,
    tracked_keys: usize,
    /// The node's per-key interest, which acted intents hold until their end.
    interest: Arc<Interest>,
    /// The node's relocation counters: the time keys take to arrive after a localize.
    node_counters: Arc<NodeCounters>,
    rate: Rate,
    window: u64,
    /// The time of the latest tick (the clock rate turns clocks into times from it).
    last_tick: Option<Time>,
    /// Recycled key vectors (no allocation per intent once warm).
    spare: Vec<Vec<Key>>,
    tally: IntentTally,
    /// Interest kept past the last intent on a key (`intent/linger.rs`).
    linger: Linger,
    /// Intents shorter than this (nanoseconds, by the clock rate) are short uses, after which
    /// keys may linger: the node's typical share-sync gap.
    short_use_ns: u64,
}

/// What a call left for the protocol: keys to bring here, and replicas no intent here wants
/// any more.
#[derive(Debug)]
pub struct Actions {
    /// Keys of intents acted on now that are neither here nor replicated here.
    pub due: Vec<Key>,
    /// Keys whose last active intent on this node ended and that are replicated here, or
    /// that the protocol watches (`Interest::watch`).
    pub unwanted: Vec<Key>,
    /// When the intents whose keys are in `due` start and end.
    pub need: Need,
    /// The shortest use among the intents whose keys are in `due`: nanoseconds from an
    /// intent's start to its end, by the clock rate (`u64::MAX`: none, or no rate measured).
    pub shortest_use_ns: u64,
    /// Keys on which an intent was acted while the protocol waits for this node's intents on
    /// them to end (`Interest::watch_additions`).
    pub extended: Vec<Key>,
}

/// When a node needs the keys it asks for by intent, from the time it asks: the least lead
/// (nanoseconds until the first intent starts; 0: due now, or no rate measured yet) and the
/// longest hold (nanoseconds until the last one ends; `u64::MAX`: not known, or never). By
/// the worker's measured clock rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// Nanoseconds until the keys are needed.
    pub lead_ns: u64,
    /// Nanoseconds until they are no longer needed.
    pub hold_ns: u64,
}

impl Need {
    /// Nothing known: needed now, for ever.
    pub const NOW: Self = Self {
        lead_ns: 0,
        hold_ns: u64::MAX,
    };

    /// Nothing acted yet: the identity of taking the least lead and the longest hold.
    const NONE_YET: Self = Self {
        lead_ns: u64::MAX,
        hold_ns: 0,
    };

    /// The two figures in one `u64` (a frame's `aux`): microseconds in 32 bits each,
    /// saturating (`u32::MAX`: beyond 71 minutes, or never).
    pub fn pack(self) -> u64 {
        let us = |ns: u64| (ns / 1_000).min(u64::from(u32::MAX));
        (us(self.lead_ns) << 32) | us(self.hold_ns)
    }

    /// The inverse of [`Need::pack`] (to microsecond precision).
    pub fn unpack(aux: u64) -> Self {
        let ns = |us: u64| {
            if us == u64::from(u32::MAX) {
                u64::MAX
            } else {
                us * 1_000
            }
        };
        Self {
            lead_ns: ns(aux >> 32),
            hold_ns: ns(aux & u64::from(u32::MAX)),
        }
    }
}

impl Default for Actions {
    fn default() -> Self {
        Self {
            due: Vec::new(),
            unwanted: Vec::new(),
            need: Need::NONE_YET,
            shortest_use_ns: u64::MAX,
            extended: Vec::new(),
        }
    }
}

impl Actions {
    /// Empties both lists (keeping their memory).
    pub fn clear(&mut self) {
        self.due.clear();
        self.unwanted.clear();
        self.need = Need::NONE_YET;
        self.shortest_use_ns = u64::MAX;
        self.extended.clear();
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty() && self.unwanted.is_empty() && self.extended.is_empty()
    }
}

/// The measurements behind the action window.
#[derive(Debug, Default)]
struct Rate {
    /// Start of the current span: time, clock, and the node's arrival counters (wait, count).
    span_start: Option<(Time, u64, u64, u64)>,
    /// Smoothed ticks per nanosecond.
    ticks_per_ns: Option<f64>,
    /// Smoothed nanoseconds from a localize request to the key's arrival.
    action_ns: Option<f64>,
    /// The latest span's clocks per action.
    latest: Option<f64>,
}

impl Intents {
    /// A worker at clock 0 with no intents, on a node with the interest table `interest` and
    /// the arrival counters `node_counters`.
    pub fn new(
        timing: IntentTiming,
        interest: Arc<Interest>,
        node_counters: Arc<NodeCounters>,
    ) -> Self {
        Self {
            timing,
            clock: 0,
            pending: Queue::default(),
            pending_slab: Vec::new(),
            pending_free: Vec::new(),
            pending_keys: 0,
            by_start: Queue::default(),
            by_end: Queue::default(),
            acted_slab: Vec::new(),
            acted_free: Vec::new(),
            next_serial: 0,
            tracked_keys: 0,
            linger: Linger::new(interest.clone(), node_counters.clone()),
            short_use_ns: crate::share::ShareSync::default().typical_gap_ns(),
            interest,
            node_counters,
            rate: Rate::default(),
            window: poisson_quantile(2.0 * INITIAL_ESTIMATE, WINDOW_QUANTILE),
            last_tick: None,
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

    /// Keys of acted intents whose end has not come yet (they hold the node's interest).
    pub fn active_keys(&self) -> usize {
        self.tracked_keys
    }

    /// Keys whose last intent here ended and whose interest lingers (`intent/linger.rs`).
    pub fn lingering_keys(&self) -> usize {
        self.linger.len()
    }

    /// Whether interest lingers after the last intent on a key ends (the default; off, the
    /// ablation: it ends with the intent, as in AdaPM's paper).
    pub fn set_linger(&mut self, on: bool) {
        self.linger.set_on(on);
    }

    /// The smoothed share of keys used again here within their break-even time after their
    /// last intent ended (keys linger while it is at least one half; `intent/linger.rs`).
    pub fn linger_reuse(&self) -> f64 {
        self.linger.reuse()
    }

    /// Sets how long an intent may last to count as a short use (the node's typical
    /// share-sync gap: `ShareSync::typical_gap_ns`), which is also the linger clock's pace
    /// while no share-sync rounds run.
    pub fn set_short_use_ns(&mut self, ns: u64) {
        self.short_use_ns = ns;
        self.linger.set_round_ns(ns);
    }

    /// Keeps the linger's watched keys in a hash map even for a dense key space.
    #[cfg(test)]
    fn hash_linger_table(&mut self) {
        self.linger.hash_watches();
    }

    /// See [`Intents::set_linger`].
    pub fn lingers(&self) -> bool {
        self.linger.is_on()
    }

    /// Records the intent to access `keys` (already validated) while the clock is in
    /// `start..end`, and adds to `out` what to do now (this intent's keys, if its start is
    /// within the window, and earlier ones pushed out by back-pressure).
    pub fn signal(&mut self, store: &Store, keys: &[Key], start: u64, end: u64, out: &mut Actions) {
        self.tally.intents += 1;
        self.tally.keys += keys.len() as u64;
        let mut owned = self.spare.pop().unwrap_or_default();
        owned.clear();
        owned.extend_from_slice(keys);
        if start <= self.clock.saturating_add(self.window()) {
            self.act(store, start, end, owned, out);
        } else {
            let slot = self.pending_free.pop().unwrap_or_else(|| {
                self.pending_slab.push(None);
                self.pending_slab.len() - 1
            });
            self.pending_keys += keys.len();
            self.pending_slab[slot] = Some(Pending {
                start,
                end,
                keys: owned,
            });
            self.pending.push((start, slot));
        }
        while self.pending_keys > MAX_PENDING_KEYS {
            self.act_on_earliest(store, out);
        }
    }

    /// Counts an intent that needs no action (keys never move under the node's policy).
    pub fn count(&mut self, keys: &[Key]) {
        self.tally.intents += 1;
        self.tally.keys += keys.len() as u64;
    }

    /// Ticks the clock at time `now`: checks the intents that start now, releases those that
    /// end now, updates the window, and adds to `out` the keys of the intents whose start came
    /// within it and the replicas no longer wanted.
    pub fn advance(&mut self, now: Time, store: &Store, out: &mut Actions) {
        self.clock += 1;
        self.last_tick = Some(now);
        (self.node_counters.worker_clock).fetch_max(self.clock, Ordering::Relaxed);
        if self.rate.observe(now, self.clock, &self.node_counters) {
            // At least one clock: a window of 0 would act only at the start, always late.
            self.window = poisson_quantile(2.0 * self.rate.estimate(), WINDOW_QUANTILE).max(1);
        }
        self.linger.tick(now);
        self.check_started(store);
        // Ended intents first: an intent that starts as another on the same key ends keeps
        // the key wanted (it was acted on earlier, within the window).
        self.release_ended(self.clock, store, out);
        self.linger.release_due(false, store, out);
        let horizon = self.clock.saturating_add(self.window());
        while let Some((start, _)) = self.pending.peek() {
            if start > horizon {
                break;
            }
            self.act_on_earliest(store, out);
        }
    }

    /// The worker is done (its clock is infinite): every acted intent ends now, and intents
    /// never acted on are dropped (no access will come for them).
    pub fn finish(&mut self, store: &Store, out: &mut Actions) {
        self.check_started_by(u64::MAX, store);
        self.release_ended(u64::MAX, store, out);
        self.linger.release_due(true, store, out);
        for slot in std::mem::take(&mut self.pending)
            .drain()
            .map(|(_, slot)| slot)
        {
            if let Some(p) = self.pending_slab[slot].take() {
                self.pending_keys -= p.keys.len();
                self.spare.push(p.keys);
            }
            self.pending_free.push(slot);
        }
    }

    fn act_on_earliest(&mut self, store: &Store, out: &mut Actions) {
        let Some((_, slot)) = self.pending.pop() else {
            return;
        };
        let pending = self.pending_slab[slot]
            .take()
            .expect("a queued intent is in the slab");
        self.pending_free.push(slot);
        self.pending_keys -= pending.keys.len();
        self.act(store, pending.start, pending.end, pending.keys, out);
    }

    /// Hands the keys not here to `out`, holds the node's interest in every key until `end`,
    /// and checks the intent at its start.
    fn act(&mut self, store: &Store, start: u64, end: u64, keys: Vec<Key>, out: &mut Actions) {
        self.tally.acted += 1;
        let due_now = start <= self.clock;
        let holds = end > self.clock;
        if holds {
            while self.tracked_keys + keys.len() > MAX_TRACKED_KEYS
                && self.release_earliest(store, out)
            {}
            let until = self.time_at(end).unwrap_or(Time(u64::MAX));
            // Interest first, then the look at the store: a replica that the node drops for
            // want of interest in between is then asked for again, never missed.
            for &key in &keys {
                if self.interest.add(key, until) {
                    out.extended.push(key);
                }
            }
        }
        let before = out.due.len();
        out.due
            .extend(keys.iter().copied().filter(|&k| !is_here(store, k)));
        if out.due.len() != before {
            self.linger
                .note_request((out.due.len() - before) as f64, smooth);
            let from_now = |at: Option<Time>| match (at, self.last_tick) {
                (Some(at), Some(now)) => Some(at.0.saturating_sub(now.0)),
                _ => None,
            };
            let need = &mut out.need;
            need.lead_ns = need.lead_ns.min(from_now(self.time_at(start)).unwrap_or(0));
            let hold = from_now(self.time_at(end)).unwrap_or(u64::MAX);
            need.hold_ns = need.hold_ns.max(hold);
            // Per intent, not from the batch's least lead and longest hold: a batch of many
            // one-clock intents (a KGE triple each) is many short uses, not one long one.
            if let (Some(from), Some(to)) = (self.time_at(start), self.time_at(end)) {
                out.shortest_use_ns = out.shortest_use_ns.min(to.0.saturating_sub(from.0));
            }
        }
        if due_now && out.due.len() != before {
            // Due now with a key away: late, and checked (nothing to track for it).
            self.tally.late += 1;
        }
        if !holds {
            // Over already: no access will come, so no interest to hold.
            self.spare.push(keys);
            return;
        }
        let slot = self.acted_free.pop().unwrap_or_else(|| {
            self.acted_slab.push(None);
            self.acted_slab.len() - 1
        });
        let serial = self.next_serial;
        self.next_serial += 1;
        self.tracked_keys += keys.len();
        let short = match (self.time_at(start.max(self.clock)), self.time_at(end)) {
            (Some(from), Some(to)) => to.0.saturating_sub(from.0) < self.short_use_ns,
            _ => false,
        };
        self.acted_slab[slot] = Some(Acted {
            keys,
            checked: due_now,
            short,
            serial,
        });
        if !due_now {
            self.by_start.push((start, serial, slot));
        }
        self.by_end.push((end, serial, slot));
    }

    /// When the clock is expected to reach `clock`, from the latest tick at the measured rate
    /// (`None` before the first measurement, or for a clock never reached).
    fn time_at(&self, clock: u64) -> Option<Time> {
        let (now, ticks_per_ns) = (self.last_tick?, self.rate.ticks_per_ns?);
        if clock == u64::MAX || ticks_per_ns <= 0.0 {
            return None;
        }
        let ns = clock.saturating_sub(self.clock) as f64 / ticks_per_ns;
        Some(Time(
            now.0.saturating_add(ns.min(u64::MAX as f64 / 2.0) as u64),
        ))
    }

    /// Releases the acted intent that ends first, early (false if none is tracked).
    fn release_earliest(&mut self, store: &Store, out: &mut Actions) -> bool {
        let Some((_, serial, slot)) = self.by_end.pop() else {
            return false;
        };
        self.release(slot, serial, store, out);
        true
    }

    /// Releases every acted intent whose end is at most `clock`.
    fn release_ended(&mut self, clock: u64, store: &Store, out: &mut Actions) {
        while let Some((end, serial, slot)) = self.by_end.peek() {
            if end > clock {
                break;
            }
            self.by_end.pop();
            self.release(slot, serial, store, out);
        }
    }

    /// Ends intent `serial` in `slot`: drops its interest, and hands replicas of keys no intent
    /// here wants any more to `out.unwanted`.
    fn release(&mut self, slot: usize, serial: u64, store: &Store, out: &mut Actions) {
        let acted = match self.acted_slab[slot].take() {
            Some(acted) if acted.serial == serial => acted,
            other => {
                self.acted_slab[slot] = other;
                return;
            }
        };
        if !acted.checked {
            self.tally.unchecked += 1;
        }
        for &key in &acted.keys {
            self.linger.intent_ended(key, acted.short, store, out);
        }
        self.tracked_keys -= acted.keys.len();
        self.acted_free.push(slot);
        self.spare.push(acted.keys);
    }

    /// Checks every tracked intent that starts by now: late if a key is not here.
    fn check_started(&mut self, store: &Store) {
        self.check_started_by(self.clock, store);
    }

    fn check_started_by(&mut self, clock: u64, store: &Store) {
        while let Some((start, serial, slot)) = self.by_start.peek() {
            if start > clock {
                break;
            }
            self.by_start.pop();
            let Some(acted) = self.acted_slab[slot]
                .as_mut()
                .filter(|a| a.serial == serial)
            else {
                continue;
            };
            acted.checked = true;
            if clock != u64::MAX && !acted.keys.iter().all(|&k| is_here(store, k)) {
                self.tally.late += 1;
            }
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
        // A key arrives here by a relocation or, when its owner shares it, as a replica.
        let wait = counters.relocation_wait_ns.load(Ordering::Relaxed)
            + counters.share_wait_ns.load(Ordering::Relaxed);
        let arrivals = counters.relocations_in.load(Ordering::Relaxed)
            + counters.shares_in.load(Ordering::Relaxed);
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

mod calendar;
mod linger;
mod queue;

use linger::Linger;
pub use linger::{FRAME_COST_BYTES, MAX_LINGERING_KEYS, break_even_rounds};
use queue::Queue;

#[cfg(test)]
mod tests;
