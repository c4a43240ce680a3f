//! The allocation trace: every change of where a key is held, as this node sees it arrive.
//!
//! Off unless the shell turns it on ([`crate::node::Node::trace_allocation`]). Each node
//! records what it receives — a key relocated to it, a replica granted to it (intent sharing),
//! a home bucket's keys moved to it by the balancer — with the sender and the node's clock, so
//! the union over all nodes is every change in the cluster without a message more. Recording
//! at the receiver keeps the hot path of the sender untouched and gives each event exactly
//! once. The buffer is bounded ([`TRACE_LIMIT`]): past it events are counted, not kept, so a
//! long run cannot exhaust memory through its trace.

use crate::id::{Key, NodeId};
use crate::node::Time;

/// Events kept per node (32 bytes each: 128 MiB at most).
pub const TRACE_LIMIT: usize = 4 << 20;

/// What changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The key moved here from `from` (relocation: `localize` or an intent).
    Moved,
    /// A replica of the key, owned by `from`, was granted here (intent sharing).
    Replicated,
    /// The key came here with its home bucket from `from` (load balancer, drain).
    HomeMoved,
}

impl Change {
    /// The change's name in trace files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Moved => "move",
            Self::Replicated => "replica",
            Self::HomeMoved => "home-move",
        }
    }
}

/// One change: `key` is now held (or, for a replica, also held) by `to`, before by `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The key.
    pub key: Key,
    /// The node that held it (or owns it, for a replica).
    pub from: NodeId,
    /// The node that holds it now (the recording node).
    pub to: NodeId,
    /// The recording node's clock when it arrived.
    pub at: Time,
    /// What changed.
    pub change: Change,
}

/// A node's recorded events.
#[derive(Debug, Default)]
pub struct Trace {
    events: Vec<TraceEvent>,
    dropped: u64,
}

impl Trace {
    /// Records one event (counts it only, past [`TRACE_LIMIT`]).
    pub(crate) fn record(&mut self, event: TraceEvent) {
        if self.events.len() < TRACE_LIMIT {
            self.events.push(event);
        } else {
            self.dropped += 1;
        }
    }

    /// The events recorded so far and how many were dropped at the limit; empties the trace.
    pub fn take(&mut self) -> (Vec<TraceEvent>, u64) {
        (
            std::mem::take(&mut self.events),
            std::mem::take(&mut self.dropped),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_past_the_limit_are_counted_not_kept() {
        let mut trace = Trace::default();
        let event = TraceEvent {
            key: 7,
            from: NodeId(1),
            to: NodeId(0),
            at: Time(5),
            change: Change::Moved,
        };
        trace.events.resize(TRACE_LIMIT - 1, event);
        trace.record(event);
        trace.record(event);
        let (events, dropped) = trace.take();
        assert_eq!((events.len(), dropped), (TRACE_LIMIT, 1));
        assert_eq!(trace.take(), (Vec::new(), 0));
    }
}
