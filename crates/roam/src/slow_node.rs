//! The `roam launch --slow-node` schedule: which node gets which CPU quota when.
//!
//! This module owns the specs ([`SlowNode`], `RANK:FACTOR[@START[-END]]`), their validation
//! against a run ([`Schedule`]) and the decision which quotas change as time goes on
//! ([`Tracker`], a pure function of the elapsed time, so any clock can drive it). Enforcing a
//! quota is [`crate::cgroup`]'s job.
//!
//! Invariants:
//! - A factor F means 1/F of one CPU; F = 1, and any time no window covers, means unlimited.
//!   F is finite and in `1..=`[`MAX_FACTOR`]: below 1 would not slow the node, above
//!   [`MAX_FACTOR`] the quota would fall below the kernel's 1 ms minimum.
//! - Windows are half-open, `[START, END)`, in seconds after the nodes start; END > START.
//!   The windows of one rank never overlap, so at any time a rank has at most one factor.
//!   Every rank named exists in the run. All of this is checked before anything is created.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Largest factor: 1 ms of CPU per 100 ms period, the smallest quota the kernel accepts.
pub const MAX_FACTOR: f64 = 100.0;

/// What is wrong with `--slow-node` options.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SlowNodeError {
    /// A spec does not parse or has a value out of range.
    #[error("--slow-node {spec:?}: {reason} (expected RANK:FACTOR[@START[-END]])")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A rank the run does not have.
    #[error("--slow-node {spec}: rank {rank} is out of range, the run has ranks 0..={last}")]
    Rank {
        /// The spec.
        spec: String,
        /// Its rank.
        rank: u32,
        /// The run's last rank.
        last: u32,
    },
    /// Two windows of one rank overlap.
    #[error("--slow-node {0} and {1} overlap: a node has one factor at a time")]
    Overlap(String, String),
}

/// One `--slow-node RANK:FACTOR[@START[-END]]`: node RANK gets 1/FACTOR of one CPU from START
/// until END seconds after the nodes start; without `@` for the whole run, without END until
/// its end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowNode {
    /// The node.
    pub rank: u32,
    /// How many times less CPU than one full CPU (1 = unlimited).
    pub factor: f64,
    /// When the quota starts, after the nodes start.
    pub start: Duration,
    /// When it ends; `None`: at the end of the run.
    pub end: Option<Duration>,
}

impl SlowNode {
    fn overlaps(&self, other: &Self) -> bool {
        let before = |a: &Self, b: &Self| a.end.is_some_and(|e| e <= b.start);
        !before(self, other) && !before(other, self)
    }

    fn covers(&self, t: Duration) -> bool {
        self.start <= t && self.end.is_none_or(|e| t < e)
    }
}

impl fmt::Display for SlowNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.rank, self.factor)?;
        match self.end {
            None if self.start.is_zero() => Ok(()),
            None => write!(f, "@{}", self.start.as_secs_f64()),
            Some(e) => write!(f, "@{}-{}", self.start.as_secs_f64(), e.as_secs_f64()),
        }
    }
}

impl FromStr for SlowNode {
    type Err = SlowNodeError;

    fn from_str(s: &str) -> Result<Self, SlowNodeError> {
        let bad = |reason: String| SlowNodeError::Spec {
            spec: s.to_owned(),
            reason,
        };
        let (rank, rest) = s
            .trim()
            .split_once(':')
            .ok_or_else(|| bad("no ':'".into()))?;
        let rank = rank
            .parse()
            .map_err(|_| bad(format!("RANK {rank:?} is not a node number")))?;
        let (factor, window) = match rest.split_once('@') {
            Some((f, w)) => (f, Some(w)),
            None => (rest, None),
        };
        let factor: f64 = factor
            .parse()
            .map_err(|_| bad(format!("FACTOR {factor:?} is not a number")))?;
        if !factor.is_finite() {
            return Err(bad(format!("FACTOR must be finite, got {factor}")));
        }
        if !(1.0..=MAX_FACTOR).contains(&factor) {
            return Err(bad(format!(
                "FACTOR must be in 1..={MAX_FACTOR} (the node gets 1/FACTOR of one CPU; 1 is \
                 unlimited, {MAX_FACTOR} the kernel's smallest quota), got {factor}"
            )));
        }
        let seconds = |what: &str, v: &str| {
            v.parse::<f64>()
                .ok()
                .and_then(|x| Duration::try_from_secs_f64(x).ok())
                .ok_or_else(|| bad(format!("{what} {v:?} is not a number of seconds >= 0")))
        };
        let (start, end) = match window.map(|w| w.split_once('-').ok_or(w)) {
            None => (Duration::ZERO, None),
            Some(Err(start)) => (seconds("START", start)?, None),
            Some(Ok((start, end))) => (seconds("START", start)?, Some(seconds("END", end)?)),
        };
        if end.is_some_and(|e| e <= start) {
            return Err(bad("END must be after START".into()));
        }
        Ok(Self {
            rank,
            factor,
            start,
            end,
        })
    }
}

/// The validated `--slow-node` specs of one run.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    specs: Vec<SlowNode>,
}

impl Schedule {
    /// Checks the specs against a run of `nodes` nodes: every rank exists and no two windows of
    /// one rank overlap.
    pub fn new(specs: &[SlowNode], nodes: u32) -> Result<Self, SlowNodeError> {
        for (i, a) in specs.iter().enumerate() {
            if a.rank >= nodes {
                return Err(SlowNodeError::Rank {
                    spec: a.to_string(),
                    rank: a.rank,
                    last: nodes.saturating_sub(1),
                });
            }
            if let Some(b) = specs[..i]
                .iter()
                .find(|b| b.rank == a.rank && b.overlaps(a))
            {
                return Err(SlowNodeError::Overlap(b.to_string(), a.to_string()));
            }
        }
        Ok(Self {
            specs: specs.to_vec(),
        })
    }

    /// Whether no node is slowed.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The ranks slowed at some time, ascending.
    pub fn ranks(&self) -> Vec<u32> {
        let mut ranks: Vec<u32> = self.specs.iter().map(|s| s.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }

    /// Node `rank`'s factor `t` after the nodes started; `None`: unlimited.
    pub fn factor_at(&self, rank: u32, t: Duration) -> Option<f64> {
        self.specs
            .iter()
            .find(|s| s.rank == rank && s.covers(t))
            .map(|s| s.factor)
            .filter(|&f| f > 1.0)
    }
}

/// Which quotas change as time goes on: remembers the factor applied last to each rank.
#[derive(Clone, Debug)]
pub struct Tracker {
    schedule: Schedule,
    applied: Vec<(u32, Option<f64>)>,
}

impl Tracker {
    /// Starts with every slowed rank unlimited, as a new cgroup is.
    pub fn new(schedule: Schedule) -> Self {
        let applied = schedule.ranks().into_iter().map(|r| (r, None)).collect();
        Self { schedule, applied }
    }

    /// The changes due at time `t`, as (rank, factor; `None`: unlimited), now taken as applied.
    pub fn due(&mut self, t: Duration) -> Vec<(u32, Option<f64>)> {
        let mut changes = Vec::new();
        for (rank, applied) in &mut self.applied {
            let want = self.schedule.factor_at(*rank, t);
            if want != *applied {
                *applied = want;
                changes.push((*rank, want));
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> SlowNode {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn specs_parse_in_all_three_forms() {
        let always = spec("1:4");
        assert_eq!((always.rank, always.factor), (1, 4.0));
        assert_eq!((always.start, always.end), (Duration::ZERO, None));
        let from = spec("3:2.5@10");
        assert_eq!((from.rank, from.factor), (3, 2.5));
        assert_eq!((from.start, from.end), (secs(10.0), None));
        let window = spec(" 0:4@0.5-30 ");
        assert_eq!((window.start, window.end), (secs(0.5), Some(secs(30.0))));
        for s in ["1:4", "3:2.5@10", "0:4@0.5-30", "2:1"] {
            assert_eq!(spec(s).to_string(), s.trim());
        }
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (s, says) in [
            ("1", "no ':'"),
            ("x:4", "RANK \"x\""),
            ("-1:4", "RANK \"-1\""),
            ("1:fast", "FACTOR \"fast\""),
            ("1:", "FACTOR \"\""),
            ("1:inf", "finite"),
            ("1:NaN", "finite"),
            ("1:0", "1..=100"),
            ("1:-4", "1..=100"),
            ("1:0.5", "1..=100"),
            ("1:101", "1..=100"),
            ("1:4@", "START \"\""),
            ("1:4@soon", "START \"soon\""),
            ("1:4@-1-3", "START \"\""),
            ("1:4@1-", "END \"\""),
            ("1:4@1-2-3", "END \"2-3\""),
            ("1:4@3-2", "END must be after START"),
            ("1:4@3-3", "END must be after START"),
        ] {
            let e = s.parse::<SlowNode>().unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("RANK:FACTOR"), "{s}: {e}");
        }
    }

    #[test]
    fn schedules_reject_unknown_ranks_and_overlapping_windows() {
        let ok = |specs: &[&str], nodes| {
            Schedule::new(&specs.iter().map(|s| spec(s)).collect::<Vec<_>>(), nodes)
        };
        assert_eq!(ok(&["1:4", "0:2@5-9"], 2).unwrap().ranks(), [0, 1]);
        // Adjacent windows and several windows per rank are fine.
        let s = ok(&["1:4@0-10", "1:2@10-20", "1:8@30"], 2).unwrap();
        assert_eq!(s.ranks(), [1]);
        assert!(ok(&[], 1).unwrap().is_empty());

        let e = ok(&["0:4", "2:4"], 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--slow-node 2:4: rank 2 is out of range, the run has ranks 0..=1"
        );
        for pair in [
            ["1:4", "1:2@5"],
            ["1:4@0-10", "1:2@9.5-20"],
            ["1:2@5-6", "1:4@0"],
            ["1:2@5", "1:4@1-5.1"],
        ] {
            let e = ok(&pair, 2).unwrap_err();
            assert!(matches!(e, SlowNodeError::Overlap(..)), "{pair:?}: {e}");
            assert!(e.to_string().contains(pair[0]), "{e}");
        }
    }

    #[test]
    fn the_tracker_toggles_quotas_on_an_injected_clock() {
        let specs = ["1:4@10-30", "1:2@30-40", "0:3", "2:1@0-5", "3:8@1"].map(spec);
        let mut t = Tracker::new(Schedule::new(&specs, 4).unwrap());
        // At the start: rank 0 throughout, nothing yet for 1, factor 1 is no quota at all.
        assert_eq!(t.due(Duration::ZERO), [(0, Some(3.0))]);
        assert_eq!(t.due(Duration::ZERO), []);
        assert_eq!(t.due(secs(1.0)), [(3, Some(8.0))]);
        assert_eq!(t.due(secs(9.999)), []);
        assert_eq!(t.due(secs(10.0)), [(1, Some(4.0))]);
        assert_eq!(t.due(secs(29.9)), []);
        // From one window straight into the next, then back to unlimited.
        assert_eq!(t.due(secs(30.0)), [(1, Some(2.0))]);
        assert_eq!(t.due(secs(40.0)), [(1, None)]);
        assert_eq!(t.due(secs(1e6)), []);

        // A clock that jumps over a whole window and one that goes back both end up right.
        let mut t = Tracker::new(Schedule::new(&specs, 4).unwrap());
        assert_eq!(t.due(secs(50.0)), [(0, Some(3.0)), (3, Some(8.0))]);
        assert_eq!(t.due(secs(15.0)), [(1, Some(4.0))]);
    }
}
