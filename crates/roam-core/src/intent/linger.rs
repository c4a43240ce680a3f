//! How long a node keeps its interest in a key after its last intent on it ends: the
//! rent-or-buy rule that keeps AdaPM's replicas (and owned keys) from churning.
//!
//! Dropping interest the moment an intent ends is right for a key that is not wanted again
//! soon, and costly for one that is: under uniform negative sampling (KGE, word vectors) a
//! node wants each key again within a few hundred clocks, so every end became a leave (or a
//! move) and every next intent a want, an offer, a grant or a transfer — on the quick KGE
//! graph 50,000 frames per node and epoch for 5,000 keys, most of the CPU.
//!
//! Keeping a replica costs at most one value per sync round (the owner sends it the key's new
//! value if it changed); dropping it and wanting it again costs a want, an offer, a grant, the
//! home's note and a leave — five frames, shared by the keys asked for together (a KGE triple
//! asks for one or two keys at a time, an MF sub-epoch for thousands: the worker measures
//! its mean) — and two values (the grant's and the leave's final delta). This is the ski-rental problem, and its deterministic break-even rule (rent until
//! the rent paid equals the price of buying) is never worse than twice the cost of the best
//! choice made with hindsight, whatever the access pattern: a worker keeps its interest in a
//! key for [`break_even_rounds`] share-sync rounds of its node after the key's last intent
//! here ends, measured by the node's own round counter (and while no rounds run, by a round's
//! typical time), so the rule needs no setting. A new
//! intent on the key within that time restarts it. While the linger holds, the key is wanted
//! here (a member keeps its replica) but has no use with a known end: an owner whose interest
//! only lingers gives the key to a wanter as it gives an unused key (`share/decide.rs`: when
//! several nodes use a key in turn, sharing it from a lingering owner would cost each use a
//! grant, a leave and a sync round instead of one transfer).
//!
//! The frame cost in bytes, [`FRAME_COST_BYTES`], is measured, not tuned: on these VMs a
//! frame costs about 4 µs of CPU at both ends together and a byte about 3 ns (a linear fit over
//! KGE runs, `docs/benchmarks.md`, "Where the CPU target stands").
//!
//! Break-even lingering pays when a key is used again within its time more often than not
//! (otherwise it pays the rent and buys anyway): MF's column blocks, handed from one node to
//! the next each sub-epoch and not wanted back for an epoch, never are. So the worker watches
//! every key whose last intent ended for its break-even time, whether it lingers or not, and
//! keeps a smoothed share of those used again in time (weight [`OUTCOME_WEIGHT`] per key,
//! starting at 1); keys linger while that share is at least one half.
//!
//! Only after *short* uses — intents shorter than a share-sync round, by the worker's clock
//! rate, as `share/defer.rs` tells them apart: a long use pays for its acquisition over many
//! rounds, and a replica kept after it would be synced for nothing (measured: keeping keys
//! after word vectors' long intents cost 5–13 % more CPU, after MF's 3–30 %).
//!
//! Invariants: each watched key holds at most one linger hold of the node's interest for this
//! worker ([`Interest::hold_linger`]), taken while the ending intent still counts, so the key
//! is never unwanted in between, and ended exactly once: when its time is up or when the
//! worker finishes. At most [`MAX_LINGERING_KEYS`] keys are watched (beyond, keys are neither
//! watched nor kept). A key whose deferred offer waits for the end of its use here starts no
//! linger.
//!
//! The watched keys sit in a table probed for every key of every ended intent: one slot per
//! key for dense key spaces of at most [`MAX_DENSE_KEYS`] keys (a hash probe missed the cache
//! there), a hash map otherwise. Both say the same: whether a key is watched, until when, and
//! whether it holds a linger. Their ends are kept by round in buckets (`calendar.rs`), not
//! in a binary heap: its sifts were as costly as the probes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustc_hash::FxHashMap as HashMap;

use crate::Time;
use crate::id::Key;
use crate::interest::Interest;
use crate::stats::NodeCounters;
use crate::store::Store;

use super::Actions;
use super::calendar::Calendar;

/// The CPU cost of one frame, in bytes that cost as much (about 4 µs against about 3 ns a
/// byte, both ends together; see the module docs).
pub const FRAME_COST_BYTES: u64 = 1_300;

/// Frames of one round trip of losing a key and getting it back (want, offer, grant, the
/// home's note, leave).
const FRAMES_PER_REACQUIRE: u64 = 5;

/// Keys watched per worker: beyond, a key whose use ends is neither watched nor kept.
pub const MAX_LINGERING_KEYS: usize = 1 << 20;

/// Largest dense key space whose watches take one slot per key: 8 bytes a key, 32 MiB at
/// most, no more than the hash map holding [`MAX_LINGERING_KEYS`] keys (zeroed lazily by the
/// OS, so only the pages of keys ever watched are touched).
const MAX_DENSE_KEYS: usize = 1 << 22;

/// Share-sync rounds after which keeping a key of `value_bytes` has cost as much as getting
/// it back would, when a node asks for `keys_per_request` keys at a time: getting it back
/// costs its share of [`FRAMES_PER_REACQUIRE`] frames (the keys of one request travel
/// together) and two values, keeping it at most one value a round.
pub fn break_even_rounds(value_bytes: u64, keys_per_request: f64) -> u64 {
    let per_key = value_bytes.max(1) as f64 * keys_per_request.max(1.0);
    2 + ((FRAMES_PER_REACQUIRE * FRAME_COST_BYTES) as f64 / per_key).ceil() as u64
}

/// Weight of one outcome (a linger that saw its key used again, or did not) in the
/// estimate of how often lingering pays.
const OUTCOME_WEIGHT: f64 = 0.01;

/// One worker's lingering keys, and the keys it watches as if they lingered. See the module
/// docs.
#[derive(Debug)]
pub(super) struct Linger {
    on: bool,
    /// Per key whose last intent here ended within its break-even rounds: the node's round at
    /// which that time is up, and whether the key holds a linger (or is only watched, to learn
    /// whether it would have paid).
    until: Watches,
    /// The same keys by the round they were last due (entries made stale by a restart are
    /// pushed again when they come up).
    by_round: Calendar,
    interest: Arc<Interest>,
    node_counters: Arc<NodeCounters>,
    /// Smoothed keys per request for keys not here (one acted intent's).
    keys_per_request: Option<f64>,
    /// Smoothed share of watched keys used again within their break-even time.
    reused: f64,
    /// Keys in `until` that hold a linger.
    held: usize,
    /// The linger's clock, in rounds: the node's share-sync rounds while they run, and one a
    /// typical round's time (`round_ns`) while they do not (they run only while something is
    /// shared with or by the node; without this a node that shares nothing, as under
    /// relocation only, would keep every linger forever).
    clock: u64,
    /// The node's round count when the clock last looked, the time it last moved, and the
    /// rounds it counted by time since the last real round (a late round then counts only
    /// beyond them, so rounds that run late are not counted twice).
    rounds_seen: u64,
    moved_at: Option<Time>,
    by_time: u64,
    round_ns: u64,
}

impl Linger {
    pub(super) fn new(interest: Arc<Interest>, node_counters: Arc<NodeCounters>) -> Self {
        let until = match interest.dense_keys() {
            Some(keys) if keys <= MAX_DENSE_KEYS => Watches::dense(keys),
            _ => Watches::Hashed(HashMap::default()),
        };
        Self {
            on: true,
            until,
            by_round: Calendar::default(),
            interest,
            node_counters,
            keys_per_request: None,
            reused: 1.0,
            held: 0,
            clock: 0,
            rounds_seen: 0,
            moved_at: None,
            by_time: 0,
            round_ns: crate::share::ShareSync::default().typical_gap_ns(),
        }
    }

    /// Watches keys in a hash map whatever the key space (tests compare the two tables).
    #[cfg(test)]
    pub(super) fn hash_watches(&mut self) {
        assert_eq!(self.until.len(), 0, "switched before any watch");
        self.until = Watches::Hashed(HashMap::default());
    }

    /// How long a share-sync round typically takes (the clock's pace while none run).
    pub(super) fn set_round_ns(&mut self, ns: u64) {
        self.round_ns = ns.max(1);
    }

    /// Moves the clock to time `now`: by the node's rounds since the last look, less those
    /// already counted by time, or, if none ran, by the typical rounds' time that passed
    /// without one.
    pub(super) fn tick(&mut self, now: Time) {
        let rounds = self.node_counters.share_rounds.load(Ordering::Relaxed);
        let since = *self.moved_at.get_or_insert(now);
        if rounds != self.rounds_seen {
            let ran = rounds.saturating_sub(self.rounds_seen);
            self.clock += ran.saturating_sub(self.by_time);
            self.by_time = 0;
            self.rounds_seen = rounds;
            self.moved_at = Some(now);
        } else if let Some(idle) = now.0.checked_sub(since.0)
            && idle >= self.round_ns
        {
            let passed = idle / self.round_ns;
            self.clock += passed;
            self.by_time += passed;
            self.moved_at = Some(Time(since.0 + passed * self.round_ns));
        }
    }

    /// An acted intent asked for `keys` keys that were not here (`smooth` folds it into the
    /// estimate).
    pub(super) fn note_request(&mut self, keys: f64, smooth: fn(Option<f64>, f64) -> f64) {
        self.keys_per_request = Some(smooth(self.keys_per_request, keys));
    }

    /// Whether keys linger (off: interest ends with the last intent, the ablation).
    pub(super) fn set_on(&mut self, on: bool) {
        self.on = on;
    }

    pub(super) fn is_on(&self) -> bool {
        self.on
    }

    /// Keys holding a linger now.
    pub(super) fn len(&self) -> usize {
        self.held
    }

    /// The estimated share of keys used again within their break-even time.
    pub(super) fn reuse(&self) -> f64 {
        self.reused
    }

    fn round(&self) -> u64 {
        self.clock
    }

    fn outcome(&mut self, reused: bool) {
        let sample = if reused { 1.0 } else { 0.0 };
        self.reused += OUTCOME_WEIGHT * (sample - self.reused);
    }

    /// An acted intent on `key` ended (its count of the interest is still held); `short`:
    /// it lasted less than a share-sync round. A key watched already was used again in time
    /// (an outcome), and its time starts again; otherwise, after a short use, it is watched
    /// from now, and holds a linger if lingering has paid more often than not and no offer
    /// for the key waits for exactly this end (a hand-over between users in turn then becomes
    /// one move, `share/defer.rs`). Then drops the intent's count, handing the key on if that
    /// was the last intent and the protocol watches it, or if nothing holds the key and it is
    /// replicated here.
    pub(super) fn intent_ended(&mut self, key: Key, short: bool, store: &Store, out: &mut Actions) {
        if self.on {
            let value_bytes = 4 * store.space().len(key) as u64;
            let due =
                self.round() + break_even_rounds(value_bytes, self.keys_per_request.unwrap_or(1.0));
            if let Some(held) = self.until.restart(key, due) {
                // A key watched without a hold (lingering did not pay then, or an offer
                // waited for this end) takes one now that it would: else a key used again
                // and again would never get one.
                let hold = !held
                    && short
                    && self.reused >= 0.5
                    && !self.interest.deferring(key)
                    && self.interest.hold_linger(key);
                if hold {
                    self.until.set(key, due, true);
                }
                self.held += usize::from(hold);
                self.outcome(true);
            } else if short && self.until.len() < MAX_LINGERING_KEYS {
                let held = self.reused >= 0.5
                    && !self.interest.deferring(key)
                    && self.interest.hold_linger(key);
                self.held += usize::from(held);
                self.until.set(key, due, held);
                self.by_round.push(due, key);
            }
        }
        let (last_intent, watched) = self.interest.sub(key);
        if last_intent && (watched || (store.has_replica(key) && !self.interest.wanted(key))) {
            out.unwanted.push(key);
        }
    }

    /// Ends the watches whose time is up (every one if `all`), and the lingers they hold,
    /// handing on the keys that nothing here wants any more.
    pub(super) fn release_due(&mut self, all: bool, store: &Store, out: &mut Actions) {
        let round = self.round();
        while let Some((due, key)) = self.by_round.peek() {
            if due > round && !all {
                break;
            }
            self.by_round.pop();
            let Some((until, held)) = self.until.get(key) else {
                continue;
            };
            if until > due && !all {
                // Restarted since: due later.
                self.by_round.push(until, key);
                continue;
            }
            self.until.remove(key);
            if !all {
                self.outcome(false);
            }
            if held {
                self.held -= 1;
                let (none_left, watched) = self.interest.end_linger(key);
                if none_left && (watched || store.has_replica(key)) {
                    out.unwanted.push(key);
                }
            }
        }
    }
}

/// The watched keys: per key, the round its watch ends and whether it holds a linger.
#[derive(Debug)]
enum Watches {
    /// Slot `key`: 0 if not watched, else the round shifted up by one and the hold in bit 0
    /// (a watch ends two rounds or more after round 0, so a watched slot is never 0).
    Dense {
        slots: Vec<u64>,
        len: usize,
    },
    Hashed(HashMap<Key, (u64, bool)>),
}

impl Watches {
    fn dense(keys: usize) -> Self {
        // `vec!` of zeros is allocated zeroed: pages are touched only by the keys watched.
        Self::Dense {
            slots: vec![0; keys],
            len: 0,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Dense { len, .. } => *len,
            Self::Hashed(map) => map.len(),
        }
    }

    fn get(&self, key: Key) -> Option<(u64, bool)> {
        match self {
            Self::Dense { slots, .. } => match slots[key as usize] {
                0 => None,
                slot => Some((slot >> 1, slot & 1 != 0)),
            },
            Self::Hashed(map) => map.get(&key).copied(),
        }
    }

    /// If `key` is watched: its watch now ends at round `due`; returns whether it holds a
    /// linger.
    fn restart(&mut self, key: Key, due: u64) -> Option<bool> {
        match self {
            Self::Dense { slots, .. } => {
                let slot = &mut slots[key as usize];
                if *slot == 0 {
                    return None;
                }
                *slot = encode(due, *slot & 1 != 0);
                Some(*slot & 1 != 0)
            }
            Self::Hashed(map) => map.get_mut(&key).map(|(until, held)| {
                *until = due;
                *held
            }),
        }
    }

    /// Watches `key` until round `due` (again, if watched already).
    fn set(&mut self, key: Key, due: u64, held: bool) {
        match self {
            Self::Dense { slots, len } => {
                let slot = &mut slots[key as usize];
                *len += usize::from(*slot == 0);
                *slot = encode(due, held);
            }
            Self::Hashed(map) => {
                map.insert(key, (due, held));
            }
        }
    }

    fn remove(&mut self, key: Key) {
        match self {
            Self::Dense { slots, len } => {
                let slot = &mut slots[key as usize];
                *len -= usize::from(*slot != 0);
                *slot = 0;
            }
            Self::Hashed(map) => {
                map.remove(&key);
            }
        }
    }
}

fn encode(due: u64, held: bool) -> u64 {
    debug_assert!(due > 0 && due < 1 << 63, "round {due} out of range");
    due << 1 | u64::from(held)
}
