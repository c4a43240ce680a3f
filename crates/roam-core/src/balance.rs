//! The load balancer (PSLD, issue #14): moves home buckets away from nodes that answer slowly,
//! in proportion to how slow they are, and gives them back by exploration once they answer
//! well again. It is a policy over the directory's home moves (`home_move.rs`): under static
//! allocation a move carries the bucket's keys along, so a slow node serves fewer keys; under
//! dynamic allocation it carries the bucket's directory and forwarding work.
//!
//! It runs at the coordinator, once per load round (`load.rs`), and acts on what that round
//! saw: the stragglers detection found, each node's score, and the job's throughput (the
//! operations every node's workers completed through the protocol, from the load reports).
//!
//! - **Overload.** A node is overloaded when its score exceeds [`Balancer::trigger_factor`] ×
//!   the others' median (and by the load watch's minimum excess) for the load watch's sustain
//!   rounds in a row, or when detection calls it a straggler — unless the straggler's
//!   weight is already its capacity's share (below), which it can carry.
//! - **Weights.** Each live node has a weight in [`Balancer::min_weight`]`..=1`; its target
//!   share of the buckets is proportional to it. The most overloaded node (the one whose
//!   target is the largest step down from its weight) shrinks to its measured capacity over the others' median
//!   (`load_service.rs`: keys served per busy second), or by the ratio of the others' median
//!   score to its own, whichever is lower (at least ×0.75, at most ×0.25 per step).
//! - **Moves** follow from the targets: a node above its target gives buckets — first those
//!   that started at a node below its target, which gets them back — to the nodes furthest
//!   below theirs. They go through the coordinator's move queue, at most
//!   [`Balancer::max_bytes_per_sec`] of keys per second (and at least one move per round), so
//!   that training goes on during a migration.
//! - **Judging.** A change is judged [`Balancer::settle_rounds`] quiet rounds after its last move
//!   completed: kept if the throughput of those rounds is at least `1 - tolerance` times that
//!   of the rounds before it, else undone.
//! - **Exploration.** A node with weight below 1 that is not overloaded in the latest round
//!   is probed: its weight doubles (to 1 from 0.95 on). A probe is kept if the node is not
//!   overloaded in the round it is judged and throughput held; else it is undone and the node's next probe waits twice as long
//!   (from [`Balancer::probe_after_rounds`]). So noise costs a bounded number of moves: every
//!   failed probe doubles the wait for the next.
//!
//! Invariants: one change at a time, judged before the next; every decision is a deterministic
//! function of the rounds seen (a simulated run replays from its seed); moves only name live
//! members; decisions are kept for the report, at most [`MAX_DECISIONS`].

use std::collections::{BTreeMap, VecDeque};

use crate::id::NodeId;
use crate::load::LoadRound;
use crate::node::{Node, Time};
use crate::stats::add;

/// How the balancer acts (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Balancer {
    /// Most bytes of keys moved per second (static allocation; a dynamic move carries only
    /// placement records, counted as 64 bytes).
    pub max_bytes_per_sec: u64,
    /// The smallest weight a node is shrunk to (a fraction of an even share).
    pub min_weight: f64,
    /// Quiet rounds after a change before it is judged (and before the next one).
    pub settle_rounds: u32,
    /// Rounds before a shrunk node is first probed; doubles after every failed probe.
    pub probe_after_rounds: u32,
    /// The fraction of throughput a change may lose and still be kept (measurement noise).
    pub tolerance: f64,
    /// A node is overloaded when its score exceeds this many times the others' median (and by
    /// the load watch's minimum excess) for the load watch's sustain rounds in a row: below
    /// the detection's slow factor, since a node can hold the job back long before it counts
    /// as a straggler.
    pub trigger_factor: f64,
}

impl Default for Balancer {
    /// 64 MiB/s of keys; down to 1/8 of an even share; judged after 4 quiet rounds (2 s at the
    /// default load period, longer than the detection's 3-round sustain); first probe after 10
    /// rounds (5 s); 10 % tolerance (MF's throughput per 500 ms round varied by 7 % between
    /// quiet rounds under the 10gbe profile); overloaded at 1.5× the others' median. (A node whose
    /// serving threads had a quarter of a CPU answered MF's requests in 1.26 ms against
    /// 0.71 ms for the others under the 10gbe profile: 1.8×, below the 2× of detection.)
    fn default() -> Self {
        Self {
            max_bytes_per_sec: 64 << 20,
            min_weight: 0.125,
            settle_rounds: 4,
            probe_after_rounds: 10,
            tolerance: 0.1,
            trigger_factor: 1.5,
        }
    }
}

/// A [`Balancer`] that cannot work.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BalancerError {
    /// A zero byte rate would never move anything.
    #[error("the balancer's byte rate must be positive")]
    ZeroRate,
    /// A minimum weight outside (0, 1].
    #[error("the balancer's minimum weight must be in (0, 1], got {0}")]
    MinWeight(f64),
    /// A tolerance outside [0, 1).
    #[error("the balancer's tolerance must be in [0, 1), got {0}")]
    Tolerance(f64),
    /// Zero rounds to judge by.
    #[error("the balancer's settle and probe rounds must be at least 1")]
    ZeroRounds,
    /// A trigger factor that is not finite or not above 1.
    #[error("the balancer's trigger factor must be finite and above 1, got {0}")]
    Trigger(f64),
    /// The balancer acts on load rounds, which need load watching.
    #[error("the load balancer needs load watching (its rounds and scores)")]
    NoLoadWatch,
}

impl Balancer {
    /// Checks that the settings can work.
    pub fn validate(&self) -> Result<(), BalancerError> {
        if self.max_bytes_per_sec == 0 {
            return Err(BalancerError::ZeroRate);
        }
        if !(self.min_weight > 0.0 && self.min_weight <= 1.0) {
            return Err(BalancerError::MinWeight(self.min_weight));
        }
        if !(0.0..1.0).contains(&self.tolerance) {
            return Err(BalancerError::Tolerance(self.tolerance));
        }
        if self.settle_rounds == 0 || self.probe_after_rounds == 0 {
            return Err(BalancerError::ZeroRounds);
        }
        if !(self.trigger_factor.is_finite() && self.trigger_factor > 1.0) {
            return Err(BalancerError::Trigger(self.trigger_factor));
        }
        Ok(())
    }
}

/// What a decision did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionKind {
    /// A straggler's share shrank.
    Shrink,
    /// A node's share grew, to see whether it copes again.
    Probe,
    /// A change was judged and kept.
    Keep,
    /// A change was judged and undone.
    Undo,
}

/// One balancer decision, with the evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct BalanceDecision {
    /// When the coordinator decided.
    pub at: Time,
    /// What it did.
    pub kind: DecisionKind,
    /// The node whose share changed (or whose change was judged).
    pub node: NodeId,
    /// Its weight before and after.
    pub weight: (f64, f64),
    /// Its score and the others' median (ns), if it was scored in the round.
    pub score_ns: Option<(f64, f64)>,
    /// Its capacity and the others' median (keys per busy second), if capacities were
    /// compared in the round: before the change for a shrink or probe, after it for a keep or
    /// undo.
    pub capacity: Option<(f64, f64)>,
    /// Throughput (operations per round) before the change and, when judged, after it.
    pub ops_per_round: (f64, f64),
    /// Buckets the decision moves, and their estimated bytes.
    pub moves: (u32, u64),
}

/// Decisions kept (a run that keeps probing must not grow memory).
pub const MAX_DECISIONS: usize = 64;

/// Throughput rounds kept.
const HISTORY: usize = 64;

/// A straggler whose weight is within this factor of its capacity's share carries its share:
/// capacities are smoothed estimates, and a step that small is not worth its moves.
const CAPACITY_SHARE_SLACK: f64 = 1.1;

/// Bytes a move of placement records only is counted as.
const RECORDS_ONLY_BYTES: u64 = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChangeKind {
    Shrink,
    Probe,
}

/// A change waiting to be judged.
#[derive(Clone, Copy, Debug)]
struct Change {
    kind: ChangeKind,
    node: NodeId,
    weight_before: f64,
    baseline: f64,
}

/// The balancer's state (at the coordinator; inactive elsewhere and without a [`Balancer`]).
#[derive(Debug, Default)]
pub(crate) struct Balance {
    cfg: Option<Balancer>,
    weights: BTreeMap<NodeId, f64>,
    /// Moves decided but not issued yet (bucket, destination, estimated bytes).
    plan: VecDeque<(u32, NodeId, u64)>,
    /// Moves issued and not finished.
    pub(crate) in_flight: u32,
    round: u64,
    /// The last round that had moves planned or in flight.
    busy_round: u64,
    /// Operations per round, the latest last.
    throughput: VecDeque<u64>,
    change: Option<Change>,
    /// Per node: the round of its next probe and the wait after a failed one.
    probes: BTreeMap<NodeId, (u64, u64)>,
    /// Per node whose shrink was undone: the round from which it may shrink again, and the
    /// wait after the next undone one.
    shrink_holds: BTreeMap<NodeId, (u64, u64)>,
    /// Per scored node: rounds in a row in which it was overloaded (0: fine in the latest).
    overloaded: BTreeMap<NodeId, u32>,
    decisions: Vec<BalanceDecision>,
    decisions_dropped: u64,
}

impl Balance {
    pub(crate) fn new(cfg: Option<Balancer>) -> Self {
        if let Some(b) = &cfg {
            b.validate()
                .unwrap_or_else(|e| panic!("{e} (validated by the front ends)"));
        }
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// Mean throughput of the latest `n` rounds (of fewer if there are fewer).
    fn mean_ops(&self, n: usize) -> f64 {
        let n = n.min(self.throughput.len());
        if n == 0 {
            return 0.0;
        }
        let sum: u64 = self.throughput.iter().rev().take(n).sum();
        sum as f64 / n as f64
    }
}

impl Node {
    /// The balancer's decisions (the latest [`MAX_DECISIONS`]), in order; at the coordinator.
    pub fn balance_decisions(&self) -> &[BalanceDecision] {
        &self.balance.decisions
    }

    /// Decisions dropped to keep the list bounded.
    pub fn balance_decisions_dropped(&self) -> u64 {
        self.balance.decisions_dropped
    }

    /// The balancer's weight of each node it changed (1 for every node not named).
    pub fn balance_weights(&self) -> Vec<(NodeId, f64)> {
        self.balance.weights.iter().map(|(&n, &w)| (n, w)).collect()
    }

    /// One balancer round, after a detection round (see the module docs).
    pub(crate) fn balance_round(&mut self, now: Time, round: LoadRound) {
        let Some(cfg) = self.balance.cfg else {
            return;
        };
        if self.dir.coordinator() != self.cfg.id {
            return;
        }
        if !self.lost.is_empty() {
            // After a loss, a first home move would make every remote access fail
            // (`Node::keys_may_be_anywhere`): a cluster that lost a node is left as it is.
            self.balance.plan.clear();
            return;
        }
        self.note_overloads(cfg, &round);
        let b = &mut self.balance;
        b.round += 1;
        b.throughput.push_back(round.ops);
        if b.throughput.len() > HISTORY {
            b.throughput.pop_front();
        }
        self.issue_planned_moves(now, cfg);
        let b = &mut self.balance;
        if !b.plan.is_empty() || b.in_flight > 0 {
            b.busy_round = b.round;
            return;
        }
        if b.round - b.busy_round <= u64::from(cfg.settle_rounds) {
            return;
        }
        match b.change.take() {
            Some(change) => self.judge(now, cfg, change, &round),
            None => self.decide(now, cfg, &round),
        }
    }

    /// Updates each scored node's run of overloaded rounds (unscored nodes keep theirs).
    fn note_overloads(&mut self, cfg: Balancer, round: &LoadRound) {
        // As in detection, fewer than three scored nodes cannot tell a slow node from a slow
        // observer: such a round is no evidence either way.
        if round.scores.len() < 3 {
            return;
        }
        let min_excess = self.load_min_excess_ns() as f64;
        let judged: Vec<(NodeId, bool)> = round
            .scores
            .keys()
            .filter_map(|&n| {
                let (score, others) = self.score_of(n, round)?;
                Some((
                    n,
                    score > cfg.trigger_factor * others && score - others > min_excess,
                ))
            })
            .collect();
        let overloaded = &mut self.balance.overloaded;
        overloaded.retain(|n, _| !self.lost.contains(n));
        for (node, over) in judged {
            let run = overloaded.entry(node).or_default();
            *run = if over { *run + 1 } else { 0 };
        }
    }

    /// Whether `node` was overloaded for the load watch's sustain rounds in a row, or is a
    /// straggler that carries more than its capacity's share. (A node slow by capacity stays a
    /// straggler whatever its load: once its weight is its capacity's share, only response
    /// times that are still too slow shrink it further, and it is not probed until detection
    /// finds it fine again.)
    fn wants_shrink(&self, node: NodeId, round: &LoadRound) -> bool {
        let sustain = self.load_sustain();
        if (self.balance.overloaded.get(&node)).is_some_and(|&run| run >= sustain) {
            return true;
        }
        if !self.stragglers().contains(&node) {
            return false;
        }
        match round.capacities.get(&node) {
            Some(&(capacity, others)) if (capacity / others).is_finite() => {
                self.weight(node) > capacity / others * CAPACITY_SHARE_SLACK
            }
            _ => true,
        }
    }

    /// Issues planned moves up to this round's byte budget (at least one).
    fn issue_planned_moves(&mut self, now: Time, cfg: Balancer) {
        let period = self.load_period_ns();
        let budget = (cfg.max_bytes_per_sec as f64 * period as f64 / 1e9) as u64;
        let mut spent = 0u64;
        while let Some(&(bucket, to, bytes)) = self.balance.plan.front() {
            if spent > 0 && spent.saturating_add(bytes) > budget {
                break;
            }
            self.balance.plan.pop_front();
            let from = self.dir.bucket_home(bucket);
            if from == to || self.lost.contains(&from) || self.lost.contains(&to) {
                continue;
            }
            spent = spent.saturating_add(bytes);
            self.balance.in_flight += 1;
            add(&self.counters.balancer_moves, 1);
            add(&self.counters.balancer_bytes, bytes);
            self.queue_balancer_move(now, bucket, to);
        }
    }

    /// Judges the change whose moves completed `settle_rounds` rounds ago.
    fn judge(&mut self, now: Time, cfg: Balancer, change: Change, round: &LoadRound) {
        let after = self.balance.mean_ops(cfg.settle_rounds as usize);
        let held = after >= change.baseline * (1.0 - cfg.tolerance);
        // A probe fails if the node is overloaded again at all (no need to wait for a run).
        let straggling = self.stragglers().contains(&change.node)
            || self
                .balance
                .overloaded
                .get(&change.node)
                .is_some_and(|&run| run > 0);
        let keep = match change.kind {
            ChangeKind::Shrink => held,
            ChangeKind::Probe => held && !straggling,
        };
        let weight = self.weight(change.node);
        let round_now = self.balance.round;
        let wait = u64::from(cfg.probe_after_rounds);
        let moves = if keep {
            if change.kind == ChangeKind::Shrink {
                // The wait a failed probe doubled stays: a node that keeps turning overloaded
                // after probes is probed ever more rarely.
                let probe = self.balance.probes.entry(change.node).or_insert((0, wait));
                probe.1 = probe.1.max(wait);
                probe.0 = round_now.saturating_add(probe.1);
            }
            (0, 0)
        } else {
            self.set_weight(change.node, change.weight_before);
            // Whatever failed waits twice as long before it is tried again.
            let holds = match change.kind {
                ChangeKind::Probe => &mut self.balance.probes,
                ChangeKind::Shrink => &mut self.balance.shrink_holds,
            };
            let entry = holds.entry(change.node).or_insert((0, wait / 2));
            entry.1 = entry.1.saturating_mul(2).max(1);
            *entry = (round_now.saturating_add(entry.1), entry.1);
            self.plan_moves()
        };
        self.record(BalanceDecision {
            at: now,
            kind: if keep {
                DecisionKind::Keep
            } else {
                DecisionKind::Undo
            },
            node: change.node,
            weight: (weight, self.weight(change.node)),
            score_ns: self.score_of(change.node, round),
            capacity: round.capacities.get(&change.node).copied(),
            ops_per_round: (change.baseline, after),
            moves,
        });
    }

    /// Shrinks the worst straggler, or probes a node that is doing well again.
    fn decide(&mut self, now: Time, cfg: Balancer, round: &LoadRound) {
        let baseline = self.balance.mean_ops(cfg.settle_rounds as usize);
        let live: Vec<NodeId> = self
            .dir
            .members()
            .iter()
            .copied()
            .filter(|&n| !self.lost.contains(&n) && !self.membership.is_draining(n))
            .collect();
        let worst = live
            .iter()
            .copied()
            .filter(|&n| self.wants_shrink(n, round))
            .filter(|&n| self.weight(n) > cfg.min_weight + 1e-9)
            .filter(|n| {
                self.balance
                    .shrink_holds
                    .get(n)
                    .is_none_or(|&(at, _)| at <= self.balance.round)
            })
            // The most overloaded: the largest step down relative to its weight (a node
            // shrunk far already has a low target, not necessarily the worst load).
            .map(|n| (n, self.shrink_target(n, round)))
            .min_by(|a, b| {
                let step = |&(n, target): &(NodeId, f64)| target / self.weight(n);
                step(a).total_cmp(&step(b)).then(a.0.cmp(&b.0))
            });
        let (kind, node, target) = if let Some((node, target)) = worst {
            (ChangeKind::Shrink, node, target.max(cfg.min_weight))
        } else {
            let round_now = self.balance.round;
            let due = self
                .balance
                .weights
                .iter()
                .filter(|&(n, &w)| {
                    w < 1.0
                        && !self.lost.contains(n)
                        && !self.stragglers().contains(n)
                        && self.balance.overloaded.get(n).is_none_or(|&run| run == 0)
                })
                .find(|&(n, _)| {
                    self.balance
                        .probes
                        .get(n)
                        .is_none_or(|&(at, _)| at <= round_now)
                })
                .map(|(&n, &w)| (n, w));
            let Some((node, weight)) = due else {
                return;
            };
            let grown = weight * 2.0;
            (
                ChangeKind::Probe,
                node,
                if grown >= 0.95 { 1.0 } else { grown },
            )
        };
        let before = self.weight(node);
        self.set_weight(node, target);
        let moves = self.plan_moves();
        if moves.0 == 0 {
            // Too few buckets for the step to change anything: nothing to judge. A probe's
            // weight stands (it only gives back); a shrink's does not, so that unjudged steps
            // cannot walk a weight down.
            if kind == ChangeKind::Shrink {
                self.set_weight(node, before);
            }
            return;
        }
        self.balance.change = Some(Change {
            kind,
            node,
            weight_before: before,
            baseline,
        });
        self.record(BalanceDecision {
            at: now,
            kind: match kind {
                ChangeKind::Shrink => DecisionKind::Shrink,
                ChangeKind::Probe => DecisionKind::Probe,
            },
            node,
            weight: (before, target),
            score_ns: self.score_of(node, round),
            capacity: round.capacities.get(&node).copied(),
            ops_per_round: (baseline, 0.0),
            moves,
        });
    }

    /// The weight an overloaded `node` shrinks to (before the floor): its share in proportion
    /// to its measured capacity against the others' median (a capacity does not depend on the
    /// load the node carries, so it is the target itself), or its weight times the ratio of
    /// the others' median response time to its own (which does depend on the load, so it
    /// only says how far to step), whichever is lower when both are known (a node slowed by
    /// its network answers slowly at a normal capacity); half its weight without either. Each
    /// step takes at least a quarter and at most three quarters off: a node overloaded at its
    /// capacity's share shrinks further, and one step never strips a node on one round's
    /// figures.
    fn shrink_target(&self, node: NodeId, round: &LoadRound) -> f64 {
        let weight = self.weight(node);
        let by_capacity = (round.capacities.get(&node))
            .map(|&(capacity, others)| capacity / others)
            .filter(|r| r.is_finite());
        let by_response = (self.score_of(node, round))
            .map(|(score, others)| weight * others / score)
            .filter(|r| r.is_finite());
        let target = match (by_capacity, by_response) {
            (Some(a), Some(b)) => a.min(b),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => weight * 0.5,
        };
        target.clamp(weight * 0.25, weight * 0.75)
    }

    fn weight(&self, node: NodeId) -> f64 {
        self.balance.weights.get(&node).copied().unwrap_or(1.0)
    }

    fn set_weight(&mut self, node: NodeId, weight: f64) {
        if weight >= 1.0 {
            self.balance.weights.remove(&node);
        } else {
            self.balance.weights.insert(node, weight);
        }
    }

    /// `node`'s score this round and the median of the others' (ns).
    fn score_of(&self, node: NodeId, round: &LoadRound) -> Option<(f64, f64)> {
        let score = *round.scores.get(&node)?;
        let mut others: Vec<f64> = round
            .scores
            .iter()
            .filter(|&(&n, _)| n != node)
            .map(|(_, &s)| s)
            .collect();
        if others.is_empty() {
            return None;
        }
        others.sort_by(f64::total_cmp);
        Some((score, crate::load::median(&others)))
    }

    fn record(&mut self, decision: BalanceDecision) {
        let b = &mut self.balance;
        if b.decisions.len() == MAX_DECISIONS {
            b.decisions.remove(0);
            b.decisions_dropped += 1;
        }
        b.decisions.push(decision);
    }

    /// Replaces the plan by the moves that bring every live node to its target share; returns
    /// how many buckets move and their estimated bytes.
    fn plan_moves(&mut self) -> (u32, u64) {
        let live: Vec<NodeId> = self
            .dir
            .members()
            .iter()
            .copied()
            .filter(|&n| !self.lost.contains(&n) && !self.membership.is_draining(n))
            .collect();
        let mut held: BTreeMap<NodeId, Vec<u32>> = live.iter().map(|&n| (n, Vec::new())).collect();
        for bucket in 0..self.dir.num_buckets() {
            if let Some(list) = held.get_mut(&self.dir.bucket_home(bucket)) {
                list.push(bucket);
            }
        }
        let total: usize = held.values().map(Vec::len).sum();
        let weights: Vec<f64> = live.iter().map(|&n| self.weight(n)).collect();
        let targets = shares(total, &weights);
        let mut deficit: BTreeMap<NodeId, usize> = BTreeMap::new();
        let mut excess: Vec<(NodeId, usize)> = Vec::new();
        for (&node, &target) in live.iter().zip(&targets) {
            let have = held[&node].len();
            if have < target {
                deficit.insert(node, target - have);
            } else if have > target {
                excess.push((node, have - target));
            }
        }
        let mut plan = VecDeque::new();
        let mut bytes = 0u64;
        for (giver, mut count) in excess {
            let buckets = &held[&giver];
            // Buckets whose first home wants them back go first, then the giver's last ones.
            let mut order: Vec<u32> = buckets
                .iter()
                .copied()
                .filter(|&b| deficit.contains_key(&self.dir.first_home(b)))
                .collect();
            order.extend(
                buckets
                    .iter()
                    .rev()
                    .copied()
                    .filter(|&b| !deficit.contains_key(&self.dir.first_home(b))),
            );
            for bucket in order {
                if count == 0 {
                    break;
                }
                let first = self.dir.first_home(bucket);
                let to = if deficit.get(&first).is_some_and(|&d| d > 0) {
                    first
                } else {
                    match deficit
                        .iter()
                        .filter(|&(_, &d)| d > 0)
                        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                    {
                        Some((&n, _)) => n,
                        None => break,
                    }
                };
                *deficit.get_mut(&to).expect("a receiver") -= 1;
                count -= 1;
                let estimate = self.bucket_bytes(bucket);
                bytes += estimate;
                plan.push_back((bucket, to, estimate));
            }
        }
        let moves = plan.len() as u32;
        self.balance.plan = plan;
        (moves, bytes)
    }

    /// Estimated bytes a move of `bucket` sends: its keys' records under static allocation.
    fn bucket_bytes(&self, bucket: u32) -> u64 {
        if self.policy.keys_move() {
            return RECORDS_ONLY_BYTES;
        }
        let space = &self.cfg.space;
        if space.is_sparse() {
            // Which keys exist is not known here; the keys of one bucket are few.
            return RECORDS_ONLY_BYTES;
        }
        let (keys, first) = match self.dir.bucket_range(bucket) {
            Some(range) => (range.end - range.start, range.start),
            None => (
                space.num_keys().div_ceil(u64::from(self.dir.num_buckets())),
                0,
            ),
        };
        if keys == 0 {
            return RECORDS_ONLY_BYTES;
        }
        keys * space.record_len(first) as u64 * 4 + RECORDS_ONLY_BYTES
    }
}

/// Whole-bucket targets proportional to `weights`, summing to `total` (largest remainders,
/// ties to the lower index).
fn shares(total: usize, weights: &[f64]) -> Vec<usize> {
    let sum: f64 = weights.iter().sum();
    if weights.is_empty() || sum <= 0.0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut targets: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut left = total - targets.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for i in order {
        if left == 0 {
            break;
        }
        targets[i] += 1;
        left -= 1;
    }
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_weights_and_sum_to_the_total() {
        assert_eq!(shares(12, &[1.0, 1.0, 1.0]), [4, 4, 4]);
        assert_eq!(shares(10, &[1.0, 1.0, 1.0]), [4, 3, 3]);
        assert_eq!(shares(13, &[1.0, 0.25, 1.0, 1.0]), [4, 1, 4, 4]);
        assert_eq!(shares(0, &[1.0, 1.0]), [0, 0]);
        assert!(shares(5, &[]).is_empty());
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert_eq!(Balancer::default().validate(), Ok(()));
        for bad in [
            Balancer {
                max_bytes_per_sec: 0,
                ..Balancer::default()
            },
            Balancer {
                min_weight: 0.0,
                ..Balancer::default()
            },
            Balancer {
                tolerance: 1.0,
                ..Balancer::default()
            },
            Balancer {
                settle_rounds: 0,
                ..Balancer::default()
            },
            Balancer {
                trigger_factor: 1.0,
                ..Balancer::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
