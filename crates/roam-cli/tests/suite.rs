//! `roam bench suite --tiny` end to end: every workload in every mode at 1 and 2 nodes on
//! loopback, one repetition. Checks the results file record by record (every run finished,
//! has its epochs with wall and CPU seconds, counters in range, lapse serves more accesses
//! locally than classic at 2 nodes), the summary, and that every PNG is a well-formed image;
//! then the NuPS modes at 2 nodes against single and lapse: their records (with the replica
//! figures the jobs reported), the CPU overhead table's column per mode and nups's speed-ups;
//! then w2v in lapse with two sampling schemes: the records carry the scheme the job used, the
//! tables a configuration per scheme, and the quality figures are drawn; then `--modes adapm`:
//! every workload runs in it, with its intents in every epoch's record; then `--apps ctr`: its
//! runs report the test AUC, the NuPS modes it refuses are skipped with the reason, and its
//! quality table and figures are written. No timing is asserted.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// CRC-32 (IEEE) as PNG chunks use it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Walks a PNG's chunks, checking signature, every CRC, IHDR first, IDAT present, IEND last;
/// returns (width, height).
fn parse_png(path: &Path) -> (u32, u32) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert_eq!(
        &data[..8],
        b"\x89PNG\r\n\x1a\n",
        "{}: PNG signature",
        path.display()
    );
    let mut at = 8;
    let mut types = Vec::new();
    let mut size = (0, 0);
    while at < data.len() {
        let len = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        let kind = &data[at + 4..at + 8];
        let body = &data[at + 8..at + 8 + len];
        let crc = u32::from_be_bytes(data[at + 8 + len..at + 12 + len].try_into().unwrap());
        assert_eq!(
            crc,
            crc32(&data[at + 4..at + 8 + len]),
            "{}: CRC of chunk {}",
            path.display(),
            String::from_utf8_lossy(kind)
        );
        if kind == b"IHDR" {
            size = (
                u32::from_be_bytes(body[0..4].try_into().unwrap()),
                u32::from_be_bytes(body[4..8].try_into().unwrap()),
            );
        }
        types.push(String::from_utf8_lossy(kind).into_owned());
        at += 12 + len;
    }
    assert_eq!(types.first().map(String::as_str), Some("IHDR"));
    assert_eq!(types.last().map(String::as_str), Some("IEND"));
    assert!(
        types.iter().any(|t| t == "IDAT"),
        "{}: no image data",
        path.display()
    );
    size
}

/// The cells of the rows of the Markdown table whose header line is `header` (after its
/// separator line, up to the first line that is not a row).
fn table_after(markdown: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = markdown.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "no table {header}\n{markdown}");
    assert!(lines.next().is_some_and(|l| l.starts_with("|---|")));
    lines
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// Asserts that each of `names` in `dir` is a well-formed PNG of at least 300 × 300 pixels.
fn assert_figures(dir: &Path, names: &[&str]) {
    for png in names {
        let (w, h) = parse_png(&dir.join(png));
        assert!(w >= 300 && h >= 300, "{png}: {w}x{h}");
    }
}

/// A finished `roam bench suite --tiny` in a scratch directory.
struct Suite {
    dir: Scratch,
    stdout: String,
    stderr: String,
    /// The results file.
    results: Value,
}

impl Suite {
    /// Runs `roam bench suite --tiny ARGS --dir DIR` (DIR named after `name`), asserting that it
    /// succeeds.
    fn run(name: &str, args: &[&str]) -> Self {
        let dir = Scratch(std::env::temp_dir().join(format!("{name}-{}", std::process::id())));
        let out = Command::new(common::roam())
            .args(["bench", "suite", "--tiny"])
            .args(args)
            .arg("--dir")
            .arg(&dir.0)
            .output()
            .expect("running roam bench suite");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "suite failed: {}\n{stdout}\n{stderr}",
            out.status
        );
        let results = serde_json::from_str(
            &std::fs::read_to_string(dir.0.join("results.json")).expect("results.json"),
        )
        .expect("results.json parses");
        Self {
            dir,
            stdout,
            stderr,
            results,
        }
    }

    /// The results file's runs.
    fn runs(&self) -> &[Value] {
        self.results["runs"].as_array().expect("runs")
    }

    /// `summary.md`, asserting that the suite printed it.
    fn summary(&self) -> String {
        let summary = std::fs::read_to_string(self.dir.0.join("summary.md")).expect("summary.md");
        assert!(self.stdout.contains(&summary), "the summary is printed");
        summary
    }
}

fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} missing in {v}"))
}

#[test]
fn tiny_suite_writes_complete_results_summary_and_figures() {
    let suite = Suite::run("roam-suite-test", &[]);
    let (dir, stdout) = (&suite.dir, &suite.stdout);
    assert!(
        stdout.contains("Speed-up of lapse"),
        "summary table on stdout:\n{stdout}"
    );

    assert_eq!(suite.results["preset"], "tiny");
    let runs = suite.runs();
    // 3 workloads x (single + 3 modes x {1, 2} nodes), one repetition.
    assert_eq!(runs.len(), 21, "{}", suite.stderr);
    for r in runs {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["status"], "ok", "{id}: {}", r["error"]);
        assert!(
            f(r, "cpu_seconds") > 0.0,
            "{id}: CPU of the launched processes"
        );
        assert!(f(r, "wall_seconds") > 0.0);
        let epochs = r["epochs"].as_array().expect("epochs");
        assert_eq!(epochs.len(), 1, "{id}");
        for e in epochs {
            assert!(f(e, "seconds") > 0.0, "{id}: {e}");
            let cpu = f(e, "cpu_seconds");
            assert!(cpu > 0.0 && cpu.is_finite(), "{id}: {e}");
            assert!(f(e, "loss").is_finite(), "{id}: {e}");
        }
        let c = &r["counters"];
        let local = f(c, "local_fraction");
        assert!((0.0..=1.0).contains(&local), "{id}: {c}");
        assert!(r["points_per_epoch"].as_u64().unwrap() > 0, "{id}");
        let (mode, nodes) = (r["mode"].as_str().unwrap(), r["nodes"].as_u64().unwrap());
        match (mode, nodes) {
            ("classic-nolocal", _) => assert_eq!(local, 0.0, "{id}: every access by message"),
            (_, 1) => assert_eq!(local, 1.0, "{id}: one node holds every key"),
            _ => assert!(c["bytes_sent"].as_u64().unwrap() > 0, "{id}: {c}"),
        }
    }
    let local = |app: &str, mode: &str| {
        let r = runs
            .iter()
            .find(|r| r["app"] == app && r["mode"] == mode && r["nodes"] == 2)
            .unwrap_or_else(|| panic!("{app} {mode} at 2 nodes"));
        f(&r["counters"], "local_fraction")
    };
    for app in ["mf", "kge", "w2v"] {
        let (lapse, classic) = (local(app, "lapse"), local(app, "classic"));
        assert!(
            lapse > classic,
            "{app}: lapse's local fraction {lapse} should beat classic's {classic} at 2 nodes"
        );
    }

    let summary = suite.summary();
    for app in ["mf", "kge", "w2v"] {
        assert!(
            summary.contains(&format!("#### {app}, loopback")),
            "{summary}"
        );
    }
    assert_figures(
        &dir.0,
        &[
            "epoch_time.png",
            "speedup.png",
            "local_fraction.png",
            "bytes_per_point.png",
            "cpu_overhead.png",
        ],
    );
    for r in runs {
        let log = dir.0.join(r["log"].as_str().unwrap());
        assert!(log.is_file(), "{}", log.display());
    }

    // --from redraws the figures and the summary of an existing results file.
    std::fs::remove_file(dir.0.join("speedup.png")).unwrap();
    let redraw = Command::new(common::roam())
        .args(["bench", "suite", "--from"])
        .arg(dir.0.join("results.json"))
        .output()
        .expect("running roam bench suite --from");
    assert!(redraw.status.success(), "{redraw:?}");
    assert_eq!(String::from_utf8_lossy(&redraw.stdout), *stdout);
    parse_png(&dir.0.join("speedup.png"));

    // With --dir the redraw goes there instead, leaving the results' directory as it was.
    let elsewhere = dir.0.join("redrawn");
    let redraw = Command::new(common::roam())
        .args(["bench", "suite", "--from"])
        .arg(dir.0.join("results.json"))
        .arg("--dir")
        .arg(&elsewhere)
        .output()
        .expect("running roam bench suite --from --dir");
    assert!(redraw.status.success(), "{redraw:?}");
    parse_png(&elsewhere.join("speedup.png"));
    assert!(elsewhere.join("summary.md").is_file());
}

#[test]
fn tiny_suite_with_the_nups_modes_reports_their_cpu_overhead_and_speedups() {
    let suite = Suite::run(
        "roam-suite-nups-test",
        &[
            "--modes",
            "single,lapse,nups,nups-replicate-only",
            "--nodes",
            "2",
        ],
    );
    let runs = suite.runs();
    // 3 workloads x (single + 3 modes at 2 nodes), one repetition.
    assert_eq!(runs.len(), 12, "{}", suite.stderr);
    for r in runs {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["status"], "ok", "{id}: {}", r["error"]);
        let epochs = r["epochs"].as_array().expect("epochs");
        assert_eq!(epochs.len(), 1, "{id}");
        let cpu = f(&epochs[0], "cpu_seconds");
        assert!(cpu > 0.0 && cpu.is_finite(), "{id}");
        // Every record has its replica figures (those the job reported, if any: the NuPS
        // modes report some), and only entries named replica*.
        let replica = r["replica"].as_object().expect("replica figures");
        assert!(
            replica
                .keys()
                .all(|k| k.to_lowercase().starts_with("replica")),
            "{id}: {replica:?}"
        );
        if r["mode"].as_str().unwrap().starts_with("nups") {
            assert!(!replica.is_empty(), "{id}: no replica figures");
        }
    }
    for mode in ["nups", "nups-replicate-only"] {
        assert_eq!(
            runs.iter()
                .filter(|r| r["mode"] == mode && r["nodes"] == 2)
                .count(),
            3,
            "{mode}: one run per workload"
        );
    }

    let summary = suite.summary();
    // The CPU overhead table has a column for every distributed mode and a figure in every
    // cell (each mode ran, and so did single), one row per workload.
    let overhead = table_after(
        &summary,
        "| workload | profile | workers/node | single CPU s / epoch | nodes | lapse | nups | \
         nups-replicate-only |",
    );
    assert_eq!(overhead.len(), 3, "{summary}");
    for (row, app) in overhead.iter().zip(["mf", "kge", "w2v"]) {
        assert_eq!(
            row[..5],
            [app, "loopback", "1", row[3].as_str(), "2"],
            "{row:?}"
        );
        for cell in &row[3..] {
            let ratio: f64 = cell
                .trim_matches('*')
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap_or_else(|e| panic!("{app}: {cell:?} in {row:?}: {e}"));
            assert!(ratio > 0.0 && ratio.is_finite(), "{app}: {row:?}");
        }
    }
    // nups's speed-ups: over lapse and over its ablation are there; classic did not run.
    let speedups = table_after(
        &summary,
        "| workload | profile | workers/node | nodes | over lapse | over classic | \
         over nups-replicate-only | nups-replicate-only over classic |",
    );
    assert_eq!(speedups.len(), 3, "{summary}");
    for row in &speedups {
        assert!(
            row[4] != "–" && row[5] == "–" && row[6] != "–" && row[7] == "–",
            "{row:?}"
        );
    }
    assert_figures(
        &suite.dir.0,
        &["cpu_overhead.png", "speedup_nups.png", "epoch_time.png"],
    );
}

#[test]
fn tiny_suite_runs_the_adapm_mode_with_its_intents() {
    // Not a default mode: asked for with --modes, next to lapse; --samplings varies nothing
    // for it (it draws naive only) and is not passed to it.
    let suite = Suite::run(
        "roam-suite-adapm-test",
        &[
            "--modes",
            "lapse,adapm",
            "--nodes",
            "2",
            "--samplings",
            "default,preloc",
        ],
    );
    let runs = suite.runs();
    // 3 workloads x 2 modes at 2 nodes (lapse's preloc is its default: one run).
    assert_eq!(runs.len(), 6, "{}", suite.stderr);
    for r in runs.iter().filter(|r| r["mode"] == "adapm") {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["status"], "ok", "{id}: {}", r["error"]);
        assert_eq!(r["nodes"], 2, "{id}");
        let command = r["command"].as_array().unwrap();
        assert!(
            !command.iter().any(|a| a == "--sampling"),
            "{id}: {command:?}"
        );
        if r["app"] != "mf" {
            assert_eq!(r["sampling"], "naive", "{id}");
        }
        let epochs = r["epochs"].as_array().expect("epochs");
        assert_eq!(epochs.len(), 1, "{id}");
        let intents = &epochs[0]["intents"];
        assert!(intents["intents"].as_u64() > Some(0), "{id}: {intents}");
        assert!(
            intents["intent_actions"].as_u64() > Some(0),
            "{id}: {intents}"
        );
        let local = f(&r["counters"], "local_fraction");
        assert!(local > 0.0 && local <= 1.0, "{id}");
    }
    let summary = suite.summary();
    for app in ["mf", "kge", "w2v"] {
        // The table's header line is two lines below its title.
        let header = summary
            .lines()
            .skip_while(|l| *l != format!("#### {app}, loopback, 1 worker(s) per node"))
            .nth(2)
            .unwrap_or_else(|| panic!("no {app} table: {summary}"));
        let table = table_after(&summary, header);
        assert!(
            table.iter().any(|row| row[0] == "adapm" && row[1] == "2"),
            "{app}: no adapm row: {summary}"
        );
    }
}

#[test]
fn tiny_suite_with_two_sampling_schemes_reports_quality_and_efficiency_per_scheme() {
    let suite = Suite::run(
        "roam-suite-sampling-test",
        &[
            "--apps",
            "w2v",
            "--modes",
            "single,lapse",
            "--nodes",
            "2",
            "--samplings",
            "default,local",
            "--profiles",
            "loopback",
        ],
    );
    let runs = suite.runs();
    // single (its default only) + lapse with its default and with local.
    assert_eq!(runs.len(), 3, "{}", suite.stderr);
    let mut lapse_schemes = Vec::new();
    for r in runs {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["status"], "ok", "{id}: {}", r["error"]);
        // The record keeps the scheme the job reported using.
        let scheme = r["sampling"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: no scheme"));
        assert_eq!(r["settings"]["sampling"], scheme, "{id}");
        assert_eq!(r["epochs"][0]["sampling"]["scheme"], scheme, "{id}");
        let command = r["command"].as_array().unwrap();
        let passed = command.iter().position(|a| a == "--sampling");
        match r["sampling_requested"].as_str() {
            None => assert!(passed.is_none(), "{id}: no --sampling for the default"),
            Some(requested) => {
                assert_eq!(requested, scheme, "{id}");
                assert_eq!(command[passed.unwrap() + 1], requested, "{id}");
            }
        }
        if r["mode"] == "lapse" {
            lapse_schemes.push(scheme.to_string());
        } else {
            assert!(r["sampling_requested"].is_null(), "{id}: single runs once");
        }
    }
    lapse_schemes.sort();
    assert_eq!(lapse_schemes.len(), 2, "{lapse_schemes:?}");
    assert!(
        lapse_schemes.contains(&"local".to_string()),
        "{lapse_schemes:?}"
    );
    let default = lapse_schemes
        .iter()
        .find(|s| *s != "local")
        .unwrap()
        .clone();

    let summary = suite.summary();
    // The group table names the lapse configurations by scheme.
    let group = table_after(
        &summary,
        "| mode | nodes | epoch s | CPU s / epoch | CPU × single | local fraction | \
         bytes / word | lapse speed-up over it | runs |",
    );
    let modes: Vec<&str> = group.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        modes,
        ["single", &format!("lapse[{default}]"), "lapse[local]"],
        "{summary}"
    );
    // The quality–efficiency table: a row per scheme, every figure present.
    let quality = table_after(
        &summary,
        "| profile | workers/node | nodes | mode | sampling | epoch s | CPU × single | \
         bytes / word | local fraction | fallback fraction | topic_auc | runs |",
    );
    assert_eq!(quality.len(), 3, "{summary}");
    let mut seen = Vec::new();
    for row in &quality {
        assert_eq!(row[..2], ["loopback", "1"], "{row:?}");
        seen.push((row[2].clone(), row[3].clone(), row[4].clone()));
        for cell in &row[5..11] {
            let x: f64 = cell
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap_or_else(|e| panic!("{cell:?} in {row:?}: {e}"));
            assert!(x.is_finite() && x >= 0.0, "{row:?}");
        }
        assert_eq!(row[11], "1", "{row:?}");
    }
    let strings = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        seen,
        [
            strings("1", "single", "naive"),
            strings("2", "lapse", &default),
            strings("2", "lapse", "local"),
        ]
    );
    assert_figures(
        &suite.dir.0,
        &[
            "quality_cpu.png",
            "quality_epoch_time.png",
            "epoch_time.png",
        ],
    );
}

#[test]
fn suite_from_a_missing_results_file_names_it() {
    let out = Command::new(common::roam())
        .args(["bench", "suite", "--from", "/nonexistent/results.json"])
        .output()
        .expect("running roam bench suite");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/results.json"),
        "the error names the file: {stderr}"
    );
}

#[test]
fn tiny_suite_runs_ctr_scored_by_its_test_auc_in_every_mode() {
    // The embedded synthetic set (the quick and tiny presets'), one epoch: about a second
    // per run.
    let suite = Suite::run(
        "roam-suite-ctr-test",
        &[
            "--apps",
            "ctr",
            "--modes",
            "single,classic,lapse,nups",
            "--nodes",
            "2",
        ],
    );
    let runs = suite.runs();
    // single at 1 node, classic, lapse and nups at 2.
    assert_eq!(runs.len(), 4, "{}", suite.stderr);
    for r in runs {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["status"], "ok", "{id}: {}", r["error"]);
        assert_eq!(r["app"], "ctr", "{id}");
        let epochs = r["epochs"].as_array().expect("epochs");
        assert_eq!(epochs.len(), 1, "{id}");
        let auc = f(&epochs[0], "test_auc");
        assert!(auc > 0.55 && auc <= 1.0, "{id}: test AUC {auc}");
        assert!(f(&epochs[0], "cpu_seconds") > 0.0, "{id}");
    }
    let summary = suite.summary();
    let header = summary
        .lines()
        .skip_while(|l| !l.starts_with("#### Quality and efficiency of ctr (quality: test AUC"))
        .nth(2)
        .unwrap_or_else(|| panic!("no ctr quality table: {summary}"));
    let table = table_after(&summary, header);
    assert_eq!(table.len(), 4, "{summary}");
    for row in &table {
        let auc: f64 = row[10].parse().unwrap_or_else(|_| panic!("{row:?}"));
        assert!(auc > 0.55, "{row:?}");
    }
    assert_figures(&suite.dir.0, &["quality_cpu.png", "quality_epoch_time.png"]);
}
