//! A resume from a checkpoint that already covers every epoch (taken after the last one) has
//! nothing left to train: it must succeed, say so, and report the last epoch's figures as the
//! checkpoint recorded them — for every app, run directly and under `roam launch
//! --max-restarts`, where a node that dies after writing the final checkpoint (while the job
//! shuts down) makes the launcher restart the job with `--resume`.
//!
//! Deterministic: the "death" is a wrapper script that exits 1 on rank 1 after the node's
//! successful run, once (a marker file), so the launcher restarts exactly once, from the final
//! checkpoint.

mod common;

use std::process::{Command, Output};

use common::{epochs, json_with, roam, run, scratch};
use serde_json::Value;

const MESSAGE: &str = "the checkpoint covers all 2 epochs; nothing left to train";

/// Each app's small training command (2 epochs), without output or checkpoint flags.
fn app(name: &str) -> Vec<&'static str> {
    let data: &[&str] = match name {
        "mf" => &[
            "--synthetic",
            "rows=200,cols=150,rank=4,nnz=6000,zipf=0.8,noise=0.1,test=0.1,seed=5",
        ],
        "kge" => &[
            "--synthetic",
            "entities=200,relations=8,triples=2000,clusters=10,seed=3",
            "--dim",
            "8",
        ],
        "w2v" => &[
            "--synthetic",
            "words=8000,vocab=300,topics=4,seed=2",
            "--dim",
            "16",
        ],
        "ctr" => &[
            "--synthetic",
            "fields=4,ids=1e6,zipf=1.1,rows=4000,test=0.2,signal=2,seed=3",
        ],
        _ => unreachable!(),
    };
    let name: &'static str = match name {
        "mf" => "mf",
        "kge" => "kge",
        "ctr" => "ctr",
        _ => "w2v",
    };
    let mut args = vec!["train", name, "--epochs", "2"];
    args.extend_from_slice(data);
    args
}

fn report(stdout: &str, app: &str) -> Value {
    json_with(stdout, "app", app)
}

/// The last epoch's row without what differs between its recording and its report.
fn figures(row: &Value) -> Value {
    let mut row = row.clone();
    if let Value::Object(m) = &mut row {
        m.remove("from_checkpoint");
    }
    row
}

fn output(cmd: &mut Command) -> (Output, String, String) {
    let out = cmd.output().expect("running roam");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// Train to the end with a checkpoint every epoch, then the same command with `--resume`: it
/// exits 0, says that nothing is left, trains no epoch and reports the recorded last epoch.
#[test]
fn a_resume_after_the_final_checkpoint_succeeds_for_every_app() {
    for name in ["mf", "kge", "w2v", "ctr"] {
        let dir = scratch("resume-complete", name);
        let d = dir.to_str().unwrap();
        let mut args = app(name);
        args.extend(["--mode", "single", "--checkpoint-dir", d]);
        let full = report(&run(&args), name);
        let last = epochs(&full).last().expect("epochs").clone();
        args.extend(["--resume", d]);
        let (out, stdout, stderr) = output(Command::new(roam()).args(&args).arg("--json"));
        assert!(
            out.status.success() && stderr.contains(MESSAGE),
            "{name}: {}\n{stdout}\n{stderr}",
            out.status
        );
        let resumed = report(&stdout, name);
        let rows = epochs(&resumed);
        assert_eq!(rows.len(), 1, "{name}: {resumed}");
        assert_eq!(rows[0]["from_checkpoint"], Value::Bool(true), "{name}");
        assert_eq!(
            figures(&rows[0]),
            figures(&last),
            "{name}: the recorded figures"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Under `roam launch --max-restarts 1` on 2 nodes: rank 1 "dies" (exit 1) after the job
/// finished and wrote its final checkpoint; the launcher restarts the job with `--resume`,
/// which finds nothing left to train and succeeds: the job exits 0 after one restart.
#[test]
fn a_job_whose_node_dies_after_the_final_checkpoint_is_restarted_and_succeeds() {
    for name in ["mf", "kge", "w2v"] {
        let dir = scratch("resume-complete-launch", name);
        let ckpt = dir.join("ckpt");
        let marker = dir.join("died");
        let wrapper = dir.join("node.sh");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n\"$@\" || exit $?\n\
                 if [ \"$ROAM_RANK\" = 1 ] && [ ! -e '{m}' ]; then touch '{m}'; exit 1; fi\n",
                m = marker.display()
            ),
        )
        .unwrap();
        let mode = if name == "w2v" { "classic" } else { "lapse" };
        let mut args = app(name);
        args.extend(["--mode", mode, "--checkpoint-dir", ckpt.to_str().unwrap()]);
        let (out, stdout, stderr) = output(
            Command::new(roam())
                .args(["launch", "--nodes", "2", "--max-restarts", "1", "--", "sh"])
                .arg(&wrapper)
                .arg(roam())
                .args(&args),
        );
        assert!(
            out.status.success(),
            "{name}: {}\n{stdout}\n{stderr}",
            out.status
        );
        assert!(marker.exists(), "{name}: rank 1 never died:\n{stderr}");
        let all = format!("{stdout}{stderr}");
        assert!(
            all.contains("[launch] restarts: 1") && all.contains(MESSAGE),
            "{name}: one restart, which had nothing left to train:\n{all}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
