//! Exhaustive exploration of every interleaving of a small scenario (bounded model checking).
//!
//! [`explore`] runs a depth-first search over the event choices of a [`Sim`]: at every step it
//! branches over each link whose head frame can be delivered and each worker whose next op can
//! be issued ([`Sim::choices`]), until no event is left (a *complete execution*, handed to the
//! caller's check) or the depth bound is reached (a *truncated* one, also handed over, flagged).
//!
//! `Node` is not `Clone`, so the search re-runs the scenario from its initial state along the
//! choice prefix whenever it backtracks. States are merged by [`Sim::state_key`]: every node is a
//! deterministic function of the inputs it received, so two interleavings that gave every node
//! the same inputs in the same order and produced the same history events in the same order
//! (same invocations, returns and outcomes) continue identically and their histories cannot be
//! told apart by any checker. Interleavings that differ only in the order of independent events
//! (deliveries at different nodes that change no history order) are thereby explored once. The
//! search still counts every distinct interleaving it covers, merged ones included.
//!
//! Requirement: the scenario must not lose frames at random (`drop_probability` zero), since the
//! random number generator's state is not part of the state key. Delays and think times do not
//! matter: choices ignore ready times.

use std::collections::HashMap;

use crate::sim::{Choice, Sim};

/// Environment variable setting the depth bound (long mode).
pub const DEPTH_VAR: &str = "ROAM_SIM_EXHAUSTIVE_DEPTH";

/// Bounds of an exploration.
#[derive(Clone, Copy, Debug)]
pub struct ExploreConfig {
    /// Executions longer than this many events are cut (and reported as truncated).
    pub max_depth: usize,
    /// Whether to merge interleavings that reach the same state (see the module docs).
    pub merge_states: bool,
}

impl ExploreConfig {
    /// A depth bound of `default_depth`, or of `ROAM_SIM_EXHAUSTIVE_DEPTH` if set; merging on.
    ///
    /// # Panics
    /// If the variable is set but is not a number.
    pub fn from_env(default_depth: usize) -> Self {
        let max_depth = match std::env::var(DEPTH_VAR) {
            Ok(v) => v
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{DEPTH_VAR}={v:?} is not a number")),
            Err(_) => default_depth,
        };
        Self {
            max_depth,
            merge_states: true,
        }
    }

    /// Whether `ROAM_SIM_EXHAUSTIVE_DEPTH` is set (the long mode).
    pub fn long_mode() -> bool {
        std::env::var_os(DEPTH_VAR).is_some()
    }
}

/// What an exploration covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExploreStats {
    /// Complete executions run to the end and checked.
    pub executions_checked: u64,
    /// Executions cut at the depth bound (their prefixes were checked as truncated).
    pub truncated: u64,
    /// Distinct interleavings (event sequences) covered: the checked executions plus every
    /// interleaving that reached an already explored state, counted exactly.
    pub interleavings: u128,
    /// Times an interleaving reached an already explored state and was not re-run.
    pub merged: u64,
    /// Distinct states visited.
    pub states: u64,
    /// Events run, replays included.
    pub steps: u64,
    /// Length of the longest execution.
    pub deepest: usize,
}

struct Explorer<'a, B, C> {
    build: &'a B,
    check: &'a mut C,
    cfg: ExploreConfig,
    stats: ExploreStats,
    /// Interleavings below each explored state.
    memo: HashMap<u128, u128>,
    prefix: Vec<Choice>,
}

/// Explores every interleaving of the scenario `build` creates (see the module docs), calling
/// `check(sim, complete)` at the end of each execution explored: `complete` is false for one cut
/// at the depth bound. Returns what was covered.
///
/// # Panics
/// If the scenario loses frames at random, or if `check` panics (the choice sequence of the
/// failing execution is printed first, for replay with [`replay`]).
pub fn explore<B, C>(build: &B, cfg: ExploreConfig, check: &mut C) -> ExploreStats
where
    B: Fn() -> Sim,
    C: FnMut(&Sim, bool),
{
    let mut sim = build();
    assert!(
        sim.config().drop_probability == 0.0,
        "exhaustive exploration needs a loss-free network (drop_probability 0)"
    );
    let mut explorer = Explorer {
        build,
        check,
        cfg,
        stats: ExploreStats::default(),
        memo: HashMap::new(),
        prefix: Vec::new(),
    };
    explorer.stats.interleavings = explorer.visit(&mut sim);
    explorer.stats.states = explorer.memo.len() as u64 + 1;
    explorer.stats
}

/// Re-runs `choices` on a fresh scenario (to inspect a failing execution).
pub fn replay(build: &impl Fn() -> Sim, choices: &[Choice]) -> Sim {
    let mut sim = build();
    for &c in choices {
        sim.step_choice(c);
    }
    sim
}

impl<B, C> Explorer<'_, B, C>
where
    B: Fn() -> Sim,
    C: FnMut(&Sim, bool),
{
    /// Explores below the current state of `sim` (reached by `self.prefix`); returns the number
    /// of interleavings covered below it.
    fn visit(&mut self, sim: &mut Sim) -> u128 {
        let choices = sim.choices();
        if choices.is_empty() || self.prefix.len() >= self.cfg.max_depth {
            let complete = choices.is_empty();
            self.stats.deepest = self.stats.deepest.max(self.prefix.len());
            if complete {
                self.stats.executions_checked += 1;
            } else {
                self.stats.truncated += 1;
            }
            self.run_check(sim, complete);
            return 1;
        }
        let mut total = 0;
        for (i, &choice) in choices.iter().enumerate() {
            if i > 0 {
                *sim = (self.build)();
                for &c in &self.prefix {
                    sim.step_choice(c);
                }
                self.stats.steps += self.prefix.len() as u64;
            }
            sim.step_choice(choice);
            self.stats.steps += 1;
            self.prefix.push(choice);
            let key = sim.state_key();
            let below = match self.memo.get(&key) {
                Some(&n) if self.cfg.merge_states => {
                    self.stats.merged += 1;
                    n
                }
                _ => {
                    let n = self.visit(sim);
                    self.memo.insert(key, n);
                    n
                }
            };
            total += below;
            self.prefix.pop();
        }
        total
    }

    fn run_check(&mut self, sim: &Sim, complete: bool) {
        let check = &mut *self.check;
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(sim, complete)));
        if let Err(panic) = outcome {
            eprintln!(
                "exhaustive exploration: check failed after {} events; choices: {:?}",
                self.prefix.len(),
                self.prefix
            );
            std::panic::resume_unwind(panic);
        }
    }
}
