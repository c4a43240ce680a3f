//! What a suite runs: the matrix of workloads ([`super::workload`]), modes, node counts,
//! workers, network profiles, negative-sampling schemes and repetitions, expanded into the
//! ordered list of runs (repetition outermost, so that a slow phase of the machine spreads over
//! all configurations instead of hitting one), and the configurations left out with the
//! reason. The workloads on real data (`w2v-gcide`) find it where `scripts/fetch-data.sh` puts
//! it ([`super::data::data_dir`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use super::workload::{App, Mode, Preset, Profile, Sampling, samplings_for};

/// One child run: `roam launch ... -- roam train ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunSpec {
    /// The workload.
    pub(crate) app: App,
    /// The mode.
    pub(crate) mode: Mode,
    /// Nodes launched.
    pub(crate) nodes: u32,
    /// Worker threads per node.
    pub(crate) workers_per_node: u32,
    /// The network.
    pub(crate) profile: Profile,
    /// Repetition, from 1.
    pub(crate) rep: u32,
    /// The negative-sampling request (always `Default` for the workloads that do not sample).
    pub(crate) sampling: Sampling,
    /// Epochs trained.
    pub(crate) epochs: u32,
    /// Arguments after `--epochs E`.
    pub(crate) train_args: Vec<String>,
    /// Time limit of the whole child run.
    pub(crate) timeout: Duration,
}

impl RunSpec {
    /// A file-name-safe identifier, unique within a suite (a named sampling scheme follows the
    /// mode, `:` written `_`: `w2v-loopback-lapse-pool_16-n2-w1-r1`).
    pub(crate) fn id(&self) -> String {
        let sampling = self.sampling.requested().map_or(String::new(), |s| {
            format!("-{}", s.to_string().replace(':', "_"))
        });
        format!(
            "{}-{}-{}{sampling}-n{}-w{}-r{}",
            self.app.name(),
            self.profile.name(),
            self.mode.name(),
            self.nodes,
            self.workers_per_node,
            self.rep
        )
    }
}

/// The dimensions of a suite, after presets and command-line overrides.
#[derive(Clone, Debug)]
pub(crate) struct Matrix {
    /// Sizes.
    pub(crate) preset: Preset,
    /// Workloads.
    pub(crate) apps: Vec<App>,
    /// Modes (`single` runs at one node only).
    pub(crate) modes: Vec<Mode>,
    /// Node counts for the distributed modes.
    pub(crate) nodes: Vec<u32>,
    /// Workers per node.
    pub(crate) workers_per_node: Vec<u32>,
    /// Networks.
    pub(crate) profiles: Vec<Profile>,
    /// Negative-sampling requests (see [`samplings_for`]).
    pub(crate) samplings: Vec<Sampling>,
    /// Repetitions.
    pub(crate) reps: u32,
    /// Epochs per run (`--epochs`); `None`: the preset's for each workload
    /// ([`Preset::epochs`]).
    pub(crate) epochs: Option<u32>,
    /// Per-run time limit.
    pub(crate) timeout: Duration,
    /// Where the real datasets are ([`super::data::data_dir`]).
    pub(crate) data: PathBuf,
    /// Workloads left out before planning, each with its reason (default workloads whose data
    /// is missing, see [`super::data::choose_apps`]).
    pub(crate) skipped: Vec<String>,
}

impl Matrix {
    /// Epochs per run of `app`.
    pub(crate) fn epochs(&self, app: App) -> u32 {
        self.epochs.unwrap_or_else(|| self.preset.epochs(app))
    }

    /// The epochs per run for the log: `2`, or `2 (w2v-gcide 1)` when some workload's
    /// differ from the first's.
    pub(crate) fn epochs_shown(&self) -> String {
        let Some(&first) = self.apps.first() else {
            return self.epochs.unwrap_or(0).to_string();
        };
        let base = self.epochs(first);
        let others: Vec<String> = self
            .apps
            .iter()
            .filter(|&&app| self.epochs(app) != base)
            .map(|&app| format!("{} {}", app.name(), self.epochs(app)))
            .collect();
        if others.is_empty() {
            base.to_string()
        } else {
            format!("{base} ({})", others.join(", "))
        }
    }
}

/// The runs of a suite and what was left out.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    /// Runs in execution order.
    pub(crate) runs: Vec<RunSpec>,
    /// Left-out configurations, each with its reason.
    pub(crate) skipped: Vec<String>,
}

/// Expands `m` into runs. Profiles that need namespaces are skipped (with a message) unless
/// `root`. `single` runs once per workers-per-node value, at one node on loopback (it opens no
/// link, so a network profile cannot change it); a distributed mode at one node likewise runs
/// only on loopback. The sampling workloads run once per scheme of [`samplings_for`].
pub(crate) fn plan(m: &Matrix, root: bool) -> Plan {
    let mut out = Plan {
        runs: Vec::new(),
        skipped: m.skipped.clone(),
    };
    let mut samplings = BTreeMap::new();
    for &app in &m.apps {
        for &mode in &m.modes {
            let (runs, dropped) = samplings_for(app, mode, &m.samplings);
            for dropped in dropped {
                out.skipped.push(format!(
                    "{} {} with --sampling {dropped}: it is the mode's default, which runs \
                     (as `default`) anyway",
                    app.name(),
                    mode.name()
                ));
            }
            samplings.insert((app, mode), runs);
        }
    }
    let profiles: Vec<Profile> = m
        .profiles
        .iter()
        .copied()
        .filter(|p| {
            let ok = root || !p.needs_root();
            if !ok {
                out.skipped.push(format!(
                    "profile {}: needs network namespaces, i.e. root (running as uid {}); \
                     rerun as root for these runs",
                    p.name(),
                    effective_uid()
                ));
            }
            ok
        })
        .collect();
    if profiles.iter().any(|&p| p != Profile::Loopback) && m.nodes.contains(&1) {
        out.skipped.push(
            "1-node runs under a network profile: one node opens no link, so they equal the \
             loopback runs (which are reported for every profile's comparisons)"
                .to_string(),
        );
    }
    // One node uses no link: it runs on loopback only, once (at the first profile's turn when
    // loopback is not among the profiles, so that the baseline is always there).
    let one_node_turn = if profiles.contains(&Profile::Loopback) {
        Some(Profile::Loopback)
    } else {
        profiles.first().copied()
    };
    for rep in 1..=m.reps {
        for &app in &m.apps {
            for &profile in &profiles {
                for &workers_per_node in &m.workers_per_node {
                    for &mode in &m.modes {
                        // `single` is the baseline: one node, whatever the node counts are.
                        let node_counts = if mode == Mode::Single {
                            &[1][..]
                        } else {
                            &m.nodes[..]
                        };
                        for &nodes in node_counts {
                            if nodes == 1 && Some(profile) != one_node_turn {
                                continue;
                            }
                            let profile = if nodes == 1 {
                                Profile::Loopback
                            } else {
                                profile
                            };
                            for &sampling in &samplings[&(app, mode)] {
                                out.runs.push(RunSpec {
                                    app,
                                    mode,
                                    nodes,
                                    workers_per_node,
                                    profile,
                                    rep,
                                    sampling,
                                    epochs: m.epochs(app),
                                    train_args: m.preset.train_args(app, &m.data),
                                    timeout: m.timeout,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// This process's effective uid.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn matrix() -> Matrix {
        Matrix {
            preset: Preset::Quick,
            apps: vec![App::Mf, App::Kge],
            modes: vec![Mode::Single, Mode::Classic, Mode::Lapse],
            nodes: vec![1, 2, 4],
            workers_per_node: vec![1],
            profiles: vec![Profile::Loopback, Profile::TenGbe],
            samplings: vec![Sampling::Default],
            reps: 2,
            epochs: Some(2),
            timeout: Duration::from_secs(10),
            data: PathBuf::from("/nonexistent/data"),
            skipped: Vec::new(),
        }
    }

    #[test]
    fn single_runs_at_one_node_on_loopback_and_reps_are_outermost() {
        let p = plan(&matrix(), true);
        // Per app and rep: loopback 1 single + 2 modes x 3 nodes; 10gbe 2 modes x 2 nodes.
        assert_eq!(p.runs.len(), 2 * 2 * (1 + 6 + 4));
        assert!(
            p.runs
                .iter()
                .filter(|r| r.mode == Mode::Single)
                .all(|r| r.nodes == 1 && r.profile == Profile::Loopback)
        );
        assert!(p.runs[..p.runs.len() / 2].iter().all(|r| r.rep == 1));
        let mut ids: Vec<_> = p.runs.iter().map(RunSpec::id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), p.runs.len(), "run ids are unique");
    }

    #[test]
    fn single_runs_even_when_the_node_counts_leave_out_one() {
        let p = plan(
            &Matrix {
                nodes: vec![2, 4],
                ..matrix()
            },
            true,
        );
        let singles = p.runs.iter().filter(|r| r.mode == Mode::Single).count();
        assert_eq!(singles, 2 * 2, "one per app and rep");
        assert!(p.runs.iter().all(|r| r.mode == Mode::Single || r.nodes > 1));
    }

    #[test]
    fn single_runs_on_loopback_even_when_only_emulated_profiles_are_asked() {
        let p = plan(
            &Matrix {
                nodes: vec![2],
                profiles: vec![Profile::TenGbe, Profile::OneGbe],
                ..matrix()
            },
            true,
        );
        let singles: Vec<_> = p.runs.iter().filter(|r| r.mode == Mode::Single).collect();
        assert_eq!(
            singles.len(),
            2 * 2,
            "once per app and rep, not per profile"
        );
        assert!(singles.iter().all(|r| r.profile == Profile::Loopback));
        assert!(
            p.runs
                .iter()
                .all(|r| r.mode == Mode::Single || r.profile != Profile::Loopback)
        );
    }

    #[test]
    fn ctr_runs_its_presets_in_every_mode_the_nups_modes_included() {
        use clap::ValueEnum;
        let data = Path::new("/d");
        for app in [App::Ctr, App::CtrMl100k] {
            assert_eq!(app.command(), "ctr");
            assert_eq!(app.points_setting(), "train_rows");
            assert!(app.scored() && !app.samples());
            assert_eq!(App::from_str(app.name(), false), Ok(app));
        }
        // Quick and tiny: the app's embedded synthetic set, one epoch.
        assert!(Preset::Quick.train_args(App::Ctr, data).is_empty());
        assert!(Preset::Tiny.train_args(App::Ctr, data).is_empty());
        assert_eq!(Preset::Quick.epochs(App::Ctr), 1);
        assert!(Preset::Quick.apps().contains(&App::Ctr));
        assert!(!Preset::Tiny.apps().contains(&App::Ctr));
        let full = Preset::Full.train_args(App::Ctr, data).join(" ");
        assert!(full.contains("fields=26,ids=1e8"), "{full}");
        assert_eq!(
            Preset::Full.train_args(App::CtrMl100k, data),
            ["--data", "/d/ml-100k-ctr"]
        );
        let m = Matrix {
            apps: vec![App::Ctr, App::Mf],
            modes: vec![
                Mode::Single,
                Mode::Lapse,
                Mode::Nups,
                Mode::NupsReplicateOnly,
            ],
            nodes: vec![2],
            profiles: vec![Profile::Loopback],
            reps: 1,
            epochs: None,
            ..matrix()
        };
        let p = plan(&m, false);
        let ctr: Vec<Mode> = p
            .runs
            .iter()
            .filter(|r| r.app == App::Ctr)
            .map(|r| r.mode)
            .collect();
        assert_eq!(
            ctr,
            [
                Mode::Single,
                Mode::Lapse,
                Mode::Nups,
                Mode::NupsReplicateOnly
            ]
        );
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
    }

    #[test]
    fn gcide_word_vectors_train_w2v_on_the_whole_corpus_scored_by_the_benchmarks() {
        use clap::ValueEnum;
        let app = App::W2vGcide;
        assert_eq!(app.name(), "w2v-gcide");
        assert_eq!(app.command(), "w2v");
        assert_eq!(app.point_name(), "word");
        assert_eq!(app.points_setting(), App::W2v.points_setting());
        assert_eq!(app.sampler(), Some(roam_apps::sampling::App::W2v));
        // `--apps` and the results file use the same name.
        assert_eq!(App::from_str("w2v-gcide", false), Ok(app));
        assert_eq!(
            serde_json::to_value(app).unwrap(),
            serde_json::json!("w2v-gcide")
        );
        // The same real data in every preset: the whole corpus, no held-out tail.
        let data = Path::new("/d");
        for preset in [Preset::Full, Preset::Quick, Preset::Tiny] {
            assert_eq!(
                preset.train_args(app, data),
                [
                    "--data",
                    "/d/gcide/corpus.txt",
                    "--eval-dir",
                    "/d/gensim-eval",
                    "--heldout",
                    "0",
                    "--eval-every",
                    "0"
                ],
                "{preset:?}"
            );
        }
        assert_eq!(Preset::Full.epochs(app), Preset::Full.epochs(App::W2v));
        assert_eq!(Preset::Quick.epochs(app), 1, "see Preset::epochs");
        assert_eq!(Preset::Quick.epochs(App::W2v), 2);
        let m = Matrix {
            apps: vec![App::W2v, app],
            modes: vec![Mode::Single, Mode::Lapse],
            nodes: vec![2],
            profiles: vec![Profile::Loopback],
            reps: 1,
            epochs: None,
            data: data.to_path_buf(),
            ..matrix()
        };
        assert_eq!(m.epochs_shown(), "2 (w2v-gcide 1)");
        let p = plan(&m, true);
        let ids: Vec<String> = p.runs.iter().map(RunSpec::id).collect();
        assert_eq!(
            ids,
            [
                "w2v-loopback-single-n1-w1-r1",
                "w2v-loopback-lapse-n2-w1-r1",
                "w2v-gcide-loopback-single-n1-w1-r1",
                "w2v-gcide-loopback-lapse-n2-w1-r1"
            ]
        );
        let gcide = &p.runs[3];
        assert_eq!(gcide.epochs, 1);
        let line: Vec<String> = crate::suite::runner::command_line(Path::new("roam"), gcide)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            line[line.iter().position(|a| a == "train").unwrap()..].join(" "),
            "train w2v --mode lapse --epochs 1 --json --data /d/gcide/corpus.txt --eval-dir \
             /d/gensim-eval --heldout 0 --eval-every 0"
        );
        // `--epochs` applies to every workload.
        let m = Matrix {
            epochs: Some(3),
            ..m
        };
        assert_eq!(m.epochs_shown(), "3");
        assert!(plan(&m, true).runs.iter().all(|r| r.epochs == 3));
    }

    /// A scratch directory, removed on drop.
    #[test]
    fn workloads_left_out_before_planning_are_among_the_skipped() {
        let p = plan(
            &Matrix {
                skipped: vec!["workload w2v-gcide: its data is missing".to_string()],
                ..matrix()
            },
            true,
        );
        assert_eq!(p.skipped[0], "workload w2v-gcide: its data is missing");
        assert!(!p.runs.is_empty());
    }

    #[test]
    fn without_root_namespace_profiles_are_skipped_with_a_reason() {
        let p = plan(&matrix(), false);
        assert!(p.runs.iter().all(|r| r.profile == Profile::Loopback));
        assert!(
            p.skipped
                .iter()
                .any(|s| s.contains("10gbe") && s.contains("root"))
        );
    }

    #[test]
    fn samplings_multiply_the_sampling_workloads_in_lapse_and_nups_only() {
        let asked: Vec<Sampling> = ["default", "naive", "preloc", "pool:4", "pool:4"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let p = plan(
            &Matrix {
                apps: vec![App::Mf, App::Kge, App::W2v],
                modes: vec![Mode::Single, Mode::Classic, Mode::Lapse, Mode::Nups],
                nodes: vec![2],
                profiles: vec![Profile::Loopback],
                samplings: asked.clone(),
                reps: 1,
                ..matrix()
            },
            true,
        );
        for app in [App::Mf, App::Kge, App::W2v] {
            for mode in [Mode::Single, Mode::Classic, Mode::Lapse, Mode::Nups] {
                let runs: Vec<&RunSpec> = p
                    .runs
                    .iter()
                    .filter(|r| r.app == app && r.mode == mode)
                    .collect();
                if !app.samples() || !mode.sampling_varies() {
                    assert_eq!(runs.len(), 1, "{app:?} {mode:?}");
                    assert_eq!(runs[0].sampling, Sampling::Default);
                    continue;
                }
                // Each distinct scheme once: `default`, and every named one that is not the
                // mode's default.
                let mut schemes: Vec<String> = runs
                    .iter()
                    .map(|r| r.sampling.resolve(app, mode).unwrap().to_string())
                    .collect();
                assert_eq!(runs[0].sampling, Sampling::Default);
                let n = schemes.len();
                schemes.sort();
                schemes.dedup();
                assert_eq!(schemes.len(), n, "{app:?} {mode:?}: {schemes:?}");
                for s in ["naive", "preloc", "pool:4"] {
                    assert!(schemes.iter().any(|x| x == s), "{app:?} {mode:?}: {s}");
                }
            }
        }
        // lapse's default is preloc: asked again, it is left out with a reason.
        assert!(
            p.skipped
                .iter()
                .any(|s| s.contains("kge lapse") && s.contains("preloc")),
            "{:?}",
            p.skipped
        );
        let mut ids: Vec<_> = p.runs.iter().map(RunSpec::id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), p.runs.len(), "run ids are unique");
        assert!(
            ids.iter()
                .any(|id| id == "w2v-loopback-lapse-pool_4-n2-w1-r1")
        );
        // Without `default` the named schemes alone run (the mode's default among them).
        let p = plan(
            &Matrix {
                apps: vec![App::W2v],
                modes: vec![Mode::Lapse],
                nodes: vec![2],
                profiles: vec![Profile::Loopback],
                samplings: asked[2..].to_vec(),
                reps: 1,
                ..matrix()
            },
            true,
        );
        let runs: Vec<Sampling> = p.runs.iter().map(|r| r.sampling).collect();
        assert_eq!(runs, asked[2..4]);
    }
}
