//! The vocabulary of a suite: the workloads ([`App`]) and their sizes per [`Preset`] (full,
//! `--quick`, `--tiny`: the `roam train` arguments, epochs, repetitions and defaults), the
//! modes, network profiles and negative-sampling schemes. `plan.rs` expands them into runs.
//!
//! Invariants: every name here is the one `roam train` and the reports use (mode names are the
//! apps' own, checked by a test), so a run's id, its command line and its record agree.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::data::{CTR_ML100K, GCIDE_CORPUS, GENSIM_EVAL};

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
    /// Knowledge-graph embeddings on the same graph with the bucket schedule (`--schedule
    /// buckets`: entity parts trained in rounds, PyTorch-BigGraph's schedule).
    KgeBuckets,
    /// Word vectors.
    W2v,
    /// Word vectors on the real GCIDE corpus, scored by WordSim-353 (needs
    /// `scripts/fetch-data.sh gcide gensim-eval`).
    W2vGcide,
    /// Click-through-rate prediction on synthetic clicks (Zipf-distributed ids over sparse
    /// fields), scored by the test AUC.
    Ctr,
    /// Click-through-rate prediction on MovieLens-100k as clicks (needs
    /// `scripts/fetch-data.sh ml-100k-ctr`).
    CtrMl100k,
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
            Self::KgeBuckets => "kge-buckets",
            Self::W2v => "w2v",
            Self::W2vGcide => "w2v-gcide",
            Self::Ctr => "ctr",
            Self::CtrMl100k => "ctr-ml100k",
        }
    }

    /// The `roam train` subcommand (the app its reports name).
    pub(crate) fn command(self) -> &'static str {
        match self {
            Self::Mf | Self::MfZipf => "mf",
            Self::Kge | Self::KgeBuckets => "kge",
            Self::W2v | Self::W2vGcide => "w2v",
            Self::Ctr | Self::CtrMl100k => "ctr",
        }
    }

    /// The setting (in the report's `settings`) that counts one epoch's data points.
    pub(crate) fn points_setting(self) -> &'static str {
        match self {
            Self::Mf | Self::MfZipf => "train_points",
            Self::Kge | Self::KgeBuckets => "train_triples",
            Self::W2v | Self::W2vGcide => "train_words",
            Self::Ctr | Self::CtrMl100k => "train_rows",
        }
    }

    /// What one data point is, for tables.
    pub(crate) fn point_name(self) -> &'static str {
        match self {
            Self::Mf | Self::MfZipf => "rating",
            Self::Kge | Self::KgeBuckets => "triple",
            Self::W2v | Self::W2vGcide => "word",
            Self::Ctr | Self::CtrMl100k => "example",
        }
    }

    /// The app's negative sampler, for the workloads that draw negatives (`--sampling`; the
    /// bucket schedule draws its own, from the parts held and its pool).
    pub(crate) fn sampler(self) -> Option<roam_apps::sampling::App> {
        match self {
            Self::Mf | Self::MfZipf | Self::Ctr | Self::CtrMl100k | Self::KgeBuckets => None,
            Self::Kge => Some(roam_apps::sampling::App::Kge),
            Self::W2v | Self::W2vGcide => Some(roam_apps::sampling::App::W2v),
        }
    }

    /// Whether the workload draws negatives through roam's sampling API (takes `--sampling`).
    pub(crate) fn samples(self) -> bool {
        self.sampler().is_some()
    }

    /// Whether the workload reports a quality metric after its epochs (kge, w2v, ctr; MF's
    /// suite runs skip their evaluation).
    pub(crate) fn scored(self) -> bool {
        !matches!(self, Self::Mf | Self::MfZipf)
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
            // MovieLens-100k as clicks: the whole set in every preset (it is small).
            (App::CtrMl100k, _) => {
                return vec![
                    "--data".to_string(),
                    data.join(CTR_ML100K).display().to_string(),
                ];
            }
            // The scale spec of docs/benchmarks.md: 26 fields over 10^8 ids each.
            (App::Ctr, Self::Full) => (
                "fields=26,ids=1e8,zipf=1.1,rows=1e6,test=0.1,signal=2,seed=1",
                &[],
            ),
            // The app's embedded synthetic set (8 fields, 40,000 rows: 0.7 s per single epoch).
            (App::Ctr, Self::Quick | Self::Tiny) => return Vec::new(),
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
            // The same matrix as `mf`'s but for the skew: Zipf(1.1) rows and columns.
            (App::MfZipf, _) => {
                return self
                    .train_args(App::Mf, data)
                    .into_iter()
                    .map(|arg| arg.replace("zipf=0.5", "zipf=1.1"))
                    .collect();
            }
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
            (App::KgeBuckets, _) => {
                let mut args = self.train_args(App::Kge, data);
                args.extend(["--schedule".to_string(), "buckets".to_string()]);
                return args;
            }
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
            // One epoch of the embedded set measures the cost; its AUC is already near its
            // plateau after one (docs/benchmarks.md, `roam train ctr`).
            (Self::Quick, App::Ctr | App::CtrMl100k) => 1,
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
    /// `--apps`) and MovieLens clicks (`ctr-ml100k`), the tiny CI preset also the skewed MF
    /// (`mf-zipf`) and `ctr` (CI runs it with `--apps ctr`, apart). The suite leaves the
    /// workloads on real data out of the full defaults too when their data is missing
    /// ([`super::data::choose_apps`]).
    pub(crate) fn apps(self) -> Vec<App> {
        match self {
            Self::Tiny => vec![App::Mf, App::Kge, App::W2v],
            Self::Quick => vec![
                App::Mf,
                App::MfZipf,
                App::Kge,
                App::KgeBuckets,
                App::W2v,
                App::Ctr,
            ],
            Self::Full => vec![
                App::Mf,
                App::MfZipf,
                App::Kge,
                App::KgeBuckets,
                App::W2v,
                App::W2vGcide,
                App::Ctr,
                App::CtrMl100k,
            ],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skewed_mf_runs_the_mf_app_on_zipf_data_outside_the_tiny_preset() {
        assert_eq!(App::MfZipf.command(), "mf");
        assert_eq!(App::MfZipf.name(), "mf-zipf");
        assert!(Preset::Quick.apps().contains(&App::MfZipf));
        assert!(!Preset::Tiny.apps().contains(&App::MfZipf));
        let data = Path::new("data");
        for preset in [Preset::Full, Preset::Quick, Preset::Tiny] {
            let args = preset.train_args(App::MfZipf, data).join(" ");
            assert!(args.contains("zipf=1.1"), "{args}");
            let plain = preset.train_args(App::Mf, data).join(" ");
            assert!(plain.contains("zipf=0.5"), "{plain}");
            assert_eq!(
                args.replace("zipf=1.1", "zipf=0.5"),
                plain,
                "same matrix but the skew"
            );
        }
    }

    #[test]
    fn kge_buckets_runs_the_kge_app_on_its_graph_with_the_bucket_schedule() {
        assert_eq!(App::KgeBuckets.command(), "kge");
        assert_eq!(App::KgeBuckets.name(), "kge-buckets");
        assert!(
            !App::KgeBuckets.samples(),
            "the schedule draws its own negatives"
        );
        assert!(App::KgeBuckets.scored());
        assert!(Preset::Quick.apps().contains(&App::KgeBuckets));
        assert!(!Preset::Tiny.apps().contains(&App::KgeBuckets));
        let data = Path::new("data");
        for preset in [Preset::Full, Preset::Quick, Preset::Tiny] {
            let plain = preset.train_args(App::Kge, data).join(" ");
            let args = preset.train_args(App::KgeBuckets, data).join(" ");
            assert_eq!(args, format!("{plain} --schedule buckets"));
        }
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
}
