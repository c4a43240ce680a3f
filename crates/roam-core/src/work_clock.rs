//! The *work clock* of background sync rounds (static replicas, `replica.rs`; keys shared by
//! intent, `share/sync.rs`): a round is due once this node's workers made enough key-updates
//! since the last round, or, as a hub or owner, the deltas it received stand for as many.
//! Either count alone, never their sum: a busy node's rounds follow its own work, and received
//! deltas only drive a node whose own workers are idle. Staleness in updates is what training
//! quality depends on; a clock in updates keeps it, and the sync's share of the CPU, the same
//! on fast and slow machines, where a period in wall time does not.
//!
//! Invariant: the counts only grow (saturating), so "since the last round" never underflows.

/// How often an idle round timer looks at a work clock.
pub(crate) const WORK_POLL_NS: u64 = 5_000_000;

/// The two counts at the last round's start, and the received deltas' count so far (the local
/// count is the store's, read by the caller).
#[derive(Debug, Default)]
pub(crate) struct WorkClock {
    at_round: (u64, u64),
    remote: u64,
}

impl WorkClock {
    /// Received deltas standing for `updates` key-updates.
    pub(crate) fn count_remote(&mut self, updates: u64) {
        self.remote = self.remote.saturating_add(updates);
    }

    /// Whether `count` updates were made since the last round's start, here (`local`: the
    /// store's count now) or by the deltas received.
    pub(crate) fn due(&self, local: u64, count: u64) -> bool {
        local.saturating_sub(self.at_round.0) >= count
            || self.remote.saturating_sub(self.at_round.1) >= count
    }

    /// A round starts (`local`: the store's count now).
    pub(crate) fn start_round(&mut self, local: u64) {
        self.at_round = (local, self.remote);
    }
}
