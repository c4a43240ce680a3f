//! What `roam train` prints and writes, run as the real binary: off a terminal the per-epoch
//! lines only (no JSON), `--json` the report and every node's counters on stdout as before,
//! `--report FILE` the same lines in a file; `roam plot` draws reports into a PNG and names
//! the file it cannot use; `--trace-allocation FILE` records where keys went, which `roam plot
//! --trace` draws.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Output};

use serde_json::Value;

/// A small, quick MF job.
const MF: [&str; 8] = [
    "train",
    "mf",
    "--synthetic",
    "rows=400,cols=300,rank=4,nnz=20000,noise=0.1,test=0.1,seed=1",
    "--epochs",
    "3",
    "--dim",
    "8",
];

/// Runs `roam ARGS` (under `roam launch --nodes N` if `nodes` > 1) without `--json` being
/// added; asserts success.
fn roam(nodes: u32, args: &[&str]) -> Output {
    let mut cmd = Command::new(common::roam());
    if nodes > 1 {
        cmd.args(["launch", "--nodes", &nodes.to_string(), "--"])
            .arg(common::roam());
    }
    let out = cmd.args(args).output().expect("running roam");
    assert!(
        out.status.success(),
        "roam {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The top-level field names of a JSON object and of its first epoch.
fn shape(report: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect();
    (keys(report), keys(&report["epochs"][0]))
}

#[test]
fn off_a_terminal_training_prints_one_line_per_epoch_and_no_json() {
    for (app, extra, quality) in [
        ("mf", &MF[2..], "test_rmse"),
        ("kge", &["--epochs", "2", "--eval-every", "1"][..], "mrr"),
        ("w2v", &["--epochs", "2"][..], "topic_auc"),
    ] {
        let mut args = vec!["train", app, "--mode", "single"];
        args.extend_from_slice(extra);
        let out = roam(1, &args);
        let stdout = text(&out.stdout);
        assert!(common::json_lines(&stdout).is_empty(), "{app}: {stdout}");
        let lines: Vec<&str> = stdout.lines().collect();
        let epochs = if app == "mf" { 3 } else { 2 };
        assert_eq!(lines.len(), epochs, "{app}: {stdout}");
        for (i, line) in lines.iter().enumerate() {
            assert!(
                line.starts_with(&format!("epoch {}/{epochs} ", i + 1))
                    && line.contains(" s  loss ")
                    && line.contains(&format!("  {quality} "))
                    && line.ends_with("local 100.0%"),
                "{app}: {line}"
            );
        }
    }
}

#[test]
fn json_prints_the_report_and_node_counters_and_report_files_hold_the_same() {
    let dir = common::scratch("output", "json");
    let file = dir.join("report.json");
    let file_arg = file.to_str().unwrap();
    let mut args = MF.to_vec();
    args.extend(["--mode", "lapse", "--json", "--report", file_arg]);
    let out = roam(2, &args);
    let stdout = text(&out.stdout);
    let report = common::json_with(&stdout, "app", "mf");
    assert_eq!(common::node_stats(&stdout).len(), 2, "{stdout}");
    // With --json the per-epoch lines go to stderr: stdout is JSON only.
    assert!(
        stdout
            .lines()
            .all(|l| l.split_once("] ").is_some_and(|(_, b)| b.starts_with('{'))),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("[node 0] epoch 3/3 "),
        "{}",
        text(&out.stderr)
    );
    // The file: rank 0's report line, then one counters line per node.
    let written = std::fs::read_to_string(&file).unwrap();
    let lines = common::json_lines(&written);
    assert_eq!(lines.len(), 3, "{written}");
    assert_eq!(lines[0]["app"], "mf");
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.get("roam_node_stats").is_some())
    );
    let mut ranks: Vec<u64> = lines[1..]
        .iter()
        .map(|l| l["roam_node_stats"]["rank"].as_u64().unwrap())
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1]);
    assert_eq!(shape(&lines[0]), shape(&report));
    assert_eq!(lines[0]["epochs"].as_array().unwrap().len(), 3);
    assert!(
        report["epochs"][2]["local_fraction"]
            .as_f64()
            .is_some_and(|f| f > 0.5),
        "lapse localizes: {report}"
    );

    // Without --json a report file is written all the same, and stdout has no JSON.
    let quiet = dir.join("quiet.json");
    let mut args = MF.to_vec();
    args.extend(["--mode", "classic", "--report", quiet.to_str().unwrap()]);
    let out = roam(2, &args);
    let stdout = text(&out.stdout);
    assert!(common::json_lines(&stdout).is_empty(), "{stdout}");
    assert_eq!(stdout.matches("[node 0] epoch ").count(), 3, "{stdout}");
    assert!(!stdout.contains("[node 1] epoch"), "{stdout}");
    let lines = common::json_lines(&std::fs::read_to_string(&quiet).unwrap());
    assert_eq!(lines.len(), 3);
    assert_eq!(shape(&lines[0]), shape(&report));
    assert_eq!(lines[0]["mode"], "classic");

    // Two reports overlaid in one PNG; --plot draws one run.
    let png = dir.join("modes.png");
    let out = roam(
        1,
        &[
            "plot",
            file_arg,
            quiet.to_str().unwrap(),
            "-o",
            png.to_str().unwrap(),
        ],
    );
    assert!(text(&out.stdout).contains("modes.png"));
    assert_png(&std::fs::read(&png).unwrap());
    let single = dir.join("single.png");
    let mut args = MF.to_vec();
    args.extend(["--mode", "single", "--plot", single.to_str().unwrap()]);
    roam(1, &args);
    assert_png(&std::fs::read(&single).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A PNG of the figure's size: the signature, then the IHDR chunk with 1500 × 480.
fn assert_png(bytes: &[u8]) {
    assert_png_of(bytes, (1500, 480));
}

/// A PNG of `size`: the signature, then the IHDR chunk with its width and height.
fn assert_png_of(bytes: &[u8], size: (u32, u32)) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), size);
    assert!(
        bytes.len() > 10_000,
        "an empty figure: {} bytes",
        bytes.len()
    );
}

#[test]
fn plot_names_the_file_it_cannot_read_or_that_is_not_a_report() {
    let dir = common::scratch("output", "bad");
    let foreign = dir.join("foreign.json");
    std::fs::write(&foreign, "{\"hello\": 1}\n").unwrap();
    let missing = dir.join("missing.json");
    for (input, words) in [
        (&foreign, "not a roam training report"),
        (&missing, "No such file"),
    ] {
        let out = Command::new(common::roam())
            .args(["plot", input.to_str().unwrap(), "-o"])
            .arg(dir.join("x.png"))
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{input:?} accepted");
        assert!(
            stderr.contains(input.to_str().unwrap()) && stderr.contains(words),
            "{stderr}"
        );
        assert!(!dir.join("x.png").exists());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_allocation_trace_records_every_arrival_and_draws() {
    let dir = common::scratch("output", "trace");
    let trace = dir.join("trace.json");
    let mut args = MF.to_vec();
    args.extend(["--mode", "lapse", "--json", "--trace-allocation"]);
    args.push(trace.to_str().unwrap());
    let stdout = text(&roam(2, &args).stdout);
    let stats = common::node_stats(&stdout);
    let lines = common::json_lines(&std::fs::read_to_string(&trace).unwrap());
    assert_eq!(lines.len(), 2);
    for line in &lines {
        let t = &line["roam_allocation_trace"];
        let node = t["node"].as_u64().unwrap();
        let changes = t["changes"].as_array().unwrap();
        // Every key that moved in is recorded once, by its receiver, from another node.
        let relocations_in = stats
            .iter()
            .find(|s| s["rank"].as_u64() == Some(node))
            .map(|s| s["relocations_in"].as_u64().unwrap())
            .unwrap();
        assert!(relocations_in > 0, "lapse relocates");
        assert_eq!(changes.len() as u64, relocations_in, "node {node}");
        assert!(changes.iter().all(|c| c["to"].as_u64() == Some(node)
            && c["from"].as_u64() != Some(node)
            && c["change"] == "move"));
        let times: Vec<f64> = changes
            .iter()
            .map(|c| c["time"].as_f64().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "in arrival order");
        // The access counters are sampled, and the last sample is the node's final count.
        let samples = t["samples"].as_array().unwrap();
        assert!(samples.len() >= 2);
        assert!(
            samples
                .windows(2)
                .all(|w| w[0]["all_keys"].as_u64() <= w[1]["all_keys"].as_u64())
        );
    }
    let png = dir.join("trace.png");
    roam(
        1,
        &[
            "plot",
            "--trace",
            trace.to_str().unwrap(),
            "-o",
            png.to_str().unwrap(),
        ],
    );
    assert_png_of(&std::fs::read(&png).unwrap(), (1500, 820));

    // A report is no trace: the error names the file.
    let report = dir.join("report.json");
    std::fs::write(&report, "{\"app\": \"mf\", \"epochs\": []}\n").unwrap();
    let out = Command::new(common::roam())
        .args(["plot", "--trace", report.to_str().unwrap(), "-o"])
        .arg(dir.join("x.png"))
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains(report.to_str().unwrap())
            && stderr.contains("not a roam allocation trace"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
