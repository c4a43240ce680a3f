//! Deferred offers: the owner of a key that another node wants keeps the offer while the key's
//! current uses — its own intents on it, and its sharers' — are expected to end before that
//! node needs it, and then moves the key instead of sharing it.
//!
//! Why: sharing is for keys several nodes use *at the same time*. A worker acts on an intent
//! ahead of its start (by its measured action window, `intent.rs`), so a key handed from one
//! user to the next in turn — a block of keys from one worker to the next, signalled ahead —
//! is wanted while its current user still holds it. Sharing it then costs
//! a replica synced for the overlap and leaves the next user with a replica, not the key. The
//! owner knows when its own intents on the key are expected to end (`Interest::until`, from
//! its workers' clock rates) and when each sharer's are (each said so when it asked), and the
//! wanter said when it needs the key (its lead, carried by `Want` and `Offer`). If the last of
//! those ends comes no later than twice the lead from now, the owner defers. Only for long
//! uses: a wanter whose intents (each one, from its start to its end: `Actions::
//! shortest_use_ns`) include one shorter than a share-sync period says it needs the keys now
//! (lead 0), and is never deferred. A replica that lives less than a sync round costs just its
//! grant and its leave, and deferring it would only make the wanter wait; one that lives
//! longer costs a round per period, which moving the key saves. (Measured: deferring every
//! use short enough let KGE's workers, each waiting for keys the others held, convoy behind
//! the deadlines — 2.5–8.4× the epoch time.) Twice, not once: the wanter acts a high quantile of
//! its action time ahead
//! (`intent.rs`), so a key that arrives somewhat after its start still beats a replica synced
//! for the overlap, and two users in turn (a hand-over where the next user starts when the
//! current one ends) reach the two times together, within the estimates' noise.
//!
//! A deferred offer is decided again, with deferral no longer an option, when the first of
//! these happens: the key's last use ends — the node's last intent on it (the worker's release
//! hands the key to the protocol: the key is watched, `Interest::watch`) or its last sharer's
//! `Leave`, whichever comes last — a worker here acts on a new intent on the key that ends
//! after the deadline (the key's additions are watched: its use is not ending, so the wait
//! would be in vain), the deadline (twice the lead) passes
//! (a timer: the estimate was wrong, so the key is shared as without deferral), or the node starts
//! leaving (it only moves keys then). The decision stays open at the home meanwhile, so
//! requests for the key queue there exactly as behind any decision: deferral delays a
//! decision, it never makes a different one possible, so the protocol's guarantees hold
//! unchanged (`share/mod.rs`).
//!
//! Invariants: a key is deferred at most once at a time (an open decision at its home admits
//! no second offer; a home that owns the key opens one for the deferral); a deferred key is
//! local here and watched, and gains no sharer (only a decision adds one) and is not
//! promoted; every deferral is decided exactly once.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;

use super::Offer;
use crate::id::{Key, NodeId};
use crate::node::{Node, Time};
use crate::stats::add;

/// The offers kept by this node as owner, and their deadlines.
#[derive(Debug, Default)]
pub(crate) struct Deferrals {
    /// Each deferred key's offer and deadline.
    offers: HashMap<Key, (Offer, Time)>,
    /// `(deadline, key)` of every deferred offer: the next deadline first.
    deadlines: BTreeSet<(Time, Key)>,
}

impl Node {
    /// Owner: keeps `offer` for `keys` (local here, not shared, wanted here until no later
    /// than `deadline`) until their interest here ends, or `deadline`.
    pub(crate) fn defer_offer(&mut self, offer: Offer, deadline: Time, keys: &[Key]) {
        add(&self.counters.share_deferrals, keys.len() as u64);
        for &key in keys {
            self.interest.watch(key, true);
            self.interest.watch_additions(key, true);
            let deferrals = &mut self.shares.deferred;
            if let Some((_, old)) = deferrals.offers.insert(key, (offer, deadline)) {
                // Never expected (the home admits one decision per key): the newer wins.
                deferrals.deadlines.remove(&(old, key));
            }
            deferrals.deadlines.insert((deadline, key));
        }
    }

    /// The earliest deadline of a deferred offer.
    pub(crate) fn defer_timeout(&self) -> Option<Time> {
        self.shares.deferred.deadlines.first().map(|&(at, _)| at)
    }

    /// Until when the key's users here — this node's intents, and the sharers of a key shared
    /// from here — are expected to need it (`None`: nobody does). A sharer whose use was to
    /// end by `now` counts as lingering, not as a user: it said when its use ends only when it
    /// asked, and a sharer that keeps its replica past that (`intent/linger.rs`) sends no word
    /// until it leaves, which a linger puts off for as long as the key keeps being used there.
    pub(crate) fn busy_until(&self, key: Key, now: Time) -> Option<Time> {
        let sharers = self.shares.owned.get(&key).and_then(|shared| {
            shared
                .ends
                .values()
                .filter(|&&end| end > now)
                .max()
                .copied()
        });
        self.interest.until(key).max(sharers)
    }

    /// Whether `key` is shared from here (where [`Node::busy_until`] found no use, its sharers
    /// are past their announced uses: they linger).
    pub(crate) fn has_sharers(&self, key: Key) -> bool {
        self.shares
            .owned
            .get(&key)
            .is_some_and(|shared| !shared.sharers.is_empty())
    }

    /// Stops watching `key`'s interest unless an offer for it is deferred.
    pub(crate) fn unwatch(&self, key: Key) {
        if !self.shares.deferred.offers.contains_key(&key) {
            self.interest.watch(key, false);
        }
    }

    /// Whether an offer for `key` is deferred here.
    pub(crate) fn is_deferred(&self, key: Key) -> bool {
        !self.shares.deferred.offers.is_empty() && self.shares.deferred.offers.contains_key(&key)
    }

    /// Decides the deferred offers whose deadline came.
    pub(crate) fn defer_handle_timeout(&mut self, now: Time) {
        let mut due = Vec::new();
        while let Some(&(at, key)) = self.shares.deferred.deadlines.first() {
            if at > now {
                break;
            }
            due.push(key);
            self.shares.deferred.deadlines.pop_first();
        }
        if !due.is_empty() {
            add(&self.counters.share_deferrals_expired, due.len() as u64);
            self.decide_deferred(now, &due);
        }
    }

    /// Decides the deferred offers of those of `keys` that nobody uses any more: no intent here
    /// wants them and no sharer holds them (a worker's release ended the node's interest, or
    /// the last sharer left).
    pub(crate) fn decide_deferred_unwanted(&mut self, now: Time, keys: &[Key]) {
        if self.shares.deferred.offers.is_empty() {
            return;
        }
        let done: Vec<Key> = keys
            .iter()
            .copied()
            .filter(|&key| {
                self.shares.deferred.offers.contains_key(&key)
                    && self.busy_until(key, now).is_none()
            })
            .collect();
        if !done.is_empty() {
            self.decide_deferred(now, &done);
        }
    }

    /// Decides the deferred offers of those of `keys` whose use here now lasts past their
    /// deadline (a worker acted on a new intent on them): the wait would be in vain.
    pub(crate) fn decide_deferred_extended(&mut self, now: Time, keys: &[Key]) {
        let late: Vec<Key> = keys
            .iter()
            .copied()
            .filter(|&key| {
                let deadline = self.shares.deferred.offers.get(&key).map(|&(_, at)| at);
                deadline.is_some_and(|at| self.busy_until(key, now).is_some_and(|until| until > at))
            })
            .collect();
        if !late.is_empty() {
            add(&self.counters.share_deferrals_extended, late.len() as u64);
            self.decide_deferred(now, &late);
        }
    }

    /// Decides every deferred offer now (the node starts leaving).
    pub(crate) fn decide_all_deferred(&mut self, now: Time) {
        let mut keys: Vec<Key> = self.shares.deferred.offers.keys().copied().collect();
        keys.sort_unstable();
        self.decide_deferred(now, &keys);
    }

    /// Ends the deferral of `keys` (those deferred) and decides their offers, grouped by
    /// offer so that a block handed over together moves in one batch.
    fn decide_deferred(&mut self, now: Time, keys: &[Key]) {
        let mut groups: BTreeMap<(NodeId, u64, NodeId, Time), Vec<Key>> = BTreeMap::new();
        for &key in keys {
            let Some((offer, deadline)) = self.shares.deferred.offers.remove(&key) else {
                continue;
            };
            self.shares.deferred.deadlines.remove(&(deadline, key));
            self.interest.watch_additions(key, false);
            if !self.shares.owned.contains_key(&key) {
                self.interest.watch(key, false);
            }
            groups
                .entry((offer.wanter, offer.generation, offer.home, offer.until))
                .or_default()
                .push(key);
        }
        for ((wanter, generation, home, until), keys) in groups {
            // The need time is now: no second deferral.
            let offer = Offer {
                wanter,
                generation,
                home,
                need_at: now,
                until,
            };
            self.decide_share(now, offer, &keys);
        }
    }
}
