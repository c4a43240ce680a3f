//! `roam bench suite`: the end-to-end benchmark of the training workloads. It runs every
//! workload in every mode at several node counts and network profiles, each configuration as a
//! child `roam launch ... -- roam train ...` with a time limit, repeats the whole matrix, and
//! writes `bench-results/<UTC time>/results.json`, `summary.md` and PNG figures, then prints
//! the summary tables. `--from RESULTS.json` redraws the tables and figures of an earlier suite.
//!
//! Files: [`workload`] (apps, modes, presets), [`plan`] (what runs), [`runner`] (one child run), [`record`] (the results file),
//! [`summary`] (medians, ratios, tables), [`plots`] (PNG figures).

pub(crate) mod data;
pub(crate) mod plan;
pub(crate) mod plots;
pub(crate) mod record;
pub(crate) mod runner;
pub(crate) mod summary;
pub(crate) mod workload;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use self::plan::{App, Matrix, Mode, Preset, Profile, Sampling};
use self::record::{Results, Status};
use self::summary::Summary;

/// Options of `roam bench suite`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SuiteArgs {
    /// Small workloads: the default matrix finishes in under 10 minutes on 2 cores.
    #[arg(long, conflicts_with = "tiny")]
    pub(crate) quick: bool,
    /// Tiny workloads, loopback, 1 and 2 nodes, one repetition of one epoch (CI-sized).
    #[arg(long)]
    pub(crate) tiny: bool,
    /// Workloads to run. Default: all (`--tiny`: mf, kge, w2v), `w2v-gcide` only when its data
    /// is there (`scripts/fetch-data.sh gcide gensim-eval` writes it into `$ROAM_DATA_DIR`, by
    /// default the repository's data/).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) apps: Option<Vec<App>>,
    /// Modes to run (`single` always at one node). Default: all but `nups-replicate-only` (the
    /// NuPS ablation) and `adapm`; `--tiny`: single, classic, classic-nolocal, lapse.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) modes: Option<Vec<Mode>>,
    /// Node counts for the distributed modes (`single` always runs at one node).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) nodes: Option<Vec<u32>>,
    /// Worker threads per node (each value is a separate configuration).
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) workers_per_node: Vec<u32>,
    /// Network profiles (`10gbe` and `1gbe` need root; skipped with a message otherwise).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) profiles: Option<Vec<Profile>>,
    /// Negative-sampling schemes of the workloads that sample (kge, w2v): `default` (no
    /// `--sampling` flag: the mode's own scheme), naive, preloc, pool:U, pool:U:strict, local,
    /// local:next. Each is a separate configuration in the modes that relocate keys (lapse,
    /// nups); the other modes, and mf, run once with their default.
    #[arg(long, value_delimiter = ',', default_value = "default", value_parser = Sampling::from_str)]
    pub(crate) samplings: Vec<Sampling>,
    /// Repetitions of the whole matrix.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) reps: Option<u32>,
    /// Epochs per run. Default: full 3, `--quick` 2 (`w2v-gcide` 1), `--tiny` 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) epochs: Option<u32>,
    /// Time limit per run, seconds (a run past it is stopped and recorded as timed out).
    #[arg(long)]
    pub(crate) timeout: Option<u64>,
    /// Directory under which `<UTC time>/` is created.
    #[arg(long, default_value = "bench-results")]
    pub(crate) out: PathBuf,
    /// Write into exactly this directory instead of `OUT/<UTC time>/` (with `--from`: instead
    /// of the results file's directory).
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// Redraw the summary and figures of an existing results.json (runs nothing).
    #[arg(long, value_name = "RESULTS_JSON")]
    pub(crate) from: Option<PathBuf>,
}

impl SuiteArgs {
    fn preset(&self) -> Preset {
        if self.tiny {
            Preset::Tiny
        } else if self.quick {
            Preset::Quick
        } else {
            Preset::Full
        }
    }

    /// The matrix after presets and overrides; an error when a workload asked for with
    /// `--apps` lacks its data (the default workloads are left out instead).
    pub(crate) fn matrix(&self) -> anyhow::Result<Matrix> {
        let preset = self.preset();
        let data = data::data_dir();
        let (apps, skipped) = data::choose_apps(preset, self.apps.as_deref(), &data)?;
        Ok(Matrix {
            preset,
            apps,
            modes: self.modes.clone().unwrap_or_else(|| preset.modes()),
            nodes: self.nodes.clone().unwrap_or_else(|| preset.nodes()),
            workers_per_node: self.workers_per_node.clone(),
            profiles: self.profiles.clone().unwrap_or_else(|| preset.profiles()),
            samplings: self.samplings.clone(),
            reps: self.reps.unwrap_or_else(|| preset.reps()),
            epochs: self.epochs,
            timeout: self
                .timeout
                .map_or_else(|| preset.timeout(), Duration::from_secs),
            data,
            skipped,
        })
    }
}

/// Runs the suite (or redraws one with `--from`); the exit code is 0 when at least one run
/// succeeded (failed and timed-out runs are recorded as such), 1 when none did, and an error
/// when the suite itself could not work.
pub(crate) fn run(args: &SuiteArgs) -> anyhow::Result<i32> {
    if let Some(from) = &args.from {
        let results = Results::read(from)?;
        let dir = match &args.dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                dir.clone()
            }
            None => from
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        };
        report(&results, &dir)?;
        return Ok(0);
    }
    let exe = std::env::current_exe().context("locating the roam binary")?;
    let matrix = args.matrix()?;
    let plan = plan::plan(&matrix, plan::effective_uid() == 0);
    if plan.runs.is_empty() {
        bail!("nothing to run: the chosen apps, modes, nodes and profiles leave no configuration");
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the system clock is before 1970")?
        .as_secs();
    let (started_utc, stamp) = record::utc_stamps(now);
    let dir = args.dir.clone().unwrap_or_else(|| args.out.join(stamp));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let results_path = dir.join("results.json");
    for s in &plan.skipped {
        eprintln!("suite: skipping {s}");
    }
    eprintln!(
        "suite: {} runs ({:?} preset, {} rep(s), {} epoch(s) each, limit {} s per run) into {}",
        plan.runs.len(),
        matrix.preset,
        matrix.reps,
        matrix.epochs_shown(),
        matrix.timeout.as_secs(),
        dir.display()
    );
    let mut results = Results {
        roam_version: env!("CARGO_PKG_VERSION").to_string(),
        started_utc,
        command: std::env::args().collect(),
        preset: matrix.preset,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        skipped: plan.skipped.clone(),
        runs: Vec::new(),
    };
    results.write(&results_path)?;
    let total = plan.runs.len();
    for (i, spec) in plan.runs.iter().enumerate() {
        let record = runner::run(&exe, spec, &dir)?;
        let what = match record.status {
            Status::Ok => format!(
                "{:.3} s/epoch, local {:.3}",
                record.epoch_seconds().unwrap_or(f64::NAN),
                record
                    .counters
                    .as_ref()
                    .map_or(f64::NAN, |c| c.local_fraction)
            ),
            Status::Timeout => "TIMED OUT".to_string(),
            Status::Failed => format!("FAILED: {}", record.error.as_deref().unwrap_or("")),
        };
        eprintln!(
            "suite: [{}/{total}] {} ({:.1} s wall): {what}",
            i + 1,
            record.id,
            record.wall_seconds
        );
        results.runs.push(record);
        results.write(&results_path)?;
    }
    report(&results, &dir)?;
    eprintln!("suite: results in {}", results_path.display());
    if results.runs.iter().all(|r| !r.ok()) {
        eprintln!(
            "suite: no run succeeded; see the logs under {}",
            dir.join("logs").display()
        );
        return Ok(1);
    }
    Ok(0)
}

/// Writes `summary.md` and the figures into `dir` and prints the summary.
fn report(results: &Results, dir: &Path) -> anyhow::Result<()> {
    let summary = Summary::from_runs(&results.runs);
    let mut text = format!(
        "Suite of {} ({:?} preset, {} runs, {} CPUs); medians over repetitions with min–max.\n",
        results.started_utc,
        results.preset,
        results.runs.len(),
        results.cpus
    );
    for s in &results.skipped {
        text.push_str(&format!("\nSkipped: {s}\n"));
    }
    text.push_str(&summary.markdown());
    let md = dir.join("summary.md");
    std::fs::write(&md, &text).with_context(|| format!("writing {}", md.display()))?;
    let pngs = plots::draw_all(&summary, dir).context("drawing the figures")?;
    println!("{text}");
    for p in pngs {
        eprintln!("suite: wrote {}", p.display());
    }
    Ok(())
}
