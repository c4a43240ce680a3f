//! The owner's decision on a request for a key (`Offer`): share it with the wanter, give it
//! away, or defer (see the protocol in `share/mod.rs`, steps 3–4), and the home's side of the
//! decision's end; giving a shared key away revokes its replicas first.
//!
//! Invariants: a key is shared only by an open decision at its home, and the decision closes
//! (and what queued behind it replays) once the owner told the home; a shared key is released
//! to its new owner only after every sharer left (`release_to` revokes and waits).

use std::collections::BTreeMap;

use crate::id::{Key, NodeId, ReqId};
use crate::intent::Need;
use crate::node::{Node, Time};
use crate::replica::contributor;
use crate::stats::add;
use crate::store::Residency;
use crate::warning::Warning;
use crate::wire::{Frame, Kind};

use super::{Deciding, IntentTechniques, Offer, SharedKey, Waiting, want_frame};

impl Node {
    /// At the owner, from the home `from`: share the keys with `wanter` (which needs them as
    /// `need` says) or give them to it.
    pub(crate) fn handle_offer(
        &mut self,
        now: Time,
        from: NodeId,
        wanter: NodeId,
        generation: u64,
        need: Need,
        keys: &[Key],
    ) {
        let (need_at, until) = need.times_from(now);
        let offer = Offer {
            wanter,
            generation,
            home: from,
            need_at,
            until,
        };
        if !self.dir.is_member(wanter) || wanter == self.cfg.id {
            let key = keys.first().copied().unwrap_or(0);
            return self.warn(Warning::Relocation {
                from: Some(from),
                key,
                what: "offer to no member or to the owner itself",
            });
        }
        let mut now_keys = Vec::new();
        for &key in keys {
            if !self.cfg.space.contains(key) {
                continue;
            }
            match self.residency(key) {
                Residency::Local => {
                    // Shared or handed over below with the rest: no later key's new row may
                    // take its room meanwhile (`dynamic.rs`).
                    if self.cfg.space.any_dynamic() {
                        self.dynamic.pinned.insert(key);
                    }
                    now_keys.push(key);
                }
                Residency::InTransit => match self.transit.get_mut(&key) {
                    Some(t) if t.then_to.is_none() && t.offer.is_none() => {
                        t.offer = Some(offer);
                    }
                    _ => self.warn(Warning::Relocation {
                        from: Some(from),
                        key,
                        what: "offered twice while in transit",
                    }),
                },
                Residency::Remote => self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "offer of a key that is not here",
                }),
            }
        }
        self.decide_share(now, offer, &now_keys);
        self.check_evacuated();
    }

    /// At the owner of `keys` (all local here): shares them with the offer's wanter, gives
    /// them to it, or defers the offer (`defer.rs`), and tells their home.
    pub(crate) fn decide_share(&mut self, now: Time, offer: Offer, keys: &[Key]) {
        if keys.is_empty() {
            return;
        }
        let me = self.cfg.id;
        let Offer {
            wanter,
            generation,
            home,
            need_at,
            until: wanted_until,
        } = offer;
        // How long the owner may keep a key it is still busy with: until twice the wanter's
        // lead (a wanter whose use is too short to wait for says it needs the keys now:
        // `defer.rs`).
        let defer_until = Time(need_at.0.saturating_add(need_at.0.saturating_sub(now.0)));
        let may_defer = need_at > now;
        let (mut shared, mut released, mut deferred) = (Vec::new(), Vec::new(), Vec::new());
        for &key in keys {
            let share = match self.shares.techniques {
                _ if self.is_leaving() => false,
                IntentTechniques::RelocateOnly => false,
                IntentTechniques::ReplicateOnly => true,
                IntentTechniques::All => match self.busy_until(key, now) {
                    // Not in use here. A key whose sharers keep it past their uses (they
                    // linger, `intent/linger.rs`) stays shared: moving it would revoke
                    // replicas that are used again soon (measured: word vectors cost 5–7 %
                    // more CPU when such keys moved to long-use wanters). Any other key goes
                    // to the wanter, also when this node's interest in it only lingers: a key
                    // shared from a lingering owner is shared again with every later wanter,
                    // so when several nodes use it in turn each use costs a grant, a leave
                    // and a sync round instead of one transfer (measured: MF's column blocks,
                    // handed on each sub-epoch, cost 1.7× the CPU and 2.7× the bytes; KGE and
                    // word vectors, whose lingering replicas are at members, did not change).
                    None => self.has_sharers(key),
                    Some(until) if may_defer && until <= defer_until => {
                        deferred.push(key);
                        continue;
                    }
                    Some(_) => true,
                },
            };
            if share {
                shared.push(key);
            } else {
                released.push(key);
            }
        }
        if !deferred.is_empty() {
            if home == me {
                // Decided later: open here (a home that owns the key decides at once, with
                // no entry) so that requests queue behind it.
                for &key in &deferred {
                    self.shares.deciding.entry(key).or_insert_with(|| Deciding {
                        owner: me,
                        wanter,
                        queue: Vec::new(),
                    });
                }
            }
            self.defer_offer(offer, defer_until, &deferred);
        }
        if !shared.is_empty() {
            add(&self.counters.share_grants, shared.len() as u64);
            let mut values = Vec::new();
            for &key in &shared {
                let len = self.cfg.space.len(key);
                let start = values.len();
                values.resize(start + len, 0.0);
                self.store.pull_local(key, &mut values[start..]);
                self.shares.note_activity();
                let entry = self.shares.owned.entry(key).or_insert_with(|| SharedKey {
                    sharers: BTreeMap::new(),
                    ends: BTreeMap::new(),
                    last_sent: values[start..].to_vec(),
                    shadow: values[start..].to_vec(),
                    changed_by: 0,
                    resend: 0,
                    member_rounds: 0,
                });
                entry.member_rounds = 0;
                self.interest.watch(key, true);
                entry.ends.insert(wanter, wanted_until);
                if entry.sharers.insert(wanter, generation).is_some() {
                    // A grant crossing the member's leave: deltas of its old replica may still
                    // come, and its new one does not have them: it needs the next change.
                    entry.resend |= contributor(wanter);
                }
            }
            let grant = Frame::with_contents(
                Kind::Grant,
                me,
                ReqId(generation),
                0,
                &shared,
                None,
                &values,
            );
            add(&self.counters.share_bytes_sent, grant.wire_len() as u64);
            self.send(wanter, grant);
        }
        if !released.is_empty() {
            add(&self.counters.intent_relocations, released.len() as u64);
        }
        if home == me {
            if !released.is_empty() {
                for &key in &released {
                    if let Some(records) = self.records.get_mut(&self.dir.bucket(key)) {
                        records.set_owner(key, wanter);
                    }
                }
                self.release_to(now, wanter, &released);
            }
            let decided: Vec<Key> = shared.iter().chain(&released).copied().collect();
            self.close_decisions(now, &decided);
        } else {
            if !released.is_empty() {
                self.release_to(now, wanter, &released);
                self.send(
                    home,
                    want_frame(Kind::Released, wanter, 0, Need::NOW, &released),
                );
            }
            if !shared.is_empty() {
                self.send(
                    home,
                    want_frame(Kind::Shared, wanter, 0, Need::NOW, &shared),
                );
            }
        }
    }

    /// At the home: the owner decided (see [`Node::decide_share`]).
    pub(crate) fn handle_decided(
        &mut self,
        now: Time,
        from: NodeId,
        wanter: NodeId,
        released: bool,
        keys: &[Key],
    ) {
        let mut closed = Vec::with_capacity(keys.len());
        for &key in keys {
            let matches = self
                .shares
                .deciding
                .get(&key)
                .is_some_and(|open| open.owner == from && open.wanter == wanter);
            if !matches {
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "decision on a key with none open to that owner for that node",
                });
                continue;
            }
            if released {
                match self.records.get_mut(&self.dir.bucket(key)) {
                    Some(records) => {
                        records.set_owner(key, wanter);
                    }
                    None => self.warn(Warning::Relocation {
                        from: Some(from),
                        key,
                        what: "decision at a node without the bucket's records",
                    }),
                }
            }
            closed.push(key);
        }
        self.close_decisions(now, &closed);
    }

    /// Ends the decisions on `keys` (if open) and replays what queued behind them; runs the
    /// hand-offs of buckets whose last decision closed.
    fn close_decisions(&mut self, now: Time, keys: &[Key]) {
        let mut buckets = Vec::new();
        // Replaying what queued cannot stash a hand-off (only a home's hand-off message does).
        let any_stashed = !self.shares.stashed.is_empty();
        for &key in keys {
            let Some(open) = self.shares.deciding.remove(&key) else {
                continue;
            };
            if any_stashed {
                buckets.push(self.dir.bucket(key));
            }
            for waiting in open.queue {
                match waiting {
                    Waiting::Localize { from, new_owner } => {
                        self.handle_localize(now, from, new_owner, &[key]);
                    }
                    Waiting::Want {
                        from,
                        wanter,
                        generation,
                        need_at,
                        until,
                    } => {
                        let need = Need {
                            lead_ns: need_at.0.saturating_sub(now.0),
                            hold_ns: until.0.saturating_sub(now.0),
                        };
                        self.handle_want(now, from, wanter, generation, need, &[key]);
                    }
                }
            }
        }
        buckets.sort_unstable();
        buckets.dedup();
        // Only a bucket whose hand-off waits needs the scan over every open decision (under
        // MF's block hand-overs, thousands of keys a message, the scan per bucket was 3 % of
        // adapm's CPU).
        buckets.retain(|bucket| self.shares.stashed.contains_key(bucket));
        for bucket in buckets {
            let open = self
                .shares
                .deciding
                .keys()
                .any(|&key| self.dir.bucket(key) == bucket);
            if !open && let Some((from, to, epoch)) = self.shares.stashed.remove(&bucket) {
                self.handle_home_hand_off(now, from, bucket, to, epoch);
            }
        }
    }

    /// At the owner: gives `keys` (local here) to `new_owner` by relocation, revoking the
    /// replicas of shared ones first (they go once their sharers left).
    pub(crate) fn release_to(&mut self, now: Time, new_owner: NodeId, keys: &[Key]) {
        let mut plain = Vec::with_capacity(keys.len());
        let mut revokes: BTreeMap<NodeId, (Vec<Key>, Vec<u32>)> = BTreeMap::new();
        for &key in keys {
            match self.shares.owned.get(&key) {
                Some(shared) => {
                    self.shares.revoking.insert(key, new_owner);
                    for (&member, &generation) in &shared.sharers {
                        let (keys, generations) = revokes.entry(member).or_default();
                        keys.push(key);
                        generations.push(generation as u32);
                    }
                }
                None => plain.push(key),
            }
        }
        for (member, (keys, generations)) in revokes {
            add(&self.counters.share_revokes, keys.len() as u64);
            let frame = Frame::with_positions(
                Kind::Revoke,
                self.cfg.id,
                ReqId(0),
                0,
                &keys,
                &generations,
                0,
            );
            self.send(member, frame);
        }
        self.release_now(now, new_owner, &plain);
    }
}
