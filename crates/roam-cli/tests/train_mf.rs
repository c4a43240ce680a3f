//! End-to-end runs of `roam train mf` in every mode: on the Lapse toy matrix (6×4, at most
//! two workers in total) and on a tiny synthetic matrix with 2 nodes. They check that the loss
//! falls, that the test RMSE beats predicting the global mean, that lapse serves more accesses
//! locally than classic, that every mode computes the same model for the same number of
//! workers (the NuPS modes up to the order in which replicated columns' updates are summed),
//! that the NuPS modes replicate hot columns and synchronise them, that the `adapm` mode computes
//! the same model by intents alone, and that malformed input fails with a message naming the
//! file and line.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{epochs, json_with, last_epoch, launch, losses, node_stats, run, sum};
use serde_json::Value;

const MODES: [&str; 3] = ["classic", "classic-nolocal", "lapse"];
/// Tiny planted matrix; the seed is fixed (and printed with every run's arguments on failure).
const SYNTHETIC: &str = "rows=400,cols=300,rank=4,nnz=30000,zipf=0.8,noise=0.1,test=0.1,seed=5";
/// `roam train mf` on [`SYNTHETIC`] for 6 epochs of a small model (the mode and the rest follow).
const ON_SYNTHETIC: [&str; 12] = [
    "train",
    "mf",
    "--synthetic",
    SYNTHETIC,
    "--epochs",
    "6",
    "--dim",
    "8",
    "--lr",
    "0.02",
    "--lambda",
    "0.02",
];

fn toy_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/lapse-toy/mf");
    dir.is_dir().then_some(dir)
}

fn report(stdout: &str) -> Value {
    json_with(stdout, "app", "mf")
}

fn assert_trains(report: &Value, what: &str) {
    let l = losses(report);
    assert!(l.iter().all(|x| x.is_finite()), "{what}: {l:?}");
    assert!(l.last() < l.first(), "{what}: loss did not fall: {l:?}");
    let baseline = report["settings"]["baseline_test_rmse"].as_f64().unwrap();
    let rmse = last_epoch(report, "test_rmse");
    assert!(
        rmse < baseline,
        "{what}: test RMSE {rmse} does not beat the global mean's {baseline}"
    );
}

/// Same number of workers, same seed: the arithmetic is the same in every mode.
fn assert_same_model(a: &Value, b: &Value, what: &str) {
    assert_close_model(a, b, 1e-6, what);
}

/// Losses and test RMSE agree to the relative tolerance `tol`.
fn assert_close_model(a: &Value, b: &Value, tol: f64, what: &str) {
    let (la, lb) = (losses(a), losses(b));
    for (x, y) in la.iter().zip(&lb) {
        assert!(
            (x - y).abs() <= tol * x.abs().max(1.0),
            "{what}: losses differ: {la:?} vs {lb:?}"
        );
    }
    let (ra, rb) = (last_epoch(a, "test_rmse"), last_epoch(b, "test_rmse"));
    assert!(
        (ra - rb).abs() <= tol * ra,
        "{what}: test RMSE {ra} vs {rb}"
    );
}

/// The NuPS modes replicate some columns (`expected` of them, if given) and synchronised them.
fn assert_replicated(report: &Value, expected: Option<u64>, what: &str) {
    let r = &report["settings"]["replication"];
    let keys = r["replicated_keys"].as_u64().expect("replicated_keys");
    assert!(keys > 0, "{what}: nothing replicated: {report}");
    if let Some(n) = expected {
        assert_eq!(keys, n, "{what}: {report}");
    }
    assert!(
        r["rounds_per_node"].as_f64() > Some(0.0) && r["bytes_sent"].as_u64() > Some(0),
        "{what}: replicas were not synchronised: {report}"
    );
    let fraction = r["access_fraction"].as_f64().expect("access_fraction");
    assert!(fraction > 0.0 && fraction < 0.5, "{what}: {report}");
}

#[test]
fn toy_matrix_trains_in_every_mode_with_identical_results() {
    let Some(dir) = toy_dir() else {
        eprintln!("skipping: lapse-toy data not found");
        return;
    };
    let dir = dir.to_str().unwrap();
    let args = |mode: &'static str| -> Vec<&str> {
        vec![
            "train", "mf", "--mode", mode, "--data", dir, "--epochs", "15", "--dim", "2", "--lr",
            "0.02", "--lambda", "0.01", "--seed", "3",
        ]
    };
    let one = report(&run(&args("single")));
    assert_eq!(one["nodes"], 1);
    let l = losses(&one);
    assert!(l.last() < l.first(), "single, 1 worker: {l:?}");
    assert_eq!(one["settings"]["train_points"], 10);
    assert_eq!(one["settings"]["test_points"], 8);
    let mut two_threads = args("single");
    two_threads.extend(["--workers", "2"]);
    let single = report(&run(&two_threads));
    assert_eq!(single["workers_per_node"], 2);
    for mode in MODES {
        let dist = report(&launch(2, 1, &args(mode)));
        assert_eq!(
            (dist["nodes"].as_u64(), dist["mode"].as_str()),
            (Some(2), Some(mode))
        );
        assert_same_model(
            &single,
            &dist,
            &format!("{mode} 2x1 vs single 1x2 on the toy matrix"),
        );
    }
}

#[test]
fn synthetic_matrix_trains_in_every_mode_and_lapse_stays_local() {
    let with = |mode: &'static str| -> Vec<&str> {
        let mut a = ON_SYNTHETIC.to_vec();
        a.extend(["--mode", mode]);
        a
    };
    eprintln!("synthetic spec (seeded): {SYNTHETIC}");
    let mut single_args = with("single");
    single_args.extend(["--workers", "4"]);
    let single = report(&run(&single_args));
    assert_trains(&single, "single");
    let mut local_fraction = std::collections::HashMap::new();
    for workers in [1, 2] {
        for mode in MODES {
            let mut args = with(mode);
            if mode == "lapse" && workers == 2 {
                args.extend(["--prefetch-at", "0.9"]);
            }
            let dist = report(&launch(2, workers, &args));
            let what = format!("{mode} 2x{workers}");
            assert_trains(&dist, &what);
            assert_eq!(dist["workers_per_node"], workers);
            if workers == 2 {
                assert_same_model(&single, &dist, &format!("{what} vs single 1x4"));
            }
            local_fraction.insert((mode, workers), dist["local_fraction"].as_f64().unwrap());
        }
        // The NuPS modes: hot columns replicated (by the threshold chooser, low enough for
        // this small matrix, and by top-N), the rest relocated as in lapse or static as in
        // classic. A sub-epoch ends with sync_replicas, so the model is the same up to the
        // order in which replicated columns' deltas are summed.
        for (mode, choose, expected) in [
            ("nups", ["--replicate-alpha", "3"], None),
            ("nups-replicate-only", ["--replicate-top", "20"], Some(20)),
        ] {
            let mut args = with(mode);
            args.extend(choose);
            let dist = report(&launch(2, workers, &args));
            let what = format!("{mode} 2x{workers}");
            assert_trains(&dist, &what);
            assert_replicated(&dist, expected, &what);
            if workers == 2 {
                assert_close_model(&single, &dist, 1e-4, &format!("{what} vs single 1x4"));
            }
            local_fraction.insert((mode, workers), dist["local_fraction"].as_f64().unwrap());
        }
    }
    for workers in [1, 2] {
        let (lapse, classic) = (
            local_fraction[&("lapse", workers)],
            local_fraction[&("classic", workers)],
        );
        assert!(
            lapse > classic,
            "2x{workers}: lapse local fraction {lapse} <= classic {classic}"
        );
        assert_eq!(
            local_fraction[&("classic-nolocal", workers)],
            0.0,
            "nolocal serves nothing locally"
        );
        let (nups, replicate_only) = (
            local_fraction[&("nups", workers)],
            local_fraction[&("nups-replicate-only", workers)],
        );
        assert!(
            nups > classic && replicate_only > classic,
            "2x{workers}: nups {nups}, nups-replicate-only {replicate_only} vs classic {classic}"
        );
    }
}

/// adapm: the row block is signalled once and each column block when its sub-epoch starts, and
/// roam moves them here. A block's users never overlap (the previous one's intent ended before
/// the barrier), so under `adapm` no key is shared, as under `adapm-relocate-only`, and the
/// model is exactly single's (the chunk pipeline is exact wherever keys live; a replica's
/// first reads could miss its previous user's last pushes for a sync round). More accesses are
/// local than in classic, and every key the nodes localized was an intent's action (the app
/// never localizes). Before 2026-11-29 the next block was signalled a sub-epoch ahead and
/// owners shared blocks still in use, and kept sharing them while their interest lingered.
#[test]
fn adapm_computes_the_same_model_by_intents_alone() {
    let with = |mode: &'static str, workers: &'static str| -> Vec<&'static str> {
        let mut a = ON_SYNTHETIC.to_vec();
        a.extend(["--mode", mode, "--workers", workers]);
        a
    };
    eprintln!("synthetic spec (seeded): {SYNTHETIC}");
    let single = report(&run(&with("single", "4")));
    let classic = report(&launch(2, 2, &with("classic", "2")));
    for (mode, workers) in [("adapm", 1), ("adapm", 2), ("adapm-relocate-only", 2)] {
        let out = launch(
            2,
            workers,
            &with(mode, if workers == 1 { "1" } else { "2" }),
        );
        let dist = report(&out);
        let what = format!("{mode} 2x{workers}");
        assert_eq!(dist["mode"], mode, "{dist}");
        assert_trains(&dist, &what);
        if workers == 2 {
            let vs = format!("{what} vs single 1x4");
            assert_same_model(&single, &dist, &vs);
            let (adapm, classic) = (
                dist["local_fraction"].as_f64().unwrap(),
                classic["local_fraction"].as_f64().unwrap(),
            );
            assert!(
                adapm > classic,
                "{what}: local fraction {adapm} <= classic {classic}"
            );
        }
        let intents = &dist["intents"];
        let n = |field: &str| {
            intents[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{what}: no intents.{field}: {dist}"))
        };
        // Per worker: the row block, then a column block at every sub-epoch (P an epoch, P = 2 ×
        // workers, 6 epochs).
        let parts = u64::from(2 * workers);
        assert_eq!(n("intents"), parts * (1 + 6 * parts), "{what}: {dist}");
        assert!(
            n("intent_actions") > 0,
            "{what}: no intent moved a key: {dist}"
        );
        assert!(n("late_intents") <= n("intents"), "{what}: {dist}");
        let per_epoch: u64 = epochs(&dist)
            .iter()
            .map(|e| e["intents"]["intents"].as_u64().expect("epoch intents"))
            .sum();
        assert_eq!(per_epoch, n("intents"), "{what}: {dist}");
        let stats = node_stats(&out);
        assert_eq!(stats.len(), 2, "{out}");
        assert_eq!(
            sum(&stats, "localize_keys"),
            n("intent_actions"),
            "{what}: keys localized other than by intent: {out}"
        );
        assert_eq!(
            sum(&stats, "share_grants"),
            0,
            "{what}: blocks shared instead of moved: {out}"
        );
    }
}

#[test]
fn malformed_input_fails_with_file_and_line() {
    let dir = std::env::temp_dir().join(format!("roam-train-mf-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("train.mmc"),
        "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 4.0\n1 x 2.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("test.mmc"),
        "%%MatrixMarket matrix coordinate real general\n3 3 0\n",
    )
    .unwrap();
    let out = Command::new(common::roam())
        .args([
            "train",
            "mf",
            "--mode",
            "single",
            "--data",
            dir.to_str().unwrap(),
            "--epochs",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "malformed data was accepted");
    assert!(
        stderr.contains("train.mmc:4") && stderr.contains("column \"x\""),
        "unclear error: {stderr}"
    );
    let out = Command::new(common::roam())
        .args([
            "train",
            "mf",
            "--mode",
            "single",
            "--synthetic",
            "rows=10,colz=3",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("unknown key \"colz\""),
        "unclear error: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run resumed from a checkpoint continues at the next epoch with the same learning rate
/// and point order: with one worker (no asynchrony) its epochs are the uninterrupted run's,
/// bit for bit; and a 2-node lapse checkpoint resumes on 3 nodes and keeps training.
#[test]
fn a_resumed_run_continues_where_the_checkpoint_was_taken() {
    let dir = std::env::temp_dir().join(format!("roam-mf-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let base = [
        "train",
        "mf",
        "--mode",
        "single",
        "--workers",
        "1",
        "--synthetic",
        SYNTHETIC,
    ];
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let full = report(&run(&args(&with(&["--epochs", "4"]))));
    let first = with(&[
        "--epochs",
        "2",
        "--checkpoint-dir",
        d,
        "--checkpoint-every",
        "2",
    ]);
    run(&args(&first));
    let resumed = report(&run(&args(&with(&["--epochs", "4", "--resume", d]))));
    let numbers = |r: &Value| -> Vec<(u64, f64, f64)> {
        epochs(r)
            .iter()
            .map(|e| {
                let f = |k: &str| e[k].as_f64().unwrap();
                (e["epoch"].as_u64().unwrap(), f("loss"), f("lr"))
            })
            .collect()
    };
    assert_eq!(numbers(&resumed), numbers(&full)[2..], "epochs 3 and 4");
    // A checkpoint after epoch 2 leaves nothing for --epochs 2: nothing trained, the recorded
    // last epoch reported (tests/resume_complete.rs covers every app and the launcher).
    let done = report(&run(&args(&with(&["--epochs", "2", "--resume", d]))));
    assert_eq!(epochs(&done).len(), 1, "{done}");
    assert_eq!(epochs(&done)[0]["from_checkpoint"], Value::Bool(true));
    assert_eq!(epochs(&done)[0]["epoch"].as_u64(), Some(2));
    // Into another node count: 2 lapse nodes checkpoint, 3 resume.
    let lapse = |extra: &[&str]| -> Vec<String> {
        ["train", "mf", "--mode", "lapse", "--synthetic", SYNTHETIC]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    launch(
        2,
        1,
        &args(&lapse(&["--epochs", "2", "--checkpoint-dir", d])),
    );
    let more = report(&launch(
        3,
        1,
        &args(&lapse(&["--epochs", "4", "--resume", d])),
    ));
    let l = losses(&more);
    assert_eq!(epochs(&more)[0]["epoch"].as_u64(), Some(3), "{more}");
    assert!(l.len() == 2 && l[1] < l[0], "training goes on: {l:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
