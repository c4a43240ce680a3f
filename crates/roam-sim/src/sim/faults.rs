//! Scripting and faults: giving workers their scripts, tampering with or injecting frames,
//! holding, healing and breaking links, crashing and freezing nodes.
//!
//! Invariants: every fault is recorded in the history (with its virtual time) and folded into
//! the trace and every node's input hash before it takes effect, so runs with faults replay from
//! their seed and the checkers know which ops a fault may have cut short.

use roam_core::NodeId;
use roam_core::wire::Frame;

use super::*;
use crate::history::Fault;
use crate::net::Payload;
use crate::worker::Op;

impl Sim {
    // ----- scripting -------------------------------------------------------------------------

    /// Appends `ops` to `worker`'s script; an idle worker starts on them at once.
    pub fn add_script(&mut self, worker: WorkerRef, ops: impl IntoIterator<Item = Op>) {
        let now = self.now;
        let w = &mut self.nodes[worker.node.index()].workers[worker.worker.index()];
        if w.script.is_empty() && w.blocked.is_none() {
            w.ready_at = w.ready_at.max(now);
        }
        w.script.extend(ops);
    }

    /// Installs a hook that may rewrite the bytes of every frame right before it is decoded by
    /// its receiver (to test the handling of corrupt or hostile peers).
    pub fn set_tamper(&mut self, tamper: impl FnMut(NodeId, NodeId, &mut Vec<u8>) + 'static) {
        self.tamper = Some(Box::new(tamper));
    }

    /// Removes the tamper hook.
    pub fn clear_tamper(&mut self) {
        self.tamper = None;
    }

    /// Queues `frame` on link `(from, to)` as if `from`'s node had sent it (it is not counted in
    /// `from`'s node counters). Dropped if the link is closed.
    pub fn inject(&mut self, from: NodeId, to: NodeId, frame: Frame) {
        let delay = self.delay();
        let idx = self.link_index(from, to);
        let link = &mut self.links[idx];
        if link.open && !self.nodes[to.index()].crashed {
            link.push(self.now, delay, Payload::Frame(frame));
        } else {
            link.stats.frames_dropped += 1;
        }
    }

    // ----- faults ----------------------------------------------------------------------------

    /// Holds both links between `a` and `b`: nothing on them is delivered (nor dropped) until
    /// [`Sim::heal`]. Frames sent meanwhile queue behind the held ones.
    pub fn partition(&mut self, a: NodeId, b: NodeId) {
        for idx in [self.link_index(a, b), self.link_index(b, a)] {
            self.links[idx].held = true;
        }
        self.fault(Fault::Partition(a, b));
    }

    /// Releases the links between `a` and `b`; held frames are delivered from now on, in order.
    pub fn heal(&mut self, a: NodeId, b: NodeId) {
        let now = self.now;
        for idx in [self.link_index(a, b), self.link_index(b, a)] {
            self.links[idx].release(now);
        }
        self.fault(Fault::Heal(a, b));
    }

    /// Breaks the connection between `a` and `b` (they stay up): everything in flight between
    /// them is lost, and each is told, after a link delay, that the other is gone.
    pub fn drop_link(&mut self, a: NodeId, b: NodeId) {
        assert_ne!(a, b, "a node's connection to itself cannot break");
        self.break_connection(a, b);
    }

    /// Stops node `id`: it processes nothing more and its workers stop where they are. Frames it
    /// already sent are still delivered, then every other node is told it is gone; frames in
    /// flight to it are lost.
    pub fn crash(&mut self, id: NodeId) {
        if self.nodes[id.index()].crashed {
            return;
        }
        self.nodes[id.index()].crashed = true;
        self.fault(Fault::Crash(id));
        self.end_connections(id);
    }

    /// Ends every connection of `id`: frames on their way to it are lost, and each live peer
    /// gets the end of its connection after what `id` sent before.
    fn end_connections(&mut self, id: NodeId) {
        for m in 0..self.cfg.nodes {
            let inbound = self.link_index(NodeId(m), id);
            self.links[inbound].purge();
            self.links[inbound].open = false;
            if m == id.0 {
                continue;
            }
            let outbound = self.link_index(id, NodeId(m));
            if self.links[outbound].open {
                self.links[outbound].open = false;
                if !self.nodes[m as usize].crashed {
                    let delay = self.delay();
                    self.links[outbound].push(self.now, delay, Payload::Close);
                }
            }
        }
    }

    /// Freezes node `id`: it stops running (no op, no timer, nothing it receives is handled)
    /// but, unlike [`Sim::crash`], no connection breaks, so its peers can only notice it by
    /// its silence (with [`SimConfig::liveness`](crate::SimConfig)).
    pub fn freeze(&mut self, id: NodeId) {
        if self.nodes[id.index()].crashed {
            return;
        }
        self.nodes[id.index()].crashed = true;
        self.fault(Fault::Crash(id));
        for m in 0..self.cfg.nodes {
            let inbound = self.link_index(NodeId(m), id);
            self.links[inbound].purge();
        }
    }

    /// Node `id` (one of [`SimConfig::joiners`](crate::SimConfig)) asks the coordinator to
    /// admit it.
    pub fn start_join(&mut self, id: NodeId) {
        if self.nodes[id.index()].crashed {
            return;
        }
        let input = &mut self.inputs[id.index()];
        input.bytes(&[TAG_JOIN]);
        self.trace
            .event(self.now.0, TAG_JOIN, &[u64::from(id.0)], &[]);
        self.nodes[id.index()].node.start_join(self.now);
        self.drain(id);
    }

    /// A drained node exits, as its shell would: what it sent is still delivered, then its
    /// connections end (no fault: it left the cluster). Every member acknowledged its leave,
    /// so nothing is on its way to it any more.
    pub(super) fn exit(&mut self, id: NodeId) {
        self.nodes[id.index()].crashed = true;
        self.nodes[id.index()].exited = true;
        for m in 0..self.cfg.nodes {
            let inbound = self.link_index(NodeId(m), id);
            if self.links[inbound].len() > 0 && m != id.0 {
                let message = format!("transport: frames still on their way to {id}, which exited");
                self.transport_warning(NodeId(m), message);
            }
        }
        self.end_connections(id);
    }
}
