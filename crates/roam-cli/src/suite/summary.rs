//! Aggregates the runs of a suite into cells (one per workload, profile, workers per node, mode,
//! sampling scheme and node count) of medians with min–max over repetitions, derives the
//! comparisons (speed-up of lapse over the classic modes and of nups over lapse and classic,
//! the CPU overhead ratio over `single` of every mode), and renders them as the Markdown tables
//! printed at the end of a suite and saved as `summary.md`, with the NuPS modes' replica
//! figures and, for the workloads that sample negatives, quality against efficiency per scheme.
//!
//! A mode that ran with more than one sampling scheme for a workload is shown as one
//! configuration per scheme, labelled `mode[scheme]` (`nups[pool:16]`); where a mode is the
//! reference of a comparison (the `over X` of a speed-up, `single` of the CPU overhead ratio),
//! its default scheme's runs are taken (those the suite ran without `--sampling`).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use super::plan::{App, Mode, Profile};
use super::record::{RunRecord, Status};

#[path = "summary_tables.rs"]
mod tables;
pub(crate) use tables::metric_label;

/// The project's aim for the CPU overhead ratio on every workload: CPU seconds per epoch, summed
/// over nodes, at most this many times `single`'s. The summary marks the cells above it.
pub(crate) const CPU_OVERHEAD_AIM: f64 = 1.5;

/// Median and range of a figure over repetitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stat {
    /// Median (mean of the middle two for an even count).
    pub(crate) median: f64,
    /// Smallest value.
    pub(crate) min: f64,
    /// Largest value.
    pub(crate) max: f64,
    /// Values.
    pub(crate) n: usize,
}

impl Stat {
    /// Of `values`; `None` when empty.
    pub(crate) fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// `self / other`: the ratio of the medians, with the range of the extreme combinations
    /// (smallest over largest, largest over smallest).
    pub(crate) fn ratio(&self, other: &Self) -> Option<Self> {
        (other.median > 0.0 && other.min > 0.0 && other.max > 0.0).then(|| Self {
            median: self.median / other.median,
            min: self.min / other.max,
            max: self.max / other.min,
            n: self.n.min(other.n),
        })
    }

    /// `median (min–max)` with `digits` significant-ish decimals; just the value for one run.
    pub(crate) fn show(&self, digits: usize) -> String {
        let f = |x: f64| fmt_num(x, digits);
        if self.n <= 1 || f(self.min) == f(self.max) {
            f(self.median)
        } else {
            format!("{} ({}–{})", f(self.median), f(self.min), f(self.max))
        }
    }
}

/// A number with `digits` decimals below 10, fewer above, and k/M suffixes for large ones.
pub(crate) fn fmt_num(x: f64, digits: usize) -> String {
    let a = x.abs();
    if a >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.1} k", x / 1e3)
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{:.*}", digits.saturating_sub(1), x)
    } else {
        format!("{x:.digits$}")
    }
}

/// The negative-sampling scheme of a configuration, as the job reported it (`pool:16`); `None`
/// for the workloads that do not sample and in results files that predate the suite's
/// recording it. Interned, so that keys stay `Copy`; ordered naive, preloc, pool by reuse
/// (strict after postponing), local, local:next, then any other name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct SchemeName(pub(crate) Option<&'static str>);

impl SchemeName {
    /// The interned name.
    pub(crate) fn of(name: Option<&str>) -> Self {
        static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
        Self(name.map(|n| {
            let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(&known) = names.get(n) {
                return known;
            }
            let leaked: &'static str = Box::leak(n.to_owned().into_boxed_str());
            names.insert(leaked);
            leaked
        }))
    }

    /// The name, or `–`.
    pub(crate) fn show(self) -> &'static str {
        self.0.unwrap_or("–")
    }

    /// Sort rank: (family, parameter, variant).
    fn rank(self) -> (u8, u32, u8) {
        let Some(name) = self.0 else {
            return (0, 0, 0);
        };
        match name.parse::<roam::Scheme>() {
            Ok(roam::Scheme::Naive) => (1, 0, 0),
            Ok(roam::Scheme::Preloc) => (2, 0, 0),
            Ok(roam::Scheme::Pool { reuse, postpone }) => (3, reuse, u8::from(!postpone)),
            Ok(roam::Scheme::Local { next }) => (4, 0, u8::from(next)),
            Err(_) => (5, 0, 0),
        }
    }
}

impl PartialOrd for SchemeName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SchemeName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank()
            .cmp(&other.rank())
            .then_with(|| self.0.cmp(&other.0))
    }
}

/// What identifies a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct CellKey {
    /// Workload.
    pub(crate) app: App,
    /// Network.
    pub(crate) profile: Profile,
    /// Workers per node.
    pub(crate) workers_per_node: u32,
    /// Mode.
    pub(crate) mode: Mode,
    /// Negative-sampling scheme.
    pub(crate) sampling: SchemeName,
    /// Nodes.
    pub(crate) nodes: u32,
}

/// The repetitions of one configuration.
#[derive(Clone, Debug)]
pub(crate) struct Cell {
    /// Runs.
    pub(crate) runs: usize,
    /// Runs that timed out.
    pub(crate) timeouts: usize,
    /// Runs that failed.
    pub(crate) failed: usize,
    /// Mean epoch seconds per run.
    pub(crate) epoch_seconds: Option<Stat>,
    /// Mean CPU seconds per epoch (all processes) per run.
    pub(crate) epoch_cpu: Option<Stat>,
    /// Local access fraction per run.
    pub(crate) local_fraction: Option<Stat>,
    /// Bytes sent per data point per run.
    pub(crate) bytes_per_point: Option<Stat>,
    /// The numeric replica figures (NuPS modes) per run, by name.
    pub(crate) replica: BTreeMap<String, Stat>,
    /// The workload's quality metric after the last epoch per run (see
    /// [`RunRecord::quality`]).
    pub(crate) quality: Option<Stat>,
    /// The quality metric's name (`mrr`, `topic_auc`, ...).
    pub(crate) quality_metric: Option<String>,
    /// Fraction of `local` samples that fell back to a remote key, per run.
    pub(crate) fallback_fraction: Option<Stat>,
}

impl Cell {
    /// The run count, with the timed-out and failed ones.
    pub(crate) fn runs_shown(&self) -> String {
        match (self.timeouts, self.failed) {
            (0, 0) => format!("{}", self.runs),
            (t, 0) => format!("{} ({t} timed out)", self.runs),
            (0, f) => format!("{} ({f} failed)", self.runs),
            (t, f) => format!("{} ({t} timed out, {f} failed)", self.runs),
        }
    }
}

/// All cells of a suite.
#[derive(Clone, Debug, Default)]
pub(crate) struct Summary {
    /// By configuration.
    pub(crate) cells: BTreeMap<CellKey, Cell>,
    /// The default scheme of each workload and mode: that of the runs without `--sampling`.
    pub(crate) defaults: BTreeMap<(App, Mode), SchemeName>,
}

impl Summary {
    /// Groups `runs` by configuration.
    pub(crate) fn from_runs(runs: &[RunRecord]) -> Self {
        let mut groups: BTreeMap<CellKey, Vec<&RunRecord>> = BTreeMap::new();
        let mut defaults = BTreeMap::new();
        for r in runs {
            let sampling = SchemeName::of(r.sampling.as_deref());
            let key = CellKey {
                app: r.app,
                profile: r.profile,
                workers_per_node: r.workers_per_node,
                mode: r.mode,
                sampling,
                nodes: r.nodes,
            };
            groups.entry(key).or_default().push(r);
            if r.sampling_requested.is_none() {
                defaults.entry((r.app, r.mode)).or_insert(sampling);
            }
        }
        let cells = groups
            .into_iter()
            .map(|(key, rs)| {
                let ok: Vec<&RunRecord> = rs.iter().copied().filter(|r| r.ok()).collect();
                let stat = |f: &dyn Fn(&RunRecord) -> Option<f64>| {
                    Stat::of(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
                };
                let cell = Cell {
                    runs: rs.len(),
                    timeouts: rs.iter().filter(|r| r.status == Status::Timeout).count(),
                    failed: rs.iter().filter(|r| r.status == Status::Failed).count(),
                    epoch_seconds: stat(&RunRecord::epoch_seconds),
                    epoch_cpu: stat(&RunRecord::epoch_cpu_seconds),
                    local_fraction: stat(&|r| r.counters.as_ref().map(|c| c.local_fraction)),
                    bytes_per_point: stat(&RunRecord::bytes_per_point),
                    replica: replica_stats(&ok),
                    quality: stat(&|r| r.quality().map(|q| q.1)),
                    quality_metric: ok.iter().find_map(|r| r.quality()).map(|q| q.0),
                    fallback_fraction: stat(&RunRecord::fallback_fraction),
                };
                (key, cell)
            })
            .collect();
        Self { cells, defaults }
    }

    /// The sampling schemes `app` ran with in `mode`, in [`SchemeName`] order.
    pub(crate) fn schemes(&self, app: App, mode: Mode) -> Vec<SchemeName> {
        let set: BTreeSet<SchemeName> = self
            .cells
            .keys()
            .filter(|k| k.app == app && k.mode == mode)
            .map(|k| k.sampling)
            .collect();
        set.into_iter().collect()
    }

    /// The scheme of `app` in `mode` that comparisons take when the mode is their reference:
    /// that of the runs without `--sampling`, else the first of [`Self::schemes`].
    pub(crate) fn default_scheme(&self, app: App, mode: Mode) -> SchemeName {
        self.defaults
            .get(&(app, mode))
            .copied()
            .or_else(|| self.schemes(app, mode).first().copied())
            .unwrap_or_default()
    }

    /// `key` in `mode`: `key` itself if it is in `mode`, else the same configuration in `mode`
    /// with that mode's default scheme.
    pub(crate) fn variant(&self, key: CellKey, mode: Mode) -> CellKey {
        if key.mode == mode {
            key
        } else {
            CellKey {
                mode,
                sampling: self.default_scheme(key.app, mode),
                ..key
            }
        }
    }

    /// Whether `app` ran `mode` with more than one sampling scheme.
    pub(crate) fn several_schemes(&self, app: App, mode: Mode) -> bool {
        self.schemes(app, mode).len() > 1
    }

    /// The configuration's name in tables and legends: the mode, followed by the scheme in
    /// brackets when the workload ran the mode with more than one (`nups[pool:16]`).
    pub(crate) fn label(&self, key: CellKey) -> String {
        match key.sampling.0 {
            Some(s) if self.several_schemes(key.app, key.mode) => {
                format!("{}[{s}]", key.mode.name())
            }
            _ => key.mode.name().to_string(),
        }
    }

    /// The cell of a configuration. `single`, and any mode at one node, ran on loopback only
    /// (no link is used), so other profiles fall back to the loopback cell.
    pub(crate) fn cell(&self, mut key: CellKey) -> Option<&Cell> {
        if key.mode == Mode::Single {
            key.nodes = 1;
        }
        self.cells.get(&key).or_else(|| {
            (key.nodes == 1).then_some(())?;
            self.cells.get(&CellKey {
                profile: Profile::Loopback,
                ..key
            })
        })
    }

    /// Epoch time of `over` divided by lapse's, at the same configuration.
    pub(crate) fn speedup(&self, key: CellKey, over: Mode) -> Option<Stat> {
        self.speedup_of(Mode::Lapse, key, over)
    }

    /// Epoch time of `over` divided by that of `of`, at the same configuration (each mode in
    /// `key`'s scheme if it is `key`'s mode, else in its default scheme).
    pub(crate) fn speedup_of(&self, of: Mode, key: CellKey, over: Mode) -> Option<Stat> {
        let this = self.cell(self.variant(key, of))?;
        let other = self.cell(self.variant(key, over))?;
        other.epoch_seconds?.ratio(&this.epoch_seconds?)
    }

    /// The CPU overhead ratio: CPU seconds per epoch (summed over all node processes) of `key`
    /// over those of `single` (same workload and workers, `single`'s default scheme).
    pub(crate) fn overhead(&self, key: CellKey) -> Option<Stat> {
        let single = self.cell(CellKey {
            nodes: 1,
            ..self.variant(key, Mode::Single)
        })?;
        self.cell(key)?.epoch_cpu?.ratio(&single.epoch_cpu?)
    }

    /// The (workload, profile, workers per node) groups present.
    pub(crate) fn groups(&self) -> Vec<(App, Profile, u32)> {
        let set: BTreeSet<_> = self
            .cells
            .keys()
            .filter(|k| k.mode != Mode::Single && !(k.nodes == 1 && k.profile != Profile::Loopback))
            .map(|k| (k.app, k.profile, k.workers_per_node))
            .collect();
        set.into_iter().collect()
    }

    /// The modes present, in [`Mode::ALL`] order.
    pub(crate) fn modes(&self) -> Vec<Mode> {
        Mode::ALL
            .into_iter()
            .filter(|&m| self.cells.keys().any(|k| k.mode == m))
            .collect()
    }

    /// Node counts of the distributed modes present.
    pub(crate) fn node_counts(&self) -> Vec<u32> {
        let set: BTreeSet<u32> = self
            .cells
            .keys()
            .filter(|k| k.mode != Mode::Single)
            .map(|k| k.nodes)
            .collect();
        set.into_iter().collect()
    }

    /// The node counts `mode` is shown at: one for `single`, else [`Self::node_counts`].
    pub(crate) fn node_counts_of(&self, mode: Mode) -> Vec<u32> {
        if mode == Mode::Single {
            vec![1]
        } else {
            self.node_counts()
        }
    }

    /// The rows of one group, in mode, scheme and node order (single first; one-node rows of
    /// other profiles come from loopback).
    pub(crate) fn rows(&self, app: App, profile: Profile, w: u32) -> Vec<(CellKey, &Cell)> {
        let mut out = Vec::new();
        for mode in Mode::ALL {
            let nodes = self.node_counts_of(mode);
            for sampling in self.schemes(app, mode) {
                for &n in &nodes {
                    let key = CellKey {
                        app,
                        profile,
                        workers_per_node: w,
                        mode,
                        sampling,
                        nodes: n,
                    };
                    if let Some(cell) = self.cell(key) {
                        out.push((key, cell));
                    }
                }
            }
        }
        out
    }
}

/// Median and range of each numeric replica figure over `runs` (a figure some runs lack is
/// taken over those that have it).
fn replica_stats(runs: &[&RunRecord]) -> BTreeMap<String, Stat> {
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in runs {
        for (name, x) in r.replica_numbers() {
            values.entry(name).or_default().push(x);
        }
    }
    values
        .into_iter()
        .filter_map(|(name, v)| Some((name, Stat::of(&v)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_ratios() {
        let a = Stat::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((a.median, a.min, a.max, a.n), (2.0, 1.0, 3.0, 3));
        let b = Stat::of(&[4.0, 2.0]).unwrap();
        assert_eq!(b.median, 3.0);
        let r = b.ratio(&a).unwrap();
        assert_eq!((r.median, r.min, r.max), (1.5, 2.0 / 3.0, 4.0));
        assert!(Stat::of(&[f64::NAN]).is_none());
        assert_eq!(a.show(2), "2.00 (1.00–3.00)");
        assert_eq!(fmt_num(123_456.0, 2), "123.5 k");
    }
}
