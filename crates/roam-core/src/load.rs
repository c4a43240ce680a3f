//! Load statistics and straggler detection (PSLD, issue #14): how long each peer takes to answer
//! this node's requests, exchanged between the nodes on the core's timers, and the nodes that
//! answer clearly slower than the others for a sustained time — or, by the second evidence,
//! serve clearly slower by their own measure (`load_service.rs`: keys served per busy second,
//! carried by the same reports; either evidence makes a node slow in a round, and a capacity
//! that says slow keeps it from being fine).
//!
//! - **Observation.** A pull or push answered by a node it was first sent to is one sample of
//!   that peer's *response time*: virtual or real `now` at the answer minus `now` at the issue
//!   (the requests of one worker are batches of similar size, so means compare across peers).
//!   Answers after forwarding come from another node than the one asked and are not samples.
//! - **Exchange.** Every [`LoadWatch::report_every`] a node sends every other member a
//!   `LoadReport`: for each peer it heard from in the period, the mean response time and the
//!   number of answers. It keeps the latest report of each member, its own included.
//! - **Attribution.** A slow node is slow to answer everyone, but a slow *observer* also sees
//!   everyone as slow (it reads answers late). So a node's *score* is the smallest mean any
//!   other observer reported for it (with at least [`LoadWatch::min_answers`] answers, in a
//!   report that arrived since the last round): one fast observer is enough to clear a node. A score
//!   needs two such observers, and scores need three scored nodes to be compared (one observer,
//!   or two nodes, cannot tell a slow node from a slow observer).
//! - **Detection.** A node is slow in one evaluation when its score exceeds
//!   [`LoadWatch::slow_factor`] × the median of the other nodes' scores *and* exceeds it by more
//!   than [`LoadWatch::min_excess_ns`] (fast links make small absolute differences large
//!   ratios). [`LoadWatch::sustain`] slow evaluations in a row make it a straggler (an event
//!   with the evidence); as many in a row below [`LoadWatch::recover_factor`] × the median (or
//!   within the excess) end it. The gap between the two factors is the hysteresis.
//!
//! Invariants: the statistics never change where keys are or what any operation returns; a
//! report is validated before use (members only, finite non-negative numbers, at most one entry
//! per member) and a bad one is dropped with a warning; lost members are neither observers nor
//! scored.

use std::collections::BTreeMap;

use crate::id::NodeId;
use crate::load_service::Service;
use crate::node::{Node, Time};
use crate::warning::Warning;
use crate::wire::{Frame, Kind};

/// How peers' response times are watched (durations in nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadWatch {
    /// Time between two reports (and detection rounds) of a node.
    pub report_every: u64,
    /// A node is slow when its score is more than this many times the others' median...
    pub slow_factor: f64,
    /// ...and more than this far above it.
    pub min_excess_ns: u64,
    /// A straggler recovers when its score falls below this many times the others' median.
    pub recover_factor: f64,
    /// Evaluations in a row that start or end a straggler.
    pub sustain: u32,
    /// Answers in a period below which an observation is no evidence.
    pub min_answers: u32,
    /// Keys a node must have served in a period for the period to estimate its capacity
    /// (`load_service.rs`; fewer take too little time to measure against preemption).
    pub min_served_keys: u32,
}

/// A [`LoadWatch`] that cannot work.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LoadWatchError {
    /// Zero report period.
    #[error("the load report period must be positive")]
    ZeroPeriod,
    /// A factor that is not finite or not above 1.
    #[error("load watch {name} must be finite and above 1, got {value}")]
    BadFactor {
        /// Which factor.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// A recover factor at or above the slow factor leaves no hysteresis.
    #[error("load watch recover factor {recover} must be below the slow factor {slow}")]
    NoHysteresis {
        /// The recover factor.
        recover: f64,
        /// The slow factor.
        slow: f64,
    },
    /// Zero rounds to decide on.
    #[error("load watch sustain must be at least 1")]
    ZeroSustain,
}

impl LoadWatch {
    /// Checks that the settings can work: a positive period, finite factors above 1 with the
    /// recover factor below the slow one, and at least one round to decide on.
    pub fn validate(&self) -> Result<(), LoadWatchError> {
        if self.report_every == 0 {
            return Err(LoadWatchError::ZeroPeriod);
        }
        for (name, value) in [
            ("slow factor", self.slow_factor),
            ("recover factor", self.recover_factor),
        ] {
            if !(value.is_finite() && value > 1.0) {
                return Err(LoadWatchError::BadFactor { name, value });
            }
        }
        if self.recover_factor >= self.slow_factor {
            return Err(LoadWatchError::NoHysteresis {
                recover: self.recover_factor,
                slow: self.slow_factor,
            });
        }
        if self.sustain == 0 {
            return Err(LoadWatchError::ZeroSustain);
        }
        Ok(())
    }
}

impl Default for LoadWatch {
    /// Reports every 500 ms; slow at 2× the median and 0.1 ms above it for 3 reports in a row
    /// (1.5 s); recovered below 1.5× for as long; at least 8 answers per observation, and 1,000
    /// keys served per period for a capacity (a node that serves fewer is hardly loaded; 64
    /// keys of a few µs each, measured beside other processes on 2 cores, varied several-fold). (A node
    /// held to a quarter of a CPU answered MF's requests in 0.6 ms against 0.18 ms for the
    /// others on loopback: a 0.4 ms gap that tripled the epoch time.)
    fn default() -> Self {
        Self {
            report_every: 500_000_000,
            slow_factor: 2.0,
            min_excess_ns: 100_000,
            recover_factor: 1.5,
            sustain: 3,
            min_answers: 8,
            min_served_keys: 1000,
        }
    }
}

/// A straggler found or recovered, with the evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct StragglerEvent {
    /// When this node decided.
    pub at: Time,
    /// The node.
    pub node: NodeId,
    /// True: it became a straggler; false: it recovered.
    pub slow: bool,
    /// Its score: the smallest mean response time (ns) an observer reported for it.
    pub score_ns: f64,
    /// The median score of the other nodes (ns).
    pub others_ns: f64,
    /// The observers whose reports scored it (0: no response-time score this round; then
    /// `score_ns` and `others_ns` are 0 and the capacity was the evidence).
    pub observers: u32,
    /// Its capacity (keys served per busy second) and the others' median, when capacities
    /// were compared this round (`load_service.rs`).
    pub capacity: Option<(f64, f64)>,
}

/// Events kept (a node that keeps slowing down and recovering must not grow memory).
const MAX_EVENTS: usize = 64;

/// Observers a node's score needs (each with enough answers from it in a fresh report).
const MIN_OBSERVERS: u32 = 2;

/// One observer's view: per peer, the mean response time (ns) and the answers behind it.
type View = BTreeMap<NodeId, (f64, u64)>;

/// One node's evidence in one detection round.
struct Verdict {
    slow: bool,
    fine: bool,
    /// Its response-time score, the others' median and its observers.
    response: Option<(f64, f64, u32)>,
    /// Its capacity and the others' median.
    capacity: Option<(f64, f64)>,
}

/// Detection state of one scored node.
#[derive(Debug, Default)]
struct Streak {
    slow_in_a_row: u32,
    fine_in_a_row: u32,
    straggler: bool,
}

/// Load statistics of one node (inactive without a [`LoadWatch`]).
#[derive(Debug, Default)]
pub(crate) struct Load {
    pub(crate) watch: Option<LoadWatch>,
    next_report_at: Time,
    /// This period's answers per peer: count and summed response time (ns).
    window: BTreeMap<NodeId, (u64, u64)>,
    /// This period's operations of local workers completed through the protocol.
    window_ops: u64,
    /// Operations reported by each member (this node included) since the last round.
    ops_since_round: BTreeMap<NodeId, u64>,
    /// The latest view of each member (this node's own included), and whether it arrived after
    /// the last detection round (each view is evidence for one round only).
    views: BTreeMap<NodeId, (View, bool)>,
    streaks: BTreeMap<NodeId, Streak>,
    /// The latest [`MAX_EVENTS`] events, and how many older ones were dropped.
    events: Vec<StragglerEvent>,
    events_dropped: u64,
    /// Every member's serving, from the load reports (`load_service.rs`).
    pub(crate) service: Service,
}

impl Load {
    /// Load statistics under `watch` (validated by the front ends with [`LoadWatch::validate`]).
    pub(crate) fn new(watch: Option<LoadWatch>) -> Self {
        if let Some(w) = &watch {
            w.validate()
                .unwrap_or_else(|e| panic!("{e} (validated by the front ends)"));
        }
        Self {
            watch,
            ..Self::default()
        }
    }
}

/// What one detection round saw, for the load balancer (`balance.rs`).
#[derive(Clone, Debug, Default)]
pub(crate) struct LoadRound {
    /// Each scored node's score (ns): the smallest mean response time an observer reported.
    pub(crate) scores: BTreeMap<NodeId, f64>,
    /// Operations completed cluster-wide since the last round (the job's throughput).
    pub(crate) ops: u64,
    /// Each live node's latest capacity and the others' median, keys per busy second, when
    /// three or more have one (`load_service.rs`).
    pub(crate) capacities: BTreeMap<NodeId, (f64, f64)>,
}

impl Node {
    /// Notes that an operation of a local worker completed through the protocol.
    pub(crate) fn note_completed_op(&mut self) {
        if self.load.watch.is_some() {
            self.load.window_ops += 1;
        }
    }

    /// Notes an answer from `from` to operation `op`, issued at `issued`, as a sample of `from`'s
    /// response time if the operation's request went to `from` first.
    pub(crate) fn observe_answer(&mut self, from: NodeId, issued: Time, asked_first: bool) {
        if self.load.watch.is_none() || from == self.cfg.id || !asked_first {
            return;
        }
        let took = self.clock.0.saturating_sub(issued.0);
        let entry = self.load.window.entry(from).or_default();
        entry.0 += 1;
        entry.1 = entry.1.saturating_add(took);
    }

    /// The latest stragglers found and recovered (at most 64), in order.
    pub fn straggler_events(&self) -> &[StragglerEvent] {
        &self.load.events
    }

    /// Straggler events dropped to keep the list bounded.
    pub fn straggler_events_dropped(&self) -> u64 {
        self.load.events_dropped
    }

    /// The nodes this node currently takes for stragglers.
    pub fn stragglers(&self) -> Vec<NodeId> {
        self.load
            .streaks
            .iter()
            .filter(|(_, s)| s.straggler)
            .map(|(&node, _)| node)
            .collect()
    }

    /// This node's latest view of its peers: mean response time (ns) and answers, per peer.
    pub fn peer_response_times(&self) -> Vec<(NodeId, f64, u64)> {
        self.load
            .views
            .get(&self.cfg.id)
            .map(|(view, _)| view.iter().map(|(&n, &(ns, k))| (n, ns, k)).collect())
            .unwrap_or_default()
    }

    /// The load watch's minimum excess (ns; 0 without load watching).
    pub(crate) fn load_min_excess_ns(&self) -> u64 {
        self.load.watch.map_or(0, |w| w.min_excess_ns)
    }

    /// The load watch's sustain rounds (1 without load watching).
    pub(crate) fn load_sustain(&self) -> u32 {
        self.load.watch.map_or(1, |w| w.sustain)
    }

    /// The load report period (ns; 0 without load watching).
    pub(crate) fn load_period_ns(&self) -> u64 {
        self.load.watch.map_or(0, |w| w.report_every)
    }

    /// The next report, if load watching is on.
    pub(crate) fn load_timeout(&self) -> Option<Time> {
        self.load.watch.map(|_| self.load.next_report_at)
    }

    /// Sends this period's report to every other member and runs detection, when due.
    pub(crate) fn load_handle_timeout(&mut self, now: Time) {
        let Some(watch) = self.load.watch else {
            return;
        };
        if now < self.load.next_report_at {
            return;
        }
        self.load.next_report_at = Time(now.0.saturating_add(watch.report_every));
        let view: View = std::mem::take(&mut self.load.window)
            .into_iter()
            .map(|(peer, (answers, total))| (peer, (total as f64 / answers as f64, answers)))
            .collect();
        let peers: Vec<u64> = view.keys().map(|n| u64::from(n.0)).collect();
        let service = self.service_report_now().to_values();
        let values: Vec<f32> = view
            .values()
            .flat_map(|&(ns, answers)| [ns as f32, answers as f32])
            .chain(service)
            .collect();
        let me = self.cfg.id;
        let ops = std::mem::take(&mut self.load.window_ops);
        *self.load.ops_since_round.entry(me).or_default() += ops;
        for node in self.live_peers() {
            let frame = Frame::with_contents(
                Kind::LoadReport,
                me,
                crate::id::ReqId(0),
                ops,
                &peers,
                None,
                &values,
            );
            self.send(node, frame);
        }
        self.load.views.insert(me, (view, true));
        let round = self.detect_stragglers(now, watch);
        self.balance_round(now, round);
    }

    /// A member's report (shape checked by `Msg::decode`): `ops` of its workers completed in
    /// the period; `peers[i]`'s mean response time and answers are `values[2i]`,
    /// `values[2i + 1]`.
    pub(crate) fn handle_load_report(
        &mut self,
        from: NodeId,
        ops: u64,
        peers: &[u64],
        values: &[f32],
    ) {
        if self.load.watch.is_none() {
            return;
        }
        let bad = |what| Warning::LoadReport { from, what };
        debug_assert_eq!(values.len(), 2 * peers.len(), "checked by Msg::decode");
        let mut view = View::new();
        for (&peer, pair) in peers.iter().zip(values.chunks_exact(2)) {
            let (ns, answers) = (f64::from(pair[0]), f64::from(pair[1]));
            // Node ids were checked to fit 32 bits by `Msg::decode`.
            let node = NodeId(peer as u32);
            if !self.dir.is_member(node) {
                // Members learn of joins and leaves at different times: a view may name a node
                // that joined or left there and not yet (or already) here. It is skipped.
                continue;
            }
            if !(ns.is_finite() && ns >= 0.0 && answers.is_finite() && answers >= 1.0) {
                return self.warn(bad("a response time or answer count is not a finite count"));
            }
            if view.insert(node, (ns, answers as u64)).is_some() {
                return self.warn(bad("names a node twice"));
            }
        }
        self.load.views.insert(from, (view, true));
        let sum = self.load.ops_since_round.entry(from).or_default();
        *sum = sum.saturating_add(ops);
    }

    /// One detection round over the views that arrived since the last one.
    fn detect_stragglers(&mut self, now: Time, watch: LoadWatch) -> LoadRound {
        let live = |n: &NodeId| self.dir.is_member(*n) && !self.lost.contains(n);
        // Lost nodes are no stragglers (they are gone, and their operations fail instead).
        self.load.streaks.retain(|node, _| live(node));
        let ops = std::mem::take(&mut self.load.ops_since_round)
            .into_iter()
            .filter(|(node, _)| live(node))
            .fold(0u64, |sum, (_, ops)| sum.saturating_add(ops));
        // Each node's score: the smallest mean any other live observer saw, with evidence.
        let mut scores: BTreeMap<NodeId, (f64, u32)> = BTreeMap::new();
        for (observer, (view, fresh)) in &mut self.load.views {
            if !std::mem::replace(fresh, false) || !live(observer) {
                continue;
            }
            for (node, &(ns, answers)) in view.iter() {
                if node == observer || !live(node) || answers < u64::from(watch.min_answers) {
                    continue;
                }
                let entry = scores.entry(*node).or_insert((f64::INFINITY, 0));
                entry.0 = entry.0.min(ns);
                entry.1 += 1;
            }
        }
        // One observer cannot tell its own slowness from the peer's: a score needs two.
        scores.retain(|_, &mut (_, observers)| observers >= MIN_OBSERVERS);
        // Capacities are the second evidence (`load_service.rs`), compared among their own
        // three or more live nodes.
        let alive: Vec<NodeId> = (self.load.service.members.keys().copied())
            .filter(|n| self.dir.is_member(*n) && !self.lost.contains(n))
            .collect();
        let capacities = self.capacity_verdicts(watch, |n| alive.contains(n));
        let round = LoadRound {
            scores: scores.iter().map(|(&n, &(score, _))| (n, score)).collect(),
            ops,
            capacities: self.latest_capacities(|n| alive.contains(n)),
        };
        // Response times: each scored node against the others' median (from one sorted list
        // without the node), when three are scored.
        let mut verdicts: BTreeMap<NodeId, Verdict> = BTreeMap::new();
        if scores.len() >= 3 {
            let mut sorted: Vec<f64> = scores.values().map(|s| s.0).collect();
            sorted.sort_by(f64::total_cmp);
            let mut others = Vec::with_capacity(sorted.len());
            for (&node, &(score, observers)) in &scores {
                others.clear();
                let at = sorted.partition_point(|&v| v < score);
                others.extend(sorted[..at].iter().chain(&sorted[at + 1..]));
                let median = median(&others);
                let excess = score - median > watch.min_excess_ns as f64;
                verdicts.insert(
                    node,
                    Verdict {
                        slow: excess && score > watch.slow_factor * median,
                        fine: !excess || score < watch.recover_factor * median,
                        response: Some((score, median, observers)),
                        capacity: None,
                    },
                );
            }
        }
        // Either evidence makes a node slow in this round. With response times, those decide
        // when it is fine unless its capacity says slow (capacities of healthy nodes spread
        // 1.3-1.6x, so "not yet fine" by capacity alone would hold off a recovery on noise);
        // with a capacity only, the capacity decides. Nodes without any evidence this round
        // keep their streaks: "in a row" counts rounds with evidence.
        for (node, c) in capacities {
            let v = verdicts.entry(node).or_insert(Verdict {
                slow: false,
                fine: c.fine,
                response: None,
                capacity: None,
            });
            v.slow |= c.slow;
            v.fine &= !c.slow;
            v.capacity = Some((c.capacity, c.others));
        }
        for (node, v) in verdicts {
            let streak = self.load.streaks.entry(node).or_default();
            streak.slow_in_a_row = if v.slow { streak.slow_in_a_row + 1 } else { 0 };
            streak.fine_in_a_row = if v.fine { streak.fine_in_a_row + 1 } else { 0 };
            let flip = if streak.straggler {
                streak.fine_in_a_row >= watch.sustain
            } else {
                streak.slow_in_a_row >= watch.sustain
            };
            if flip {
                streak.straggler = !streak.straggler;
                streak.slow_in_a_row = 0;
                streak.fine_in_a_row = 0;
                if self.load.events.len() == MAX_EVENTS {
                    self.load.events.remove(0);
                    self.load.events_dropped += 1;
                }
                let (score_ns, others_ns, observers) = v.response.unwrap_or_default();
                self.load.events.push(StragglerEvent {
                    at: now,
                    node,
                    slow: streak.straggler,
                    score_ns,
                    others_ns,
                    observers,
                    capacity: v.capacity,
                });
            }
        }
        round
    }
}

/// The median of sorted, non-empty `values` (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> f64 {
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::Partitioning;
    use crate::keyspace::KeySpace;
    use crate::node::NodeConfig;

    const PERIOD: u64 = 1_000_000;

    fn watch() -> LoadWatch {
        LoadWatch {
            report_every: PERIOD,
            slow_factor: 2.0,
            min_excess_ns: 100_000,
            recover_factor: 1.5,
            sustain: 3,
            min_answers: 4,
            min_served_keys: 64,
        }
    }

    /// Node 0 of `n`, watching loads.
    fn node(n: u32) -> Node {
        let mut cfg = NodeConfig::new(
            NodeId(0),
            n,
            1,
            KeySpace::uniform(64, 1).unwrap(),
            Partitioning::Range,
        );
        cfg.load = Some(watch());
        Node::new(cfg)
    }

    /// `observer`'s report that peers answer in `ns` each (10 answers each).
    fn report(node: &mut Node, observer: u32, peers: &[(u32, f32)]) {
        let ids: Vec<u64> = peers.iter().map(|&(p, _)| u64::from(p)).collect();
        let values: Vec<f32> = peers.iter().flat_map(|&(_, ns)| [ns, 10.0]).collect();
        node.handle_load_report(NodeId(observer), 0, &ids, &values);
    }

    /// One period: every observer of 4 nodes reports node 2 at `slow_ns` and the others at
    /// `fast` ns (observer 2 sees everyone late as well), then node 0 evaluates.
    fn period_at(node: &mut Node, i: u64, slow_ns: f32, fast: f32) {
        let now = Time(i * PERIOD);
        node.tick(now);
        report(node, 1, &[(0, fast), (2, slow_ns), (3, fast)]);
        report(node, 2, &[(0, slow_ns), (1, slow_ns), (3, slow_ns)]);
        report(node, 3, &[(0, fast), (1, fast), (2, slow_ns)]);
        // Node 0's own view of its peers.
        for (peer, ns) in [(1, fast), (2, slow_ns), (3, fast)] {
            for _ in 0..10 {
                node.observe_answer(NodeId(peer), Time(now.0 - ns as u64), true);
            }
        }
        node.load_handle_timeout(now);
    }

    /// [`period_at`] with the others at 100 µs.
    fn period(node: &mut Node, i: u64, slow_ns: f32) {
        period_at(node, i, slow_ns, 100_000.0);
    }

    #[test]
    fn a_node_slow_for_everyone_is_found_after_the_sustain_and_recovers_with_hysteresis() {
        let mut n = node(4);
        // Slow twice: not yet (sustain 3).
        for i in 1..=2 {
            period(&mut n, i, 900_000.0);
        }
        assert!(n.stragglers().is_empty());
        period(&mut n, 3, 900_000.0);
        assert_eq!(n.stragglers(), vec![NodeId(2)]);
        let found = &n.straggler_events()[0];
        assert!(found.slow && found.node == NodeId(2));
        assert_eq!((found.score_ns, found.others_ns), (900_000.0, 100_000.0));
        assert_eq!(found.observers, 3, "nodes 0, 1 and 3 observed it");
        // Between the factors (1.7× the others' 1 ms): neither slow nor recovered, for long.
        for i in 4..=10 {
            period_at(&mut n, i, 1_700_000.0, 1_000_000.0);
        }
        assert_eq!(
            n.stragglers(),
            vec![NodeId(2)],
            "hysteresis holds the straggler"
        );
        // Fast again: recovered after three periods.
        for i in 11..=12 {
            period(&mut n, i, 110_000.0);
        }
        assert_eq!(n.stragglers(), vec![NodeId(2)]);
        period(&mut n, 13, 110_000.0);
        assert!(n.stragglers().is_empty());
        let events: Vec<(NodeId, bool)> = n
            .straggler_events()
            .iter()
            .map(|e| (e.node, e.slow))
            .collect();
        assert_eq!(events, [(NodeId(2), true), (NodeId(2), false)]);
        // Every report went to every other member.
        let mut to = Vec::new();
        while let Some((dest, frame)) = n.poll_transmit() {
            assert_eq!(frame.header.kind, Kind::LoadReport);
            to.push(dest.0);
        }
        assert_eq!(to.len(), 13 * 3);
    }

    #[test]
    fn slow_observers_small_differences_and_two_nodes_flag_nobody() {
        // A ratio of 3 but only 50 µs above the median: below the excess.
        let mut n = node(4);
        for i in 1..=6 {
            period(&mut n, i, 150_000.0);
        }
        assert!(n.stragglers().is_empty());
        // Two nodes: a slow peer and a slow observer look alike, so nothing is decided.
        let mut n = node(2);
        for i in 1..=6 {
            let now = Time(i * PERIOD);
            n.tick(now);
            report(&mut n, 1, &[(0, 100_000.0)]);
            for _ in 0..10 {
                n.observe_answer(NodeId(1), Time(now.0 - 5_000_000), true);
            }
            n.load_handle_timeout(now);
        }
        assert!(n.stragglers().is_empty());
        assert!(n.straggler_events().is_empty());
    }

    #[test]
    fn bad_reports_are_refused_by_the_decoder_or_dropped_with_a_warning() {
        use crate::msg::{Msg, MsgError};
        let frame = |peers: &[u64], values: &[f32]| {
            let mut f = Frame::new(
                Kind::LoadReport,
                NodeId(2),
                crate::id::ReqId(0),
                0,
                peers,
                values.len(),
            );
            f.values_mut().copy_from_slice(values);
            f
        };
        let odd = frame(&[1], &[5.0]);
        assert!(matches!(Msg::decode(&odd), Err(MsgError::BadShape { .. })));
        // The pairs alone, without the service figures.
        let odd = frame(&[1], &[5.0, 10.0]);
        assert!(matches!(Msg::decode(&odd), Err(MsgError::BadShape { .. })));
        let wide = frame(&[1 << 40], &[5.0, 10.0, 0.0, 0.0, 0.0]);
        assert!(matches!(Msg::decode(&wide), Err(MsgError::BadNode { .. })));
        let mut n = node(3);
        let cases: [(&[u64], &[f32], &str); 3] = [
            (&[1], &[f32::NAN, 10.0], "finite"),
            (&[1], &[5.0, 0.0], "no answers"),
            (&[1, 1], &[5.0, 10.0, 5.0, 10.0], "twice"),
        ];
        for (peers, values, what) in cases {
            n.handle_load_report(NodeId(2), 0, peers, values);
            let warning = n.poll_warning().expect(what).to_string();
            assert!(warning.contains("load report from"), "{what}: {warning}");
        }
        assert!(n.load.views.is_empty(), "no bad report was kept");
        // A node that is no member here (it joined or left elsewhere first) is skipped.
        n.handle_load_report(NodeId(2), 0, &[7, 1], &[5.0, 10.0, 5.0, 10.0]);
        assert!(n.poll_warning().is_none());
        let (view, _) = &n.load.views[&NodeId(2)];
        assert_eq!(view.keys().copied().collect::<Vec<_>>(), [NodeId(1)]);
    }

    #[test]
    fn a_lost_straggler_is_dropped_and_a_view_counts_once() {
        let mut n = node(4);
        for i in 1..=3 {
            period(&mut n, i, 900_000.0);
        }
        assert_eq!(n.stragglers(), vec![NodeId(2)]);
        n.handle_peer_lost(Time(4 * PERIOD), NodeId(2));
        n.load_handle_timeout(Time(4 * PERIOD));
        assert!(n.stragglers().is_empty(), "a lost node is no straggler");
        // One slow period, then rounds without new reports: one round of evidence, no more.
        let mut n = node(4);
        period(&mut n, 1, 900_000.0);
        for i in 2..=6 {
            n.load_handle_timeout(Time(i * PERIOD));
        }
        assert!(
            n.stragglers().is_empty(),
            "one view counted in several rounds"
        );
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert_eq!(watch().validate(), Ok(()));
        assert_eq!(LoadWatch::default().validate(), Ok(()));
        let bad = [
            LoadWatch {
                report_every: 0,
                ..watch()
            },
            LoadWatch {
                sustain: 0,
                ..watch()
            },
            LoadWatch {
                slow_factor: f64::NAN,
                ..watch()
            },
            LoadWatch {
                recover_factor: 1.0,
                ..watch()
            },
            LoadWatch {
                recover_factor: 2.5,
                ..watch()
            },
        ];
        for w in bad {
            assert!(w.validate().is_err(), "{w:?}");
        }
    }

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0]), 3.0);
        assert_eq!(median(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
    }

    /// Node 0 of 4 hears every peer's service figures each period: node 2 serves the same keys
    /// in four times the busy time. It is named a straggler by capacity after `sustain` rounds
    /// (no response times at all), and recovers when its capacity comes back.
    #[test]
    fn a_node_serving_slowly_is_a_straggler_by_capacity() {
        use std::sync::atomic::Ordering::Relaxed;
        let mut n = node(4);
        let service = |busy_ns: f32| [1000.0, busy_ns, 0.0];
        let mut served = 0;
        for i in 1..=8u64 {
            let now = Time(i * PERIOD);
            n.tick(now);
            let slow = if i <= 4 { 4e6 } else { 1e6 };
            for peer in 1..4 {
                let busy = if peer == 2 { slow } else { 1e6 };
                n.handle_service_report(NodeId(peer), &service(busy));
            }
            // This node's own serving, as its shell would count it.
            served += 1000;
            n.counters().service_keys.store(served, Relaxed);
            n.counters().service_busy_ns.store(i * 1_000_000, Relaxed);
            n.load_handle_timeout(now);
            if i == 3 {
                assert_eq!(n.stragglers(), vec![NodeId(2)]);
            }
        }
        assert!(n.stragglers().is_empty(), "recovered");
        let events = n.straggler_events();
        assert_eq!(events.len(), 2, "{events:?}");
        let (capacity, others) = events[0].capacity.expect("capacity evidence");
        assert!((capacity - 250_000.0).abs() < 1e-3, "{capacity}");
        assert!((others - 1_000_000.0).abs() < 1e-3, "{others}");
        assert_eq!(events[0].observers, 0, "no response times were reported");
        let stats = n.service_stats();
        assert_eq!(stats.len(), 4);
        let own = stats[0].1.capacity.expect("this node's own");
        assert!((own - 1_000_000.0).abs() < 1e-3, "{own}");
        // A bad figure is dropped with a warning naming the sender.
        n.handle_service_report(NodeId(3), &[1.0, -2.0, 0.0]);
        let warning = n.poll_warning().expect("warned").to_string();
        assert!(warning.contains("service figures"), "{warning}");
    }
}
