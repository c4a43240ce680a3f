//! The flush after a loss: how a node tells its pushes in flight that needed the lost peer from
//! those that did not, without guessing.
//!
//! A push in flight when its node learns that L is lost may be anywhere: answered and applied
//! by a survivor (the answer on its way), on a link or queued between survivors, or gone with L
//! (sent to L, or forwarded by it too late). Pushes are not idempotent, so it can neither be
//! re-issued nor failed on suspicion. Instead the survivors flush their links in rounds:
//! - round 0 is the loss notice (`PeerLost`) every survivor sends every other member when it
//!   learns of the loss (`dispatch.rs`);
//! - a node sends round r + 1 to every other member once it got round r from every survivor
//!   (`ROUNDS` rounds in all);
//! - a node that learnt of the loss refuses pushes forwarded by L from then on, naming L
//!   (`serve.rs`), so any push L forwarded is either refused or was taken before the notice
//!   (pulls are answered: their requester re-issued them and drops the second answer).
//!
//! Links are FIFO and a node handles a frame (answers, forwards or queues it) when it arrives.
//! A push fragment sent before its origin R learnt of the loss reaches its first survivor hop
//! X1 before R's notice, so X1 forwards it before its round 1; X2 gets it before X1's round 1,
//! so before it sends round 2; by induction the survivor that answers it after at most `ROUNDS`
//! hops does so before its round `ROUNDS` marker to R. So once R has round `ROUNDS` from every
//! survivor, every answer to its pushes from in-flight fragments of at most `ROUNDS` hops has
//! arrived, and every survivor has told R (with that marker) which of R's push positions it
//! holds queued on a key in transit (answered later: R keeps waiting for them). A position
//! still unanswered and held by nobody went through L and is gone: its push fails naming L,
//! never applied. Pulls do not need this: they are re-issued (`peer_loss.rs`).
//!
//! Invariants: a flush waits only for members that are not lost (a survivor lost during it is
//! dropped from it), rounds from each survivor in order, and at most a silence timeout
//! (`Liveness::silent_after`: a survivor may have ended its flush before this node joined);
//! late answers and refusals for the operations it failed are dropped silently (`retired`).
//! Not covered (failed conservatively, possibly applied): a fragment that needs more than
//! `ROUNDS` survivor hops after the loss (a key that keeps moving while the request chases it),
//! one held by a home move under way, or one whose flush timed out.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::OpError;
use crate::id::NodeId;
use crate::msg::encode;
use crate::node::{Node, Time};
use crate::relocate::Queued;
use crate::warning::Warning;

/// Marker rounds after the loss notice: a request's path requester → cached location → home →
/// owner is three hops, and one more covers an owner that just passed the key on.
pub(crate) const ROUNDS: u64 = 4;

/// Flushes under way and the operations they ended.
#[derive(Debug, Default)]
pub(crate) struct AfterLoss {
    /// By lost peer.
    flushes: BTreeMap<NodeId, Flush>,
    /// Operations completed after a re-issue or failed by a flush: answers still on their way
    /// for them are expected, and dropped without a warning. (Grows only with the operations
    /// in flight at each loss.)
    retired: BTreeSet<u64>,
}

#[derive(Debug)]
struct Flush {
    /// The survivors whose rounds this node waits for.
    awaited: BTreeSet<NodeId>,
    /// Rounds received from each survivor (the notice is the first).
    heard: BTreeMap<NodeId, u64>,
    /// Rounds this node sent (its notice is the first).
    sent: u64,
    /// This node's pushes that were in flight when it learnt of the loss.
    ops: Vec<u64>,
    /// Positions of those pushes that survivors hold queued (answered later).
    held: BTreeMap<u64, BTreeSet<u32>>,
    /// When the flush gives up waiting (`None`: no failure detection configured).
    deadline: Option<Time>,
}

impl AfterLoss {
    /// Whether answers for `op` are late ones of an operation a loss already ended.
    pub(crate) fn is_retired(&self, op: u64) -> bool {
        !self.retired.is_empty() && self.retired.contains(&op)
    }

    pub(crate) fn retire(&mut self, op: u64) {
        self.retired.insert(op);
    }
}

impl Node {
    /// Number of flushes after losses under way here (none once every survivor sent its
    /// rounds).
    pub fn loss_flushes(&self) -> usize {
        self.after_loss.flushes.len()
    }

    /// `peer` was lost: it is no longer waited for in any flush under way.
    pub(crate) fn loss_flush_forget(&mut self, peer: NodeId) {
        for flush in self.after_loss.flushes.values_mut() {
            flush.awaited.remove(&peer);
        }
    }

    /// Starts the flush after `peer`'s loss, whose notice (round 0) this node just sent;
    /// `ops` are its pushes in flight, resolved when the flush ends.
    pub(crate) fn start_loss_flush(&mut self, peer: NodeId, ops: Vec<u64>) {
        let awaited = self.live_peers().into_iter().collect();
        // A survivor's rounds may never come (one that finished its flush before this node
        // became a member, or whose notice this node dropped before its welcome): after a
        // silence timeout the flush ends with what it heard, failing conservatively what is
        // unresolved (those pushes may have been applied), so that nothing waits for ever.
        let deadline = self
            .cfg
            .liveness
            .map(|l| Time(self.clock.0.saturating_add(l.silent_after)));
        self.after_loss.flushes.insert(
            peer,
            Flush {
                awaited,
                heard: BTreeMap::new(),
                sent: 1,
                ops,
                held: BTreeMap::new(),
                deadline,
            },
        );
    }

    /// `from` sent round `round` of the flush after `peer`'s loss (round 0: its notice), with
    /// the positions of this node's pushes it holds queued (`ops[i]`, `positions[i]`).
    pub(crate) fn handle_loss_round(
        &mut self,
        from: NodeId,
        peer: NodeId,
        round: u64,
        ops: &[u64],
        positions: &[u32],
    ) {
        let Some(flush) = self.after_loss.flushes.get_mut(&peer) else {
            // A flush this node ended already, or never took part in (not a member then).
            return;
        };
        if !flush.awaited.contains(&from) {
            return;
        }
        let heard = flush.heard.entry(from).or_insert(0);
        // Rounds come in order on the FIFO link (the notice, round 0, may have been dropped
        // before this node's welcome): one that skips ahead, or a list of queued pushes before
        // the last round, is a peer's mistake and is ignored, never taken as the flush's end.
        let in_order = round == *heard || (*heard == 0 && round == 1);
        let well_formed = round <= ROUNDS && (ops.is_empty() || round == ROUNDS);
        if !in_order && *heard == 0 && round > 1 && well_formed {
            // This node joined while `from`'s flush ran: `from`'s earlier rounds went before
            // the welcome, so its rounds cannot vouch for this node's pushes. Not a mistake;
            // ignored, and the flush ends at its deadline, failing what is unresolved.
            return;
        }
        if !in_order || round > ROUNDS || (!ops.is_empty() && round != ROUNDS) {
            self.warn(Warning::Membership {
                from,
                node: peer,
                what: "loss flush round out of order, past the last, or with queued pushes early",
            });
            return;
        }
        *heard = round + 1;
        for (&op, &pos) in ops.iter().zip(positions) {
            flush.held.entry(op).or_default().insert(pos);
        }
        self.advance_loss_flushes();
    }

    /// The earliest deadline of a flush under way.
    pub(crate) fn loss_flush_timeout(&self) -> Option<Time> {
        self.after_loss
            .flushes
            .values()
            .filter_map(|f| f.deadline)
            .min()
    }

    /// Ends the flushes whose deadline passed with what they heard.
    pub(crate) fn loss_flush_handle_timeout(&mut self, now: Time) {
        let due: Vec<NodeId> = self
            .after_loss
            .flushes
            .iter()
            .filter(|(_, f)| f.deadline.is_some_and(|d| now >= d))
            .map(|(&peer, _)| peer)
            .collect();
        for peer in due {
            let flush = self.after_loss.flushes.remove(&peer).expect("listed");
            self.end_flush(peer, flush);
        }
    }

    /// Sends every round that is due and ends the flushes that are complete.
    pub(crate) fn advance_loss_flushes(&mut self) {
        let peers: Vec<NodeId> = self.after_loss.flushes.keys().copied().collect();
        for peer in peers {
            self.advance_flush(peer);
        }
    }

    fn advance_flush(&mut self, peer: NodeId) {
        let me = self.cfg.id;
        loop {
            let Some(flush) = self.after_loss.flushes.get_mut(&peer) else {
                return;
            };
            let heard = &flush.heard;
            let all_sent = |rounds: u64| {
                flush
                    .awaited
                    .iter()
                    .all(|n| heard.get(n).copied().unwrap_or(0) >= rounds)
            };
            if flush.sent <= ROUNDS {
                if !all_sent(flush.sent) {
                    return;
                }
                let round = flush.sent;
                flush.sent += 1;
                // To every other member, lost ones too (like the notice): one that lost only
                // this node still waits for its rounds.
                let dests: Vec<NodeId> = self
                    .dir
                    .members()
                    .iter()
                    .copied()
                    .filter(|&n| n != me && n != peer)
                    .collect();
                for dest in dests {
                    let (ops, positions) = if round == ROUNDS {
                        self.queued_pushes_of(dest)
                    } else {
                        (Vec::new(), Vec::new())
                    };
                    let frame = encode::loss_flush(me, peer, round, &ops, &positions);
                    self.send(dest, frame);
                }
                continue;
            }
            if !all_sent(ROUNDS + 1) {
                return;
            }
            let flush = self.after_loss.flushes.remove(&peer).expect("present");
            return self.end_flush(peer, flush);
        }
    }

    /// The pushes of `origin` queued here on keys in transit, as (operation, position) lists.
    fn queued_pushes_of(&self, origin: NodeId) -> (Vec<u64>, Vec<u32>) {
        let mut held: Vec<(u64, u32)> = self
            .transit
            .values()
            .flat_map(|transit| &transit.queue)
            .filter_map(|queued| match *queued {
                Queued::RemotePush {
                    origin: o,
                    req,
                    pos,
                    ..
                } if o == origin => Some((req.0, pos)),
                _ => None,
            })
            .collect();
        // Frames must come out in an order that depends only on the inputs.
        held.sort_unstable();
        held.into_iter().unzip()
    }

    /// The flush after `peer`'s loss is complete: every push position still unanswered and
    /// held by no survivor went through `peer` and is gone; its operation fails naming it.
    fn end_flush(&mut self, peer: NodeId, flush: Flush) {
        let mut ops = flush.ops;
        ops.sort_unstable();
        let mut held_by = flush.held;
        // A push that came back to this node and waits here on a key in transit is held too.
        let (own_ops, own_positions) = self.queued_pushes_of(self.cfg.id);
        for (op, pos) in own_ops.into_iter().zip(own_positions) {
            held_by.entry(op).or_default().insert(pos);
        }
        for op in ops {
            let Some(p) = self.pending.get(&op) else {
                continue;
            };
            let held = held_by.get(&op);
            let gone: Vec<u32> = p
                .answered
                .iter()
                .enumerate()
                .filter(|&(pos, &done)| !done && !held.is_some_and(|h| h.contains(&(pos as u32))))
                .map(|(pos, _)| pos as u32)
                .collect();
            if gone.is_empty() {
                continue;
            }
            for pos in gone {
                self.answer(op, pos);
            }
            self.fail(op, OpError::PeerGone { peer });
            self.after_loss.retire(op);
            self.settle(op);
        }
    }
}
