//! The simulated network: one FIFO queue of in-flight entries per ordered link `(from, to)`.
//!
//! roam runs over one TCP connection per pair of nodes, so the model is a reliable, ordered byte
//! stream per direction that can break but never silently loses or reorders a frame:
//! - Each entry gets a random delay, but its ready time is never earlier than that of the entry
//!   before it on the same link, so delivery is FIFO per link while links interleave freely.
//! - A broken connection (crash, [`crate::Sim::drop_link`], a lossy send, a protocol violation)
//!   is modelled by a `Close` entry queued behind the frames that still arrive; delivering it
//!   reports the sender as lost to the receiver. A closed link accepts nothing more.
//! - A partition *holds* the queue: nothing on it is delivered, nothing is dropped, and a heal
//!   releases the held entries in order (TCP retransmits across a short partition).
//!
//! Invariant: entries leave a link in the order they entered it (checked on every pop, by
//! sequence number).

use std::collections::VecDeque;

use roam_core::Time;
use roam_core::wire::Frame;

/// What travels on a link.
#[derive(Debug)]
pub(crate) enum Payload {
    /// A protocol frame.
    Frame(Frame),
    /// End of the connection: the receiver learns that the sender is gone.
    Close,
}

/// One entry in flight.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// Position on the link, to check FIFO delivery.
    pub(crate) seq: u64,
    /// Earliest delivery time.
    pub(crate) ready: Time,
    pub(crate) payload: Payload,
}

/// Traffic figures of one link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames queued on the link (sent by a node or injected).
    pub frames_sent: u64,
    /// Frames delivered to the receiving node.
    pub frames_delivered: u64,
    /// Wire bytes delivered (after any tampering), headers included.
    pub bytes_delivered: u64,
    /// Frames lost because the connection broke or the link was already closed.
    pub frames_dropped: u64,
}

/// One direction of a connection.
#[derive(Debug)]
pub(crate) struct Link {
    queue: VecDeque<InFlight>,
    /// Held by a partition.
    pub(crate) held: bool,
    /// False once the connection broke: a `Close` may still be queued, nothing more enters.
    pub(crate) open: bool,
    next_seq: u64,
    last_popped: Option<u64>,
    pub(crate) stats: LinkStats,
}

impl Link {
    pub(crate) fn new() -> Self {
        Self {
            queue: VecDeque::new(),
            held: false,
            open: true,
            next_seq: 0,
            last_popped: None,
            stats: LinkStats::default(),
        }
    }

    /// Queues `payload` to be ready `delay` after `now`, but never before the entry ahead of it.
    pub(crate) fn push(&mut self, now: Time, delay: u64, payload: Payload) {
        let mut ready = Time(now.0 + delay);
        if let Some(last) = self.queue.back() {
            ready = ready.max(last.ready);
        }
        if matches!(payload, Payload::Frame(_)) {
            self.stats.frames_sent += 1;
        }
        self.queue.push_back(InFlight {
            seq: self.next_seq,
            ready,
            payload,
        });
        self.next_seq += 1;
    }

    /// Ready time of the head entry, unless the link is held or empty.
    pub(crate) fn head_ready(&self) -> Option<Time> {
        if self.held {
            None
        } else {
            self.queue.front().map(|e| e.ready)
        }
    }

    /// Removes the head entry.
    pub(crate) fn pop(&mut self) -> Option<InFlight> {
        let entry = self.queue.pop_front()?;
        assert!(
            self.last_popped.is_none_or(|last| last < entry.seq),
            "FIFO violated on a link: entry {} after {:?}",
            entry.seq,
            self.last_popped
        );
        self.last_popped = Some(entry.seq);
        Some(entry)
    }

    /// Drops every queued entry (the connection broke under them); returns the frames lost.
    pub(crate) fn purge(&mut self) -> u64 {
        let lost = self
            .queue
            .iter()
            .filter(|e| matches!(e.payload, Payload::Frame(_)))
            .count() as u64;
        self.queue.clear();
        self.stats.frames_dropped += lost;
        lost
    }

    /// Ends a partition: held entries become deliverable from `now` on, still in order.
    pub(crate) fn release(&mut self, now: Time) {
        self.held = false;
        for entry in &mut self.queue {
            entry.ready = entry.ready.max(now);
        }
    }

    /// Number of entries queued, held or not.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roam_core::wire::Kind;
    use roam_core::{NodeId, ReqId};

    fn frame(n: u64) -> Payload {
        Payload::Frame(Frame::control(Kind::Heartbeat, NodeId(0), ReqId(n), n))
    }

    #[test]
    fn a_short_delay_never_overtakes_an_earlier_long_one() {
        let mut link = Link::new();
        link.push(Time(0), 100, frame(0));
        link.push(Time(1), 5, frame(1));
        assert_eq!(link.head_ready(), Some(Time(100)));
        let first = link.pop().unwrap();
        assert_eq!(first.seq, 0);
        let second = link.pop().unwrap();
        assert_eq!(second.seq, 1);
        assert_eq!(second.ready, Time(100), "clamped to the entry ahead");
    }

    #[test]
    fn held_links_deliver_nothing_until_released_in_order() {
        let mut link = Link::new();
        link.push(Time(0), 10, frame(0));
        link.push(Time(0), 20, frame(1));
        link.held = true;
        assert_eq!(link.head_ready(), None);
        link.release(Time(500));
        assert_eq!(link.head_ready(), Some(Time(500)));
        assert_eq!(link.pop().unwrap().seq, 0);
        assert_eq!(link.pop().unwrap().seq, 1);
    }

    #[test]
    fn purge_counts_frames_but_not_closes() {
        let mut link = Link::new();
        link.push(Time(0), 10, frame(0));
        link.push(Time(0), 10, Payload::Close);
        assert_eq!(link.purge(), 1);
        assert_eq!(link.len(), 0);
        assert_eq!(link.stats.frames_dropped, 1);
    }
}
