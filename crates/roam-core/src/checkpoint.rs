//! The checkpoint cut: a collective over every worker of every node after which each node's
//! store holds, for every key it owns, exactly the sum of the pushes issued anywhere before
//! the call (and each static replicated key's hub holds it in its primary), so that the shell
//! can write what the node holds as one consistent snapshot.
//!
//! Protocol (C: the coordinator):
//! 1. A node whose live workers all arrived (each waited for its own operations first) is
//!    *frozen*: it starts no mover that no worker waits for (promotions of shared keys, home
//!    moves of the balancer at C; a home move a worker asked for still runs, as it waits
//!    for it), so no key can start a journey nobody waits for while the cut is taken. It
//!    then flushes: the pending deltas of intent-shared replicas go to their owners, then a
//!    full static-replica round and the `sync_replicas` flush markers (`replica/flush.rs`).
//!    Per-link FIFO puts the share deltas before the markers, so when every hub has answered
//!    `ReplicaFlushed`, every owner and every hub has applied every push issued before.
//! 2. The node is *quiet* once flushed, nothing is in transit to it, no home move is in flight
//!    or asked for at C and no bucket is still moving in here (every worker's request reached
//!    C before its node's flush markers, so none comes later). It then sends `CutQuiet` to C. Quiet is
//!    stable once frozen: keys only start moving to a node by its own action, which the
//!    freeze and the workers' waiting both exclude, and in-flight journeys only end.
//! 3. C, once every member is quiet, sends `CutRelease`; each node completes its waiters.
//!    Every key is then held by exactly one node (in transit nowhere), with its exact sum.
//! 4. The shell writes the node's records, then calls a barrier: nobody pushes before every
//!    node has written, and the barrier's release *thaws* the node (deferred moves go on).
//!
//! Invariant: a node is frozen from its workers' arrival until the next barrier release, and
//! reports quiet at most once per cut generation.

use std::collections::BTreeSet;

use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::msg::encode;
use crate::node::{Node, OpKind, Time};
use crate::warning::Warning;
use crate::wire::Kind;

/// The state of the checkpoint cut at one node.
#[derive(Debug, Default)]
pub(crate) struct Cut {
    generation: u64,
    waiters: Vec<u64>,
    /// No new movers start (from the workers' arrival until the next barrier release).
    pub(crate) frozen: bool,
    /// The flush of this generation was started (share deltas and replica markers sent).
    flushing: bool,
    /// Every hub answered this generation's flush.
    flushed: bool,
    /// `CutQuiet` sent (or counted, at the coordinator) for this generation.
    quiet_sent: bool,
    /// Coordinator only: members that reported quiet for `generation`.
    quiet: BTreeSet<NodeId>,
}

impl Node {
    /// Registers `worker`'s arrival at the next checkpoint cut (see the module docs). Completes
    /// once every key is held by exactly one node with every push issued before the call
    /// anywhere; the node stays frozen until the next barrier's release.
    pub fn issue_checkpoint_cut(&mut self, now: Time, worker: WorkerId) -> ReqId {
        self.tick(now);
        let op = self.new_op(worker, OpKind::Checkpoint, 1, Vec::new());
        if self.fail_collective_after_loss(op) {
            return ReqId(op);
        }
        self.cut.waiters.push(op);
        self.start_cut_if_all_arrived();
        ReqId(op)
    }

    /// Whether no mover that nobody waits for may start now (a checkpoint cut is under way).
    pub fn is_frozen(&self) -> bool {
        self.cut.frozen
    }

    /// Freezes and flushes once every live worker of this node waits in the cut.
    pub(crate) fn start_cut_if_all_arrived(&mut self) {
        let live = self.cfg.workers_per_node - self.retired_count();
        let waiting = self.cut.waiters.len() as u32;
        if waiting == 0 || waiting < live || self.cut.flushing {
            return;
        }
        self.cut.frozen = true;
        self.cut.flushing = true;
        // Shared replicas' deltas first: the flush markers below follow them on every link.
        self.send_share_deltas();
        self.flush_replicas();
    }

    /// Every hub answered the flush that the cut started.
    pub(crate) fn cut_flushed(&mut self) {
        if self.cut.flushing && !self.cut.flushed {
            self.cut.flushed = true;
            self.recheck_cut();
        }
    }

    /// Reports quiet to the coordinator once flushed and nothing moves towards this node.
    /// Called after every input while a cut is under way.
    pub(crate) fn recheck_cut(&mut self) {
        let c = &self.cut;
        if !c.flushed || c.quiet_sent || !self.transit.is_empty() || self.moving_in > 0 {
            return;
        }
        if self.cfg.id == self.dir.coordinator()
            && (self.moves_in_flight() || self.requested_moves_queued())
        {
            return;
        }
        self.cut.quiet_sent = true;
        let (me, generation) = (self.cfg.id, self.cut.generation);
        let coordinator = self.dir.coordinator();
        if me == coordinator {
            self.cut_quiet_at_coordinator(me, generation);
        } else {
            self.send(coordinator, encode::control(Kind::CutQuiet, me, generation));
        }
    }

    pub(crate) fn handle_cut_quiet(&mut self, from: NodeId, generation: u64) {
        if self.cfg.id != self.dir.coordinator() {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "checkpoint quiet at a node that is not the coordinator",
            });
        }
        self.cut_quiet_at_coordinator(from, generation);
    }

    fn cut_quiet_at_coordinator(&mut self, from: NodeId, generation: u64) {
        if generation != self.cut.generation || !self.cut.quiet.insert(from) {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "checkpoint quiet of another generation, or twice",
            });
        }
        let quiet = &self.cut.quiet;
        if !self.dir.members().iter().all(|m| quiet.contains(m)) {
            return;
        }
        self.cut.quiet.clear();
        let me = self.cfg.id;
        let others: Vec<NodeId> = self
            .dir
            .members()
            .iter()
            .copied()
            .filter(|&m| m != me)
            .collect();
        for peer in others {
            self.send(peer, encode::control(Kind::CutRelease, me, generation));
        }
        self.release_cut(me, generation);
    }

    pub(crate) fn handle_cut_release(&mut self, from: NodeId, generation: u64) {
        if from != self.dir.coordinator() {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "checkpoint release from a node that is not the coordinator",
            });
        }
        self.release_cut(from, generation);
    }

    fn release_cut(&mut self, from: NodeId, generation: u64) {
        if generation != self.cut.generation || !self.cut.quiet_sent {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "checkpoint release of another generation",
            });
        }
        let c = &mut self.cut;
        c.generation += 1;
        c.flushing = false;
        c.flushed = false;
        c.quiet_sent = false;
        // Still frozen: the shell writes now, and the next barrier's release thaws.
        for op in std::mem::take(&mut self.cut.waiters) {
            self.answer(op, 0);
            self.settle(op);
        }
    }

    /// A barrier was released: movers may start again (a home move queued meanwhile starts).
    pub(crate) fn thaw(&mut self, now: Time) {
        if self.cut.frozen && self.cut.waiters.is_empty() {
            self.cut.frozen = false;
            if self.cfg.id == self.dir.coordinator() {
                self.start_next_move(now);
            }
        }
    }

    /// The static replicated keys this node is the hub of, in key order, with their primaries:
    /// what a checkpoint writes for them (replicas elsewhere equal them after the cut).
    pub fn hub_primaries(&self) -> Vec<(Key, Vec<f32>)> {
        self.replicas.hub_primaries(&self.cfg.space)
    }

    /// Restore, before the node serves anything: `key`'s record (visible values, then hidden
    /// state) from a checkpoint. A static replicated key gets `record`'s visible values as its
    /// replica (value and synced base) and, at its hub, as its primary (the whole record, state
    /// included, under a stateful optimizer: `replica/grads.rs`); any other key becomes
    /// owned here (its home's default owner) with this record. Returns false, changing
    /// nothing, if `record` has the wrong length for `key` or `key` is outside the key space.
    pub fn restore_record(&mut self, key: Key, record: &[f32]) -> bool {
        let space = &self.cfg.space;
        if !space.contains(key) || record.len() != space.record_len(key) {
            return false;
        }
        let visible = &record[..space.len(key)];
        let mut old = Vec::new();
        if self.replicas.restore_primary(space, key, record) {
            self.store.remove_replica(key, &mut old);
            self.store.insert_replica_with(key, visible, visible);
            return true;
        }
        // Insert first: a node built by `Node::unfilled` holds none of its keys yet.
        self.store.insert(key, record) || self.store.overwrite(key, record)
    }

    /// Restore, after the last [`Node::restore_record`]: every home key of a dense key space
    /// that the checkpoint did not hold gets the space's initial record (the initializer's
    /// values, zero optimizer state), as in [`Node::new`] (so a node
    /// built by [`Node::unfilled`] ends with every home key held; a complete checkpoint holds
    /// every key, so this normally inserts nothing). Returns how many were created.
    pub fn finish_restore(&mut self) -> u64 {
        if self.cfg.space.is_sparse() {
            // Sparse keys (and named tables) are created on first use, not filled.
            return 0;
        }
        let me = self.cfg.id;
        let replicated_here = self
            .replicas
            .keys()
            .iter()
            .filter(|&&k| self.dir.home(k) == me)
            .count() as u64;
        let expected = self.dir.keys_of(me).count() as u64 - replicated_here;
        if self.store.count_local() == expected {
            // Every home key is held (it holds only home keys before it serves).
            return 0;
        }
        let init = *self.cfg.space.initializer();
        let (mut record, mut created) = (Vec::new(), 0);
        for key in self.dir.keys_of(me) {
            // `insert` changes nothing where the key is held already.
            if !self.replicas.contains(key) {
                record.clear();
                record.resize(self.cfg.space.record_len(key), 0.0);
                init.fill(key, &mut record[..self.cfg.space.len(key)]);
                created += u64::from(self.store.insert(key, &record));
            }
        }
        created
    }

    /// A peer is lost: no cut can complete any more (its keys are gone with it).
    pub(crate) fn fail_cut(&mut self) {
        // The waiters themselves fail with every other collective (`fail_pending_after_loss`).
        let c = &mut self.cut;
        c.waiters.clear();
        c.flushing = false;
        c.flushed = false;
        c.quiet_sent = false;
        c.quiet.clear();
        c.frozen = false;
    }
}

#[cfg(test)]
mod tests {
    use crate::directory::Partitioning;
    use crate::id::NodeId;
    use crate::keyspace::{KeySpace, ValueLengths};
    use crate::node::{Node, NodeConfig};

    /// A node built for a restore holds none of its keys until restored; `finish_restore`
    /// gives the keys the checkpoint lacked zeros, and leaves the restored ones alone.
    #[test]
    fn an_unfilled_node_holds_what_was_restored_and_zeros_for_the_rest() {
        let space = KeySpace::new(10, ValueLengths::Uniform(2)).unwrap();
        // Rank 1 of 2 under range partitioning homes keys 5..10.
        let cfg = NodeConfig::new(NodeId(1), 2, 1, space, Partitioning::Range);
        let mut node = Node::unfilled(cfg);
        let mut out = [0f32; 2];
        assert!(!node.store().pull_local(7, &mut out), "nothing held yet");
        assert!(node.restore_record(7, &[1.0, 2.0]));
        assert!(!node.restore_record(7, &[1.0]), "wrong length refused");
        assert_eq!(node.finish_restore(), 4, "keys 5, 6, 8, 9");
        assert_eq!(node.finish_restore(), 0, "idempotent");
        assert!(node.store().pull_local(7, &mut out));
        assert_eq!(out, [1.0, 2.0]);
        for key in [5, 6, 8, 9] {
            assert!(node.store().pull_local(key, &mut out));
            assert_eq!(out, [0.0, 0.0]);
        }
        assert!(!node.store().pull_local(2, &mut out), "not a home key here");
        assert_eq!(node.store().count_local(), 5);
    }
}
