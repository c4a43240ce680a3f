//! Latency of the operations that needed messages, by operation and path, as fixed-bucket
//! histograms that the shell exports (Prometheus, `roam::metrics`).
//!
//! Only operations that went through the protocol are recorded: a pull or push served entirely
//! from the local store never reaches the core, so the worker hot path pays nothing. An
//! operation is recorded once, when it settles, from its issue time to the input that completed
//! it (the core's clock, so the figures are as deterministic as the inputs' times). Its path is
//! `Owner` when every answer came from a node it was sent to, `Forwarded` when at least one
//! answer came from elsewhere (a node that a stale directory or location cache sent it on to).
//!
//! Invariants: bucket `i` counts latencies `<= BOUNDS_NS[i]` and `> BOUNDS_NS[i - 1]`; the last
//! bucket (`+Inf`) counts the rest; `count` is the sum over buckets.

/// Upper bounds of the histogram buckets, ns (10 µs to 1 s, roughly 1-2.5-5 per decade).
pub const BOUNDS_NS: [u64; 15] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

/// The operations recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyOp {
    /// Pulls (including sample reads that went remote).
    Pull,
    /// Pushes and sets.
    Push,
}

/// How an operation's answers arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyPath {
    /// Every answer came from a node the operation was sent to (the key's owner, or this node
    /// itself without fast local access).
    Owner,
    /// At least one answer came from a node the request was forwarded to.
    Forwarded,
}

impl LatencyOp {
    /// Every operation, in [`LatencyOp::index`] order.
    pub const ALL: [Self; 2] = [Self::Pull, Self::Push];

    /// The label value (`pull`, `push`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Pull => "pull",
            Self::Push => "push",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl LatencyPath {
    /// Every path, in [`LatencyPath::index`] order.
    pub const ALL: [Self; 2] = [Self::Owner, Self::Forwarded];

    /// The label value (`owner`, `forwarded`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Forwarded => "forwarded",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One histogram: per-bucket (not cumulative) counts, their sum and the latencies' sum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Count per bucket of [`BOUNDS_NS`], then the `+Inf` bucket.
    pub buckets: [u64; BOUNDS_NS.len() + 1],
    /// Observations.
    pub count: u64,
    /// Sum of the observed latencies, ns.
    pub sum_ns: u64,
}

impl Histogram {
    fn observe(&mut self, ns: u64) {
        let bucket = BOUNDS_NS.partition_point(|&b| b < ns);
        self.buckets[bucket] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }
}

/// The histograms of one node, by operation and path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpLatency {
    by: [[Histogram; 2]; 2],
}

impl OpLatency {
    pub(crate) fn observe(&mut self, op: LatencyOp, path: LatencyPath, ns: u64) {
        self.by[op.index()][path.index()].observe(ns);
    }

    /// The histogram of `op` by `path`.
    pub fn get(&self, op: LatencyOp, path: LatencyPath) -> &Histogram {
        &self.by[op.index()][path.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_bucket_of_their_upper_bound() {
        let mut l = OpLatency::default();
        // Exactly on a bound counts in that bound's bucket (Prometheus `le`), one above in the next.
        for ns in [0, 10_000, 10_001, 1_000_000_000, 1_000_000_001] {
            l.observe(LatencyOp::Pull, LatencyPath::Forwarded, ns);
        }
        let h = l.get(LatencyOp::Pull, LatencyPath::Forwarded);
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[BOUNDS_NS.len() - 1], 1);
        assert_eq!(h.buckets[BOUNDS_NS.len()], 1);
        assert_eq!(h.count, 5);
        assert_eq!(h.sum_ns, 2_000_020_002);
        assert_eq!(l.get(LatencyOp::Pull, LatencyPath::Owner).count, 0);
        assert_eq!(l.get(LatencyOp::Push, LatencyPath::Forwarded).count, 0);
    }
}
