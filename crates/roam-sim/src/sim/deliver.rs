//! The network side of the shell: putting frames on links, delivering them (decoding, tampering,
//! counting), breaking connections, and draining a node's outputs after every input.
//!
//! Invariants: after every input to a node the shell protocol is followed exactly — transmits,
//! then completions (ordered by worker and request), then warnings; a frame that does not decode
//! breaks its connection, as a TCP shell would close it.

use rand::Rng;
use roam_core::NodeId;
use roam_core::stats::add;
use roam_core::wire::{self, Frame, Kind};

use super::*;
use crate::history::{Fault, Stamp};
use crate::net::Payload;

impl Sim {
    // ----- network ---------------------------------------------------------------------------

    pub(super) fn link_index(&self, from: NodeId, to: NodeId) -> usize {
        let n = self.cfg.nodes as usize;
        assert!(
            from.index() < n && to.index() < n,
            "no link {from} -> {to} in a {n}-node cluster"
        );
        from.index() * n + to.index()
    }

    pub(super) fn delay(&mut self) -> u64 {
        draw(&mut self.rng, self.cfg.min_delay, self.cfg.max_delay)
    }

    pub(super) fn stamp(&mut self) -> Stamp {
        self.seq += 1;
        Stamp {
            time: self.now,
            seq: self.seq,
        }
    }

    pub(super) fn fault(&mut self, fault: Fault) {
        let at = self.stamp();
        let words: Vec<u64> = match &fault {
            Fault::Crash(a) => vec![0, u64::from(a.0)],
            Fault::LinkBroken(a, b) => vec![1, u64::from(a.0), u64::from(b.0)],
            Fault::Partition(a, b) => vec![2, u64::from(a.0), u64::from(b.0)],
            Fault::Heal(a, b) => vec![3, u64::from(a.0), u64::from(b.0)],
            Fault::ProtocolViolation { at, from, .. } => {
                vec![4, u64::from(at.0), u64::from(from.0)]
            }
            Fault::PeerLost { at, peer, via } => vec![
                5,
                u64::from(at.0),
                u64::from(peer.0),
                via.map_or(u64::MAX, |v| u64::from(v.0)),
            ],
        };
        self.trace.event(self.now.0, TAG_FAULT, &words, &[]);
        for input in &mut self.inputs {
            input.bytes(&[TAG_FAULT]);
            words.iter().for_each(|&w| input.u64(w));
        }
        self.history.fault(at, fault);
    }

    /// Breaks the connection between `a` and `b`: purges both directions and queues a `Close`
    /// towards each live end whose direction was still open.
    pub(super) fn break_connection(&mut self, a: NodeId, b: NodeId) {
        let mut broke = false;
        for (x, y) in [(a, b), (b, a)] {
            let idx = self.link_index(x, y);
            if !self.links[idx].open {
                continue;
            }
            broke = true;
            self.links[idx].purge();
            self.links[idx].open = false;
            if !self.nodes[y.index()].crashed {
                let delay = self.delay();
                self.links[idx].push(self.now, delay, Payload::Close);
            }
        }
        if broke {
            self.fault(Fault::LinkBroken(a, b));
        }
    }

    /// Records a problem of the simulated transport itself (no core warning) at `node`.
    pub(super) fn transport_warning(&mut self, node: NodeId, message: String) {
        self.warnings.push(Warning {
            at: self.now,
            node,
            message,
            core: None,
        });
    }

    /// Puts a frame produced by `from`'s node on its link.
    pub(super) fn send(&mut self, from: NodeId, to: NodeId, frame: Frame) {
        let counters = self.nodes[from.index()].node.counters().clone();
        add(&counters.messages_sent, 1);
        add(&counters.bytes_sent, frame.wire_len() as u64);
        if to.0 >= self.cfg.nodes {
            let message = format!(
                "transport: frame {:?} to unknown {to} dropped",
                frame.header.kind
            );
            self.transport_warning(from, message);
            return;
        }
        let idx = self.link_index(from, to);
        if !self.links[idx].open || self.nodes[to.index()].crashed {
            self.links[idx].stats.frames_dropped += 1;
            if self.nodes[to.index()].exited && from != to {
                // A drained node exits only once nothing more can come to it: a frame that
                // does is a protocol error, not a lost connection.
                let message = format!(
                    "transport: frame {:?} to {to}, which exited, dropped",
                    frame.header.kind
                );
                self.transport_warning(from, message);
            }
            return;
        }
        if from != to
            && self.cfg.drop_probability > 0.0
            && self.rng.random_bool(self.cfg.drop_probability)
        {
            // TCP does not lose single frames: a loss is a broken connection.
            self.links[idx].stats.frames_sent += 1;
            self.break_connection(from, to);
            self.links[idx].stats.frames_dropped += 1;
            return;
        }
        let slow: u64 = self
            .cfg
            .slow_nodes
            .iter()
            .filter(|(node, _)| *node == from && self.now.0 < self.cfg.slow_until)
            .map(|&(_, extra)| extra)
            .sum();
        let delay = self.delay().saturating_add(slow);
        self.links[idx].push(self.now, delay, Payload::Frame(frame));
    }

    pub(super) fn deliver(&mut self, idx: usize) {
        let n = self.cfg.nodes as usize;
        let (from, to) = (NodeId((idx / n) as u32), NodeId((idx % n) as u32));
        let entry = self.links[idx]
            .pop()
            .expect("the event was chosen from a non-empty link");
        if self.nodes[to.index()].crashed {
            return;
        }
        let frame = match entry.payload {
            Payload::Close => {
                self.trace.event(
                    self.now.0,
                    TAG_CLOSE,
                    &[u64::from(from.0), u64::from(to.0)],
                    &[],
                );
                self.inputs[to.index()].bytes(&[TAG_CLOSE]);
                self.inputs[to.index()].u64(u64::from(from.0));
                let before = self.lost_by(to);
                self.nodes[to.index()].node.handle_peer_lost(self.now, from);
                self.note_losses(to, &before, None);
                self.drain(to);
                return;
            }
            Payload::Frame(frame) => frame,
        };
        let mut bytes = frame.to_bytes();
        if let Some(tamper) = &mut self.tamper {
            tamper(from, to, &mut bytes);
        }
        let stats = &mut self.links[idx].stats;
        stats.frames_delivered += 1;
        stats.bytes_delivered += bytes.len() as u64;
        let counters = self.nodes[to.index()].node.counters().clone();
        add(&counters.messages_received, 1);
        add(&counters.bytes_received, bytes.len() as u64);
        self.trace.event(
            self.now.0,
            TAG_FRAME,
            &[u64::from(from.0), u64::from(to.0)],
            &bytes,
        );
        let reason = match wire::decode(&bytes, &self.cfg.limits) {
            Ok((frame, used)) if used == bytes.len() => {
                let input = &mut self.inputs[to.index()];
                input.bytes(&[TAG_FRAME]);
                input.u64(u64::from(from.0));
                input.bytes(&bytes);
                let before = self.lost_by(to);
                let serves = matches!(frame.header.kind, Kind::Pull | Kind::Push);
                let served = self.served_keys(to);
                self.nodes[to.index()]
                    .node
                    .handle_frame(self.now, from, frame);
                if serves {
                    self.note_service(to, self.served_keys(to) - served);
                }
                self.note_losses(to, &before, Some(from));
                self.drain(to);
                return;
            }
            Ok((_, used)) => format!("{} trailing bytes after a frame", bytes.len() - used),
            Err(err) => err.to_string(),
        };
        // The receiving shell would close the connection on bytes it cannot parse.
        let message = format!("transport: undecodable bytes from {from}: {reason}");
        self.transport_warning(to, message);
        self.fault(Fault::ProtocolViolation {
            at: to,
            from,
            reason,
        });
        if from != to {
            self.break_connection(from, to);
        }
    }

    pub(super) fn lost_by(&self, id: NodeId) -> Vec<bool> {
        (0..self.cfg.nodes)
            .map(|p| self.nodes[id.index()].node.is_lost(NodeId(p)))
            .collect()
    }

    /// Records, before the node's outputs are drained, every peer that `id` started treating as
    /// lost during its last input.
    pub(super) fn note_losses(&mut self, id: NodeId, before: &[bool], via: Option<NodeId>) {
        for (p, &was) in before.iter().enumerate() {
            let peer = NodeId(p as u32);
            if !was && self.nodes[id.index()].node.is_lost(peer) {
                self.fault(Fault::PeerLost { at: id, peer, via });
            }
        }
    }

    /// The shell protocol after every input to a node: transmits, then completions, then
    /// warnings.
    pub(super) fn drain(&mut self, id: NodeId) {
        while let Some((to, frame)) = self.nodes[id.index()].node.poll_transmit() {
            self.send(id, to, frame);
        }
        let mut completions = Vec::new();
        while let Some(c) = self.nodes[id.index()].node.poll_completion() {
            completions.push(c);
        }
        // The order of completions drained together is not part of the core's contract.
        completions.sort_by_key(|c| (c.worker, c.req));
        for c in completions {
            self.complete(id, c);
        }
        while let Some(warning) = self.nodes[id.index()].node.poll_warning() {
            self.warnings.push(Warning {
                at: self.now,
                node: id,
                message: warning.to_string(),
                core: Some(warning),
            });
        }
        let mut drained = false;
        while let Some(event) = self.nodes[id.index()].node.poll_membership() {
            drained |= event == roam_core::MembershipEvent::Drained;
            self.membership.push((self.now, id, event));
        }
        if drained {
            self.exit(id);
        }
    }

    /// Keys `node` served so far.
    fn served_keys(&self, node: NodeId) -> u64 {
        let counters = self.nodes[node.index()].node.counters();
        counters
            .served_keys
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Adds the virtual service time of `keys` served by `node` to its counters, as the TCP
    /// shell adds measured time ([`SimConfig::service_ns_per_key`]).
    fn note_service(&self, node: NodeId, keys: u64) {
        let per_key = self.cfg.service_ns_per_key;
        if per_key == 0 || keys == 0 {
            return;
        }
        let factor: u64 = (self.cfg.slow_service.iter())
            .filter(|(n, _)| *n == node && self.now.0 < self.cfg.slow_until)
            .map(|&(_, f)| f)
            .product();
        let counters = self.nodes[node.index()].node.counters();
        add(&counters.service_keys, keys);
        add(&counters.service_busy_ns, keys * per_key * factor);
    }
}
