//! Barriers across all worker threads of all nodes.
//!
//! Each node counts its workers' arrivals; when all have arrived it tells the coordinator (the
//! node the directory names), which releases every member once every member that hosts workers
//! has arrived (servers that joined later host none). Generations number the
//! barriers so that a late or duplicated message is recognised instead of miscounted.
//!
//! A worker whose handle is gone (its thread finished or failed) is *retired*: it counts as
//! arrived at every later barrier of its node, so its siblings are not left waiting for an
//! arrival that cannot come. A node whose workers are all retired arrives only through its
//! node-wide (shutdown) barrier, so a shutdown never completes against a training barrier.
//!
//! A barrier that has waited for [`crate::NodeConfig::barrier_warn_every`] warns (a timer,
//! [`Warning::BarrierWait`]) which of this node's workers have not arrived, and at the
//! coordinator which members have not, and again after every further interval until it is
//! released or fails. The interval counts from the first local arrival of the generation.

use std::collections::BTreeSet;

use crate::error::OpError;
use crate::id::{NodeId, ReqId, WorkerId};
use crate::msg::encode;
use crate::node::{Node, OpKind, Time};
use crate::warning::Warning;
use crate::wire::Kind;

/// Barrier bookkeeping: local arrivals, and at the coordinator, node arrivals.
#[derive(Debug, Default)]
pub(crate) struct Barriers {
    generation: u64,
    local_waiters: Vec<u64>,
    /// Arrivals counted towards `workers_per_node` (a node-wide barrier counts as all).
    local_arrivals: u32,
    /// Workers whose handles are gone; they count as arrived while a sibling still runs.
    retired: Vec<bool>,
    /// This node's arrival at `generation` is sent (or counted, at the coordinator).
    node_arrived: bool,
    /// Coordinator only: nodes that reached `generation`.
    nodes_arrived: BTreeSet<NodeId>,
    /// This node's workers that arrived at `generation` one by one.
    arrived: BTreeSet<WorkerId>,
    /// When the first of this node's workers arrived at `generation` (while one waits).
    waiting_since: Option<Time>,
    /// Wait warnings given for `generation`.
    warned: u64,
    /// A wait began, so the next timer deadline may be earlier than the shell last read.
    rearm: bool,
}

impl Node {
    /// Registers worker `worker`'s arrival at the next barrier across all workers of all nodes.
    pub fn issue_barrier(&mut self, now: Time, worker: WorkerId) -> ReqId {
        self.arrive_at_barrier(now, worker, 1)
    }

    /// Registers the whole node at the next barrier at once, on behalf of all its workers (used
    /// at shutdown, when no worker is inside a barrier). Completes for `worker`.
    pub fn issue_node_barrier(&mut self, now: Time, worker: WorkerId) -> ReqId {
        self.arrive_at_barrier(now, worker, self.cfg.workers_per_node)
    }

    fn arrive_at_barrier(&mut self, now: Time, worker: WorkerId, weight: u32) -> ReqId {
        self.tick(now);
        let op = self.new_op(worker, OpKind::Barrier, 1, Vec::new());
        if self.fail_collective_after_loss(op) {
            return ReqId(op);
        }
        let b = &mut self.barriers;
        if b.local_waiters.is_empty() {
            b.waiting_since = Some(now);
            b.warned = 0;
            b.rearm = self.cfg.barrier_warn_every.is_some();
        }
        if weight == 1 {
            b.arrived.insert(worker);
        }
        b.local_waiters.push(op);
        b.local_arrivals += weight;
        self.arrive_if_complete();
        ReqId(op)
    }

    /// Fails the collective `op` at once if a peer was lost (it could never complete): then
    /// true, and `op` has completed.
    pub(crate) fn fail_collective_after_loss(&mut self, op: u64) -> bool {
        let Some(peer) = self.first_lost() else {
            return false;
        };
        self.answer(op, 0);
        self.fail(op, OpError::PeerGone { peer });
        self.settle(op);
        true
    }

    /// Retires `worker`, whose handle is gone: from now on it counts as arrived at this node's
    /// barriers (see the module docs). Retiring twice, or an unknown worker, changes nothing.
    pub fn retire_worker(&mut self, _now: Time, worker: WorkerId) {
        let workers = self.cfg.workers_per_node as usize;
        let retired = &mut self.barriers.retired;
        retired.resize(workers, false);
        match retired.get_mut(worker.index()) {
            Some(flag) if !*flag => *flag = true,
            _ => return self.warn(Warning::Worker { worker }),
        }
        self.arrive_if_complete();
        self.flush_replicas_if_all_arrived();
        self.start_cut_if_all_arrived();
    }

    /// Whether `worker` was retired.
    pub(crate) fn is_retired(&self, worker: WorkerId) -> bool {
        self.barriers
            .retired
            .get(worker.index())
            .copied()
            .unwrap_or(false)
    }

    /// Workers retired so far.
    pub(crate) fn retired_count(&self) -> u32 {
        self.barriers.retired.iter().filter(|&&r| r).count() as u32
    }

    /// Sends this node's arrival once every live worker (or the node as a whole) has arrived.
    fn arrive_if_complete(&mut self) {
        let (b, workers) = (&self.barriers, self.cfg.workers_per_node);
        let retired = b.retired.iter().filter(|&&r| r).count() as u32;
        // Only a waiter makes a barrier: a node of retired workers alone never arrives.
        if b.node_arrived || b.local_waiters.is_empty() || b.local_arrivals + retired < workers {
            return;
        }
        self.barriers.node_arrived = true;
        let generation = self.barriers.generation;
        let coordinator = self.dir.coordinator();
        if self.cfg.id == coordinator {
            let id = self.cfg.id;
            self.coordinator_arrival(id, generation);
        } else {
            let frame = encode::control(Kind::Barrier, self.cfg.id, generation);
            self.send(coordinator, frame);
        }
    }

    pub(crate) fn handle_barrier_arrival(&mut self, from: NodeId, generation: u64) {
        if self.cfg.id != self.dir.coordinator() {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "arrival at a node that is not the coordinator",
            });
        }
        self.coordinator_arrival(from, generation);
    }

    fn coordinator_arrival(&mut self, from: NodeId, generation: u64) {
        if generation != self.barriers.generation {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "arrival for another generation",
            });
        }
        if !self.barriers.nodes_arrived.insert(from) {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "second arrival of the same node",
            });
        }
        self.recheck_barrier();
    }

    /// At the coordinator: releases the barrier once every member that hosts workers has
    /// arrived (also after a member left, which may have been the last one missing).
    pub(crate) fn recheck_barrier(&mut self) {
        let arrived = &self.barriers.nodes_arrived;
        if arrived.is_empty() || !self.dir.worker_members().all(|m| arrived.contains(&m)) {
            return;
        }
        self.barriers.nodes_arrived.clear();
        let me = self.cfg.id;
        let generation = self.barriers.generation;
        let others: Vec<NodeId> = self.dir.worker_members().filter(|&m| m != me).collect();
        for peer in others {
            self.send(peer, encode::control(Kind::BarrierRelease, me, generation));
        }
        self.release_barrier(me, generation);
    }

    pub(crate) fn handle_barrier_release(&mut self, from: NodeId, generation: u64) {
        if from != self.dir.coordinator() {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "release from a node that is not the coordinator",
            });
        }
        self.release_barrier(from, generation);
    }

    fn release_barrier(&mut self, from: NodeId, generation: u64) {
        if generation != self.barriers.generation {
            return self.warn(Warning::Barrier {
                from,
                generation,
                what: "release of another generation",
            });
        }
        self.barriers.generation += 1;
        self.barriers.local_arrivals = 0;
        self.barriers.node_arrived = false;
        self.barriers.arrived.clear();
        self.barriers.waiting_since = None;
        for op in std::mem::take(&mut self.barriers.local_waiters) {
            self.answer(op, 0);
            self.settle(op);
        }
        let now = self.clock;
        self.thaw(now);
    }

    /// A peer is lost: no barrier can complete any more.
    pub(crate) fn fail_barriers(&mut self, peer: NodeId) {
        self.barriers.local_arrivals = 0;
        self.barriers.node_arrived = false;
        self.barriers.arrived.clear();
        self.barriers.waiting_since = None;
        for op in std::mem::take(&mut self.barriers.local_waiters) {
            self.answer(op, 0);
            self.fail(op, OpError::PeerGone { peer });
            self.settle(op);
        }
    }
}

impl Node {
    /// Whether the next timer deadline ([`Node::poll_timeout`]) may have moved earlier since
    /// the last call: a barrier began to wait, or intent sharing began (its sync rounds). A
    /// shell that sleeps until the deadline it read reads it again when this is true. Clears
    /// the flag.
    pub fn take_timer_rearm(&mut self) -> bool {
        std::mem::take(&mut self.barriers.rearm) | std::mem::take(&mut self.shares.rearm)
    }

    /// When the next barrier wait warning is due, if a barrier waits and warnings are on.
    pub(crate) fn barrier_wait_timeout(&self) -> Option<Time> {
        let every = self.cfg.barrier_warn_every?;
        let since = self.barriers.waiting_since?;
        let k = self.barriers.warned.saturating_add(1);
        Some(Time(since.0.saturating_add(every.saturating_mul(k))))
    }

    /// Warns (once per interval passed) which workers and members the barrier still waits for.
    pub(crate) fn barrier_wait_handle_timeout(&mut self, now: Time) {
        let (Some(every), Some(since)) = (self.cfg.barrier_warn_every, self.barriers.waiting_since)
        else {
            return;
        };
        let passed = now.0.saturating_sub(since.0) / every.max(1);
        if passed <= self.barriers.warned {
            return;
        }
        self.barriers.warned = passed;
        let b = &self.barriers;
        let me = self.cfg.id;
        let workers: Vec<(NodeId, WorkerId)> = if b.node_arrived {
            Vec::new()
        } else {
            (0..self.cfg.workers_per_node)
                .map(WorkerId)
                .filter(|w| !b.arrived.contains(w) && !self.is_retired(*w))
                .map(|w| (me, w))
                .collect()
        };
        let nodes: Vec<NodeId> = if b.node_arrived && me == self.dir.coordinator() {
            self.dir
                .worker_members()
                .filter(|m| !b.nodes_arrived.contains(m))
                .collect()
        } else {
            Vec::new()
        };
        if workers.is_empty() && nodes.is_empty() {
            // A member that arrived waits for the coordinator, which names who is missing.
            return;
        }
        let generation = b.generation;
        self.warn(Warning::BarrierWait {
            generation,
            waited_ns: passed * every,
            workers,
            nodes,
        });
    }
}
