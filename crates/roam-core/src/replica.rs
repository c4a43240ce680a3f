//! Replicated keys (NuPS): every node holds a replica of each key of a fixed set, read and
//! pushed on the fast path, and synchronised in the background through the key's *hub*.
//!
//! - Each replica is a value and a pending delta (the store's replica records): a local push
//!   adds into both, with no message.
//! - Each key's hub is a member chosen by a hash of the key (not its home: hot keys are often
//!   neighbours, e.g. the lowest ids of a frequency-sorted vocabulary, and range homes would put
//!   all their hubs on one node). The hub keeps the key's *primary* value: the sum of every
//!   delta it has applied (plus a `set`, if any). Membership is fixed for now; when it changes
//!   (issue #14) hubs move with a protocol like the home moves.
//! - A sync *round* (every `sync_every`, on the core's timers, or sooner with the *work clock*:
//!   once the node made `sync_after_updates` key-updates since the last round; the scan of the
//!   replicated set runs in bounded chunks) takes the pending delta of every replica this node
//!   updated and sends them to their hubs, one `ReplicaDeltas` frame per hub numbered by the round. Deltas
//!   sent and not yet acknowledged stay *in flight* here. A hub adds its own deltas into the
//!   primary directly.
//! - At the end of its own round a hub sends the primary of every key that changed since its
//!   last broadcast to every other node (`ReplicaValues`), with the number of the last round of
//!   that node it has applied (the *ack*). A node then sets its replica to
//!   `primary + its deltas in flight after the ack + its pending delta`, under the key's latch.
//!   A key that only the receiving node changed since the last broadcast is left out for it:
//!   its replica is already `primary + its own deltas` (the hub keeps, per key, a bit for each
//!   node whose deltas it applied). A node with no such key and no newly applied round of its
//!   own gets no frame.
//!
//! Invariants (with per-link FIFO delivery and no node lost):
//! - Every push lands in exactly one delta, is sent once, is added into the primary once, and is
//!   counted in a replica either through its own pending delta, its in-flight list, or the
//!   primary — never two of these at once: a replica is always `primary (as last received) +
//!   in flight + pending`, so no update is lost or applied twice.
//! - A push is in every replica within two sync periods plus two one-way deliveries: at most a
//!   period until its node's round, a delivery to the hub, at most a period until the hub's
//!   round, a delivery back. [`Node::issue_sync_replicas`] makes every earlier push visible
//!   everywhere at once (a collective: flush markers to every hub, `ReplicaFlushed` back).
//! - Under a stateful optimizer (Adagrad, Adam, FTRL) gradients of replicated keys accumulate
//!   at each node and the hub steps its primary, the only copy of the optimizer state, once per
//!   round with their sum (`replica/grads.rs`, which states the exact semantics).
//! - Replicated keys are never owned, relocated or cached. A `set` of a replicated key goes to
//!   its hub, overwrites the primary, and reaches the setter before its completion; pushes not
//!   yet applied at the hub when the set lands there are added on top of it.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap as HashMap;

use hdrhistogram::Histogram;

use crate::directory::{Directory, mix64};
use crate::id::{Key, NodeId, ReqId};
use crate::keyspace::KeySpace;
use crate::node::{Node, Time};
use crate::stats::add;
use crate::warning::Warning;
use crate::wire::{Frame, Kind};
use crate::work_clock::{WORK_POLL_NS, WorkClock};

mod flush;
mod grads;

use flush::SyncState;
pub(crate) use grads::GRADIENT_ROUND;
use grads::HubGrads;

/// Replicated keys scanned per timer call, so that a round never holds the node for long.
const SCAN_CHUNK: usize = 4096;

/// Mixed into keys before hashing them to hubs, so that hubs are independent of hash homes.
const HUB_SALT: u64 = 0x6e75_7073_6875_6273;

/// The origin time of a `ReplicaValues` frame that answers a `set` (it carries the setter's
/// own value, not other nodes' updates, so it is no staleness sample).
const NO_ORIGIN: u64 = u64::MAX;

/// A change every node must receive (a `set`, or a contributor without a bit of its own).
const EVERY_NODE: u64 = u64::MAX;

/// The bit of `node` in a hub's per-key set of contributors: nodes 0–63 have one each, later
/// ones count as every node (they then get every change, as before this optimisation).
pub(crate) fn contributor(node: NodeId) -> u64 {
    if node.0 < 64 { 1 << node.0 } else { EVERY_NODE }
}

/// Marks a position this node is not the hub of.
const NOT_HUB: usize = usize::MAX;

/// Which keys are replicated and how often replicas synchronise.
#[derive(Clone, Debug)]
pub struct Replication {
    /// The replicated keys (any order; duplicates are ignored).
    pub keys: Vec<Key>,
    /// Time between the starts of two sync rounds, in nanoseconds (at least 1; `u64::MAX`:
    /// no background rounds after the first, replicas change only at `sync_replicas`, or by
    /// the work clock if one is set).
    pub sync_every_ns: u64,
    /// Background rounds leave a replica's delta pending while its L2 norm is below this
    /// (0: send every non-zero delta). `sync_replicas` sends every delta regardless.
    pub min_delta_norm: f32,
    /// A *work clock* for the rounds (0: off, rounds by time only). When set, a round also
    /// starts as soon as, since the last round started, this node's workers pushed or set
    /// this many keys into the local store (on the fast path: with fast local access off only
    /// the period applies), or, as a hub, it received deltas of replicated keys that count
    /// for as many: each counts this number divided by the number of replicated keys (rounded
    /// up; a delta stands for that many updates on average), so a hub whose own workers are
    /// idle still broadcasts about once per round of the others. `sync_every_ns` then only
    /// bounds the time between rounds (`u64::MAX`: rounds by work alone). Staleness in
    /// updates is what training quality depends on; a clock in updates keeps it, and the
    /// sync's share of the CPU, the same on fast and slow (or shared) machines, where a period
    /// in wall time does not.
    pub sync_after_updates: u64,
}

/// Deltas of one round for one hub: sent, or being gathered by a scan. Positions are
/// increasing (scans go in key order), so a key's delta is found by binary search.
#[derive(Debug)]
struct Deltas {
    round: u64,
    hub: NodeId,
    positions: Vec<u32>,
    /// Where each position's delta starts in `values`.
    starts: Vec<u32>,
    values: Vec<f32>,
}

impl Deltas {
    fn delta(&self, pos: u32) -> Option<&[f32]> {
        let i = self.positions.binary_search(&pos).ok()?;
        let end = self
            .starts
            .get(i + 1)
            .map_or(self.values.len(), |&e| e as usize);
        Some(&self.values[self.starts[i] as usize..end])
    }
}

/// A round's scan in progress.
#[derive(Debug)]
struct Scan {
    cursor: usize,
    /// When this round's deltas started accumulating (the previous round's start): the oldest a
    /// push in them can be.
    since: Time,
    /// Deltas below this L2 norm stay pending (0 in a `sync_replicas` flush).
    min_norm: f32,
    out: BTreeMap<NodeId, Deltas>,
    /// Accumulated gradients for other hubs, by hub (stateful optimizers only).
    grads: BTreeMap<NodeId, (Vec<Key>, Vec<f32>)>,
}

/// Replication state of one node (empty when nothing is replicated). Keys are addressed by
/// their *position* in the sorted replicated set.
#[derive(Debug)]
pub(crate) struct Replicas {
    keys: Vec<Key>,
    index: HashMap<Key, u32>,
    hub_of: Vec<NodeId>,
    sync_every: u64,
    /// See [`Replication::sync_after_updates`] (0: off).
    sync_after_updates: u64,
    /// The work clock: local updates, and replicated keys whose deltas other nodes sent here
    /// (as their hub), each weighted by `remote_weight`.
    work: WorkClock,
    /// The updates a delta from another node counts for (see [`Replication::sync_after_updates`]).
    remote_weight: u64,
    /// When the work clock is looked at next (with the work clock on).
    next_poll_at: Time,
    /// Number of the round being built (rounds start at 1; 0 acknowledges nothing).
    round: u64,
    next_round_at: Time,
    /// Start of the last round (the origin of the next round's deltas).
    last_round_at: Time,
    scan: Option<Scan>,
    min_delta_norm: f32,
    /// Deltas sent to their hubs and not yet acknowledged, oldest first.
    in_flight: VecDeque<Deltas>,
    /// Hub: where each position's primary starts in `primary` (`NOT_HUB` elsewhere).
    primary_at: Vec<usize>,
    /// Hub: the primaries of the keys this node is the hub of, concatenated: whole records
    /// (visible values, then the optimizer's hidden state) under a stateful optimizer, else
    /// visible values.
    primary: Vec<f32>,
    /// Hub: gradient sums under a stateful optimizer (`replica/grads.rs`).
    grads: HubGrads,
    /// Hub: the last round of each node applied here.
    applied: BTreeMap<NodeId, u64>,
    /// Hub: positions whose primary changed since the last broadcast (each once), and the
    /// oldest origin among the changes.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Hub: per position, the nodes whose deltas changed the primary since the last broadcast
    /// (see [`contributor`]); a node that alone changed a key already holds the new value.
    changed_by: Vec<u64>,
    dirty_since: Option<Time>,
    sync: SyncState,
    /// Reused buffers (no allocation per key on the sync path).
    scratch: Vec<f32>,
    /// Age of remote updates when they land here (ns): now minus the oldest origin they carry.
    pub(crate) staleness: Histogram<u64>,
}

/// The node that keeps `key`'s primary: a member picked by a hash of the key.
fn hub_of(dir: &Directory, key: Key) -> NodeId {
    let members = dir.members();
    members[(mix64(key ^ HUB_SALT) % members.len() as u64) as usize]
}

impl Replicas {
    pub(crate) fn new(
        replication: Option<&Replication>,
        me: NodeId,
        dir: &Directory,
        space: &KeySpace,
    ) -> Self {
        let (mut keys, sync_every, min_delta_norm, sync_after_updates) = match replication {
            Some(r) => (
                r.keys.clone(),
                r.sync_every_ns.max(1),
                r.min_delta_norm.max(0.0),
                r.sync_after_updates,
            ),
            None => (Vec::new(), u64::MAX, 0.0, 0),
        };
        keys.sort_unstable();
        keys.dedup();
        let hubs: Vec<NodeId> = keys.iter().map(|&k| hub_of(dir, k)).collect();
        let mut primary_at = vec![NOT_HUB; keys.len()];
        let mut total = 0;
        let stateful = space.optimizer().is_some_and(|o| !o.is_linear());
        for (pos, (&key, &hub)) in keys.iter().zip(&hubs).enumerate() {
            if hub == me {
                primary_at[pos] = total;
                total += if stateful {
                    space.record_len(key)
                } else {
                    space.len(key)
                };
            }
        }
        let lens: Vec<usize> = keys.iter().map(|&k| space.len(k)).collect();
        let grads = HubGrads::new(space.optimizer().copied(), &primary_at, &lens);
        let remote_weight = sync_after_updates.div_ceil(keys.len().max(1) as u64);
        Self {
            index: keys
                .iter()
                .enumerate()
                .map(|(pos, &k)| (k, pos as u32))
                .collect(),
            hub_of: hubs,
            is_dirty: vec![false; keys.len()],
            changed_by: vec![0; keys.len()],
            keys,
            sync_every,
            sync_after_updates,
            work: WorkClock::default(),
            remote_weight,
            next_poll_at: Time(0),
            round: 1,
            // The first background round one period after the node's start, not at its first
            // timer poll: a timer thread that starts after the workers' first pushes would
            // otherwise sync part of them in a round of its own (an extra optimizer step at
            // the hub), and a period of `u64::MAX` means none at all.
            next_round_at: Time(sync_every),
            last_round_at: Time(0),
            scan: None,
            min_delta_norm,
            in_flight: VecDeque::new(),
            primary_at,
            primary: vec![0.0; total],
            grads,
            applied: BTreeMap::new(),
            dirty: Vec::new(),
            dirty_since: None,
            sync: SyncState::default(),
            scratch: Vec::new(),
            staleness: Histogram::new(3).expect("3 significant figures is valid"),
        }
    }

    /// The replicated keys, sorted.
    pub(crate) fn keys(&self) -> &[Key] {
        &self.keys
    }

    #[inline]
    pub(crate) fn contains(&self, key: Key) -> bool {
        !self.index.is_empty() && self.index.contains_key(&key)
    }

    /// Rounds completed here.
    pub(crate) fn rounds(&self) -> u64 {
        self.round - 1
    }

    /// The position of `key`, looked for first by galloping forward from position `from`:
    /// frames list their keys in increasing order, so walking a frame finds each key a few
    /// steps after the previous one, in memory order, without a hash probe (which is a cache
    /// miss per key on a table the size of the replicated set). Keys out of order fall back
    /// to the index.
    fn position(&self, key: Key, from: usize) -> Option<u32> {
        let keys = &self.keys;
        if keys.get(from).is_none_or(|&first| first > key) {
            return self.index.get(&key).copied();
        }
        // keys[lo] <= key; widen [lo, hi) until keys[hi] > key, doubling the step.
        let (mut lo, mut hi, mut step) = (from, from + 1, 1);
        while hi < keys.len() && keys[hi] <= key {
            lo = hi;
            hi = (hi + step).min(keys.len());
            step *= 2;
        }
        let at = lo + keys[lo..hi].binary_search(&key).ok()?;
        Some(at as u32)
    }

    /// The primary of position `pos` (this node is its hub).
    fn primary_mut(&mut self, pos: u32, len: usize) -> &mut [f32] {
        let at = self.primary_at[pos as usize];
        debug_assert_ne!(at, NOT_HUB);
        &mut self.primary[at..at + len]
    }

    fn mark_dirty(&mut self, pos: u32, since: Time, by: u64) {
        if !std::mem::replace(&mut self.is_dirty[pos as usize], true) {
            self.dirty.push(pos);
        }
        self.changed_by[pos as usize] |= by;
        self.dirty_since = Some(self.dirty_since.map_or(since, |t| t.min(since)));
    }
}

impl Node {
    /// The node that keeps `key`'s primary: spread over the members by a hash of the key.
    pub fn hub(&self, key: Key) -> NodeId {
        match self.replicas.index.get(&key) {
            Some(&pos) => self.replicas.hub_of[pos as usize],
            None => hub_of(&self.dir, key),
        }
    }

    /// Whether `key` is replicated on every node.
    pub fn is_replicated(&self, key: Key) -> bool {
        self.replicas.contains(key)
    }

    /// The replicated keys, sorted.
    pub fn replicated_keys(&self) -> &[Key] {
        self.replicas.keys()
    }

    /// Percentile `q` (0–100) of the age of remote updates when they landed here, in ns.
    pub fn replica_staleness_ns(&self, q: f64) -> Option<u64> {
        let h = &self.replicas.staleness;
        (!h.is_empty()).then(|| h.value_at_quantile(q / 100.0))
    }

    /// Sync rounds this node has completed.
    pub fn replica_rounds(&self) -> u64 {
        self.replicas.rounds()
    }

    /// The next replica timer, if anything is replicated: now while a round's scan is under way.
    pub(crate) fn replica_timeout(&self) -> Option<Time> {
        if self.replicas.keys.is_empty() {
            return None;
        }
        let r = &self.replicas;
        match r.scan {
            Some(_) => Some(self.clock),
            None if r.sync_after_updates > 0 => Some(r.next_round_at.min(r.next_poll_at)),
            // A period of `u64::MAX` means no background rounds: only `sync_replicas` flushes.
            None if r.next_round_at == Time(u64::MAX) => None,
            None => Some(r.next_round_at),
        }
    }

    /// Whether the work clock calls for a round (`work_clock.rs`).
    fn worked_enough(&self) -> bool {
        let r = &self.replicas;
        r.sync_after_updates > 0 && r.work.due(self.store.local_updates(), r.sync_after_updates)
    }

    /// Runs the replica timer: starts a round when due, and scans one chunk of it.
    pub(crate) fn replica_handle_timeout(&mut self, now: Time) {
        if self.replicas.keys.is_empty() {
            return;
        }
        if self.replicas.scan.is_none() {
            let worked = self.worked_enough();
            let r = &self.replicas;
            if now < r.next_round_at && !worked {
                if r.sync_after_updates > 0 {
                    self.replicas.next_poll_at = Time(now.0.saturating_add(WORK_POLL_NS));
                }
                return;
            }
            let min_norm = self.replicas.min_delta_norm;
            self.start_round(now, min_norm);
        }
        self.scan_chunk(SCAN_CHUNK);
    }

    fn start_round(&mut self, now: Time, min_norm: f32) {
        let local = self.store.local_updates();
        let r = &mut self.replicas;
        r.work.start_round(local);
        r.next_poll_at = Time(now.0.saturating_add(WORK_POLL_NS));
        r.scan = Some(Scan {
            cursor: 0,
            since: r.last_round_at,
            min_norm,
            out: BTreeMap::new(),
            grads: BTreeMap::new(),
        });
        r.last_round_at = now;
        r.next_round_at = Time(now.0.saturating_add(r.sync_every));
    }

    /// Takes the pending deltas of up to `max` replicated keys; ends the round after the last.
    fn scan_chunk(&mut self, max: usize) {
        let Some(mut scan) = self.replicas.scan.take() else {
            return;
        };
        let me = self.cfg.id;
        let round = self.replicas.round;
        let end = scan
            .cursor
            .saturating_add(max)
            .min(self.replicas.keys.len());
        let mut delta = std::mem::take(&mut self.replicas.scratch);
        for pos in scan.cursor..end {
            self.take_gradient(pos, scan.since, &mut scan.grads);
            let key = self.replicas.keys[pos];
            delta.clear();
            if !self.store.take_delta_above(key, &mut delta, scan.min_norm)
                || delta.iter().all(|&d| d == 0.0)
            {
                continue;
            }
            let hub = self.replicas.hub_of[pos];
            let pos = pos as u32;
            if hub == me {
                let primary = self.replicas.primary_mut(pos, delta.len());
                primary.iter_mut().zip(&delta).for_each(|(p, d)| *p += d);
                self.replicas.mark_dirty(pos, scan.since, contributor(me));
            } else {
                let out = scan.out.entry(hub).or_insert_with(|| Deltas {
                    round,
                    hub,
                    positions: Vec::new(),
                    starts: Vec::new(),
                    values: Vec::new(),
                });
                out.positions.push(pos);
                out.starts.push(out.values.len() as u32);
                out.values.extend_from_slice(&delta);
            }
        }
        self.replicas.scratch = delta;
        scan.cursor = end;
        if end < self.replicas.keys.len() {
            self.replicas.scan = Some(scan);
            return;
        }
        for (hub, deltas) in std::mem::take(&mut scan.out) {
            if self.lost.contains(&hub) {
                continue;
            }
            let keys: Vec<Key> = deltas
                .positions
                .iter()
                .map(|&p| self.replicas.keys[p as usize])
                .collect();
            add(&self.counters.replica_keys_sent, keys.len() as u64);
            let frame = replica_frame(
                Kind::ReplicaDeltas,
                me,
                round,
                scan.since.0,
                &keys,
                &deltas.values,
            );
            add(&self.counters.replica_bytes_sent, frame.wire_len() as u64);
            self.send(hub, frame);
            self.replicas.in_flight.push_back(deltas);
        }
        let grads = std::mem::take(&mut scan.grads);
        self.send_gradients(round, scan.since, grads);
        self.replicas.round += 1;
        add(&self.counters.replica_rounds, 1);
        self.broadcast_primaries();
    }

    /// Hub: sends the primaries changed since the last broadcast to every other node, and
    /// rebases this node's own replicas on them. A node gets only the keys that another node
    /// changed (its own deltas are in its replica already), and a frame at all only if it has
    /// such a key or this broadcast acknowledges deltas of its.
    fn broadcast_primaries(&mut self) {
        // During a flush the hub steps once, when every node's gradients are in
        // (`handle_replica_flush`): a `sync_replicas` is one step on everything before it.
        if !self.replicas.sync.flushed {
            self.step_primaries();
        }
        if self.replicas.dirty.is_empty() {
            return;
        }
        let mut positions = std::mem::take(&mut self.replicas.dirty);
        positions.sort_unstable();
        let since = self.replicas.dirty_since.take().unwrap_or(self.clock);
        let r = &mut self.replicas;
        let mut keys = Vec::with_capacity(positions.len());
        let mut changed_by = Vec::with_capacity(positions.len());
        let mut n_vals = 0;
        for &pos in &positions {
            let key = r.keys[pos as usize];
            r.is_dirty[pos as usize] = false;
            changed_by.push(std::mem::take(&mut r.changed_by[pos as usize]));
            let len = self.cfg.space.len(key);
            let at = r.primary_at[pos as usize];
            self.store.rebase_replica(key, &r.primary[at..at + len]);
            keys.push(key);
            n_vals += len;
        }
        // The frame of every peer that needs every key is one (clones share its body).
        let mut everything: Option<Frame> = None;
        for node in self.live_peers() {
            let bit = contributor(node);
            let needed = changed_by.iter().filter(|&&by| by & !bit != 0).count();
            let contributed = changed_by.iter().any(|&by| by & bit != 0);
            if needed == 0 && !contributed {
                continue;
            }
            let mut frame = if needed == keys.len() {
                everything
                    .get_or_insert_with(|| self.primaries_frame(since, &positions, &keys, n_vals))
                    .clone()
            } else {
                let n_vals = keys
                    .iter()
                    .zip(&changed_by)
                    .filter(|&(_, &by)| by & !bit != 0)
                    .map(|(&key, _)| self.cfg.space.len(key))
                    .sum();
                let (picked_positions, picked_keys): (Vec<u32>, Vec<Key>) = positions
                    .iter()
                    .zip(&keys)
                    .zip(&changed_by)
                    .filter(|&(_, &by)| by & !bit != 0)
                    .map(|((&pos, &key), _)| (pos, key))
                    .unzip();
                self.primaries_frame(since, &picked_positions, &picked_keys, n_vals)
            };
            frame.header.req = ReqId(self.replicas.applied.get(&node).copied().unwrap_or(0));
            add(&self.counters.replica_bytes_sent, frame.wire_len() as u64);
            self.send(node, frame);
        }
        positions.clear();
        self.replicas.dirty = positions;
    }

    /// A `ReplicaValues` frame of the primaries at `positions` (keys `keys`, `n_vals` values).
    fn primaries_frame(
        &self,
        since: Time,
        positions: &[u32],
        keys: &[Key],
        n_vals: usize,
    ) -> Frame {
        let r = &self.replicas;
        let space = &self.cfg.space;
        Frame::with_values(
            Kind::ReplicaValues,
            self.cfg.id,
            ReqId(0),
            since.0,
            keys,
            n_vals,
            |out| {
                for (&pos, &key) in positions.iter().zip(keys) {
                    let at = r.primary_at[pos as usize];
                    out.extend_from_slice(&r.primary[at..at + space.len(key)]);
                }
            },
        )
    }

    /// The positions of `keys` if every one is replicated with hub `hub` and the values fit
    /// their lengths; else warns and returns `None`.
    fn check_replica_frame(
        &mut self,
        from: NodeId,
        hub: NodeId,
        keys: &[Key],
        values: &[f32],
    ) -> Option<Vec<u32>> {
        let mut positions = Vec::with_capacity(keys.len());
        let mut total = 0usize;
        let mut next = 0;
        for &key in keys {
            let found = self.replicas.position(key, next);
            next = found.map_or(0, |pos| pos as usize + 1);
            match found {
                Some(pos) if self.replicas.hub_of[pos as usize] == hub => {
                    positions.push(pos);
                    total += self.cfg.space.len(key);
                }
                _ => {
                    self.warn(Warning::Replica {
                        from,
                        key,
                        what: "not a replicated key of that hub",
                    });
                    return None;
                }
            }
        }
        if total != values.len() {
            self.warn(Warning::Replica {
                from,
                key: keys.first().copied().unwrap_or(0),
                what: "values do not match the keys' lengths",
            });
            return None;
        }
        Some(positions)
    }

    /// Hub: a node's deltas of round `round`.
    pub(crate) fn handle_replica_deltas(
        &mut self,
        from: NodeId,
        round: u64,
        since: Time,
        keys: &[Key],
        values: &[f32],
    ) {
        let Some(positions) = self.check_replica_frame(from, self.cfg.id, keys, values) else {
            return;
        };
        if round & GRADIENT_ROUND != 0 {
            self.handle_replica_gradients(from, since, keys, &positions, values);
        } else {
            self.add_replica_deltas(from, round, since, keys, &positions, values);
        }
        let weight = self.replicas.remote_weight;
        (self.replicas.work).count_remote(weight.saturating_mul(keys.len() as u64));
    }

    /// Hub: adds a node's deltas of round `round` into the primaries.
    fn add_replica_deltas(
        &mut self,
        from: NodeId,
        round: u64,
        since: Time,
        keys: &[Key],
        positions: &[u32],
        values: &[f32],
    ) {
        let mut at = 0;
        for (&key, &pos) in keys.iter().zip(positions) {
            let len = self.cfg.space.len(key);
            let primary = self.replicas.primary_mut(pos, len);
            primary
                .iter_mut()
                .zip(&values[at..at + len])
                .for_each(|(p, d)| *p += d);
            self.replicas.mark_dirty(pos, since, contributor(from));
            at += len;
        }
        let applied = self.replicas.applied.entry(from).or_insert(0);
        *applied = (*applied).max(round);
    }

    /// A hub's primaries, including this node's deltas up to round `ack`.
    pub(crate) fn handle_replica_values(
        &mut self,
        now: Time,
        from: NodeId,
        ack: u64,
        since: Time,
        keys: &[Key],
        values: &[f32],
    ) {
        let Some(positions) = self.check_replica_frame(from, from, keys, values) else {
            return;
        };
        let r = &mut self.replicas;
        r.in_flight.retain(|d| d.hub != from || d.round > ack);
        let in_flight: Vec<&Deltas> = r.in_flight.iter().filter(|d| d.hub == from).collect();
        let mut extra: Vec<&[f32]> = Vec::with_capacity(in_flight.len());
        let mut at = 0;
        for (&key, &pos) in keys.iter().zip(&positions) {
            let len = self.cfg.space.len(key);
            extra.clear();
            extra.extend(in_flight.iter().filter_map(|sent| sent.delta(pos)));
            self.store
                .rebase_replica_with(key, &values[at..at + len], &extra);
            at += len;
        }
        add(&self.counters.replica_keys_received, keys.len() as u64);
        if since.0 != NO_ORIGIN {
            // One sample per key: the age of the oldest update the frame may carry.
            let age = now.0.saturating_sub(since.0).max(1);
            let _ = self.replicas.staleness.record_n(age, keys.len() as u64);
        }
    }

    /// Serves a `set` of a replicated key at its hub: overwrites the primary and rebases this
    /// node's replica; the origin's replica gets the value before the set's answer.
    pub(crate) fn set_primary(&mut self, origin: NodeId, keys: &[Key], values: &[f32]) {
        let mut at = 0;
        let now = self.clock;
        for &key in keys {
            let len = self.cfg.space.len(key);
            let pos = self.replicas.index[&key];
            let value = &values[at..at + len];
            at += len;
            self.store.rebase_replica(key, value);
            self.replicas.primary_mut(pos, len).copy_from_slice(value);
            // A set reaches every node, its origin included (other deltas may be on top).
            self.replicas.mark_dirty(pos, now, EVERY_NODE);
        }
        if origin != self.cfg.id {
            let ack = self.replicas.applied.get(&origin).copied().unwrap_or(0);
            let me = self.cfg.id;
            let frame = replica_frame(Kind::ReplicaValues, me, ack, NO_ORIGIN, keys, values);
            self.send(origin, frame);
        }
    }
}

fn replica_frame(
    kind: Kind,
    from: NodeId,
    req: u64,
    time: u64,
    keys: &[Key],
    values: &[f32],
) -> Frame {
    Frame::with_values(kind, from, ReqId(req), time, keys, values.len(), |out| {
        out.extend_from_slice(values)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::Partitioning;

    #[test]
    fn positions_are_found_in_order_out_of_order_and_not_at_all() {
        let keys: Vec<Key> = (0..500).map(|i| i * 3 + 1).collect();
        let replication = Replication {
            keys: keys.iter().rev().copied().collect(),
            sync_every_ns: 1,
            min_delta_norm: 0.0,
            sync_after_updates: 0,
        };
        let dir = Directory::new(2000, 3, Partitioning::Range);
        let space = KeySpace::uniform(2000, 1).unwrap();
        let replicas = Replicas::new(Some(&replication), NodeId(0), &dir, &space);
        for from in [0, 1, 7, 250, 499, 500, 600] {
            for (pos, &key) in keys.iter().enumerate() {
                assert_eq!(
                    replicas.position(key, from),
                    Some(pos as u32),
                    "key {key} from {from}"
                );
                assert_eq!(
                    replicas.position(key + 1, from),
                    None,
                    "key {} from {from}",
                    key + 1
                );
            }
        }
        assert_eq!(replicas.position(0, 0), None);
        assert_eq!(replicas.position(5000, 3), None);
    }
}
