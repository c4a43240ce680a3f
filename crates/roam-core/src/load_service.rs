//! Server-side load statistics (PSLD, issue #14): what serving costs each node, measured where
//! the serving happens, exchanged in the load reports, and each node's *capacity* estimated
//! from them — the second kind of evidence of a straggler, beside the response times its peers
//! observe (`load.rs`).
//!
//! - **Measurement** (the shells', since the core has no clock): for each peer's pull or push
//!   that served keys here, the threads that feed received frames to the core add to the
//!   node's counters the keys it served (`service_keys`), the core's time on it
//!   (`service_busy_ns`, a slowed node's service delay included) and, apart, how long it
//!   waited for the node lock after it was read (`service_queue_ns`; not in the busy time: on
//!   a shared machine it mostly measures other threads). Keys
//!   and time come from the same frames: relocations that answer queued requests, replica
//!   sync, forwards and answers to this node's own requests count in neither. The simulator
//!   adds virtual service times the same way.
//! - **Report.** Every load period a node appends its period's keys served, busy time and
//!   queueing time to its `LoadReport` ([`ServiceReport`]); it keeps every member's latest.
//! - **Capacity**: keys served per second of busy time, smoothed over periods (each new period
//!   weighs half), from periods that served at least [`LoadWatch::min_served_keys`] keys
//!   (fewer are noise, and an idle server has no measurable capacity).
//! - **Detection.** In a detection round, a node whose capacity is below the others' median
//!   divided by [`LoadWatch::slow_factor`] is slow by capacity; above the median divided by
//!   [`LoadWatch::recover_factor`] it is fine. `load.rs` combines this with the response times
//!   in the same streaks. It needs three nodes with a fresh capacity, as the response times
//!   need three scores. A period that served too few keys is no evidence (the estimate is kept,
//!   but not counted again), and members that left or were lost are dropped.
//!
//! Invariants: the statistics never change where keys are or what any operation returns; a
//! report's numbers are checked (finite, non-negative) before use and a bad report is dropped
//! with a warning; a node without a capacity is neither slow nor fine by capacity.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use crate::id::NodeId;
use crate::load::{LoadWatch, median};
use crate::node::Node;
use crate::warning::Warning;

/// Values a `LoadReport` carries after its peers' pairs: keys served, busy ns, queueing ns.
pub const SERVICE_VALUES: usize = 3;

/// One node's serving in one load period, as it reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServiceReport {
    /// Keys served for requests that arrived by message.
    pub served_keys: f64,
    /// Wall time (ns) the node's receiving threads were busy with frames that served keys.
    pub busy_ns: f64,
    /// Time (ns) those frames waited for the node lock.
    pub queue_ns: f64,
}

impl ServiceReport {
    /// The report as a `LoadReport`'s trailing values.
    pub(crate) fn to_values(self) -> [f32; SERVICE_VALUES] {
        [
            self.served_keys as f32,
            self.busy_ns as f32,
            self.queue_ns as f32,
        ]
    }

    /// The report from a `LoadReport`'s trailing values, if they are finite and non-negative.
    pub(crate) fn from_values(values: &[f32]) -> Option<Self> {
        let &[served, busy, queue] = values else {
            return None;
        };
        let ok = |v: f32| v.is_finite() && v >= 0.0;
        (ok(served) && ok(busy) && ok(queue)).then_some(Self {
            served_keys: f64::from(served),
            busy_ns: f64::from(busy),
            queue_ns: f64::from(queue),
        })
    }

    /// Keys served per second of busy time, if the period served `min_keys` or more.
    pub fn capacity(&self, min_keys: u32) -> Option<f64> {
        (self.served_keys >= f64::from(min_keys) && self.busy_ns > 0.0)
            .then(|| self.served_keys / (self.busy_ns / 1e9))
    }
}

/// What this node knows of one member's serving.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServiceStats {
    /// The member's latest period.
    pub last: ServiceReport,
    /// Its smoothed capacity (keys per busy second), once a period could estimate one.
    pub capacity: Option<f64>,
}

/// A node's view of every member's serving (its own included).
#[derive(Debug, Default)]
pub(crate) struct Service {
    /// `served_keys`, `service_busy_ns` and `service_queue_ns` at the last report.
    baseline: [u64; 3],
    /// Each member's statistics, and whether a report arrived since the last detection round.
    pub(crate) members: BTreeMap<NodeId, (ServiceStats, bool)>,
}

/// A node's capacity judged against the others' in one round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CapacityVerdict {
    pub(crate) capacity: f64,
    pub(crate) others: f64,
    pub(crate) slow: bool,
    pub(crate) fine: bool,
}

impl Service {
    /// Folds `report` of `node` into its statistics. Only a period that measured a capacity
    /// is evidence for the next round: an idle period keeps the estimate but must not count it
    /// again (a node named on old figures, or never recovering while it serves nothing).
    fn record(&mut self, node: NodeId, report: ServiceReport, min_keys: u32) {
        let (stats, fresh) = self.members.entry(node).or_default();
        stats.last = report;
        if let Some(now) = report.capacity(min_keys) {
            stats.capacity = Some(stats.capacity.map_or(now, |old| (old + now) / 2.0));
            *fresh = true;
        }
    }
}

impl Node {
    /// This node's serving since its last report (from its counters), recorded as its own.
    pub(crate) fn service_report_now(&mut self) -> ServiceReport {
        let c = &self.counters;
        let now = [
            c.service_keys.load(Relaxed),
            c.service_busy_ns.load(Relaxed),
            c.service_queue_ns.load(Relaxed),
        ];
        let service = &mut self.load.service;
        // Members that left or were lost are no longer reported (nor blended into a reused id).
        let dir = &self.dir;
        let lost = &self.lost;
        service
            .members
            .retain(|n, _| dir.is_member(*n) && !lost.contains(n));
        let [served, busy, queue] = [0, 1, 2].map(|i| now[i].saturating_sub(service.baseline[i]));
        service.baseline = now;
        let report = ServiceReport {
            served_keys: served as f64,
            busy_ns: busy as f64,
            queue_ns: queue as f64,
        };
        let min_keys = self.load.watch.map_or(u32::MAX, |w| w.min_served_keys);
        self.load.service.record(self.cfg.id, report, min_keys);
        report
    }

    /// A member's service report (a `LoadReport`'s trailing values), checked.
    pub(crate) fn handle_service_report(&mut self, from: NodeId, values: &[f32]) {
        let Some(watch) = self.load.watch else {
            return;
        };
        match ServiceReport::from_values(values) {
            Some(report) => self
                .load
                .service
                .record(from, report, watch.min_served_keys),
            None => self.warn(Warning::LoadReport {
                from,
                what: "its service figures are not finite non-negative numbers",
            }),
        }
    }

    /// Every member's serving as this node knows it, in node order.
    pub fn service_stats(&self) -> Vec<(NodeId, ServiceStats)> {
        (self.load.service.members.iter())
            .map(|(&node, &(stats, _))| (node, stats))
            .collect()
    }

    /// Every live member's latest capacity estimate (fresh or not: a node the balancer
    /// unloaded may serve too few keys for a new one) and the median of the others', when
    /// three or more have one; for the balancer (`balance.rs`).
    pub(crate) fn latest_capacities(
        &self,
        live: impl Fn(&NodeId) -> bool,
    ) -> BTreeMap<NodeId, (f64, f64)> {
        let capacities: BTreeMap<NodeId, f64> = (self.load.service.members.iter())
            .filter(|(node, _)| live(node))
            .filter_map(|(&node, (stats, _))| Some((node, stats.capacity?)))
            .collect();
        against_others(&capacities)
    }

    /// This round's capacity verdicts over the live members (`live`) with a capacity and a
    /// report since the last round; none unless three have one.
    pub(crate) fn capacity_verdicts(
        &mut self,
        watch: LoadWatch,
        live: impl Fn(&NodeId) -> bool,
    ) -> BTreeMap<NodeId, CapacityVerdict> {
        let mut capacities = BTreeMap::new();
        for (node, (stats, fresh)) in &mut self.load.service.members {
            if std::mem::replace(fresh, false)
                && live(node)
                && let Some(capacity) = stats.capacity
            {
                capacities.insert(*node, capacity);
            }
        }
        (against_others(&capacities).into_iter())
            .map(|(node, (capacity, others))| {
                let verdict = CapacityVerdict {
                    capacity,
                    others,
                    slow: capacity * watch.slow_factor < others,
                    fine: capacity * watch.recover_factor > others,
                };
                (node, verdict)
            })
            .collect()
    }
}

/// Each node's capacity and the median of the others', when three or more have one (two
/// cannot tell which of them is slow).
fn against_others(capacities: &BTreeMap<NodeId, f64>) -> BTreeMap<NodeId, (f64, f64)> {
    if capacities.len() < 3 {
        return BTreeMap::new();
    }
    let mut others = Vec::with_capacity(capacities.len() - 1);
    (capacities.iter())
        .map(|(&node, &capacity)| {
            others.clear();
            others.extend(
                (capacities.iter())
                    .filter(|&(&n, _)| n != node)
                    .map(|(_, &c)| c),
            );
            others.sort_by(f64::total_cmp);
            (node, (capacity, median(&others)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_that_served_too_little_has_no_capacity() {
        let few = ServiceReport {
            served_keys: 63.0,
            busy_ns: 1e6,
            queue_ns: 0.0,
        };
        assert_eq!(few.capacity(64), None);
        let idle = ServiceReport {
            served_keys: 1e6,
            busy_ns: 0.0,
            queue_ns: 0.0,
        };
        assert_eq!(idle.capacity(64), None);
        let enough = ServiceReport {
            served_keys: 1000.0,
            busy_ns: 1e6,
            queue_ns: 0.0,
        };
        assert_eq!(enough.capacity(64), Some(1e6));
    }

    #[test]
    fn capacity_is_smoothed_and_kept_through_idle_periods() {
        let mut service = Service::default();
        let report = |keys: f64, busy: f64| ServiceReport {
            served_keys: keys,
            busy_ns: busy,
            queue_ns: 0.0,
        };
        service.record(NodeId(1), report(1000.0, 1e6), 64);
        service.record(NodeId(1), report(1000.0, 4e6), 64);
        let stats = service.members[&NodeId(1)].0;
        assert_eq!(stats.capacity, Some((1e6 + 2.5e5) / 2.0));
        service.record(NodeId(1), report(0.0, 0.0), 64);
        assert_eq!(service.members[&NodeId(1)].0.capacity, stats.capacity);
    }

    /// Two slow periods, then node 2 serves nothing: its kept estimate is not evidence again,
    /// so idle rounds never complete the streak that would name it.
    #[test]
    fn an_idle_period_is_no_new_evidence() {
        use crate::directory::Partitioning;
        use crate::keyspace::KeySpace;
        use crate::node::{NodeConfig, Time};
        let mut cfg = NodeConfig::new(
            NodeId(0),
            4,
            1,
            KeySpace::uniform(64, 1).unwrap(),
            Partitioning::Range,
        );
        cfg.load = Some(LoadWatch::default());
        let mut n = Node::new(cfg);
        let period = LoadWatch::default().report_every;
        for i in 1..=8u64 {
            let now = Time(i * period);
            n.tick(now);
            for peer in 1..4 {
                let figures = match (peer, i) {
                    (2, 1..=2) => [1000.0, 4e6, 0.0],
                    (2, _) => [0.0, 0.0, 0.0],
                    _ => [1000.0, 1e6, 0.0],
                };
                n.handle_service_report(NodeId(peer), &figures);
            }
            n.load_handle_timeout(now);
        }
        assert!(n.stragglers().is_empty(), "{:?}", n.straggler_events());
        assert_eq!(n.service_stats()[2].1.capacity, Some(250_000.0));
    }

    #[test]
    fn bad_figures_are_refused() {
        assert_eq!(ServiceReport::from_values(&[1.0, f32::NAN, 0.0]), None);
        assert_eq!(ServiceReport::from_values(&[1.0, 2.0, -1.0]), None);
        assert_eq!(ServiceReport::from_values(&[1.0, 2.0]), None);
        assert!(ServiceReport::from_values(&[1.0, 2.0, 3.0]).is_some());
    }
}
