//! The `sync_replicas` collective (see `replica.rs`): once every worker of a node has arrived,
//! the node runs a full round at once and sends a `ReplicaFlush` marker to every hub; a hub
//! that has every member's marker for a generation broadcasts its changed primaries and
//! answers `ReplicaFlushed`; a node completes the call when every hub has answered.
//!
//! Invariant: per-link FIFO puts a node's marker behind all its deltas, so a hub that has every
//! marker has applied every push issued before the call anywhere, and its broadcast (sent
//! before its answer) brings them into every replica before the call completes.

use std::collections::{BTreeMap, BTreeSet};

use crate::id::{NodeId, ReqId, WorkerId};
use crate::node::{Node, OpKind, Time};
use crate::warning::Warning;
use crate::wire::Kind;

/// The `sync_replicas` collective.
#[derive(Debug, Default)]
pub(super) struct SyncState {
    pub(super) generation: u64,
    pub(super) waiters: Vec<u64>,
    /// This node has flushed for `generation`.
    pub(super) flushed: bool,
    /// Hub: nodes whose flush marker for a generation arrived.
    pub(super) markers: BTreeMap<u64, BTreeSet<NodeId>>,
    /// Hubs that answered this node's flush of `generation`.
    pub(super) done_from: BTreeSet<NodeId>,
}

impl Node {
    /// Registers `worker`'s arrival at the next `sync_replicas`: once every worker of every
    /// node has arrived, every push issued before is in every replica, and all complete.
    pub fn issue_sync_replicas(&mut self, now: Time, worker: WorkerId) -> ReqId {
        self.tick(now);
        let op = self.new_op(worker, OpKind::SyncReplicas, 1, Vec::new());
        if self.fail_collective_after_loss(op) {
            return ReqId(op);
        }
        self.replicas.sync.waiters.push(op);
        self.flush_replicas_if_all_arrived();
        ReqId(op)
    }

    /// Flushes once every live worker waits in `sync_replicas` (also after a retirement).
    pub(crate) fn flush_replicas_if_all_arrived(&mut self) {
        let live = self.cfg.workers_per_node - self.retired_count();
        let waiting = self.replicas.sync.waiters.len() as u32;
        if waiting > 0 && waiting >= live {
            self.flush_replicas();
        }
    }

    /// Every worker arrived: send every pending delta now, then a flush marker to every hub.
    /// The checkpoint cut flushes the same way (its answers complete no `sync_replicas`).
    pub(crate) fn flush_replicas(&mut self) {
        if self.replicas.sync.flushed {
            return;
        }
        self.replicas.sync.flushed = true;
        // Finish any round under way, then run one more that covers every key at once.
        if self.replicas.scan.is_some() {
            self.scan_chunk(usize::MAX);
        }
        if !self.replicas.keys.is_empty() {
            let now = self.clock;
            self.start_round(now, 0.0);
            self.scan_chunk(usize::MAX);
        }
        let generation = self.replicas.sync.generation;
        self.control_to_members(Kind::ReplicaFlush, generation, Self::handle_replica_flush);
    }

    /// Sends the control word `word` of `kind` to every member, this node's own copy going
    /// straight to `here`.
    fn control_to_members(&mut self, kind: Kind, word: u64, here: fn(&mut Self, NodeId, u64)) {
        let me = self.cfg.id;
        for node in self.dir.members().to_vec() {
            if node == me {
                here(self, me, word);
            } else {
                self.send(node, crate::msg::encode::control(kind, me, word));
            }
        }
    }

    /// Hub: `from` flushed its deltas for `generation`; once all have, broadcast and answer.
    pub(crate) fn handle_replica_flush(&mut self, from: NodeId, generation: u64) {
        let members = self.dir.members().len();
        let arrived = self.replicas.sync.markers.entry(generation).or_default();
        arrived.insert(from);
        if arrived.len() < members {
            return;
        }
        self.replicas.sync.markers.remove(&generation);
        self.step_primaries();
        self.broadcast_primaries();
        self.control_to_members(
            Kind::ReplicaFlushed,
            generation,
            Self::handle_replica_flushed,
        );
    }

    /// Hub `from` applied every node's flush of `generation` and sent its primaries here.
    pub(crate) fn handle_replica_flushed(&mut self, from: NodeId, generation: u64) {
        let sync = &mut self.replicas.sync;
        if generation != sync.generation || !sync.flushed {
            return self.warn(Warning::Replica {
                from,
                key: generation,
                what: "sync answer for another generation",
            });
        }
        sync.done_from.insert(from);
        if sync.done_from.len() < self.dir.members().len() {
            return;
        }
        sync.done_from.clear();
        sync.flushed = false;
        sync.generation += 1;
        for op in std::mem::take(&mut sync.waiters) {
            self.answer(op, 0);
            self.settle(op);
        }
        self.cut_flushed();
    }
}
