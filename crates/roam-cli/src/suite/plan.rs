//! What a suite runs: the workloads and their sizes per preset (full, `--quick`, `--tiny`),
//! the modes, node counts, workers, network profiles, negative-sampling schemes and
//! repetitions, expanded into the ordered list of runs (repetition outermost, so that a slow
//! phase of the machine spreads over all configurations instead of hitting one), and the
//! configurations left out with the reason. The workloads on real data (`w2v-gcide`) find it
//! where `scripts/fetch-data.sh` puts it ([`super::data::data_dir`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::data::{GCIDE_CORPUS, GENSIM_EVAL};

/// A training workload (`roam train APP`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum App {
    /// Matrix factorisation.
    Mf,
    /// Matrix factorisation on skewed data: rows and columns drawn Zipf(1.1), as in the NuPS
    /// paper (where replicating the hot columns pays).
    MfZipf,
    /// Knowledge-graph embeddings.
    Kge,
    /// Word vectors.
    W2v,
    /// Word vectors on the real GCIDE corpus, scored by WordSim-353 (needs
    /// `scripts/fetch-data.sh gcide gensim-eval`).
    W2vGcide,
}

/// A parameter placement mode (`roam train ... --mode`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mode {
    /// One node, no network.
    Single,
    /// Static hash allocation, fast local access.
    Classic,
    /// Static hash allocation, every access by message.
    ClassicNolocal,
    /// Dynamic allocation.
    Lapse,
    /// NuPS: hot keys replicated on every node (background sync), the rest relocated as in
    /// `lapse`.
    Nups,
    /// The NuPS ablation: hot keys replicated, the rest static as in `classic`.
    NupsReplicateOnly,
    /// AdaPM: dynamic allocation driven by the workloads' intents (no `localize`, no named
    /// replicas): keys move to the one node that wants them, or are replicated while several
    /// do.
    Adapm,
    /// The AdaPM ablation acting by relocation only.
    AdapmRelocateOnly,
    /// The AdaPM ablation acting by replication only.
    AdapmReplicateOnly,
}

/// An emulated network (`roam launch --profile`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
pub(crate) enum Profile {
    /// Plain loopback TCP.
    #[serde(rename = "loopback")]
    Loopback,
    /// Namespaces, 10 Gbit/s links, 50 µs one-way latency (root).
    #[value(name = "10gbe")]
    #[serde(rename = "10gbe")]
    TenGbe,
    /// Namespaces, 1 Gbit/s links, 100 µs one-way latency (root).
    #[value(name = "1gbe")]
    #[serde(rename = "1gbe")]
    OneGbe,
}

impl App {
    /// The subcommand name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Mf => "mf",
            Self::MfZipf => "mf-zipf",
            Self::Kge => "kge",
            Self::W2v => "w2v",
            Self::W2vGcide => "w2v-gcide",
        }
    }

    /// The `roam train` subcommand (the app its reports name).
    pub(crate) fn command(self) -> &'static str {
        match self {
            Self::Mf | Self::MfZipf => "mf",
            Self::Kge => "kge",
            Self::W2v | Self::W2vGcide => "w2v",
        }
    }

    /// The setting (in the report's `settings`) that counts one epoch's data points.
    pub(crate) fn points_setting(self) -> &'static str {
        match self {
            Self::Mf | Self::MfZipf => "train_points",
            Self::Kge => "train_triples",
            Self::W2v | Self::W2vGcide => "train_words",
        }
    }

    /// What one data point is, for tables.
    pub(crate) fn point_name(self) -> &'static str {
        match self {
            Self::Mf | Self::MfZipf => "rating",
            Self::Kge => "triple",
            Self::W2v | Self::W2vGcide => "word",
        }
    }

    /// The app's negative sampler, for the workloads that draw negatives (`--sampling`).
    pub(crate) fn sampler(self) -> Option<roam_apps::sampling::App> {
        match self {
            Self::Mf | Self::MfZipf => None,
            Self::Kge => Some(roam_apps::sampling::App::Kge),
            Self::W2v | Self::W2vGcide => Some(roam_apps::sampling::App::W2v),
        }
    }

    /// Whether the workload draws negatives through roam's sampling API (takes `--sampling`).
    pub(crate) fn samples(self) -> bool {
        self.sampler().is_some()
    }
}

impl Mode {
    /// The `--mode` value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Classic => "classic",
            Self::ClassicNolocal => "classic-nolocal",
            Self::Lapse => "lapse",
            Self::Nups => "nups",
            Self::NupsReplicateOnly => "nups-replicate-only",
            Self::Adapm => "adapm",
            Self::AdapmRelocateOnly => "adapm-relocate-only",
            Self::AdapmReplicateOnly => "adapm-replicate-only",
        }
    }

    /// Every mode, in table and legend order (`single` first).
    pub(crate) const ALL: [Self; 9] = [
        Self::Single,
        Self::Classic,
        Self::ClassicNolocal,
        Self::Lapse,
        Self::Nups,
        Self::NupsReplicateOnly,
        Self::Adapm,
        Self::AdapmRelocateOnly,
        Self::AdapmReplicateOnly,
    ];

    /// Whether the mode replicates hot keys (the NuPS modes).
    pub(crate) fn replicates(self) -> bool {
        matches!(self, Self::Nups | Self::NupsReplicateOnly)
    }

    /// Whether the suite runs the mode once per sampling scheme of `--samplings`: the modes
    /// that relocate keys (`lapse`, `nups`), where the scheme decides what moves. The others
    /// keep every key where it is and run once, with their default scheme (`adapm` moves keys
    /// by intent and draws its negatives `naive`, the only scheme it takes).
    pub(crate) fn sampling_varies(self) -> bool {
        matches!(self, Self::Lapse | Self::Nups)
    }

    /// The apps' own mode.
    pub(crate) fn app_mode(self) -> roam_apps::common::Mode {
        use roam_apps::common::Mode as M;
        match self {
            Self::Single => M::Single,
            Self::Classic => M::Classic,
            Self::ClassicNolocal => M::ClassicNolocal,
            Self::Lapse => M::Lapse,
            Self::Nups => M::Nups,
            Self::NupsReplicateOnly => M::NupsReplicateOnly,
            Self::Adapm => M::Adapm,
            Self::AdapmRelocateOnly => M::AdapmRelocateOnly,
            Self::AdapmReplicateOnly => M::AdapmReplicateOnly,
        }
    }
}

/// A negative-sampling scheme the suite asks for (`--samplings`): the mode's own default (no
/// `--sampling` flag is passed) or a named scheme (`--sampling SCHEME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sampling {
    /// No flag: the app picks the mode's default.
    Default,
    /// `--sampling` with this scheme.
    Scheme(roam::Scheme),
}

impl FromStr for Sampling {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "default" {
            return Ok(Self::Default);
        }
        s.parse::<roam::Scheme>()
            .map(Self::Scheme)
            .map_err(|e| format!("{e}, or default"))
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::Scheme(s) => write!(f, "{s}"),
        }
    }
}

impl Sampling {
    /// The scheme passed with `--sampling`; `None` for the mode's default (no flag).
    pub(crate) fn requested(self) -> Option<roam::Scheme> {
        match self {
            Self::Default => None,
            Self::Scheme(s) => Some(s),
        }
    }

    /// The scheme `app` uses in `mode` with this request (`None` for apps that do not
    /// sample): the named one, or the app's default for the mode (the same code as the child's,
    /// since the child is this binary).
    pub(crate) fn resolve(self, app: App, mode: Mode) -> Option<roam::Scheme> {
        let sampler = app.sampler()?;
        Some(match self {
            Self::Scheme(s) => s,
            Self::Default => roam_apps::sampling::default_scheme(sampler, mode.app_mode()),
        })
    }
}

/// The sampling requests `app` runs in `mode`: every one of `asked` (in order, without
/// duplicates, and without a named scheme that is the mode's default when `default` is asked
/// too) for the sampling workloads in the modes where the scheme varies
/// ([`Mode::sampling_varies`]); just the default otherwise. The second list names what was
/// dropped as the default's duplicate.
pub(crate) fn samplings_for(
    app: App,
    mode: Mode,
    asked: &[Sampling],
) -> (Vec<Sampling>, Vec<Sampling>) {
    if !app.samples() || !mode.sampling_varies() || asked.is_empty() {
        return (vec![Sampling::Default], Vec::new());
    }
    let default = Sampling::Default.resolve(app, mode);
    let mut out: Vec<Sampling> = Vec::new();
    let mut dropped = Vec::new();
    for &s in asked {
        if out.contains(&s) {
            continue;
        }
        if asked.contains(&Sampling::Default)
            && s != Sampling::Default
            && s.resolve(app, mode) == default
        {
            dropped.push(s);
            continue;
        }
        out.push(s);
    }
    (out, dropped)
}

impl Profile {
    /// The `--profile` value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::TenGbe => "10gbe",
            Self::OneGbe => "1gbe",
        }
    }

    /// Whether the profile runs nodes in network namespaces (root only).
    pub(crate) fn needs_root(self) -> bool {
        self != Self::Loopback
    }
}

/// Workload sizes and run lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Preset {
    /// About a minute per epoch in `single` mode (one worker) on a 2-core VM; MF is capped by
    /// memory (every node generates the whole matrix) at 1e8 ratings (30 s per epoch measured).
    Full,
    /// Well under a second per `single` epoch: the whole default suite in under 10 minutes.
    Quick,
    /// A fraction of a second per run: for CI.
    Tiny,
}

impl Preset {
    /// Arguments after `roam train APP --mode M --epochs E`: the synthetic data and a cheap
    /// final evaluation (evaluation is outside the timed epochs, but costs wall time); for
    /// the workloads on real data, its files under `data` ([`super::data::data_dir`]).
    pub(crate) fn train_args(self, app: App, data: &Path) -> Vec<String> {
        let (synthetic, extra): (&str, &[&str]) = match (app, self) {
            // The whole corpus in every preset (on a cut one WordSim would mean little), the
            // gensim benchmarks as the quality, so no held-out tail, scored after the last epoch.
            (App::W2vGcide, _) => {
                return vec![
                    "--data".to_string(),
                    data.join(GCIDE_CORPUS).display().to_string(),
                    "--eval-dir".to_string(),
                    data.join(GENSIM_EVAL).display().to_string(),
                    "--heldout".to_string(),
                    "0".to_string(),
                    "--eval-every".to_string(),
                    "0".to_string(),
                ];
            }
            (App::Mf, Self::Full) => (
                "rows=1000000,cols=200000,rank=10,nnz=1e8,zipf=0.5,noise=0.1,test=0.01,seed=1",
                &["--eval-every", "0"],
            ),
            (App::Mf, Self::Quick) => (
                "rows=20000,cols=10000,rank=10,nnz=1e6,zipf=0.5,noise=0.1,test=0.05,seed=1",
                &["--eval-every", "0"],
            ),
            (App::Mf, Self::Tiny) => (
                "rows=4000,cols=2000,rank=10,nnz=2e5,zipf=0.5,noise=0.1,test=0.1,seed=1",
                &["--eval-every", "0"],
            ),
            (App::MfZipf, Self::Full) => (
                "rows=1000000,cols=200000,rank=10,nnz=1e8,zipf=1.1,noise=0.1,test=0.01,seed=1",
                &["--eval-every", "0"],
            ),
            (App::MfZipf, Self::Quick) => (
                "rows=20000,cols=10000,rank=10,nnz=1e6,zipf=1.1,noise=0.1,test=0.05,seed=1",
                &["--eval-every", "0"],
            ),
            (App::MfZipf, Self::Tiny) => (
                "rows=4000,cols=2000,rank=10,nnz=2e5,zipf=1.1,noise=0.1,test=0.1,seed=1",
                &["--eval-every", "0"],
            ),
            (App::Kge, Self::Full) => (
                "entities=1000000,relations=1000,triples=7000000,seed=1",
                &["--eval-every", "0", "--eval-max", "500"],
            ),
            (App::Kge, Self::Quick) => (
                "entities=5000,relations=50,triples=40000,seed=1",
                &["--eval-every", "0", "--eval-max", "200"],
            ),
            (App::Kge, Self::Tiny) => (
                "entities=2000,relations=40,triples=20000,seed=1",
                &["--eval-every", "0", "--eval-max", "100"],
            ),
            (App::W2v, Self::Full) => (
                "words=20000000,vocab=100000,topics=50,seed=1",
                &["--eval-every", "0", "--eval-pairs", "5000"],
            ),
            (App::W2v, Self::Quick) => (
                "words=200000,vocab=5000,topics=20,seed=1",
                &["--eval-every", "0", "--eval-pairs", "1000"],
            ),
            (App::W2v, Self::Tiny) => (
                "words=100000,vocab=3000,topics=10,seed=1",
                &["--eval-every", "0", "--eval-pairs", "500"],
            ),
        };
        let mut args = vec!["--synthetic".to_string(), synthetic.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Epochs per run of `app` unless `--epochs` says otherwise.
    pub(crate) fn epochs(self, app: App) -> u32 {
        match (self, app) {
            // Quick w2v-gcide: 1 epoch, the fewest (the corpus stays whole: WordSim needs it).
            // Measured on the 2-vCPU VM under a load average of 3-10: one repetition of the
            // quick defaults (single, classic, classic-nolocal, lapse, nups at 1, 2, 4 nodes,
            // loopback and 10gbe: 21 runs) took 5 min 2 s at 1 epoch, 215 s of it in the epochs
            // (single 2.7 s; lapse at 2 and 4 nodes and the classic modes under 10gbe 13-25 s),
            // so a second epoch would add about 3.6 min per repetition. Even 1 epoch misses the
            // ~3 minute aim for the preset's 2 repetitions. One epoch is too few for quality:
            // `single` reached WordSim-353 0.04 after 1 epoch, 0.24 after 2, 0.36 after 3 (the
            // full preset's), so quick runs measure cost only.
            (Self::Quick, App::W2vGcide) => 1,
            (Self::Full, _) => 3,
            (Self::Quick, _) => 2,
            (Self::Tiny, _) => 1,
        }
    }

    /// Repetitions unless `--reps` says otherwise.
    pub(crate) fn reps(self) -> u32 {
        match self {
            Self::Full => 3,
            Self::Quick => 2,
            Self::Tiny => 1,
        }
    }

    /// The default workloads: all in the full preset; the quick one leaves out the real corpus
    /// (`w2v-gcide`: one repetition of its runs alone took 5 minutes, and it runs with
    /// `--apps`), the tiny CI preset also the skewed MF (`mf-zipf`). The suite leaves
    /// `w2v-gcide` out of the full defaults too when its data is missing ([`super::data::choose_apps`]).
    pub(crate) fn apps(self) -> Vec<App> {
        match self {
            Self::Tiny => vec![App::Mf, App::Kge, App::W2v],
            Self::Quick => vec![App::Mf, App::MfZipf, App::Kge, App::W2v],
            Self::Full => vec![App::Mf, App::MfZipf, App::Kge, App::W2v, App::W2vGcide],
        }
    }

    /// Modes unless `--modes` says otherwise: every mode but the NuPS ablation
    /// (`nups-replicate-only`) and `adapm` (both selectable with `--modes`); the tiny CI
    /// preset keeps to the four original modes.
    pub(crate) fn modes(self) -> Vec<Mode> {
        match self {
            Self::Tiny => vec![
                Mode::Single,
                Mode::Classic,
                Mode::ClassicNolocal,
                Mode::Lapse,
            ],
            Self::Full | Self::Quick => vec![
                Mode::Single,
                Mode::Classic,
                Mode::ClassicNolocal,
                Mode::Lapse,
                Mode::Nups,
            ],
        }
    }

    /// Node counts unless `--nodes` says otherwise.
    pub(crate) fn nodes(self) -> Vec<u32> {
        match self {
            Self::Tiny => vec![1, 2],
            _ => vec![1, 2, 4],
        }
    }

    /// Profiles unless `--profiles` says otherwise.
    pub(crate) fn profiles(self) -> Vec<Profile> {
        match self {
            Self::Tiny => vec![Profile::Loopback],
            _ => vec![Profile::Loopback, Profile::TenGbe],
        }
    }

    /// Per-run time limit unless `--timeout` says otherwise.
    pub(crate) fn timeout(self) -> Duration {
        Duration::from_secs(match self {
            Self::Full => 1800,
            Self::Quick => 30,
            Self::Tiny => 30,
        })
    }
}

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
    fn skewed_mf_runs_the_mf_app_on_zipf_data_outside_the_tiny_preset() {
        assert_eq!(App::MfZipf.command(), "mf");
        assert_eq!(App::MfZipf.name(), "mf-zipf");
        assert!(Preset::Quick.apps().contains(&App::MfZipf));
        assert!(!Preset::Tiny.apps().contains(&App::MfZipf));
        let data = Path::new("data");
        let args = Preset::Quick.train_args(App::MfZipf, data).join(" ");
        assert!(args.contains("zipf=1.1"), "{args}");
        let plain = Preset::Quick.train_args(App::Mf, data).join(" ");
        assert_eq!(
            args.replace("zipf=1.1", "zipf=0.5"),
            plain,
            "same matrix but the skew"
        );
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
    fn mode_names_are_the_apps_mode_names() {
        use clap::ValueEnum;
        for mode in Mode::ALL {
            let app = roam_apps::common::Mode::from_str(mode.name(), false)
                .unwrap_or_else(|e| panic!("{}: not an app mode: {e}", mode.name()));
            assert_eq!(app.name(), mode.name());
            assert_eq!(app.replicates(), mode.replicates(), "{}", mode.name());
            // The suite's own --modes parsing and the results file use the same names.
            assert_eq!(Mode::from_str(mode.name(), false), Ok(mode));
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                serde_json::json!(mode.name())
            );
        }
        for app in roam_apps::common::Mode::value_variants() {
            assert!(
                Mode::ALL.iter().any(|m| m.name() == app.name()),
                "the suite has no mode {}",
                app.name()
            );
        }
    }

    #[test]
    fn nups_is_a_default_mode_of_the_full_and_quick_presets_only() {
        for preset in [Preset::Full, Preset::Quick] {
            let modes = preset.modes();
            assert!(modes.contains(&Mode::Nups), "{preset:?}");
            assert!(!modes.contains(&Mode::NupsReplicateOnly), "{preset:?}");
            assert_eq!(modes[0], Mode::Single);
        }
        assert!(!Preset::Tiny.modes().iter().any(|m| m.replicates()));
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
    fn samplings_parse_as_default_or_a_scheme() {
        assert_eq!("default".parse::<Sampling>(), Ok(Sampling::Default));
        for name in [
            "naive",
            "preloc",
            "pool:1",
            "pool:64:strict",
            "local",
            "local:next",
        ] {
            let s: Sampling = name.parse().unwrap();
            assert_eq!(s.to_string(), name);
        }
        for bad in ["pool:0", "pool", "bogus", ""] {
            assert!(bad.parse::<Sampling>().is_err(), "{bad}");
        }
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
