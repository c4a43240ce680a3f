//! The Markdown of a suite's summary (`summary.md`, and the tables printed at the end of a
//! suite): per group a table of every configuration's medians with min–max, then the
//! speed-ups, the CPU overhead ratio against its aim, the NuPS speed-ups and replica figures,
//! and, for the workloads that report a quality, quality against efficiency (per scheme for
//! those that sample negatives).
//! `summary.rs` aggregates the runs and answers the queries these tables are made of.
//!
//! Invariants: a figure that is missing (no successful run) shows as `–`, never as 0; a cell
//! shows how many runs it aggregates and how many timed out or failed.

use std::fmt::Write as _;

use super::*;

impl Summary {
    /// The Markdown report: a table per group, then the speed-ups.
    pub(crate) fn markdown(&self) -> String {
        let mut s = String::new();
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
                let runs = cell.runs_shown();
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
                    self.label(key),
                    key.nodes,
                    show(cell.epoch_cpu, 3),
                    show(self.overhead(key), 2),
                    show(cell.local_fraction, 3),
                    show(cell.bytes_per_point, 1),
                );
            }
        }
        // (of, over, heading)
        self.speedup_markdown(
            &mut s,
            Mode::Lapse,
            "#### Speed-up of lapse (epoch time of the other mode / lapse's)",
            &[
                (Mode::Lapse, Mode::Classic, "over classic"),
                (Mode::Lapse, Mode::ClassicNolocal, "over classic-nolocal"),
            ],
        );
        self.cpu_overhead_markdown(&mut s);
        self.nups_speedup_markdown(&mut s);
        self.replica_markdown(&mut s);
        self.quality_markdown(&mut s);
        s
    }

    /// The keys of `mode` in one group at `nodes`, one per scheme the workload ran it with (its
    /// default scheme alone when it did not run).
    pub(crate) fn scheme_keys(
        &self,
        app: App,
        profile: Profile,
        w: u32,
        mode: Mode,
        nodes: u32,
    ) -> Vec<CellKey> {
        let mut schemes = self.schemes(app, mode);
        if schemes.is_empty() {
            schemes.push(self.default_scheme(app, mode));
        }
        schemes
            .into_iter()
            .map(|sampling| CellKey {
                app,
                profile,
                workers_per_node: w,
                mode,
                sampling,
                nodes,
            })
            .collect()
    }

    /// A speed-up table of `subject` (the `of` mode of the first column): a row per workload,
    /// profile, workers per node, node count above one and, when some workload ran `subject`
    /// with several sampling schemes, scheme (in a `subject sampling` column); the reference
    /// modes in their default schemes.
    fn speedup_markdown(
        &self,
        s: &mut String,
        subject: Mode,
        heading: &str,
        columns: &[(Mode, Mode, &str)],
    ) {
        let by_scheme = self
            .groups()
            .iter()
            .any(|&(app, _, _)| self.several_schemes(app, subject));
        let headings: Vec<&str> = columns.iter().map(|c| c.2).collect();
        let scheme_head = if by_scheme {
            format!(" {} sampling |", subject.name())
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "\n{heading}\n\n\
             | workload | profile | workers/node | nodes |{scheme_head} {} |\n\
             |---|---|---|---|{}{}",
            headings.join(" | "),
            if by_scheme { "---|" } else { "" },
            "---|".repeat(columns.len())
        );
        for (app, profile, w) in self.groups() {
            for n in self.node_counts().into_iter().filter(|&n| n > 1) {
                for key in self.scheme_keys(app, profile, w, subject, n) {
                    let cells: Vec<String> = columns
                        .iter()
                        .map(|&(of, over, _)| show(self.speedup_of(of, key, over), 2))
                        .collect();
                    let scheme = if by_scheme {
                        format!(" {} |", key.sampling.show())
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        s,
                        "| {} | {} | {w} | {n} |{scheme} {} |",
                        app.name(),
                        profile.name(),
                        cells.join(" | ")
                    );
                }
            }
        }
    }

    /// The CPU overhead ratio of every distributed mode present, one row per workload, profile,
    /// workers per node and node count (one-node rows on loopback only: other profiles reuse
    /// them); cells above [`CPU_OVERHEAD_AIM`] in bold.
    fn cpu_overhead_markdown(&self, s: &mut String) {
        // One column per distributed mode, or per mode and scheme where a workload ran the mode
        // with several schemes (`None`: the mode's only scheme).
        let columns: Vec<(Mode, Option<SchemeName>)> = {
            let mut set = BTreeSet::new();
            for mode in self.modes().into_iter().filter(|&m| m != Mode::Single) {
                for (app, _, _) in self.groups() {
                    if self.several_schemes(app, mode) {
                        set.extend(self.schemes(app, mode).into_iter().map(|x| (mode, Some(x))));
                    } else {
                        set.insert((mode, None));
                    }
                }
            }
            set.into_iter().collect()
        };
        if columns.is_empty() {
            return;
        }
        let names: Vec<String> = columns
            .iter()
            .map(|&(mode, scheme)| match scheme {
                Some(x) => format!("{}[{}]", mode.name(), x.show()),
                None => mode.name().to_string(),
            })
            .collect();
        let _ = writeln!(
            s,
            "\n#### CPU overhead ratio (CPU s per epoch, all nodes / single's; aim ≤ {CPU_OVERHEAD_AIM}, \
             above it in bold)\n\n\
             | workload | profile | workers/node | single CPU s / epoch | nodes | {} |\n\
             |---|---|---|---|---|{}",
            names.join(" | "),
            "---|".repeat(columns.len())
        );
        for (app, profile, w) in self.groups() {
            let single = show(
                self.cell(CellKey {
                    app,
                    profile,
                    workers_per_node: w,
                    mode: Mode::Single,
                    sampling: self.default_scheme(app, Mode::Single),
                    nodes: 1,
                })
                .and_then(|c| c.epoch_cpu),
                3,
            );
            for n in self.node_counts() {
                if n == 1 && profile != Profile::Loopback {
                    continue;
                }
                let ratios: Vec<Option<Stat>> = columns
                    .iter()
                    .map(|&(mode, scheme)| {
                        let sampling = match scheme {
                            None if !self.several_schemes(app, mode) => {
                                self.default_scheme(app, mode)
                            }
                            Some(x) if self.several_schemes(app, mode) => x,
                            _ => return None,
                        };
                        self.overhead(CellKey {
                            app,
                            profile,
                            workers_per_node: w,
                            mode,
                            sampling,
                            nodes: n,
                        })
                    })
                    .collect();
                if ratios.iter().all(Option::is_none) {
                    continue;
                }
                let cells: Vec<String> = ratios
                    .into_iter()
                    .map(|r| match r {
                        Some(r) if r.median > CPU_OVERHEAD_AIM => format!("**{}**", r.show(2)),
                        r => show(r, 2),
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {w} | {single} | {n} | {} |",
                    app.name(),
                    profile.name(),
                    cells.join(" | ")
                );
            }
        }
    }

    /// Speed-up of nups over lapse and classic (and over its replicate-only ablation, and of
    /// the ablation over classic, when that ran) at every node count above one; nothing when
    /// no NuPS mode ran.
    fn nups_speedup_markdown(&self, s: &mut String) {
        let modes = self.modes();
        if !modes.iter().any(|m| m.replicates()) {
            return;
        }
        // (of, over, heading)
        let mut columns = vec![
            (Mode::Nups, Mode::Lapse, "over lapse"),
            (Mode::Nups, Mode::Classic, "over classic"),
        ];
        if modes.contains(&Mode::NupsReplicateOnly) {
            columns.push((
                Mode::Nups,
                Mode::NupsReplicateOnly,
                "over nups-replicate-only",
            ));
            columns.push((
                Mode::NupsReplicateOnly,
                Mode::Classic,
                "nups-replicate-only over classic",
            ));
        }
        self.speedup_markdown(
            s,
            Mode::Nups,
            "#### Speed-up of nups (epoch time of the other mode / nups's)",
            &columns,
        );
    }

    /// The replica figures the NuPS runs reported (whatever their names), one table per
    /// workload with a row per figure and a column per configuration (one-node runs left out:
    /// they have no peer to sync with); nothing when no run reported any.
    fn replica_markdown(&self, s: &mut String) {
        let mut apps: Vec<App> = self
            .cells
            .iter()
            .filter(|(k, c)| k.nodes > 1 && !c.replica.is_empty())
            .map(|(k, _)| k.app)
            .collect();
        apps.dedup();
        for app in apps {
            let cells: Vec<(&CellKey, &Cell)> = self
                .cells
                .iter()
                .filter(|(k, c)| k.app == app && k.nodes > 1 && !c.replica.is_empty())
                .collect();
            let names: BTreeSet<&str> = cells
                .iter()
                .flat_map(|(_, c)| c.replica.keys().map(String::as_str))
                .collect();
            // A prefix every name shares (`replication.`) goes into the heading.
            let prefix = names
                .iter()
                .next()
                .and_then(|n| n.split_once('.'))
                .map(|(head, _)| format!("{head}."))
                .filter(|p| names.iter().all(|n| n.starts_with(p.as_str())))
                .unwrap_or_default();
            let columns: Vec<String> = cells
                .iter()
                .map(|(k, _)| {
                    format!(
                        "{} {} n={} w={}",
                        self.label(**k),
                        k.profile.name(),
                        k.nodes,
                        k.workers_per_node
                    )
                })
                .collect();
            let under = if prefix.is_empty() {
                String::new()
            } else {
                format!(", under `{prefix}`")
            };
            let _ = writeln!(
                s,
                "\n#### Replica figures of {} (as the jobs reported them{under})\n\n\
                 | figure | {} |\n|---|{}",
                app.name(),
                columns.join(" | "),
                "---|".repeat(columns.len())
            );
            for name in names {
                let values: Vec<String> = cells
                    .iter()
                    .map(|(_, c)| c.replica.get(name).map_or("–".to_string(), show_figure))
                    .collect();
                let _ = writeln!(s, "| {} | {} |", &name[prefix.len()..], values.join(" | "));
            }
        }
    }
}

impl Summary {
    /// The quality metric `app`'s runs reported (the first cell's that has one).
    pub(crate) fn quality_metric(&self, app: App) -> Option<&str> {
        self.cells
            .iter()
            .filter(|(k, _)| k.app == app)
            .find_map(|(_, c)| c.quality_metric.as_deref())
    }

    /// The rows of the quality–efficiency table of one group: every configuration of
    /// [`Self::rows`] but the one-node runs of distributed modes under a profile other than
    /// loopback (they are the loopback group's), ordered by node count, mode and scheme.
    pub(crate) fn quality_rows(&self, app: App, profile: Profile, w: u32) -> Vec<(CellKey, &Cell)> {
        let mut rows = self.rows(app, profile, w);
        rows.retain(|(k, _)| k.mode == Mode::Single || k.nodes > 1 || profile == Profile::Loopback);
        rows.sort_by_key(|(k, _)| (k.nodes, k.mode, k.sampling));
        rows
    }

    /// Quality against efficiency for the workloads that report a quality (kge, w2v, ctr): one table
    /// per workload, a row per profile, workers per node, node count, mode and sampling scheme
    /// with the epoch time, CPU overhead ratio, bytes per data point, local fraction, the
    /// fraction of `local` samples that fell back to a remote key, and the quality metric after
    /// the last epoch.
    fn quality_markdown(&self, s: &mut String) {
        let mut apps: Vec<App> = self
            .groups()
            .iter()
            .map(|g| g.0)
            .filter(|a| a.scored())
            .collect();
        apps.dedup();
        for app in apps {
            let metric = self.quality_metric(app).unwrap_or("quality");
            let what = match (app, metric) {
                (App::Kge | App::KgeBuckets, _) => format!("filtered test MRR (`{metric}`)"),
                (_, "test_auc") => format!("test AUC (`{metric}`)"),
                (_, "wordsim_spearman") => {
                    format!("WordSim-353 Spearman correlation (`{metric}`)")
                }
                _ => format!("`{metric}`"),
            };
            let column = metric_label(metric);
            let _ = writeln!(
                s,
                "\n#### Quality and efficiency of {}{} (quality: {what} after the last \
                 epoch)\n\n\
                 | profile | workers/node | nodes | mode | sampling | epoch s | CPU × single | \
                 bytes / {} | local fraction | fallback fraction | {column} | runs |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|",
                app.name(),
                if app.samples() {
                    " by sampling scheme"
                } else {
                    ""
                },
                app.point_name()
            );
            for (a, profile, w) in self.groups() {
                if a != app {
                    continue;
                }
                for (key, cell) in self.quality_rows(app, profile, w) {
                    let _ = writeln!(
                        s,
                        "| {} | {w} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                        profile.name(),
                        key.nodes,
                        key.mode.name(),
                        key.sampling.show(),
                        show(cell.epoch_seconds, 3),
                        show(self.overhead(key), 2),
                        show(cell.bytes_per_point, 1),
                        show(cell.local_fraction, 3),
                        show(cell.fallback_fraction, 3),
                        show(cell.quality, 3),
                        cell.runs_shown(),
                    );
                }
            }
        }
    }
}

/// A quality metric's name in table columns and figure axes: the benchmark for those of gensim's
/// benchmarks (`wordsim_spearman`: WordSim-353), else the report's name.
pub(crate) fn metric_label(metric: &str) -> &str {
    match metric {
        "wordsim_spearman" => "WordSim-353",
        "simlex_spearman" => "SimLex-999",
        other => other,
    }
}

/// `x` as [`Stat::show`] does, or `–` when there is none.
fn show(x: Option<Stat>, digits: usize) -> String {
    x.map_or("–".to_string(), |x| x.show(digits))
}

/// A replica figure: counts as integers, other values with three decimals below 10.
fn show_figure(x: &Stat) -> String {
    let integral = [x.median, x.min, x.max].iter().all(|v| v.fract() == 0.0);
    x.show(if integral { 0 } else { 3 })
}

#[cfg(test)]
mod tests {
    use super::super::Summary;
    use super::*;
    use crate::suite::record::{replica_figures, test_record};

    /// A successful run of `mode` at `nodes` with one epoch of `seconds` and `cpu` CPU seconds.
    fn run(
        mode: &str,
        nodes: u32,
        seconds: f64,
        cpu: f64,
        settings: serde_json::Value,
    ) -> RunRecord {
        let mut r = test_record(serde_json::json!({
            "id": format!("mf-loopback-{mode}-n{nodes}"), "mode": mode, "nodes": nodes,
            "epochs": [{"seconds": seconds, "cpu_seconds": cpu}],
            "counters": {"local_fraction": 1.0, "messages_sent": 0, "bytes_sent": 0,
                         "relocations": 0},
            "points_per_epoch": 100, "settings": settings,
        }));
        r.replica = replica_figures(&serde_json::json!({
            "settings": r.settings.clone()
        }));
        r
    }

    #[test]
    fn cpu_overhead_of_every_mode_and_nups_speedups() {
        let none = serde_json::Value::Null;
        let runs = [
            run("single", 1, 1.0, 2.0, none.clone()),
            run("classic", 2, 4.0, 8.0, none.clone()),
            run("lapse", 2, 1.0, 2.4, none.clone()),
            run(
                "nups",
                2,
                0.5,
                2.8,
                serde_json::json!({"dim": 8, "replicated_keys": 40, "replica_bytes_per_round": 2e4}),
            ),
        ];
        let summary = Summary::from_runs(&runs);
        let key = |mode| CellKey {
            app: App::Mf,
            profile: Profile::Loopback,
            workers_per_node: 1,
            mode,
            sampling: SchemeName(None),
            nodes: 2,
        };
        assert_eq!(summary.overhead(key(Mode::Nups)).unwrap().median, 1.4);
        assert_eq!(
            summary
                .speedup_of(Mode::Nups, key(Mode::Nups), Mode::Lapse)
                .unwrap()
                .median,
            2.0
        );
        let md = summary.markdown();
        assert!(
            md.contains(
                "| workload | profile | workers/node | single CPU s / epoch | nodes | classic | \
                 lapse | nups |\n|---|---|---|---|---|---|---|---|\n\
                 | mf | loopback | 1 | 2.000 | 2 | **4.00** | 1.20 | 1.40 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| workload | profile | workers/node | nodes | over lapse | over classic |\n\
                 |---|---|---|---|---|---|\n| mf | loopback | 1 | 2 | 2.00 | 8.00 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "#### Replica figures of mf (as the jobs reported them)\n\n\
                 | figure | nups loopback n=2 w=1 |\n|---|---|\n\
                 | replica_bytes_per_round | 20.0 k |\n| replicated_keys | 40 |\n"
            ),
            "{md}"
        );
        // Without a NuPS run there is neither a nups speed-up nor a replica table.
        let md = Summary::from_runs(&runs[..3]).markdown();
        assert!(
            md.contains("CPU overhead ratio") && !md.contains("nups"),
            "{md}"
        );
    }

    /// A successful w2v run of `mode` at `nodes` that used `scheme` (`requested` with
    /// `--sampling`, else as the mode's default), with the quality `auc`.
    fn w2v_run(
        mode: &str,
        nodes: u32,
        scheme: &str,
        requested: bool,
        seconds: f64,
        cpu: f64,
        auc: f64,
    ) -> RunRecord {
        test_record(serde_json::json!({
            "id": format!("w2v-loopback-{mode}-{scheme}-n{nodes}"), "app": "w2v", "mode": mode,
            "nodes": nodes,
            "sampling": scheme, "sampling_requested": if requested { Some(scheme) } else { None },
            "epochs": [{"seconds": seconds, "cpu_seconds": cpu, "topic_auc": auc,
                        "sampling": {"scheme": scheme, "samples": 10,
                                     "fallback_fraction": 0.25}}],
            "counters": {"local_fraction": 0.5, "messages_sent": 0, "bytes_sent": 200,
                         "relocations": 0},
            "points_per_epoch": 100, "settings": {"metric": "topic_auc", "sampling": scheme},
        }))
    }

    #[test]
    fn schemes_are_configurations_with_a_quality_table() {
        let runs = [
            w2v_run("single", 1, "naive", false, 1.0, 2.0, 0.6),
            w2v_run("classic", 2, "naive", false, 0.5, 3.0, 0.55),
            w2v_run("lapse", 2, "preloc", false, 2.0, 8.0, 0.5),
            w2v_run("lapse", 2, "pool:16", true, 1.0, 4.0, 0.52),
            w2v_run("lapse", 2, "pool:4", true, 1.0, 5.0, 0.53),
            w2v_run("lapse", 2, "local", true, 0.5, 3.0, 0.45),
        ];
        let summary = Summary::from_runs(&runs);
        let names: Vec<&str> = summary
            .schemes(App::W2v, Mode::Lapse)
            .into_iter()
            .map(SchemeName::show)
            .collect();
        assert_eq!(
            names,
            ["preloc", "pool:4", "pool:16", "local"],
            "scheme order"
        );
        assert_eq!(
            summary.default_scheme(App::W2v, Mode::Lapse).show(),
            "preloc"
        );
        let lapse = |scheme: &str| CellKey {
            app: App::W2v,
            profile: Profile::Loopback,
            workers_per_node: 1,
            mode: Mode::Lapse,
            sampling: SchemeName::of(Some(scheme)),
            nodes: 2,
        };
        assert_eq!(summary.label(lapse("local")), "lapse[local]");
        let classic = summary.variant(lapse("local"), Mode::Classic);
        assert_eq!(summary.label(classic), "classic", "one scheme: no brackets");
        assert_eq!(summary.overhead(lapse("local")).unwrap().median, 1.5);
        assert_eq!(
            summary
                .speedup_of(Mode::Lapse, lapse("pool:4"), Mode::Classic)
                .unwrap()
                .median,
            0.5
        );
        let md = summary.markdown();
        for row in [
            "| lapse[pool:4] | 2 | 1.000 | 5.000 | 2.50 | 0.500 | 2.0 | – | 1 |",
            "| classic | 2 | 0.500 | 3.000 | 1.50 | 0.500 | 2.0 | 0.25 | 1 |",
        ] {
            assert!(md.contains(row), "{row}\n{md}");
        }
        assert!(
            md.contains(
                "| workload | profile | workers/node | nodes | lapse sampling | over classic | \
                 over classic-nolocal |\n|---|---|---|---|---|---|---|\n\
                 | w2v | loopback | 1 | 2 | preloc | 0.25 | – |\n"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| single CPU s / epoch | nodes | classic | lapse[preloc] | lapse[pool:4] | \
                 lapse[pool:16] | lapse[local] |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "#### Quality and efficiency of w2v by sampling scheme (quality: `topic_auc` \
                 after the last epoch)\n\n\
                 | profile | workers/node | nodes | mode | sampling | epoch s | CPU × single | \
                 bytes / word | local fraction | fallback fraction | topic_auc | runs |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|\n\
                 | loopback | 1 | 1 | single | naive | 1.000 | 1.00 | 2.0 | 0.500 | 0.250 | 0.600 | 1 |\n\
                 | loopback | 1 | 2 | classic | naive | 0.500 | 1.50 | 2.0 | 0.500 | 0.250 | 0.550 | 1 |\n\
                 | loopback | 1 | 2 | lapse | preloc | 2.000 | 4.00 | 2.0 | 0.500 | 0.250 | 0.500 | 1 |\n\
                 | loopback | 1 | 2 | lapse | pool:4 |"
            ),
            "{md}"
        );
        // Without scheme variety nothing is labelled and the speed-up table keeps its columns.
        let md = Summary::from_runs(&runs[..3]).markdown();
        assert!(
            !md.contains("lapse[") && !md.contains("lapse sampling"),
            "{md}"
        );
    }

    #[test]
    fn gcide_word_vectors_are_scored_by_wordsim() {
        let runs: Vec<RunRecord> = [("single", 1, 0.36), ("classic", 2, 0.35)]
            .into_iter()
            .map(|(mode, nodes, wordsim)| {
                test_record(serde_json::json!({
                    "id": format!("w2v-gcide-loopback-{mode}-n{nodes}"), "app": "w2v-gcide",
                    "mode": mode, "nodes": nodes, "sampling": "naive",
                    "epochs": [{"seconds": 2.0, "cpu_seconds": 2.0, "wordsim_spearman": wordsim,
                                "simlex_spearman": 0.15, "analogy_accuracy": 0.05}],
                    "counters": {"local_fraction": 1.0, "messages_sent": 0, "bytes_sent": 0,
                                 "relocations": 0},
                    "points_per_epoch": 100,
                    "settings": {"metric": "wordsim_spearman", "sampling": "naive"},
                }))
            })
            .collect();
        assert_eq!(
            runs[0].quality(),
            Some(("wordsim_spearman".to_string(), 0.36))
        );
        let summary = Summary::from_runs(&runs);
        assert_eq!(
            summary.quality_metric(App::W2vGcide),
            Some("wordsim_spearman")
        );
        let md = summary.markdown();
        assert!(
            md.contains(
                "#### Quality and efficiency of w2v-gcide by sampling scheme (quality: \
                 WordSim-353 Spearman correlation (`wordsim_spearman`) after the last epoch)\n\n\
                 | profile | workers/node | nodes | mode | sampling | epoch s | CPU × single | \
                 bytes / word | local fraction | fallback fraction | WordSim-353 | runs |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|\n\
                 | loopback | 1 | 1 | single | naive | 2.000 | 1.00 | 0.0 | 1.000 | – | 0.360 | 1 |\n"
            ),
            "{md}"
        );
    }
}
