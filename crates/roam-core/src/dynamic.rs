//! Dynamic key spaces: admission of new rows, and eviction under a per-node row budget and a
//! time-to-live (issue #17).
//!
//! A *dynamic* space is a sparse one (every `u64` is an id) with a [`DynamicPolicy`]. Rows are
//! still created on first use by the key's bucket creator (`Node::residency`), filled by the
//! space's initializer (`init.rs`), but:
//!
//! - **Admission.** A worker's access that would create a row first asks the creator's
//!   admission ([`Admission`]): `Count` admits an id once the creator has seen it `min_count`
//!   times, counted in a count-min sketch of fixed size (`depth × width` 16-bit saturating
//!   counters, conservative update: an estimate is never below the true count, and it exceeds
//!   it only through collisions, so an id may be admitted early, never late); `Probability`
//!   admits a fixed fraction `p` of the ids, chosen by a hash of `(seed, id)`, so the decision
//!   is the same at every node, before and after an eviction. An id that is not admitted has no
//!   row: a pull reads the initializer's value (zeros for `Zeros`), and a push, set or gradient
//!   is dropped and counted (`rows_rejected` per refused access, `grads_dropped` per dropped
//!   update of one key). A relocation or a share of an uncreated id creates it without asking
//!   (a worker asked for the row explicitly).
//! - **Budget (LRU).** With `max_rows`, creating a row while this node holds `max_rows` rows
//!   first lets one go, by a clock over the store's index (`store/evict.rs`: a REFERENCED bit in
//!   the key's state word, set by the workers' accesses; the hand clears it, and lets go the first
//!   row found clear; each named table's budget has a clock of its own, which passes over other
//!   tables' rows without touching them), whoever created it: a row this node created and may evict
//!   is evicted; a row that moved here is sent back to its creator (below), and counts as gone. If
//!   no row can go, the access is refused as unadmitted (and a failed look, twice around the index,
//!   that found no row in use is not repeated until something may have made a row evictable: a row
//!   landed or was made here, a share or an intent's interest ended, the directory changed, or 100
//!   ms passed). The keys of an offer being decided (made here if need be, then shared or handed
//!   over together) are not let go for the offer's later keys, nor a row just made without room for
//!   the trim that follows. The budget counts rows (records), per node. `max_bytes` states it in
//!   bytes instead: `max_bytes / (4 × record length)` rows, the record being the visible values and
//!   the optimizer's state (per table: named tables have their own dimensions and optimizers); with
//!   both set, the smaller. A byte budget below one record is refused at validation.
//! - **TTL.** With `ttl_ns`, the node's timer sweeps the store every `ttl_ns / 2` (in bounded
//!   chunks, off the hot path); a row found unreferenced by two consecutive sweeps is evicted,
//!   so a row untouched for `1.5 × ttl_ns` is gone, and one touched within the last `ttl_ns`
//!   stays. Time is the core's `now`, an input: no clock is read here. With `ttl_steps` the
//!   sweeps run every `ttl_steps / 2` steps of the node's clock instead (the largest of its
//!   workers' clocks, `NodeCounters::worker_clock`), looked at every 5 ms of the core's time
//!   (`STEPS_POLL_NS`). A node with no worker that ticks (one that joined a running cluster
//!   hosts none) never sweeps by steps.
//!
//! Which rows this node may evict: rows it owns **at their creator** (the default owner, which
//! its home records as "no record" or as owned by it), not statically replicated, not shared
//! out by an intent, not in transit. Evicting such a row changes no placement record: the key
//! becomes GONE in the creator's state word, which reads as "not created", and the next access
//! anywhere is routed to the creator as before and creates it again through admission, with
//! the initializer's values, or, under a policy with `spill`, with the record the eviction
//! kept in the node's spill (`spill.rs`: such an id skips the admission test). A request already
//! on its way (a pull, a push, a localize's hand-over) re-creates it the same way.
//!
//! Rows that moved to another node under dynamic allocation are not evicted there (that would
//! need the home's record changed by message): they go back. The clock that makes room picks
//! moved-in rows whose home is their creator and that nothing here holds on to (not
//! replicated, shared out, in transit, or wanted by an intent) as it picks rows to evict, and
//! sends their homes a `Reclaim`: each home relocates them to itself, where, as their creator,
//! it may evict them. So the rows that go are the least recently used ones whoever created
//! them (an earlier design evicted this node's own rows first and sent rows back only when
//! none could go: a node that uses other nodes' rows ended holding almost only those, and
//! then scanned its whole index for every row it made). Rows on their way back count as gone
//! (`returning`; a key that lands here again is no longer on its way back, and one that has
//! not left after a second, or whose creator or home changed, counts as held again and may
//! be sent anew): a new row is made while the node is above its budget until they leave. Besides creations, the budget is
//! checked when keys land, when the timer trims, and when a row is made without room (a
//! relocation or share creating it), each a bounded look (4,096 index entries, 64 more per
//! row above the budget, twice around the index at most): without home moves, intents or a
//! lost peer, and with an index small enough for one look (the simulator's), a node holds at
//! most its budget once nothing is in flight; rows that could not go at the last check
//! (wanted by an intent, shared, in transit, used since the clock's last look, beyond the
//! look's reach), rows of a bucket whose home moved (not their creator) and, after a peer
//! loss, every moved-in row stay until a later check.
//!
//! Named tables (`tables.rs`): each dynamic table has its own policy. Admission asks the key's
//! table's; the count sketch is shared (as wide as the widest table asks; keys differ by table);
//! the row budget counts and evicts the key's table's rows only (each table's budget has a clock
//! of its own, a hand over the shared index that passes over other tables' rows without
//! touching their bits); one
//! TTL sweep serves the tables that set a TTL, which must share it.
//!
//! Memory beyond rows: the sparse index keeps a state word (about 40 bytes with the map entry)
//! for every id this node ever created or routed, evicted or not; an id that was never admitted
//! leaves none. The sketch is `depth × width × 2` bytes.

use std::collections::BTreeMap;
use std::sync::atomic;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::directory::mix64;
use crate::id::{Key, NodeId};
use crate::msg::encode;
use crate::node::{Node, Time};
use crate::stats::add;
use crate::store::{Residency, ReturnVisit, Sweep, Visit};
use crate::wire::Kind;

mod policy;

pub use policy::{
    Admission, DynamicError, DynamicPolicy, MAX_SKETCH_WIDTH, SKETCH_DEPTH, admitted_by_hash,
};

/// A count-min sketch with conservative update and saturating 16-bit counters.
struct CountMin {
    counters: Vec<u16>,
    mask: u64,
}

impl CountMin {
    fn new(width: u32) -> Self {
        let width = u64::from(width).next_power_of_two();
        Self {
            counters: vec![0; SKETCH_DEPTH * width as usize],
            mask: width - 1,
        }
    }

    /// Counts one sighting of `key` and returns its estimated count.
    fn add(&mut self, key: Key) -> u32 {
        let width = self.mask + 1;
        let mut h = mix64(key ^ 0x2545_f491_4f6c_dd1d);
        let mut slots = [0usize; SKETCH_DEPTH];
        for (row, slot) in slots.iter_mut().enumerate() {
            *slot = (row as u64 * width + (h & self.mask)) as usize;
            h = mix64(h);
        }
        let min = slots.iter().map(|&s| self.counters[s]).min().unwrap_or(0);
        let next = min.saturating_add(1);
        // Conservative update: raise only the counters below the new estimate.
        for &s in &slots {
            self.counters[s] = self.counters[s].max(next);
        }
        u32::from(next)
    }
}

/// Entries one timer call visits while a TTL sweep is under way (bounds the node-lock hold).
const SWEEP_CHUNK: u64 = 4096;

/// How often the timer looks at the node's clock for a TTL in steps, in ns of the core's
/// time (as the share-sync work clock looks at its counts).
const STEPS_POLL_NS: u64 = 5_000_000;

/// A space's TTL: in the core's time, or in steps of the node's clock.
#[derive(Clone, Copy)]
enum Ttl {
    Ns(u64),
    Steps(u64),
}

/// Index entries a trim's clock visits per call at most (it runs at every landing while the
/// node is above its budget: a node whose rows may not go yet must not scan its whole index
/// each time).
const TRIM_CHUNK: u64 = 4096;

/// Further entries a trim may visit per row above the budget (most index entries of a
/// long-tailed id space are ids routed through this node, not rows held here).
const TRIM_VISITS_PER_ROW: u64 = 64;

/// How long a row sent back may take to leave before it counts as held again (and may be sent
/// anew), in ns of the core's time: a `Reclaim` is not answered when the home cannot move the
/// row.
const RETURN_PATIENCE_NS: u64 = 1_000_000_000;

/// How long a table found with no evictable row is believed so without a new look, in ns of
/// the core's time (a safety net: the events that can make a row evictable clear the belief).
const BARREN_RECHECK_NS: u64 = 100_000_000;

/// A node's admission and eviction state (protocol-only, under the node lock).
#[derive(Default)]
pub(crate) struct DynamicState {
    sketch: Option<CountMin>,
    /// The LRU clocks' hands, index entries: one per named table (`[t + 1]`), or `[0]` for
    /// the one space. Each budget has its own clock over the shared index, so one table's
    /// evictions neither advance nor depend on another's.
    hands: Vec<u64>,
    /// The TTL sweep under way: the next entry, and the entry count when it began.
    sweep: Option<(u64, u64)>,
    /// When the next TTL sweep begins: the core's time (ns), or with a TTL in steps the node's
    /// clock.
    next_sweep_at: u64,
    /// With a TTL in steps: when the timer next looks at the node's clock (core time, ns;
    /// absolute, so that a stream of inputs does not put the look off).
    next_poll_at: u64,
    /// Scratch for evicted records.
    evicted: Vec<f32>,
    /// Tables (`None`: the one space) in which a creation's full look of the clock found no
    /// row that could go and none in use, each with when: until a row lands or is made here, a
    /// share or an intent's interest ends, the directory changes, or [`BARREN_RECHECK_NS`]
    /// pass, a new row there is refused without the look (it scans the whole index, twice).
    barren: Vec<(Option<usize>, u64)>,
    /// Moved-in rows sent back to their creators and maybe still here (counted as gone), with
    /// when they were sent.
    returning: FxHashMap<Key, Time>,
    /// Rows the input being handled still needs (see [`Node::pinned`]); emptied at each input.
    pub(crate) pinned: FxHashSet<Key>,
    /// Where evicted rows of policies with `spill` go (`spill.rs`): in memory until the shell
    /// gives the node another; `None` when no policy spills.
    pub(crate) spill: Option<Box<dyn crate::spill::Spill>>,
}

impl DynamicState {
    /// Something happened that may have made a row evictable (a row landed or was made here,
    /// a share ended, the directory changed): the next creation under a budget looks again.
    pub(crate) fn may_evict_again(&mut self) {
        self.barren.clear();
    }

    /// The LRU clock's hand of `table` (`None`: the one space).
    fn hand(&mut self, table: Option<usize>) -> &mut u64 {
        let at = table.map_or(0, |t| t + 1);
        if self.hands.len() <= at {
            self.hands.resize(at + 1, 0);
        }
        &mut self.hands[at]
    }

    /// A new input is handled: the rows the last one made may go again.
    pub(crate) fn unpin(&mut self) {
        if !self.pinned.is_empty() {
            self.pinned.clear();
        }
    }

    /// The state for a space's policies (one, or one per dynamic table: the count sketch is
    /// shared, as wide as the widest table asks, and counts keys, which differ by table).
    pub(crate) fn new<'a>(policies: impl Iterator<Item = &'a DynamicPolicy>) -> Self {
        let policies: Vec<&DynamicPolicy> = policies.collect();
        let width = policies
            .iter()
            .filter_map(|p| match p.admission {
                Admission::Count { sketch_width, .. } => Some(sketch_width),
                _ => None,
            })
            .max();
        // Tables that set a TTL share it (`tables.rs`).
        let ttl = policies.iter().find_map(|p| p.ttl_ns.or(p.ttl_steps));
        let spills = policies.iter().any(|p| p.spill);
        Self {
            sketch: width.map(CountMin::new),
            next_sweep_at: ttl.map_or(u64::MAX, |ttl| ttl / 2),
            spill: spills.then(|| {
                Box::new(crate::spill::MemorySpill::default()) as Box<dyn crate::spill::Spill>
            }),
            ..Self::default()
        }
    }
}

impl Node {
    /// Whether a worker's access to `key` finds no row and may not create one here (see the
    /// module docs). Counts the sighting (count admission) and the refusal. Only the key's
    /// creator decides; elsewhere, and for rows that exist, false.
    pub(crate) fn unadmitted(&mut self, key: Key) -> bool {
        let Some(policy) = self.cfg.space.dynamic_for(key).copied() else {
            return false;
        };
        if self.store.is_created(key) || self.dir.creator(self.dir.bucket(key)) != self.cfg.id {
            return false;
        }
        let admitted = match policy.admission {
            // Admitted once: its record waits in the spill (`spill.rs`).
            _ if self.is_spilled(key) => true,
            Admission::All => true,
            Admission::Count { min_count, .. } => self
                .dynamic
                .sketch
                .as_mut()
                .is_none_or(|sketch| sketch.add(key) >= min_count),
            Admission::Probability { p, seed } => admitted_by_hash(p, seed, key),
        };
        let (table, budget) = (self.budget_table(key), self.row_budget_of(key));
        let admitted = admitted && self.make_room(table, budget);
        if !admitted {
            add(&self.counters.rows_rejected, 1);
        }
        !admitted
    }

    /// The table whose row budget `key`'s row counts against: its named table, or `None` (the
    /// node's one space).
    fn budget_table(&self, key: Key) -> Option<usize> {
        self.cfg
            .space
            .named_tables()
            .map(|_| crate::tables::Tables::index_of(key))
    }

    /// Makes room for `key`'s new row under its budget, if there is one; false if none could
    /// go.
    pub(crate) fn make_room_for_one(&mut self, key: Key) -> bool {
        self.make_room(self.budget_table(key), self.row_budget_of(key))
    }

    /// After a row of `key` was made without room (a relocation or share of an uncreated id):
    /// rows go by the clock until the budget holds again (a bounded look).
    pub(crate) fn made_without_room(&mut self, key: Key) {
        let table = self.budget_table(key);
        if let Some(max) = self.row_budget_of(key) {
            // Not the new row itself (pinned): its caller is about to serve or hand it over.
            self.trim_one(table, max);
        }
    }

    /// The row budget of `key`'s table (or of the one space), if it has one.
    fn row_budget_of(&self, key: Key) -> Option<u64> {
        self.cfg
            .space
            .dynamic_for(key)
            .and_then(|p| p.row_budget(self.cfg.space.record_len(key)))
    }

    /// Lets rows of `table` go by the clock (see [`Node::free_rows_within`]) until a new row
    /// fits in `max_rows`; false if none could go. A look that fails has gone twice around the
    /// whole index: it is not repeated until something may have made a row evictable (see
    /// [`DynamicState::may_evict_again`]) or [`BARREN_RECHECK_NS`] passed.
    fn make_room(&mut self, table: Option<usize>, max_rows: Option<u64>) -> bool {
        let Some(max) = max_rows else {
            return true;
        };
        if self.owned_rows(table) < max {
            return true;
        }
        let now = self.clock.0;
        if self
            .dynamic
            .barren
            .iter()
            .any(|&(t, at)| t == table && now < at.saturating_add(BARREN_RECHECK_NS))
        {
            return false;
        }
        // Two passes: the first may only clear REFERENCED bits.
        let visits = 2 * self.store.entries() + 1;
        let (reached, spared) = self.free_rows_within(table, max.saturating_sub(1), visits, true);
        if reached {
            return true;
        }
        // Remembered only if no row was used during the look (workers set bits while it runs):
        // one that was may go at the next creation's look.
        if !spared {
            self.dynamic.barren.retain(|&(t, _)| t != table);
            self.dynamic.barren.push((table, now));
        }
        false
    }

    /// Lets rows of `table` (or of the one space) go until at most `max` are held here, rows on
    /// their way back counted as gone, in at most `visits` visits of the clock; whether that was
    /// reached. The budget's clock (its own hand over the index) serves every row of it held here,
    /// so the rows that go are the least recently used whoever created them: an unreferenced row
    /// this node created and may evict is evicted; with `send_back`, an unreferenced row that moved
    /// here and may go back is sent to its creator (a `Reclaim` to its home, which is the creator:
    /// it relocates the row to itself, where it may be evicted); a referenced one has its bit
    /// cleared and goes at the next look unless used again (other tables' rows are passed over,
    /// their bits untouched). Rows made by the input being handled stay ([`Node::pinned`]). Returns
    /// whether `max` was reached, and whether a candidate was found in use on its second visit of
    /// this look (used since the first: it may go at the next look).
    fn free_rows_within(
        &mut self,
        table: Option<usize>,
        max: u64,
        visits: u64,
        send_back: bool,
    ) -> (bool, bool) {
        let send_back = send_back && self.may_return();
        let mut on_their_way = if send_back {
            self.returning_in(table)
        } else {
            0
        };
        let entries = self.store.entries();
        let mut by_home: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let (budget, mut visits) = (visits, visits);
        let mut spared = false;
        let reached = loop {
            if self.owned_rows(table).saturating_sub(on_their_way) <= max {
                break true;
            }
            if visits == 0 || entries == 0 {
                break false;
            }
            visits -= 1;
            // Past the first pass around the index, a row in use was used since this look
            // cleared its bit.
            let second_pass = budget - visits > entries;
            let hand = self.dynamic.hand(table);
            let i = *hand % entries;
            *hand = i + 1;
            match self.visit(i, Sweep::Lru, table) {
                Visit::Spared => spared |= second_pass,
                Visit::Skipped if send_back => {
                    match self
                        .store
                        .return_visit(i, |key| !self.pinned(key) && self.returnable(key, table))
                    {
                        ReturnVisit::Picked(key) => {
                            self.dynamic.returning.insert(key, self.clock);
                            by_home.entry(self.dir.home(key)).or_default().push(key);
                            on_their_way += 1;
                        }
                        ReturnVisit::Spared => spared |= second_pass,
                        ReturnVisit::Skipped => {}
                    }
                }
                _ => {}
            }
        };
        let me = self.cfg.id;
        for (home, keys) in by_home {
            add(&self.counters.rows_returned, keys.len() as u64);
            self.send(home, encode::keys(Kind::Reclaim, me, &keys));
        }
        (reached, spared)
    }

    /// Whether `key`'s row is pinned by the input being handled: an offer's keys (made here if
    /// need be, then shared or handed over together) and a row just made without room, while
    /// the trim that follows runs. A later row's room is not made from them.
    fn pinned(&self, key: Key) -> bool {
        !self.dynamic.pinned.is_empty() && self.dynamic.pinned.contains(&key)
    }

    fn visit(&mut self, i: u64, sweep: Sweep, table: Option<usize>) -> Visit {
        let mut evicted = std::mem::take(&mut self.dynamic.evicted);
        evicted.clear();
        let visit = self.store.clock_visit(
            i,
            sweep,
            |key| {
                !self.pinned(key)
                    && self.evictable(key)
                    && table.is_none_or(|t| crate::tables::Tables::index_of(key) == t)
                    && (sweep == Sweep::Lru
                        || self
                            .cfg
                            .space
                            .dynamic_for(key)
                            .is_some_and(|p| p.ttl_ns.or(p.ttl_steps).is_some()))
            },
            &mut evicted,
        );
        if let Visit::Evicted(key) = visit {
            add(&self.counters.rows_evicted, 1);
            self.spill_evicted(key, &evicted);
        }
        self.dynamic.evicted = evicted;
        visit
    }

    /// Whether this node may evict its owned row of `key` (see the module docs).
    fn evictable(&self, key: Key) -> bool {
        self.dir.creator(self.dir.bucket(key)) == self.cfg.id
            && !self.replicas.contains(key)
            && !self.transit.contains_key(&key)
            && !self.shared_out(key)
    }

    /// The TTL of the space (shared by the tables that set one).
    fn ttl(&self) -> Option<Ttl> {
        self.cfg
            .space
            .dynamic_policies()
            .find_map(|p| p.ttl_ns.map(Ttl::Ns).or(p.ttl_steps.map(Ttl::Steps)))
    }

    /// When the TTL sweep next needs the timer: while one runs, now; with a TTL in time, when
    /// the next begins; in steps, the next look at the node's clock.
    pub(crate) fn dynamic_timeout(&self) -> Option<Time> {
        let ttl = self.ttl()?;
        Some(Time(match (self.dynamic.sweep, ttl) {
            (Some(_), _) => self.clock.0,
            (None, Ttl::Ns(_)) => self.dynamic.next_sweep_at,
            (None, Ttl::Steps(_)) => self.dynamic.next_poll_at,
        }))
    }

    /// Runs the TTL sweep (one chunk per call) and trims rows above the budgets.
    pub(crate) fn dynamic_handle_timeout(&mut self, now: Time) {
        if !self.cfg.space.any_dynamic() {
            return;
        }
        if let Some(ttl) = self.ttl() {
            // Where the sweeps' clock stands now and their period in its units, if it was
            // looked at (time: at every call; steps: at most every `STEPS_POLL_NS`).
            let looked = match ttl {
                Ttl::Ns(ns) => Some((now.0, ns)),
                Ttl::Steps(steps) if now.0 >= self.dynamic.next_poll_at => {
                    self.dynamic.next_poll_at = now.0.saturating_add(STEPS_POLL_NS);
                    let clock = self.counters.worker_clock.load(atomic::Ordering::Relaxed);
                    Some((clock, steps))
                }
                Ttl::Steps(_) => None,
            };
            if let Some((at, every)) = looked
                && self.dynamic.sweep.is_none()
                && at >= self.dynamic.next_sweep_at
            {
                self.dynamic.sweep = Some((0, self.store.entries()));
                self.dynamic.next_sweep_at = at.saturating_add(every / 2);
            }
            if let Some((from, end)) = self.dynamic.sweep {
                let to = end.min(from + SWEEP_CHUNK);
                for i in from..to {
                    self.visit(i, Sweep::Ttl, None);
                }
                self.dynamic.sweep = (to < end).then_some((to, end));
            }
        }
        self.trim_to_budgets(false);
    }

    /// Lets rows go (by the clock: [`Node::free_rows_within`]) from every table above its row
    /// budget down to it; with `spilling_only`, only the budgets of policies that spill, and
    /// by eviction alone (a restore's trim: nothing trained is discarded, nothing sent).
    pub fn trim_to_budgets(&mut self, spilling_only: bool) {
        let budgets: Vec<(Option<usize>, u64)> = match self.cfg.space.named_tables() {
            Some(tables) => tables
                .all()
                .iter()
                .filter_map(|t| {
                    let policy = t.dynamic().filter(|p| p.spill || !spilling_only)?;
                    let budget = policy.row_budget(t.record_len())?;
                    Some((Some(t.index() as usize), budget))
                })
                .collect(),
            None => self
                .cfg
                .space
                .dynamic()
                .filter(|p| p.spill || !spilling_only)
                .and_then(|p| p.row_budget(self.cfg.space.record_len(0)))
                .map(|max| (None, max))
                .into_iter()
                .collect(),
        };
        for (table, max) in budgets {
            if spilling_only {
                if self.owned_rows(table) > max {
                    let visits = 2 * self.store.entries() + 1;
                    self.free_rows_within(table, max, visits, false);
                }
            } else {
                self.trim_one(table, max);
            }
        }
    }

    /// Lets rows of `table` go down to `max` in a bounded look: the timer's, the landings'
    /// and the unroomed creations' trims run while the node may stay above its budget (its
    /// rows wanted, shared or in transit), so none may scan the whole index each time.
    fn trim_one(&mut self, table: Option<usize>, max: u64) {
        let excess = self.owned_rows(table).saturating_sub(max);
        if excess > 0 {
            // Two passes at most: a third finds nothing the second did not.
            let visits = TRIM_CHUNK
                .saturating_add(excess.saturating_mul(TRIM_VISITS_PER_ROW))
                .min(2 * self.store.entries() + 1);
            self.free_rows_within(table, max, visits, true);
        }
    }

    /// After `keys` landed here: a key sent back earlier and moved here again is no longer on
    /// its way back; then every budget is restored.
    pub(crate) fn landed_under_budget(&mut self, keys: &[Key]) {
        self.dynamic.may_evict_again();
        if !self.dynamic.returning.is_empty() {
            for key in keys {
                self.dynamic.returning.remove(key);
            }
        }
        self.trim_to_budgets(false);
    }

    /// Whether moved-in rows can be sent back: keys move, and no peer was lost (a `Reclaim`
    /// to a lost home would never be answered).
    fn may_return(&self) -> bool {
        self.policy.keys_move() && self.first_lost().is_none()
    }

    /// Rows of `table` (or of the one space) on their way back from here, after forgetting
    /// those that left (one set serves every table: each table's budget counts its own). Also
    /// forgotten, so that they count as held again and may be sent anew: rows whose creator is
    /// now this node or whose home is no longer their creator (the home that took the
    /// `Reclaim` may not have moved them), and rows sent more than [`RETURN_PATIENCE_NS`] ago
    /// (a `Reclaim` dropped on the way).
    fn returning_in(&mut self, table: Option<usize>) -> u64 {
        let (store, dir, me, now) = (&self.store, &self.dir, self.cfg.id, self.clock);
        self.dynamic.returning.retain(|&key, &mut sent| {
            let creator = dir.creator(dir.bucket(key));
            store.residency(key) != Residency::Remote
                && creator != me
                && dir.home(key) == creator
                && now.0 < sent.0.saturating_add(RETURN_PATIENCE_NS)
        });
        match table {
            None => self.dynamic.returning.len() as u64,
            Some(t) => self
                .dynamic
                .returning
                .keys()
                .filter(|&&key| crate::tables::Tables::index_of(key) == t)
                .count() as u64,
        }
    }

    /// Rows of `table` (or of the one space) owned here.
    fn owned_rows(&self, table: Option<usize>) -> u64 {
        match table {
            Some(t) => self.store.count_local_in_table(t),
            None => self.store.count_local(),
        }
    }

    /// Whether this node may send its owned row of `key` back (see the module docs): a row of
    /// `table` it did not create, whose home is its creator (which may evict it there), not
    /// replicated, shared out, in transit, wanted by an intent here or already on its way back.
    fn returnable(&self, key: Key, table: Option<usize>) -> bool {
        let creator = self.dir.creator(self.dir.bucket(key));
        creator != self.cfg.id
            && self.dir.home(key) == creator
            && table.is_none_or(|t| crate::tables::Tables::index_of(key) == t)
            && !self.replicas.contains(key)
            && !self.transit.contains_key(&key)
            && !self.shared_out(key)
            && !self.interest.wanted(key)
            && !self.dynamic.returning.contains_key(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sketch_never_underestimates() {
        let mut sketch = CountMin::new(64);
        let mut truth = std::collections::HashMap::new();
        for i in 0..5_000u64 {
            let key = mix64(i % 300);
            let n = truth.entry(key).or_insert(0u32);
            *n += 1;
            assert!(sketch.add(key) >= *n);
        }
    }
}
