//! Stateful optimizers on replicated keys (see `replica.rs` and `store/replica_grad.rs`).
//!
//! Under a stateful optimizer (Adagrad, Adam, FTRL) the optimizer state of a replicated key
//! lives only in its hub's primary record (visible values, then hidden state). A
//! `push_gradients` of the key anywhere adds the gradient into that node's accumulator; the
//! replica's value does not change. Each sync round takes the accumulators along with the
//! deltas: a hub adds its own into its per-key *gradient sum*, other nodes send theirs to the
//! hub in a `ReplicaDeltas` frame whose round carries [`GRADIENT_ROUND`]. At the end of its
//! own round the hub steps each primary whose sum is non-empty **once**, with the sum, zeroes
//! the sum, and broadcasts the new value to every node, its contributors included (their
//! replicas do not hold their gradients). During a `sync_replicas` flush (or a checkpoint
//! cut's) the hub steps only once every node's flush marker is in, so the flush is one step
//! on everything pushed before it: with background rounds off, each `sync_replicas` is
//! exactly one step per key with the sum of the gradients pushed since the previous one.
//!
//! Invariants: every gradient lands in exactly one accumulator take, one frame, one sum and one
//! step (per-link FIFO, no node lost); a replica's value is always the primary as last
//! received plus its additive deltas in flight and pending, never a gradient; under SGD
//! (linear) none of this runs: a gradient is its step `−lr·g`, added like a push.

use crate::id::{Key, NodeId};
use crate::node::{Node, Time};
use crate::optim::Optimizer;
use crate::stats::add;
use crate::wire::Kind;

use super::{EVERY_NODE, NOT_HUB, Replicas, replica_frame};
use crate::keyspace::KeySpace;

/// Set in the round number of a `ReplicaDeltas` frame that carries accumulated gradients
/// instead of additive deltas (rounds never get near it).
pub(crate) const GRADIENT_ROUND: u64 = 1 << 63;

/// The gradient sums of the keys this node is the hub of (empty without a stateful optimizer).
#[derive(Debug, Default)]
pub(super) struct HubGrads {
    /// The optimizer that steps the primaries (`None`: not stateful, nothing here runs).
    pub(super) opt: Option<Optimizer>,
    /// Where each position's sum starts in `sums` (`NOT_HUB` elsewhere).
    sum_at: Vec<usize>,
    sums: Vec<f32>,
    /// Positions with a non-empty sum (each once), and the oldest origin among them.
    pending: Vec<u32>,
    is_pending: Vec<bool>,
    since: Option<Time>,
    /// When on: every step taken here, as (key, summed gradient), in order (tests replay it).
    pub(super) log: Option<Vec<(Key, Vec<f32>)>>,
}

impl HubGrads {
    /// Sums for the hub positions (`primary_at[pos] != NOT_HUB`) of keys of lengths `lens`.
    pub(super) fn new(opt: Option<Optimizer>, primary_at: &[usize], lens: &[usize]) -> Self {
        let Some(opt) = opt.filter(|o| !o.is_linear()) else {
            return Self::default();
        };
        let mut sum_at = vec![NOT_HUB; primary_at.len()];
        let mut total = 0;
        for (pos, &at) in primary_at.iter().enumerate() {
            if at != NOT_HUB {
                sum_at[pos] = total;
                total += lens[pos];
            }
        }
        Self {
            opt: Some(opt),
            sum_at,
            sums: vec![0.0; total],
            is_pending: vec![false; primary_at.len()],
            ..Self::default()
        }
    }

    /// Adds `g` into the sum of hub position `pos`.
    pub(super) fn add(&mut self, pos: u32, g: &[f32], since: Time) {
        let at = self.sum_at[pos as usize];
        debug_assert_ne!(at, NOT_HUB);
        self.sums[at..at + g.len()]
            .iter_mut()
            .zip(g)
            .for_each(|(s, g)| *s += g);
        if !std::mem::replace(&mut self.is_pending[pos as usize], true) {
            self.pending.push(pos);
        }
        self.since = Some(self.since.map_or(since, |t| t.min(since)));
    }
}

impl Replicas {
    /// The length of a primary of `key` here: its whole record under a stateful optimizer
    /// (the state lives only at the hub), else its visible length.
    fn primary_len(&self, space: &KeySpace, key: Key) -> usize {
        if self.grads.opt.is_some() {
            space.record_len(key)
        } else {
            space.len(key)
        }
    }

    /// The keys this node is the hub of, in key order, with their primaries (a checkpoint's
    /// copy of the replicated keys: the set is small, hot keys only): whole records, optimizer
    /// state included, under a stateful optimizer.
    pub(crate) fn hub_primaries(&self, space: &KeySpace) -> Vec<(Key, Vec<f32>)> {
        let mut out = Vec::new();
        for (pos, &key) in self.keys.iter().enumerate() {
            let at = self.primary_at[pos];
            if at != NOT_HUB {
                let len = self.primary_len(space, key);
                out.push((key, self.primary[at..at + len].to_vec()));
            }
        }
        out
    }

    /// Sets `key`'s primary from its checkpointed `record` (visible values, then hidden
    /// state) if this node is its hub (a restore); false if `key` is not replicated.
    pub(crate) fn restore_primary(&mut self, space: &KeySpace, key: Key, record: &[f32]) -> bool {
        let Some(&pos) = self.index.get(&key) else {
            return false;
        };
        if self.primary_at[pos as usize] != NOT_HUB {
            let len = self.primary_len(space, key).min(record.len());
            self.primary_mut(pos, len).copy_from_slice(&record[..len]);
        }
        true
    }
}

impl Replicas {
    /// The log of optimizer steps, when on (shared keys' owners log theirs here too).
    pub(crate) fn step_log(&mut self) -> Option<&mut Vec<(Key, Vec<f32>)>> {
        self.grads.log.as_mut()
    }
}

impl Node {
    /// Turns the log of the optimizer steps taken for replicas on (empty) or off: at this
    /// node as a static replicated key's hub, and as a shared key's owner (a member's
    /// gradient sum, `share/sync.rs`). For tests:
    /// the log grows with every step.
    #[doc(hidden)]
    pub fn log_replica_steps(&mut self, on: bool) {
        self.replicas.grads.log = on.then(Vec::new);
    }

    /// The optimizer steps taken at this hub since the log was turned on: (key, summed
    /// gradient), in order.
    #[doc(hidden)]
    pub fn replica_steps(&self) -> &[(Key, Vec<f32>)] {
        self.replicas.grads.log.as_deref().unwrap_or(&[])
    }

    /// Takes `key`'s (position `pos`) accumulated gradient into the round being built: into
    /// the hub's sum here, or `out` for another hub. `since`: the origin of the round.
    pub(super) fn take_gradient(
        &mut self,
        pos: usize,
        since: Time,
        out: &mut std::collections::BTreeMap<NodeId, (Vec<Key>, Vec<f32>)>,
    ) {
        if self.replicas.grads.opt.is_none() {
            return;
        }
        let key = self.replicas.keys[pos];
        let mut g = std::mem::take(&mut self.replicas.scratch);
        g.clear();
        if self.store.take_replica_gradient(key, &mut g) {
            let hub = self.replicas.hub_of[pos];
            if hub == self.cfg.id {
                self.replicas.grads.add(pos as u32, &g, since);
            } else {
                let (keys, values) = out.entry(hub).or_default();
                keys.push(key);
                values.extend_from_slice(&g);
            }
        }
        self.replicas.scratch = g;
    }

    /// Sends a round's gradients to their hubs, after its deltas (per-link FIFO keeps them in
    /// order; the hub acknowledges rounds through the delta frames only).
    pub(super) fn send_gradients(
        &mut self,
        round: u64,
        since: Time,
        out: std::collections::BTreeMap<NodeId, (Vec<Key>, Vec<f32>)>,
    ) {
        let me = self.cfg.id;
        for (hub, (keys, values)) in out {
            if self.lost.contains(&hub) {
                continue;
            }
            add(&self.counters.replica_keys_sent, keys.len() as u64);
            let frame = replica_frame(
                Kind::ReplicaDeltas,
                me,
                round | GRADIENT_ROUND,
                since.0,
                &keys,
                &values,
            );
            add(&self.counters.replica_bytes_sent, frame.wire_len() as u64);
            self.send(hub, frame);
        }
    }

    /// Hub: a node's accumulated gradients (`positions` checked against `keys` and `values`).
    pub(super) fn handle_replica_gradients(
        &mut self,
        from: NodeId,
        since: Time,
        keys: &[Key],
        positions: &[u32],
        values: &[f32],
    ) {
        if self.replicas.grads.opt.is_none() {
            return self.warn(crate::warning::Warning::Replica {
                from,
                key: keys.first().copied().unwrap_or(0),
                what: "gradients for a key space without a stateful optimizer",
            });
        }
        let mut at = 0;
        for (&key, &pos) in keys.iter().zip(positions) {
            let len = self.cfg.space.len(key);
            self.replicas.grads.add(pos, &values[at..at + len], since);
            at += len;
        }
    }

    /// Hub: steps every primary with a pending gradient sum once, with the sum, and marks it
    /// changed for every node. Runs before each broadcast of the primaries (outside a flush)
    /// and when a flush has every node's marker.
    pub(super) fn step_primaries(&mut self) {
        let Some(opt) = self.replicas.grads.opt else {
            return;
        };
        let mut pending = std::mem::take(&mut self.replicas.grads.pending);
        if pending.is_empty() {
            self.replicas.grads.pending = pending;
            return;
        }
        pending.sort_unstable();
        let since = self.replicas.grads.since.take().unwrap_or(self.clock);
        for &pos in &pending {
            let key = self.replicas.keys[pos as usize];
            let len = self.cfg.space.len(key);
            let record_len = self.cfg.space.record_len(key);
            let r = &mut self.replicas;
            r.grads.is_pending[pos as usize] = false;
            let sum_at = r.grads.sum_at[pos as usize];
            let at = r.primary_at[pos as usize];
            let g = &mut r.grads.sums[sum_at..sum_at + len];
            let (w, state) = r.primary[at..at + record_len].split_at_mut(len);
            opt.step(w, state, g);
            if let Some(log) = &mut r.grads.log {
                log.push((key, g.to_vec()));
            }
            g.fill(0.0);
            // Every node gets the new value: no replica holds its own gradients.
            r.mark_dirty(pos, since, EVERY_NODE);
        }
        pending.clear();
        self.replicas.grads.pending = pending;
    }
}
