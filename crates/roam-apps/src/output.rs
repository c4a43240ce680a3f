//! What a training job shows a person and writes for programs (`roam train`'s output).
//!
//! A person at a terminal sees, on rank 0, a progress bar per epoch (data points per second,
//! ETA, the latest loss), one line per epoch (epoch, seconds, loss, the app's quality metric,
//! the share of accesses served locally) and at the end a short summary table. Off a terminal
//! (CI, pipes, `roam launch`'s prefixed relay) only the per-epoch lines are printed, so logs
//! stay short and greppable. Programs get the machine-readable report instead: `--json` prints
//! it on stdout exactly as earlier versions always did (rank 0's report line, then one
//! `roam_node_stats` line per node; the per-epoch lines then go to stderr so stdout stays pure
//! JSON), and `--report FILE` writes those same lines to FILE (JSON Lines: the report first,
//! every node's counters after it). [`read_report`] reads either form back, so a parser works
//! on a report file, on `--json` output and on the output of binaries that predate the flag.

use std::fs::OpenOptions;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use roam::{NodeStats, Worker};
use serde_json::Value;

/// Output options shared by `roam train mf|kge|w2v`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Print the machine-readable report on stdout: rank 0's report as one JSON line and every
    /// node's counters as one `roam_node_stats` line (the per-epoch lines go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE as JSON Lines: rank 0's report (the line `--json` prints),
    /// then one `roam_node_stats` line per node (nodes on other hosts write to FILE there).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Draw loss, quality and seconds per epoch into FILE.png (rank 0); `roam plot` draws
    /// several runs.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Record every change of where a key is held (key, from, to, time) and every node's
    /// local and remote accesses over time into FILE (one JSON line per node); `roam plot
    /// --trace FILE` draws it.
    #[arg(long, value_name = "FILE")]
    pub trace_allocation: Option<PathBuf>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (default: $ROAM_METRICS_ADDR, else
    /// none). Under `roam launch`, set ROAM_METRICS_ADDR for the launcher instead: each node
    /// then gets the port plus its rank. See docs/metrics.md.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}

/// A report that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file could not be read or written.
    /// (The cause is in the message and not exposed as `source()`, so that a binary's
    /// `Caused by:` does not print it twice: the repo's convention, `roam::error`.)
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// The file holds no roam training report.
    #[error(
        "{path}: not a roam training report (no JSON object with \"app\" and \"epochs\"; \
         write one with `roam train ... --report FILE`)"
    )]
    NotRoam {
        /// The file.
        path: PathBuf,
    },
}

impl ReportError {
    fn io(path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}

/// Whether a JSON value is a training report (an object with `app` and an `epochs` array).
pub fn is_report(v: &Value) -> bool {
    v.get("app").is_some_and(Value::is_string) && v.get("epochs").is_some_and(Value::is_array)
}

/// The training report in `text`: the whole text as one JSON document, else the first line
/// that is one (after an optional `[node R] ` prefix from `roam launch`). Accepts `--report`
/// files, `--json` stdout and the stdout of binaries that always printed JSON.
pub fn find_report(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text)
        && is_report(&v)
    {
        return Some(v);
    }
    text.lines().find_map(|line| {
        let body = match line.strip_prefix("[node ") {
            Some(rest) => rest.split_once("] ")?.1,
            None => line,
        };
        let v = serde_json::from_str::<Value>(body.trim()).ok()?;
        is_report(&v).then_some(v)
    })
}

/// The `roam_node_stats` objects in `text` (one per line, optionally `[node R] `-prefixed).
pub fn find_node_stats(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| {
            let start = line.find("{\"roam_node_stats\"")?;
            let mut v = serde_json::from_str::<Value>(&line[start..]).ok()?;
            Some(v["roam_node_stats"].take())
        })
        .collect()
}

/// Reads the training report in `path` ([`find_report`]).
pub fn read_report(path: &Path) -> Result<Value, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ReportError::io(path, e))?;
    find_report(&text).ok_or_else(|| ReportError::NotRoam {
        path: path.to_path_buf(),
    })
}

/// Appends one line to `path` in a single write (lines of several node processes sharing a
/// file stay whole: appends to a local file do not interleave within one `write`).
fn append_line(path: &Path, line: &str) -> Result<(), ReportError> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ReportError::io(path, e))?;
    file.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| ReportError::io(path, e))
}

impl OutputArgs {
    /// Sets what the node does for the output: print its counters at shutdown only with
    /// `--json`, record the allocation trace with `--trace-allocation`.
    pub fn configure(&self, cfg: &mut roam::Config) {
        cfg.print_stats = self.json;
        cfg.trace_allocation = self.trace_allocation.is_some();
        if self.metrics_addr.is_some() {
            cfg.metrics_addr.clone_from(&self.metrics_addr);
        }
    }

    /// Called by every node once it started: rank 0 empties the report and trace files, so
    /// that every node's lines (appended at the end, after rank 0's report) land in fresh
    /// files. Nodes other than rank 0 reach the end only after rank 0 wrote its report,
    /// because shutdown waits for all nodes.
    pub fn start(&self, rank: u32) -> Result<(), ReportError> {
        if rank == 0 {
            for path in [&self.report, &self.trace_allocation].into_iter().flatten() {
                std::fs::File::create(path).map_err(|e| ReportError::io(path, e))?;
            }
        }
        Ok(())
    }

    /// Every node once its workers are done (before shutdown): its allocation trace goes into
    /// the trace file as one `{"roam_allocation_trace": {...}}` line.
    pub fn trace(&self, node: &roam::NodeHandle) -> Result<(), ReportError> {
        match &self.trace_allocation {
            Some(path) => {
                let trace = node.take_allocation_trace();
                let line = serde_json::json!({ "roam_allocation_trace": trace }).to_string();
                append_line(path, &line)
            }
            None => Ok(()),
        }
    }

    /// Rank 0's report: printed (`--json`), written (`--report`), summarised (terminal).
    pub fn finish(&self, report: &Value) -> Result<(), ReportError> {
        let line = serde_json::to_string(report).expect("reports serialise");
        if self.json {
            println!("{line}");
        }
        if let Some(path) = &self.report {
            append_line(path, &line)?;
        }
        if !self.json && std::io::stdout().is_terminal() {
            print!("{}", summary(report));
        }
        Ok(())
    }

    /// Every node after shutdown: its counters go into the report file.
    pub fn node_stats(&self, stats: &NodeStats) -> Result<(), ReportError> {
        match &self.report {
            Some(path) => append_line(path, &stats.to_json_line()),
            None => Ok(()),
        }
    }
}

/// Shows a job's progress on rank 0: per-epoch bars and lines.
#[derive(Clone, Debug)]
pub struct Console {
    /// The per-epoch lines go to stderr (stdout carries `--json`'s report).
    to_stderr: bool,
    /// The row field headlined as quality (`test_rmse`, `mrr`, ...).
    quality: String,
    /// What the bar counts (`points`, `triples`, `words`).
    unit: &'static str,
}

impl Console {
    /// A console for a job whose quality metric is the epoch row's `quality` field.
    pub fn new(args: &OutputArgs, quality: &str, unit: &'static str) -> Self {
        Self {
            to_stderr: args.json,
            quality: quality.to_string(),
            unit,
        }
    }

    /// A bar for epoch `epoch` of `epochs`, counting `len` data points: drawn on global worker
    /// 0 when stderr is a terminal (indicatif hides it otherwise), hidden on every other
    /// worker. `loss` is the latest epoch's loss, shown until this epoch's is known.
    pub fn bar(
        &self,
        worker: &Worker,
        len: u64,
        (epoch, epochs): (u32, u32),
        loss: Option<f64>,
    ) -> ProgressBar {
        if worker.global_id() != 0 {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len);
        let template = format!(
            "{{prefix}} {{wide_bar}} {{human_pos}}/{{human_len}} {unit} {{per_sec:0}} ETA {{eta}} {{msg}}",
            unit = self.unit
        );
        bar.set_style(
            ProgressStyle::with_template(&template)
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(format!("epoch {epoch}/{epochs}"));
        if let Some(loss) = loss {
            bar.set_message(format!("loss {}", number(loss)));
        }
        bar
    }

    /// Prints one epoch's line on global worker 0 (after its bar was cleared).
    pub fn epoch(&self, worker: &Worker, row: &Value, epochs: u32) {
        if worker.global_id() == 0 {
            self.print(&epoch_line(row, &self.quality, epochs));
        }
    }

    fn print(&self, line: &str) {
        if self.to_stderr {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

/// A number in a short readable form: 4 significant digits, scientific when large or small.
pub fn number(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 {
        "0".into()
    } else if (1e-3..1e5).contains(&a) {
        let digits = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{x:.digits$}")
    } else {
        format!("{x:.3e}")
    }
}

/// `epoch  3/30   0.214 s  loss 1.234e5  test_rmse 0.9512  local 87.3%`: the per-epoch line.
pub fn epoch_line(row: &Value, quality: &str, epochs: u32) -> String {
    let width = epochs.to_string().len();
    let epoch = row["epoch"].as_u64().unwrap_or(0);
    let mut line = format!(
        "epoch {epoch:>width$}/{epochs}  {:>8} s  loss {}",
        number(row["seconds"].as_f64().unwrap_or(f64::NAN)),
        number(row["loss"].as_f64().unwrap_or(f64::NAN)),
    );
    if let Some(q) = row.get(quality).and_then(Value::as_f64) {
        line += &format!("  {quality} {}", number(q));
    }
    if let Some(local) = row.get("local_fraction").and_then(Value::as_f64) {
        line += &format!("  local {:.1}%", local * 100.0);
    }
    line
}

/// The quality metric an app's epoch rows headline (w2v names its own in `settings.metric`).
pub fn quality_metric(report: &Value) -> String {
    match report["app"].as_str() {
        Some("mf") => "test_rmse".into(),
        Some("kge") => "mrr".into(),
        _ => report["settings"]["metric"]
            .as_str()
            .unwrap_or("heldout_auc")
            .into(),
    }
}

/// Whether a quality metric is better when lower (errors) rather than higher (ranks, AUC).
pub fn lower_is_better(metric: &str) -> bool {
    metric.ends_with("rmse") || metric.ends_with("loss")
}

/// The summary table printed at the end on a terminal.
pub fn summary(report: &Value) -> String {
    let epochs = report["epochs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let quality = quality_metric(report);
    let seconds: f64 = epochs.iter().filter_map(|e| e["seconds"].as_f64()).sum();
    let mut rows: Vec<(String, String)> = vec![
        (
            "run".into(),
            format!(
                "{} · {} · {} node(s) × {} worker(s)",
                report["app"].as_str().unwrap_or("?"),
                report["mode"].as_str().unwrap_or("?"),
                report["nodes"],
                report["workers_per_node"],
            ),
        ),
        (
            "data".into(),
            short_dataset(report["dataset"].as_str().unwrap_or("?")),
        ),
        (
            "epochs".into(),
            format!(
                "{} in {} s ({} s/epoch)",
                epochs.len(),
                number(seconds),
                number(seconds / epochs.len().max(1) as f64)
            ),
        ),
    ];
    if let Some(last) = epochs.last() {
        rows.push((
            "final loss".into(),
            number(last["loss"].as_f64().unwrap_or(f64::NAN)),
        ));
    }
    let scored: Vec<(u64, f64)> = epochs
        .iter()
        .filter_map(|e| Some((e["epoch"].as_u64()?, e.get(&quality)?.as_f64()?)))
        .collect();
    if let Some(&(_, last)) = scored.last() {
        let lower = lower_is_better(&quality);
        let best = scored.iter().copied().reduce(|a, b| {
            if (lower && b.1 < a.1) || (!lower && b.1 > a.1) {
                b
            } else {
                a
            }
        });
        let best = best.map_or(String::new(), |(e, q)| {
            format!(" (best {} at epoch {e})", number(q))
        });
        rows.push((
            format!("final {quality}"),
            format!("{}{best}", number(last)),
        ));
    }
    if let Some(local) = report["local_fraction"].as_f64() {
        rows.push(("local accesses".into(), format!("{:.1} %", local * 100.0)));
    }
    let count = |k: &str| report[k].as_u64().unwrap_or(0);
    rows.push(("relocations".into(), count("relocations").to_string()));
    rows.push((
        "sent".into(),
        format!(
            "{} MB in {} messages",
            number(count("bytes_sent") as f64 / 1e6),
            count("messages_sent")
        ),
    ));
    if let Some(cpu) = report["cpu_seconds"].as_f64() {
        rows.push(("cpu".into(), format!("{} s", number(cpu))));
    }
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let mut out = String::from("\nsummary\n");
    for (k, v) in rows {
        out += &format!("  {k:<width$}  {v}\n");
    }
    out
}

/// A dataset name without a long synthetic spec's tail (the full name is in the report).
fn short_dataset(name: &str) -> String {
    if name.chars().count() <= 60 {
        return name.to_string();
    }
    let head: String = name.chars().take(57).collect();
    format!("{head}...")
}

/// Per-epoch local fraction from cumulative cluster-wide (local, all) key access counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalFraction {
    before: [u64; 2],
}

impl LocalFraction {
    /// The share of the accesses since the last call that were local (None if there were
    /// none); `now` is the cluster's cumulative (local keys, all keys).
    pub fn epoch(&mut self, now: [u64; 2]) -> Option<f64> {
        let local = now[0].saturating_sub(self.before[0]);
        let all = now[1].saturating_sub(self.before[1]);
        self.before = now;
        (all > 0).then(|| local as f64 / all as f64)
    }
}

/// This node's cumulative (local keys, all keys) accessed by its workers.
pub fn access_counts(stats: &NodeStats) -> [u64; 2] {
    let local = stats.local_pull_keys + stats.local_push_keys;
    [
        local,
        local + stats.remote_pull_keys + stats.remote_push_keys,
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The binary prints errors with anyhow's `{:?}` (message, then `Caused by:`): the I/O
    /// cause of an unreadable report must appear once.
    #[test]
    fn an_unreadable_report_names_its_cause_once() {
        let err = ReportError::io(
            Path::new("/nonexistent/report.json"),
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file here"),
        );
        let shown = format!("{:?}", anyhow::Error::new(err));
        assert_eq!(shown.matches("no such file here").count(), 1, "{shown}");
        assert!(shown.contains("/nonexistent/report.json"), "{shown}");
    }

    #[test]
    fn reports_are_found_in_files_json_output_and_launch_prefixed_output() {
        let report = json!({"app": "mf", "mode": "lapse", "epochs": [{"epoch": 1}]});
        let line = report.to_string();
        assert_eq!(find_report(&line), Some(report.clone()));
        let pretty = serde_json::to_string_pretty(&report).unwrap();
        assert_eq!(find_report(&pretty), Some(report.clone()));
        let launched = format!(
            "[node 1] {{\"roam_node_stats\":{{\"rank\":1}}}}\n[node 0] epoch 1/1 ...\n[node 0] {line}\n"
        );
        assert_eq!(find_report(&launched), Some(report));
        assert_eq!(find_node_stats(&launched), vec![json!({"rank": 1})]);
        assert_eq!(find_report("{\"roam_node_stats\":{}}\nhello"), None);
    }

    #[test]
    fn unreadable_and_foreign_files_are_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("roam-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.json");
        let err = read_report(&missing).unwrap_err().to_string();
        assert!(err.contains("missing.json"), "{err}");
        let foreign = dir.join("foreign.json");
        std::fs::write(&foreign, "{\"name\": \"not roam\"}\n").unwrap();
        let err = read_report(&foreign).unwrap_err().to_string();
        assert!(
            err.contains("foreign.json") && err.contains("not a roam training report"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn epoch_lines_show_time_loss_quality_and_locality() {
        let row = json!({"epoch": 3, "seconds": 0.2143, "loss": 123456.0, "test_rmse": 0.95123,
            "local_fraction": 0.8734});
        assert_eq!(
            epoch_line(&row, "test_rmse", 30),
            "epoch  3/30    0.2143 s  loss 1.235e5  test_rmse 0.9512  local 87.3%"
        );
        // Epochs without evaluation or locality counts leave those out.
        let row = json!({"epoch": 1, "seconds": 2.0, "loss": 0.5});
        assert_eq!(
            epoch_line(&row, "mrr", 5),
            "epoch 1/5     2.000 s  loss 0.5000"
        );
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1.0), "1.000");
        assert_eq!(number(12.346), "12.35");
        assert_eq!(number(0.0012346), "0.001235");
        assert_eq!(number(123456.0), "1.235e5");
        assert_eq!(number(0.00001), "1.000e-5");
    }

    #[test]
    fn summaries_name_the_run_and_its_best_quality() {
        let report = json!({"app": "mf", "mode": "lapse", "nodes": 2, "workers_per_node": 2,
            "dataset": "embedded", "local_fraction": 0.9, "relocations": 12, "bytes_sent": 2_000_000,
            "messages_sent": 40, "cpu_seconds": 1.5,
            "epochs": [{"epoch": 1, "seconds": 1.0, "loss": 9.0, "test_rmse": 1.2},
                       {"epoch": 2, "seconds": 1.0, "loss": 8.0, "test_rmse": 1.1}]});
        let s = summary(&report);
        for needle in [
            "mf · lapse · 2 node(s) × 2 worker(s)",
            "2 in 2.000 s (1.000 s/epoch)",
            "final test_rmse  1.100 (best 1.100 at epoch 2)",
            "90.0 %",
            "2.000 MB in 40 messages",
        ] {
            assert!(s.contains(needle), "{needle:?} in\n{s}");
        }
    }

    #[test]
    fn local_fractions_are_per_interval() {
        let mut f = LocalFraction::default();
        assert_eq!(f.epoch([5, 10]), Some(0.5));
        assert_eq!(f.epoch([14, 20]), Some(0.9));
        assert_eq!(f.epoch([14, 20]), None);
    }
}
