//! Replication decided by intent (AdaPM): a key several nodes want at the same time is
//! *shared* — its owner keeps it and each other node that wants it holds a replica — and a key
//! one node wants moves there. Replicas live exactly as long as their node's intent.
//!
//! Roles per key: the *home* (placement record, serialises decisions), the *owner* (holds the
//! value, and while the key is shared also its *sharers*: the members holding a replica, each
//! with the generation of the request that made it one), and *members*.
//!
//! Protocol (W wanter, H home, O owner):
//! 1. W marks the key in transit and sends `Want(generation, lead)` to H (`generation`: a
//!    number fresh at W; `lead`: how soon W's intent starts, by its measured clock rate).
//! 2. H does not change its record: it marks the key *deciding* (later requests for it queue
//!    at H) and sends `Offer(W, generation)` to O. (If H is O it decides itself.)
//! 3. O decides. It shares if the key is in use — an intent on O wants it now
//!    (`interest.rs`) or it has sharers — and some use is expected to last past W's need time
//!    plus its lead, or the techniques are replication-only; it moves the key under
//!    relocation-only, when nobody uses it, or when O is being drained. If every use is
//!    expected to end by then, O *defers*: it keeps the offer and decides again when the last
//!    use ends, or at that deadline (`defer.rs`; a hand-over between two users in turn becomes
//!    one move instead of a replica synced for the overlap). Sharing: O
//!    adds W (with `generation`) to the sharers and sends `Grant(generation, value)` to W and `Shared` to H.
//!    Moving: O sends the record to W (`Transfer`, as a relocation) and `Released` to H. A key
//!    still in transit to O is decided when it lands.
//! 4. H records W as owner if released, ends the decision, and replays what queued.
//! 5. W installs the replica (or the owned record) and applies what queued while it waited, in
//!    order; requests of peers that queued at W go on to O.
//!
//! Files: this one holds the state and the wanter's and home's requests (steps 1–2);
//! `decide.rs` the owner's decision and the home's end of it (steps 3–4); `defer.rs`
//! deferred offers; `grant.rs` the wanter's install (step 5); `sync.rs` synchronisation,
//! leaves, revokes and promotions.
//!
//! Synchronisation, as for the static replicated keys (`replica.rs`) with the owner as hub and
//! its record as the primary: each round (by the work clock or at the latest every period,
//! [`ShareSync`]) each member sends the deltas of its replicas to their owners
//! (`ShareDeltas`, numbered rounds; in flight until acknowledged), the owner adds them into its record, and sends every sharer the keys whose value changed
//! since its last broadcast (`ShareValues` with the last round of that member it applied); a
//! member sets its replica to that value plus its deltas still in flight plus its pending one.
//!
//! When the last intent on a key shared here ends at its owner, and one sharer is left that
//! has been busy with it (delta rounds since it became the only one: [`PROMOTE_AFTER_ROUNDS`]),
//! and no offer for the key is deferred,
//! the owner offers it the key (`Promote`): the sharer, if an intent there still wants it,
//! leaves (final delta) and localizes the key, which then moves as by a relocation — one
//! interested node gets the key. An owner no intent of which wants a key it shares out to
//! one busy sharer offers it again each round (each offer restarts the sharer's count), so
//! a key whose first offer came too early, or never (the use here ended before the key was
//! shared), does not stay with a node that does not use it.
//!
//! A replica ends when the last intent on its key at the member ends (`unwanted`), or when
//! the owner revokes it (`Revoke`: the owner must give the key away — an explicit localize,
//! a drain, a home taking keys back). The member removes the replica and sends its final delta
//! in `Leave(generation)`; the owner adds it and drops the sharer if the generation matches (a newer
//! grant to the same member may have crossed the leave). A key whose last sharer left is
//! owned as before; a pending hand-over of it proceeds then.
//!
//! Why no update is lost or applied twice: a member's pushes land in its replica's pending
//! delta (pushes that queued while the key was wanted form its first one), which is taken
//! once, sent once to the owner (round or leave, FIFO on the link) and added there once, and
//! only from a current sharer; the owner cannot give the key away while a sharer remains (it
//! revokes and waits for every `Leave`; a member that leaves the cluster stops counting), and
//! only an open decision adds a sharer. A member that left routes its later accesses straight
//! to the owner (behind its final delta on the same link). A drained node drops its replicas
//! and, as owner, only moves keys.
//!
//! Consistency: reads of a replica are bounded-stale, as for static replicated keys: the
//! owner's value as last received plus this node's own pushes since (others' pushes arrive
//! within two sync periods plus two deliveries). A `set` of a shared key applies at its owner
//! and reaches the setter's replica with the next change broadcast; pushes still pending at a
//! replica land on top of it. Keys that are not shared behave as under relocation. With fast
//! local access off, replicas are not read: accesses go to the owner.

use std::collections::{BTreeMap, VecDeque};

mod decide;
mod defer;
mod grant;
mod sync;

use hdrhistogram::Histogram;
use rustc_hash::FxHashMap as HashMap;

use crate::id::{Key, NodeId, ReqId};
use crate::intent::Need;
use crate::node::{Node, Time};
use crate::relocate::{AtHome, Queued};
use crate::stats::add;
use crate::store::Residency;
use crate::warning::Warning;
use crate::wire::{Frame, Kind};
use crate::work_clock::{WORK_POLL_NS, WorkClock};

/// What acting on an intent may do with a key another node holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IntentTechniques {
    /// Move the key to the one node that wants it; share it while several nodes want it at
    /// once (the default).
    #[default]
    All,
    /// Always move the key (Lapse's relocation, timed by intent).
    RelocateOnly,
    /// Never move the key on intent: every node that wants it gets a replica from its owner.
    ReplicateOnly,
}

/// Default time between two share-sync rounds by time alone.
pub const DEFAULT_SHARE_SYNC_NS: u64 = 10_000_000;

/// The shells' default work clock (key-updates per shared key between two rounds), measured in
/// `docs/benchmarks.md` ("Share-sync rounds by work").
pub const DEFAULT_SHARE_UPDATES_PER_KEY: u64 = 2;

/// The shells' default longest time between two rounds with the work clock on.
pub const DEFAULT_SHARE_SYNC_BOUND_NS: u64 = 100_000_000;

/// When share-sync rounds run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareSync {
    /// Time between the starts of two rounds, in nanoseconds (at least 1; `u64::MAX`: one
    /// round at the start, then replicas change only by grants and leaves, or by the work
    /// clock if one is set, whose looks then keep the timer busy every 5 ms while anything is
    /// shared). With a work clock, the longest time between two rounds. The core's default
    /// is a period of [`DEFAULT_SHARE_SYNC_NS`] without a work clock; the shells' (`roam`'s
    /// `Config`) is a work clock of [`DEFAULT_SHARE_UPDATES_PER_KEY`] bounded by
    /// [`DEFAULT_SHARE_SYNC_BOUND_NS`].
    pub every_ns: u64,
    /// A *work clock* for the rounds (0: off, rounds by time only). When set, a round also
    /// starts as soon as, since the last round started, this node's workers pushed this
    /// many key-updates per key shared here (held as a replica or owned and shared out; at
    /// least one key) into the local store, or, as an owner, it received deltas or gradient
    /// sums of as many keys as are shared here (each stands for this many updates). Staleness
    /// in updates per key is what training quality depends on; a clock in updates keeps it,
    /// and the sync's share of the CPU, the same on fast and slow machines, where a period in
    /// wall time does not (`replica.rs` has the same clock for static replicas).
    pub updates_per_key: u64,
}

impl ShareSync {
    /// Rounds every `every_ns`, by time only.
    pub const fn every(every_ns: u64) -> Self {
        Self {
            every_ns,
            updates_per_key: 0,
        }
    }
}

impl ShareSync {
    /// About how long a replica waits between two rounds: the period, or with a work clock
    /// (whose rounds come sooner) at most the default period.
    pub fn typical_gap_ns(&self) -> u64 {
        if self.updates_per_key > 0 {
            self.every_ns.min(DEFAULT_SHARE_SYNC_NS)
        } else {
            self.every_ns
        }
    }
}

impl Default for ShareSync {
    fn default() -> Self {
        Self::every(DEFAULT_SHARE_SYNC_NS)
    }
}

/// A key owned here that is shared.
#[derive(Debug)]
struct SharedKey {
    /// Sharers and the generation of each one's replica.
    sharers: BTreeMap<NodeId, u64>,
    /// When each sharer's intents on the key are expected to end (as it said when it asked).
    ends: BTreeMap<NodeId, Time>,
    /// The value as last broadcast (a change is sent on).
    last_sent: Vec<f32>,
    /// `last_sent` plus the members' deltas applied since, in the order applied: equal to the
    /// value when nothing else changed it.
    shadow: Vec<f32>,
    /// The members whose deltas were applied since the last broadcast, one bit each as the
    /// static replicas' hubs keep them (`replica::contributor`).
    changed_by: u64,
    /// Members that get the next change even if only their own deltas made it (a new replica
    /// that a delta of its previous one may still reach).
    resend: u64,
    /// Sync rounds whose deltas of this key were applied since the sharers last changed: how
    /// busy the replicas are (a sole sharer this busy gets the key when the owner is done).
    member_rounds: u32,
}

/// Delta rounds from a sole sharer after which it takes the key over once no intent of the
/// owner wants it any more (`Promote`). A replica used for one data point (a KGE entity) sends
/// one or two; one used for a stretch of work (an MF block for a sub-epoch) sends many, and then
/// owning the key beats syncing it. Measured: promoting every sole sharer cost KGE 1.6× its CPU
/// at 2 nodes and 5× at 4 (quick suite, docs/benchmarks.md); with this bound it rarely moves a
/// KGE key.
pub(crate) const PROMOTE_AFTER_ROUNDS: u32 = 3;

/// A replica held here by intent.
#[derive(Debug, Clone, Copy)]
struct Held {
    owner: NodeId,
    generation: u64,
    since: Time,
}

/// Deltas of one round sent to one owner, not yet acknowledged: the frame's values, and where
/// each key's delta starts in them (no allocation per key).
#[derive(Debug)]
struct Sent {
    round: u64,
    owner: NodeId,
    values: Vec<f32>,
    starts: HashMap<Key, u32>,
}

impl Sent {
    /// The delta of `key` (of `len` values) in this round, if it has one.
    fn delta(&self, key: Key, len: usize) -> Option<&[f32]> {
        let start = *self.starts.get(&key)? as usize;
        Some(&self.values[start..start + len])
    }
}

/// An open decision at a home: whom the offer went to, for whom, and what queued behind it.
#[derive(Debug)]
struct Deciding {
    owner: NodeId,
    wanter: NodeId,
    queue: Vec<Waiting>,
}

/// A request queued at a home behind an open decision.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    Localize {
        from: NodeId,
        new_owner: NodeId,
    },
    Want {
        from: NodeId,
        wanter: NodeId,
        generation: u64,
        need_at: Time,
        until: Time,
    },
}

/// One node's sharing state (all roles). See the module docs.
#[derive(Debug)]
pub(crate) struct Shares {
    pub(crate) techniques: IntentTechniques,
    sync_every: u64,
    next_round_at: Time,
    /// The work clock (see [`ShareSync::updates_per_key`]; 0: rounds by time only).
    updates_per_key: u64,
    /// When an idle round timer next looks at the work clock.
    next_poll_at: Time,
    /// The work clock: this node's key-updates, and (as an owner) those that the deltas and
    /// gradient sums it received stand for.
    work: WorkClock,
    round: u64,
    next_gen: u64,
    /// Owner: shared keys (looked up per key of every round's deltas: hashed, not ordered).
    owned: HashMap<Key, SharedKey>,
    /// Owner: shared keys to give away once their sharers left, and to whom.
    revoking: HashMap<Key, NodeId>,
    /// Owner: the last round of each member applied here.
    applied: BTreeMap<NodeId, u64>,
    /// Member: replicas held by intent (looked up per key of every round's values).
    held: HashMap<Key, Held>,
    /// Member: the owner of each key whose replica was dropped here, where its later accesses
    /// go (a hint like a location-cache entry: a request that finds the key gone is forwarded
    /// through the home).
    pub(crate) left: HashMap<Key, NodeId>,
    /// Member: deltas sent and not yet acknowledged, oldest first.
    in_flight: VecDeque<Sent>,
    /// Home: keys with an open decision.
    deciding: HashMap<Key, Deciding>,
    /// Home: bucket hand-offs waiting for the bucket's decisions to close.
    stashed: BTreeMap<u32, (NodeId, NodeId, u32)>,
    /// Owner: offers kept until this node's intents on the key end (`defer.rs`).
    deferred: defer::Deferrals,
    /// Member: how long replicas lived (ns).
    pub(crate) lifetimes: Histogram<u64>,
    scratch: Vec<f32>,
    /// Sharing became active (its first replica or shared key), so the round timer's deadline
    /// may be earlier than the shell last read ([`Node::take_timer_rearm`]).
    pub(crate) rearm: bool,
}

impl Shares {
    pub(crate) fn new(techniques: IntentTechniques, sync: ShareSync) -> Self {
        Self {
            techniques,
            sync_every: sync.every_ns.max(1),
            next_round_at: Time(0),
            updates_per_key: sync.updates_per_key,
            next_poll_at: Time(0),
            work: WorkClock::default(),
            round: 1,
            next_gen: 1,
            owned: HashMap::default(),
            revoking: HashMap::default(),
            applied: BTreeMap::new(),
            held: HashMap::default(),
            left: HashMap::default(),
            in_flight: VecDeque::new(),
            deciding: HashMap::default(),
            stashed: BTreeMap::new(),
            deferred: defer::Deferrals::default(),
            lifetimes: Histogram::new(3).expect("3 significant figures is valid"),
            scratch: Vec::new(),
            rearm: false,
        }
    }

    /// How often an idle round timer looks at the work clock: every 5 ms
    /// ([`WORK_POLL_NS`]), or four times a period if that is shorter.
    fn poll_every(&self) -> u64 {
        WORK_POLL_NS.min(self.sync_every / 4).max(1)
    }

    fn active(&self) -> bool {
        !self.held.is_empty() || !self.owned.is_empty()
    }

    /// Call before adding a replica or a shared key: the sync rounds start when sharing does,
    /// and a shell sleeping until an older deadline must read the new one.
    fn note_activity(&mut self) {
        if !self.active() {
            self.rearm = true;
        }
    }
}

impl Node {
    /// Keys replicated here by intent.
    pub fn shared_replicas(&self) -> usize {
        self.shares.held.len()
    }

    /// Keys owned here that other nodes hold replicas of.
    pub fn shared_keys(&self) -> usize {
        self.shares.owned.len()
    }

    /// Percentile `q` (0–100) of how long replicas held here by intent lived, in ns.
    pub fn replica_lifetime_ns(&self, q: f64) -> Option<u64> {
        let h = &self.shares.lifetimes;
        (!h.is_empty()).then(|| h.value_at_quantile(q / 100.0))
    }

    /// Whether `key` has an open share decision at this home.
    /// Owner: whether `key` is shared out by intent, or being given away once its sharers
    /// leave (such a row must stay where it is: eviction skips it).
    pub(crate) fn shared_out(&self, key: Key) -> bool {
        self.shares.owned.contains_key(&key) || self.shares.revoking.contains_key(&key)
    }

    pub(crate) fn is_deciding(&self, key: Key) -> bool {
        !self.shares.deciding.is_empty() && self.shares.deciding.contains_key(&key)
    }

    /// Queues a localize of `key` for `new_owner` behind the open decision on it here.
    pub(crate) fn wait_for_decision(&mut self, key: Key, from: NodeId, new_owner: NodeId) {
        if let Some(open) = self.shares.deciding.get_mut(&key) {
            open.queue.push(Waiting::Localize { from, new_owner });
        }
    }

    /// Whether a hand-off of `bucket` must wait for its decisions; if so it is kept and run
    /// once they close.
    pub(crate) fn stash_hand_off(
        &mut self,
        bucket: u32,
        from: NodeId,
        to: NodeId,
        epoch: u32,
    ) -> bool {
        let open = self
            .shares
            .deciding
            .keys()
            .any(|&key| self.dir.bucket(key) == bucket);
        if open {
            self.shares.stashed.insert(bucket, (from, to, epoch));
        }
        open
    }

    /// Worker: acts on intents — asks for `due` keys (moved or shared here) and drops the
    /// replicas of `unwanted` keys that no intent here wants any more. Completes when every
    /// due key is here.
    pub fn issue_intent_actions(
        &mut self,
        now: Time,
        worker: crate::id::WorkerId,
        due: &[Key],
        unwanted: &[Key],
        extended: &[Key],
        need: Need,
    ) -> ReqId {
        self.tick(now);
        if !extended.is_empty() {
            self.decide_deferred_extended(now, extended);
        }
        if !unwanted.is_empty() {
            self.drop_unwanted(now, unwanted);
        }
        if self.shares.techniques == IntentTechniques::RelocateOnly
            || !self.policy.keys_move()
            || self.is_leaving()
        {
            return self.issue_localize(now, worker, due);
        }
        let op = self.new_op(worker, crate::node::OpKind::Localize, due.len(), Vec::new());
        add(&self.counters.localize_keys, due.len() as u64);
        self.want_keys(now, op, due, need);
        self.settle(op);
        ReqId(op)
    }

    /// Starts asking for `keys` by intent, needed as `need` says: each key not here and not
    /// on its way becomes in transit here and is wanted from its home.
    fn want_keys(&mut self, now: Time, op: u64, keys: &[Key], need: Need) {
        let me = self.cfg.id;
        let generation = self.shares.next_gen;
        self.shares.next_gen += 1;
        let mut to_home: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut at_home: Vec<Key> = Vec::new();
        for (pos, &key) in keys.iter().enumerate() {
            let pos = pos as u32;
            if self.replicas.contains(key) || self.store.has_replica(key) {
                self.answer(op, pos);
                continue;
            }
            match self.residency(key) {
                Residency::Local => {
                    self.answer(op, pos);
                }
                Residency::InTransit => match self.transit.get_mut(&key) {
                    Some(t) => t.queue.push(Queued::Localize { op, pos }),
                    None => {
                        self.answer(op, pos);
                    }
                },
                Residency::Remote => {
                    if let Some(peer) = self.first_lost() {
                        self.answer(op, pos);
                        self.fail(op, crate::OpError::PeerGone { peer });
                        continue;
                    }
                    self.store.set_in_transit(key, true);
                    match self.transit.entry(key) {
                        // Never expected (a key in transit reads as such): wait with it.
                        std::collections::hash_map::Entry::Occupied(mut t) => {
                            t.get_mut().queue.push(Queued::Localize { op, pos });
                            continue;
                        }
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(crate::relocate::Transit {
                                queue: vec![Queued::Localize { op, pos }],
                                then_to: None,
                                since: now,
                                offer: None,
                            });
                        }
                    }
                    let bucket = self.dir.bucket(key);
                    if self.records.contains_key(&bucket) {
                        at_home.push(key);
                    } else {
                        to_home
                            .entry(self.dir.bucket_home(bucket))
                            .or_default()
                            .push(key);
                    }
                }
            }
        }
        if !at_home.is_empty() {
            self.handle_want(now, me, me, generation, need, &at_home);
        }
        for (home, keys) in to_home {
            self.send(home, want_frame(Kind::Want, me, generation, need, &keys));
        }
    }

    /// At a key's home: `wanter` wants the keys (request `generation`) as `need` says.
    pub(crate) fn handle_want(
        &mut self,
        now: Time,
        from: NodeId,
        wanter: NodeId,
        generation: u64,
        need: Need,
        keys: &[Key],
    ) {
        let me = self.cfg.id;
        let (need_at, until) = need.times_from(now);
        if !self.dir.is_member(wanter) {
            return self.warn(Warning::UnknownSender { from: wanter });
        }
        let mut offers: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut stale: BTreeMap<NodeId, Vec<Key>> = BTreeMap::new();
        let mut held: BTreeMap<u32, Vec<Key>> = BTreeMap::new();
        let mut relocate: Vec<Key> = Vec::new();
        let mut decide_here: Vec<Key> = Vec::new();
        for &key in keys {
            match self.at_home(from, key, "want of a key out of range") {
                AtHome::Here => {}
                AtHome::Held(bucket) => {
                    held.entry(bucket).or_default().push(key);
                    continue;
                }
                AtHome::Onward(home) => {
                    stale.entry(home).or_default().push(key);
                    continue;
                }
                AtHome::Dropped => continue,
            }
            let bucket = self.dir.bucket(key);
            let Some(records) = self.records.get(&bucket) else {
                continue;
            };
            if let Some(open) = self.shares.deciding.get_mut(&key) {
                open.queue.push(Waiting::Want {
                    from,
                    wanter,
                    generation,
                    need_at,
                    until,
                });
                continue;
            }
            let owner = records.owner(key);
            if owner == wanter {
                self.warn(Warning::Relocation {
                    from: Some(from),
                    key,
                    what: "wanted by the node that already owns it",
                });
            } else if self.shares.stashed.contains_key(&bucket) {
                // The bucket's home moves once its decisions close: no new one opens.
                relocate.push(key);
            } else if owner == me && self.residency(key) == Residency::Local {
                decide_here.push(key);
            } else if owner == me {
                // On its way here: decided when it lands; requests queue here until then.
                match self.transit.get_mut(&key) {
                    Some(t) if t.then_to.is_none() && t.offer.is_none() => {
                        t.offer = Some(Offer {
                            wanter,
                            generation,
                            home: me,
                            need_at,
                            until,
                        });
                        let open = Deciding {
                            owner: me,
                            wanter,
                            queue: Vec::new(),
                        };
                        self.shares.deciding.insert(key, open);
                    }
                    _ => self.warn(Warning::Relocation {
                        from: Some(from),
                        key,
                        what: "wanted from its home while neither here nor on its way",
                    }),
                }
            } else {
                let open = Deciding {
                    owner,
                    wanter,
                    queue: Vec::new(),
                };
                self.shares.deciding.insert(key, open);
                offers.entry(owner).or_default().push(key);
            }
        }
        if !relocate.is_empty() {
            self.handle_localize(now, from, wanter, &relocate);
        }
        let here = Offer {
            wanter,
            generation,
            home: me,
            need_at,
            until,
        };
        if !decide_here.is_empty() {
            self.decide_share(now, here, &decide_here);
        }
        for (owner, keys) in offers {
            self.send(
                owner,
                want_frame(Kind::Offer, wanter, generation, need, &keys),
            );
        }
        for (home, keys) in stale {
            add(&self.counters.forwards, 1);
            self.send(
                home,
                want_frame(Kind::Want, wanter, generation, need, &keys),
            );
        }
        for (bucket, keys) in held {
            self.hold(
                now,
                bucket,
                from,
                want_frame(Kind::Want, wanter, generation, need, &keys),
            );
        }
    }
}

/// A `Want`, `Offer`, `Shared` or `Released` frame: `node` is the wanter, `need` when it
/// needs the keys (wants and offers).
fn want_frame(kind: Kind, node: NodeId, generation: u64, need: Need, keys: &[Key]) -> Frame {
    Frame::new(kind, node, ReqId(generation), need.pack(), keys, 0)
}

impl Need {
    /// When the keys are needed and until when, on the clock that reads `now` as the
    /// request arrives (`Time(u64::MAX)`: never ends, or not known).
    fn times_from(self, now: Time) -> (Time, Time) {
        let until = match self.hold_ns {
            u64::MAX => Time(u64::MAX),
            hold => Time(now.0.saturating_add(hold)),
        };
        (Time(now.0.saturating_add(self.lead_ns)), until)
    }
}

/// A request for keys that their owner decides on: who wants them (its request's generation),
/// the home to tell, and when the wanter needs them and until when (the owner's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offer {
    pub(crate) wanter: NodeId,
    pub(crate) generation: u64,
    pub(crate) home: NodeId,
    pub(crate) need_at: Time,
    pub(crate) until: Time,
}
