//! Aggregates the runs of a suite into cells (one per workload, profile, workers per node, mode
//! and node count) of medians with min–max over repetitions, derives the comparisons (speed-up
//! of lapse over the classic modes, CPU overhead over `single`), and renders them as the
//! Markdown tables printed at the end of a suite and saved as `summary.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::plan::{App, Mode, Profile};
use super::record::{RunRecord, Status};

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
}

/// All cells of a suite.
#[derive(Clone, Debug, Default)]
pub(crate) struct Summary {
    /// By configuration.
    pub(crate) cells: BTreeMap<CellKey, Cell>,
}

impl Summary {
    /// Groups `runs` by configuration.
    pub(crate) fn from_runs(runs: &[RunRecord]) -> Self {
        let mut groups: BTreeMap<CellKey, Vec<&RunRecord>> = BTreeMap::new();
        for r in runs {
            let key = CellKey {
                app: r.app,
                profile: r.profile,
                workers_per_node: r.workers_per_node,
                mode: r.mode,
                nodes: r.nodes,
            };
            groups.entry(key).or_default().push(r);
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
                };
                (key, cell)
            })
            .collect();
        Self { cells }
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
        let lapse = self.cell(CellKey {
            mode: Mode::Lapse,
            ..key
        })?;
        let other = self.cell(CellKey { mode: over, ..key })?;
        other.epoch_seconds?.ratio(&lapse.epoch_seconds?)
    }

    /// CPU seconds per epoch of `key` over those of `single` (same workload and workers).
    pub(crate) fn overhead(&self, key: CellKey) -> Option<Stat> {
        let single = self.cell(CellKey {
            mode: Mode::Single,
            nodes: 1,
            ..key
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

    /// The rows of one group, in mode and node order (single first; one-node rows of other
    /// profiles come from loopback).
    pub(crate) fn rows(&self, app: App, profile: Profile, w: u32) -> Vec<(CellKey, &Cell)> {
        let mut out = Vec::new();
        for mode in [
            Mode::Single,
            Mode::Classic,
            Mode::ClassicNolocal,
            Mode::Lapse,
        ] {
            let nodes: Vec<u32> = if mode == Mode::Single {
                vec![1]
            } else {
                self.node_counts()
            };
            for n in nodes {
                let key = CellKey {
                    app,
                    profile,
                    workers_per_node: w,
                    mode,
                    nodes: n,
                };
                if let Some(cell) = self.cell(key) {
                    out.push((key, cell));
                }
            }
        }
        out
    }

    /// The Markdown report: a table per group, then the speed-ups.
    pub(crate) fn markdown(&self) -> String {
        let mut s = String::new();
        let show = |x: Option<Stat>, d: usize| x.map_or("–".to_string(), |x| x.show(d));
        for (app, profile, w) in self.groups() {
            let _ = writeln!(
                s,
                "\n#### {}, {}, {w} worker(s) per node\n\n\
                 | mode | nodes | epoch s | CPU s / epoch | CPU × single | local fraction | \
                 bytes / {} | lapse speed-up over it | runs |\n\
                 |---|---|---|---|---|---|---|---|---|",
                app.name(),
                profile.name(),
                app.point_name()
            );
            for (key, cell) in self.rows(app, profile, w) {
                let runs = match (cell.timeouts, cell.failed) {
                    (0, 0) => format!("{}", cell.runs),
                    (t, 0) => format!("{} ({t} timed out)", cell.runs),
                    (0, f) => format!("{} ({f} failed)", cell.runs),
                    (t, f) => format!("{} ({t} timed out, {f} failed)", cell.runs),
                };
                let speedup = if matches!(key.mode, Mode::Lapse | Mode::Single) {
                    "–".to_string()
                } else {
                    show(self.speedup(key, key.mode), 2)
                };
                let epoch = match (cell.epoch_seconds, cell.timeouts) {
                    (None, t) if t > 0 => "timed out".to_string(),
                    (x, _) => show(x, 3),
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {epoch} | {} | {} | {} | {} | {speedup} | {runs} |",
                    key.mode.name(),
                    key.nodes,
                    show(cell.epoch_cpu, 3),
                    show(self.overhead(key), 2),
                    show(cell.local_fraction, 3),
                    show(cell.bytes_per_point, 1),
                );
            }
        }
        let _ = writeln!(
            s,
            "\n#### Speed-up of lapse (epoch time of the other mode / lapse's)\n\n\
             | workload | profile | workers/node | nodes | over classic | over classic-nolocal |\n\
             |---|---|---|---|---|---|"
        );
        for (app, profile, w) in self.groups() {
            for n in self.node_counts().into_iter().filter(|&n| n > 1) {
                let key = CellKey {
                    app,
                    profile,
                    workers_per_node: w,
                    mode: Mode::Lapse,
                    nodes: n,
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {w} | {n} | {} | {} |",
                    app.name(),
                    profile.name(),
                    show(self.speedup(key, Mode::Classic), 2),
                    show(self.speedup(key, Mode::ClassicNolocal), 2),
                );
            }
        }
        s
    }
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
